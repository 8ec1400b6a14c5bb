//! `hetsched up --no-demo` runs secured and prints the `export` lines a user needs; the CLI
//! works with exactly those (docs/CONTRACT.md, "Security").

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

#[test]
fn up_no_demo_prints_exports_with_which_the_cli_works() {
    use std::io::BufRead;
    let dir = Scratch::new("sec-up");
    let log = std::fs::File::create(dir.path().join("up.err")).expect("log");
    let mut child = Command::new(BIN)
        .args([
            "up",
            "--no-demo",
            "--masters",
            "1",
            "--slaves",
            "1",
            "--data-dir",
        ])
        .arg(dir.path().join("up"))
        .env("HETSCHED_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start up");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut exports = std::collections::BTreeMap::new();
    while exports.len() < 4 {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("up prints its export lines");
        if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
            assert!(!v.contains([' ', '"', '\'']), "{line}");
            exports.insert(k.to_string(), v.to_string());
        }
    }
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_remove("HETSCHED_MASTERS")
            .env_remove("HETSCHED_CERTS_DIR")
            .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
            .stdin(Stdio::null());
        for (k, v) in &exports {
            cmd.env(k, v);
        }
        cmd.output().expect("run hetsched")
    };
    let submitted = wait_for(
        "a submit with up's exports",
        Duration::from_secs(60),
        || {
            let out = cli(&["submit", "--", "true"]);
            out.status.success().then_some(out)
        },
    );
    assert!(String::from_utf8_lossy(&submitted.stdout).contains("submitted"));
    let jobs = cli(&["jobs"]);
    assert!(
        jobs.status.success(),
        "{}",
        String::from_utf8_lossy(&jobs.stderr)
    );
    for k in [
        "HETSCHED_MASTERS",
        "HETSCHED_CERTS_DIR",
        "HETSCHED_TOKEN",
        "HETSCHED_API",
    ] {
        assert!(exports.contains_key(k), "{k} not exported: {exports:?}");
    }
    let created = cli(&["acl", "token", "create", "--user", "carol", "--json"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&created.stdout).expect("token JSON");
    assert_eq!(created["user"], "carol");
    assert_eq!(created["role"], "user");
    assert!(created["token"]
        .as_str()
        .is_some_and(|t| t.starts_with("hst.")));
    // The first URL of the output is the HTTPS base of the API and the dashboard.
    let err_log = dir.path().join("up.err");
    let first_url = wait_for("up's URL line", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&err_log).ok()?;
        let at = text.find("://")?;
        let start = text[..at]
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let end = text[at..].find(char::is_whitespace).map(|e| at + e)?;
        Some(text[start..end].to_string())
    });
    assert!(
        first_url.starts_with("https://127.0.0.1:")
            && first_url["https://127.0.0.1:".len()..]
                .parse::<u16>()
                .is_ok(),
        "first URL {first_url:?}"
    );
    assert_eq!(exports["HETSCHED_API"], first_url, "one master: its API");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}
