//! Lingering close for the HTTP port.
//!
//! When the server answers before it has read a request's whole body (413 for a body
//! over [`super::MAX_BODY_BYTES`], or any early error), hyper closes the connection with
//! the rest of the body still unread. Closing a TCP socket whose receive buffer holds
//! data makes the kernel send a reset, and a reset can reach the client before it has
//! read the answer, which is then thrown away: the client sees "broken pipe" or
//! "connection reset" instead of the 413. Web servers avoid this with a *lingering
//! close* (Apache's `lingering_close`, nginx's `lingering_close`): shut down the sending
//! side, then read and discard what the client still sends, for a bounded time, before
//! closing. [`Lingering`] does exactly that inside `poll_shutdown`, which hyper awaits
//! when it ends a connection.

use axum::serve::Listener;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// How long a closing connection keeps reading what its client still sends.
pub(crate) const LINGER_FOR: Duration = Duration::from_secs(2);

/// The most a closing connection reads and discards before it closes regardless.
pub(crate) const LINGER_MAX_BYTES: u64 = 16 << 20;

/// A connection that drains its peer's remaining bytes (bounded by [`LINGER_FOR`] and
/// [`LINGER_MAX_BYTES`]) after shutting down its sending side; see the module doc.
pub(crate) struct Lingering<T> {
    inner: T,
    state: Closing,
}

enum Closing {
    /// Not closing.
    Open,
    /// Sending side shut down; discarding what arrives until end of stream or a bound.
    Draining {
        until: Pin<Box<tokio::time::Sleep>>,
        discarded: u64,
    },
    /// Closed: the connection may be dropped.
    Done,
}

impl<T> Lingering<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            state: Closing::Open,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Lingering<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                Closing::Open => {
                    let shut = ready!(Pin::new(&mut this.inner).poll_shutdown(cx));
                    if shut.is_err() {
                        // The peer is gone already: nothing left to protect.
                        this.state = Closing::Done;
                        return Poll::Ready(shut);
                    }
                    this.state = Closing::Draining {
                        until: Box::pin(tokio::time::sleep(LINGER_FOR)),
                        discarded: 0,
                    };
                }
                Closing::Draining { until, discarded } => {
                    if until.as_mut().poll(cx).is_ready() || *discarded >= LINGER_MAX_BYTES {
                        this.state = Closing::Done;
                        continue;
                    }
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                            *discarded += buf.filled().len() as u64;
                        }
                        // End of stream or an error: the peer has closed.
                        Poll::Ready(_) => this.state = Closing::Done,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Closing::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// A plain-TCP listener whose connections close lingering.
pub(crate) struct LingeringTcp(pub TcpListener);

impl Listener for LingeringTcp {
    type Io = Lingering<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = Listener::accept(&mut self.0).await;
        (Lingering::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Listener::local_addr(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The server answers early and closes while the client is still sending a large
    /// body; the client, once it has sent everything, still reads the whole answer.
    #[tokio::test]
    async fn an_early_answer_survives_an_unread_body() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut lingering = LingeringTcp(listener);
        let server = tokio::spawn(async move {
            let (mut io, _) = Listener::accept(&mut lingering).await;
            let mut head = [0u8; 16];
            io.read_exact(&mut head).await.expect("read head");
            io.write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
                .await
                .expect("answer");
            io.shutdown().await.expect("shutdown");
        });
        let mut client = TcpStream::connect(addr).await.expect("connect");
        let body = vec![b'x'; 4 << 20];
        client
            .write_all(&body)
            .await
            .expect("the body is drained, not reset");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.expect("read answer");
        assert!(answer.starts_with(b"HTTP/1.1 413"), "{answer:?}");
        server.await.expect("server");
    }

    /// A client that never closes does not hold the connection past the bound.
    #[tokio::test]
    async fn draining_ends_at_the_time_bound() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = Lingering::new(a);
        let started = tokio::time::Instant::now();
        let closing = tokio::spawn(async move { io.shutdown().await });
        b.write_all(b"still sending").await.expect("write");
        let shut = tokio::time::timeout(LINGER_FOR * 3, closing)
            .await
            .expect("shutdown returns once LINGER_FOR has passed");
        shut.expect("join").expect("shutdown ok");
        assert!(started.elapsed() >= LINGER_FOR, "{:?}", started.elapsed());
        drop(b);
    }
}
