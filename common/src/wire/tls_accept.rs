//! The server side of TLS (the `net` feature): handshakes on a runtime of their own, a plain
//! first byte answered with a clear error, the peer's identity taken from its certificate.

use super::codec::{Envelope, FrameLimits};
use super::frame_io::write_frame;
use super::peer::Peer;
use super::tls;
use crate::protocol::{ErrorKind, ErrorReply, Message};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The runtime TLS handshakes run on: threads of their own (half the cores, at least one),
/// apart from the runtime that serves established connections. `None` where it could not
/// start (handshakes then run where the connection was accepted).
///
/// Why (issue 54): a handshake is about a millisecond of CPU in one poll. When thousands of
/// slaves reconnected at once (a new leader, a restart), thousands of ready handshakes were
/// queued ahead of the masters' own Raft frames on one runtime; Raft's messages waited past
/// the election timeout, the leader stepped down, every slave reconnected again, and
/// handshakes were finished for clients that had given up. On threads of their own, a storm
/// of handshakes takes its share of the cores while established connections (Raft's among
/// them) keep being served. Unlike a cap on handshakes in progress, a stalled client holds
/// nothing that others wait for.
pub(super) fn handshake_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads((cores / 2).max(1))
            .thread_name("hetsched-tls")
            .enable_all()
            .build()
        {
            Ok(rt) => Some(rt),
            Err(e) => {
                tracing::warn!(error = %e, "no TLS handshake runtime; handshakes share the connections' threads");
                None
            }
        }
    })
    .as_ref()
}

/// The TLS side of accepting: a plain first byte gets [`tls::PLAIN_ON_TLS_PORT`] as a
/// plain error frame; a handshake (on [`handshake_runtime`]) must finish within the
/// partial-frame timeout (a half-open connection does not hold a task forever).
pub(super) async fn accept_tls(
    stream: TcpStream,
    addr: std::net::SocketAddr,
    cfg: Arc<rustls::ServerConfig>,
    limits: FrameLimits,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, Peer)> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(limits.partial_timeout, stream.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return None,
    }
    if first[0] != tls::TLS_HANDSHAKE_BYTE {
        tracing::warn!(peer = %addr, "plain connection to a TLS port refused");
        let reply = ErrorReply::new(ErrorKind::PermissionDenied, tls::PLAIN_ON_TLS_PORT);
        let mut stream = stream;
        let _ = write_frame(
            &mut stream,
            &Envelope::new(0, Message::Error(reply)),
            limits,
        )
        .await;
        let _ = stream.shutdown().await;
        return None;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    match tokio::time::timeout(limits.partial_timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            tracing::debug!(target: "hetsched::trace", peer = %addr, "tls: accepted");
            let identity = tls::peer_identity(s.get_ref().1.peer_certificates());
            Some((
                s,
                Peer {
                    addr,
                    identity,
                    secured: true,
                    token: None,
                    link: None,
                },
            ))
        }
        Ok(Err(e)) => {
            tracing::warn!(peer = %addr, error = %e, "TLS handshake refused");
            None
        }
        Err(_) => {
            tracing::warn!(peer = %addr, "TLS handshake did not finish in time");
            None
        }
    }
}
