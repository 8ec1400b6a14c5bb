//! Raft membership through the client API: the members as this master knows them, adding
//! and removing a master, and handing leadership to another.

use super::Master;
use hetsched_common::protocol::{ClientResponse, ErrorKind, ErrorReply, MemberInfo};
use hetsched_common::MasterId;

impl Master {
    /// The members of the Raft configuration, with the leader marked.
    pub(super) async fn members(&self, stale: bool) -> Result<ClientResponse, ErrorReply> {
        self.read_barrier(stale).await?;
        let leader = self.raft.status().leader;
        Ok(ClientResponse::Members(
            self.raft
                .members()
                .into_iter()
                .map(|m| MemberInfo {
                    id: MasterId(m.id),
                    addr: m.addr,
                    voter: m.voter,
                    leader: leader == Some(m.id),
                    match_index: m.match_index,
                })
                .collect(),
        ))
    }

    /// Adds master `id` at cluster address `addr`.
    pub(super) async fn add_member(
        &self,
        id: MasterId,
        addr: String,
    ) -> Result<ClientResponse, ErrorReply> {
        if id.0 == 0 {
            return Err(ErrorReply::new(ErrorKind::Invalid, "master ids start at 1"));
        }
        hetsched_common::parse_host_port(&addr)
            .map_err(|e| ErrorReply::new(ErrorKind::Invalid, e.to_string()))?;
        self.raft
            .add_member(id.0, addr)
            .await
            .map_err(|e| self.shared.propose_error(e))?;
        Ok(ClientResponse::Done)
    }

    /// Removes master `id`.
    pub(super) async fn remove_member(&self, id: MasterId) -> Result<ClientResponse, ErrorReply> {
        self.raft
            .remove_member(id.0)
            .await
            .map_err(|e| self.shared.propose_error(e))?;
        Ok(ClientResponse::Done)
    }

    /// Hands leadership to master `id`.
    pub(super) async fn transfer_leader(&self, id: MasterId) -> Result<ClientResponse, ErrorReply> {
        self.raft
            .transfer_leader(id.0)
            .await
            .map_err(|e| self.shared.propose_error(e))?;
        Ok(ClientResponse::Done)
    }
}
