//! The nemesis: injects one planned fault at a time into the masters and slaves — process
//! faults (kill -9, SIGSTOP) on a local cluster, transport faults (partitions, delays)
//! through every master's admin listener, or with `--netns` real partitions between the
//! cluster's network namespaces ([`super::netfault`]; delays stay in-process: no netem) —
//! and remembers how to undo each at heal.

use super::super::client::call;
use super::super::local::{ClusterNet, LocalCluster, LocalProc};
use super::netfault;
use super::observe::wait_leader;
use hetsched_chaos::{FaultKind, PlannedFault};
use hetsched_common::protocol::{ClientRequest, FaultSpec};
use hetsched_common::MasterId;
use std::time::Duration;

/// What an injected fault changed, to undo at heal.
pub(super) enum Undo {
    Restart(Target),
    Cont(Target),
    ClearFaults,
    HealNet,
    Nothing,
    /// Not injected: [`Nemesis::inject`] reports it as skipped.
    Skipped,
}

/// One process of a local cluster, by position.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    Master(usize),
    Slave(usize),
}

/// The fault injector of one run.
pub(super) struct Nemesis {
    /// The local cluster; `None` when attached to running masters.
    pub(super) cluster: Option<LocalCluster>,
    /// Masters' admin addresses, master id order (index i is master i + 1).
    pub(super) admin_addrs: Vec<String>,
}

impl Nemesis {
    fn proc_mut(&mut self, t: Target) -> Option<&mut LocalProc> {
        let c = self.cluster.as_mut()?;
        match t {
            Target::Master(i) => c.masters.get_mut(i),
            Target::Slave(i) => c.slaves.get_mut(i),
        }
    }
    fn name(&self, t: Target) -> String {
        match t {
            Target::Master(i) => format!("master-{}", i + 1),
            Target::Slave(i) => format!("slave-{}", i + 1),
        }
    }
    fn pause(&mut self, t: Target) {
        if let Some(p) = self.proc_mut(t) {
            let _ = p.pause();
        }
    }
    fn resume(&mut self, t: Target) {
        if let Some(p) = self.proc_mut(t) {
            let _ = p.resume();
        }
    }
    fn kill9(&mut self, t: Target) {
        if let Some(p) = self.proc_mut(t) {
            p.kill9();
        }
    }
    fn restart(&mut self, t: Target) {
        let name = self.name(t);
        if let Some(p) = self.proc_mut(t) {
            if let Err(e) = p.restart() {
                tracing::warn!("restart {name}: {e}");
            }
        }
    }
    pub(super) fn n_masters(&self) -> usize {
        self.admin_addrs.len()
    }
    fn n_slaves(&self) -> usize {
        self.cluster.as_ref().map_or(0, |c| c.slaves.len())
    }
    /// The cluster's network namespaces (`--netns`).
    fn net(&self) -> Option<&ClusterNet> {
        self.cluster.as_ref()?.net.as_ref()
    }
    /// Removes every real partition rule (`--netns`); a warning where that fails.
    fn heal_net(&self) {
        if let Some(Err(e)) = self.net().map(ClusterNet::heal) {
            tracing::warn!("heal the network: {e}");
        }
    }
    async fn set_faults(&self, master: usize, spec: FaultSpec) {
        let addr = [self.admin_addrs[master].clone()];
        let req = call(&addr, ClientRequest::SetFaults(spec), true);
        match tokio::time::timeout(Duration::from_secs(2), req).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("set faults on master-{}: {e}", master + 1),
            Err(_) => tracing::warn!("set faults on master-{}: no answer in 2 s", master + 1),
        }
    }
    /// Clears the transport faults of every master, and the real partitions (`--netns`).
    pub(super) async fn clear_faults(&self) {
        for i in 0..self.n_masters() {
            self.set_faults(i, FaultSpec::default()).await;
        }
        self.heal_net();
    }

    /// Injects one fault; returns what it did and how to undo it, or (`Err`) why it was
    /// skipped: a fault only real partitions can make, without `--netns`.
    pub(super) async fn inject(
        &mut self,
        f: &PlannedFault,
        leader: Option<usize>,
    ) -> Result<(String, Undo), String> {
        let kind = f.kind.name();
        if let Some(net) = self.net() {
            if let Some(cut) = netfault::plan(f, leader, self.n_masters(), self.n_slaves()) {
                return match netfault::inject(net, &cut) {
                    Ok(what) => Ok((format!("{kind}: {what}"), Undo::HealNet)),
                    Err(e) => Err(format!("{kind}: skipped ({e})")),
                };
            }
        }
        match self.inject_local(f, leader).await {
            (why, Undo::Skipped) => Err(why),
            done => Ok(done),
        }
    }

    /// Injects one fault as a process fault or through the admin ports.
    async fn inject_local(&mut self, f: &PlannedFault, leader: Option<usize>) -> (String, Undo) {
        let n_masters = self.n_masters();
        let followers: Vec<usize> = (0..n_masters).filter(|i| Some(*i) != leader).collect();
        let pick = |v: &[usize]| v.get((f.pick % v.len().max(1) as u64) as usize).copied();
        let leader_or_any = leader.unwrap_or((f.pick % n_masters as u64) as usize);
        let slave = (f.pick % self.n_slaves().max(1) as u64) as usize;
        let kind = f.kind.name();
        match f.kind {
            FaultKind::KillLeader | FaultKind::KillFollower => {
                let m = if f.kind == FaultKind::KillLeader {
                    Some(leader_or_any)
                } else {
                    pick(&followers)
                };
                let Some(m) = m else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.kill9(Target::Master(m));
                (
                    format!("{kind}: kill -9 master-{}", m + 1),
                    Undo::Restart(Target::Master(m)),
                )
            }
            FaultKind::KillSlave => {
                let t = Target::Slave(slave);
                self.kill9(t);
                (
                    format!("{kind}: kill -9 {}", self.name(t)),
                    Undo::Restart(t),
                )
            }
            FaultKind::PauseFollower | FaultKind::PauseLeader | FaultKind::PauseSlave => {
                let t = match f.kind {
                    FaultKind::PauseLeader => Some(Target::Master(leader_or_any)),
                    FaultKind::PauseFollower => pick(&followers).map(Target::Master),
                    _ => Some(Target::Slave(slave)),
                };
                let Some(t) = t else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.pause(t);
                (format!("{kind}: SIGSTOP {}", self.name(t)), Undo::Cont(t))
            }
            FaultKind::PartitionLeader | FaultKind::PartitionMinority => {
                let m = if f.kind == FaultKind::PartitionLeader {
                    Some(leader_or_any)
                } else {
                    pick(&followers)
                };
                let Some(m) = m else {
                    return (format!("{kind}: no target"), Undo::Nothing);
                };
                self.isolate(m, f.pick).await;
                (
                    format!("{kind}: master-{} cut from every other master", m + 1),
                    Undo::ClearFaults,
                )
            }
            FaultKind::PartitionLink => {
                if n_masters < 2 {
                    return (format!("{kind}: no target"), Undo::Nothing);
                }
                let a = (f.pick % n_masters as u64) as usize;
                let b = (a + 1 + (f.pick / 7 % (n_masters as u64 - 1)) as usize) % n_masters;
                for (from, to) in [(a, b), (b, a)] {
                    let spec = FaultSpec {
                        seed: f.pick,
                        cut: vec![MasterId(to as u64 + 1)],
                        ..Default::default()
                    };
                    self.set_faults(from, spec).await;
                }
                (
                    format!("{kind}: link master-{} <-> master-{} cut", a + 1, b + 1),
                    Undo::ClearFaults,
                )
            }
            FaultKind::PartitionOneWay => (
                format!("{kind}: skipped (a one-way cut needs --netns)"),
                Undo::Skipped,
            ),
            FaultKind::PartitionNode => {
                let i = (f.pick % (n_masters + self.n_slaves()).max(1) as u64) as usize;
                if i >= n_masters {
                    return (
                        format!(
                            "{kind}: skipped (cutting slave-{} needs --netns)",
                            i - n_masters + 1
                        ),
                        Undo::Skipped,
                    );
                }
                self.isolate(i, f.pick).await;
                (
                    format!("{kind}: master-{} cut from every other master", i + 1),
                    Undo::ClearFaults,
                )
            }
            FaultKind::Delay => {
                let delay_ms = 20 + f.pick % 80;
                for m in 0..n_masters {
                    let spec = FaultSpec {
                        seed: f.pick,
                        delay_ms,
                        ..Default::default()
                    };
                    self.set_faults(m, spec).await;
                }
                let how = if self.net().is_some() {
                    " (in-process: no netem delay in the namespaces)"
                } else {
                    ""
                };
                (
                    format!("{kind}: {delay_ms} ms on every Raft message{how}"),
                    Undo::ClearFaults,
                )
            }
            FaultKind::RollingRestart => {
                for m in 0..n_masters {
                    self.kill9(Target::Master(m));
                    self.restart(Target::Master(m));
                    wait_leader(&self.admin_addrs, Duration::from_secs(20)).await;
                }
                (
                    format!("{kind}: each of {n_masters} masters killed and restarted"),
                    Undo::Nothing,
                )
            }
        }
    }

    /// Cuts master `m` from every other master, both ways.
    async fn isolate(&self, m: usize, seed: u64) {
        let n = self.n_masters();
        self.set_faults(
            m,
            FaultSpec {
                seed,
                isolated: true,
                ..Default::default()
            },
        )
        .await;
        for o in (0..n).filter(|o| *o != m) {
            self.set_faults(
                o,
                FaultSpec {
                    seed,
                    cut: vec![MasterId(m as u64 + 1)],
                    ..Default::default()
                },
            )
            .await;
        }
    }

    /// Undoes one fault; returns what it did, if anything.
    pub(super) async fn undo(&mut self, u: Undo) -> Option<String> {
        match u {
            Undo::Restart(t) => {
                self.restart(t);
                Some(format!("heal: restart {}", self.name(t)))
            }
            Undo::Cont(t) => {
                self.resume(t);
                Some(format!("heal: SIGCONT {}", self.name(t)))
            }
            Undo::ClearFaults => {
                self.clear_faults().await;
                Some("heal: transport faults cleared".into())
            }
            Undo::HealNet => {
                self.heal_net();
                Some("heal: net-heal: nftables rules removed in every namespace".into())
            }
            Undo::Nothing | Undo::Skipped => None,
        }
    }
}
