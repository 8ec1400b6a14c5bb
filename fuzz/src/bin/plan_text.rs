//! AFL entry point of the `plan_text` target (see `hetsched_fuzz::targets::plan_text`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::plan_text(data));
}
