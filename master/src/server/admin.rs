//! What only the admin listener serves (docs/CONTRACT.md): benchmark proposals and checks,
//! fault injection, log exports and Raft membership's validation. None changes what a user
//! owns, but each can flood the log or cut a master off, so the cluster port refuses them.
//! [`Admin`] decides (refusals, the fault configuration, page sizes, the answers);
//! `client_api` does the I/O. The deliberate-bug switches are not here: they are test
//! hooks, in `hooks`.

use hetsched_common::protocol::{
    ClientRequest, ClientResponse, ErrorKind, ErrorReply, FaultSpec, LogEntry, LogPage,
    LogSnapshot, MemberInfo,
};
use hetsched_common::MasterId;
use hetsched_consensus::FaultConfig;
use hetsched_master_core::state::Replica;

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

/// Largest page of an exported log when the request names none: one page (plus a small
/// cluster's snapshot) stays far inside a frame.
const DEFAULT_PAGE: u64 = 1024 * 1024;
/// Largest page of an exported log.
const MAX_PAGE: u64 = 4 * 1024 * 1024;

/// The admin requests' decisions, over the applied state.
pub(super) struct Admin<'a> {
    state: &'a Replica,
}

impl<'a> Admin<'a> {
    /// Decisions against `state`.
    pub fn new(state: &'a Replica) -> Self {
        Self { state }
    }

    /// How many of a benchmark client's proposals applied, and which acknowledged ones did
    /// not.
    pub fn bench_checked(&self, client: u64, acked: Vec<u64>) -> ClientResponse {
        let empty = Default::default();
        let c = self.state.bench().get(&client).unwrap_or(&empty);
        ClientResponse::BenchChecked {
            applied: c.recorded.len() as u64,
            missing: acked
                .into_iter()
                .filter(|q| !c.recorded.contains(q))
                .collect(),
        }
    }

    /// A fault injection as consensus takes it (the drop rate held to 0–1).
    pub fn faults(f: &FaultSpec) -> FaultConfig {
        FaultConfig {
            seed: f.seed,
            drop_rate: f.drop_rate.clamp(0.0, 1.0),
            delay: std::time::Duration::from_millis(f.delay_ms),
            cut: f.cut.iter().map(|m| m.0).collect(),
            isolated: f.isolated,
        }
    }

    /// The size of a log page asked for as `max_bytes` (0: the default).
    pub fn page_bytes(max_bytes: u64) -> u64 {
        match max_bytes {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        }
    }

    /// Consensus's page of master `master`'s log as the client reads it.
    pub fn log_page(master: MasterId, page: hetsched_consensus::LogPage) -> ClientResponse {
        ClientResponse::LogPage(LogPage {
            master,
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
        })
    }

    /// A master to add to the Raft configuration: ids start at 1, the address must parse.
    pub fn member_to_add(id: MasterId, addr: &str) -> Result<(), ErrorReply> {
        if id.0 == 0 {
            return Err(ErrorReply::new(ErrorKind::Invalid, "master ids start at 1"));
        }
        hetsched_common::parse_host_port(addr)
            .map(|_| ())
            .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))
    }

    /// The members of the Raft configuration, with the leader marked.
    pub fn members(
        members: Vec<hetsched_consensus::Member>,
        leader: Option<u64>,
    ) -> ClientResponse {
        ClientResponse::Members(
            members
                .into_iter()
                .map(|m| MemberInfo {
                    id: MasterId(m.id),
                    addr: m.addr,
                    voter: m.voter,
                    leader: leader == Some(m.id),
                    match_index: m.match_index,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
