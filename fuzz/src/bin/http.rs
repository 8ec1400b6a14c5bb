//! AFL entry point of the `http` target (see `hetsched_fuzz::targets::http`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::http(data));
}
