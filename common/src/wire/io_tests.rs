//! Unit tests of `io.rs`: frame reading, serving, ordering.

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

/// Frames of one connection are handled in the order they arrived, up to each
/// handler's first wait, even on a multi-threaded runtime: Raft must see its messages
/// from a peer in order (a follower given a commit index past its log panics).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frames_reach_the_handler_in_order_on_a_multi_threaded_runtime() {
    const N: u64 = 2000;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let log = seen.clone();
    let handler: Handler = Arc::new(move |m, _| {
        if let Message::Raft { from, .. } = m {
            if let Ok(mut v) = log.lock() {
                v.push(from.0);
            }
        }
        Box::pin(async move { None })
    });
    tokio::spawn(serve(listener, FrameLimits::default(), handler));
    let c = Connection::connect(&addr, Duration::from_secs(2))
        .await
        .expect("connect");
    for i in 0..N {
        c.send(Message::Raft {
            from: crate::MasterId(i),
            msgs: Vec::new(),
        })
        .await
        .expect("send");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = seen.lock().map(|v| v.clone()).unwrap_or_default();
        if got.len() as u64 == N {
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} frames arrived",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A server calls back over the connection a client opened: the client's commands
/// handler answers under the server's request id, the client's own calls keep working on
/// the same connection, a client without a handler leaves such requests unanswered, and
/// the way back closes with the connection.
#[tokio::test]
async fn server_calls_back_over_the_clients_connection() {
    use crate::protocol::{SlaveCommand, SlaveCommandReply};
    use crate::TaskId;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (links_tx, mut links) = mpsc::unbounded_channel::<Arc<Connection>>();
    let handler: Handler = Arc::new(move |_m, peer: Peer| {
        let links_tx = links_tx.clone();
        Box::pin(async move {
            let _ = links_tx.send(peer.link.clone().expect("a served peer has a way back"));
            Some(Message::ClientReply(ClientResponse::Jobs(vec![])))
        })
    });
    tokio::spawn(serve(listener, FrameLimits::default(), handler));
    let commands: Handler = Arc::new(|m, _| {
        Box::pin(async move {
            match m {
                Message::ToSlave(SlaveCommand::StopTask { .. }) => {
                    Some(Message::ToSlaveReply(SlaveCommandReply::Stopped))
                }
                _ => None,
            }
        })
    });
    let t = Duration::from_secs(5);
    let jobs = || {
        Message::Client(ClientRequest::Jobs {
            stale: true,
            filter: Default::default(),
        })
    };
    let stop = || {
        Message::ToSlave(SlaveCommand::StopTask {
            task: TaskId(7),
            attempt: 1,
            grace_ms: None,
        })
    };
    let c = Connection::connect_serving(&addr, t, FrameLimits::default(), None, Some(commands))
        .await
        .expect("connect");
    c.call(jobs(), t).await.expect("own call");
    let back = links.recv().await.expect("the way back");
    for _ in 0..3 {
        let r = back.call(stop(), t).await.expect("called back");
        assert!(
            matches!(r, Message::ToSlaveReply(SlaveCommandReply::Stopped)),
            "{r:?}"
        );
        c.call(jobs(), t).await.expect("own call between");
    }
    // A client without a handler ignores the server's requests, as before.
    while links.try_recv().is_ok() {}
    let plain = Connection::connect(&addr, t).await.expect("connect");
    plain.call(jobs(), t).await.expect("own call");
    let back_plain = links.recv().await.expect("the way back");
    let r = back_plain.call(stop(), Duration::from_millis(200)).await;
    assert!(matches!(r, Err(CallError::Timeout(..))), "{r:?}");
    // The way back ends with the connection.
    drop(c);
    let closed = async {
        while !back.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(t, closed)
        .await
        .expect("closed with the connection");
    assert!(back.call(stop(), t).await.is_err());
}

/// A TLS server of a slave certificate and a client setup, from a fresh CA in `dir`.
fn tls_pair(dir: &std::path::Path) -> (Arc<tls::TlsSetup>, Arc<tls::TlsSetup>) {
    use crate::certs::{self, IssueRequest, Role};
    let year = Duration::from_secs(365 * 86_400);
    certs::init_ca(dir, year).expect("ca");
    for (role, name) in [(Role::Slave, "s1"), (Role::Client, "root")] {
        let req = IssueRequest {
            role,
            name: name.into(),
            hosts: Vec::new(),
            valid_for: year,
        };
        certs::issue(dir, &req, None).expect("issue");
    }
    (
        Arc::new(tls::load(dir, Role::Slave, Some("s1")).expect("server")),
        Arc::new(tls::load(dir, Role::Client, Some("root")).expect("client")),
    )
}

/// Serves `Jobs` calls over TLS on a fresh port; returns its address.
async fn jobs_server(server: Arc<tls::TlsSetup>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let handler: Handler = Arc::new(|m, _| {
        Box::pin(async move {
            matches!(m, Message::Client(ClientRequest::Jobs { .. }))
                .then(|| Message::ClientReply(ClientResponse::Jobs(vec![])))
        })
    });
    tokio::spawn(serve_tls(listener, FrameLimits::default(), server, handler));
    addr
}

/// One TLS connection and one `Jobs` call on it.
async fn jobs_call(
    addr: String,
    client: Arc<tls::TlsSetup>,
) -> std::result::Result<Message, CallError> {
    let c = Connection::connect_tls(
        &addr,
        Duration::from_secs(20),
        FrameLimits::default(),
        Some(client),
    )
    .await?;
    let jobs = Message::Client(ClientRequest::Jobs {
        stale: false,
        filter: Default::default(),
    });
    c.call(jobs, Duration::from_secs(20)).await
}

/// Issue 54: a burst of TLS connections, their handshakes on the handshake runtime: every
/// one ends up answering calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_tls_connections_all_get_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, client) = tls_pair(dir.path());
    let addr = jobs_server(server).await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..64 {
        calls.spawn(jobs_call(addr.clone(), client.clone()));
    }
    let mut served = 0;
    while let Some(r) = calls.join_next().await {
        let r = r.expect("task").expect("a served call");
        assert_eq!(r, Message::ClientReply(ClientResponse::Jobs(vec![])));
        served += 1;
    }
    assert_eq!(served, 64);
}

/// Clients that start a handshake and stall (one TLS byte, then nothing) hold nothing
/// another client waits for: with many of them open, a real client is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_do_not_keep_other_clients_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, client) = tls_pair(dir.path());
    let addr = jobs_server(server).await;
    let mut stalled = Vec::new();
    for _ in 0..256 {
        let mut s = TcpStream::connect(&addr).await.expect("connect");
        s.write_all(&[tls::TLS_HANDSHAKE_BYTE])
            .await
            .expect("one byte");
        stalled.push(s);
    }
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), jobs_call(addr, client))
        .await
        .expect("served within 5 s with 256 stalled handshakes open")
        .expect("a served call");
    assert_eq!(r, Message::ClientReply(ClientResponse::Jobs(vec![])));
    eprintln!(
        "served in {:?} beside 256 stalled handshakes",
        started.elapsed()
    );
    drop(stalled);
}
