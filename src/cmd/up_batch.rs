//! `hetsched up`'s demo batch (S2, docs/DESIGN.md §S2 "In the cluster"): a small data-local
//! batch planned by the leader against the demo's slaves, gang-started, and its planned
//! against actual makespan printed in the summary. Kept apart from the rest of the demo so
//! each part of the summary stays in its own function.

use super::client::{call, request_id};
use anyhow::bail;
use hetsched_common::protocol::{BatchSubmit, ClientRequest, ClientResponse};

/// The demo batch over `slaves` hosts of one core each: four jobs whose blocks sit on
/// different hosts; each task sleeps for about its planned time.
fn demo_file(slaves: usize) -> String {
    let hosts = slaves.max(1);
    let ones = vec!["1"; hosts].join(", ");
    let block =
        |size: u32, host: usize| format!("{{\"size\": {size}, \"replicas\": [{}]}}", host % hosts);
    let jobs = [
        (vec![block(20, 0), block(20, 1)], "0.8"),
        (vec![block(30, 1)], "1.2"),
        (vec![block(10, 2), block(10, 0), block(10, 1)], "0.6"),
        (vec![block(15, 0)], "0.6"),
    ];
    let jobs: Vec<String> = jobs
        .iter()
        .enumerate()
        .map(|(i, (blocks, secs))| {
            format!(
                "{{\"name\": \"demo-batch-{i}\", \"speed\": 25, \"command\": \"sleep {secs}\", \"blocks\": [{}]}}",
                blocks.join(", ")
            )
        })
        .collect();
    format!(
        "{{\"cores_per_host\": [{ones}], \"transfer_speed\": 100, \"alpha\": 0.05, \"jobs\": [{}]}}",
        jobs.join(", ")
    )
}

/// Submits the demo batch; returns its id.
pub async fn submit(addrs: &[String], slaves: usize) -> anyhow::Result<u64> {
    let req = ClientRequest::SubmitBatch {
        request: request_id(),
        batch: BatchSubmit {
            file: demo_file(slaves),
            command: Vec::new(),
            user: "demo".into(),
        },
    };
    match call(addrs, req, false).await? {
        ClientResponse::BatchSubmitted(b) => {
            eprintln!(
                "  submitted batch-{}: {} job(s), {} task(s), planned makespan {:.2}s",
                b.batch_id,
                b.jobs.len(),
                b.tasks,
                b.planned_makespan_s
            );
            Ok(b.batch_id)
        }
        other => bail!("unexpected answer {other:?}"),
    }
}

/// Prints the demo batch's planned against actual makespan, per job and in total.
pub async fn show(addrs: &[String], id: u64) {
    let req = ClientRequest::Batch {
        stale: false,
        batch: id,
    };
    match call(addrs, req, false).await {
        Ok(ClientResponse::Batch(b)) => {
            println!("  demo batch (S2), planned against actual, seconds after submission:");
            for line in super::batch::render(&b).lines() {
                println!("  {line}");
            }
        }
        Ok(other) => eprintln!("  unexpected answer for batch-{id}: {other:?}"),
        Err(e) => eprintln!("  cannot fetch batch-{id}: {e}"),
    }
}
