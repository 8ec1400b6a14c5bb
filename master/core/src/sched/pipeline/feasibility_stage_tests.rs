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
    assert_eq!(ids(p["gpu"].as_ref()), Some(vec![1, 2]));
    assert_eq!(ids(p["default"].as_ref()), Some(vec![2, 3]));
    // Node 3 down: every up node serves `gpu` now, so no constraint.
    l.apply_bare(Command::NodeDown { node: NodeId(3) });
    let p = partition_candidates(&l.s);
    assert_eq!(p["gpu"], None);
    assert_eq!(ids(p["default"].as_ref()), Some(vec![2]));
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
