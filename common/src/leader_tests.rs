//! Unit tests of `leader.rs` against fake masters on real loopback TCP listeners.

use super::*;
use crate::protocol::{ClientRequest, ClientResponse};
use crate::wire::{self, FrameLimits, Handler};
use crate::MasterId;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fake master: answers the n-th request (from 0) with `answer(n)`, counting requests.
struct Fake {
    addr: String,
    seen: Arc<AtomicUsize>,
}

impl Fake {
    async fn start(answer: impl Fn(usize) -> Message + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        let answer = Arc::new(answer);
        let handler: Handler = Arc::new(move |_msg, _peer| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let reply = answer(n);
            Box::pin(async move { Some(reply) })
        });
        tokio::spawn(wire::serve(listener, FrameLimits::default(), handler));
        Self { addr, seen }
    }

    async fn leader() -> Self {
        Self::start(|_| Message::ClientReply(ClientResponse::Done)).await
    }

    async fn follower_of(leader: &str) -> Self {
        let leader = leader.to_string();
        Self::start(move |_| not_leader(Some(leader.clone()))).await
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

fn not_leader(leader_addr: Option<String>) -> Message {
    Message::Error(ErrorReply::new(
        ErrorKind::NotLeader {
            leader: leader_addr.as_ref().map(|_| MasterId(1)),
            leader_addr,
        },
        "not the leader",
    ))
}

fn refusal(kind: ErrorKind, message: &str) -> Message {
    Message::Error(ErrorReply::new(kind, message))
}

/// An address nothing listens on (a port just given back).
async fn dead_addr() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    drop(l);
    addr
}

fn status() -> Message {
    Message::Client(ClientRequest::Status { stale: false })
}

fn quick() -> LeaderOptions {
    LeaderOptions {
        connect_timeout: Duration::from_millis(500),
        call_timeout: Duration::from_secs(2),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        ..LeaderOptions::default()
    }
}

#[tokio::test]
async fn a_follower_redirects_to_the_leader_it_names_and_the_leader_is_remembered() {
    let leader = Fake::leader().await;
    let follower = Fake::follower_of(&leader.addr).await;
    let mut c = LeaderClient::new(vec![follower.addr.clone()]).with_options(quick());
    let r = c.request(status(), Duration::from_secs(5)).await;
    assert_eq!(
        r.expect("answer"),
        Message::ClientReply(ClientResponse::Done)
    );
    assert_eq!(c.target(), leader.addr);
    // The next request goes straight to the leader.
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("second answer");
    assert_eq!(follower.seen(), 1);
    assert_eq!(leader.seen(), 2);
}

#[tokio::test]
async fn a_dead_master_is_skipped() {
    let leader = Fake::leader().await;
    let dead = dead_addr().await;
    let mut c = LeaderClient::new(vec![dead.clone(), leader.addr.clone()]).with_options(quick());
    let err = c.attempt(status()).await.expect_err("dead first");
    assert!(
        matches!(&err, LeaderError::Unreachable { addr, .. } if *addr == dead),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(c.target(), leader.addr, "moved on to the next master");
    let mut c = LeaderClient::new(vec![dead, leader.addr.clone()]).with_options(quick());
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("answer from the live master");
    assert_eq!(c.target(), leader.addr);
}

#[tokio::test]
async fn with_no_master_reachable_the_deadline_ends_the_request() {
    let masters = vec![dead_addr().await, dead_addr().await];
    let mut c = LeaderClient::new(masters).with_options(quick());
    let start = Instant::now();
    let deadline = Duration::from_millis(400);
    let err = c.request(status(), deadline).await.expect_err("nobody");
    let took = start.elapsed();
    match &err {
        LeaderError::Deadline { deadline: d, last } => {
            assert_eq!(*d, deadline);
            assert!(
                matches!(**last, LeaderError::Unreachable { .. }),
                "{last:?}"
            );
        }
        other => panic!("not a deadline: {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(
        err.to_string().starts_with("no leader answered within"),
        "{err}"
    );
    assert!(took >= deadline, "gave up early: {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[tokio::test]
async fn unavailable_is_retried_with_backoff_until_the_deadline() {
    let busy = Fake::start(|_| refusal(ErrorKind::Unavailable, "no quorum")).await;
    let mut c = LeaderClient::new(vec![busy.addr.clone()]).with_options(quick());
    let err = c
        .request(status(), Duration::from_millis(500))
        .await
        .expect_err("never available");
    match err {
        LeaderError::Deadline { last, .. } => match *last {
            LeaderError::Unavailable { kind, message, .. } => {
                assert_eq!(kind, ErrorKind::Unavailable);
                assert_eq!(message, "no quorum");
            }
            other => panic!("last: {other:?}"),
        },
        other => panic!("not a deadline: {other:?}"),
    }
    // 20, 40, 80, 100, 100, … ms apart: a handful of tries, not a busy loop.
    let n = busy.seen();
    assert!((2..=12).contains(&n), "{n} tries");
}

#[tokio::test]
async fn unknown_outcome_is_asked_again_at_the_same_master() {
    let flaky = Fake::start(|n| {
        if n == 0 {
            refusal(ErrorKind::Unknown, "leadership changed")
        } else {
            Message::ClientReply(ClientResponse::Done)
        }
    })
    .await;
    let other = Fake::leader().await;
    let mut c =
        LeaderClient::new(vec![flaky.addr.clone(), other.addr.clone()]).with_options(quick());
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("answer");
    assert_eq!((flaky.seen(), other.seen()), (2, 0));
}

#[tokio::test]
async fn a_refusal_is_returned_at_once() {
    let strict = Fake::start(|_| refusal(ErrorKind::Invalid, "bad spec")).await;
    let mut c = LeaderClient::new(vec![strict.addr.clone()]).with_options(quick());
    let err = c
        .request(status(), Duration::from_secs(5))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, LeaderError::Refused { kind: ErrorKind::Invalid, message, .. } if message == "bad spec"),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(err.to_string(), "bad spec");
    assert_eq!(strict.seen(), 1);
    assert_eq!(
        c.target(),
        strict.addr,
        "a refusal does not move the target"
    );
}

#[tokio::test]
async fn busy_is_a_refusal_unless_told_to_retry_it() {
    let admission = Fake::start(|n| {
        if n == 0 {
            refusal(ErrorKind::Busy, "busy, retry")
        } else {
            Message::ClientReply(ClientResponse::Done)
        }
    })
    .await;
    let mut c = LeaderClient::new(vec![admission.addr.clone()]).with_options(quick());
    let err = c.attempt(status()).await.expect_err("busy");
    assert!(
        matches!(
            err,
            LeaderError::Refused {
                kind: ErrorKind::Busy,
                ..
            }
        ),
        "{err:?}"
    );
    let mut c = c.with_options(LeaderOptions {
        retry_busy: true,
        ..quick()
    });
    let busy_again = Fake::start(|n| {
        if n == 0 {
            refusal(ErrorKind::Busy, "busy, retry")
        } else {
            Message::ClientReply(ClientResponse::Done)
        }
    })
    .await;
    c = c.with_leader_hint(Some(busy_again.addr.clone()));
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("retried");
    assert_eq!(busy_again.seen(), 2);
}

#[tokio::test]
async fn two_followers_naming_each_other_stop_after_the_redirect_limit() {
    // Each names the other: A → B → A → … until the hops run out.
    let a_slot: Arc<std::sync::Mutex<String>> = Arc::default();
    let b_slot: Arc<std::sync::Mutex<String>> = Arc::default();
    let to_b = b_slot.clone();
    let a = Fake::start(move |_| not_leader(Some(to_b.lock().expect("b").clone()))).await;
    let to_a = a_slot.clone();
    let b = Fake::start(move |_| not_leader(Some(to_a.lock().expect("a").clone()))).await;
    *a_slot.lock().expect("a") = a.addr.clone();
    *b_slot.lock().expect("b") = b.addr.clone();
    let opts = quick();
    let mut c = LeaderClient::new(vec![a.addr.clone(), b.addr.clone()]).with_options(opts);
    let err = c.attempt(status()).await.expect_err("no leader");
    assert!(
        matches!(&err, LeaderError::NoLeader { message, .. } if message == "not the leader"),
        "{err:?}"
    );
    assert_eq!(a.seen() + b.seen(), opts.max_redirects + 1);
}

#[tokio::test]
async fn not_leader_without_an_address_moves_to_the_next_master() {
    let lost = Fake::start(|_| not_leader(None)).await;
    let leader = Fake::leader().await;
    let mut c =
        LeaderClient::new(vec![lost.addr.clone(), leader.addr.clone()]).with_options(quick());
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("answer");
    assert_eq!((lost.seen(), leader.seen()), (1, 1));
    assert_eq!(c.target(), leader.addr);
}

#[tokio::test]
async fn a_leader_hint_is_asked_first() {
    let leader = Fake::leader().await;
    let follower = Fake::follower_of(&leader.addr).await;
    let mut c = LeaderClient::new(vec![follower.addr.clone()])
        .with_options(quick())
        .with_leader_hint(Some(leader.addr.clone()));
    assert_eq!(c.target(), leader.addr);
    c.attempt(status()).await.expect("answer");
    assert_eq!((follower.seen(), leader.seen()), (0, 1));
}

#[tokio::test]
async fn a_dead_hint_moves_to_the_masters_without_backing_off() {
    let leader = Fake::leader().await;
    let dead = dead_addr().await;
    let opts = LeaderOptions {
        backoff_min: Duration::from_secs(5),
        backoff_max: Duration::from_secs(5),
        ..quick()
    };
    let mut c = LeaderClient::new(vec![leader.addr.clone()])
        .with_options(opts)
        .with_leader_hint(Some(dead));
    let started = Instant::now();
    c.request(status(), Duration::from_secs(20))
        .await
        .expect("answer");
    // A back-off would have cost 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((leader.seen(), c.target()), (1, leader.addr.as_str()));
}

#[tokio::test]
async fn a_hint_naming_a_follower_is_redirected_to_the_leader() {
    let leader = Fake::leader().await;
    let follower = Fake::follower_of(&leader.addr).await;
    let mut c = LeaderClient::new(vec![follower.addr.clone(), leader.addr.clone()])
        .with_options(quick())
        .with_leader_hint(Some(follower.addr.clone()));
    c.request(status(), Duration::from_secs(5))
        .await
        .expect("answer");
    assert_eq!((follower.seen(), leader.seen()), (1, 1));
    assert_eq!(c.target(), leader.addr);
}

#[tokio::test]
async fn without_masters_nothing_is_tried() {
    let mut c = LeaderClient::new(Vec::new());
    assert!(matches!(
        c.request(status(), Duration::from_secs(1)).await,
        Err(LeaderError::NoMasters)
    ));
}

#[test]
fn an_unexpected_answer_is_named_shortly() {
    let long = Message::Raft {
        from: MasterId(1),
        msgs: vec![serde_bytes::ByteBuf::from(vec![7u8; 500])],
    };
    let e = LeaderError::unexpected("m1:7000", &long);
    let text = e.to_string();
    assert!(
        text.starts_with("unexpected answer from m1:7000: Raft"),
        "{text}"
    );
    assert!(text.ends_with('…'), "{text}");
}
