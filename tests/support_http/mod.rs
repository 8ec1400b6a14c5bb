//! HTTP helpers of the API and dashboard tests: clusters whose processes serve `--http`,
//! and a minimal blocking HTTP/1.1 client (no client library needed).

#![allow(dead_code)]

use crate::support::{free_port, register_admin, Cluster, Proc, Scratch};
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

fn addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

impl HttpCluster {
    pub fn start(name: &str, n_masters: usize, n_slaves: usize, cpus: u32) -> Self {
        let dir = Scratch::new(name);
        let master_addrs: Vec<String> = (0..n_masters).map(|_| addr()).collect();
        let admin_addrs: Vec<String> = (0..n_masters).map(|_| addr()).collect();
        let master_http: Vec<String> = (0..n_masters).map(|_| addr()).collect();
        let slave_addrs: Vec<String> = (0..n_slaves).map(|_| addr()).collect();
        let slave_http: Vec<String> = (0..n_slaves).map(|_| addr()).collect();
        for (c, a) in master_addrs.iter().zip(&admin_addrs) {
            register_admin(c, a);
        }
        let peers = master_addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let path = |n: String| dir.path().join(n).display().to_string();
        let masters = (0..n_masters)
            .map(|i| {
                let id = i + 1;
                let args = [
                    "master",
                    "--id",
                    &id.to_string(),
                    "--listen",
                    &master_addrs[i],
                    "--peers",
                    &peers,
                    "--data-dir",
                    &path(format!("master-{id}")),
                    "--admin",
                    &admin_addrs[i],
                    "--http",
                    &master_http[i],
                ]
                .map(String::from)
                .to_vec();
                Proc::start(&format!("master-{id}"), args, dir.path())
            })
            .collect();
        let slaves = (0..n_slaves)
            .map(|i| {
                let n = i + 1;
                let args = [
                    "slave",
                    "--listen",
                    &slave_addrs[i],
                    "--masters",
                    &master_addrs.join(","),
                    "--data-dir",
                    &path(format!("slave-{n}")),
                    "--cpus",
                    &cpus.to_string(),
                    "--mem",
                    "4096",
                    "--gpus",
                    "1",
                    "--name",
                    &format!("slave-{n}"),
                    "--http",
                    &slave_http[i],
                ]
                .map(String::from)
                .to_vec();
                Proc::start(&format!("slave-{n}"), args, dir.path())
            })
            .collect();
        HttpCluster {
            cluster: Cluster {
                dir,
                masters,
                master_addrs,
                admin_addrs,
                slaves,
                slave_addrs,
            },
            master_http,
            slave_http,
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

/// One HTTP/1.1 request (`Connection: close`); `Err` when the server cannot be reached.
pub fn request(method: &str, addr: &str, path: &str, body: Option<&str>) -> Result<Answer, String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
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
