//! S2: a batch job whose planned slave was lost (or drains) is re-planned by the leader
//! (`plan::batch_submit::replan_job`) and the new pins proposed in one `ReplanBatchJob`
//! entry, once while in flight; apply fences a stale one (its tasks no longer pending).

use super::{DeadlineKey, DutiesCore, Effect, ProposalTag, Role};
use crate::plan::batch_submit::{jobs_to_replan, replan_job};
use crate::state::ClusterState;

impl DutiesCore {
    /// Proposes a re-plan for each batch job with a pending task stranded on a slave that
    /// takes no work.
    pub(super) fn replan_batches(&mut self, view: &ClusterState, fx: &mut Vec<Effect>) {
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        for job in jobs_to_replan(view) {
            let key = DeadlineKey::Replan(job);
            if l.deadlines.contains(&key) {
                continue;
            }
            if let Some(command) = replan_job(view, job) {
                l.deadlines.insert(key);
                fx.push(Effect::Propose {
                    tag: ProposalTag::Deadline(key),
                    command,
                });
            }
        }
    }
}
