//! AFL entry point of the `program` target (see `hetsched_fuzz::targets::program`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::program(data));
}
