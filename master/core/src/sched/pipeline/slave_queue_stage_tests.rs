use super::*;
use crate::sched::pipeline::feasibility_stage::Feasibility;
use crate::sched::pipeline::queue_stage::QueueStage;
use crate::sched::test_log::{node, spec, submit, Log};
use hetsched_common::GpuRequest;
use hetsched_common::ResourceRequest;
use std::collections::BTreeSet;

/// Node 1 with 2 CPUs, node 2 with 4 CPUs and a GPU (the stage reads capacities and
/// queue lengths, not free resources).
fn cluster() -> Log {
    let mut l = Log::new();
    l.apply_bare(node(1, 2, 0, &[]));
    l.apply_bare(node(2, 4, 1, &[]));
    l
}

fn req(cpus: u64) -> ResourceRequest {
    ResourceRequest {
        cpu_milli: cpus * 1000,
        mem_mib: 10,
        ..Default::default()
    }
}

#[test]
fn the_shortest_queue_with_room_among_nodes_that_could_run_it_ties_to_the_lower_id() {
    let l = cluster();
    let stage = SlaveQueueStage { depth: 1 };
    let any = |_: NodeId| true;
    let none = BTreeMap::new();
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(1), &any, &none, None),
        Some(NodeId(1))
    );
    // 3 CPUs: only node 2 could ever run it.
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(3), &any, &none, None),
        Some(NodeId(2))
    );
    // This plan queued one on node 1 already: its queue (depth 1) is full.
    let one = BTreeMap::from([(NodeId(1), 1)]);
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(1), &any, &one, None),
        Some(NodeId(2))
    );
    let both = BTreeMap::from([(NodeId(1), 1), (NodeId(2), 1)]);
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(1), &any, &both, None),
        None
    );
    // Restricted by what the task may use, and by `among`.
    let not_one = |n: NodeId| n != NodeId(1);
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(1), &not_one, &none, None),
        Some(NodeId(2))
    );
    let among = [NodeId(2)];
    assert_eq!(
        queue_node(stage.depth, &l.s, &req(1), &any, &none, Some(&among)),
        Some(NodeId(2))
    );
}

#[test]
fn no_queue_without_depth_nor_for_tasks_asking_devices() {
    let l = cluster();
    let any = |_: NodeId| true;
    let none = BTreeMap::new();
    let off = SlaveQueueStage { depth: 0 };
    assert_eq!(
        queue_node(off.depth, &l.s, &req(1), &any, &none, None),
        None
    );
    let on = SlaveQueueStage { depth: 4 };
    let gpu = ResourceRequest {
        gpu: GpuRequest::whole(1),
        ..req(1)
    };
    assert_eq!(
        queue_node(on.depth, &l.s, &gpu, &any, &none, None),
        None,
        "GPUs granted at assignment"
    );
}

#[test]
fn decide_queues_the_task_or_leaves_it_stuck() {
    let mut l = cluster();
    l.apply_bare(submit(spec(1, 1, 0)));
    let task = *l.s.pending().first().expect("pending");
    let head = QueueStage::admit(&l.s, 0, &BTreeSet::new(), task).expect("admitted");
    let mut feasibility = Feasibility::new(&l.s);
    let scope = feasibility.scope(head.job);
    let stage = SlaveQueueStage { depth: 1 };
    match stage.decide(&l.s, &head, &scope, &BTreeMap::new()) {
        Decision::Assign(a) => {
            assert_eq!((a.task, a.node, a.queued), (task, NodeId(1), true));
            assert!(a.engine.is_none() && !a.borrowed);
        }
        d => panic!("{d:?}"),
    }
    let full = BTreeMap::from([(NodeId(1), 1), (NodeId(2), 1)]);
    assert_eq!(stage.decide(&l.s, &head, &scope, &full), Decision::Stuck);
}
