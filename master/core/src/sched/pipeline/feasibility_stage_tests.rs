use super::*;
use crate::sched::test_log::{node, spec, submit, Log};
use crate::state::Command;
use hetsched_common::JobSpec;

/// Nodes 1 and 2 serve `gpu`; node 3 only `default`.
fn cluster() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &["gpu"]));
    l.apply_bare(node(2, 4, 0, &["gpu", "default"]));
    l.apply_bare(node(3, 4, 0, &[]));
    l
}

fn job_of(l: &mut Log, spec: JobSpec) -> Job {
    l.apply_bare(submit(spec));
    l.s.jobs().values().last().expect("submitted").clone()
}

fn ids(c: Option<&Candidates>) -> Option<Vec<u64>> {
    c.map(|c| c.as_slice().iter().map(|n| n.0).collect())
}

#[test]
fn partitions_map_to_the_up_nodes_serving_them_and_none_where_all_do() {
    let mut l = cluster();
    let p = partition_candidates(&l.s);
    assert_eq!(ids(p.by_name["gpu"].as_ref()), Some(vec![1, 2]));
    assert_eq!(ids(p.by_name["default"].as_ref()), Some(vec![2, 3]));
    // Node 3 down: every up node serves `gpu` now, so no constraint.
    l.apply_bare(Command::NodeDown { node: NodeId(3) });
    let p = partition_candidates(&l.s);
    assert_eq!(p.by_name["gpu"], None);
    assert_eq!(ids(p.by_name["default"].as_ref()), Some(vec![2]));
}

#[test]
fn the_scope_is_the_partition_within_the_locality_and_nothing_for_an_unserved_partition() {
    let mut l = cluster();
    let gpu = job_of(
        &mut l,
        JobSpec {
            partition: "gpu".into(),
            ..spec(1, 1, 0)
        },
    );
    let local = job_of(
        &mut l,
        JobSpec {
            partition: "gpu".into(),
            nodes: vec!["n2".into(), "n3".into()],
            ..spec(1, 1, 0)
        },
    );
    let nowhere = job_of(
        &mut l,
        JobSpec {
            partition: "nope".into(),
            ..spec(1, 1, 0)
        },
    );
    let mut f = Feasibility::new(&l.s);
    let s = f.scope(&gpu);
    assert_eq!(ids(s.allowed()), Some(vec![1, 2]));
    assert!(s.locality().is_none());
    assert!(s.may_use(NodeId(1)) && !s.may_use(NodeId(3)));
    // Locality n2, n3 within partition gpu (nodes 1, 2): node 2 only.
    let s = f.scope(&local);
    assert_eq!(ids(s.allowed()), Some(vec![2]));
    assert_eq!(ids(s.locality()), Some(vec![2]));
    assert!(s.may_use(NodeId(2)) && !s.may_use(NodeId(3)));
    let s = f.scope(&nowhere);
    assert_eq!(ids(s.allowed()), Some(vec![]));
    assert!((1..=3).all(|n| !s.may_use(NodeId(n))));
}

#[test]
fn a_partition_every_up_node_serves_puts_no_constraint() {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &[]));
    l.apply_bare(node(2, 4, 0, &[]));
    let any = job_of(&mut l, spec(1, 1, 0));
    let mut f = Feasibility::new(&l.s);
    let s = f.scope(&any);
    assert!(s.allowed().is_none());
    assert!(s.may_use(NodeId(1)) && s.may_use(NodeId(2)) && s.may_use(NodeId(7)));
}

/// `node(key, ...)` whose slave's runtime passed its probe (issue 52).
fn container_node(key: u64, partitions: &[&str]) -> Command {
    let mut c = node(key, 4, 0, partitions);
    if let Command::RegisterNode { labels, .. } = &mut c {
        labels.insert(
            hetsched_common::protocol::CONTAINER_RUNTIME_LABEL.into(),
            "runc".into(),
        );
    }
    c
}

#[test]
fn a_container_job_may_use_only_nodes_that_run_containers() {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &[]));
    l.apply_bare(container_node(2, &[]));
    l.apply_bare(container_node(3, &["gpu"]));
    let image = |s: JobSpec| JobSpec {
        image: Some("oci:/srv/bb".into()),
        ..s
    };
    let any = job_of(&mut l, image(spec(1, 1, 0)));
    let pinned = job_of(
        &mut l,
        image(JobSpec {
            nodes: vec!["n1".into(), "n2".into()],
            ..spec(1, 1, 0)
        }),
    );
    let only_bare = job_of(
        &mut l,
        image(JobSpec {
            nodes: vec!["n1".into()],
            ..spec(1, 1, 0)
        }),
    );
    let bare = job_of(&mut l, spec(1, 1, 0));
    let mut f = Feasibility::new(&l.s);
    // Partition default: nodes 1 and 2; of them node 2 runs containers.
    assert_eq!(ids(f.scope(&any).allowed()), Some(vec![2]));
    assert_eq!(ids(f.scope(&pinned).allowed()), Some(vec![2]));
    assert_eq!(ids(f.scope(&only_bare).allowed()), Some(vec![]));
    assert_eq!(ids(f.scope(&bare).allowed()), Some(vec![1, 2]));
    // Why the pinned-to-a-bare-node task waits: `resources`, naming containers.
    let (why, _) = crate::sched::waiting::Shape::of(&l.s).stuck(&l.s, &only_bare);
    assert_eq!(why.reason, "resources", "{why:?}");
    assert!(why.detail.starts_with("containers:"), "{why:?}");
    let n1 = l.s.node(NodeId(1)).expect("n1").clone();
    let v = crate::sched::waiting::node_verdict(&l.s, &n1, &only_bare, hetsched_common::TaskId(1));
    assert!(v.detail.contains("runs no containers"), "{v:?}");
}

#[test]
fn the_sets_are_rebuilt_when_a_node_starts_running_containers() {
    let mut l = Log::new();
    l.apply_bare(node(1, 4, 0, &[]));
    let mut cache = PartitionCache::default();
    assert!(cache.sets(&l.s).containers.is_empty());
    // The slave restarts with a runtime: it registers again with the label.
    l.apply_bare(container_node(1, &[]));
    cache.node_changed(&l.s, NodeId(1));
    assert_eq!(cache.sets(&l.s).containers.as_slice(), &[NodeId(1)]);
}
