//! Pulling `docker://HOST/NAME[:TAG|@sha256:…]` from an OCI registry over HTTPS (the
//! distribution spec): the manifest by tag or digest (an OCI index or Docker manifest list
//! resolved to this host's `linux` platform), then the config and layers as blobs, each
//! checked against its digest as it arrives. The registry's auth: a `401` with
//! `WWW-Authenticate: Bearer realm=…,service=…,scope=…` is answered by fetching a token from
//! the realm (with the host's credentials, if any); `Basic` by sending the credentials.
//!
//! What a pull writes is an OCI image layout (`index.json`, `blobs/sha256/…`), which the
//! store then reads like any `oci:` image ([`super::source::read_oci_dir`]), verifying every
//! digest again. `slave --registry-ca FILE` adds PEM CAs to the system's
//! (`/etc/ssl/certs/ca-certificates.crt`); `slave --registry-auth FILE` reads Docker's
//! `config.json` (`{"auths": {"HOST": {"auth": "base64(user:pass)"}}}`).

use base64::Engine as _;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The system's CA bundle (Debian's `ca-certificates`), read when present.
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Longest manifest or token response read, bytes.
const MAX_DOC: usize = 4 << 20;
/// Longest wait for a connection, a response's head or the next piece of a body.
const IO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Redirects followed per request (blob stores often redirect).
const MAX_REDIRECTS: usize = 5;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Why the registry setup or a pull failed (a pull's text is the task's `reason_detail`
/// after `image REF: pull:`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RegistryError(pub String);

fn err(m: impl Into<String>) -> RegistryError {
    RegistryError(m.into())
}

/// The slave's registry settings: trusted CAs and credentials per host.
#[derive(Clone)]
pub struct Registry {
    tls: Arc<rustls::ClientConfig>,
    /// `host` → (user, password).
    auths: HashMap<String, (String, String)>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<_> = self.auths.keys().collect();
        f.debug_struct("Registry")
            .field("credentials_for", &hosts)
            .finish()
    }
}

impl Registry {
    /// The settings from `--registry-ca` and `--registry-auth` (an unreadable or malformed
    /// file is an error, reported at slave start).
    pub fn new(ca: Option<&Path>, auth: Option<&Path>) -> Result<Self, RegistryError> {
        let mut roots = rustls::RootCertStore::empty();
        if Path::new(SYSTEM_CAS).exists() {
            for c in read_pem(Path::new(SYSTEM_CAS))? {
                let _ = roots.add(c);
            }
        }
        if let Some(f) = ca {
            let certs = read_pem(f).map_err(|e| err(format!("--registry-ca {e}")))?;
            if certs.is_empty() {
                return Err(err(format!(
                    "--registry-ca {}: no certificate in it",
                    f.display()
                )));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| err(format!("--registry-ca {}: {e}", f.display())))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| err(format!("TLS setup: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let auths = match auth {
            Some(f) => {
                let bytes = std::fs::read(f)
                    .map_err(|e| err(format!("--registry-auth {}: {e}", f.display())))?;
                parse_auths(&bytes)
                    .map_err(|e| err(format!("--registry-auth {}: {e}", f.display())))?
            }
            None => HashMap::new(),
        };
        Ok(Self {
            tls: Arc::new(tls),
            auths,
        })
    }

    /// Pulls `host/name` at `reference` (a tag or `sha256:…`) into `dest` as an OCI layout.
    /// The layers are fetched only when `have(manifest_digest)` is false (the store holds the
    /// image unpacked already). Blocking: runs its own small I/O loop.
    pub fn pull(
        &self,
        host: &str,
        name: &str,
        reference: &str,
        dest: &Path,
        have: &dyn Fn(&str) -> bool,
    ) -> Result<(), RegistryError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(format!("I/O loop: {e}")))?;
        let mut s = Session {
            reg: self,
            host: host.to_string(),
            name: name.to_string(),
            auth: None,
        };
        rt.block_on(s.pull(reference, dest, have))
    }
}

fn read_pem(f: &Path) -> Result<Vec<CertificateDer<'static>>, RegistryError> {
    CertificateDer::pem_file_iter(f)
        .map_err(|e| err(format!("{}: {e}", f.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(format!("{}: {e}", f.display())))
}

#[derive(serde::Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
}

#[derive(serde::Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Docker's `config.json` `auths`: keys `HOST`, `https://HOST` or `https://HOST/v1/`, each
/// with `auth` (base64 of `user:password`) or `username` and `password`.
pub fn parse_auths(bytes: &[u8]) -> Result<HashMap<String, (String, String)>, String> {
    let f: AuthFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for (key, e) in f.auths {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host).to_string();
        let pair = match (e.auth, e.username, e.password) {
            (Some(a), _, _) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(a.trim())
                    .map_err(|e| format!("auths.{key}.auth: not base64 ({e})"))?;
                let text = String::from_utf8(raw)
                    .map_err(|_| format!("auths.{key}.auth: not UTF-8 user:password"))?;
                let (u, p) = text
                    .split_once(':')
                    .ok_or_else(|| format!("auths.{key}.auth: not user:password"))?;
                (u.to_string(), p.to_string())
            }
            (None, Some(u), Some(p)) => (u, p),
            _ => continue,
        };
        out.insert(host, pair);
    }
    Ok(out)
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
pub enum Challenge {
    /// `Basic realm=…`.
    Basic,
    /// `Bearer realm=…,service=…,scope=…`.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// `service`, if given.
        service: Option<String>,
        /// `scope`, if given.
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value (`None`: a scheme not supported).
pub fn parse_challenge(v: &str) -> Option<Challenge> {
    let (scheme, rest) = v.trim().split_once(' ').unwrap_or((v.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params = HashMap::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (k, after) = s.split_once('=')?;
        let after = after.trim_start();
        let (val, tail) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            after.split_once(',').unwrap_or((after, ""))
        };
        params.insert(k.trim().to_ascii_lowercase(), val.to_string());
        s = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge::Bearer {
        realm: params.remove("realm")?,
        service: params.remove("service"),
        scope: params.remove("scope"),
    })
}

/// An `https://` URL, split: `host[:port]` and the path with its query.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Url {
    host: String,
    path: String,
}

fn parse_url(u: &str) -> Result<Url, RegistryError> {
    let rest = u
        .strip_prefix("https://")
        .ok_or_else(|| err(format!("{u:?}: only https:// is used")))?;
    let (host, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path
    };
    Ok(Url {
        host: host.to_string(),
        path,
    })
}

/// `host[:port]` → the name TLS checks and the address to dial (port 443 by default).
fn dial_of(host: &str) -> (String, String) {
    if let Some(rest) = host.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').unwrap_or("443");
        return (ip.to_string(), format!("[{ip}]:{port}"));
    }
    match host.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), format!("{h}:{p}")),
        None => (host.to_string(), format!("{host}:443")),
    }
}

fn query_escape(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

fn sha256_hex(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn blob_hex(digest: &str) -> Result<&str, RegistryError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| err(format!("digest {digest:?} is not sha256:<64 hex digits>")))
}

type Resp = hyper::Response<hyper::body::Incoming>;

/// One pull's connection state: the repository and the `Authorization` that worked.
struct Session<'a> {
    reg: &'a Registry,
    host: String,
    name: String,
    auth: Option<String>,
}

#[derive(serde::Deserialize)]
struct Desc {
    digest: String,
    #[serde(default)]
    platform: Option<Plat>,
}

#[derive(serde::Deserialize)]
struct Plat {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

#[derive(serde::Deserialize)]
struct ManifestDoc {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    #[serde(default)]
    manifests: Option<Vec<Desc>>,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Option<Vec<Desc>>,
}

impl Session<'_> {
    async fn pull(
        &mut self,
        reference: &str,
        dest: &Path,
        have: &dyn Fn(&str) -> bool,
    ) -> Result<(), RegistryError> {
        let blobs = dest.join("blobs").join("sha256");
        std::fs::create_dir_all(&blobs).map_err(|e| err(format!("{}: {e}", blobs.display())))?;
        let (mut digest, mut bytes, mut doc) = self.manifest(reference).await?;
        if let Some(list) = doc.manifests.take() {
            let arch = super::source::host_arch();
            let pick = list
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == arch)
                })
                .ok_or_else(|| err(format!("no linux/{arch} image in the index {digest}")))?;
            (digest, bytes, doc) = self.manifest(&pick.digest).await?;
        }
        let (config, layers) = match (doc.config, doc.layers) {
            (Some(c), Some(l)) => (c, l),
            _ => {
                return Err(err(format!(
                    "manifest {digest} ({:?}) has no config and layers",
                    doc.media_type
                )))
            }
        };
        write_blob(&blobs, &digest, &bytes)?;
        self.blob(&config.digest, &blobs).await?;
        if !have(&digest) {
            for l in &layers {
                self.blob(&l.digest, &blobs).await?;
            }
        }
        let media = if doc.media_type.is_empty() {
            OCI_MANIFEST.to_string()
        } else {
            doc.media_type
        };
        let index = serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": media, "digest": digest, "size": bytes.len()}],
        });
        std::fs::write(dest.join("index.json"), index.to_string())
            .map_err(|e| err(format!("index.json: {e}")))
    }

    /// The manifest (or index) at `reference`: its digest (checked against a digest
    /// reference and the registry's `Docker-Content-Digest`), bytes and parsed form.
    async fn manifest(
        &mut self,
        reference: &str,
    ) -> Result<(String, Vec<u8>, ManifestDoc), RegistryError> {
        let path = format!("/v2/{}/manifests/{reference}", self.name);
        let accept = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST].join(", ");
        let resp = self.get(&path, &accept).await?;
        let sent = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = read_small(resp, "manifest").await?;
        let digest = sha256_hex(&bytes);
        let expected = sent.or_else(|| reference.starts_with("sha256:").then(|| reference.into()));
        if reference.starts_with("sha256:") && reference != digest {
            return Err(err(format!(
                "manifest {reference}: digest mismatch (the registry sent {digest})"
            )));
        }
        if let Some(e) = expected.filter(|e| e.starts_with("sha256:") && *e != digest) {
            return Err(err(format!(
                "manifest {reference}: digest mismatch (Docker-Content-Digest {e}, content {digest})"
            )));
        }
        let doc: ManifestDoc = serde_json::from_slice(&bytes)
            .map_err(|e| err(format!("manifest {reference}: {e}")))?;
        Ok((digest, bytes, doc))
    }

    /// Fetches blob `digest` into `blobs/<hex>`, checking its digest as it streams.
    async fn blob(&mut self, digest: &str, blobs: &Path) -> Result<(), RegistryError> {
        let hex = blob_hex(digest)?;
        let file = blobs.join(hex);
        if file.exists() {
            return Ok(());
        }
        let path = format!("/v2/{}/blobs/{digest}", self.name);
        let mut resp = self.get(&path, "*/*").await?;
        let part = blobs.join(format!("{hex}.part"));
        let mut out =
            std::fs::File::create(&part).map_err(|e| err(format!("{}: {e}", part.display())))?;
        let mut h = Sha256::new();
        loop {
            let next = tokio::time::timeout(IO_TIMEOUT, resp.body_mut().frame())
                .await
                .map_err(|_| err(format!("blob {digest}: stalled for {IO_TIMEOUT:?}")))?;
            let Some(frame) = next else { break };
            let frame = frame.map_err(|e| err(format!("blob {digest}: {e}")))?;
            if let Ok(data) = frame.into_data() {
                h.update(&data);
                out.write_all(&data)
                    .map_err(|e| err(format!("{}: {e}", part.display())))?;
            }
        }
        let got = format!("sha256:{:x}", h.finalize());
        if got != digest {
            let _ = std::fs::remove_file(&part);
            return Err(err(format!(
                "blob {digest}: digest mismatch (the registry sent {got})"
            )));
        }
        std::fs::rename(&part, &file).map_err(|e| err(format!("{}: {e}", file.display())))
    }

    /// `GET path` on the registry, answering one auth challenge and following redirects.
    async fn get(&mut self, path: &str, accept: &str) -> Result<Resp, RegistryError> {
        let mut url = Url {
            host: self.host.clone(),
            path: path.to_string(),
        };
        let mut challenged = false;
        for _ in 0..=MAX_REDIRECTS {
            let auth = if url.host == self.host {
                self.auth.clone()
            } else {
                None
            };
            let resp = self.send(&url, accept, auth.as_deref()).await?;
            let status = resp.status();
            if status == hyper::StatusCode::UNAUTHORIZED && !challenged && url.host == self.host {
                challenged = true;
                self.answer(&resp).await?;
                continue;
            }
            if status.is_redirection() {
                let loc = resp
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| err(format!("{path}: {status} without a Location")))?;
                url = if loc.starts_with('/') {
                    Url {
                        host: url.host.clone(),
                        path: loc.to_string(),
                    }
                } else {
                    parse_url(loc)?
                };
                continue;
            }
            if !status.is_success() {
                let body = read_small(resp, "error").await.unwrap_or_default();
                let text = String::from_utf8_lossy(&body);
                let text: String = text.trim().chars().take(300).collect();
                return Err(err(format!("GET {path}: {status}: {text}")));
            }
            return Ok(resp);
        }
        Err(err(format!(
            "GET {path}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// Sets `self.auth` from a `401`'s challenge.
    async fn answer(&mut self, resp: &Resp) -> Result<(), RegistryError> {
        let creds = self.reg.auths.get(&self.host);
        let basic = creds.map(|(u, p)| {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            format!("Basic {b}")
        });
        let header = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match parse_challenge(header) {
            Some(Challenge::Basic) => {
                self.auth = Some(basic.ok_or_else(|| {
                    err(format!(
                        "{} asks for a login and --registry-auth has none for it",
                        self.host
                    ))
                })?);
                Ok(())
            }
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.name));
                let mut q = format!("scope={}", query_escape(&scope));
                if let Some(s) = service {
                    q = format!("service={}&{q}", query_escape(&s));
                }
                let sep = if realm.contains('?') { '&' } else { '?' };
                let token_url = parse_url(&format!("{realm}{sep}{q}"))?;
                let resp = self
                    .send(&token_url, "application/json", basic.as_deref())
                    .await?;
                if !resp.status().is_success() {
                    return Err(err(format!("token from {realm}: {}", resp.status())));
                }
                let body = read_small(resp, "token").await?;
                let v: serde_json::Value = serde_json::from_slice(&body)
                    .map_err(|e| err(format!("token from {realm}: {e}")))?;
                let t = v
                    .get("token")
                    .or_else(|| v.get("access_token"))
                    .and_then(|t| t.as_str())
                    .ok_or_else(|| err(format!("token from {realm}: no token in the answer")))?;
                self.auth = Some(format!("Bearer {t}"));
                Ok(())
            }
            None => Err(err(format!(
                "{}: 401 with an unsupported challenge {header:?}",
                self.host
            ))),
        }
    }

    /// One request on a fresh TLS connection.
    async fn send(
        &self,
        url: &Url,
        accept: &str,
        auth: Option<&str>,
    ) -> Result<Resp, RegistryError> {
        let (name, addr) = dial_of(&url.host);
        let fail = |e: &dyn std::fmt::Display| err(format!("{}: {e}", url.host));
        let tcp = tokio::time::timeout(IO_TIMEOUT, tokio::net::TcpStream::connect(&addr))
            .await
            .map_err(|_| err(format!("{}: connect timed out", url.host)))?
            .map_err(|e| fail(&e))?;
        let server = ServerName::try_from(name.clone()).map_err(|e| fail(&e))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.reg.tls))
            .connect(server, tcp)
            .await
            .map_err(|e| fail(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::get(url.path.as_str())
            .header("host", url.host.as_str())
            .header("user-agent", "hetsched-slave")
            .header("accept", accept);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let req = req
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .map_err(|e| fail(&e))?;
        tokio::time::timeout(IO_TIMEOUT, sender.send_request(req))
            .await
            .map_err(|_| err(format!("{}: no answer in {IO_TIMEOUT:?}", url.host)))?
            .map_err(|e| fail(&e))
    }
}

async fn read_small(resp: Resp, what: &str) -> Result<Vec<u8>, RegistryError> {
    let limited = http_body_util::Limited::new(resp.into_body(), MAX_DOC);
    let b = limited
        .collect()
        .await
        .map_err(|e| err(format!("{what}: {e}")))?;
    Ok(b.to_bytes().to_vec())
}

fn write_blob(blobs: &Path, digest: &str, bytes: &[u8]) -> Result<(), RegistryError> {
    let f: PathBuf = blobs.join(blob_hex(digest)?);
    std::fs::write(&f, bytes).map_err(|e| err(format!("{}: {e}", f.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:lib/bb:pull""#,
        );
        assert_eq!(
            c,
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:lib/bb:pull".into()),
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None, "no realm");
    }

    #[test]
    fn docker_config_auths_parse() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let cfg = format!(
            r#"{{"auths": {{"https://reg.example/v1/": {{"auth": "{b64}"}},
                "127.0.0.1:5000": {{"username": "bob", "password": "pw"}},
                "empty.example": {{}}}}}}"#
        );
        let a = parse_auths(cfg.as_bytes()).unwrap();
        assert_eq!(a["reg.example"], ("alice".into(), "s3:cret".into()));
        assert_eq!(a["127.0.0.1:5000"], ("bob".into(), "pw".into()));
        assert!(!a.contains_key("empty.example"));
        assert!(parse_auths(br#"{"auths": {"h": {"auth": "!!"}}}"#)
            .unwrap_err()
            .contains("not base64"));
        assert!(parse_auths(b"[").is_err());
    }

    #[test]
    fn urls_and_hosts_split() {
        assert_eq!(
            parse_url("https://auth.example:8443/token?a=b").unwrap(),
            Url {
                host: "auth.example:8443".into(),
                path: "/token?a=b".into()
            }
        );
        assert_eq!(parse_url("https://h").unwrap().path, "/");
        assert!(parse_url("http://h/x").is_err());
        assert_eq!(
            dial_of("127.0.0.1:5000"),
            ("127.0.0.1".into(), "127.0.0.1:5000".into())
        );
        assert_eq!(
            dial_of("reg.example"),
            ("reg.example".into(), "reg.example:443".into())
        );
        assert_eq!(dial_of("[::1]:5000"), ("::1".into(), "[::1]:5000".into()));
        assert_eq!(
            query_escape("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }

    #[test]
    fn bad_setup_files_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let ca = d.path().join("ca.pem");
        std::fs::write(&ca, "not a pem").unwrap();
        let e = Registry::new(Some(&ca), None).unwrap_err();
        assert!(e.0.contains("no certificate"), "{e}");
        let auth = d.path().join("config.json");
        std::fs::write(&auth, "{").unwrap();
        let e = Registry::new(None, Some(&auth)).unwrap_err();
        assert!(e.0.contains("--registry-auth"), "{e}");
        assert!(Registry::new(None, Some(&d.path().join("none"))).is_err());
        let e = Registry::new(Some(&d.path().join("none")), None).unwrap_err();
        assert!(e.0.starts_with("--registry-ca "), "{e}");
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod serve_tests;
