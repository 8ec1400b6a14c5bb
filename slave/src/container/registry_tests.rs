//! A pull against a small HTTPS registry served here (a CA-signed certificate from
//! `hetsched_common::certs`): the Bearer challenge answered with a token fetched with the
//! host's Basic credentials, a redirected blob, layers skipped when the image is had, and a
//! blob whose bytes do not match its digest refused.

use super::*;
use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};

const LAYER: &[u8] = b"layer bytes";
const CONFIG: &[u8] = br#"{"config":{"Cmd":["/bin/sh"]},"rootfs":{"diff_ids":[]}}"#;

struct Served {
    addr: String,
    manifest_digest: String,
    layer_gets: Arc<AtomicUsize>,
}

/// Serves `lib/bb:v1` on a thread; `tamper`: the layer's bytes are changed.
fn serve(dir: &Path, tamper: bool) -> Served {
    use hetsched_common::certs;
    certs::init_ca(dir, std::time::Duration::from_secs(3600)).unwrap();
    let req = certs::IssueRequest {
        role: certs::Role::Slave,
        name: "reg".into(),
        hosts: vec!["127.0.0.1".into()],
        valid_for: std::time::Duration::from_secs(3600),
    };
    let crt = certs::issue(dir, &req, None).unwrap();
    let (_, key) = certs::cert_paths(dir, certs::Role::Slave, "reg");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&crt)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config_digest = sha256_hex(CONFIG);
    let layer_digest = sha256_hex(LAYER);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": CONFIG.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": LAYER.len()}],
    })
    .to_string();
    let manifest_digest = sha256_hex(manifest.as_bytes());
    let layer_gets = Arc::new(AtomicUsize::new(0));
    let site = Site {
        realm: format!("https://{addr}/token"),
        manifest: manifest.clone(),
        config_digest,
        layer_digest,
        tamper,
        gets: Arc::clone(&layer_gets),
    };
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let conn = rustls::ServerConnection::new(Arc::clone(&tls)).unwrap();
            let mut t = rustls::StreamOwned::new(conn, s);
            let (path, auth) = match read_head(&mut t) {
                Some(h) => h,
                None => continue,
            };
            let (status, headers, body) = route(&site, &path, auth.as_deref());
            let mut head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for h in headers {
                head.push_str(&h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let _ = t.write_all(head.as_bytes());
            let _ = t.write_all(&body);
            let _ = t.flush();
            t.conn.send_close_notify();
            let _ = t.flush();
        }
    });
    Served {
        addr,
        manifest_digest,
        layer_gets,
    }
}

/// What the served registry holds.
struct Site {
    realm: String,
    manifest: String,
    config_digest: String,
    layer_digest: String,
    tamper: bool,
    gets: Arc<AtomicUsize>,
}

/// The answer to `GET path` with `Authorization: auth`: status, headers, body.
fn route(site: &Site, path: &str, auth: Option<&str>) -> (&'static str, Vec<String>, Vec<u8>) {
    let bearer = auth == Some("Bearer tok");
    if path.starts_with("/token?") {
        // Basic u:pw.
        if auth == Some("Basic dTpwdw==") && path.contains("scope=repository%3Alib%2Fbb%3Apull") {
            ("200 OK", vec![], br#"{"token":"tok"}"#.to_vec())
        } else {
            ("403 Forbidden", vec![], vec![])
        }
    } else if !bearer {
        let h = format!(
                    "WWW-Authenticate: Bearer realm=\"{}\",service=\"test\",scope=\"repository:lib/bb:pull\"",
        site.realm
                );
        ("401 Unauthorized", vec![h], vec![])
    } else if path == "/v2/lib/bb/manifests/v1" {
        let h = format!("Content-Type: {OCI_MANIFEST}");
        ("200 OK", vec![h], site.manifest.clone().into_bytes())
    } else if path == format!("/v2/lib/bb/blobs/{}", site.config_digest) {
        (
            "307 Temporary Redirect",
            vec!["Location: /storage/config".into()],
            vec![],
        )
    } else if path == "/storage/config" {
        ("200 OK", vec![], CONFIG.to_vec())
    } else if path == format!("/v2/lib/bb/blobs/{}", site.layer_digest) {
        site.gets.fetch_add(1, Ordering::SeqCst);
        let body = if site.tamper {
            b"other bytes".to_vec()
        } else {
            LAYER.to_vec()
        };
        ("200 OK", vec![], body)
    } else {
        (
            "404 Not Found",
            vec![],
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN"}]}"#.to_vec(),
        )
    }
}

/// The request's path and `Authorization`.
fn read_head<S: std::io::Read>(s: S) -> Option<(String, Option<String>)> {
    let mut r = BufReader::new(s.take(64 << 10));
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let path = line.split(' ').nth(1)?.to_string();
    let mut auth = None;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    Some((path, auth))
}

fn registry_for(dir: &Path, addr: &str) -> Registry {
    let auth = dir.join("config.json");
    std::fs::write(
        &auth,
        format!(r#"{{"auths": {{"{addr}": {{"auth": "dTpwdw=="}}}}}}"#),
    )
    .unwrap();
    Registry::new(Some(&dir.join("ca.crt")), Some(&auth)).unwrap()
}

#[test]
fn a_pull_answers_the_token_challenge_and_checks_every_blob() {
    let d = tempfile::tempdir().unwrap();
    let s = serve(d.path(), false);
    let reg = registry_for(d.path(), &s.addr);
    let dest = d.path().join("pulled");
    reg.pull(&s.addr, "lib/bb", "v1", &dest, &|_| false)
        .unwrap();
    let r = super::super::source::read_oci_dir(&dest, None).unwrap();
    assert_eq!(r.digest, s.manifest_digest);
    assert_eq!(r.config.cmd, vec!["/bin/sh".to_string()]);
    assert_eq!(std::fs::read(&r.layers[0].path).unwrap(), LAYER);
    assert_eq!(s.layer_gets.load(Ordering::SeqCst), 1);
    // An image the store has: no layer fetched.
    let again = d.path().join("again");
    reg.pull(&s.addr, "lib/bb", "v1", &again, &|dg| {
        dg == s.manifest_digest
    })
    .unwrap();
    assert_eq!(s.layer_gets.load(Ordering::SeqCst), 1);
    // No such tag; no credentials.
    let e = reg
        .pull(&s.addr, "lib/bb", "v2", &d.path().join("x"), &|_| false)
        .unwrap_err();
    assert!(
        e.0.contains("404") && e.0.contains("MANIFEST_UNKNOWN"),
        "{e}"
    );
    let anon = Registry::new(Some(&d.path().join("ca.crt")), None).unwrap();
    let e = anon
        .pull(&s.addr, "lib/bb", "v1", &d.path().join("y"), &|_| false)
        .unwrap_err();
    assert!(e.0.contains("token") && e.0.contains("403"), "{e}");
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let s = serve(d.path(), true);
    let reg = registry_for(d.path(), &s.addr);
    let e = reg
        .pull(&s.addr, "lib/bb", "v1", &d.path().join("p"), &|_| false)
        .unwrap_err();
    assert!(e.0.contains("digest mismatch"), "{e}");
    // And a registry whose CA is not trusted is refused.
    let other = Registry::new(None, None).unwrap();
    let e = other
        .pull(&s.addr, "lib/bb", "v1", &d.path().join("q"), &|_| false)
        .unwrap_err();
    assert!(e.0.contains("certificate"), "{e}");
}
