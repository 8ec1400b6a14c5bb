use super::*;
use crate::sched::test_log::node;

fn registered(o: Outcome) -> NodeId {
    match o {
        Outcome::Registered { node } => node,
        o => panic!("{o:?}"),
    }
}

#[test]
fn new_keys_get_the_next_ids_and_a_known_key_its_own() {
    let mut book = NodeBook::default();
    let a = registered(book.register(node(7, 4, 0, &[])));
    let b = registered(book.register(node(8, 4, 0, &[])));
    assert_eq!((a, b), (NodeId(1), NodeId(2)));
    assert_eq!(registered(book.register(node(7, 4, 0, &[]))), a);
    assert_eq!(book.len(), 2);
    assert_eq!(book.keys()[&7], a);
    assert_eq!(book.next_id(), 2);
}

#[test]
fn a_claimed_id_must_match_the_keys() {
    let mut book = NodeBook::default();
    registered(book.register(node(7, 4, 0, &[])));
    registered(book.register(node(8, 4, 0, &[])));
    let mut claim = node(7, 4, 0, &[]);
    if let Command::RegisterNode { node, .. } = &mut claim {
        *node = Some(NodeId(2));
    }
    assert!(matches!(book.register(claim), Outcome::Rejected(_)));
}

#[test]
fn a_re_registration_changes_capacity_only_while_the_node_holds_nothing() {
    let mut book = NodeBook::default();
    let a = registered(book.register(node(7, 4, 0, &[])));
    registered(book.register(node(7, 8, 0, &[])));
    assert_eq!(book.get(&a).map(|n| n.capacity.cpu_milli), Some(8000));
    if let Some(n) = book.get_mut(&a) {
        n.tasks.insert(hetsched_common::TaskId(1));
    }
    registered(book.register(node(7, 2, 0, &[])));
    assert_eq!(book.get(&a).map(|n| n.capacity.cpu_milli), Some(8000));
}

#[test]
fn up_answers_by_liveness() {
    let mut book = NodeBook::default();
    let a = registered(book.register(node(7, 4, 0, &[])));
    assert!(matches!(book.up(a), Outcome::Ignored(_)));
    if let Some(n) = book.get_mut(&a) {
        n.liveness = NodeLiveness::Down;
    }
    assert!(matches!(book.up(a), Outcome::NodeUp { .. }));
    assert!(book.get(&a).is_some_and(|n| n.liveness == NodeLiveness::Up));
    assert!(matches!(book.up(NodeId(9)), Outcome::Rejected(_)));
}
