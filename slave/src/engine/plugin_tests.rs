//! Server plug-ins as real processes: many calls from one process, a killed one restarted
//! (its call falls back to the CPU), an idle one stopped; and the shipped NumPy gemm plug-in
//! against the built-in kernel.

use crate::engine::{kernels, EngineSet, EnginesFile};
use crate::program::ProgramRuntime;
use hetsched_common::program::{Api, ApiCall, CheckKind, SelectionTable};
use hetsched_common::EngineKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// A server plug-in in sh: appends its pid to `starts` when it starts; answers each line
/// with the line itself as the result (a request for seed 99 first sleeps, to be killed).
fn echo_server(dir: &Path) -> PathBuf {
    let p = dir.join("echo-server.sh");
    let body = format!(
        r#"#!/bin/sh
echo $$ >> {starts}
[ "$HETSCHED_PLUGIN_MODE" = server ] || exit 9
while IFS= read -r line; do
  case "$line" in *'"seed":99'*) touch {busy}; sleep 30;; esac
  printf '{{"ok": true, "len": %d}}\n%s' "${{#line}}" "$line"
done
"#,
        starts = dir.join("starts").display(),
        busy = dir.join("busy").display(),
    );
    std::fs::write(&p, body).expect("write plug-in");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

fn starts(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn runtime(exec: &Path, idle: Duration) -> ProgramRuntime {
    let file = format!(
        "[[engine]]\nkind = \"dsp\"\ncount = 1\n[[plugin]]\napi = \"sha256\"\nengine = \"dsp\"\nexec = \"{}\"\nmode = \"server\"\n",
        exec.display()
    );
    let f = EnginesFile::parse(&file, "e.toml").expect("parses");
    ProgramRuntime {
        engines: Arc::new(
            EngineSet::new(&f, 2, 0, false)
                .expect("builds")
                .with_plugin_idle(idle),
        ),
        table: Arc::new(RwLock::new(SelectionTable::default())),
        node: "n1".into(),
        call_timeout: Duration::from_secs(10),
        forwarder: None,
        check_results: false,
    }
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for this purpose: its status line says so.
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn a_server_plugin_serves_many_calls_from_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime(&echo_server(dir.path()), Duration::from_secs(60));
    for i in 0..5 {
        let call = ApiCall::new(Api::Sha256, 4096, i);
        let r = rt.run_call(i as u32, &call);
        assert_eq!(
            (r.engine, r.fallback_from),
            (EngineKind::Dsp, None),
            "{r:?}"
        );
        let line = serde_json::json!({ "api": call.api, "args": call.args }).to_string();
        assert_eq!(
            r.digest,
            kernels::digest(line.as_bytes()),
            "the reply's bytes"
        );
    }
    assert_eq!(starts(dir.path()).len(), 1, "one process served five calls");
    assert_eq!(rt.engines.servers().starts(), 1);
}

#[test]
fn a_killed_server_plugin_is_restarted_and_its_call_falls_back_to_the_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = Arc::new(runtime(&echo_server(dir.path()), Duration::from_secs(60)));
    assert_eq!(
        rt.run_call(0, &ApiCall::new(Api::Sha256, 64, 1)).engine,
        EngineKind::Dsp
    );
    let slow = ApiCall::new(Api::Sha256, 4096, 99);
    let in_flight = {
        let (rt, slow) = (rt.clone(), slow.clone());
        std::thread::spawn(move || rt.run_call(1, &slow))
    };
    wait_for("the slow call", Duration::from_secs(10), || {
        dir.path().join("busy").exists()
    });
    let pid = starts(dir.path())[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the plug-in");
    let r = in_flight.join().expect("call thread");
    assert_eq!(r.engine, EngineKind::Cpu, "{r:?}");
    assert_eq!(r.fallback_from, Some(EngineKind::Dsp));
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("died")),
        "{r:?}"
    );
    assert_eq!(
        r.digest,
        kernels::digest(&kernels::run(&slow)),
        "the CPU's result"
    );
    // The next call starts it again.
    let r = rt.run_call(2, &ApiCall::new(Api::Sha256, 64, 2));
    assert_eq!(
        (r.engine, r.fallback_from),
        (EngineKind::Dsp, None),
        "{r:?}"
    );
    let pids = starts(dir.path());
    assert_eq!(pids.len(), 2, "restarted once: {pids:?}");
    assert_ne!(pids[0], pids[1]);
}

#[test]
fn an_idle_server_plugin_is_stopped_and_started_again_on_demand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exec = echo_server(dir.path());
    let rt = runtime(&exec, Duration::from_millis(200));
    let call = ApiCall::new(Api::Sha256, 64, 1);
    assert_eq!(rt.run_call(0, &call).engine, EngineKind::Dsp);
    let pid = starts(dir.path())[0];
    assert!(alive(pid) && rt.engines.servers().is_warm(&exec));
    wait_for("the idle plug-in to stop", Duration::from_secs(10), || {
        !alive(pid)
    });
    assert!(!rt.engines.servers().is_warm(&exec));
    assert_eq!(rt.run_call(1, &call).engine, EngineKind::Dsp);
    assert_eq!(starts(dir.path()).len(), 2);
}

/// The shipped gemm plug-in, when a Python with NumPy is there (CI installs it: a test that
/// cannot run there fails).
fn numpy_gemm() -> Option<PathBuf> {
    let exec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/plugins/gemm");
    let ok = std::process::Command::new(&exec)
        .arg("--backend")
        .env("HETSCHED_PLUGIN_BACKEND", "numpy")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "deploy/plugins/gemm needs python3 with NumPy (apt-get install python3-numpy)"
        );
        eprintln!("skipped: no python3 with NumPy for deploy/plugins/gemm");
        return None;
    }
    Some(exec)
}

#[test]
fn the_numpy_gemm_plugin_matches_the_kernel_and_is_profiled_warm_for_real() {
    use crate::engine::profile::{profile, ProfileOptions};
    let Some(exec) = numpy_gemm() else { return };
    let file = format!(
        "[[engine]]\nkind = \"gpu\"\nemulated = true\n[[plugin]]\napi = \"gemm\"\nengine = \"gpu\"\nexec = \"{}\"\nmode = \"server\"\n",
        exec.display()
    );
    let f = EnginesFile::parse(&file, "e.toml").expect("parses");
    let set = EngineSet::new(&f, 2, 1, true).expect("builds");
    let table = profile(
        &set,
        ProfileOptions {
            budget: Duration::from_secs(4),
            min_bucket: 10,
            max_bucket: 22,
            ..Default::default()
        },
    );
    let rows: Vec<_> = table.rows.iter().filter(|r| r.api == Api::Gemm).collect();
    assert!(rows.len() >= 2, "gemm profiled at several sizes: {rows:?}");
    for row in &rows {
        // Left out of a row if it failed its check against the kernel.
        let gpu = row.ranked.iter().find(|e| e.engine == EngineKind::Gpu);
        let gpu = gpu.unwrap_or_else(|| panic!("plug-in in every gemm row: {row:?}"));
        assert!(!gpu.emulated, "a plug-in's time is measured: {gpu:?}");
        // A round trip to a Python process and back is never a modelled microsecond.
        assert!(gpu.time_us >= 20, "{gpu:?}");
        // And the check itself, for the record, at this size.
        let n = Api::Gemm.size_for_bucket(row.bucket);
        let call = ApiCall::new(Api::Gemm, n, 1);
        let out = set
            .run_plugin(
                &exec,
                super::PluginMode::Server,
                &call,
                Duration::from_secs(30),
            )
            .expect("plug-in result");
        let c = crate::engine::check::compare(Api::Gemm, &out, &kernels::run(&call));
        assert_eq!(c.kind, CheckKind::Tolerance);
        assert!(c.ok && c.rel_err <= 1e-4, "n = {n}: {c:?}");
    }
    assert_eq!(
        set.servers().starts(),
        1,
        "one warm process for the whole profile"
    );
}

#[test]
fn checked_results_carry_their_check_and_a_wrong_one_is_replaced_by_the_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rt = runtime(&echo_server(dir.path()), Duration::from_secs(60));
    rt.check_results = true;
    // The echo "sha256" is wrong: exact check fails, the CPU's result is kept.
    let call = ApiCall::new(Api::Sha256, 4096, 3);
    let r = rt.run_call(0, &call);
    let c = r.check.expect("a check ran");
    assert_eq!((c.kind, c.ok, c.rel_err), (CheckKind::Exact, false, 1.0));
    assert_eq!(
        (r.engine, r.fallback_from),
        (EngineKind::Cpu, Some(EngineKind::Dsp))
    );
    assert_eq!(r.digest, kernels::digest(&kernels::run(&call)));
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["check"]["kind"], "exact", "{json}");
    // Without --check-results no check is recorded (`null`, as absent values are).
    rt.check_results = false;
    let json = serde_json::to_value(rt.run_call(1, &call)).expect("json");
    assert!(json["check"].is_null(), "{json}");
    // The NumPy gemm plug-in passes its tolerance check in a program call.
    let Some(exec) = numpy_gemm() else { return };
    let mut rt = runtime(&exec, Duration::from_secs(60));
    let f = EnginesFile::parse(
        &format!(
            "[[engine]]\nkind = \"gpu\"\nemulated = true\n[[plugin]]\napi = \"gemm\"\nengine = \"gpu\"\nexec = \"{}\"\nmode = \"server\"\n",
            exec.display()
        ),
        "e.toml",
    )
    .expect("parses");
    rt.engines = Arc::new(EngineSet::new(&f, 2, 1, true).expect("builds"));
    rt.check_results = true;
    let r = rt.run_call(0, &ApiCall::new(Api::Gemm, 96, 7));
    let c = r.check.expect("a check ran");
    assert_eq!(
        (r.engine, c.kind, c.ok),
        (EngineKind::Gpu, CheckKind::Tolerance, true),
        "{r:?}"
    );
    assert!(c.rel_err <= 1e-4, "{c:?}");
}
