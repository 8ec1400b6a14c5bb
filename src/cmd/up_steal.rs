//! The work-stealing part of `hetsched up`'s demo (S0.3–4, docs/DESIGN.md): a job of
//! whole-slave tasks, more than the slaves can run, so the leader queues the rest on the
//! slaves (the default `--queue-depth`, 4). Every other task is long: the slave that ends up
//! with the short ones drains its queue first, asks for work and steals queued tasks from
//! the other, which run there as attempt 2. The summary shows the steals as they happened.

use super::client::call;
use anyhow::bail;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use hetsched_common::{JobId, JobSpec, ResourceRequest};
use std::time::{Duration, Instant};

/// Submits the stealing job; `cpu_milli`: a whole slave's cores.
pub(super) async fn submit(addrs: &[String], cpu_milli: u64) -> anyhow::Result<JobId> {
    let spec = JobSpec {
        name: "steal".into(),
        user: "demo".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli,
            mem_mib: 64,
            ..Default::default()
        },
        count: 8,
        command: vec![
            "sh".into(),
            "-c".into(),
            "if [ $((HETSCHED_TASK_INDEX % 2)) -eq 0 ]; then sleep 2; else sleep 0.2; fi; \
             echo \"task $HETSCHED_TASK_ID ran as attempt $HETSCHED_ATTEMPT\""
                .into(),
        ],
        ..Default::default()
    };
    let (job, tasks) = super::up::submit_one(addrs, spec).await?;
    eprintln!("  submitted {job} \"steal\": {tasks} task(s) of a whole slave each");
    Ok(job)
}

/// Waits until every task of `job` has ended (or `limit` passed since `start`).
pub(super) async fn wait(
    addrs: &[String],
    job: JobId,
    start: Instant,
    limit: Duration,
) -> anyhow::Result<()> {
    loop {
        if let Ok(ClientResponse::Tasks(ts)) = call(addrs, tasks_of(job), false).await {
            if !ts.is_empty() && ts.iter().all(|t| t.state.is_final()) {
                return Ok(());
            }
        }
        if start.elapsed() > limit {
            bail!("the demo did not finish within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn tasks_of(job: JobId) -> ClientRequest {
    ClientRequest::Tasks {
        stale: false,
        job: Some(job),
        filter: Default::default(),
    }
}

/// Prints the steals: per node how many queued tasks it took and gave, and the stolen
/// tasks of the job (their attempt 2 ran on the thief).
pub(super) async fn show(addrs: &[String], job: JobId) {
    let Ok(ClientResponse::Nodes(nodes)) =
        call(addrs, ClientRequest::Nodes { stale: false }, false).await
    else {
        return;
    };
    let took: u64 = nodes.iter().map(|n| n.steals_in).sum();
    let moves: Vec<String> = nodes
        .iter()
        .filter(|n| n.steals_in > 0 || n.steals_out > 0)
        .map(|n| format!("{} took {}, gave {}", n.name, n.steals_in, n.steals_out))
        .collect();
    let stolen: Vec<String> = match call(addrs, tasks_of(job), false).await {
        Ok(ClientResponse::Tasks(ts)) => ts
            .iter()
            .filter(|t| t.attempt > 1)
            .map(|t| {
                let on = t.node.map_or_else(|| "?".to_string(), |n| n.to_string());
                format!("{} (attempt {} on {on})", t.id, t.attempt)
            })
            .collect(),
        _ => Vec::new(),
    };
    if took == 0 {
        println!("  steals: none this time (every slave kept busy with its own queue)");
        return;
    }
    println!(
        "  steals: {took} queued task(s) moved to an idle slave ({})",
        moves.join("; ")
    );
    if !stolen.is_empty() {
        println!("    stolen: {}", stolen.join(", "));
    }
}
