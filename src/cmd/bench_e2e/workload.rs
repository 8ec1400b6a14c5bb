//! One bench run: the cluster's slaves up, jobs submitted at the offered rate (or as fast as
//! the cluster takes them), and every task waited for to complete.

use super::client::BenchClient;
use super::inproc::{lock, start_in_process_slave, Seen, SeenRef};
use super::measure::{report, Run};
use super::{E2eArgs, LocalCluster};
use anyhow::{bail, Context};
use hetsched_common::protocol::{ClientRequest, ClientResponse, Message};
use hetsched_common::{ClientRequestId, JobId, TaskId};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A submitted job: when its submit was sent, and its task ids once answered.
pub(super) struct Submitted {
    pub(super) sent: Instant,
    pub(super) sent_wall: SystemTime,
    pub(super) job: JobId,
    pub(super) tasks: Vec<TaskId>,
}

/// Runs the bench on `cluster` (`dir`: its data directory) and returns the report.
pub(super) async fn bench(
    cluster: &LocalCluster,
    dir: &Path,
    a: &E2eArgs,
) -> anyhow::Result<serde_json::Value> {
    let masters = cluster.master_addrs.clone();
    let mut client = BenchClient::new(masters.clone());
    let seen: SeenRef = Arc::new(Mutex::new(Seen::default()));
    if a.in_process_slaves {
        for i in 0..a.slaves {
            start_in_process_slave(i, masters.clone(), a.slave_cpus, seen.clone()).await?;
        }
    }
    // Every slave registered and up.
    let start = Instant::now();
    loop {
        if let Ok(Message::ClientReply(ClientResponse::Nodes(n))) = client
            .call(
                Message::Client(ClientRequest::Nodes { stale: false }),
                Duration::from_secs(60),
            )
            .await
        {
            if n.iter().filter(|n| n.state == "up").count() >= a.slaves as usize {
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the slaves did not all register within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = client.status().await?;
    eprintln!(
        "bench e2e: leader is master {}; {} {} slaves up; submitting {} tasks in jobs of {}",
        before.master_id.0,
        a.slaves,
        if a.in_process_slaves {
            "in-process"
        } else {
            "real"
        },
        a.tasks,
        a.job_size
    );
    let jobs = a.tasks.div_ceil(a.job_size as u64);
    let cpu_milli = (a.task_cpus * 1000.0).round() as u64;
    let command: Vec<String> = if a.in_process_slaves {
        vec!["true".into()]
    } else {
        a.command.split_whitespace().map(String::from).collect()
    };
    let t0 = Instant::now();
    let submitted: Arc<Mutex<Vec<Submitted>>> = Arc::new(Mutex::new(Vec::new()));
    let mut in_flight = tokio::task::JoinSet::new();
    let window = if a.rate.is_some() { 64 } else { 4 };
    let request_base = (std::process::id() as u64) << 32;
    for j in 0..jobs {
        if let Some(rate) = a.rate {
            let due = t0 + Duration::from_secs_f64(j as f64 * a.job_size as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        while in_flight.len() >= window {
            if let Some(r) = in_flight.join_next().await {
                r??;
            }
        }
        let count = (a.tasks - j * a.job_size as u64).min(a.job_size as u64) as u32;
        let spec: hetsched_common::JobSpec = serde_json::from_value(serde_json::json!({
            "name": format!("e2e-{j}"),
            "user": "bench",
            "partition": "",
            "resources": {"cpu_milli": cpu_milli, "mem_mib": 1},
            "count": count,
            "command": command,
            "env": {},
        }))
        .context("job spec")?;
        let req = Message::Client(ClientRequest::Submit {
            request: ClientRequestId(request_base + j + 1),
            spec,
            allow_unplaceable: false,
        });
        let masters = masters.clone();
        let submitted = submitted.clone();
        in_flight.spawn(async move {
            let mut c = BenchClient::new(masters);
            let (sent, sent_wall) = (Instant::now(), SystemTime::now());
            match c.call(req, Duration::from_secs(120)).await? {
                Message::ClientReply(ClientResponse::Submitted { job, tasks }) => {
                    if let Ok(mut s) = submitted.lock() {
                        s.push(Submitted {
                            sent,
                            sent_wall,
                            job,
                            tasks,
                        });
                    }
                    Ok::<(), anyhow::Error>(())
                }
                other => bail!("unexpected answer to submit: {other:?}"),
            }
        });
    }
    while let Some(r) = in_flight.join_next().await {
        r??;
    }
    let submit_secs = t0.elapsed().as_secs_f64();
    eprintln!("bench e2e: all {jobs} jobs submitted in {submit_secs:.2} s");
    let submitted = match Arc::try_unwrap(submitted) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(_) => bail!("submitters still running"),
    };
    // Wait for every task to complete.
    let deadline = t0 + a.timeout;
    let done_at;
    if a.in_process_slaves {
        loop {
            let done = lock(&seen).completed.len() as u64;
            if done >= a.tasks {
                done_at = Instant::now();
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {done} of {} tasks completed within {:?}",
                    a.tasks,
                    a.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    } else {
        let mut open: Vec<JobId> = submitted.iter().map(|s| s.job).collect();
        loop {
            let mut still = Vec::new();
            for job in open {
                match client
                    .call(
                        Message::Client(ClientRequest::Jobs {
                            stale: true,
                            filter: hetsched_common::protocol::ListFilter {
                                job: Some(job),
                                ..Default::default()
                            },
                        }),
                        Duration::from_secs(10),
                    )
                    .await?
                {
                    Message::ClientReply(ClientResponse::Jobs(j))
                        if j.iter()
                            .all(|j| matches!(j.state.as_str(), "succeeded" | "failed")) => {}
                    _ => still.push(job),
                }
            }
            open = still;
            if open.is_empty() {
                done_at = Instant::now();
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {jobs} jobs unfinished after {:?}",
                    open.len(),
                    a.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let after = client.status().await?;
    let run = Run {
        t0,
        submit_secs,
        done_at,
        submitted,
        before,
        after,
    };
    report(a, dir, &seen, run)
}
