//! What only the admin listener serves (docs/CONTRACT.md): benchmark proposals and checks,
//! fault injection, the deliberate-bug switches of the chaos tests and log exports. None
//! changes what a user owns, but each can flood the log or cut a master off, so the
//! cluster port refuses them. The one deliberate bug on the product path is reached only
//! through `Master::ack_before_commit_bug`.

use super::Master;
use hetsched_common::protocol::{
    BugSpec, ClientRequest, ClientResponse, ErrorKind, ErrorReply, FaultSpec, LogEntry, LogPage,
    LogSnapshot,
};
use hetsched_common::{ClientRequestId, JobId, JobSpec, MasterId, TaskId};
use hetsched_consensus::FaultConfig;
use hetsched_master_core::state::Command;

/// Requests served only on the admin listener: they change nothing a user owns but can
/// flood the log (benchmark proposals with payloads) or cut a master off (faults).
fn admin_only(req: &ClientRequest) -> Option<&'static str> {
    match req {
        ClientRequest::BenchPropose { .. } | ClientRequest::BenchCheck { .. } => {
            Some("benchmark requests")
        }
        ClientRequest::SetFaults(_) => Some("fault-injection requests"),
        ClientRequest::SetBugs(_) => Some("deliberate-bug switches"),
        ClientRequest::ExportLog { .. } => Some("log exports"),
        _ => None,
    }
}

/// The refusal of an admin-only request that came in on the cluster port.
pub(super) fn refuse_off_admin(req: &ClientRequest) -> Option<ErrorReply> {
    admin_only(req).map(|what| {
        ErrorReply::new(
            ErrorKind::Forbidden,
            format!(
                "{what} are served only on the admin listener (master --admin HOST:PORT), \
                 not on the cluster port"
            ),
        )
    })
}

impl Master {
    /// The deliberate bug `ack_before_commit` (chaos tests), when switched on: the submit is
    /// answered with made-up ids and never proposed. `None`: submit as usual.
    pub(super) fn ack_before_commit_bug(
        &self,
        request: ClientRequestId,
        spec: &JobSpec,
    ) -> Option<ClientResponse> {
        if !self.bugs.lock().is_ok_and(|b| b.ack_before_commit) {
            return None;
        }
        // Deliberate bug: acknowledged, never committed.
        let base = u64::MAX / 2 + (request.0 >> 16);
        Some(ClientResponse::Submitted {
            job: JobId(base),
            tasks: (0..u64::from(spec.count))
                .map(|i| TaskId(base + i))
                .collect(),
        })
    }

    /// A benchmark proposal: a `Bench` entry, acknowledged once applied.
    pub(super) async fn bench_propose(&self, cmd: Command) -> Result<ClientResponse, ErrorReply> {
        self.propose(cmd, None).await?;
        Ok(ClientResponse::Done)
    }

    /// How many of a benchmark client's proposals applied, and which acknowledged ones did
    /// not.
    pub(super) async fn bench_check(
        &self,
        client: u64,
        acked: Vec<u64>,
    ) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(false).await?;
        let s = self.shared.read_state();
        let empty = Default::default();
        let c = s.bench().get(&client).unwrap_or(&empty);
        Ok(ClientResponse::BenchChecked {
            applied: c.recorded.len() as u64,
            missing: acked
                .into_iter()
                .filter(|q| !c.recorded.contains(q))
                .collect(),
        })
    }

    /// Switches this master's fault injection.
    pub(super) fn set_faults(&self, f: FaultSpec) -> ClientResponse {
        tracing::warn!(faults = ?f, "fault injection changed");
        self.raft.set_faults(FaultConfig {
            seed: f.seed,
            drop_rate: f.drop_rate.clamp(0.0, 1.0),
            delay: std::time::Duration::from_millis(f.delay_ms),
            cut: f.cut.iter().map(|m| m.0).collect(),
            isolated: f.isolated,
        });
        ClientResponse::Done
    }

    /// Switches this master's deliberate bugs.
    pub(super) fn set_bugs(&self, b: BugSpec) -> ClientResponse {
        tracing::warn!(bugs = ?b, "deliberate bugs changed");
        // Issue 51: the gate lives in the scheduler, which the duties executor holds.
        self.duties
            .do_send(super::duties_executor::SetDependencyGate(
                !b.skip_dependency_gate,
            ));
        if let Ok(mut cur) = self.bugs.lock() {
            *cur = b;
        }
        ClientResponse::Done
    }

    /// One page of this master's log (and its snapshot when the page starts before it).
    pub(super) async fn export_log(
        &self,
        from: u64,
        max_bytes: u64,
    ) -> Result<ClientResponse, ErrorReply> {
        // Bounded so that one page (plus a small cluster's snapshot) stays far inside
        // a frame.
        const DEFAULT_PAGE: u64 = 1024 * 1024;
        const MAX_PAGE: u64 = 4 * 1024 * 1024;
        let max_bytes = match max_bytes {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let page = self
            .raft
            .export_log(from, max_bytes)
            .await
            .map_err(|e| ErrorReply::new(ErrorKind::Unavailable, e.to_string()))?;
        Ok(ClientResponse::LogPage(LogPage {
            master: MasterId(self.raft.id()),
            snapshot: page.snapshot.map(|(index, state)| LogSnapshot {
                index,
                state: serde_bytes::ByteBuf::from(state),
            }),
            entries: page
                .entries
                .into_iter()
                .map(|(index, command)| LogEntry {
                    index,
                    command: serde_bytes::ByteBuf::from(command),
                })
                .collect(),
            next: page.next,
            applied: page.applied,
        }))
    }
}
