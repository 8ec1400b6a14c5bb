//! AFL entry point of the `plan_json` target (see `hetsched_fuzz::targets::plan_json`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::plan_json(data));
}
