//! `hetsched up`'s forwarded-call block (S0.6): a gemm program pinned to the first,
//! CPU-only slave, whose calls pay off on the last slave's emulated GPU; the summary shows
//! the bytes each forwarded call moved and the link the transfers measured.

use super::client::call;
use hetsched_common::program::{Api, ApiCall, Program};
use hetsched_common::protocol::{ClientRequest, ClientResponse, JobInfo, ProfilesInfo};
use hetsched_common::{EngineKind, JobSpec, ResourceRequest};
use std::time::{Duration, Instant};

/// The demo job's name.
pub const NAME: &str = "forwarded";

/// Two gemm calls of size `n` pinned to the CPU-only `slave`.
pub fn program(slave: &str, n: u64) -> JobSpec {
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
            calls: vec![ApiCall::new(Api::Gemm, n, 5), ApiCall::new(Api::Gemm, n, 6)],
        }),
        nodes: vec![slave.to_string()],
        ..Default::default()
    }
}

/// Waits (at most `limit`) until `slaves` slaves' profiles are at the masters and the
/// peers' forwarders have fetched them (they do every 2 s); the profiles then.
pub async fn wait_for_profiles(addrs: &[String], slaves: usize, limit: Duration) -> ProfilesInfo {
    let deadline = Instant::now() + limit;
    let mut last = ProfilesInfo {
        nodes: Vec::new(),
        relations: Vec::new(),
    };
    while Instant::now() < deadline {
        if let Ok(ClientResponse::Profiles(p)) =
            call(addrs, ClientRequest::Profiles { stale: false }, false).await
        {
            let ready = p.nodes.iter().filter(|n| !n.table.rows.is_empty()).count();
            last = p;
            if ready >= slaves {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    last
}

/// `kind`'s time for gemm of size `n` on the node `name`, µs, by its selection table: the
/// nearest profiled size's time scaled by n³.
fn gemm_time(p: &ProfilesInfo, name: &str, kind: EngineKind, n: u64) -> Option<f64> {
    let table = &p.nodes.iter().find(|x| x.name == name)?.table;
    let row = table.lookup(Api::Gemm, ApiCall::new(Api::Gemm, n, 0).bucket())?;
    let t = row.ranked.iter().find(|e| e.engine == kind)?.time_us as f64;
    let n_row = Api::Gemm.size_for_bucket(row.bucket).max(1) as f64;
    Some(t * (n as f64 / n_row).powi(3))
}

/// The smallest gemm size whose calls from `from`'s CPU pay off on `to`'s GPU by the
/// profiles, as the leader reckons a first forward (its bytes at 1 Gbit/s, plus a
/// millisecond), with room to spare; 1024 (the largest that fits a forward) otherwise.
pub fn paying_size(p: &ProfilesInfo, from: &str, to: &str) -> u64 {
    const SIZES: [u64; 6] = [256, 384, 512, 640, 768, 1024];
    SIZES
        .into_iter()
        .find(|&n| {
            let (Some(local), Some(peer)) = (
                gemm_time(p, from, EngineKind::Cpu, n),
                gemm_time(p, to, EngineKind::Gpu, n),
            ) else {
                return false;
            };
            let transfer_us = (12 * n * n) as f64 / 125.0;
            (peer + transfer_us + 1000.0) * 1.5 < local
        })
        .unwrap_or(1024)
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
