//! AFL entry point of the `raft_entry` target (see `hetsched_fuzz::targets::raft_entry`).
fn main() {
    afl::fuzz!(|data: &[u8]| hetsched_fuzz::targets::raft_entry(data));
}
