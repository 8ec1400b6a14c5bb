//! HTTP helpers of the API and dashboard tests: clusters whose processes serve `--http`,
//! and a minimal blocking HTTP/1.1 client (no client library needed).

#![allow(dead_code)]

use crate::support::{test_spec, Cluster};
use hetsched::local::{ClusterSpec, SlaveSpec};
use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;

/// A cluster whose masters and slaves serve HTTP.
pub struct HttpCluster {
    pub cluster: Cluster,
    /// HTTP addresses of the masters, in id order.
    pub master_http: Vec<String>,
    /// HTTP addresses of the slaves.
    pub slave_http: Vec<String>,
}

impl HttpCluster {
    /// `n_masters` masters and `n_slaves` slaves (`cpus` cores, one emulated GPU each), all
    /// serving HTTP.
    pub fn start(name: &str, n_masters: usize, n_slaves: usize, cpus: u32) -> Self {
        let slave = SlaveSpec {
            cpus,
            mem_mib: 4096,
            // `--gpus 1` with the slave's default model, not the launcher's T4.
            gpus: 0,
            extra_args: vec!["--gpus".into(), "1".into()],
        };
        let cluster = Cluster::launch(
            name,
            ClusterSpec {
                masters: n_masters as u32,
                master_http: true,
                slaves: vec![slave; n_slaves],
                slave_http: true,
                ..test_spec()
            },
        );
        // A slave's /metrics port stays plain HTTP on a secured cluster.
        if let Ok(mut p) = plain_addrs().lock() {
            p.extend(cluster.slave_http.iter().cloned());
        }
        HttpCluster {
            master_http: cluster.master_http.clone(),
            slave_http: cluster.slave_http.clone(),
            cluster,
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// How a request authenticates against a secured master (docs/SECURITY.md).
#[derive(Clone, Debug)]
pub enum Auth {
    /// HTTPS with the test CA's administrator client certificate when this process runs
    /// secured clusters; plain HTTP otherwise (what every API test uses by default).
    Default,
    /// HTTPS with no credentials at all.
    Anonymous,
    /// HTTPS with `Authorization: Bearer TOKEN` and no client certificate.
    Bearer(String),
    /// Plain HTTP (an `--insecure` master, or a plain request to an HTTPS port).
    Plain,
}

/// Addresses that serve plain HTTP whatever the cluster (slaves' `--http`).
fn plain_addrs() -> &'static std::sync::Mutex<std::collections::HashSet<String>> {
    static PLAIN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    PLAIN.get_or_init(Default::default)
}

/// The TLS client of `auth` towards `addr`, or `None` for plain HTTP.
fn tls_client(auth: &Auth, addr: &str) -> Option<std::sync::Arc<rustls::ClientConfig>> {
    use hetsched_common::certs::Role;
    if plain_addrs().lock().is_ok_and(|p| p.contains(addr)) {
        return None;
    }
    let client_dir = hetsched::local::security::client_certs_dir()?;
    let dir = match auth {
        Auth::Plain => return None,
        Auth::Default => client_dir,
        // The CA directory holds ca.crt and no client certificate.
        Auth::Anonymous | Auth::Bearer(_) => client_dir.parent()?.to_path_buf(),
    };
    let setup = hetsched_common::wire::tls::load(&dir, Role::Client, Some("root"))
        .unwrap_or_else(|e| panic!("test TLS client from {}: {e}", dir.display()));
    Some(setup.client.clone())
}

/// A stream to `addr`, over TLS when `auth` asks for it.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

fn open(addr: &str, auth: &Auth) -> Result<Box<dyn Stream>, String> {
    let s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    match tls_client(auth, addr) {
        None => Ok(Box::new(s)),
        Some(cfg) => {
            let name =
                rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
            let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
            Ok(Box::new(rustls::StreamOwned::new(conn, s)))
        }
    }
}

/// One HTTP/1.1 request (`Connection: close`); `Err` when the server cannot be reached.
pub fn request(method: &str, addr: &str, path: &str, body: Option<&str>) -> Result<Answer, String> {
    request_as(&Auth::Default, method, addr, path, body)
}

/// [`request`] authenticating as `auth`.
pub fn request_as(
    auth: &Auth,
    method: &str,
    addr: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Answer, String> {
    let mut s = open(addr, auth)?;
    let body = body.unwrap_or("");
    let bearer = match auth {
        Auth::Bearer(t) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{bearer}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // A server may answer (413) and close before it read a large body: read the answer
    // whatever the write did.
    let wrote = s.write_all(req.as_bytes());
    let mut raw = Vec::new();
    let read = s.read_to_end(&mut raw);
    if raw.is_empty() {
        wrote.map_err(|e| e.to_string())?;
        read.map_err(|e| e.to_string())?;
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no header end")?;
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status")?;
    let rest = &raw[split + 4..];
    let body = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").ok_or("bad chunk")?;
        let size_text = String::from_utf8_lossy(&b[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).ok_or("short chunk")?);
        b = b.get(size + 2..).ok_or("short chunk")?;
    }
}

pub fn get(addr: &str, path: &str) -> Result<Answer, String> {
    request("GET", addr, path, None)
}

pub fn post(addr: &str, path: &str, body: &str) -> Result<Answer, String> {
    request("POST", addr, path, Some(body))
}

pub fn delete(addr: &str, path: &str) -> Result<Answer, String> {
    request("DELETE", addr, path, None)
}
