//! AFL entry point of the `frame` target (see `hetsched_fuzz::targets::frame`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::frame(data));
}
