//! Cluster certificates: a CA, and certificates that carry a role and a name
//! (docs/CONTRACT.md, "Security").
//!
//! The identity of a process is in its certificate twice: the subject (`CN=NAME`,
//! `OU=ROLE`) for people reading it with `openssl x509`, and a URI subject alternative name
//! `hetsched://ROLE/NAME`, which is what peers read after the handshake ([`identity_of`]).
//! Host names and addresses (`--hosts`) go in as DNS/IP alternative names so that HTTPS
//! clients (browsers, `curl`) can check them; the cluster's own links check the CA and the
//! role instead, like Nomad's `server.<region>.nomad` names, so an address change needs no
//! new certificate.
//!
//! Layout of a certificates directory: `ca.crt` (every process), `ca.key` (only where
//! certificates are issued), and `ROLE.NAME.crt` / `ROLE.NAME.key` per certificate. Key
//! files are written mode 0600.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The URI scheme of the identity alternative name.
pub const IDENTITY_SCHEME: &str = "hetsched://";

/// How long issued certificates are valid by default.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a certificate's holder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A master: Raft peers, serves clients and slaves.
    Master,
    /// A slave: registers, reports, forwards to other slaves.
    Slave,
    /// A client (a user or a tool).
    Client,
}

impl Role {
    /// The lowercase name used in files and certificates.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Slave => "slave",
            Role::Client => "client",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = CertError;
    fn from_str(s: &str) -> Result<Self, CertError> {
        match s {
            "master" => Ok(Role::Master),
            "slave" => Ok(Role::Slave),
            "client" => Ok(Role::Client),
            _ => Err(CertError::Invalid(format!(
                "role {s:?} is not one of master, slave, client"
            ))),
        }
    }
}

/// A verified peer: the role and name its certificate carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// Role.
    pub role: Role,
    /// Name (a master's or slave's name, a client's user).
    pub name: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.role, self.name)
    }
}

/// Errors of issuing and loading certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Bad input (a name, a role, a file's contents).
    #[error("{0}")]
    Invalid(String),
    /// The certificate library failed.
    #[error("certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// A certificate is outside its validity period.
    #[error("certificate {path} expired at {not_after} (issue a new one: hetsched certs issue)")]
    Expired {
        /// The file.
        path: PathBuf,
        /// Its end of validity.
        not_after: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks a certificate name: letters, digits, `-`, `_`, `.`; 1..=64 bytes (it becomes a
/// file name and a URI path).
pub fn check_name(name: &str) -> Result<(), CertError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(CertError::Invalid(format!(
            "name {name:?}: use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'"
        )))
    }
}

/// The certificate and key paths of `ROLE.NAME` in `dir`.
pub fn cert_paths(dir: &Path, role: Role, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{role}.{name}.crt")),
        dir.join(format!("{role}.{name}.key")),
    )
}

fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), CertError> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let _ = secret;
    let mut f = opts.open(path).map_err(io_err(path))?;
    #[cfg(unix)]
    if secret {
        // An existing file keeps its mode on open: tighten it.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(path))?;
    }
    f.write_all(contents.as_bytes()).map_err(io_err(path))?;
    Ok(())
}

fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(io_err(path))
}

fn validity(params: &mut rcgen::CertificateParams, valid_for: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack backwards for clocks that disagree by a few minutes.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::seconds(valid_for.as_secs() as i64);
}

/// Creates a cluster CA in `dir` (`ca.crt`, `ca.key`). Refuses to overwrite one.
pub fn init_ca(dir: &Path, valid_for: Duration) -> Result<PathBuf, CertError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
    if crt.exists() || key.exists() {
        return Err(CertError::Invalid(format!(
            "{} already holds a CA (ca.crt / ca.key); remove it or use another directory",
            dir.display()
        )));
    }
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hetsched cluster CA");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "hetsched");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(
        &mut params,
        valid_for.max(Duration::from_secs(10 * 365 * 24 * 3600)),
    );
    let kp = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&kp)?;
    write_file(&key, &kp.serialize_pem(), true)?;
    write_file(&crt, &cert.pem(), false)?;
    Ok(crt)
}

/// What to issue.
#[derive(Clone, Debug)]
pub struct IssueRequest {
    /// Role in the certificate.
    pub role: Role,
    /// Name in the certificate.
    pub name: String,
    /// Host names and IP addresses for HTTPS clients (always with `localhost`, `127.0.0.1`
    /// and `::1` for masters and slaves).
    pub hosts: Vec<String>,
    /// Validity.
    pub valid_for: Duration,
}

/// Issues `ROLE.NAME.crt` / `ROLE.NAME.key` in `ca_dir`, signed by its CA; with `out`, the
/// two files (and a copy of `ca.crt`) go there instead. Returns the certificate's path.
pub fn issue(ca_dir: &Path, req: &IssueRequest, out: Option<&Path>) -> Result<PathBuf, CertError> {
    check_name(&req.name)?;
    let ca_pem = read(&ca_dir.join("ca.crt"))?;
    let ca_key_pem = read(&ca_dir.join("ca.key"))?;
    let ca_key = rcgen::KeyPair::from_pem(&ca_key_pem)?;
    let ca_params = rcgen::CertificateParams::from_ca_cert_pem(&ca_pem)?;
    let ca = ca_params.self_signed(&ca_key)?;

    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, req.name.as_str());
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationalUnitName, req.role.as_str());
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "hetsched");
    let uri = format!("{IDENTITY_SCHEME}{}/{}", req.role, req.name);
    let mut sans = vec![rcgen::SanType::URI(uri.as_str().try_into()?)];
    let mut hosts = req.hosts.clone();
    if req.role != Role::Client {
        for h in ["localhost", "127.0.0.1", "::1"] {
            if !hosts.iter().any(|x| x == h) {
                hosts.push(h.to_string());
            }
        }
    }
    for h in &hosts {
        let h = h.trim();
        if h.is_empty() {
            continue;
        }
        match h.parse::<std::net::IpAddr>() {
            Ok(ip) => sans.push(rcgen::SanType::IpAddress(ip)),
            Err(_) => sans.push(rcgen::SanType::DnsName(h.try_into().map_err(|_| {
                CertError::Invalid(format!(
                    "host {h:?} is neither an IP address nor a DNS name"
                ))
            })?)),
        }
    }
    params.subject_alt_names = sans;
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    // Every cluster process is both a TLS server and a TLS client (masters dial masters,
    // slaves dial slaves); clients only dial.
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    if req.role != Role::Client {
        params
            .extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    }
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, req.valid_for);
    let kp = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&kp, &ca, &ca_key)?;
    let dir = out.unwrap_or(ca_dir);
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    if out.is_some() {
        write_file(&dir.join("ca.crt"), &ca_pem, false)?;
    }
    let (crt, key) = cert_paths(dir, req.role, &req.name);
    write_file(&key, &kp.serialize_pem(), true)?;
    write_file(&crt, &cert.pem(), false)?;
    Ok(crt)
}

/// The identity a certificate (DER) carries, from its `hetsched://ROLE/NAME` alternative
/// name. `None` when it has none (a certificate from another tool).
pub fn identity_of(der: &[u8]) -> Option<Identity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|g| match g {
        x509_parser::extensions::GeneralName::URI(u) => {
            let rest = u.strip_prefix(IDENTITY_SCHEME)?;
            let (role, name) = rest.split_once('/')?;
            check_name(name).ok()?;
            Some(Identity {
                role: role.parse().ok()?,
                name: name.to_string(),
            })
        }
        _ => None,
    })
}

/// Checks that a certificate (DER) is within its validity period now; returns its end.
pub fn check_validity(path: &Path, der: &[u8]) -> Result<SystemTime, CertError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| CertError::Invalid(format!("{}: not a certificate: {e}", path.display())))?;
    let v = cert.validity();
    let end = v.not_after.timestamp();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if now > end {
        return Err(CertError::Expired {
            path: path.to_path_buf(),
            not_after: v.not_after.to_string(),
        });
    }
    if now < v.not_before.timestamp() {
        return Err(CertError::Invalid(format!(
            "certificate {} is not valid before {} (check this machine's clock)",
            path.display(),
            v.not_before
        )));
    }
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(end.max(0) as u64))
}

/// Finds this process's certificate in `dir`: `ROLE.NAME.crt` when `name` is given and
/// present, else the only `ROLE.*.crt`. `Ok(None)` when there is none (allowed for
/// clients, which may authenticate by token alone).
pub fn find_cert(
    dir: &Path,
    role: Role,
    name: Option<&str>,
) -> Result<Option<(PathBuf, PathBuf)>, CertError> {
    if let Some(n) = name {
        let (c, k) = cert_paths(dir, role, n);
        if c.exists() {
            return Ok(Some((c, k)));
        }
    }
    let prefix = format!("{role}.");
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let f = e.file_name().to_string_lossy().to_string();
        if let Some(n) = f.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".crt")) {
            found.push(n.to_string());
        }
    }
    found.sort();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(cert_paths(dir, role, one))),
        many => Err(CertError::Invalid(format!(
            "{} holds several {role} certificates ({}); keep one per process directory{}",
            dir.display(),
            many.join(", "),
            name.map(|n| format!(" or issue {role}.{n}.crt"))
                .unwrap_or_default()
        ))),
    }
}
