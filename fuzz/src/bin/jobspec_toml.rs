//! AFL entry point of the `jobspec_toml` target (see `hetsched_fuzz::targets::jobspec_toml`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::jobspec_toml(data));
}
