//! Certificates for the launcher's clusters: every local cluster runs secured by default
//! (docs/CONTRACT.md, "Security"), so the tests, the chaos tool and the benchmarks exercise
//! the same TLS links a deployment does.
//!
//! One CA per launching process (in a temporary directory) signs every cluster it starts:
//! the in-process clients (tests' wire calls, the benchmarks' and chaos tool's clients) then
//! need one TLS setup, installed once ([`install_client`]), whatever cluster they talk to.
//! Each process of a cluster gets its own directory under `DIR/certs/` with `ca.crt` and
//! its certificate (masters named by id, slaves by their `--name`); the client directory
//! holds `client.root.crt`, the administrator's certificate.

use super::LaunchError;
use hetsched_common::certs::{self, IssueRequest, Role};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

fn err(e: impl std::fmt::Display) -> LaunchError {
    LaunchError::Certs(e.to_string())
}

static CA: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The launching process's CA directory (created on first use).
pub fn process_ca() -> Result<PathBuf, LaunchError> {
    CA.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("hetsched-local-ca-{}-{nanos}", std::process::id()));
        make_ca(&dir).map(|_| dir).map_err(|e| e.to_string())
    })
    .clone()
    .map_err(LaunchError::Certs)
}

/// Makes the CA in `dir` (made by another process, as [`make_ca`] makes it) this process's
/// CA, unless it has one already: a benchmark's helper processes issue their in-process
/// slaves' certificates from the launching process's CA. Returns the process's CA.
pub fn use_ca(dir: &Path) -> Result<PathBuf, LaunchError> {
    CA.get_or_init(|| Ok(dir.to_path_buf()))
        .clone()
        .map_err(LaunchError::Certs)
}

/// Creates a CA in `dir` with the administrator's client certificate in `dir/client`.
pub fn make_ca(dir: &Path) -> Result<(), LaunchError> {
    certs::init_ca(dir, certs::DEFAULT_VALIDITY).map_err(err)?;
    issue(dir, Role::Client, "root", &client_dir_of(dir))?;
    Ok(())
}

/// The client certificates directory of the CA in `ca`.
pub fn client_dir_of(ca: &Path) -> PathBuf {
    ca.join("client")
}

/// Issues `role`/`name` from the CA in `ca` into `out` (with a copy of `ca.crt`).
pub fn issue(ca: &Path, role: Role, name: &str, out: &Path) -> Result<PathBuf, LaunchError> {
    let req = IssueRequest {
        role,
        name: name.to_string(),
        hosts: Vec::new(),
        valid_for: certs::DEFAULT_VALIDITY,
    };
    certs::issue(ca, &req, Some(out)).map_err(err)?;
    Ok(out.to_path_buf())
}

/// The `--certs-dir DIR` flags of a `role` process named `name`, issued from `ca` into
/// `cluster_dir/certs/PROC`.
pub fn process_flags(
    ca: &Path,
    cluster_dir: &Path,
    proc_name: &str,
    role: Role,
    name: &str,
) -> Result<Vec<String>, LaunchError> {
    let out = cluster_dir.join("certs").join(proc_name);
    issue(ca, role, name, &out)?;
    Ok(vec!["--certs-dir".into(), out.display().to_string()])
}

/// Installs the client TLS setup of the CA in `ca` in this process, unless it is installed
/// already (every cluster of a process shares the process CA). A setup from elsewhere (a
/// `HETSCHED_CERTS_DIR` the chaos tool was given) is replaced: this process now talks to
/// the cluster it launched.
pub fn install_client(ca: &Path) -> Result<(), LaunchError> {
    let dir = client_dir_of(ca);
    if hetsched_common::wire::tls::current().is_some_and(|t| t.dir == dir) {
        return Ok(());
    }
    let setup = hetsched_common::wire::tls::load(&dir, Role::Client, Some("root")).map_err(err)?;
    hetsched_common::wire::tls::install(Some(Arc::new(setup)));
    Ok(())
}

/// The process CA's client directory when this process has launched a secured cluster
/// (tests pass it to the CLI as `HETSCHED_CERTS_DIR`); `None` before that.
pub fn client_certs_dir() -> Option<PathBuf> {
    let ca = CA.get()?.as_ref().ok()?;
    Some(client_dir_of(ca))
}
