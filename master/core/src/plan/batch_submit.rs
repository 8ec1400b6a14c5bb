//! S2 batches in the cluster, the leader's side (docs/DESIGN.md §S2, "In the cluster"): a
//! `submit-batch` file planned against the live cluster into one `SubmitBatch` command, and
//! a batch job whose planned slave was lost re-planned into one `ReplanBatchJob`.
//!
//! Pure (it reads an applied state and returns a command) but never run in `apply`: the
//! leader runs it in its server actor or its duties before proposing, so the log carries the
//! plan and every replica applies the same pins and blocks.
//!
//! The file: the course's plain-text format, or the planner's JSON format with replicas plus
//! `"hosts": ["slave-name", ...]` (host i → that slave) and, per job, `"command"` (argv, or
//! a string run by `sh -c`) and `"name"`. Without `hosts`, host i is the i-th up slave in
//! natural name order (`s2` before `s10`).

use super::makespan::{parse, plan, validate, BatchJob, Block, Instance};
use crate::state::{
    Batch, BatchBlock, BatchJob as StateBatchJob, BatchJobSpec, BatchSpec, BatchTask, ClusterState,
    Command, Node, Real, TaskBlock,
};
use hetsched_common::protocol::BatchSubmit;
use hetsched_common::{JobId, JobSpec, NodeId, ResourceRequest, TaskId, TaskState};
use std::cmp::Ordering;

/// A parsed `submit-batch` file.
#[derive(Clone, Debug)]
pub struct BatchFile {
    /// The planning problem as the file states it.
    pub instance: Instance,
    /// Slave names of the hosts, when the file gives them.
    pub hosts: Option<Vec<String>>,
    /// Per job: its command, if the file gives one.
    pub commands: Vec<Option<Vec<String>>>,
    /// Per job: its name, if the file gives one.
    pub names: Vec<Option<String>>,
}

/// Reads a `submit-batch` file (see the module docs). Errors are for people (exit 2).
pub fn parse_batch_file(text: &str) -> Result<BatchFile, String> {
    if !text.trim_start().starts_with('{') {
        let instance = parse(text).map_err(|e| e.to_string())?;
        let n = instance.jobs().len();
        return Ok(BatchFile {
            instance,
            hosts: None,
            commands: vec![None; n],
            names: vec![None; n],
        });
    }
    let mut v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("JSON input: {e}"))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| "JSON input: expected an object".to_string())?;
    let hosts = match obj.remove("hosts") {
        None => None,
        Some(h) => Some(
            serde_json::from_value::<Vec<String>>(h)
                .map_err(|e| format!("\"hosts\" must be a list of slave names: {e}"))?,
        ),
    };
    let (mut commands, mut names) = (Vec::new(), Vec::new());
    if let Some(jobs) = obj.get_mut("jobs").and_then(|j| j.as_array_mut()) {
        for (i, job) in jobs.iter_mut().enumerate() {
            let Some(job) = job.as_object_mut() else {
                break; // the planner's parser reports it
            };
            commands.push(match job.remove("command") {
                None => None,
                Some(serde_json::Value::String(s)) => Some(vec!["sh".into(), "-c".into(), s]),
                Some(c) => Some(serde_json::from_value::<Vec<String>>(c).map_err(|e| {
                    format!("job {i}: \"command\" must be a string or a list of strings: {e}")
                })?),
            });
            names.push(match job.remove("name") {
                None => None,
                Some(serde_json::Value::String(s)) => Some(s),
                Some(_) => return Err(format!("job {i}: \"name\" must be a string")),
            });
        }
    }
    let instance = parse(&v.to_string()).map_err(|e| e.to_string())?;
    Ok(BatchFile {
        instance,
        hosts,
        commands,
        names,
    })
}

/// Compares names with their digit runs as numbers (`s2` < `s10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let b = s.as_bytes();
        for i in 1..=b.len() {
            if i == b.len() || b[i].is_ascii_digit() != b[start].is_ascii_digit() {
                out.push((b[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(cb.iter()) {
        let o = match (x, y) {
            ((true, p), (true, q)) => {
                let (p, q) = (p.trim_start_matches('0'), q.trim_start_matches('0'));
                p.len().cmp(&q.len()).then_with(|| p.cmp(q))
            }
            ((_, p), (_, q)) => p.cmp(q),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}

/// The slaves a batch's hosts map to: the file's `hosts` by name, else the up slaves in
/// natural name order. Errors when the file names more hosts than are up.
fn host_nodes(view: &ClusterState, file: &BatchFile) -> Result<Vec<NodeId>, String> {
    let want = file.instance.hosts();
    let mut up: Vec<_> = view.nodes().values().filter(|n| usable(n)).collect();
    up.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    if let Some(names) = &file.hosts {
        if names.len() != want {
            return Err(format!(
                "\"hosts\" names {} slaves but the input has {want} hosts",
                names.len()
            ));
        }
        let mut ids = Vec::with_capacity(want);
        for n in names {
            let id = view
                .resolve_node(n)
                .ok_or_else(|| format!("host {n:?} is not a registered slave"))?;
            if !up.iter().any(|u| u.id == id) {
                return Err(format!(
                    "host {n:?} is not up (or is draining, or does not serve the default partition)"
                ));
            }
            if ids.contains(&id) {
                return Err(format!("host {n:?} is named twice"));
            }
            ids.push(id);
        }
        return Ok(ids);
    }
    if want > up.len() {
        return Err(format!(
            "the batch names {want} hosts but only {} slaves are up",
            up.len()
        ));
    }
    Ok(up.iter().take(want).map(|n| n.id).collect())
}

/// Whether batch tasks may run on `n`: it takes work and serves the partition batch jobs
/// run in (`default`).
fn usable(n: &Node) -> bool {
    n.takes_work() && n.serves(BATCH_PARTITION)
}

/// Batch jobs run in the default partition.
const BATCH_PARTITION: &str = "default";

fn whole_free_cpus(view: &ClusterState, node: NodeId) -> usize {
    view.node(node)
        .filter(|n| usable(n))
        .map_or(0, |n| (n.free.cpu_milli / 1000) as usize)
}

/// Plans a `submit-batch` request against the live cluster: hosts = up slaves, cores per
/// host = the file's count capped at the slave's free whole CPUs, speeds from the file.
pub fn plan_submission(view: &ClusterState, req: &BatchSubmit) -> Result<BatchSpec, String> {
    let file = parse_batch_file(&req.file)?;
    let hosts = live_hosts(view, &file)?;
    plan_on(&file, &hosts, req)
}

/// The slave of each host of `file` and its free whole CPUs: what planning reads of the
/// cluster, so that the leader can plan without holding the state.
pub fn live_hosts(view: &ClusterState, file: &BatchFile) -> Result<Vec<(NodeId, usize)>, String> {
    Ok(host_nodes(view, file)?
        .into_iter()
        .map(|n| (n, whole_free_cpus(view, n)))
        .collect())
}

/// Plans `file` on `hosts` (slave, free whole CPUs) for `req`.
pub fn plan_on(
    file: &BatchFile,
    hosts: &[(NodeId, usize)],
    req: &BatchSubmit,
) -> Result<BatchSpec, String> {
    let inst0 = &file.instance;
    let cores: Vec<usize> = inst0
        .cores_per_host()
        .iter()
        .zip(hosts)
        .map(|(&c, &(_, free))| c.min(free))
        .collect();
    let hosts: Vec<NodeId> = hosts.iter().map(|h| h.0).collect();
    if cores.iter().all(|&c| c == 0) {
        return Err("the batch's slaves have no free whole CPU now; try again later".into());
    }
    let inst = Instance::new(
        cores.clone(),
        inst0.transfer_speed(),
        inst0.alpha(),
        inst0.jobs().to_vec(),
    )
    .map_err(|e| e.to_string())?;
    let planned = plan(&inst).map_err(|e| e.to_string())?;
    let eval = validate(&inst, &planned.schedule).map_err(|e| e.to_string())?;
    let mut jobs = Vec::with_capacity(inst.jobs().len());
    for (i, (bj, jp)) in inst.jobs().iter().zip(&planned.schedule.jobs).enumerate() {
        let command = file
            .commands
            .get(i)
            .cloned()
            .flatten()
            .or_else(|| (!req.command.is_empty()).then(|| req.command.clone()))
            .ok_or_else(|| {
                format!("job {i} has no command: give one in the file (\"command\") or after --")
            })?;
        let name = file
            .names
            .get(i)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("batch-job-{i}"));
        let tasks: Vec<BatchTask> = jp
            .cores
            .iter()
            .map(|c| BatchTask {
                node: hosts[c.core.host],
                blocks: c
                    .blocks
                    .iter()
                    .map(|b| TaskBlock {
                        block: b.block as u32,
                        read_from: hosts[b.replica],
                    })
                    .collect(),
            })
            .collect();
        jobs.push(BatchJobSpec {
            spec: batch_job_spec(name, &req.user, command, tasks.len() as u32),
            planned_start_s: Real(jp.start),
            planned_finish_s: Real(eval.finish.get(i).copied().unwrap_or(jp.start)),
            speed: Real(bj.speed),
            blocks: blocks_of(bj),
            tasks,
        });
    }
    Ok(BatchSpec {
        planned_makespan_s: Real(eval.makespan),
        hosts,
        host_cores: cores.iter().map(|&c| c as u32).collect(),
        transfer_speed: Real(inst.transfer_speed()),
        alpha: Real(inst.alpha()),
        jobs,
    })
}

fn batch_job_spec(name: String, user: &str, command: Vec<String>, count: u32) -> JobSpec {
    JobSpec {
        name,
        user: user.to_string(),
        resources: ResourceRequest {
            cpu_milli: 1000,
            ..Default::default()
        },
        count,
        command,
        ..Default::default()
    }
}

fn blocks_of(j: &BatchJob) -> Vec<BatchBlock> {
    j.blocks
        .iter()
        .map(|b| BatchBlock {
            size_mb: Real(b.size),
            replicas: b.replicas.iter().map(|&r| r as u32).collect(),
        })
        .collect()
}

/// Batch jobs with a pending task pinned to a slave that takes no work now (lost, or
/// draining, or no longer serving the default partition): each needs a re-plan.
pub fn jobs_to_replan(view: &ClusterState) -> Vec<JobId> {
    let mut out = Vec::new();
    for job in view.batch_book().jobs.keys() {
        let Some(j) = view.job(*job).filter(|j| j.open > 0) else {
            continue;
        };
        let stranded = j.tasks.iter().any(|t| {
            view.task(*t)
                .is_some_and(|t| t.status.state == TaskState::Pending)
                && view
                    .batch_task(*t)
                    .is_some_and(|b| view.node(b.node).is_none_or(|n| !usable(n)))
        });
        if stranded {
            out.push(*job);
        }
    }
    out
}

/// Re-plans a batch job's pending tasks (the rest of the job) over the batch's slaves that
/// take work, each capped at its planned cores and its free whole CPUs (at its capacity
/// when none is free: the gang then waits for room), and at most one core per pending
/// task. Lost slaves stay hosts with no cores, so blocks whose only replica is there are
/// read from them remotely. Pending tasks beyond the new plan's cores get no block.
/// `None` when nothing can be planned now (no slave of the batch takes work).
pub fn replan_job(view: &ClusterState, job: JobId) -> Option<Command> {
    let book = view.batch_book();
    let bj = book.jobs.get(&job)?;
    let batch = book.batches.get(&bj.batch)?;
    let pending: Vec<TaskId> = view
        .job(job)?
        .tasks
        .iter()
        .filter(|t| {
            view.task(**t)
                .is_some_and(|t| t.status.state == TaskState::Pending)
        })
        .copied()
        .collect();
    if pending.is_empty() {
        return None;
    }
    // The blocks of the pending tasks, in block order.
    let mut blocks: Vec<u32> = pending
        .iter()
        .filter_map(|t| view.batch_task(*t))
        .flat_map(|b| b.blocks.iter().map(|x| x.block))
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    let cores = replan_cores(view, batch, pending.len());
    let pins = if blocks.iter().all(|b| bj.blocks.get(*b as usize).is_none()) {
        // Nothing left to process: the pending tasks run empty on a slave that works.
        let h = cores.iter().position(|&c| c > 0)?;
        vec![
            BatchTask {
                node: batch.hosts[h],
                blocks: Vec::new(),
            };
            pending.len()
        ]
    } else {
        replan_pins(batch, bj, &blocks, cores, pending.len())?
    };
    let tasks = pending.into_iter().zip(pins).collect();
    Some(Command::ReplanBatchJob { job, tasks })
}

/// The cores each host of `batch` gives a re-plan of `pending` tasks: its planned cores
/// within its free whole CPUs (within its capacity when no host has any free), none on a
/// host that takes no work, and one per pending task at most (trimmed from the last host).
fn replan_cores(view: &ClusterState, batch: &Batch, pending: usize) -> Vec<usize> {
    let cap = |h: usize, n: &NodeId, free: bool| -> usize {
        let planned = batch.host_cores.get(h).copied().unwrap_or(0) as usize;
        match view.node(*n).filter(|x| usable(x)) {
            Some(x) if free => planned.min((x.free.cpu_milli / 1000) as usize),
            Some(x) => planned.max(1).min((x.capacity.cpu_milli / 1000) as usize),
            None => 0,
        }
    };
    let caps = |free: bool| -> Vec<usize> {
        batch
            .hosts
            .iter()
            .enumerate()
            .map(|(h, n)| cap(h, n, free))
            .collect()
    };
    let mut cores = caps(true);
    if cores.iter().all(|&c| c == 0) {
        cores = caps(false);
    }
    let mut excess = cores.iter().sum::<usize>().saturating_sub(pending);
    for c in cores.iter_mut().rev() {
        let cut = excess.min(*c);
        *c -= cut;
        excess -= cut;
    }
    cores
}

/// The new pins of `pending` tasks of batch job `bj` that still have `blocks` to process,
/// planned over `cores` (see [`replan_job`]); tasks beyond the plan's cores get no block.
fn replan_pins(
    batch: &Batch,
    bj: &StateBatchJob,
    blocks: &[u32],
    cores: Vec<usize>,
    pending: usize,
) -> Option<Vec<BatchTask>> {
    let job_in = BatchJob {
        speed: bj.speed.0,
        blocks: blocks
            .iter()
            .filter_map(|b| bj.blocks.get(*b as usize))
            .map(|b| Block {
                size: b.size_mb.0,
                replicas: b.replicas.iter().map(|&r| r as usize).collect(),
            })
            .collect(),
    };
    let inst = Instance::new(cores, batch.transfer_speed.0, batch.alpha.0, vec![job_in]).ok()?;
    let planned = plan(&inst).ok()?;
    let jp = planned.schedule.jobs.first()?;
    let mut pins: Vec<BatchTask> = jp
        .cores
        .iter()
        .map(|c| BatchTask {
            node: batch.hosts[c.core.host],
            blocks: c
                .blocks
                .iter()
                .map(|b| TaskBlock {
                    block: blocks[b.block],
                    read_from: batch.hosts[b.replica],
                })
                .collect(),
        })
        .collect();
    let spare = pins.first().map(|b| b.node)?;
    pins.resize(
        pins.len().max(pending),
        BatchTask {
            node: spare,
            blocks: Vec::new(),
        },
    );
    Some(pins)
}

#[cfg(test)]
#[path = "batch_submit_tests.rs"]
mod tests;
