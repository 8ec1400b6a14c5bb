//! Tests of the fragment memo (`frag_memo.rs`): through it, `frag`'s measure gives what it
//! gives without it, on random states and mixes, across rebinds and after it overflows.

use super::*;
use crate::sched::index::frag::{fragmentation_delta, fragmentation_delta_memo};
use hetsched_common::{GpuRequest, NodeResources, ResourceRequest};

/// splitmix64: a seeded stream for the random states.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize].clone()
    }
}

const MODELS: &[&str] = &["G2", "T4", "V100M16"];

/// A node state from a small set of values, so that states repeat as on a real cluster.
fn random_node(r: &mut Rng) -> NodeResources {
    let n = r.pick(&[0usize, 1, 2, 4, 8]);
    let model = r.pick(MODELS);
    NodeResources {
        cpu_milli: r.pick(&[0, 2000, 8000, 32000, 96000]),
        mem_mib: r.pick(&[0, 4096, 65536, 262144]),
        gpus: (0..n)
            .map(|_| GpuDevice {
                // Mostly one model per node, now and then a mixed one.
                model: if r.next() % 8 == 0 {
                    r.pick(MODELS).to_string()
                } else {
                    model.to_string()
                },
                free_milli: r.pick(&[0, 250, 460, 500, 1000]),
                emulated: false,
            })
            .collect(),
        ..Default::default()
    }
}

fn random_request(r: &mut Rng) -> ResourceRequest {
    let count = r.pick(&[0u32, 1, 1, 2, 4, 8]);
    let models = match r.next() % 4 {
        0 => vec![r.pick(MODELS).to_string()],
        1 => vec![r.pick(MODELS).to_string(), r.pick(MODELS).to_string()],
        _ => vec![],
    };
    ResourceRequest {
        cpu_milli: r.pick(&[500, 2000, 6000, 12000]),
        mem_mib: r.pick(&[1024, 4096, 16384]),
        gpu: GpuRequest {
            count,
            milli: if count == 1 {
                r.pick(&[250, 460, 500, 1000])
            } else {
                1000
            },
            models: if count == 0 { vec![] } else { models },
        },
        ..Default::default()
    }
}

/// A mix of a few random classes with random weights (the order is the classes' order, as
/// the workload mix gives it).
fn random_mix(r: &mut Rng) -> Vec<(DemandShape, u64)> {
    let mut classes = BTreeMap::new();
    for _ in 0..(1 + r.next() % 12) {
        if let Some(c) = DemandShape::of(&random_request(r)) {
            classes.insert(c, 1 + r.next() % 5000);
        }
    }
    classes.into_iter().collect()
}

fn seed() -> u64 {
    let seed = std::env::var("FRAG_MEMO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f4a6);
    println!("seed {seed} (FRAG_MEMO_SEED to repeat)");
    seed
}

#[test]
fn the_memo_gives_the_uncached_measure_on_random_states() {
    let mut r = Rng(seed());
    let mut memo = FragMemo::default();
    let (mut s1, mut s2) = (Vec::new(), Vec::new());
    let (mut compared, mut fits) = (0, 0);
    for round in 0..400 {
        let mix = random_mix(&mut r);
        memo.bind(&mix);
        for _ in 0..50 {
            let node = random_node(&mut r);
            let req = random_request(&mut r);
            let plain = fragmentation_delta(&node, &req, &mix, &mut s1);
            let memoised = fragmentation_delta_memo(&node, &req, &mix, &mut s2, Some(&mut memo));
            assert_eq!(plain, memoised, "round {round}: {node:?} {req:?} {mix:?}");
            compared += 1;
            fits += plain.is_some() as u32;
        }
    }
    // The comparison saw placements, and the memo was reused (states repeat).
    assert!(fits > 1000, "only {fits} of {compared} fit");
    assert!(memo.states() < compared);
}

#[test]
fn the_memo_stays_exact_when_it_overflows_and_starts_again() {
    let mut r = Rng(seed() ^ 1);
    let mut memo = FragMemo::default();
    let mut scratch = Vec::new();
    let mix = random_mix(&mut r);
    memo.bind(&mix);
    // More distinct states than it keeps: CPU values no two nodes share.
    for i in 0..(FragMemo::MAX_STATES as u64 + 500) {
        let mut node = random_node(&mut r);
        node.cpu_milli = 1_000_000 + i;
        let req = random_request(&mut r);
        let plain = fragmentation_delta(&node, &req, &mix, &mut scratch);
        let memoised = fragmentation_delta_memo(&node, &req, &mix, &mut scratch, Some(&mut memo));
        assert_eq!(plain, memoised, "state {i}");
    }
    assert!(memo.states() <= FragMemo::MAX_STATES);
    // More classes than it names: binding starts again and stays exact.
    for round in 0..(FragMemo::MAX_CLASSES / 8) {
        let mix: Vec<(DemandShape, u64)> = (0..10)
            .map(|k| {
                let mut c = DemandShape::of(&random_request(&mut r)).unwrap_or(DemandShape {
                    cpu_milli: 0,
                    mem_mib: 0,
                    gpu_count: 1,
                    gpu_milli: 1000,
                    models: vec![],
                });
                c.cpu_milli = (round * 10 + k) as u64;
                (c, 1 + r.next() % 100)
            })
            .collect();
        memo.bind(&mix);
        let node = random_node(&mut r);
        let req = random_request(&mut r);
        let plain = fragmentation_delta(&node, &req, &mix, &mut scratch);
        let memoised = fragmentation_delta_memo(&node, &req, &mix, &mut scratch, Some(&mut memo));
        assert_eq!(plain, memoised, "round {round}");
    }
}
