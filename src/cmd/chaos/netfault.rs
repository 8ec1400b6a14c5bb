//! The real network nemeses of `chaos run --netns`: partitions as nftables rules inside the
//! cluster's network namespaces (`hetsched::local::firewall`). Which processes end up on
//! which side is a pure function of the fault, the seed's pick and the leader ([`plan`]);
//! every rule carries the fault's name (`net-partition-leader`), which the timeline names
//! too. Heal removes every rule. The root namespace (this tool) always reaches every process.

use super::super::local::{ClusterNet, CutDirection};
use hetsched_chaos::{FaultKind, PlannedFault};

/// One real partition: the rules to add and how the timeline names it.
#[derive(Debug, PartialEq)]
pub(super) struct NetCut {
    /// The rules' comment (`net-partition-leader`).
    pub(super) label: String,
    /// Per process: the peers whose packets its namespace drops, and which way.
    pub(super) rules: Vec<(String, Vec<String>, CutDirection)>,
    /// The timeline's words after the label.
    pub(super) what: String,
}

fn master(i: usize) -> String {
    format!("master-{}", i + 1)
}

fn slave(i: usize) -> String {
    format!("slave-{}", i + 1)
}

/// The real partition for fault `f` on `n_masters` masters and `n_slaves` slaves with
/// master index `leader` leading; `None` for faults that are not partitions, or without a
/// target.
pub(super) fn plan(
    f: &PlannedFault,
    leader: Option<usize>,
    n_masters: usize,
    n_slaves: usize,
) -> Option<NetCut> {
    if n_masters == 0 {
        return None;
    }
    let label = format!("net-{}", f.kind.name());
    let everyone: Vec<String> = (0..n_masters)
        .map(master)
        .chain((0..n_slaves).map(slave))
        .collect();
    let others = |me: &str| -> Vec<String> {
        everyone
            .iter()
            .filter(|n| n.as_str() != me)
            .cloned()
            .collect()
    };
    let isolate = |who: String| {
        let rest = others(&who);
        let what = format!("{who} cut both ways from {}", rest.join(", "));
        Some(NetCut {
            label: label.clone(),
            rules: vec![(who, rest, CutDirection::Both)],
            what,
        })
    };
    // A link's two masters, as `partition-link` in-process picks them.
    let pair = || {
        let a = (f.pick % n_masters as u64) as usize;
        let b = (a + 1 + (f.pick / 7 % (n_masters as u64 - 1)) as usize) % n_masters;
        (a, b)
    };
    match f.kind {
        FaultKind::PartitionLeader => isolate(master(
            leader.unwrap_or((f.pick % n_masters as u64) as usize),
        )),
        FaultKind::PartitionNode => {
            isolate(everyone[(f.pick % everyone.len() as u64) as usize].clone())
        }
        FaultKind::PartitionMinority => {
            // (n-1)/2 followers (at least 1) and half the slaves (rounded down) on the
            // minority side, chosen from the seed's pick onwards.
            let followers: Vec<usize> = (0..n_masters).filter(|i| Some(*i) != leader).collect();
            if followers.is_empty() || n_masters < 2 {
                return None;
            }
            let k = ((n_masters - 1) / 2).max(1);
            let from = (f.pick % followers.len() as u64) as usize;
            let mut minority: Vec<String> = (0..k)
                .map(|j| master(followers[(from + j) % followers.len()]))
                .collect();
            let from = (f.pick / 3 % n_slaves.max(1) as u64) as usize;
            minority.extend((0..n_slaves / 2).map(|j| slave((from + j) % n_slaves)));
            minority.sort();
            let majority: Vec<String> = everyone
                .iter()
                .filter(|n| !minority.contains(n))
                .cloned()
                .collect();
            let what = format!("{{{}}} | {{{}}}", minority.join(", "), majority.join(", "));
            let rules = minority
                .iter()
                .map(|m| (m.clone(), majority.clone(), CutDirection::Both))
                .collect();
            Some(NetCut { label, rules, what })
        }
        FaultKind::PartitionLink if n_masters >= 2 => {
            let (a, b) = pair();
            Some(NetCut {
                what: format!("{} <-> {} cut", master(a), master(b)),
                rules: vec![(master(a), vec![master(b)], CutDirection::Both)],
                label,
            })
        }
        FaultKind::PartitionOneWay if n_masters >= 2 => {
            let (a, b) = pair();
            Some(NetCut {
                what: format!("{} -> {} dropped (one way)", master(a), master(b)),
                rules: vec![(master(a), vec![master(b)], CutDirection::Outbound)],
                label,
            })
        }
        _ => None,
    }
}

/// Adds the rules of `cut` in the namespaces of `net`; the timeline's line, or why it failed
/// (then every rule is removed again).
pub(super) fn inject(net: &ClusterNet, cut: &NetCut) -> Result<String, String> {
    for (node, peers, direction) in &cut.rules {
        let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
        if let Err(e) = net.cut(node, &peers, *direction, &cut.label) {
            let _ = net.heal();
            return Err(format!("{}: {e}", cut.label));
        }
    }
    Ok(format!("{}: {} (nftables)", cut.label, cut.what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: FaultKind, pick: u64) -> PlannedFault {
        PlannedFault {
            at_ms: 0,
            hold_ms: 0,
            kind,
            pick,
        }
    }

    #[test]
    fn the_leader_is_cut_from_every_other_process() {
        let c = plan(&fault(FaultKind::PartitionLeader, 5), Some(1), 3, 2).unwrap();
        assert_eq!(c.label, "net-partition-leader");
        assert_eq!(
            c.rules,
            vec![(
                "master-2".to_string(),
                vec!["master-1", "master-3", "slave-1", "slave-2"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                CutDirection::Both
            )]
        );
    }

    #[test]
    fn a_minority_never_holds_the_leader_or_a_majority_of_masters() {
        for n in 2..=7 {
            for pick in 0..20 {
                let c = plan(&fault(FaultKind::PartitionMinority, pick), Some(0), n, 3).unwrap();
                let minority: Vec<&String> = c.rules.iter().map(|r| &r.0).collect();
                assert!(!minority.contains(&&"master-1".to_string()), "{c:?}");
                let masters = minority.iter().filter(|m| m.starts_with("master")).count();
                assert!(masters >= 1 && 2 * masters < n.max(3), "{n}: {c:?}");
                assert_eq!(minority.len() - masters, 1, "one of 3 slaves: {c:?}");
                for (_, peers, _) in &c.rules {
                    assert!(peers.iter().all(|p| !minority.contains(&p)), "{c:?}");
                    assert_eq!(peers.len() + minority.len(), n + 3);
                }
            }
        }
    }

    #[test]
    fn a_one_way_cut_drops_one_direction_of_one_link() {
        let c = plan(&fault(FaultKind::PartitionOneWay, 4), None, 3, 2).unwrap();
        assert_eq!(c.rules.len(), 1);
        assert_eq!(c.rules[0].2, CutDirection::Outbound);
        assert_ne!(c.rules[0].0, c.rules[0].1[0]);
        assert!(plan(&fault(FaultKind::PartitionOneWay, 4), None, 1, 2).is_none());
        assert!(plan(&fault(FaultKind::Delay, 4), None, 3, 2).is_none());
    }

    #[test]
    fn any_process_can_be_isolated() {
        let names: std::collections::BTreeSet<String> = (0..50)
            .filter_map(|p| plan(&fault(FaultKind::PartitionNode, p), None, 3, 2))
            .map(|c| c.rules[0].0.clone())
            .collect();
        assert_eq!(names.len(), 5, "{names:?}");
    }
}
