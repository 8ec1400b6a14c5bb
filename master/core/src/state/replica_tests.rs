use super::Replica;
use crate::sched::test_log::node;
use crate::state::{ClusterState, Command, CommandEnvelope, Outcome};
use hetsched_common::ClientRequestId;

fn env(request: Option<u64>, command: Command) -> CommandEnvelope {
    CommandEnvelope {
        at_ms: 50,
        request: request.map(ClientRequestId),
        command,
    }
}

fn bench(seq: u64) -> Command {
    Command::Bench {
        client: 3,
        seq,
        record: true,
        payload: Default::default(),
    }
}

#[test]
fn benchmark_traffic_counts_beside_the_cluster_state_and_leaves_it_alone() {
    let mut r = Replica::new();
    r.apply(1, env(None, node(1, 4, 0, &[])));
    let cluster = r.cluster().clone();
    assert_eq!(
        r.apply(2, env(None, bench(7))),
        Outcome::Ignored(String::new())
    );
    assert_eq!(r.bench()[&3].recorded, [7].into());
    assert_eq!(r.last_index(), 2, "the applied index moves");
    assert_eq!(r.nodes(), cluster.nodes());
    // The cluster state alone ignores it.
    let mut alone = cluster.clone();
    assert!(matches!(
        alone.apply(2, env(None, bench(7))),
        Outcome::Ignored(_)
    ));
    assert_eq!(alone.nodes(), cluster.nodes());
}

#[test]
fn a_retried_benchmark_request_applies_once() {
    let mut r = Replica::new();
    r.apply(1, env(Some(9), bench(1)));
    r.apply(2, env(Some(9), bench(1)));
    assert_eq!(r.bench()[&3].applied, 1);
    assert!(r.request_applied(ClientRequestId(9)));
}

#[test]
fn the_snapshot_keeps_the_counters_and_without_them_hashes_as_the_cluster_state() {
    let mut r = Replica::new();
    r.apply(1, env(None, node(1, 4, 0, &[])));
    assert_eq!(r.state_hash(), r.cluster().state_hash());
    assert_eq!(r.to_bytes(), r.cluster().to_bytes());
    r.apply(2, env(None, bench(4)));
    assert_ne!(r.state_hash(), r.cluster().state_hash());
    let back = Replica::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(back, r);
    assert_eq!(back.state_bytes(), r.to_bytes().len() as u64);
    // Read as a cluster state alone, the same bytes lose only the counters.
    let alone = ClusterState::from_bytes(&r.to_bytes()).expect("decode");
    assert_eq!(&alone, r.cluster());
}
