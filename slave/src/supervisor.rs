//! The entry point of `hetsched supervise` (and the `hetsched-supervise` helper binary): the
//! slave's long-lived supervisor pool, [`crate::attempt::pool::server`], started by the agent
//! as `supervise --pool DIR`. The per-attempt supervisor that `supervise ATTEMPT_DIR` once
//! started is gone (issue 49): the pool is the one way command tasks start. Attempts such a
//! supervisor started on an older slave read the same ([`crate::attempt::files`]).

use std::ffi::OsString;
use std::path::Path;

/// Runs the pool for `args` = `--pool DIR` (what follows `supervise` on the command line);
/// returns the process exit status (2 on a usage error).
pub fn main(args: &[OsString]) -> i32 {
    match args {
        [flag, dir] if flag == "--pool" => crate::attempt::pool::server::main(Path::new(dir)),
        _ => {
            eprintln!("usage: hetsched supervise --pool DIR (started by the slave, not by hand)");
            2
        }
    }
}
