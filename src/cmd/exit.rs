//! Exit codes of every command (docs/CONTRACT.md, "Exit codes"): an error that carries its code,
//! and the table shown in `--help` and README.

use std::fmt;

/// The exit-code table as `--help` shows it.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success (watch: every task succeeded)
  1  the operation ran and the answer is no (watch: a task failed)
  2  bad input: usage errors, invalid files (the message names file, line, column, field)
  3  permission denied
  4  not found (no such job, task, node)
  5  unavailable: no leader within the client timeout (HETSCHED_CLIENT_TIMEOUT_MS), masters unreachable";

/// The operation ran and the answer is "no".
pub const NO: u8 = 1;
/// Bad input.
pub const BAD_INPUT: u8 = 2;
/// Permission denied.
pub const FORBIDDEN: u8 = 3;
/// Not found.
pub const NOT_FOUND: u8 = 4;
/// Unavailable.
pub const UNAVAILABLE: u8 = 5;

/// An error with the process exit code it maps to.
#[derive(Debug)]
pub struct Exit {
    /// Exit code.
    pub code: u8,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

fn exit(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Exit {
        code,
        message: message.into(),
    })
}

/// Exit 1: the operation ran and the answer is "no".
pub fn no(message: impl Into<String>) -> anyhow::Error {
    exit(NO, message)
}

/// Exit 2: bad input.
pub fn bad_input(message: impl Into<String>) -> anyhow::Error {
    exit(BAD_INPUT, message)
}

/// Exit 3: permission denied.
pub fn forbidden(message: impl Into<String>) -> anyhow::Error {
    exit(FORBIDDEN, message)
}

/// Exit 4: not found.
pub fn not_found(message: impl Into<String>) -> anyhow::Error {
    exit(NOT_FOUND, message)
}

/// Exit 5: unavailable.
pub fn unavailable(message: impl Into<String>) -> anyhow::Error {
    exit(UNAVAILABLE, message)
}

/// The exit code of an error: the first [`Exit`] in its chain, else 1.
pub fn code_of(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<Exit>())
        .map_or(NO, |x| x.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_code_survives_added_context() {
        let e = Err::<(), _>(not_found("no such job: job-9"))
            .context("cannot list jobs")
            .expect_err("err");
        assert_eq!(code_of(&e), NOT_FOUND);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), NO);
    }
}
