//! Membership: adding and removing members and handing leadership over (requests from the
//! handle), following applied configuration changes in the address map and the peer tasks,
//! and publishing the configuration as [`Member`]s.
//!
//! One configuration change at a time: a request while one of ours (or one raft-rs knows
//! of) is pending is `Invalid`. A new member's address travels in its `ConfChange` context
//! and is persisted with the address map once the change is applied.

use super::proposals::{conf_ctx, Waiter};
use super::RaftNode;
use crate::{Member, ProposeError, StateMachine};
use raft::eraftpb::{ConfChange, ConfChangeType};
use raft::StateRole;
use std::collections::BTreeMap;
use tokio::sync::oneshot;

/// A membership request.
pub(crate) enum AdminOp {
    Add(u64, String),
    Remove(u64),
    Transfer(u64),
}

/// What the actor answers to a membership request.
pub(crate) enum AdminAnswer {
    /// Applied (or nothing to do).
    Done,
    /// A leadership transfer to this member has started; the handle waits for it.
    Transferring(u64),
}

/// Where the answer to a membership request goes.
pub(crate) type AdminReply = oneshot::Sender<Result<AdminAnswer, ProposeError>>;

impl<S: StateMachine> RaftNode<S> {
    fn voters(&self) -> Vec<u64> {
        self.raw.store().conf_state().get_voters().to_vec()
    }

    /// A membership request: checked, then proposed as a `ConfChange` (or a leadership
    /// transfer started), answered once applied.
    pub(super) fn admin(&mut self, op: AdminOp, reply: AdminReply) {
        if self.raw.raft.state != StateRole::Leader {
            let _ = reply.send(Err(ProposeError::NotLeader {
                leader: self.leader(),
            }));
            return;
        }
        let voters = self.voters();
        let cs = self.raw.store().conf_state();
        let is_member = |id: u64| voters.contains(&id) || cs.get_learners().contains(&id);
        let conf_pending = self.raw.raft.has_pending_conf() || self.proposals.conf_pending();
        let invalid = |why: String| Err(ProposeError::Invalid(why));
        let (cc, answer) = match op {
            AdminOp::Transfer(to) => {
                let r = if to == self.id {
                    Ok(AdminAnswer::Done)
                } else if !voters.contains(&to) {
                    invalid(format!("{to} is not a voter"))
                } else {
                    self.raw.transfer_leader(to);
                    Ok(AdminAnswer::Transferring(to))
                };
                let _ = reply.send(r);
                return;
            }
            AdminOp::Remove(id) if id == self.id => {
                // Hand leadership to the most up-to-date other voter first; the caller then
                // retries the removal there.
                let to = voters
                    .iter()
                    .filter(|&&v| v != self.id)
                    .max_by_key(|&&v| self.raw.raft.prs().get(v).map_or(0, |p| p.matched))
                    .copied();
                let r = match to {
                    Some(to) if !conf_pending => {
                        self.raw.transfer_leader(to);
                        Ok(AdminAnswer::Transferring(to))
                    }
                    Some(_) => invalid("a configuration change is pending".into()),
                    None => invalid("cannot remove the only voter".into()),
                };
                let _ = reply.send(r);
                return;
            }
            _ if conf_pending => {
                let _ = reply.send(invalid("a configuration change is pending".into()));
                return;
            }
            AdminOp::Add(id, addr) => {
                if id == 0 || is_member(id) {
                    let _ = reply.send(invalid(format!("{id} is already a member (or 0)")));
                    return;
                }
                // A log that still starts at index 1 (a data dir bootstrapped before snapshots
                // existed) would let the new member replicate from the log alone, and the
                // initial configuration is in no entry: compact first so it gets a snapshot.
                if self.raw.store().first_index_now() <= 1 {
                    if let Err(e) = self.maybe_snapshot(true) {
                        tracing::error!(member = self.id, error = %e, "snapshot before adding a member failed");
                        let _ = reply.send(Err(ProposeError::Dropped));
                        return;
                    }
                }
                let cc = ConfChange {
                    change_type: ConfChangeType::AddNode,
                    node_id: id,
                    context: addr.into_bytes().into(),
                    ..Default::default()
                };
                (cc, reply)
            }
            AdminOp::Remove(id) => {
                if !is_member(id) {
                    let _ = reply.send(invalid(format!("{id} is not a member")));
                    return;
                }
                let cc = ConfChange {
                    change_type: ConfChangeType::RemoveNode,
                    node_id: id,
                    ..Default::default()
                };
                (cc, reply)
            }
        };
        let context = conf_ctx(self.proposals.next_id());
        match self.raw.propose_conf_change(context.clone(), cc) {
            Ok(()) => self.track(context, Waiter::Conf(answer)),
            Err(e) => {
                tracing::debug!(member = self.id, error = %e, "conf change refused by raft");
                let _ = answer.send(Err(ProposeError::Dropped));
            }
        }
    }

    /// Follows an applied configuration change in the address map and the peer tasks.
    pub(super) fn conf_addresses(
        &mut self,
        ty: ConfChangeType,
        id: u64,
        context: &[u8],
    ) -> Result<(), crate::Error> {
        let mut addrs = self
            .shared
            .addrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match ty {
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                match std::str::from_utf8(context) {
                    Ok(a) if !a.is_empty() => {
                        addrs.insert(id, a.to_string());
                    }
                    _ => tracing::warn!(member = self.id, id, "member added without an address"),
                }
            }
            ConfChangeType::RemoveNode => {
                addrs.remove(&id);
                if id == self.id {
                    tracing::info!(member = self.id, "this member was removed from the cluster");
                }
            }
        }
        tracing::info!(member = self.id, ?ty, id, "configuration change applied");
        self.set_addrs(addrs, true)
    }

    /// Replaces the address map (writing it to sled when `persist`) and the peer tasks.
    pub(super) fn set_addrs(
        &mut self,
        addrs: BTreeMap<u64, String>,
        persist: bool,
    ) -> Result<(), crate::Error> {
        if persist {
            self.raw.mut_store().set_addrs(&addrs)?;
        }
        if let Some(t) = self.transport.as_mut() {
            t.set_peers(&addrs);
        }
        *self.shared.addrs.write().unwrap_or_else(|p| p.into_inner()) = addrs;
        Ok(())
    }

    /// The applied configuration with addresses and (on the leader) match indexes.
    pub(super) fn publish_members(&self) {
        let cs = self.raw.store().conf_state();
        let leading = self.raw.raft.state == StateRole::Leader;
        let addrs = self.shared.addrs.read().unwrap_or_else(|p| p.into_inner());
        let member = |id: u64, voter: bool| Member {
            id,
            addr: addrs.get(&id).cloned(),
            voter,
            match_index: if leading {
                self.raw.raft.prs().get(id).map(|p| p.matched)
            } else {
                None
            },
        };
        let mut members: Vec<Member> = cs
            .get_voters()
            .iter()
            .map(|&id| member(id, true))
            .chain(cs.get_learners().iter().map(|&id| member(id, false)))
            .collect();
        members.sort_by_key(|m| m.id);
        drop(addrs);
        let mut out = self
            .shared
            .members
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if *out != members {
            *out = members;
        }
    }
}
