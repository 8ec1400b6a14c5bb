//! Starting a task without copying the pool's address space: `clone(CLONE_VM | CLONE_VFORK)`.
//!
//! The pool is multi-threaded (its starting threads, the reaper, the journal). `fork` copies
//! its page tables, and every write after it faults a page in the parent or the child, with
//! TLB shootdowns across its threads: the largest part of the pool's CPU per task in a
//! profile (docs/perf-log/2026-11-25.md, "Per-task CPU of the masters and the slave"). `posix_spawn`
//! avoids that copy, but cannot join the task's cgroups before it executes on cgroup v1
//! (no `CLONE_INTO_CGROUP`), and joining after the exec would let the task run outside
//! them. Here the child shares the parent's memory and runs on a stack of its own until
//! `execve`, while the calling thread waits (what glibc's `posix_spawn` does inside): it
//! resets its signals, joins the cgroups (writing `0` to each `cgroup.procs` moves the
//! writer), makes its own process group, sets its standard streams and executes.
//! Everything it touches is prepared before the clone; it allocates nothing and takes no
//! lock (the binary is linked with immediate binding: no lazy symbol resolution either).

use nix::libc::{self, c_char, c_int, c_void};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The child's stack: what `execve`'s wrapper and a few system calls need.
const STACK_BYTES: usize = 64 * 1024;

/// What the child needs, prepared by the parent.
struct Child {
    path: CString,
    argv: Vec<*const c_char>,
    /// `/bin/sh PATH ARGS...`: what `execvp` runs when the file is not an executable
    /// format (a script without `#!`), as `Command` did.
    sh_argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    stdio: [RawFd; 3],
    procs: Vec<RawFd>,
    /// The directory to start in (`None`: the pool's own).
    cwd: Option<CString>,
    /// The step that failed's errno, written by the child (0: it executed).
    err: c_int,
}

/// A task to start: `argv[0]` looked up in the task's `PATH`, the pool's environment
/// without `remove` and with `env` added, stdin from `/dev/null`, the given output files,
/// in a process group of its own, after joining the cgroups whose `cgroup.procs` are open
/// in `procs`. Returns the task's pid once it has executed.
pub struct Spawn<'a> {
    /// argv (non-empty).
    pub argv: &'a [String],
    /// Environment added.
    pub env: &'a [(String, String)],
    /// Variables of the pool's own environment the task does not inherit.
    pub remove: &'a [&'a str],
    /// The task's stdout.
    pub stdout: &'a File,
    /// The task's stderr.
    pub stderr: &'a File,
    /// Open `cgroup.procs` files to join.
    pub procs: &'a [File],
    /// The directory to start in (the job's `workdir`); `None`: the pool's own.
    pub cwd: Option<&'a Path>,
}

fn cstring(b: &[u8]) -> std::io::Result<CString> {
    CString::new(b).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "nul byte in the command or its environment",
        )
    })
}

/// `program` as `execvp` would find it along `path` (unchanged if it names a directory).
fn resolve(program: &str, path: Option<&OsStr>) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    let path = path.unwrap_or_else(|| OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return candidate;
        }
    }
    // Not found: `execve` fails with ENOENT, the error `Command` gives.
    PathBuf::from(program)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Spawn<'_> {
    /// Starts the task; the error is `execve`'s (or a step's before it).
    pub fn spawn(&self) -> std::io::Result<i32> {
        let Some(program) = self.argv.first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "empty command",
            ));
        };
        // The environment: the pool's, less `remove` and what `env` sets, plus `env`.
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                !self.remove.iter().any(|r| k.as_bytes() == r.as_bytes())
                    && !self.env.iter().any(|(e, _)| k.as_bytes() == e.as_bytes())
            })
            .collect();
        vars.extend(
            self.env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let task_path = vars
            .iter()
            .find(|(k, _)| k.as_bytes() == b"PATH")
            .map(|(_, v)| v.as_os_str());
        let path = cstring(resolve(program, task_path).as_os_str().as_bytes())?;
        let args = self
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let envs = vars
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend(v.into_vec());
                cstring(&kv)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let stdin = File::open("/dev/null")?;
        let sh = cstring(b"/bin/sh")?;
        let mut child = Child {
            sh_argv: [sh.as_ptr(), path.as_ptr()]
                .into_iter()
                .chain(args.iter().skip(1).map(|a| a.as_ptr()))
                .chain([std::ptr::null()])
                .collect(),
            path,
            argv: args
                .iter()
                .map(|a| a.as_ptr())
                .chain([std::ptr::null()])
                .collect(),
            envp: envs
                .iter()
                .map(|e| e.as_ptr())
                .chain([std::ptr::null()])
                .collect(),
            stdio: [
                stdin.as_raw_fd(),
                self.stdout.as_raw_fd(),
                self.stderr.as_raw_fd(),
            ],
            procs: self.procs.iter().map(|f| f.as_raw_fd()).collect(),
            cwd: self
                .cwd
                .map(|d| cstring(d.as_os_str().as_bytes()))
                .transpose()?,
            err: 0,
        };
        let mut stack = vec![0u8; STACK_BYTES];
        // SAFETY: the stack outlives the child's use of it (CLONE_VFORK: this thread is
        // suspended until the child executes or exits); `child` and the strings it points
        // into live until after the clone returns; signals are blocked across the clone so
        // that no handler of this process runs on the child's stack.
        let pid = unsafe {
            let top = stack.as_mut_ptr().add(STACK_BYTES);
            let top = (top as usize & !15) as *mut c_void;
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                child_main,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &mut child as *mut Child as *mut c_void,
            );
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            pid
        };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the child wrote it (if at all) before it exited; read through a volatile
        // load since the write happened behind the compiler's back.
        let err = unsafe { std::ptr::read_volatile(&child.err) };
        drop((args, envs, stdin, sh));
        if err != 0 {
            // It exited without executing: reaped here (the pool's reaper leaves children
            // it does not know alone while a spawn is in progress).
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            return Err(std::io::Error::from_raw_os_error(err));
        }
        Ok(pid)
    }
}

/// The child, between the clone and `execve`: system calls only.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Child`, alive and untouched while the parent waits;
    // only async-signal-safe calls follow.
    unsafe {
        let c = &mut *(arg as *mut Child);
        // Handlers of the pool do not survive an exec, but could run here: default them,
        // with SIGPIPE (ignored by Rust's runtime), as `Command` does.
        for sig in 1..65 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if sig == libc::SIGPIPE
                || (old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        for &fd in &c.procs {
            if libc::write(fd, b"0".as_ptr() as *const c_void, 1) != 1 {
                fail(c);
            }
        }
        if let Some(dir) = &c.cwd {
            if libc::chdir(dir.as_ptr()) != 0 {
                fail(c);
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(c);
        }
        for (to, &from) in c.stdio.iter().enumerate() {
            let to = to as c_int;
            let ok = if from == to {
                libc::fcntl(from, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(from, to) == to
            };
            if !ok {
                fail(c);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(c.path.as_ptr(), c.argv.as_ptr(), c.envp.as_ptr());
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(c.sh_argv[0], c.sh_argv.as_ptr(), c.envp.as_ptr());
            *libc::__errno_location() = libc::ENOEXEC;
        }
        fail(c)
    }
}

/// Records errno for the parent and exits (in the child only).
fn fail(c: &mut Child) -> ! {
    // SAFETY: errno of this (shared-memory) child; `_exit` runs no handler of the parent.
    unsafe {
        c.err = (*libc::__errno_location()).max(1);
        libc::_exit(127)
    }
}

#[cfg(test)]
#[path = "vspawn_tests.rs"]
mod tests;
