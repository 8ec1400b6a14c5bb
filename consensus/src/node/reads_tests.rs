//! Tests of read batching: one round per batch, answered once its index is applied.

use super::*;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::oneshot::Receiver;

type Rx = Receiver<Result<u64, ProposeError>>;

fn read(r: &mut PendingReads) -> Rx {
    let (tx, rx) = oneshot::channel();
    r.queue(tx);
    rx
}

fn pending(rx: &mut Rx) -> bool {
    matches!(rx.try_recv(), Err(TryRecvError::Empty))
}

#[test]
fn a_batch_shares_one_round_and_is_answered_once_applied() {
    let mut r = PendingReads::new();
    assert!(!r.has_queued());
    let (mut a, mut b) = (read(&mut r), read(&mut r));
    assert!(r.has_queued());
    let ctx = r.begin_round();
    assert!(!r.has_queued(), "the round took the whole batch");
    let mut c = read(&mut r);
    let next = r.begin_round();
    assert_ne!(ctx, next, "each round has its own context");
    r.confirm(&ctx, 10);
    r.finish(9);
    assert!(
        pending(&mut a) && pending(&mut b),
        "index 10 not applied yet"
    );
    r.finish(10);
    assert_eq!(a.try_recv().expect("answered").expect("ok"), 10);
    assert_eq!(b.try_recv().expect("answered").expect("ok"), 10);
    assert!(pending(&mut c), "the other round is not confirmed");
    // A confirmation for a context not in flight (already confirmed) changes nothing.
    r.confirm(&ctx, 11);
    r.finish(20);
    assert!(pending(&mut c));
}

#[test]
fn queued_reads_fail_not_leader() {
    let mut r = PendingReads::new();
    let mut a = read(&mut r);
    r.fail_queued(Some(3));
    assert!(matches!(
        a.try_recv(),
        Ok(Err(ProposeError::NotLeader { leader: Some(3) }))
    ));
    assert!(!r.has_queued());
}

#[test]
fn leadership_loss_fails_unconfirmed_reads_only() {
    let mut r = PendingReads::new();
    let mut confirmed = read(&mut r);
    let ctx = r.begin_round();
    r.confirm(&ctx, 5);
    let mut unconfirmed = read(&mut r);
    r.begin_round();
    r.fail_in_flight(None);
    assert!(matches!(
        unconfirmed.try_recv(),
        Ok(Err(ProposeError::NotLeader { leader: None }))
    ));
    assert!(pending(&mut confirmed));
    r.finish(5);
    assert_eq!(confirmed.try_recv().expect("answered").expect("ok"), 5);
}

#[test]
fn reads_whose_caller_gave_up_are_forgotten() {
    let mut r = PendingReads::new();
    let gone = read(&mut r);
    let mut kept = read(&mut r);
    let ctx = r.begin_round();
    drop(gone);
    r.prune_closed();
    r.confirm(&ctx, 1);
    r.finish(1);
    assert_eq!(kept.try_recv().expect("answered").expect("ok"), 1);
}

#[test]
fn stopping_answers_queued_and_in_flight_reads() {
    let mut r = PendingReads::new();
    let mut in_flight = read(&mut r);
    r.begin_round();
    let mut queued = read(&mut r);
    r.stop();
    assert!(matches!(
        in_flight.try_recv(),
        Ok(Err(ProposeError::Stopped))
    ));
    assert!(matches!(queued.try_recv(), Ok(Err(ProposeError::Stopped))));
}
