//! AFL entry point of the `jobspec_json` target (see `hetsched_fuzz::targets::jobspec_json`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::jobspec_json(data));
}
