//! S0.3 promotion, the slave's side: a queued assignment (`Assignment::queued`) never starts
//! on this slave's own say. When its cores free up the agent asks the leader
//! (`TaskReport::WantsStart`, delivered by the link in the same batch as the finish report that
//! freed them, so the ask costs no extra round trip); the leader commits the start in the
//! replicated state and answers with the attempts it promoted, and only then does the pump
//! start them (docs/DESIGN.md, S0.3). An ask the leader could not grant (its room is
//! promised to a preemptor, or held after a compression) is asked again when more cores free
//! up here, and by the link with every heartbeat.

use super::Agent;
use hetsched_common::protocol::TaskReport;
use hetsched_common::{Attempt, TaskId};

/// The last asks sent, and the cores running when they were: asked again when they change
/// or cores free up.
#[derive(Debug, Default)]
pub(super) struct Asked {
    asks: Vec<(TaskId, Attempt)>,
    cpu_running_milli: u64,
}

impl Agent {
    /// Sends the queue's asks as reports when they are new or cores freed since the last.
    pub(super) fn ask_to_start(&mut self) {
        let asks = self.queue.asks();
        let cpu = self.queue.cpu_running_milli();
        let freed = cpu < self.asked.cpu_running_milli;
        if asks.is_empty() || (asks == self.asked.asks && !freed) {
            self.asked = Asked {
                asks,
                cpu_running_milli: cpu,
            };
            return;
        }
        for &(task, attempt) in &asks {
            let _ = self.reports.send(TaskReport::WantsStart { task, attempt });
        }
        tracing::debug!(?asks, "asked the leader to start queued tasks");
        self.asked = Asked {
            asks,
            cpu_running_milli: cpu,
        };
    }

    /// The leader committed the start of these attempts.
    pub(super) fn promoted(&mut self, tasks: &[(TaskId, Attempt)]) {
        let n = self.queue.promote(tasks);
        if n > 0 {
            metrics::counter!("hetsched_slave_promotions_total").increment(n as u64);
            tracing::info!(?tasks, "leader promoted queued tasks");
        }
    }
}
