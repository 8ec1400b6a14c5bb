//! Frames over sockets (the `net` feature): the framed request server and the client
//! [`Connection`] that matches replies to requests by id. Reading and writing one frame is
//! `frame_io.rs`; accepting TLS connections, `tls_accept.rs`.

use super::codec::{decode_payload, Envelope, FrameLimits};
use crate::protocol::{ErrorKind, ErrorReply, Message};
use crate::{Error, Result};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::fdlimit::AcceptBackoff;
use super::frame_io::{error_kind_of, read_frame, write_frame};
use super::peer::Peer;
use super::tls::{self, TlsSetup};
use super::tls_accept::{accept_tls, handshake_runtime};
use crate::certs::Identity;

/// A request handler: a message in, at most one reply out (`None` for one-way messages such
/// as Raft traffic). `peer` says who sent it. On a secured server the handler only sees
/// messages the peer's role may send ([`super::authz::admit`]).
pub type Handler = Arc<
    dyn Fn(Message, Peer) -> Pin<Box<dyn Future<Output = Option<Message>> + Send>> + Send + Sync,
>;

/// Serves framed requests on `listener` until the listener fails. Each connection gets a
/// reader and a writer task; each request runs as its own task, so slow requests do not
/// block others on the same connection. When the process has a TLS setup
/// ([`super::tls::current`]) every connection must be TLS: a plain first frame gets one
/// error and the connection closes.
pub async fn serve(listener: TcpListener, limits: FrameLimits, handler: Handler) -> Result<()> {
    serve_inner(listener, limits, None, handler).await
}

/// As [`serve`], with this TLS setup rather than the process's (an in-process slave of a
/// benchmark, which is not the process's identity).
pub async fn serve_tls(
    listener: TcpListener,
    limits: FrameLimits,
    setup: Arc<TlsSetup>,
    handler: Handler,
) -> Result<()> {
    serve_inner(listener, limits, Some(setup), handler).await
}

async fn serve_inner(
    listener: TcpListener,
    limits: FrameLimits,
    fixed: Option<Arc<TlsSetup>>,
    handler: Handler,
) -> Result<()> {
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Running out of file descriptors must not end the server, nor spin it:
                // the open connections keep being served while this loop waits.
                tokio::time::sleep(backoff.failed("wire", &e)).await;
                continue;
            }
        };
        backoff.succeeded();
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let fixed = fixed.clone();
        tokio::spawn(async move {
            // Looked up per connection: a reloaded setup applies to the next one.
            let setup = fixed.or_else(tls::current);
            match setup.as_ref().and_then(|s| s.server.clone()) {
                None => serve_connection(stream, Peer::plain(peer), limits, handler).await,
                Some(cfg) => {
                    let handshake = accept_tls(stream, peer, cfg, limits);
                    let accepted = match handshake_runtime() {
                        Some(rt) => rt.spawn(handshake).await.ok().flatten(),
                        None => handshake.await,
                    };
                    if let Some((tls_stream, who)) = accepted {
                        serve_connection(tls_stream, who, limits, handler).await
                    }
                }
            }
        });
    }
}

/// Requests one connection may have in flight at once; more get `Busy` (docs/CONTRACT.md,
/// "Security": limits on what a peer may send).
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 4096;
/// Frames per second one connection may send (burst: one second's worth); more get `Busy`.
pub const MAX_FRAMES_PER_SEC_PER_CONNECTION: f64 = 50_000.0;
/// A connection that sends nothing for this long is closed (clients reconnect).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Refills at [`MAX_FRAMES_PER_SEC_PER_CONNECTION`].
struct RateGate {
    tokens: f64,
    at: std::time::Instant,
}

impl RateGate {
    fn new() -> Self {
        Self {
            tokens: MAX_FRAMES_PER_SEC_PER_CONNECTION,
            at: std::time::Instant::now(),
        }
    }

    fn admit(&mut self) -> bool {
        let now = std::time::Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * MAX_FRAMES_PER_SEC_PER_CONNECTION;
        self.tokens = (self.tokens + refill).min(MAX_FRAMES_PER_SEC_PER_CONNECTION);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn serve_connection<S>(stream: S, peer: Peer, limits: FrameLimits, handler: Handler)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let mut rate = RateGate::new();
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Envelope>(1024);
    // The way back over this connection (its own request ids, its replies matched below);
    // it holds the writer weakly, so the connection still ends when this loop does.
    let back = Arc::new(Connection::back_link(&peer, tx.downgrade()));
    let mut peer = peer;
    peer.link = Some(back.clone());
    let who = peer.clone();
    let writer = tokio::spawn(async move {
        while let Some(env) = rx.recv().await {
            if let Err(e) = write_frame(&mut wr, &env, limits).await {
                tracing::debug!(peer = %who, error = %e, "write to peer failed");
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    loop {
        let read = tokio::time::timeout(IDLE_TIMEOUT, read_frame(&mut rd, limits)).await;
        let Ok(read) = read else {
            tracing::debug!(%peer, "idle connection closed");
            break;
        };
        let payload = match read {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(Error::Io(e)) => {
                tracing::debug!(%peer, error = %e, "connection read failed");
                break;
            }
            Err(e) => {
                tracing::error!(%peer, error = %e, "rejected frame; closing connection");
                let reply = ErrorReply::new(error_kind_of(&e), e.to_string());
                let _ = tx.send(Envelope::new(0, Message::Error(reply))).await;
                break;
            }
        };
        match decode_payload(&payload) {
            Ok(env) if !is_request(&env.body) && back.answer(env.request_id, &env.body) => {}
            Ok(env) => {
                if peer.secured {
                    if let Err(refusal) = super::authz::admit(&env.body, &peer) {
                        tracing::warn!(%peer, error = %refusal.message, "request refused");
                        let _ = tx
                            .send(Envelope::new(env.request_id, Message::Error(refusal)))
                            .await;
                        continue;
                    }
                }
                let permit = match in_flight.clone().try_acquire_owned() {
                    Ok(p) if rate.admit() => p,
                    over => {
                        let why = if over.is_ok() {
                            format!("busy, retry: more than {MAX_FRAMES_PER_SEC_PER_CONNECTION} requests per second on one connection")
                        } else {
                            format!("busy, retry: more than {MAX_IN_FLIGHT_PER_CONNECTION} requests in flight on one connection")
                        };
                        tracing::warn!(%peer, "{why}");
                        let reply = ErrorReply::new(ErrorKind::Busy, why);
                        let _ = tx
                            .send(Envelope::new(env.request_id, Message::Error(reply)))
                            .await;
                        continue;
                    }
                };
                let tx = tx.clone();
                let handler = handler.clone();
                let mut peer = peer.clone();
                peer.token = env.token;
                // Polled once here, in the order the frames arrived: what a handler does
                // before its first wait (all of a Raft step) happens in frame order on any
                // runtime, a multi-threaded one included; only the rest runs on its own task.
                let mut fut = handler(env.body, peer);
                let id = env.request_id;
                match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
                    Poll::Ready(None) => drop(permit),
                    Poll::Ready(Some(reply)) => {
                        drop(permit);
                        if let Err(mpsc::error::TrySendError::Full(e)) =
                            tx.try_send(Envelope::new(id, reply))
                        {
                            tokio::spawn(async move {
                                let _ = tx.send(e).await;
                            });
                        }
                    }
                    Poll::Pending => {
                        tokio::spawn(async move {
                            let _permit = permit;
                            if let Some(reply) = fut.await {
                                let _ = tx.send(Envelope::new(id, reply)).await;
                            }
                        });
                    }
                }
            }
            Err((id, e)) => {
                tracing::error!(%peer, error = %e, "rejected frame; closing connection");
                let reply = ErrorReply::new(error_kind_of(&e), e.to_string());
                let _ = tx
                    .send(Envelope::new(id.unwrap_or(0), Message::Error(reply)))
                    .await;
                break;
            }
        }
    }
    back.close();
    drop(tx);
    let _ = writer.await;
}

/// Whether a message is a request (a reply kind never is: [`super::authz::required_role`]).
fn is_request(body: &Message) -> bool {
    super::authz::required_role(body).is_ok()
}

/// The first request id of a server's calls back over a connection, far from the ids the
/// peer's own requests use (for logs; the kinds of message tell requests from replies).
const BACK_LINK_FIRST_ID: u64 = 1 << 62;

/// Where a connection's outgoing frames go: its own writer (a client connection, which
/// ends when every handle is dropped), or a server connection's writer held weakly (the
/// server's reader decides when it ends).
#[derive(Clone)]
enum Outbox {
    Own(mpsc::Sender<Envelope>),
    Borrowed(mpsc::WeakSender<Envelope>),
}

impl Outbox {
    async fn send(&self, env: Envelope) -> bool {
        match self {
            Outbox::Own(tx) => tx.send(env).await.is_ok(),
            Outbox::Borrowed(w) => match w.upgrade() {
                Some(tx) => tx.send(env).await.is_ok(),
                None => false,
            },
        }
    }

    fn try_send(&self, env: Envelope) -> bool {
        match self {
            Outbox::Own(tx) => tx.try_send(env).is_ok(),
            Outbox::Borrowed(w) => w.upgrade().is_some_and(|tx| tx.try_send(env).is_ok()),
        }
    }
}

/// Errors of a [`Connection`] call.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Could not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The TLS handshake failed.
    #[error("TLS handshake with {addr} failed: {why} (if it runs --insecure, connect without certificates)")]
    Tls {
        /// Address.
        addr: String,
        /// Cause.
        why: String,
    },
    /// The connection broke before the reply came.
    #[error("connection to {0} closed before the reply")]
    Closed(String),
    /// No reply within the deadline.
    #[error("no reply from {0} within {1:?}")]
    Timeout(String, Duration),
    /// Encoding failed.
    #[error(transparent)]
    Wire(#[from] Error),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Message>>>>;

/// A client connection: many requests in flight, replies matched by request id.
/// Cloning shares the connection.
#[derive(Clone)]
pub struct Connection {
    addr: String,
    tx: Outbox,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    server: Option<Identity>,
    /// The connection-level error the server sent before closing, if any: later calls on
    /// this connection answer it instead of "closed".
    last_error: Arc<Mutex<Option<Message>>>,
}

impl Connection {
    /// Connects to `addr` within `timeout`.
    pub async fn connect(addr: &str, timeout: Duration) -> std::result::Result<Self, CallError> {
        Self::connect_with(addr, timeout, FrameLimits::default()).await
    }

    /// Connects with explicit limits, over TLS when the process has a TLS setup
    /// ([`tls::current`]).
    pub async fn connect_with(
        addr: &str,
        timeout: Duration,
        limits: FrameLimits,
    ) -> std::result::Result<Self, CallError> {
        Self::connect_tls(addr, timeout, limits, tls::current()).await
    }

    /// Connects with explicit limits and TLS setup (`None`: plain TCP).
    pub async fn connect_tls(
        addr: &str,
        timeout: Duration,
        limits: FrameLimits,
        setup: Option<Arc<TlsSetup>>,
    ) -> std::result::Result<Self, CallError> {
        Self::connect_serving(addr, timeout, limits, setup, None).await
    }

    /// As [`connect_tls`](Self::connect_tls), and the server may send requests back on
    /// this connection: `commands` answers them, each on its own task, under the same
    /// rules as a server's requests (on a TLS link the server's certificate must have the
    /// role the request needs, [`super::authz::admit`]). Without `commands` such requests
    /// are ignored, as before.
    pub async fn connect_serving(
        addr: &str,
        timeout: Duration,
        limits: FrameLimits,
        setup: Option<Arc<TlsSetup>>,
        commands: Option<Handler>,
    ) -> std::result::Result<Self, CallError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(CallError::Connect {
                    addr: addr.to_string(),
                    source,
                })
            }
            Err(_) => return Err(CallError::Timeout(addr.to_string(), timeout)),
        };
        let _ = stream.set_nodelay(true);
        tracing::debug!(target: "hetsched::trace", %addr, "tcp: connected");
        let remote = stream
            .peer_addr()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        let served = commands.map(|handler| Served {
            handler,
            remote,
            secured: setup.is_some(),
        });
        match setup {
            None => Ok(Self::start(addr, stream, limits, None, served)),
            Some(setup) => {
                let connector = tokio_rustls::TlsConnector::from(setup.client.clone());
                let hs = connector.connect(tls::server_name(addr), stream);
                match tokio::time::timeout(timeout, hs).await {
                    Ok(Ok(s)) => {
                        tracing::debug!(target: "hetsched::trace", %addr, "tls: connected");
                        let identity = tls::peer_identity(s.get_ref().1.peer_certificates());
                        Ok(Self::start(addr, s, limits, identity, served))
                    }
                    Ok(Err(e)) => Err(CallError::Tls {
                        addr: addr.to_string(),
                        why: e.to_string(),
                    }),
                    Err(_) => Err(CallError::Timeout(addr.to_string(), timeout)),
                }
            }
        }
    }

    fn start<S>(
        addr: &str,
        stream: S,
        limits: FrameLimits,
        server: Option<Identity>,
        served: Option<Served>,
    ) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let (tx, mut rx) = mpsc::channel::<Envelope>(1024);
        // The reader answers the server's requests through a weak handle: the connection
        // still ends when every `Connection` handle is dropped.
        let back_tx = tx.downgrade();
        let back_identity = server.clone();
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let peer = addr.to_string();
        let closed_w = closed.clone();
        tokio::spawn(async move {
            while let Some(env) = rx.recv().await {
                if let Err(e) = write_frame(&mut wr, &env, limits).await {
                    tracing::debug!(peer = %peer, error = %e, "write failed");
                    break;
                }
            }
            closed_w.store(true, Ordering::SeqCst);
            // Every handle is gone (or the write failed): end the connection, so that the
            // peer closes its side and the reader below ends too. Without this a dropped
            // connection kept its socket open as long as the peer did, and a client that
            // reconnects (after timeouts, following a new leader) piled them up.
            let _ = wr.shutdown().await;
        });
        let last_error: Arc<Mutex<Option<Message>>> = Arc::new(Mutex::new(None));
        let last_error_r = last_error.clone();
        let pending_r = pending.clone();
        let closed_r = closed.clone();
        let peer = addr.to_string();
        tokio::spawn(async move {
            loop {
                let env = match read_frame(&mut rd, limits).await {
                    Ok(Some(p)) => match decode_payload(&p) {
                        Ok(env) => env,
                        Err((_, e)) => {
                            tracing::warn!(peer = %peer, error = %e, "bad reply frame; closing");
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(peer = %peer, error = %e, "read failed");
                        break;
                    }
                };
                if is_request(&env.body) {
                    if let Some(s) = &served {
                        s.answer(env, back_identity.clone(), back_tx.clone());
                    }
                    continue;
                }
                let waiter = pending_r
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&env.request_id));
                match waiter {
                    Some(w) => {
                        let _ = w.send(env.body);
                    }
                    None if env.request_id == 0 => {
                        // A connection-level error (a plain client on a TLS port, a
                        // rejected frame) answers every waiting call, so the caller sees
                        // why rather than only "closed".
                        tracing::warn!(peer = %peer, reply = ?env.body, "connection-level error from peer");
                        if let Ok(mut p) = pending_r.lock() {
                            for (_, w) in p.drain() {
                                let _ = w.send(env.body.clone());
                            }
                        }
                        *last_error_r.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(env.body.clone());
                    }
                    None => {}
                }
            }
            closed_r.store(true, Ordering::SeqCst);
            // Dropping the senders wakes every caller with `Closed`.
            if let Ok(mut p) = pending_r.lock() {
                p.clear();
            }
        });
        Self {
            addr: addr.to_string(),
            tx: Outbox::Own(tx),
            pending,
            next_id: Arc::new(AtomicU64::new(1)),
            closed,
            server,
            last_error,
        }
    }

    /// The way back to the peer of a served connection, writing through `tx` (held
    /// weakly); the server's reader hands it the replies ([`answer`](Self::answer)) and
    /// closes it when the connection ends.
    fn back_link(peer: &Peer, tx: mpsc::WeakSender<Envelope>) -> Self {
        Self {
            addr: peer.addr.to_string(),
            tx: Outbox::Borrowed(tx),
            pending: Arc::new(Mutex::new(HashMap::new())),
            next_id: Arc::new(AtomicU64::new(BACK_LINK_FIRST_ID)),
            closed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            server: peer.identity.clone(),
            last_error: Arc::new(Mutex::new(None)),
        }
    }

    /// Hands a reply to the call waiting for it; false when none waits under `id`.
    fn answer(&self, id: u64, body: &Message) -> bool {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        match waiter {
            Some(w) => {
                let _ = w.send(body.clone());
                true
            }
            None => false,
        }
    }

    /// The connection ended: later calls fail, waiting ones wake with `Closed`.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }

    /// The identity the server's certificate carries (TLS links only).
    pub fn server_identity(&self) -> Option<&Identity> {
        self.server.as_ref()
    }

    /// The address this connection goes to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection has broken.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Sends a request and waits up to `timeout` for its reply.
    pub async fn call(
        &self,
        body: Message,
        timeout: Duration,
    ) -> std::result::Result<Message, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let mut env = Envelope::new(id, body);
        if matches!(env.body, Message::Client(_)) {
            env.token = tls::client_token();
        }
        if self.is_closed() || !self.tx.send(env).await {
            self.forget(id);
            return self.closed_answer();
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(_)) => self.closed_answer(),
            Err(_) => {
                self.forget(id);
                Err(CallError::Timeout(self.addr.clone(), timeout))
            }
        }
    }

    /// Sends a one-way message (no reply expected).
    pub async fn send(&self, body: Message) -> std::result::Result<(), CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.is_closed() || !self.tx.send(Envelope::new(id, body)).await {
            return Err(CallError::Closed(self.addr.clone()));
        }
        Ok(())
    }

    /// Like [`send`](Self::send) but never waits: fails when the outgoing queue is full.
    pub fn try_send(&self, body: Message) -> std::result::Result<(), CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.is_closed() {
            return Err(CallError::Closed(self.addr.clone()));
        }
        if self.tx.try_send(Envelope::new(id, body)) {
            Ok(())
        } else {
            Err(CallError::Closed(self.addr.clone()))
        }
    }

    fn closed_answer(&self) -> std::result::Result<Message, CallError> {
        match self.last_error.lock().ok().and_then(|e| e.clone()) {
            Some(m) => Ok(m),
            None => Err(CallError::Closed(self.addr.clone())),
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }
}

/// A client connection's handler for the server's requests.
struct Served {
    handler: Handler,
    /// The server's address, as the handler's [`Peer`] names it.
    remote: std::net::SocketAddr,
    /// Whether the link is TLS: requests are then admitted by the server's certificate.
    secured: bool,
}

impl Served {
    /// Answers one request of the server on its own task, under the same id.
    fn answer(&self, env: Envelope, server: Option<Identity>, tx: mpsc::WeakSender<Envelope>) {
        let peer = Peer {
            addr: self.remote,
            identity: server,
            secured: self.secured,
            token: None,
            link: None,
        };
        let id = env.request_id;
        let reply = if peer.secured {
            super::authz::admit(&env.body, &peer).err()
        } else {
            None
        };
        let handler = self.handler.clone();
        tokio::spawn(async move {
            let reply = match reply {
                Some(refusal) => {
                    tracing::warn!(%peer, error = %refusal.message, "request from the server refused");
                    Some(Message::Error(refusal))
                }
                None => handler(env.body, peer).await,
            };
            if let (Some(reply), Some(tx)) = (reply, tx.upgrade()) {
                let _ = tx.send(Envelope::new(id, reply)).await;
            }
        });
    }
}

#[cfg(test)]
#[path = "io_tests.rs"]
mod tests;
