//! Frames over sockets (the `net` feature): reading and writing frames with the
//! partial-frame timeout, the framed request server, and the client [`Connection`] that
//! matches replies to requests by id.

use super::codec::{decode_payload, encode_frame, Envelope, FrameLimits};
use crate::protocol::{ErrorKind, ErrorReply, Message};
use crate::{Error, Result};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// Reads one frame's payload. `Ok(None)` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    limits: FrameLimits,
) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    // The first byte may wait forever (an idle connection is fine); the rest of the frame
    // must follow within the partial-frame timeout.
    if r.read(&mut len[..1]).await? == 0 {
        return Ok(None);
    }
    let rest = async {
        r.read_exact(&mut len[1..]).await?;
        let n = u32::from_be_bytes(len) as usize;
        if n > limits.max_frame {
            return Err(Error::FrameTooLarge {
                len: n,
                cap: limits.max_frame,
            });
        }
        let mut buf = vec![0u8; n];
        r.read_exact(&mut buf).await?;
        Ok(buf)
    };
    match tokio::time::timeout(limits.partial_timeout, rest).await {
        Ok(Ok(buf)) => Ok(Some(buf)),
        Ok(Err(Error::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(Error::Truncated)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::PartialFrameTimeout(limits.partial_timeout)),
    }
}

/// Writes one envelope as a frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    env: &Envelope,
    limits: FrameLimits,
) -> Result<()> {
    let frame = encode_frame(env, limits.max_frame)?;
    w.write_all(&frame).await?;
    Ok(())
}

fn error_kind_of(e: &Error) -> ErrorKind {
    match e {
        Error::FrameTooLarge { .. } => ErrorKind::TooLarge,
        Error::WrongVersion { .. } => ErrorKind::WrongVersion,
        _ => ErrorKind::Malformed,
    }
}

/// A request handler: a message in, at most one reply out (`None` for one-way messages such
/// as Raft traffic). `peer` is the remote address, for logs.
pub type Handler = Arc<
    dyn Fn(Message, std::net::SocketAddr) -> Pin<Box<dyn Future<Output = Option<Message>> + Send>>
        + Send
        + Sync,
>;

/// Serves framed requests on `listener` until the listener fails. Each connection gets a
/// reader and a writer task; each request runs as its own task, so slow requests do not
/// block others on the same connection.
pub async fn serve(listener: TcpListener, limits: FrameLimits, handler: Handler) -> Result<()> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Running out of file descriptors must not end the server.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, peer, limits, handler.clone()));
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    limits: FrameLimits,
    handler: Handler,
) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Envelope>(1024);
    let writer = tokio::spawn(async move {
        while let Some(env) = rx.recv().await {
            if let Err(e) = write_frame(&mut wr, &env, limits).await {
                tracing::debug!(%peer, error = %e, "write to peer failed");
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    loop {
        let payload = match read_frame(&mut rd, limits).await {
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
            Ok(env) => {
                let tx = tx.clone();
                let handler = handler.clone();
                tokio::spawn(async move {
                    if let Some(reply) = handler(env.body, peer).await {
                        let _ = tx.send(Envelope::new(env.request_id, reply)).await;
                    }
                });
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
    drop(tx);
    let _ = writer.await;
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
    tx: mpsc::Sender<Envelope>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl Connection {
    /// Connects to `addr` within `timeout`.
    pub async fn connect(addr: &str, timeout: Duration) -> std::result::Result<Self, CallError> {
        Self::connect_with(addr, timeout, FrameLimits::default()).await
    }

    /// Connects with explicit limits.
    pub async fn connect_with(
        addr: &str,
        timeout: Duration,
        limits: FrameLimits,
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
        let (mut rd, mut wr) = stream.into_split();
        let (tx, mut rx) = mpsc::channel::<Envelope>(1024);
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
        });
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
                let waiter = pending_r
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&env.request_id));
                match waiter {
                    Some(w) => {
                        let _ = w.send(env.body);
                    }
                    None if env.request_id == 0 => {
                        tracing::warn!(peer = %peer, reply = ?env.body, "connection-level error from peer");
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
        Ok(Self {
            addr: addr.to_string(),
            tx,
            pending,
            next_id: Arc::new(AtomicU64::new(1)),
            closed,
        })
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
        if self.is_closed() || self.tx.send(Envelope::new(id, body)).await.is_err() {
            self.forget(id);
            return Err(CallError::Closed(self.addr.clone()));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(_)) => Err(CallError::Closed(self.addr.clone())),
            Err(_) => {
                self.forget(id);
                Err(CallError::Timeout(self.addr.clone(), timeout))
            }
        }
    }

    /// Sends a one-way message (no reply expected).
    pub async fn send(&self, body: Message) -> std::result::Result<(), CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.is_closed() || self.tx.send(Envelope::new(id, body)).await.is_err() {
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
        self.tx
            .try_send(Envelope::new(id, body))
            .map_err(|_| CallError::Closed(self.addr.clone()))
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ClientRequest, ClientResponse};

    #[tokio::test]
    async fn oversized_and_truncated_frames_are_typed_errors() {
        let limits = FrameLimits {
            max_frame: 100,
            partial_timeout: Duration::from_millis(200),
        };
        let mut big: &[u8] = &[0, 0, 1, 0];
        assert!(matches!(
            read_frame(&mut big, limits).await,
            Err(Error::FrameTooLarge { len: 256, cap: 100 })
        ));
        let mut short: &[u8] = &[0, 0, 0, 10, 1, 2];
        assert!(matches!(
            read_frame(&mut short, limits).await,
            Err(Error::Truncated)
        ));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, limits).await, Ok(None)));
    }

    #[tokio::test]
    async fn stalled_partial_frame_times_out() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(&[0, 0, 0, 50, 1]).await.expect("write");
        let limits = FrameLimits {
            max_frame: 100,
            partial_timeout: Duration::from_millis(100),
        };
        let mut b = b;
        let r = read_frame(&mut b, limits).await;
        assert!(matches!(r, Err(Error::PartialFrameTimeout(_))), "{r:?}");
        drop(a);
    }

    #[tokio::test]
    async fn server_answers_calls_and_survives_garbage() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let handler: Handler = Arc::new(|m, _| {
            Box::pin(async move {
                match m {
                    Message::Client(ClientRequest::Jobs { .. }) => {
                        Some(Message::ClientReply(ClientResponse::Jobs(vec![])))
                    }
                    _ => None,
                }
            })
        });
        tokio::spawn(serve(listener, FrameLimits::default(), handler));

        // Garbage: the server answers with an error frame and closes.
        let mut s = TcpStream::connect(&addr).await.expect("connect");
        s.write_all(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1])
            .await
            .expect("write");
        let mut rd = s;
        let reply = read_frame(&mut rd, FrameLimits::default())
            .await
            .expect("read")
            .expect("a reply frame");
        let env = decode_payload(&reply).expect("decode");
        assert!(matches!(
            env.body,
            Message::Error(ErrorReply {
                kind: ErrorKind::Malformed,
                ..
            })
        ));

        // Still serving.
        let c = Connection::connect(&addr, Duration::from_secs(2))
            .await
            .expect("connect");
        let r = c
            .call(
                Message::Client(ClientRequest::Jobs {
                    stale: false,
                    filter: Default::default(),
                }),
                Duration::from_secs(2),
            )
            .await
            .expect("call");
        assert_eq!(r, Message::ClientReply(ClientResponse::Jobs(vec![])));
    }
}
