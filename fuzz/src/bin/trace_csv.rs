//! AFL entry point of the `trace_csv` target (see `hetsched_fuzz::targets::trace_csv`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::trace_csv(data));
}
