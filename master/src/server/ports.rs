//! The master's I/O at both ends: what the cluster and admin ports serve (each frame is
//! routed to Raft, the client API or the slave API; admin-only requests are refused on the
//! cluster port), the caller check in front of the client API, and how the handlers reach
//! consensus (propose and wait until applied, the read barrier, the leader check).
//!
//! On a secured master the framed server has already matched the message family to the
//! peer's certificate role (`hetsched_common::wire::authz`); here the client request is
//! matched to the caller ([`super::authz::Authz`]) and a slave's requests to the name in its
//! certificate.

use super::admin::refuse_off_admin;
use super::authz::{scope_request, Authz, Caller};
use super::reply::message_name;
use super::Replicated;
use super::{now_ms, Master};
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply, Message};
use hetsched_common::wire::{Handler, Peer};
use hetsched_common::ClientRequestId;
use hetsched_consensus::{Consensus, ProposeError, Role};
use hetsched_master_core::state::{Command, CommandEnvelope, Outcome};
use std::sync::Arc;

impl Master {
    /// The frame handler for the cluster port (`admin` false) or the admin port (true):
    /// both serve everything, except that benchmark and fault-injection requests are
    /// refused on the cluster port.
    pub(super) fn handler(&self, admin: bool) -> Handler {
        let me = self.clone();
        Arc::new(move |msg, peer| {
            let me = me.clone();
            Box::pin(async move { me.handle(msg, admin, peer).await })
        })
    }

    async fn handle(&self, msg: Message, admin: bool, peer: Peer) -> Option<Message> {
        if let (false, Message::Client(req)) = (admin, &msg) {
            if let Some(refusal) = refuse_off_admin(req) {
                return Some(Message::Error(refusal));
            }
        }
        match msg {
            Message::Raft { from, msgs } => {
                // A master certificate named by its id (as `hetsched up` and the launcher
                // issue them) speaks only for that id.
                let claimed = peer
                    .identity
                    .as_ref()
                    .and_then(|i| i.name.parse::<u64>().ok());
                if peer.secured && claimed.is_some_and(|c| c != from.0) {
                    tracing::warn!(%peer, from = from.0, "Raft traffic under another master's id dropped");
                    return None;
                }
                self.raft
                    .step(from.0, msgs.into_iter().map(|b| b.into_vec()).collect());
                None
            }
            // Each family's future boxed on its own: the handler's future is allocated per
            // frame, and the client API's is many times a slave request's (the copy into a
            // fresh allocation showed in a 10,000-slave leader's profile).
            Message::Client(req) => Some(Box::pin(self.client_frame(req, &peer)).await),
            Message::Slave(req) => Some(match self.authz(|a| a.check_slave_name(&peer, &req)) {
                Err(e) => Message::Error(e),
                Ok(()) => match Box::pin(self.slave(req, &peer)).await {
                    Ok(r) => Message::SlaveReply(r),
                    Err(e) => Message::Error(e),
                },
            }),
            other => Some(Message::Error(ErrorReply::new(
                ErrorKind::Unsupported,
                format!("a master does not serve {}", message_name(&other)),
            ))),
        }
    }

    /// A client request from a port: its caller found and checked, then answered.
    async fn client_frame(&self, mut req: ClientRequest, peer: &Peer) -> Message {
        let admitted = self.authz(|a| {
            let c = a.caller(peer)?;
            scope_request(&c, &mut req);
            a.authorize(&c, &req)
        });
        if let Err(e) = admitted {
            return Message::Error(e);
        }
        let submit = matches!(req, ClientRequest::Submit { .. });
        if submit {
            tracing::debug!(target: "hetsched::trace", %peer, "submit: received");
        }
        let started = std::time::Instant::now();
        let answer = self.client(req).await;
        if submit {
            metrics::histogram!("hetsched_master_submit_seconds", "via" => "cluster")
                .record(started.elapsed());
        }
        match answer {
            Ok(r) => Message::ClientReply(r),
            Err(e) => Message::Error(e),
        }
    }

    /// An authorization decision over the applied state, now.
    fn authz<T>(&self, decide: impl FnOnce(&Authz<'_>) -> T) -> T {
        let s = self.shared.read_state();
        decide(&Authz::new(&s, &self.token_cache, now_ms()))
    }

    /// The user and role of an API token (the HTTP API's bearer tokens).
    pub(super) fn token_caller(&self, token: &str) -> Result<Caller, ErrorReply> {
        self.authz(|a| a.token_caller(token))
    }

    /// Admits `req` from `caller`, or says why not (the HTTP API's requests).
    pub(super) fn authorize(&self, caller: &Caller, req: &ClientRequest) -> Result<(), ErrorReply> {
        self.authz(|a| a.authorize(caller, req))
    }

    /// Proposes a command and waits until it is applied.
    pub(super) async fn propose(
        &self,
        command: Command,
        request: Option<ClientRequestId>,
    ) -> Result<Outcome, ErrorReply> {
        propose_stamped(&self.raft, command, request)
            .await
            .map_err(|(e, _)| self.shared.propose_error(e))
    }

    /// A linearizable read (Raft ReadIndex) unless the client accepts a stale answer: only a
    /// leader confirmed by a quorum, with everything committed before the read applied,
    /// answers. A deposed leader cut off from the majority cannot confirm and never answers.
    pub(super) async fn read_barrier(&self, stale: bool) -> Result<(), ErrorReply> {
        if stale {
            return Ok(());
        }
        self.raft
            .read_index()
            .await
            .map(|_| ())
            .map_err(|e| self.shared.propose_error(e))
    }

    /// `NotLeader` (naming the leader when known) unless this master leads.
    pub(super) fn require_leader(&self) -> Result<(), ErrorReply> {
        let st = self.raft.status();
        if st.role == Role::Leader {
            Ok(())
        } else {
            Err(self.shared.not_leader(st.leader))
        }
    }
}

/// Stamps `command` with the leader's clock, proposes it and waits until it applied on this
/// (leading) master, recording the commit latency. A refused command comes back with the
/// error (the report group commit splits a group too large for one entry).
pub(super) async fn propose_stamped(
    raft: &Consensus<Replicated>,
    command: Command,
    request: Option<ClientRequestId>,
) -> Result<Outcome, (ProposeError, Box<Command>)> {
    let env = CommandEnvelope {
        at_ms: now_ms(),
        request,
        command,
    };
    let started = std::time::Instant::now();
    match raft.propose(env.encode()).await {
        Ok(outcome) => {
            metrics::histogram!("hetsched_master_raft_commit_seconds").record(started.elapsed());
            Ok(outcome)
        }
        Err(e) => Err((e, Box::new(env.command))),
    }
}
