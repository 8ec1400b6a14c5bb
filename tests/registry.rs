//! `docker://` images pulled from a registry (issue 52 item 1): the test starts Debian's
//! `docker-registry` on a free port with a certificate signed by a CA it makes and an
//! htpasswd login, pushes its busybox image there with `skopeo`, and runs a
//! `docker://127.0.0.1:PORT/lib/bb:v1` task on a slave given `--registry-ca` and
//! `--registry-auth`: the task sees the image's marker; a tag the registry lacks ends its
//! task with reason `image`, step `pull`; a pull by `@sha256:` digest finds the same image;
//! the three share one stored image.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

const WAIT: Duration = Duration::from_secs(60);
const BUSYBOX: &str = "/usr/bin/busybox";
const REGISTRY: &str = "/usr/bin/docker-registry";

fn tools_here() -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let runc = ["/usr/sbin/runc", "/usr/bin/runc", "/sbin/runc"]
        .iter()
        .any(|p| Path::new(p).exists());
    let tools = ["skopeo", "htpasswd", "openssl"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    root && runc && tools && Path::new(REGISTRY).exists() && Path::new(BUSYBOX).exists()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The running registry (killed on drop).
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the registry in `dir` on a free port with TLS and an htpasswd login `u:pw`;
/// its address.
fn start_registry(dir: &Path) -> (Registry, String) {
    // A CA (what --registry-ca trusts) and the registry's certificate signed by it.
    let openssl = |args: &[&str]| run(Command::new("openssl").current_dir(dir).args(args));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=hetsched test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n",
    )
    .expect("ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let hash = run(Command::new("htpasswd").args(["-Bbn", "u", "pw"]));
    std::fs::write(dir.join("htpasswd"), hash).expect("htpasswd");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let d = dir.display();
    let config = format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {d}/data\n\
         http:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {d}/cert.pem\n    key: {d}/key.pem\n\
         auth:\n  htpasswd:\n    realm: hetsched-test\n    path: {d}/htpasswd\n"
    );
    std::fs::write(dir.join("config.yml"), config).expect("config");
    let child = Command::new(REGISTRY)
        .args(["serve", &format!("{d}/config.yml")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("registry.log")).expect("log"))
        .spawn()
        .expect("start docker-registry");
    let addr = format!("127.0.0.1:{port}");
    wait_for("the registry to listen", WAIT, || {
        std::net::TcpStream::connect(&addr).ok()
    });
    (Registry(child), addr)
}

#[test]
fn docker_images_are_pulled_from_a_registry_with_its_login() {
    if !tools_here() {
        eprintln!(
            "skipped: needs root, runc, busybox-static, docker-registry, skopeo, htpasswd, openssl"
        );
        return;
    }
    let work = Scratch::new("registry");
    let dir = work.path();
    let (_registry, addr) = start_registry(dir);
    let entries = hetsched_slave::container::fixture::busybox_entries(
        BUSYBOX.as_ref(),
        &["cat", "true"],
        "from-the-registry\n",
    )
    .expect("busybox entries");
    let config = hetsched_slave::container::fixture::Config {
        env: vec!["PATH=/bin".into()],
        ..Default::default()
    };
    hetsched_slave::container::fixture::write_oci_layout(&dir.join("bb"), "v1", &entries, &config)
        .expect("oci layout");
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("certs");
    std::fs::copy(dir.join("ca.pem"), certs.join("ca.crt")).expect("ca");
    run(Command::new("skopeo").args([
        "copy",
        "--quiet",
        "--dest-creds",
        "u:pw",
        "--dest-cert-dir",
        &certs.display().to_string(),
        &format!("oci:{}/bb:v1", dir.display()),
        &format!("docker://{addr}/lib/bb:v1"),
    ]));
    // Docker's config.json: auths.HOST.auth = base64(user:password) ("u:pw").
    let auth = format!(r#"{{"auths": {{"{addr}": {{"auth": "dTpwdw=="}}}}}}"#);
    std::fs::write(dir.join("auth.json"), auth).expect("auth");
    let ca = dir.join("ca.pem").display().to_string();
    let auth_file = dir.join("auth.json").display().to_string();
    let c = Cluster::start_full(
        "registry-run",
        1,
        1,
        2,
        &[],
        &["--registry-ca", &ca, "--registry-auth", &auth_file],
    );
    c.wait_leader(WAIT);
    c.wait_nodes_up(1, WAIT);
    // The manifest's digest, as the registry has it (for a pull by digest).
    let inspect = run(Command::new("skopeo").args([
        "inspect",
        "--creds",
        "u:pw",
        "--cert-dir",
        &certs.display().to_string(),
        &format!("docker://{addr}/lib/bb:v1"),
    ]));
    let digest = serde_json::from_str::<serde_json::Value>(&inspect).expect("inspect")["Digest"]
        .as_str()
        .expect("Digest")
        .to_string();
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pulls(&c, &addr, &digest)));
    if let Err(p) = result {
        eprintln!(
            "registry log:\n{}",
            std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
        );
        c.dump_logs();
        std::panic::resume_unwind(p);
    }
}

fn ended(c: &Cluster, job: u64) -> serde_json::Value {
    wait_for("the task to end", WAIT, || {
        c.tasks().into_iter().find(|t| {
            t["job_id"].as_u64() == Some(job)
                && ["succeeded", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or(""))
        })
    })
}

fn pulls(c: &Cluster, addr: &str, digest: &str) {
    let image = format!("docker://{addr}/lib/bb:v1");
    let by_digest = format!("docker://{addr}/lib/bb@{digest}");
    let jobs: Vec<u64> = [&image, &image, &by_digest]
        .iter()
        .map(|i| c.submit_id(&["--image", i, "--", "cat", "/etc/image-marker"]))
        .collect();
    for job in jobs {
        let t = ended(c, job);
        assert_eq!(t["state"], "succeeded", "{t}");
        let o = c.cli(&["logs", &t["id"].to_string()]);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "from-the-registry\n");
    }
    // One stored image for the three tasks (the digest names the same one), as the node
    // announces it.
    let images = wait_for("the node to list the pulled image", WAIT, || {
        let s = c.json(&["nodes"])?.to_string();
        s.contains(&image).then_some(s)
    });
    assert_eq!(
        images.matches(&image).count(),
        1,
        "one unpacked image: {images}"
    );
    let missing = format!("docker://{addr}/lib/bb:none");
    let job = c.submit_id(&["--image", &missing, "--", "true"]);
    let t = ended(c, job);
    assert_eq!(t["reason"], "image", "{t}");
    let d = t["reason_detail"].as_str().unwrap_or("");
    assert!(d.starts_with(&format!("image {missing}: pull:")), "{d}");
}
