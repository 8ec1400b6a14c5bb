//! Secure by default (docs/CONTRACT.md, "Security"): masters and slaves refuse to start
//! without `--certs-dir` or `--insecure`; certificates carry role and name; every refusal
//! the transport and the master make, against a real secured cluster started with default
//! flags by the launcher.

mod support;
mod support_http;

use hetsched::local::security;
use hetsched_common::certs::{self, Role};
use hetsched_common::protocol::{
    Assignment, ClientRequest, ErrorKind, ErrorReply, Message, SlaveCommand, SlaveRequest,
};
use hetsched_common::wire::{tls, Connection, FrameLimits};
use hetsched_common::{JobId, NodeResources, ResourceRequest, TaskId};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn run(args: &[&str], certs: Option<&Path>) -> (i32, String, String) {
    run_with(args, certs, None)
}

/// Runs the CLI with a certificates directory and an API token (`HETSCHED_TOKEN`).
fn run_with(args: &[&str], certs: Option<&Path>, token: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("HETSCHED_CLIENT_TIMEOUT_MS", "3000")
        .env_remove("HETSCHED_MASTERS")
        .env_remove("HETSCHED_CERTS_DIR")
        .env_remove("HETSCHED_TOKEN")
        .stdin(Stdio::null());
    if let Some(c) = certs {
        cmd.env("HETSCHED_CERTS_DIR", c);
    }
    if let Some(t) = token {
        cmd.env("HETSCHED_TOKEN", t);
    }
    let out = cmd.output().expect("run hetsched");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A certificates directory for `role`/`name` from the test process's CA.
fn certs_for(dir: &Path, role: Role, name: &str) -> std::path::PathBuf {
    let ca = security::process_ca().expect("test CA");
    let out = dir.join(format!("certs-{role}-{name}"));
    security::issue(&ca, role, name, &out).expect("issue");
    out
}

fn setup_for(dir: &Path, role: Role, name: &str) -> Arc<tls::TlsSetup> {
    let d = certs_for(dir, role, name);
    Arc::new(tls::load(&d, role, Some(name)).expect("load"))
}

fn call_as(setup: Option<Arc<tls::TlsSetup>>, addr: &str, msg: Message) -> Result<Message, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let c =
            Connection::connect_tls(addr, Duration::from_secs(2), FrameLimits::default(), setup)
                .await
                .map_err(|e| e.to_string())?;
        c.call(msg, Duration::from_secs(5))
            .await
            .map_err(|e| e.to_string())
    })
}

fn denied(m: &Result<Message, String>) -> String {
    match m {
        Ok(Message::Error(ErrorReply {
            kind: ErrorKind::PermissionDenied,
            message,
        })) => message.clone(),
        other => panic!("expected permission denied, got {other:?}"),
    }
}

#[test]
fn master_and_slave_without_certs_dir_or_insecure_exit_2_naming_both() {
    let dir = Scratch::new("sec-flags");
    let d = dir.path().display().to_string();
    for args in [
        vec![
            "master",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:1",
            "--peers",
            "1=127.0.0.1:1",
            "--data-dir",
            &d,
        ],
        vec![
            "slave",
            "--listen",
            "127.0.0.1:1",
            "--masters",
            "127.0.0.1:2",
            "--data-dir",
            &d,
            "--cpus",
            "1",
            "--mem",
            "64",
        ],
    ] {
        let (code, _, err) = run(&args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("--certs-dir") && err.contains("--insecure"),
            "{err}"
        );
    }
}

#[test]
fn certs_carry_role_and_name_and_keys_are_private() {
    let dir = Scratch::new("sec-certs");
    let ca = dir.path().join("ca");
    let (code, _, err) = run(&["certs", "init", &ca.display().to_string()], None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        &[
            "certs",
            "issue",
            &ca.display().to_string(),
            "--role",
            "slave",
            "--name",
            "edge-7",
            "--hosts",
            "10.0.0.7,node7.example",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().ends_with("slave.edge-7.crt"), "{out}");
    use std::os::unix::fs::PermissionsExt;
    for key in ["ca.key", "slave.edge-7.key"] {
        let mode = std::fs::metadata(ca.join(key))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let setup = tls::load(&ca, Role::Slave, Some("edge-7")).expect("load");
    assert_eq!(
        setup.identity,
        Some(certs::Identity {
            role: Role::Slave,
            name: "edge-7".into()
        })
    );
    // A second CA in the same place is refused; a bad role is bad input.
    assert_eq!(
        run(&["certs", "init", &ca.display().to_string()], None).0,
        2
    );
    let (code, _, err) = run(
        &[
            "certs",
            "issue",
            &ca.display().to_string(),
            "--role",
            "king",
            "--name",
            "x",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    // A master loading a slave's directory is told so.
    let e = tls::load(&ca, Role::Master, None).expect_err("no master cert");
    assert!(e.to_string().contains("no master certificate"), "{e}");
}

#[test]
fn a_secured_cluster_refuses_plain_tcp_foreign_roles_and_other_users() {
    let c = Cluster::start("sec-cluster", 1, 1, 2);
    c.wait_nodes_up(1, Duration::from_secs(30));
    let master = c.master_addrs[0].clone();
    let slave = c.slave_addrs[0].clone();

    // Plain TCP to each port: one clear error, then the connection is closed.
    for addr in [&master, &c.admin_addrs[0], &slave] {
        let msg = denied(&call_as(
            None,
            addr,
            Message::Client(ClientRequest::Status { stale: true }),
        ));
        assert!(msg.contains("requires TLS"), "{addr}: {msg}");
    }

    // A slave certificate cannot send Raft traffic nor register as another node.
    let slave_cert = setup_for(c.dir.path(), Role::Slave, "slave-1");
    let msg = denied(&call_as(
        Some(slave_cert.clone()),
        &master,
        Message::Raft {
            from: hetsched_common::MasterId(1),
            msgs: vec![],
        },
    ));
    assert!(msg.contains("master certificate"), "{msg}");
    let register = |name: &str| {
        Message::Slave(SlaveRequest::Register {
            key: 42,
            node: None,
            name: name.into(),
            addr: "127.0.0.1:9".into(),
            capacity: NodeResources {
                cpu_milli: 1000,
                mem_mib: 64,
                ..Default::default()
            },
            labels: Default::default(),
            held: vec![],
            partitions: vec![],
        })
    };
    let msg = denied(&call_as(Some(slave_cert), &master, register("slave-9")));
    assert!(msg.contains("slave-9"), "{msg}");

    // Only a master certificate makes a slave run something: no process starts.
    let marker = c.dir.path().join("should-not-exist");
    let assign = Message::ToSlave(SlaveCommand::AssignBatch(vec![Assignment {
        task: TaskId(9999),
        job: JobId(9999),
        index: 0,
        attempt: 1,
        command: vec!["touch".into(), marker.display().to_string()],
        env: Default::default(),
        resources: ResourceRequest {
            cpu_milli: 100,
            mem_mib: 16,
            ..Default::default()
        },
        gpus: vec![],
        queued: false,
        engine: None,
        job_name: String::new(),
        workdir: None,
        image: None,
        run_as: None,
        network: None,
    }]));
    for who in [
        setup_for(c.dir.path(), Role::Client, "root"),
        setup_for(c.dir.path(), Role::Slave, "slave-2"),
    ] {
        let msg = denied(&call_as(Some(who), &slave, assign.clone()));
        assert!(msg.contains("master certificate"), "{msg}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "a refused assignment ran");

    // Users: alice cannot act as bob, nor touch bob's job, nor change the configuration;
    // without credentials nothing is allowed.
    let alice = certs_for(c.dir.path(), Role::Client, "alice");
    let bob = certs_for(c.dir.path(), Role::Client, "bob");
    let m = c.masters_arg();
    let (code, _, err) = run(
        &["--masters", &m, "submit", "--user", "bob", "--", "true"],
        Some(&alice),
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    let (code, out, err) = run(
        &["--masters", &m, "submit", "--json", "--", "sleep", "30"],
        Some(&bob),
    );
    assert_eq!(code, 0, "{err}");
    let job: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("a line")).expect("json");
    let job = match &job["job_id"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let task = wait_for("bob's task", Duration::from_secs(10), || {
        c.tasks().first().and_then(|t| t["id"].as_u64())
    });
    let (code, _, err) = run(&["--masters", &m, "cancel", &job], Some(&alice));
    assert_eq!(code, 3, "cancel another user's job: {err}");
    let (code, _, err) = run(&["--masters", &m, "logs", &task.to_string()], Some(&alice));
    assert_eq!(code, 3, "logs of another user's job: {err}");
    let cfg = c.dir.path().join("prio.toml");
    std::fs::write(&cfg, "[[users]]\nname = \"alice\"\npriority = 9\n").expect("write");
    let (code, _, err) = run(
        &[
            "--masters",
            &m,
            "config",
            "apply",
            &cfg.display().to_string(),
        ],
        Some(&alice),
    );
    assert_eq!(code, 3, "priority configuration by a user: {err}");
    let ca_only = c.dir.path().join("ca-only");
    std::fs::create_dir_all(&ca_only).expect("dir");
    std::fs::copy(alice.join("ca.crt"), ca_only.join("ca.crt")).expect("copy");
    let (code, _, err) = run(&["--masters", &m, "submit", "--", "true"], Some(&ca_only));
    assert_eq!(code, 3, "no credentials: {err}");
    // The owner may cancel its own job.
    let (code, _, err) = run(&["--masters", &m, "cancel", &job], Some(&bob));
    assert_eq!(code, 0, "{err}");
}

/// A JSON object from the last stdout line of a CLI run.
fn last_json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.lines().last().expect("a line")).expect("json")
}

fn id_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn tokens_decide_the_caller_on_the_cli_and_the_https_api() {
    use hetsched::local::{ClusterSpec, SlaveSpec};
    use support_http::{request_as, Auth};
    let c = Cluster::launch(
        "sec-tokens",
        ClusterSpec {
            masters: 1,
            master_http: true,
            slaves: vec![SlaveSpec {
                cpus: 2,
                mem_mib: 4096,
                gpus: 0,
                extra_args: vec![],
            }],
            ..test_spec()
        },
    );
    c.wait_nodes_up(1, Duration::from_secs(30));
    let m = c.masters_arg();
    let root = security::client_certs_dir().expect("the test CA's client directory");
    let ca_only = c.dir.path().join("ca-only");
    std::fs::create_dir_all(&ca_only).expect("dir");
    std::fs::copy(root.join("ca.crt"), ca_only.join("ca.crt")).expect("copy");
    let as_token = |token: &str, args: &[&str]| {
        let mut a = vec!["--masters", m.as_str()];
        a.extend_from_slice(args);
        run_with(&a, Some(&ca_only), Some(token))
    };

    // The first administrator token: needs the administrator's certificate, and once.
    let (code, _, err) = run(&["--masters", &m, "acl", "bootstrap"], Some(&ca_only));
    assert_eq!(code, 3, "bootstrap without credentials: {err}");
    let (code, out, err) = run(
        &["--masters", &m, "acl", "bootstrap", "--json"],
        Some(&root),
    );
    assert_eq!(code, 0, "{err}");
    let boot = last_json(&out);
    assert_eq!(
        (boot["user"].as_str(), boot["role"].as_str()),
        (Some("root"), Some("admin"))
    );
    let admin = boot["token"].as_str().expect("token").to_string();
    let (code, _, err) = run(&["--masters", &m, "acl", "bootstrap"], Some(&root));
    assert_eq!(code, 3, "a second bootstrap: {err}");
    assert!(err.contains("permission denied"), "{err}");

    let create = |user: &str, role: &str| {
        let (code, out, err) = as_token(
            &admin,
            &[
                "acl", "token", "create", "--user", user, "--role", role, "--json",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let t = last_json(&out);
        assert_eq!(t["user"], user);
        assert_eq!(t["role"], role);
        t["token"].as_str().expect("token").to_string()
    };
    let alice = create("alice", "user");
    let bob = create("bob", "user");
    let ops = create("ops", "operator");
    let (code, _, err) = as_token(&alice, &["acl", "token", "create", "--user", "eve"]);
    assert_eq!(code, 3, "a user creating tokens: {err}");

    // Bob's job; alice may not act on it nor act as bob, whatever certificate she holds.
    let (code, out, err) = as_token(&bob, &["submit", "--json", "--", "sleep", "30"]);
    assert_eq!(code, 0, "{err}");
    let bob_job = id_text(&last_json(&out)["job_id"]);
    let bob_task = wait_for("bob's task", Duration::from_secs(10), || {
        c.tasks().first().and_then(|t| t["id"].as_u64())
    });
    for args in [
        vec!["submit", "--user", "bob", "--", "true"],
        vec!["cancel", bob_job.as_str()],
    ] {
        let (code, _, err) = as_token(&alice, &args);
        assert_eq!(code, 3, "alice: {args:?}: {err}");
        assert!(err.contains("permission denied"), "{err}");
    }
    let task_text = bob_task.to_string();
    let (code, _, err) = as_token(&alice, &["logs", &task_text]);
    assert_eq!(code, 3, "logs of bob's job: {err}");
    let cfg = c.dir.path().join("prio.toml");
    std::fs::write(&cfg, "[[users]]\nname = \"alice\"\npriority = 9\n").expect("write");
    let cfg_text = cfg.display().to_string();
    let (code, _, err) = as_token(&alice, &["config", "apply", &cfg_text]);
    assert_eq!(code, 3, "priority configuration by a user: {err}");
    // Without any credentials: none of it either.
    for args in [
        vec!["submit", "--user", "bob", "--", "true"],
        vec!["cancel", bob_job.as_str()],
        vec!["logs", task_text.as_str()],
        vec!["config", "apply", cfg_text.as_str()],
    ] {
        let mut a = vec!["--masters", m.as_str()];
        a.extend_from_slice(&args);
        let (code, _, err) = run(&a, Some(&ca_only));
        assert_eq!(code, 3, "no credentials: {args:?}: {err}");
    }
    // A token decides over the certificate: alice's token with root's certificate.
    let (code, _, err) = run_with(
        &["--masters", &m, "submit", "--user", "bob", "--", "true"],
        Some(&root),
        Some(&alice),
    );
    assert_eq!(code, 3, "alice's token with root's certificate: {err}");
    // Without --user a token holder submits as itself, and may cancel its own job.
    let (code, out, err) = as_token(&alice, &["submit", "--json", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    let own = id_text(&last_json(&out)["job_id"]);
    let (code, _, err) = as_token(&alice, &["cancel", &own]);
    assert_eq!(code, 0, "alice cancels her own job: {err}");
    // Operators drain; users do not. Admins change the configuration.
    let (code, _, err) = as_token(&alice, &["drain", "slave-1"]);
    assert_eq!(code, 3, "a user draining: {err}");
    let (code, _, err) = as_token(&ops, &["drain", "slave-1"]);
    assert_eq!(code, 0, "an operator draining: {err}");
    let (code, _, err) = as_token(&ops, &["undrain", "slave-1"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = as_token(&admin, &["config", "apply", &cfg_text]);
    assert_eq!(code, 0, "an administrator's configuration: {err}");

    // HTTPS: plain HTTP gets one clear answer; no token 401; a user's role 403.
    let http = c.master_http[0].clone();
    let plain = request_as(&Auth::Plain, "GET", &http, "/v1/status", None).expect("plain");
    assert_eq!(plain.status, 400, "{}", plain.text());
    assert!(plain.text().contains("HTTPS"), "{}", plain.text());
    let anon = request_as(&Auth::Anonymous, "GET", &http, "/v1/status", None).expect("anon");
    assert_eq!(anon.status, 401, "{}", anon.text());
    let bad = Auth::Bearer("hst.00ff.00ff".into());
    assert_eq!(
        request_as(&bad, "GET", &http, "/v1/status", None)
            .expect("bad")
            .status,
        401
    );
    let alice_http = Auth::Bearer(alice.clone());
    let as_bob = r#"{"command":["true"],"user":"bob"}"#;
    let a = request_as(&alice_http, "POST", &http, "/v1/jobs", Some(as_bob)).expect("post");
    assert_eq!(a.status, 403, "{}", a.text());
    let path = format!("/v1/jobs/{bob_job}");
    let a = request_as(&alice_http, "DELETE", &http, &path, None).expect("delete");
    assert_eq!(a.status, 403, "{}", a.text());
    let a = request_as(
        &alice_http,
        "POST",
        &http,
        "/v1/jobs",
        Some(r#"{"command":["true"]}"#),
    )
    .expect("post");
    assert_eq!(a.status, 201, "{}", a.text());
    let a = request_as(
        &Auth::Bearer(admin.clone()),
        "GET",
        &http,
        "/v1/status",
        None,
    )
    .expect("status");
    assert_eq!(a.status, 200, "{}", a.text());
    let a = request_as(&Auth::Anonymous, "GET", &http, "/healthz", None).expect("healthz");
    assert_eq!(a.status, 200, "{}", a.text());

    // Listing shows accessors, never secrets; a revoked token is refused.
    let (code, out, err) = as_token(&admin, &["acl", "token", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let list = last_json(&out);
    let alice_accessor = alice.split('.').nth(1).expect("accessor");
    assert!(
        list.as_array()
            .is_some_and(|l| l.iter().any(|t| t["accessor"] == alice_accessor)),
        "{list}"
    );
    assert!(!out.contains("hst."), "a secret listed: {out}");
    let (code, _, err) = as_token(&admin, &["acl", "token", "revoke", alice_accessor]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = as_token(&alice, &["jobs"]);
    assert_eq!(code, 3, "a revoked token: {err}");
    // A token with a TTL works until it expires, then is refused.
    let (code, out, err) = as_token(
        &admin,
        &[
            "acl", "token", "create", "--user", "tmp", "--ttl", "5s", "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let short = last_json(&out)["token"]
        .as_str()
        .expect("token")
        .to_string();
    let (code, _, err) = as_token(&short, &["jobs"]);
    assert_eq!(code, 0, "a fresh token with a TTL: {err}");
    wait_for("the short token to expire", Duration::from_secs(20), || {
        (as_token(&short, &["jobs"]).0 == 3).then_some(())
    });
}

/// The DER of the first certificate in a PEM file.
fn der_of(path: &Path) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path)
        .expect("pem")
        .next()
        .expect("a certificate")
        .expect("a certificate")
        .to_vec()
}

/// The certificate a TLS server at `addr` presents to a new connection.
fn served_cert(addr: &str) -> Option<Vec<u8>> {
    let root = security::client_certs_dir()?;
    let setup = tls::load(&root, Role::Client, Some("root")).ok()?;
    let mut tcp = std::net::TcpStream::connect(addr).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let mut conn = rustls::ClientConnection::new(setup.client.clone(), name).ok()?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).ok()?;
    }
    Some(conn.peer_certificates()?.first()?.to_vec())
}

#[test]
fn sighup_reloads_certificates_for_new_connections() {
    let c = Cluster::start("sec-hup", 1, 0, 1);
    c.wait_leader(Duration::from_secs(30));
    let addr = c.master_addrs[0].clone();
    let crt = c
        .dir
        .path()
        .join("certs")
        .join("master-1")
        .join("master.1.crt");
    let before = served_cert(&addr).expect("a TLS handshake");
    assert_eq!(before, der_of(&crt), "the master serves its certificate");
    let ca = security::process_ca().expect("test CA");
    let req = certs::IssueRequest {
        role: Role::Master,
        name: "1".into(),
        hosts: vec![],
        valid_for: Duration::from_secs(2 * 24 * 3600),
    };
    certs::issue(&ca, &req, Some(crt.parent().expect("dir"))).expect("issue a new certificate");
    let renewed = der_of(&crt);
    assert_ne!(renewed, before);
    let pid = c.masters[0].pid().expect("master pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    wait_for(
        "new connections to get the new certificate",
        Duration::from_secs(10),
        || (served_cert(&addr)? == renewed).then_some(()),
    );
    // Still the same process, still serving clients.
    assert_eq!(c.masters[0].pid(), Some(pid));
    let out = c.cli(&["status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
