//! AFL entry point of the `engines` target (see `hetsched_fuzz::targets::engines`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::engines(data));
}
