//! `hetsched up`'s forwarded-call block (S0.6): a gemm program pinned to the first,
//! CPU-only slave, whose calls pay off on the last slave's emulated GPU; the summary shows
//! the bytes each forwarded call moved and the link the transfers measured.

use super::client::call;
use hetsched_common::program::{Api, ApiCall, Program};
use hetsched_common::protocol::{ClientRequest, ClientResponse, JobInfo};
use hetsched_common::{JobSpec, ResourceRequest};
use std::time::{Duration, Instant};

/// The demo job's name.
pub const NAME: &str = "forwarded";

/// Two gemm calls pinned to the CPU-only `slave`.
pub fn program(slave: &str) -> JobSpec {
    JobSpec {
        name: NAME.into(),
        user: "demo".into(),
        partition: "default".into(),
        resources: ResourceRequest {
            cpu_milli: 500,
            mem_mib: 64,
            ..Default::default()
        },
        count: 1,
        program: Some(Program {
            calls: vec![
                ApiCall::new(Api::Gemm, 256, 5),
                ApiCall::new(Api::Gemm, 256, 6),
            ],
        }),
        nodes: vec![slave.to_string()],
        ..Default::default()
    }
}

/// Waits (at most `limit`) for the GPU slave's profile at the masters and for the peers'
/// forwarders to fetch it (they do every 2 s), so that the program's calls can be forwarded.
pub async fn wait_for_profiles(addrs: &[String], limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(ClientResponse::Profiles(p)) =
            call(addrs, ClientRequest::Profiles { stale: false }, false).await
        {
            if p.nodes.iter().any(|n| !n.table.rows.is_empty()) {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Prints the forwarded calls of the demo's pinned program and the measured link.
pub async fn show(addrs: &[String], jobs: &[JobInfo]) {
    let Some(job) = jobs.iter().find(|j| j.name == NAME) else {
        return;
    };
    let Ok(ClientResponse::Tasks(tasks)) = call(
        addrs,
        ClientRequest::Tasks {
            stale: false,
            job: Some(job.id),
            filter: Default::default(),
        },
        false,
    )
    .await
    else {
        return;
    };
    for t in tasks {
        let Ok(ClientResponse::Calls { calls, node, .. }) =
            call(addrs, ClientRequest::Calls { task: t.id }, false).await
        else {
            continue;
        };
        println!("  forwarding: program {} pinned to {node}", t.id);
        for c in &calls {
            match (&c.transfer, c.forwarded) {
                (Some(x), true) => println!(
                    "    call {} {} forwarded to {} ({}{}): {} B out, {} B back in {:.3} ms, digest {}",
                    c.index,
                    c.api,
                    c.node,
                    c.engine,
                    if c.emulated { " EMULATED" } else { "" },
                    x.arg_bytes,
                    x.result_bytes,
                    x.transfer_us as f64 / 1000.0,
                    c.digest.get(..16).unwrap_or(&c.digest)
                ),
                _ => println!(
                    "    call {} {} ran on {} {} (not forwarded{})",
                    c.index,
                    c.api,
                    c.node,
                    c.engine,
                    c.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                ),
            }
        }
    }
    if let Ok(ClientResponse::Nodes(nodes)) =
        call(addrs, ClientRequest::Nodes { stale: false }, false).await
    {
        for n in nodes {
            for l in &n.links {
                println!(
                    "    link {} → node-{}: rtt {} µs, {:.1} MB/s (measured)",
                    n.name,
                    l.node.0,
                    l.rtt_us,
                    l.bytes_per_s as f64 / 1e6
                );
            }
        }
    }
}
