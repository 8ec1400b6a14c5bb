//! Security flags and commands (docs/CONTRACT.md, "Security"): `--certs-dir` / `--insecure`
//! for masters and slaves (secure by default: neither is an error), the client's
//! `--certs-dir` / `--token`, and `hetsched certs init|issue`.

use super::exit;
use hetsched_common::certs::{self, Role};
use hetsched_common::wire::tls;
use std::path::PathBuf;
use std::sync::Arc;

/// The banner an `--insecure` process logs at start.
pub const INSECURE_WARNING: &str = "RUNNING INSECURE (--insecure): no TLS, no authentication; \
     anyone who reaches these ports can run commands and act as any user";

/// `--certs-dir` / `--insecure` of `master` and `slave`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerSecurity {
    /// Directory with `ca.crt` and this process's certificate and key (`ROLE.NAME.crt`,
    /// `ROLE.NAME.key`; see `hetsched certs`). Required unless --insecure.
    #[arg(long, value_name = "DIR")]
    pub certs_dir: Option<PathBuf>,
    /// Run without TLS and without authentication (every caller trusted). Logged loudly.
    #[arg(long, conflicts_with = "certs_dir")]
    pub insecure: bool,
}

impl ServerSecurity {
    /// Loads and installs the TLS setup of a `role` process named `name`; `Ok(false)` when
    /// running --insecure. Neither flag: exit 2 naming both.
    pub fn install(&self, role: Role, name: Option<&str>) -> anyhow::Result<bool> {
        match (&self.certs_dir, self.insecure) {
            (Some(dir), _) => {
                let setup = tls::load(dir, role, name)
                    .map_err(|e| exit::bad_input(format!("--certs-dir: {e}")))?;
                tracing::info!(identity = ?setup.identity, dir = %dir.display(), "TLS on every link");
                tls::install(Some(Arc::new(setup)));
                Ok(true)
            }
            (None, true) => {
                tracing::warn!("{INSECURE_WARNING}");
                eprintln!("WARNING: {INSECURE_WARNING}");
                Ok(false)
            }
            (None, false) => Err(exit::bad_input(format!(
                "a {role} needs --certs-dir DIR (certificates from 'hetsched certs') or, to run \
                 without TLS and authentication, --insecure"
            ))),
        }
    }
}

/// Reloads the process's certificates from `dir` on every `SIGHUP` (a rotation without a
/// restart), and checks hourly how long the running one has left: connections made or accepted afterwards use the new ones; open ones keep
/// theirs. A directory that does not load (a missing file, an expired certificate, another
/// identity's role) is logged and the running certificates stay. Runs inside the process's
/// runtime until it stops.
pub async fn reload_on_sighup(dir: PathBuf, role: Role, name: Option<String>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot catch SIGHUP: certificates reload only on restart");
            return;
        }
    };
    let mut hourly = tokio::time::interval(std::time::Duration::from_secs(3600));
    loop {
        tokio::select! {
            got = hup.recv() => if got.is_none() { return },
            _ = hourly.tick() => {
                warn_near_expiry();
                continue;
            }
        }
        match tls::load(&dir, role, name.as_deref()) {
            Ok(setup) => {
                tracing::info!(
                    identity = ?setup.identity,
                    not_after = ?setup.not_after,
                    dir = %dir.display(),
                    "SIGHUP: certificates reloaded; new connections use them"
                );
                tls::install(Some(Arc::new(setup)));
            }
            Err(e) => tracing::error!(
                error = %e,
                dir = %dir.display(),
                "SIGHUP: certificates not reloaded, the running ones stay"
            ),
        }
    }
}

/// Logs a warning when the running certificate ends within a week, an error once it has
/// (peers then refuse this process's new connections: issue a new one and send `SIGHUP`).
fn warn_near_expiry() {
    let Some(end) = tls::current().and_then(|t| t.not_after) else {
        return;
    };
    match end.duration_since(std::time::SystemTime::now()) {
        Err(_) => tracing::error!(
            "this process's certificate has expired: issue a new one into --certs-dir and \
             send SIGHUP"
        ),
        Ok(left) if left < std::time::Duration::from_secs(7 * 24 * 3600) => tracing::warn!(
            left_s = left.as_secs(),
            "this process's certificate expires within a week: issue a new one into \
             --certs-dir and send SIGHUP"
        ),
        Ok(_) => {}
    }
}

impl ServerSecurity {
    /// The `SIGHUP` reloader of a secured process (`None` when --insecure).
    pub fn reloader(
        &self,
        role: Role,
        name: Option<String>,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        self.certs_dir
            .clone()
            .map(|dir| reload_on_sighup(dir, role, name))
    }
}

/// Installs the client's TLS setup when `certs_dir` is given (a client certificate in it is
/// optional: a token may authenticate instead), and the token sent with every request.
pub fn install_client(
    certs_dir: Option<&PathBuf>,
    user: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<()> {
    if let Some(t) = token.map(str::trim).filter(|t| !t.is_empty()) {
        if hetsched_common::tokens::parse(t).is_none() {
            return Err(exit::bad_input(
                "HETSCHED_TOKEN / --token is not a token (hst.ACCESSOR.SECRET, from \
                 hetsched acl bootstrap or acl token create)",
            ));
        }
        tls::set_client_token(Some(t.to_string()));
    }
    if let Some(dir) = certs_dir {
        let setup = tls::load(dir, Role::Client, user)
            .map_err(|e| exit::bad_input(format!("HETSCHED_CERTS_DIR / --certs-dir: {e}")))?;
        tls::install(Some(Arc::new(setup)));
    }
    Ok(())
}

/// `hetsched certs`.
#[derive(clap::Subcommand, Debug)]
pub enum CertsCommand {
    /// Create a cluster CA in DIR (ca.crt, ca.key 0600).
    Init {
        /// Directory (created).
        dir: PathBuf,
    },
    /// Issue a certificate signed by DIR's CA: ROLE.NAME.crt and ROLE.NAME.key (0600).
    Issue {
        /// Directory holding the CA.
        dir: PathBuf,
        /// master, slave or client.
        #[arg(long)]
        role: String,
        /// The name in the certificate (a slave's --name, a master's id, a client's user).
        #[arg(long)]
        name: String,
        /// Host names and addresses HTTPS clients will use (localhost and loopback are
        /// always in for masters and slaves).
        #[arg(long, value_delimiter = ',', value_name = "H,...")]
        hosts: Vec<String>,
        /// Write the certificate, its key and a copy of ca.crt to this directory (one
        /// directory per process) instead of DIR.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Validity, e.g. 90d, 1y.
        #[arg(long, default_value = "365d", value_parser = super::programs::parse_duration)]
        valid_for: std::time::Duration,
    },
}

/// Runs `hetsched certs ...`.
pub fn run(c: CertsCommand) -> anyhow::Result<()> {
    match c {
        CertsCommand::Init { dir } => {
            let crt = certs::init_ca(&dir, certs::DEFAULT_VALIDITY)
                .map_err(|e| exit::bad_input(e.to_string()))?;
            println!("{}", crt.display());
        }
        CertsCommand::Issue {
            dir,
            role,
            name,
            hosts,
            out,
            valid_for,
        } => {
            let role: Role = role
                .parse()
                .map_err(|e: certs::CertError| exit::bad_input(e.to_string()))?;
            let req = certs::IssueRequest {
                role,
                name,
                hosts,
                valid_for,
            };
            let crt = certs::issue(&dir, &req, out.as_deref())
                .map_err(|e| exit::bad_input(e.to_string()))?;
            println!("{}", crt.display());
        }
    }
    Ok(())
}
