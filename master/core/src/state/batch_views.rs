//! What listings show of S2 batches: the batch fields of `jobs --json`, and `batch --json`
//! (planned against actual makespan, per job and in total). Times are seconds after the
//! batch's submission on the leader's clock, so planned and actual compare directly.

use super::model::Job;
use super::ClusterState;
use hetsched_common::protocol::{BatchInfo, BatchJobInfo, BatchTaskInfo, JobInfo};

fn secs_after(ms: u64, from_ms: u64) -> f64 {
    ms.saturating_sub(from_ms) as f64 / 1000.0
}

impl ClusterState {
    /// Fills a job listing's batch fields (left `None` for a plain job).
    pub(super) fn fill_batch_fields(&self, j: &Job, info: &mut JobInfo) {
        let Some(bj) = self.batch.jobs.get(&j.id) else {
            return;
        };
        let Some(b) = self.batch.batches.get(&bj.batch) else {
            return;
        };
        info.batch_id = Some(b.id);
        info.planned_start_s = Some(bj.planned_start_s.0);
        info.planned_finish_s = Some(bj.planned_finish_s.0);
        info.actual_finish_s = j.finished_ms.map(|f| secs_after(f, b.submitted_ms));
    }

    /// `batch N --json` (`None`: no such batch, or collected).
    pub fn batch_info(&self, id: u64) -> Option<BatchInfo> {
        let b = self.batch.batches.get(&id)?;
        let mut jobs = Vec::with_capacity(b.jobs.len());
        let mut all_done = true;
        let mut last = b.submitted_ms;
        for jid in &b.jobs {
            let (Some(j), Some(bj)) = (self.jobs.get(jid), self.batch.jobs.get(jid)) else {
                continue;
            };
            match j.finished_ms {
                Some(f) => last = last.max(f),
                None => all_done = false,
            }
            let tasks = j
                .tasks
                .iter()
                .filter_map(|t| {
                    Some(BatchTaskInfo {
                        task_id: *t,
                        node: self.batch.tasks.get(t)?.node,
                        blocks: self.task_blocks(*t)?,
                    })
                })
                .collect();
            jobs.push(BatchJobInfo {
                job_id: *jid,
                index: bj.index,
                state: self.job_info(j).state,
                planned_start_s: bj.planned_start_s.0,
                planned_finish_s: bj.planned_finish_s.0,
                actual_finish_s: j.finished_ms.map(|f| secs_after(f, b.submitted_ms)),
                tasks,
            });
        }
        Some(BatchInfo {
            batch_id: b.id,
            planned_makespan_s: b.planned_makespan_s.0,
            actual_makespan_s: all_done.then(|| secs_after(last, b.submitted_ms)),
            submitted_ms: b.submitted_ms,
            replans: b.replans,
            jobs,
        })
    }
}
