//! `usage`: each user's standing per partition — what its tasks hold against its quota
//! (S1), what they hold on nodes and the DRF dominant share (S3) — with the leader's last
//! hour of queue lengths and allocation, for the dashboard.

use hetsched_common::priority::Principal;
use hetsched_common::protocol::{Amounts, QuotaLimits, UserUsage};
use hetsched_common::{ResourceRequest, TaskState, GPU_MILLI_PER_DEVICE};
use hetsched_master_core::state::{partition_of, ClusterState};
use std::collections::BTreeMap;

/// Adds one task's request to `a`.
fn add(a: &mut Amounts, r: &ResourceRequest) {
    a.cpus += r.cpu_milli as f64 / 1000.0;
    a.mem += r.mem_mib;
    a.gpus += r.gpu.total_milli() as f64 / f64::from(GPU_MILLI_PER_DEVICE);
}

/// Every user and partition with live tasks or a priority entry.
pub(super) fn usage(s: &ClusterState) -> Vec<UserUsage> {
    let cfg = s.priority();
    let mut by: BTreeMap<(String, String), UserUsage> = BTreeMap::new();
    let blank = |user: &str, partition: &str| {
        let entry = cfg.resolve(user, partition);
        UserUsage {
            user: user.to_string(),
            partition: partition.to_string(),
            priority: entry.as_ref().map_or(cfg.base_priority, |e| e.priority),
            quota_of: entry.as_ref().map(|e| match e.who {
                Principal::User(u) => format!("user:{u}"),
                Principal::Group(g) => format!("group:{g}"),
            }),
            quota: entry.as_ref().map(|e| QuotaLimits {
                cpus: e.quota.cpu_milli.map(|c| c as f64 / 1000.0),
                mem: e.quota.mem_mib,
                gpus: e
                    .quota
                    .gpu_milli
                    .map(|g| g as f64 / f64::from(GPU_MILLI_PER_DEVICE)),
            }),
            quota_used: Amounts::default(),
            held: Amounts::default(),
            dominant_share: 0.0,
            waiting: 0,
        }
    };
    for e in &cfg.entries {
        if let Principal::User(u) = &e.who {
            by.entry((u.clone(), e.partition.clone()))
                .or_insert_with(|| blank(u, &e.partition));
        }
    }
    for job in s.jobs().values() {
        let partition = partition_of(&job.spec);
        let key = (job.spec.user.clone(), partition.to_string());
        for tid in &job.tasks {
            let Some(t) = s.task(*tid) else { continue };
            if t.status.state.is_final() {
                continue;
            }
            let u = by
                .entry(key.clone())
                .or_insert_with(|| blank(&job.spec.user, partition));
            let queued = t.status.state == TaskState::Assigned
                && t.status
                    .node
                    .and_then(|n| s.node(n))
                    .is_some_and(|n| n.queued.contains(tid));
            if t.quota.is_some() {
                add(&mut u.quota_used, &job.spec.resources);
            }
            if t.status.state == TaskState::Pending || queued {
                u.waiting += 1;
            } else {
                add(&mut u.held, &job.spec.resources);
            }
        }
    }
    let (mut cpus, mut mem, mut gpus) = (0.0f64, 0u64, 0.0f64);
    for n in s.nodes().values().filter(|n| n.is_up()) {
        cpus += n.capacity.cpu_milli as f64 / 1000.0;
        mem += n.capacity.mem_mib;
        gpus += n.capacity.gpu_free_milli() as f64 / f64::from(GPU_MILLI_PER_DEVICE);
    }
    let share = |used: f64, cap: f64| if cap > 0.0 { used / cap } else { 0.0 };
    by.into_values()
        .map(|mut u| {
            u.dominant_share = share(u.held.cpus, cpus)
                .max(share(u.held.mem as f64, mem as f64))
                .max(share(u.held.gpus, gpus));
            u
        })
        .collect()
}
