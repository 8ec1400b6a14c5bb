//! Mutual TLS for every framed link (docs/CONTRACT.md, "Security").
//!
//! One place wraps streams: [`super::serve`] and [`super::Connection`] ask
//! [`current`] for the process's [`TlsSetup`] (installed once at start from `--certs-dir`,
//! replaced on `SIGHUP`), so every message kind, old or new, travels encrypted and every
//! handler learns the peer's verified [`Identity`] without code of its own.
//!
//! Verification: the peer's chain must lead to the cluster CA and be within its validity
//! period; host names are not checked on cluster links (the role and name inside the
//! certificate are what authorization uses, like Nomad's `server.<region>.nomad`), so a
//! moved process needs no new certificate. Servers ask for a client certificate but accept
//! a client without one (a user with only `ca.crt` and a token): such a peer has no identity
//! and may only send client requests, which then need a token.

use crate::certs::{self, CertError, Identity, Role};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The first byte of a TLS handshake record; a plain frame never starts with it (its
/// length would exceed the frame cap).
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// The one error a plain-TCP peer of a TLS port gets before the connection closes.
pub const PLAIN_ON_TLS_PORT: &str = "this port requires TLS with the cluster's certificates \
     (it runs secured): give --certs-dir or HETSCHED_CERTS_DIR, or run the server with --insecure";

/// A process's TLS material: what it presents and what it trusts.
pub struct TlsSetup {
    /// Server side (masters and slaves; `None` for a client).
    pub server: Option<Arc<ServerConfig>>,
    /// Client side.
    pub client: Arc<ClientConfig>,
    /// This process's own identity (`None`: a client with no certificate).
    pub identity: Option<Identity>,
    /// Where it was loaded from (for reloads and messages).
    pub dir: PathBuf,
    /// The certificate's end of validity.
    pub not_after: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSetup")
            .field("identity", &self.identity)
            .field("dir", &self.dir)
            .finish()
    }
}

static CURRENT: RwLock<Option<Arc<TlsSetup>>> = RwLock::new(None);

/// The API token a client process sends with every client request (`HETSCHED_TOKEN` or
/// `--token`); it decides who the caller is over the client certificate's name.
static CLIENT_TOKEN: RwLock<Option<String>> = RwLock::new(None);

/// Sets (or with `None` clears) the token sent with this process's client requests.
pub fn set_client_token(token: Option<String>) {
    if let Ok(mut t) = CLIENT_TOKEN.write() {
        *t = token;
    }
}

/// The token sent with this process's client requests, if any.
pub fn client_token() -> Option<String> {
    CLIENT_TOKEN.read().ok().and_then(|t| t.clone())
}

/// Installs (or with `None` removes) the process's TLS setup; later connections and
/// accepted connections use it.
pub fn install(setup: Option<Arc<TlsSetup>>) {
    if let Ok(mut c) = CURRENT.write() {
        *c = setup;
    }
}

/// The process's TLS setup, if it runs secured.
pub fn current() -> Option<Arc<TlsSetup>> {
    CURRENT.read().ok().and_then(|c| c.clone())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(e: impl std::fmt::Display) -> CertError {
    CertError::Invalid(format!("TLS setup: {e}"))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| CertError::Invalid(format!("{}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Invalid(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(CertError::Invalid(format!(
            "{}: no certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// Loads the TLS setup of a process of `role` from `dir`: `ca.crt` and its `ROLE.NAME`
/// certificate (`name` picks one when the directory holds several). Checks expiry and that
/// the certificate's identity has the expected role. A client without a certificate gets
/// a setup without identity.
pub fn load(dir: &Path, role: Role, name: Option<&str>) -> Result<TlsSetup, CertError> {
    let ca_path = dir.join("ca.crt");
    let mut roots = RootCertStore::empty();
    for c in load_certs(&ca_path)? {
        roots.add(c).map_err(tls_err)?;
    }
    let roots = Arc::new(roots);
    let own = certs::find_cert(dir, role, name)?;
    let (chain, key, identity, not_after) = match own {
        Some((crt, key)) => {
            let chain = load_certs(&crt)?;
            let not_after = certs::check_validity(&crt, &chain[0])?;
            let identity = certs::identity_of(&chain[0]).ok_or_else(|| {
                CertError::Invalid(format!(
                    "{} carries no hetsched identity (issue it with hetsched certs issue)",
                    crt.display()
                ))
            })?;
            if identity.role != role {
                return Err(CertError::Invalid(format!(
                    "{} is a {} certificate, this process needs a {role} one",
                    crt.display(),
                    identity.role
                )));
            }
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| CertError::Invalid(format!("{}: {e}", key.display())))?;
            (Some(chain), Some(key), Some(identity), Some(not_after))
        }
        None if role == Role::Client => (None, None, None, None),
        None => {
            return Err(CertError::Invalid(format!(
                "{} has no {role} certificate ({role}.NAME.crt); issue one with \
                 hetsched certs issue DIR --role {role} --name NAME",
                dir.display()
            )))
        }
    };
    let verifier = Arc::new(CaOnlyVerifier {
        inner: rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.clone(),
            provider(),
        )
        .build()
        .map_err(tls_err)?,
    });
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let client = match (&chain, &key) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(c.clone(), k.clone_key())
            .map_err(tls_err)?,
        _ => builder.with_no_client_auth(),
    };
    let server = match (chain, key) {
        (Some(c), Some(k)) if role != Role::Client => {
            let cv = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                .allow_unauthenticated()
                .build()
                .map_err(tls_err)?;
            let cfg = ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(tls_err)?
                .with_client_cert_verifier(cv)
                .with_single_cert(c, k)
                .map_err(tls_err)?;
            Some(Arc::new(cfg))
        }
        _ => None,
    };
    Ok(TlsSetup {
        server,
        client: Arc::new(client),
        identity,
        dir: dir.to_path_buf(),
        not_after,
    })
}

/// The server name sent in the handshake (not checked, see the module doc).
pub fn server_name(addr: &str) -> ServerName<'static> {
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr);
    ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| ServerName::try_from("hetsched").expect("a valid DNS name"))
}

/// The identity in a finished handshake's peer certificate.
pub fn peer_identity(certs: Option<&[CertificateDer<'_>]>) -> Option<Identity> {
    certs
        .and_then(|c| c.first())
        .and_then(|c| certs::identity_of(c))
}

/// Checks the chain and validity against the cluster CA, not the host name.
#[derive(Debug)]
struct CaOnlyVerifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for CaOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Ok(v) => Ok(v),
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
