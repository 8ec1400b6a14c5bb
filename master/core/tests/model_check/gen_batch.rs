//! The generator's S2 batch commands: batches planned by the leader's real code
//! (`plan::batch_submit`) on the state now, re-plans of batch jobs stranded on nodes that
//! take no work, and bogus ones (unknown pins, tasks of other jobs, stale re-plans).

use super::Generator;
use hetsched_common::protocol::BatchSubmit;
use hetsched_common::{ClientRequestId, JobId};
use hetsched_master_core::plan::batch_submit::{jobs_to_replan, plan_submission, replan_job};
use hetsched_master_core::state::{BatchTask, ClusterState, Command, TaskBlock};

impl Generator {
    /// One batch command (with its request id, if any).
    pub(super) fn batch_command(
        &mut self,
        s: &ClusterState,
        open: usize,
    ) -> (Command, Option<ClientRequestId>) {
        match self.rng.below(10) {
            0..=3 if open <= super::MAX_OPEN => {
                let hosts = self.rng.range(1, 3);
                let jobs = self.rng.range(1, 3);
                let mut file = format!(
                    "{{\"cores_per_host\": [{}], \"transfer_speed\": 100, \"alpha\": 0.05, \"jobs\": [",
                    vec!["2"; hosts as usize].join(",")
                );
                for j in 0..jobs {
                    let blocks: Vec<String> = (0..self.rng.range(1, 4))
                        .map(|_| {
                            format!(
                                "{{\"size\": {}, \"replicas\": [{}]}}",
                                self.rng.range(1, 50),
                                self.rng.below(hosts)
                            )
                        })
                        .collect();
                    let sep = if j > 0 { "," } else { "" };
                    file.push_str(&format!(
                        "{sep}{{\"speed\": 10, \"blocks\": [{}]}}",
                        blocks.join(",")
                    ));
                }
                file.push_str("]}");
                let req = BatchSubmit {
                    file,
                    command: vec!["true".into()],
                    user: "u0".into(),
                };
                match plan_submission(s, &req) {
                    Ok(mut batch) => {
                        if self.chance(10) {
                            // A pin no registered node has: the whole batch is refused.
                            if let Some(t) =
                                batch.jobs.first_mut().and_then(|j| j.tasks.first_mut())
                            {
                                t.node = self.any_node(s);
                            }
                        }
                        self.with_request(Command::SubmitBatch { batch })
                    }
                    Err(_) => (
                        Command::LeaderBarrier {
                            master: 4,
                            accounting: None,
                        },
                        None,
                    ),
                }
            }
            4..=7 => {
                let stranded = jobs_to_replan(s);
                let command = self
                    .pick(&stranded)
                    .and_then(|job| replan_job(s, job))
                    .unwrap_or(Command::LeaderBarrier {
                        master: 5,
                        accounting: None,
                    });
                (command, None)
            }
            _ => {
                // A bogus re-plan: any job, any task, any node.
                let jobs: Vec<JobId> = s.batch_book().jobs.keys().copied().collect();
                let job = self.pick(&jobs).unwrap_or(JobId(self.rng.below(5)));
                let task = self.any_task(s);
                let node = self.any_node(s);
                let t = BatchTask {
                    node,
                    blocks: vec![TaskBlock {
                        block: self.rng.below(3) as u32,
                        read_from: self.any_node(s),
                    }],
                };
                (
                    Command::ReplanBatchJob {
                        job,
                        tasks: vec![(task, t)],
                    },
                    None,
                )
            }
        }
    }
}
