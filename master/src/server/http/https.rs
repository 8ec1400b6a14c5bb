//! HTTPS and bearer tokens for the API and the dashboard (docs/SECURITY.md).
//!
//! A secured master serves its HTTP port over TLS with its own certificate (no client
//! certificate needed, so browsers and `curl --cacert ca.crt` work; one is accepted and
//! identifies its holder like on the cluster port). API requests (`/v1/...`) authenticate
//! with `Authorization: Bearer TOKEN`: none answers 401, a role that may not answers 403.
//! The dashboard's files, `/healthz`, `/readyz` and `/metrics` need no token (the dashboard
//! asks for one and sends it with its API calls). A plain-HTTP request on the HTTPS port
//! gets one clear 400 answer and the connection closes. The TLS setup is read per
//! connection, so a `SIGHUP` reload serves new connections with the new certificate.

use super::linger::Lingering;
use super::{ApiError, Ctx};
use crate::server::authz::{caller_by_certificate, Caller};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hetsched_common::certs::Identity;
use hetsched_common::protocol::{ErrorKind, ErrorReply};
use hetsched_common::wire::fdlimit::AcceptBackoff;
use hetsched_common::wire::tls;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

tokio::task_local! {
    /// The authenticated caller of the API request being answered.
    static CALLER: Caller;
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Who an HTTPS connection is: its address and the identity of its client certificate.
#[derive(Clone, Debug)]
pub(crate) struct HttpPeer {
    /// Remote address.
    pub addr: SocketAddr,
    /// The verified client certificate's identity, if one was presented.
    pub identity: Option<Identity>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, HttpsListener>>
    for HttpPeer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, HttpsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Accepts TCP connections and hands on those whose TLS handshake succeeded (each
/// handshake runs on its own task, so a slow client delays no other).
pub(crate) struct HttpsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, HttpPeer)>,
    local: SocketAddr,
}

impl HttpsListener {
    pub(crate) fn new(listener: TcpListener) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            let mut backoff = AcceptBackoff::default();
            loop {
                match listener.accept().await {
                    Ok((stream, addr)) => {
                        backoff.succeeded();
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            if let Some(c) = handshake(stream, addr).await {
                                let _ = tx.send(c).await;
                            }
                        });
                    }
                    // Out of descriptors: wait (longer each time) and keep serving.
                    Err(e) => tokio::time::sleep(backoff.failed("https", &e)).await,
                }
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = Lingering<TlsStream<TcpStream>>;
    type Addr = HttpPeer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some((io, peer)) => (Lingering::new(io), peer),
            // The accepting task ended (never, while the runtime runs): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(HttpPeer {
            addr: self.local,
            identity: None,
        })
    }
}

/// The answer a plain-HTTP request on the HTTPS port gets.
pub const PLAIN_HTTP_ON_HTTPS: &str = "this port serves HTTPS (the cluster runs secured): use \
     https:// with the cluster's ca.crt and an Authorization: Bearer TOKEN header";

async fn handshake(
    mut stream: TcpStream,
    addr: SocketAddr,
) -> Option<(TlsStream<TcpStream>, HttpPeer)> {
    let cfg = tls::current()?.server.clone()?;
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return None,
    }
    if first[0] != tls::TLS_HANDSHAKE_BYTE {
        tracing::warn!(peer = %addr, "plain HTTP on the HTTPS port refused");
        let body = format!("{PLAIN_HTTP_ON_HTTPS}\n");
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
        return None;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            let identity = tls::peer_identity(s.get_ref().1.peer_certificates());
            Some((s, HttpPeer { addr, identity }))
        }
        Ok(Err(e)) => {
            tracing::debug!(peer = %addr, error = %e, "https handshake refused");
            None
        }
        Err(_) => None,
    }
}

/// Authenticates API requests on a secured master (see the module doc) and runs the
/// handler with the caller known to [`caller`].
pub(crate) async fn authenticate(State(ctx): State<Ctx>, req: Request, next: Next) -> Response {
    if !ctx.secured {
        return CALLER.scope(Caller::Trusted, next.run(req)).await;
    }
    if !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string());
    let caller = match bearer {
        Some(t) => ctx.master.token_caller(&t),
        None => {
            let identity = req
                .extensions()
                .get::<ConnectInfo<HttpPeer>>()
                .and_then(|c| c.0.identity.clone());
            match identity {
                Some(i) => caller_by_certificate(Some(&i)),
                None => Err(ErrorReply::new(
                    ErrorKind::Unauthenticated,
                    "permission denied: no credentials: send Authorization: Bearer TOKEN \
                     (a token from hetsched acl bootstrap or acl token create)",
                )),
            }
        }
    };
    match caller {
        Ok(c) => CALLER.scope(c, next.run(req)).await,
        Err(e) => {
            let peer = req
                .extensions()
                .get::<ConnectInfo<HttpPeer>>()
                .map(|c| c.0.addr);
            tracing::warn!(?peer, path = %req.uri().path(), error = %e.message, "API request refused");
            let mut r = ApiError::from(e).into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    }
}

/// The caller of the API request being answered; on a secured master a request that did
/// not pass [`authenticate`] has none.
pub(crate) fn caller(secured: bool) -> Result<Caller, ErrorReply> {
    match CALLER.try_with(Caller::clone) {
        Ok(c) => Ok(c),
        Err(_) if !secured => Ok(Caller::Trusted),
        Err(_) => Err(ErrorReply::new(
            ErrorKind::Unauthenticated,
            "permission denied: no credentials",
        )),
    }
}
