//! The read commands and their output: status, jobs, tasks and nodes, as tables or JSON.

use super::args::{FilterFlags, JobsArgs, ListArgs, StatusArgs, TasksArgs};
use super::call::{block_on, call, short};
use crate::cmd::table;
use anyhow::anyhow;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ListFilter};
use hetsched_common::JobId;

/// `status`: a human summary (masters, leader, term, nodes, tasks by state), or the
/// answering master's full status as JSON.
pub fn status(masters: &[String], a: StatusArgs) -> anyhow::Result<()> {
    let a = a.read;
    let stale = a.stale();
    let (st, members) = block_on(async {
        let st = call(masters, ClientRequest::Status { stale }, a.local).await?;
        let members = if a.json {
            None
        } else {
            call(masters, ClientRequest::Members { stale: true }, a.local)
                .await
                .ok()
        };
        anyhow::Ok((st, members))
    })??;
    let s = match st {
        ClientResponse::Status(s) => s,
        other => return Err(anyhow!("unexpected answer: {}", short(&other))),
    };
    if a.json {
        return crate::cmd::print_json(&s);
    }
    if s.insecure {
        println!(
            "WARNING:  master {} runs --insecure: no TLS, no authentication",
            s.master_id.0
        );
    }
    if let Some(ClientResponse::Members(ms)) = members {
        let list: Vec<String> = ms
            .iter()
            .map(|m| {
                format!(
                    "{} {}{}",
                    m.id.0,
                    m.addr.clone().unwrap_or_else(|| "?".into()),
                    if m.leader { " (leader)" } else { "" }
                )
            })
            .collect();
        println!("masters:  {} — {}", ms.len(), list.join(", "));
    }
    println!(
        "leader:   {}, term {}",
        s.leader.map_or("none".to_string(), |l| format!(
            "master {} at {}",
            l.0,
            s.leader_addr.clone().unwrap_or_else(|| "?".into())
        )),
        s.term
    );
    println!(
        "answered: master {} ({}), applied index {}, state {}{}",
        s.master_id.0,
        s.role,
        s.applied_index,
        s.state_hash,
        if s.stale { " (stale read)" } else { "" }
    );
    println!(
        "nodes:    {} up, {} down, {} draining",
        s.nodes.up, s.nodes.down, s.nodes.draining
    );
    println!("jobs:     {}", s.jobs);
    // In life-cycle order, then anything newer.
    let order = [
        "pending",
        "assigned",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ];
    let mut counts: Vec<String> = order
        .iter()
        .filter_map(|k| s.tasks.get(*k).map(|v| format!("{v} {k}")))
        .collect();
    counts.extend(
        s.tasks
            .iter()
            .filter(|(k, _)| !order.contains(&k.as_str()))
            .map(|(k, v)| format!("{v} {k}")),
    );
    println!("tasks:    {}", counts.join(", "));
    if !s.waiting.is_empty() {
        let mut why: Vec<(&String, &u64)> = s.waiting.iter().collect();
        why.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let why: Vec<String> = why.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!(
            "waiting:  {} (hetsched tasks --reason R; hetsched explain TASK)",
            why.join(", ")
        );
    }
    if let Some(f) = &s.open_files {
        let open = f.open.map_or("?".to_string(), |n| n.to_string());
        println!(
            "files:    {open} open, limit {} (hard {}) on the answering master",
            f.soft, f.hard
        );
    }
    if s.heartbeat_ms > 0 {
        println!(
            "beats:    slaves asked to heartbeat every {:.1}s (master --max-heartbeats-per-sec)",
            s.heartbeat_ms as f64 / 1000.0
        );
    }
    Ok(())
}

fn list_filter(f: &FilterFlags, job: Option<JobId>) -> ListFilter {
    ListFilter {
        job,
        state: f.state.clone(),
        user: f.user.clone(),
        limit: f.limit,
        reason: f.reason.clone(),
    }
}

/// `jobs`.
pub fn jobs(masters: &[String], a: JobsArgs) -> anyhow::Result<()> {
    let filter = list_filter(&a.filter, a.id.or(a.job));
    let read = a.read;
    let stale = read.stale();
    let req = ClientRequest::Jobs { stale, filter };
    match block_on(call(masters, req, read.local))?? {
        ClientResponse::Jobs(jobs) => {
            if read.json {
                return crate::cmd::print_json(&jobs);
            }
            let mut t = table::new(&[
                "ID",
                "NAME",
                "USER",
                "STATE",
                "TASKS",
                "DEPENDS",
                "TASK STATES",
            ]);
            for j in jobs {
                let states: Vec<String> = j
                    .task_states
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let depends = depends_brief(&j);
                t.add_row(vec![
                    j.id.to_string(),
                    j.name,
                    j.user,
                    j.state,
                    j.tasks.to_string(),
                    depends,
                    states.join(" "),
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// Issue 51: the DEPENDS column (`after:12,13 each:14 singleton max:2`, `-` for none).
fn depends_brief(j: &hetsched_common::protocol::JobInfo) -> String {
    hetsched_common::JobSpec {
        after: j.after.clone(),
        after_any: j.after_any.clone(),
        after_fail: j.after_fail.clone(),
        after_each: j.after_each,
        after_mode: j.after_mode,
        singleton: j.singleton,
        max_running: j.max_running,
        ..Default::default()
    }
    .depends_brief()
}

/// `tasks`.
pub fn tasks(masters: &[String], a: TasksArgs) -> anyhow::Result<()> {
    let filter = list_filter(&a.filter, a.job);
    let read = a.read;
    let stale = read.stale();
    let req = ClientRequest::Tasks {
        stale,
        job: None,
        filter,
    };
    match block_on(call(masters, req, read.local))?? {
        ClientResponse::Tasks(tasks) => {
            if read.json {
                return crate::cmd::print_json(&tasks);
            }
            let mut t = table::new(&[
                "ID", "JOB", "INDEX", "USER", "STATE", "NODE", "ATTEMPT", "EXIT", "REASON", "CPUS",
            ]);
            for x in tasks {
                // S3: the current cores, with what changed them live.
                let cpus = match (x.compressed, x.cpu_search.as_deref()) {
                    (true, _) => format!("{} (compressed)", x.cpus),
                    (false, Some(phase)) => format!("{} (search {phase})", x.cpus),
                    (false, None) => x.cpus.to_string(),
                };
                t.add_row(vec![
                    x.id.to_string(),
                    x.job_id.to_string(),
                    x.index.to_string(),
                    x.user,
                    x.state.to_string(),
                    x.node.map_or("-".into(), |n| n.to_string()),
                    x.attempt.to_string(),
                    x.exit_code.map_or("-".into(), |c| c.to_string()),
                    // A waiting task's reason is why it waits; else why its attempt ended.
                    match (&x.waiting, x.reason) {
                        (Some(w), _) => w.reason.clone(),
                        (None, r) => r.map_or("-".into(), |r| r.to_string()),
                    },
                    cpus,
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// `nodes`.
pub fn nodes(masters: &[String], a: ListArgs) -> anyhow::Result<()> {
    let a = a.read;
    let stale = a.stale();
    match block_on(call(masters, ClientRequest::Nodes { stale }, a.local))?? {
        ClientResponse::Nodes(nodes) => {
            if a.json {
                return crate::cmd::print_json(&nodes);
            }
            let mut t = table::new(&[
                "ID",
                "NAME",
                "ADDR",
                "STATE",
                "CPU (free/total)",
                "MEM MiB (free/total)",
                "GPUS",
                "GPU POOL",
                "TASKS",
                "QUEUED",
                "STEALS (in/out)",
                "ENGINES (free/count)",
                "PROBES (gpu, membw)",
            ]);
            for n in nodes {
                let gpus = if n.capacity.gpus.is_empty() {
                    "-".to_string()
                } else if n.gpus_emulated {
                    format!("{} EMULATED", n.capacity.gpus.len())
                } else {
                    n.capacity.gpus.len().to_string()
                };
                let state = if n.draining {
                    format!("{} (draining)", n.state)
                } else {
                    n.state.clone()
                };
                t.add_row(vec![
                    n.id.to_string(),
                    n.name,
                    n.addr,
                    state,
                    format!(
                        "{:.1}/{:.1}",
                        n.free.cpu_milli as f64 / 1000.0,
                        n.capacity.cpu_milli as f64 / 1000.0
                    ),
                    format!("{}/{}", n.free.mem_mib, n.capacity.mem_mib),
                    gpus,
                    n.gpu_pool.unwrap_or_else(|| "-".into()),
                    n.tasks.to_string(),
                    n.queued.to_string(),
                    format!("{}/{}", n.steals_in, n.steals_out),
                    engines_text(&n.engines),
                    probes_text(&n.probes),
                ]);
            }
            table::print(&t)
        }
        other => Err(anyhow!("unexpected answer: {}", short(&other))),
    }
}

/// A node's probes as `EMULATED, resctrl` (emulated ones in capitals, docs/CONTRACT.md).
fn probes_text(p: &hetsched_common::protocol::ProbesInfo) -> String {
    let show = |name: &str| {
        if name == "emulated" {
            "EMULATED".to_string()
        } else {
            name.to_string()
        }
    };
    format!("{}, {}", show(&p.gpu), show(&p.membw))
}

/// The engines of a node beyond its CPU, as `gpu 1/2 EMULATED, npu 2/2` (`-`: none).
fn engines_text(engines: &[hetsched_common::protocol::EngineInfo]) -> String {
    let listed: Vec<String> = engines
        .iter()
        .filter(|e| e.kind != hetsched_common::EngineKind::Cpu)
        .map(|e| {
            let emulated = if e.emulated { " EMULATED" } else { "" };
            format!("{} {}/{}{emulated}", e.kind, e.free, e.count)
        })
        .collect();
    if listed.is_empty() {
        "-".into()
    } else {
        listed.join(", ")
    }
}
