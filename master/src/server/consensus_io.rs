//! How the request handlers reach consensus: propose a command and wait until it applied,
//! the linearizable read barrier, and the leader check that guards writes.

use super::{now_ms, Master};
use hetsched_common::protocol::ErrorReply;
use hetsched_common::ClientRequestId;
use hetsched_consensus::Role;
use hetsched_master_core::state::{Command, CommandEnvelope, Outcome};

impl Master {
    /// Proposes a command and waits until it is applied.
    pub(super) async fn propose(
        &self,
        command: Command,
        request: Option<ClientRequestId>,
    ) -> Result<Outcome, ErrorReply> {
        let bytes = CommandEnvelope {
            at_ms: now_ms(),
            request,
            command,
        }
        .encode();
        let started = std::time::Instant::now();
        let r = self.raft.propose(bytes).await;
        if r.is_ok() {
            // Proposal to applied on this (leading) master.
            metrics::histogram!("hetsched_master_raft_commit_seconds").record(started.elapsed());
        }
        r.map_err(|e| self.shared.propose_error(e))
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
