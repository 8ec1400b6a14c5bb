//! The masters a run talks to: a fresh local cluster of real processes (job GC off, admin
//! listeners on), or running masters through their admin listeners (`--attach`); and the
//! wait until they have a leader and slaves.

use super::super::client::call;
use super::super::exit;
use super::super::local::{ClusterSpec, LocalCluster, SlaveSpec};
use super::observe::{status_of, wait_leader};
use hetsched_chaos::Scenario;
use hetsched_common::protocol::{ClientRequest, ClientResponse};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The masters a run talks to: a fresh local cluster, or running ones (`--attach`).
pub(super) struct Masters {
    /// The local cluster (`None` attached).
    pub(super) cluster: Option<LocalCluster>,
    /// Where clients go: cluster addresses (local) or admin addresses (attached).
    pub(super) client: Vec<String>,
    /// Admin addresses, index i is master i + 1.
    pub(super) admin: Vec<String>,
}

/// Starts the scenario's local cluster under `dir`; with `netns`, each process in its own
/// network namespace.
pub(super) async fn local_masters(
    sc: &Scenario,
    dir: &Path,
    netns: bool,
) -> anyhow::Result<Masters> {
    let slaves: Vec<SlaveSpec> = (0..sc.slaves)
        .map(|_| SlaveSpec {
            cpus: sc.slave_cpus,
            mem_mib: 4096,
            gpus: 0,
            extra_args: Vec::new(),
        })
        .collect();
    let spec = ClusterSpec {
        masters: sc.masters,
        master_args: vec!["--job-gc-after".to_string(), "off".to_string()],
        slaves,
        netns,
        ..ClusterSpec::default()
    };
    let cluster = LocalCluster::launch(dir, &spec)?;
    Ok(Masters {
        client: cluster.master_addrs.clone(),
        admin: cluster.admin_addrs.clone(),
        cluster: Some(cluster),
    })
}

/// Orders the attached masters' admin addresses by master id, which must run 1..=N: the fault
/// requests name masters by id and address them by position.
pub(super) async fn attached_masters(addrs: &[String]) -> anyhow::Result<Masters> {
    let mut by_id = BTreeMap::new();
    // Masters that were just started may not listen yet: ask each for up to 15 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    for a in addrs {
        let s = loop {
            if let Some(s) = status_of(a).await {
                break s;
            }
            if Instant::now() > deadline {
                return Err(exit::unavailable(format!(
                    "--masters: {a} does not answer a status request (is it a master's admin \
                     listener, `master --admin HOST:PORT`?)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        if by_id.insert(s.master_id.0, a.clone()).is_some() {
            return Err(exit::bad_input(format!(
                "--masters: two addresses are master-{}",
                s.master_id.0
            )));
        }
    }
    let ids: Vec<u64> = by_id.keys().copied().collect();
    if ids != (1..=addrs.len() as u64).collect::<Vec<_>>() {
        return Err(exit::bad_input(format!(
            "--masters: give every master of the cluster, ids 1..={}; these are masters {ids:?}",
            addrs.len()
        )));
    }
    let admin: Vec<String> = by_id.into_values().collect();
    Ok(Masters {
        client: admin.clone(),
        admin,
        cluster: None,
    })
}

/// Waits (60 s each) for a leader, then for `want_nodes` slaves registered and up; `dir` is
/// named in the error, for the logs.
pub(super) async fn wait_ready(
    masters: &[String],
    want_nodes: usize,
    dir: &Path,
) -> anyhow::Result<()> {
    if wait_leader(masters, Duration::from_secs(60))
        .await
        .is_none()
    {
        anyhow::bail!("no leader within 60 s (logs in {})", dir.display());
    }
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(ClientResponse::Nodes(n)) =
            call(masters, ClientRequest::Nodes { stale: false }, false).await
        {
            let up = n.iter().filter(|n| n.state == "up").count();
            if up >= want_nodes {
                return Ok(());
            }
        }
        if Instant::now() > end {
            anyhow::bail!("fewer than {want_nodes} slaves registered and up within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
