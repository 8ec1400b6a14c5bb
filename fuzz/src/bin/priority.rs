//! AFL entry point of the `priority` target (see `hetsched_fuzz::targets::priority`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::priority(data));
}
