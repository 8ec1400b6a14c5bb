//! S3.2 in the leader duties: each running GPU task submitted with `--class` gets a
//! [`CpuSearch`]; its slave's probe samples (arriving with heartbeats) are averaged over
//! `--probe-period` at the count being measured, and each step is committed
//! (`SetTaskCpus`) and sent to the slave, which applies it live. The end is recorded for
//! the task's class (`RecordCpuConfig`). Pure like the rest of the core.

use super::{DutiesCore, Effect, Leading, Now, ProposalTag, Role};
use crate::sched::cpu_search::{CpuSearch, SearchStep};
use crate::state::{ClusterState, Command, CpuSearchPhase, TaskRef};
use hetsched_common::protocol::ProbeSample;
use hetsched_common::{Attempt, CpuSearchSpec, NodeId, TaskId, TaskState};

/// A CPU change not seen in the slave's samples is sent again after this long.
const RESEND_MS: u64 = 1_000;

/// One running search.
#[derive(Debug)]
pub(super) struct SearchRun {
    search: CpuSearch,
    /// The count being measured, millicores (what the last committed step set).
    target_milli: u64,
    /// A `SetTaskCpus` or `RecordCpuConfig` of this search is in flight.
    pub(super) proposing: bool,
    /// Utilisation samples at `target_milli` in this period.
    utils: Vec<f64>,
    /// When the first sample at `target_milli` arrived (the period runs from there).
    period_start: Option<u64>,
    /// When a `SetCpus` was last sent to the slave.
    last_sent: u64,
    finished: bool,
}

/// The `SetCpus` effect for a committed change.
pub(super) fn set_cpus_effect(
    l: &mut Leading,
    attempt: TaskRef,
    cpu_milli: u64,
    now: Now,
    view: &ClusterState,
    fx: &mut Vec<Effect>,
) {
    let Some(n) = view.nodes().get(&attempt.node) else {
        return;
    };
    if let Some(run) = l.searches.get_mut(&(attempt.task, attempt.attempt)) {
        run.last_sent = now.mono_ms;
    }
    fx.push(Effect::SetCpus {
        node: attempt.node,
        addr: n.addr.clone(),
        task: attempt.task,
        attempt: attempt.attempt,
        cpu_milli,
    });
}

impl DutiesCore {
    /// A slave's samples: feed the searches of its GPU tasks.
    pub(super) fn samples(
        &mut self,
        node: NodeId,
        samples: &[ProbeSample],
        now: Now,
        view: &ClusterState,
        fx: &mut Vec<Effect>,
    ) {
        let (period, epsilon) = (self.cfg.probe_period_ms, self.cfg.util_epsilon);
        let Role::Leading(l) = &mut self.role else {
            return;
        };
        // Searches of attempts that no longer run are over.
        l.searches.retain(|(task, attempt), _| {
            view.tasks().get(task).is_some_and(|t| {
                t.status.attempt == *attempt
                    && matches!(t.status.state, TaskState::Assigned | TaskState::Running)
            })
        });
        for s in samples {
            let Some(util) = s.gpu_util else {
                continue;
            };
            step_search(l, node, s, util, period, epsilon, now, view, fx);
        }
    }
}

/// One sample of one task.
#[allow(clippy::too_many_arguments)]
fn step_search(
    l: &mut Leading,
    node: NodeId,
    s: &ProbeSample,
    util: f64,
    period_ms: u64,
    epsilon: f64,
    now: Now,
    view: &ClusterState,
    fx: &mut Vec<Effect>,
) {
    let (task, attempt) = (s.task, s.attempt);
    let Some(t) = view.tasks().get(&task) else {
        return;
    };
    if t.status.attempt != attempt
        || t.status.node != Some(node)
        || t.status.state != TaskState::Running
        || t.cpu_search.is_none()
    {
        return;
    }
    let Some(spec) = view.jobs().get(&t.job).and_then(|j| j.spec.cpu_search) else {
        return;
    };
    let Some(committed) = view.task_cpu_milli(task) else {
        return;
    };
    let key = (task, attempt);
    let here = TaskRef {
        task,
        node,
        attempt,
    };
    if !l.searches.contains_key(&key) {
        if t.cpu_search == Some(CpuSearchPhase::Probing) {
            start_search(l, here, &spec, committed, epsilon, view, fx);
        }
        return;
    }
    let Some(run) = l.searches.get_mut(&key) else {
        return;
    };
    if run.proposing {
        return;
    }
    if committed != run.target_milli {
        // The step was refused (the node's free CPUs went to other tasks): the count cannot
        // be had, which counts as no improvement.
        let step = run.search.measured(-1.0);
        run.target_milli = committed;
        apply_step(l, here, step, spec.class, committed, fx);
        return;
    }
    if s.cpu_milli != committed {
        // The slave has not applied the committed count yet.
        if now.mono_ms.saturating_sub(run.last_sent) >= RESEND_MS {
            set_cpus_effect(l, here, committed, now, view, fx);
        }
        return;
    }
    if run.finished {
        return;
    }
    let Some(mean) = run.period_mean(util, period_ms, now) else {
        return;
    };
    let count = run.search.current();
    let step = run.search.measured(mean);
    tracing::info!(%task, cpus = count, mean_util = mean, ?step, "CPU-count search measured a period");
    apply_step(l, here, step, spec.class, committed, fx);
}

impl SearchRun {
    /// Adds a sample's utilisation to the current period: the period's mean once it is
    /// `period_ms` long (and a new period starts), else `None`.
    fn period_mean(&mut self, util: f64, period_ms: u64, now: Now) -> Option<f64> {
        match self.period_start {
            // The first sample at a new count may predate the task's adjustment to it.
            None => {
                self.period_start = Some(now.mono_ms);
                return None;
            }
            Some(_) => self.utils.push(util.clamp(0.0, 100.0)),
        }
        let started = self.period_start.unwrap_or(now.mono_ms);
        if now.mono_ms.saturating_sub(started) < period_ms || self.utils.is_empty() {
            return None;
        }
        let mean = self.utils.iter().sum::<f64>() / self.utils.len() as f64;
        self.utils.clear();
        self.period_start = None;
        Some(mean)
    }
}

/// A probing task's first sample: its search starts from its class's last best count
/// (else what it holds), bounded by what the node could give it.
fn start_search(
    l: &mut Leading,
    here: TaskRef,
    spec: &CpuSearchSpec,
    committed: u64,
    epsilon: f64,
    view: &ClusterState,
    fx: &mut Vec<Effect>,
) {
    let free = view.nodes().get(&here.node).map_or(0, |n| n.free.cpu_milli);
    let max = ((free + committed) / 1000) as u32;
    let base = view
        .cpu_history()
        .get(&spec.class)
        .copied()
        .unwrap_or(committed);
    let start = spec.start((base / 1000) as u32, max);
    let search = CpuSearch::new(start, 1, max, epsilon);
    let target_milli = u64::from(search.current()) * 1000;
    tracing::info!(task = %here.task, class = %spec.class, start, max, "CPU-count search starts");
    l.searches.insert(
        (here.task, here.attempt),
        SearchRun {
            search,
            target_milli,
            proposing: false,
            utils: Vec::new(),
            period_start: None,
            last_sent: 0,
            finished: false,
        },
    );
    if target_milli != committed {
        propose_cpus(l, here, target_milli, fx);
    }
}

fn apply_step(
    l: &mut Leading,
    here: TaskRef,
    step: SearchStep,
    class: hetsched_common::TaskClass,
    committed: u64,
    fx: &mut Vec<Effect>,
) {
    match step {
        SearchStep::Try(c) => {
            let milli = u64::from(c) * 1000;
            if let Some(run) = l.searches.get_mut(&(here.task, here.attempt)) {
                run.target_milli = milli;
            }
            if milli != committed {
                propose_cpus(l, here, milli, fx);
            }
        }
        SearchStep::Done(c) => {
            let milli = u64::from(c) * 1000;
            if let Some(run) = l.searches.get_mut(&(here.task, here.attempt)) {
                run.target_milli = milli;
                run.finished = true;
            }
            if milli != committed {
                propose_cpus(l, here, milli, fx);
            }
            propose(
                l,
                here.task,
                here.attempt,
                Command::RecordCpuConfig {
                    task: here.task,
                    class,
                    cpu_milli: milli,
                },
                fx,
            );
        }
    }
}

fn propose_cpus(l: &mut Leading, here: TaskRef, cpu_milli: u64, fx: &mut Vec<Effect>) {
    propose(
        l,
        here.task,
        here.attempt,
        Command::SetTaskCpus {
            node: here.node,
            task: here.task,
            attempt: here.attempt,
            cpu_milli,
        },
        fx,
    );
}

fn propose(
    l: &mut Leading,
    task: TaskId,
    attempt: Attempt,
    command: Command,
    fx: &mut Vec<Effect>,
) {
    if let Some(run) = l.searches.get_mut(&(task, attempt)) {
        run.proposing = true;
    }
    fx.push(Effect::Propose {
        tag: ProposalTag::CpuSearch { task, attempt },
        command,
    });
}
