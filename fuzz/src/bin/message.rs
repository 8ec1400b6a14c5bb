//! AFL entry point of the `message` target (see `hetsched_fuzz::targets::message`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::message(data));
}
