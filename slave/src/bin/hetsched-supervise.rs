//! `hetsched-supervise --pool DIR`: the slave's supervisor pool as a helper binary of its own
//! (the same code as the hidden `hetsched supervise`; see `hetsched_slave::supervisor`).

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hetsched_slave::supervisor::main(&args));
}
