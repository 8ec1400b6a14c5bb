//! The vfork-style spawn starts what `Command` started, the same way.

use super::*;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

fn files(dir: &Path) -> (File, File, PathBuf, PathBuf) {
    let (o, e) = (dir.join("out"), dir.join("err"));
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .expect("open")
    };
    (open(&o), open(&e), o, e)
}

fn exit_of(pid: i32) -> i32 {
    match waitpid(Pid::from_raw(pid), None).expect("waitpid") {
        WaitStatus::Exited(_, code) => code,
        other => panic!("unexpected end: {other:?}"),
    }
}

fn argv(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn runs_the_command_with_its_environment_streams_and_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err, o, e) = files(dir.path());
    // A variable of the pool's own environment, inherited unless removed.
    std::env::set_var("HETSCHED_VSPAWN_TEST_REMOVED", "x");
    let a = argv(&[
        "sh",
        "-c",
        "echo \"$A ${HETSCHED_VSPAWN_TEST_REMOVED:-unset} $(ps -o pgid= -p $$ | tr -d ' ') $$\"; \
         read line; echo \"stdin:$line\"; echo oops >&2; exit 3",
    ]);
    let env = vec![("A".to_string(), "a-value".to_string())];
    let pid = Spawn {
        argv: &a,
        env: &env,
        remove: &["HETSCHED_VSPAWN_TEST_REMOVED"],
        stdout: &out,
        stderr: &err,
        procs: &[],
        cwd: None,
    }
    .spawn()
    .expect("spawn");
    assert_eq!(exit_of(pid), 3);
    let stdout = std::fs::read_to_string(&o).expect("stdout");
    let mut lines = stdout.lines();
    let first: Vec<&str> = lines.next().expect("a line").split(' ').collect();
    assert_eq!(first[0], "a-value", "{stdout}");
    assert_eq!(first[1], "unset", "removed from the environment: {stdout}");
    if !first[2].is_empty() {
        assert_eq!(first[2], first[3], "a process group of its own: {stdout}");
    }
    assert_eq!(lines.next(), Some("stdin:"), "stdin is /dev/null: {stdout}");
    assert_eq!(std::fs::read_to_string(&e).expect("stderr"), "oops\n");
}

#[test]
fn a_missing_program_fails_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err, _, _) = files(dir.path());
    let a = argv(&["hetsched-no-such-program-here"]);
    let e = Spawn {
        argv: &a,
        env: &[],
        remove: &[],
        stdout: &out,
        stderr: &err,
        procs: &[],
        cwd: None,
    }
    .spawn()
    .expect_err("no such program");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
}

#[test]
fn a_script_without_interpreter_line_runs_under_sh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err, o, _) = files(dir.path());
    let script = dir.path().join("script");
    std::fs::write(&script, "echo from-script \"$1\"\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let a = vec![script.display().to_string(), "arg1".to_string()];
    let pid = Spawn {
        argv: &a,
        env: &[],
        remove: &[],
        stdout: &out,
        stderr: &err,
        procs: &[],
        cwd: None,
    }
    .spawn()
    .expect("spawn");
    assert_eq!(exit_of(pid), 0);
    assert_eq!(
        std::fs::read_to_string(&o).expect("stdout"),
        "from-script arg1\n"
    );
}

/// A plain spawn of `argv` with its output to `out`/`err`, starting in `cwd`.
fn spawn_in(argv: &[String], out: &File, err: &File, cwd: &Path) -> std::io::Result<i32> {
    Spawn {
        argv,
        env: &[],
        remove: &[],
        stdout: out,
        stderr: err,
        procs: &[],
        cwd: Some(cwd),
    }
    .spawn()
}

#[test]
fn starts_in_the_directory_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err, o, _) = files(dir.path());
    let work = dir.path().join("work dir");
    std::fs::create_dir(&work).expect("mkdir");
    let a = argv(&["sh", "-c", "pwd"]);
    let pid = spawn_in(&a, &out, &err, &work).expect("spawn");
    assert_eq!(exit_of(pid), 0);
    let printed = std::fs::read_to_string(&o).expect("stdout");
    assert_eq!(
        std::fs::canonicalize(printed.trim()).expect("a path"),
        std::fs::canonicalize(&work).expect("work")
    );
    let e = spawn_in(&a, &out, &err, &dir.path().join("gone")).expect_err("no such directory");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}
