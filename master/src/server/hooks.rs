//! Test hooks, reachable only through the admin port (`master --admin`): the deliberate
//! bugs the chaos tests switch on with `SetBugs` (`hetsched chaos --bug`, docs/guide/chaos.md)
//! to see the history checker fail. `boot::run` installs them only on a master with an
//! admin listener: the admin port's handler answers `SetBugs`, and a layer in front of the
//! cluster port's handler carries the bug out. No product type holds them and no product
//! handler consults them; a master without `--admin` has no layer at all.

use hetsched_common::protocol::{
    BugSpec, ClientRequest, ClientResponse, ErrorKind, ErrorReply, Message,
};
use hetsched_common::wire::Handler;
use hetsched_common::{JobId, TaskId};
use std::sync::{Arc, Mutex};

/// Whether this master leads now (the bug acknowledges only where a submit would commit).
pub(super) type Leading = Arc<dyn Fn() -> bool + Send + Sync>;

/// Told of every new set of bugs: a bug carried out elsewhere than at the ports (the
/// dependency gate lives in the duties' scheduler) is switched through it.
pub(super) type Switched = Arc<dyn Fn(&BugSpec) + Send + Sync>;

/// The deliberate bugs switched on, shared by the two ports' layers.
#[derive(Clone, Default)]
pub(super) struct AdminHooks {
    bugs: Arc<Mutex<BugSpec>>,
}

impl AdminHooks {
    /// The admin port's handler: `SetBugs` switches the bugs here (and tells `switched`),
    /// the rest goes to `inner`.
    pub fn admin_port(&self, inner: Handler, switched: Switched) -> Handler {
        let bugs = self.bugs.clone();
        Arc::new(move |msg, peer| match msg {
            Message::Client(ClientRequest::SetBugs(b)) => {
                tracing::warn!(bugs = ?b, "deliberate bugs changed");
                switched(&b);
                match bugs.lock() {
                    Ok(mut cur) => *cur = b,
                    Err(p) => *p.into_inner() = b,
                }
                Box::pin(async { Some(Message::ClientReply(ClientResponse::Done)) })
            }
            other => inner(other, peer),
        })
    }

    /// The cluster port's handler with the switched-on bugs in front of `inner`.
    pub fn cluster_port(&self, inner: Handler, leading: Leading) -> Handler {
        let bugs = self.bugs.clone();
        Arc::new(move |msg, peer| {
            let on = bugs.lock().map(|b| b.clone()).unwrap_or_default();
            if let Some(answer) = fake_answer(&on, &msg, leading()) {
                return Box::pin(async move { Some(answer) });
            }
            if !(on.exit_after_commit && leading() && is_submit(&msg)) {
                return inner(msg, peer);
            }
            let answer = inner(msg, peer);
            Box::pin(async move {
                let answer = answer.await;
                if answer.as_ref().is_some_and(committed) {
                    tracing::error!("deliberate bug exit-after-commit: exiting before the answer");
                    std::process::exit(EXIT_AFTER_COMMIT);
                }
                answer
            })
        })
    }
}

/// The exit status of a master the `exit_after_commit` bug stopped.
const EXIT_AFTER_COMMIT: i32 = 86;

/// A submission of a job or a flow.
fn is_submit(msg: &Message) -> bool {
    matches!(
        msg,
        Message::Client(ClientRequest::Submit { .. } | ClientRequest::SubmitFlow { .. })
    )
}

/// An answer that says a submission committed.
fn committed(answer: &Message) -> bool {
    matches!(
        answer,
        Message::ClientReply(ClientResponse::Submitted { .. } | ClientResponse::FlowSubmitted(_))
    )
}

/// The answer to `SetBugs` anywhere but the admin port's layer (the HTTP API has no route
/// for it; the cluster port refuses it before).
pub(super) fn not_here() -> ErrorReply {
    ErrorReply::new(
        ErrorKind::Forbidden,
        "deliberate-bug switches are served only on the admin listener (master --admin \
         HOST:PORT)",
    )
}

/// What a switched-on bug answers instead of the master, if anything. `ack_before_commit`:
/// a submit to the leader is answered with made-up ids and never proposed (acknowledged,
/// never committed: the checker's `acked-lost`).
fn fake_answer(bugs: &BugSpec, msg: &Message, leading: bool) -> Option<Message> {
    let Message::Client(ClientRequest::Submit { request, spec, .. }) = msg else {
        return None;
    };
    if !bugs.ack_before_commit || !leading {
        return None;
    }
    let base = u64::MAX / 2 + (request.0 >> 16);
    Some(Message::ClientReply(ClientResponse::Submitted {
        job: JobId(base),
        tasks: (0..u64::from(spec.count))
            .map(|i| TaskId(base + i))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_common::wire::Peer;
    use hetsched_common::ClientRequestId;

    fn submit(count: u32) -> Message {
        Message::Client(ClientRequest::Submit {
            request: ClientRequestId(7 << 16),
            spec: crate::server::test_state::spec("u", count, 1),
            allow_unplaceable: false,
        })
    }

    #[test]
    fn ack_before_commit_fakes_a_leaders_submits_only() {
        let on = BugSpec {
            ack_before_commit: true,
            ..BugSpec::default()
        };
        let Some(Message::ClientReply(ClientResponse::Submitted { job, tasks })) =
            fake_answer(&on, &submit(2), true)
        else {
            panic!("a submit to the leader is faked");
        };
        assert_eq!(job, JobId(u64::MAX / 2 + 7));
        assert_eq!(tasks, vec![TaskId(job.0), TaskId(job.0 + 1)]);
        assert_eq!(
            fake_answer(&on, &submit(1), false),
            None,
            "a follower redirects"
        );
        assert_eq!(fake_answer(&BugSpec::default(), &submit(1), true), None);
        let status = Message::Client(ClientRequest::Status { stale: true });
        assert_eq!(fake_answer(&on, &status, true), None);
    }

    #[test]
    fn the_admin_port_switches_the_bugs_the_cluster_port_carries_out() {
        let hooks = AdminHooks::default();
        let inner: Handler = Arc::new(|_, _| Box::pin(async { None }));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let told = seen.clone();
        let admin = hooks.admin_port(
            inner.clone(),
            Arc::new(move |b: &BugSpec| told.lock().expect("lock").push(b.clone())),
        );
        let cluster = hooks.cluster_port(inner, Arc::new(|| true));
        let peer = Peer::plain("127.0.0.1:1".parse().expect("address"));
        let answer = |h: &Handler, m: Message| futures::executor::block_on(h(m, peer.clone()));
        assert_eq!(answer(&cluster, submit(1)), None, "off: the master answers");
        let on = BugSpec {
            ack_before_commit: true,
            skip_dependency_gate: true,
            ..BugSpec::default()
        };
        let set = Message::Client(ClientRequest::SetBugs(on.clone()));
        assert_eq!(
            answer(&admin, set),
            Some(Message::ClientReply(ClientResponse::Done))
        );
        assert!(matches!(
            answer(&cluster, submit(1)),
            Some(Message::ClientReply(ClientResponse::Submitted { .. }))
        ));
        // A bug carried out elsewhere (the dependency gate, in the duties) is told.
        assert_eq!(*seen.lock().expect("lock"), vec![on]);
    }
}
