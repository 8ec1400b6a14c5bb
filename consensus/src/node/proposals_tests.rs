//! Tests of proposal tracking: each waiter is answered exactly once, with `Ok` only when its
//! own entry (same term, same context) applied at its index.

use super::*;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::oneshot::Receiver;

type Rx = Receiver<Result<u32, ProposeError>>;
type ConfRx = Receiver<Result<AdminAnswer, ProposeError>>;

fn command() -> (Waiter<u32>, Rx) {
    let (tx, rx) = oneshot::channel();
    (Waiter::Command(tx), rx)
}

fn conf() -> (Waiter<u32>, ConfRx) {
    let (tx, rx) = oneshot::channel();
    (Waiter::Conf(tx), rx)
}

/// Tracks a command at (`index`, `term`) with a fresh id; returns its context and receiver.
fn track_command(p: &mut Proposals<u32>, index: u64, term: u64) -> (Vec<u8>, Rx) {
    let ctx = command_ctx(p.next_id());
    let (w, rx) = command();
    p.track(index, term, ctx.clone(), w);
    (ctx, rx)
}

fn pending<T>(rx: &mut Receiver<T>) -> bool {
    matches!(rx.try_recv(), Err(TryRecvError::Empty))
}

#[test]
fn ids_are_fresh_and_contexts_distinct() {
    let mut p = Proposals::<u32>::new(10);
    let (a, b) = (p.next_id(), p.next_id());
    assert_ne!(a, b);
    assert_ne!(command_ctx(a), command_ctx(b));
    assert_ne!(command_ctx(a), conf_ctx(a));
}

#[test]
fn own_entry_applied_resolves_once_with_the_output() {
    let mut p = Proposals::<u32>::new(10);
    let (ctx, mut rx) = track_command(&mut p, 5, 2);
    p.resolve(5, 2, &ctx, Applied::Command(42));
    assert_eq!(rx.try_recv().expect("answered").expect("ok"), 42);
    assert_eq!(p.len(), 0, "no longer tracked");
    // The same index applied again (it cannot be, but nothing may answer twice).
    p.resolve(5, 2, &ctx, Applied::Command(43));
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Closed)));
}

#[test]
fn another_terms_entry_at_our_index_is_dropped() {
    let mut p = Proposals::<u32>::new(10);
    let (ctx, mut rx) = track_command(&mut p, 5, 2);
    p.resolve(5, 3, &ctx, Applied::Command(1));
    assert!(matches!(rx.try_recv(), Ok(Err(ProposeError::Dropped))));
}

#[test]
fn another_context_at_our_index_is_dropped() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut rx) = track_command(&mut p, 5, 2);
    p.resolve(5, 2, &command_ctx(999), Applied::Command(1));
    assert!(matches!(rx.try_recv(), Ok(Err(ProposeError::Dropped))));
}

#[test]
fn a_no_op_at_our_index_is_dropped() {
    let mut p = Proposals::<u32>::new(10);
    let (ctx, mut rx) = track_command(&mut p, 5, 2);
    p.resolve(5, 2, &ctx, Applied::Nothing);
    assert!(matches!(rx.try_recv(), Ok(Err(ProposeError::Dropped))));
}

#[test]
fn waiters_below_an_applied_index_lost_their_slot() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut low) = track_command(&mut p, 3, 1);
    let (_, mut mid) = track_command(&mut p, 4, 1);
    let (ctx, mut high) = track_command(&mut p, 7, 2);
    let (_, mut later) = track_command(&mut p, 8, 2);
    p.resolve(7, 2, &ctx, Applied::Command(7));
    assert!(matches!(low.try_recv(), Ok(Err(ProposeError::Dropped))));
    assert!(matches!(mid.try_recv(), Ok(Err(ProposeError::Dropped))));
    assert_eq!(high.try_recv().expect("answered").expect("ok"), 7);
    assert!(pending(&mut later), "an index above is not touched");
    assert_eq!(p.len(), 1);
}

#[test]
fn an_index_without_a_waiter_is_ignored() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut rx) = track_command(&mut p, 9, 1);
    p.resolve(9 - 1, 1, b"x", Applied::Command(0));
    assert!(pending(&mut rx));
    assert_eq!(p.len(), 1);
}

#[test]
fn a_second_proposal_at_the_same_index_makes_the_first_unknown() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut first) = track_command(&mut p, 5, 1);
    let (ctx, mut second) = track_command(&mut p, 5, 2);
    assert!(matches!(first.try_recv(), Ok(Err(ProposeError::Unknown))));
    p.resolve(5, 2, &ctx, Applied::Command(5));
    assert_eq!(second.try_recv().expect("answered").expect("ok"), 5);
}

#[test]
fn conf_changes_resolve_done_and_count_as_pending() {
    let mut p = Proposals::<u32>::new(10);
    assert!(!p.conf_pending());
    let (_, mut cmd) = track_command(&mut p, 4, 1);
    assert!(!p.conf_pending(), "a command is not a configuration change");
    let ctx = conf_ctx(p.next_id());
    let (w, mut rx) = conf();
    p.track(5, 1, ctx.clone(), w);
    assert!(p.conf_pending());
    p.resolve(5, 1, &ctx, Applied::Conf);
    assert!(matches!(rx.try_recv(), Ok(Ok(AdminAnswer::Done))));
    assert!(!p.conf_pending());
    assert!(matches!(cmd.try_recv(), Ok(Err(ProposeError::Dropped))));
}

#[test]
fn a_conf_change_raft_emptied_is_dropped() {
    let mut p = Proposals::<u32>::new(10);
    let ctx = conf_ctx(p.next_id());
    let (w, mut rx) = conf();
    p.track(5, 1, ctx.clone(), w);
    // raft-rs refused it: an empty normal entry keeping the context.
    p.resolve(5, 1, &ctx, Applied::Nothing);
    assert!(matches!(rx.try_recv(), Ok(Err(ProposeError::Dropped))));
}

#[test]
fn orphans_wait_their_ticks_then_are_unknown() {
    let mut p = Proposals::<u32>::new(3);
    let (_, mut rx) = track_command(&mut p, 5, 1);
    p.tick();
    p.leadership_lost();
    p.tick();
    p.tick();
    p.expire_orphans();
    assert!(pending(&mut rx), "two of three ticks");
    // Losing leadership again does not restart the clock.
    p.leadership_lost();
    p.tick();
    p.expire_orphans();
    assert!(matches!(rx.try_recv(), Ok(Err(ProposeError::Unknown))));
    assert_eq!(p.len(), 0);
}

#[test]
fn an_orphan_whose_index_applies_in_time_is_answered_by_the_entry() {
    let mut p = Proposals::<u32>::new(3);
    let (ctx, mut ours) = track_command(&mut p, 5, 1);
    let (_, mut theirs) = track_command(&mut p, 6, 1);
    p.leadership_lost();
    p.tick();
    p.resolve(5, 1, &ctx, Applied::Command(5));
    p.resolve(6, 2, b"other", Applied::Command(6));
    assert_eq!(ours.try_recv().expect("answered").expect("ok"), 5);
    assert!(matches!(theirs.try_recv(), Ok(Err(ProposeError::Dropped))));
    for _ in 0..5 {
        p.tick();
    }
    p.expire_orphans();
    assert_eq!(p.len(), 0);
}

#[test]
fn proposals_of_a_leader_never_expire() {
    let mut p = Proposals::<u32>::new(1);
    let (_, mut rx) = track_command(&mut p, 5, 1);
    for _ in 0..10 {
        p.tick();
        p.expire_orphans();
    }
    assert!(pending(&mut rx));
}

#[test]
fn a_snapshot_makes_what_it_covers_unknown() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut below) = track_command(&mut p, 4, 1);
    let (_, mut at) = track_command(&mut p, 5, 1);
    let (_, mut above) = track_command(&mut p, 6, 1);
    p.snapshot_installed(5);
    assert!(matches!(below.try_recv(), Ok(Err(ProposeError::Unknown))));
    assert!(matches!(at.try_recv(), Ok(Err(ProposeError::Unknown))));
    assert!(pending(&mut above));
}

#[test]
fn stopping_answers_everything_unknown() {
    let mut p = Proposals::<u32>::new(10);
    let (_, mut a) = track_command(&mut p, 4, 1);
    let ctx = conf_ctx(p.next_id());
    let (w, mut b) = conf();
    p.track(5, 1, ctx, w);
    p.stop();
    assert!(matches!(a.try_recv(), Ok(Err(ProposeError::Unknown))));
    assert!(matches!(b.try_recv(), Ok(Err(ProposeError::Unknown))));
    assert_eq!(p.len(), 0);
}

#[test]
fn commands_are_told_from_no_ops_and_refused_conf_changes() {
    let entry = |data: &[u8], context: &[u8]| Entry {
        data: data.to_vec().into(),
        context: context.to_vec().into(),
        ..Default::default()
    };
    assert!(is_command(&entry(b"cmd", &command_ctx(1))));
    // A new leader's empty no-op.
    assert!(!is_command(&entry(b"", b"")));
    // An empty command still carries its id.
    assert!(is_command(&entry(b"", &command_ctx(1))));
    // A conf change raft-rs refused: emptied, context kept.
    assert!(!is_command(&entry(b"", &conf_ctx(1))));
    let mut cc = entry(b"cc", &conf_ctx(1));
    cc.set_entry_type(EntryType::EntryConfChange);
    assert!(!is_command(&cc));
}
