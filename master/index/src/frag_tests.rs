//! Tests of the `frag` placer: fragments per class, the mix, the gradient and the scarcity
//! scaling (`frag.rs`).

use super::*;
use hetsched_common::{GpuDevice, GpuRequest};

fn node(cpu: u64, mem: u64, gpus: &[u32]) -> NodeResources {
    NodeResources {
        cpu_milli: cpu,
        mem_mib: mem,
        gpus: gpus
            .iter()
            .map(|f| GpuDevice {
                model: "G2".into(),
                free_milli: *f,
                emulated: false,
            })
            .collect(),
        ..Default::default()
    }
}

fn class(cpu: u64, count: u32, milli: u32) -> DemandShape {
    DemandShape::of(&ResourceRequest {
        cpu_milli: cpu,
        mem_mib: 100,
        gpu: GpuRequest {
            count,
            milli,
            models: vec![],
        },
        ..Default::default()
    })
    .expect("a GPU class")
}

fn frag(n: &NodeResources, c: &DemandShape) -> u64 {
    let free: Vec<u32> = n.gpus.iter().map(|d| d.free_milli).collect();
    class_fragment(n.cpu_milli, n.mem_mib, &n.gpus, &free, c)
}

#[test]
fn three_free_gpus_without_cpu_are_all_fragment() {
    let n = node(0, 1000, &[1000, 1000, 1000]);
    for c in [class(1000, 1, 1000), class(500, 1, 500), class(1, 3, 1000)] {
        assert_eq!(frag(&n, &c), 3000, "{c:?}");
    }
    // With CPU beside them, none is a fragment to a task they can hold.
    let n = node(8000, 1000, &[1000, 1000, 1000]);
    assert_eq!(frag(&n, &class(1000, 1, 1000)), 0);
    assert_eq!(frag(&n, &class(1000, 3, 1000)), 0);
    // ... and all are to a task asking more devices than there are.
    assert_eq!(frag(&n, &class(1000, 4, 1000)), 3000);
}

#[test]
fn a_half_used_device_is_a_fragment_only_to_tasks_it_cannot_hold() {
    let n = node(8000, 1000, &[500, 1000]);
    // A 0.46 share fits in the half device: nothing is a fragment.
    assert_eq!(frag(&n, &class(1000, 1, 460)), 0);
    // A 0.6 share does not: the half device is.
    assert_eq!(frag(&n, &class(1000, 1, 600)), 500);
    // A whole device: the half device is, the free one is not.
    assert_eq!(frag(&n, &class(1000, 1, 1000)), 500);
    // Two whole devices: only one is whole, so everything is.
    assert_eq!(frag(&n, &class(1000, 2, 1000)), 1500);
    // Another model's devices are not its fragments (per-model measure).
    let mut pinned = class(1000, 1, 460);
    pinned.models = vec!["T4".into()];
    assert_eq!(frag(&n, &pinned), 0);
    assert_eq!(
        frag(&n, &class(1000, 1, 600)),
        frag(&n, &{
            let mut c = class(1000, 1, 600);
            c.models = vec!["G2".into()];
            c
        })
    );
}

#[test]
fn expected_fragmentation_weights_classes_by_their_gpu_demand() {
    let mut mix = WorkloadMix::new(3);
    let half = ResourceRequest {
        cpu_milli: 1000,
        mem_mib: 100,
        gpu: GpuRequest::fraction(600),
        ..Default::default()
    };
    let cpu_only = ResourceRequest {
        cpu_milli: 1000,
        ..Default::default()
    };
    mix.observe(&half);
    mix.observe(&cpu_only);
    mix.observe(&half);
    assert_eq!(mix.classes().len(), 1);
    assert_eq!(mix.classes()[0].1, 2 * 600);
    // The window forgets the oldest arrival.
    mix.observe(&cpu_only);
    mix.observe(&cpu_only);
    assert_eq!(mix.classes()[0].1, 600);
    let n = node(8000, 1000, &[500, 1000]);
    assert_eq!(node_fragmentation(&n, mix.classes()), 600 * 500);
}

#[test]
fn delta_prefers_filling_a_partly_used_device() {
    let mix = vec![(class(1000, 1, 1000), 1000), (class(1000, 1, 500), 500)];
    let req = ResourceRequest {
        cpu_milli: 1000,
        mem_mib: 10,
        gpu: GpuRequest::fraction(500),
        ..Default::default()
    };
    let mut scratch = Vec::new();
    let fresh = node(8000, 1000, &[1000, 1000]);
    let half = node(8000, 1000, &[500, 1000]);
    let d_fresh = fragmentation_delta(&fresh, &req, &mix, &mut scratch);
    let d_half = fragmentation_delta(&half, &req, &mix, &mut scratch);
    // Breaking a whole device makes a 500 fragment for whole-device tasks; filling the
    // half one removes one.
    assert_eq!(d_fresh, Some(1000 * 500));
    assert_eq!(d_half, Some(-1000 * 500));
    // Taking the CPU a GPU class needs strands the node's GPUs.
    let cpu_task = ResourceRequest {
        cpu_milli: 7500,
        ..Default::default()
    };
    assert_eq!(
        fragmentation_delta(&fresh, &cpu_task, &mix, &mut scratch),
        Some(1000 * 2000 + 500 * 2000)
    );
    assert_eq!(
        fragmentation_delta(&node(1000, 1000, &[]), &req, &mix, &mut scratch),
        None
    );
}

#[test]
fn cpu_tasks_go_to_cpu_only_nodes_first_then_where_they_hurt_least() {
    use crate::{IndexConfig, LeastFit, PlacementQuery};
    let nodes = [
        (NodeId(1), node(8000, 1000, &[1000, 1000])),
        (NodeId(2), node(2000, 1000, &[])),
        (NodeId(3), node(16000, 1000, &[1000, 1000])),
    ];
    let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), nodes.iter().cloned());
    let mut p = FragPlacer::default();
    for (id, free) in &nodes {
        p.note_node(*id, Some(free));
    }
    p.observe(&ResourceRequest {
        cpu_milli: 4000,
        mem_mib: 10,
        gpu: GpuRequest::whole(1),
        ..Default::default()
    });
    let small = ResourceRequest {
        cpu_milli: 2000,
        ..Default::default()
    };
    assert_eq!(
        p.place(&mut ix, &PlacementQuery::new(&small), &mut LeastFit),
        Some(NodeId(2))
    );
    ix.take(NodeId(2), &small);
    // No CPU-only node fits now: 6 cores on node 1 would leave 2 (less than the GPU class
    // needs, stranding both GPUs); on node 3 they leave 10.
    let six = ResourceRequest {
        cpu_milli: 6000,
        ..Default::default()
    };
    assert_eq!(
        p.place(&mut ix, &PlacementQuery::new(&six), &mut LeastFit),
        Some(NodeId(3))
    );
}

#[test]
fn the_only_node_of_a_rare_large_class_is_kept_for_it() {
    use crate::{IndexConfig, LeastFit, PlacementQuery};
    // Two 8-GPU nodes: 96 cores (like most) and 128 cores (the only one a 120-core 8-GPU
    // task fits). The mix: three 88-core 8-GPU arrivals, two 120-core ones.
    let nodes = [
        (NodeId(1), node(96_000, 1000, &[1000; 8])),
        (NodeId(2), node(128_000, 1000, &[1000; 8])),
    ];
    let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), nodes.iter().cloned());
    let mut p = FragPlacer::default();
    for (id, free) in &nodes {
        p.note_node(*id, Some(free));
    }
    let eight = |cpu| ResourceRequest {
        cpu_milli: cpu,
        mem_mib: 10,
        gpu: GpuRequest::whole(8),
        ..Default::default()
    };
    for cpu in [88_000, 120_000, 88_000, 120_000, 88_000] {
        p.observe(&eight(cpu));
    }
    // 16 cores for a CPU-only task (no CPU-only node): on node 1 they shut out the 88-core
    // class, on node 2 the 120-core one. The 88-core class weighs more, but both nodes can
    // hold it and only node 2 the 120-core one: its fragments count twice as much there, so
    // the task goes to node 1 (by weight alone it went to node 2, and the next 120-core
    // task fit nowhere).
    let cpu = ResourceRequest {
        cpu_milli: 16_000,
        ..Default::default()
    };
    assert_eq!(
        p.place(&mut ix, &PlacementQuery::new(&cpu), &mut LeastFit),
        Some(NodeId(1))
    );
    ix.take(NodeId(1), &cpu);
    p.note_node(NodeId(1), ix.free(NodeId(1)));
    assert_eq!(
        p.place(
            &mut ix,
            &PlacementQuery::new(&eight(120_000)),
            &mut LeastFit
        ),
        Some(NodeId(2))
    );
}

/// The reference `frag` choice for a GPU request: every fitting node in the index's ascending
/// order (`ordered_fits`), scored without a memo, the first with the least growth.
fn by_the_ordered_fits(
    p: &mut FragPlacer,
    ix: &mut PlacementIndex,
    q: &crate::PlacementQuery<'_>,
) -> Option<NodeId> {
    p.scale_mix();
    let mut best: Option<(i128, NodeId)> = None;
    for n in ix.ordered_fits(q, crate::Dir::Asc) {
        let free = ix.free(n).expect("a fitting node is indexed");
        let Some(d) = p.by_shape.delta(free, q.request, &mut Vec::new()) else {
            continue;
        };
        if best.is_none_or(|(b, _)| d < b) {
            best = Some((d, n));
        }
    }
    best.map(|(_, n)| n)
}

/// The memo kept across decisions changes no choice. A seeded random cluster and stream
/// (`workload::random`), placed in plans of a few tasks each: within a plan only the index
/// changes (as in the scheduler), between plans the placer learns the nodes and new
/// arrivals; every decision is compared with a placer whose memo starts empty.
#[test]
fn memo_across_decisions_changes_no_choice() {
    use crate::workload::{random, Event};
    use crate::{BestFit, IndexConfig, PlacementQuery};
    for seed in [1u64, 2, 3, 4] {
        println!("seed {seed}");
        let w = random(60, 1500, seed);
        let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), w.nodes.clone());
        let capacity: BTreeMap<NodeId, NodeResources> = w.nodes.iter().cloned().collect();
        let mut memo = FragPlacer::new(300);
        for (id, f) in &w.nodes {
            memo.note_node(*id, Some(f));
        }
        let mut placed = BTreeMap::new();
        let (mut decisions, mut hits) = (0u32, 0u32);
        let mut touched: Vec<NodeId> = Vec::new();
        for (step, e) in w.events.iter().enumerate() {
            // A plan ends every 7 events: the placer learns the touched nodes then.
            if step % 7 == 0 {
                for n in touched.drain(..) {
                    memo.note_node(n, ix.free(n));
                }
            }
            match *e {
                Event::Place {
                    task,
                    request,
                    candidates,
                } => {
                    let req = &w.requests[request as usize];
                    if step % 7 == 0 {
                        memo.observe(req);
                    }
                    let mut q = PlacementQuery::new(req);
                    if let Some(c) = candidates {
                        q = q.with_candidates(&w.candidate_sets[c as usize]);
                    }
                    let mut fresh = memo.clone();
                    fresh.states = StateTable::default();
                    fresh.memo_req = None;
                    let stamp = memo.memo_stamp;
                    let a = memo.place(&mut ix, &q, &mut BestFit);
                    let b = fresh.place(&mut ix, &q, &mut BestFit);
                    assert_eq!(a, b, "seed {seed}, step {step}");
                    if !req.gpu.is_none() {
                        let r = by_the_ordered_fits(&mut fresh, &mut ix, &q);
                        assert_eq!(a, r, "seed {seed}, step {step}: not the reference's node");
                    }
                    decisions += 1;
                    hits += u32::from(decisions > 0 && memo.memo_stamp == stamp);
                    if let Some(n) = a {
                        if let Some(alloc) = ix.take(n, req) {
                            placed.insert(task, (n, req.clone(), alloc));
                            touched.push(n);
                        }
                    }
                }
                Event::Release { task } => {
                    if let Some((n, req, alloc)) = placed.remove(&task) {
                        ix.give_back(n, &req, &alloc, &capacity[&n]);
                        touched.push(n);
                    }
                }
            }
        }
        println!("seed {seed}: {decisions} decisions, {hits} with the memo kept");
        assert!(hits > 0, "the memo was never kept across decisions");
    }
}

/// Models the random tests draw from.
const MODELS: [&str; 3] = ["G2", "T4", "A10"];

/// A random GPU shape (count, share, models) as the trace has them: shares, whole devices,
/// 2–8 devices; a quarter name a model.
fn random_gpu_shape(rng: &mut hetsched_common::rng::SplitMix64) -> (u32, u32, Vec<String>) {
    let (count, milli) = match rng.below(4) {
        0 => (1, [250, 500, 700][rng.below(3) as usize]),
        1 => (1, 1000),
        _ => ([2, 4, 8][rng.below(3) as usize], 1000),
    };
    let models = match rng.below(4) {
        0 => vec![MODELS[rng.below(3) as usize].to_string()],
        _ => vec![],
    };
    (count, milli, models)
}

/// A random mix of up to 40 classes (shapes shared, CPU and memory around nodes' sizes).
fn random_mix(rng: &mut hetsched_common::rng::SplitMix64) -> Vec<(DemandShape, u64)> {
    (0..rng.range(1, 40))
        .map(|_| {
            let (gpu_count, gpu_milli, models) = random_gpu_shape(rng);
            let c = DemandShape {
                cpu_milli: rng.range(0, 16) * 1000,
                mem_mib: rng.range(0, 8) * 1024,
                gpu_count,
                gpu_milli,
                models,
            };
            (c, rng.range(0, 1 << 40))
        })
        .collect()
}

/// Up to 8 random devices: mixed models, partly used.
fn random_devices(rng: &mut hetsched_common::rng::SplitMix64) -> Vec<GpuDevice> {
    (0..rng.below(9))
        .map(|_| GpuDevice {
            model: MODELS[rng.below(3) as usize].into(),
            free_milli: [0, 100, 300, 500, 1000][rng.below(5) as usize],
            emulated: true,
        })
        .collect()
}

/// The measure by GPU shape is `Σ weight · class_fragment` over the classes, exactly: on
/// seeded random nodes (mixed models, partly used devices, CPU and memory around the
/// classes' asks) and random mixes that share shapes and name models.
#[test]
fn measure_by_shape_equals_the_sum_over_classes() {
    use hetsched_common::rng::SplitMix64;
    for seed in 1..=40u64 {
        let mut rng = SplitMix64::new(seed);
        let mix = random_mix(&mut rng);
        let by_shape = MixByShape::new(&mix);
        for _ in 0..200 {
            let devices = random_devices(&mut rng);
            let free: Vec<u32> = devices.iter().map(|d| d.free_milli).collect();
            let (cpu, mem) = (rng.range(0, 16) * 1000, rng.range(0, 8) * 1024);
            let want: u128 = mix
                .iter()
                .map(|(c, w)| *w as u128 * class_fragment(cpu, mem, &devices, &free, c) as u128)
                .sum();
            assert_eq!(
                by_shape.fragmentation(cpu, mem, &devices, &free),
                want,
                "seed {seed}"
            );
        }
    }
}

/// The scaled mix the placer keeps in step (class rows with their scarcity counts, updated
/// per arrival and node change, rows of departed classes compacted away) is the one built
/// from scratch: every class of the window weighted by its demand and scaled by the GPU
/// nodes over those that could hold it, recounted over the nodes as they are now. A seeded
/// random cluster and stream with a small window (classes come and go, so rows are compacted).
#[test]
fn scaled_mix_kept_in_step_equals_one_built_from_scratch() {
    use crate::workload::{random, Event};
    use crate::{BestFit, IndexConfig, PlacementQuery};
    for seed in [5u64, 6, 7] {
        let w = random(40, 1200, seed);
        let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), w.nodes.clone());
        let capacity: BTreeMap<NodeId, NodeResources> = w.nodes.iter().cloned().collect();
        let mut p = FragPlacer::new(12);
        for (id, f) in &w.nodes {
            p.note_node(*id, Some(f));
        }
        let mut placed = BTreeMap::new();
        let (mut checks, mut compactions, mut rows) = (0u32, 0u32, 0usize);
        for (step, e) in w.events.iter().enumerate() {
            match *e {
                Event::Place { task, request, .. } => {
                    let req = &w.requests[request as usize];
                    p.observe(req);
                    if let Some(n) = p.place(&mut ix, &PlacementQuery::new(req), &mut BestFit) {
                        if let Some(alloc) = ix.take(n, req) {
                            placed.insert(task, (n, req.clone(), alloc));
                            p.note_node(n, ix.free(n));
                        }
                    }
                }
                Event::Release { task } => {
                    if let Some((n, req, alloc)) = placed.remove(&task) {
                        ix.give_back(n, &req, &alloc, &capacity[&n]);
                        p.note_node(n, ix.free(n));
                    }
                }
            }
            p.scale_mix();
            compactions += u32::from(p.rows.len() < rows);
            rows = p.rows.len();
            // From scratch: the window's classes, their holders recounted over the nodes with
            // GPUs as the index has them now.
            let gpu_nodes: Vec<&NodeResources> = capacity
                .keys()
                .filter_map(|n| ix.free(*n))
                .filter(|f| !f.gpus.is_empty())
                .collect();
            assert_eq!(
                gpu_nodes.len(),
                p.gpu_nodes.len(),
                "seed {seed}, step {step}"
            );
            let nodes = gpu_nodes.len().max(1) as u64;
            let scratch: Vec<(DemandShape, u64)> = p
                .mix
                .classes()
                .iter()
                .map(|(c, w)| {
                    let h = gpu_nodes.iter().filter(|f| holds(f, c)).count() as u64;
                    (
                        c.clone(),
                        w.saturating_mul(nodes).checked_div(h).unwrap_or(*w),
                    )
                })
                .collect();
            for r in p.rows.iter().filter(|r| r.count > 0) {
                let h = gpu_nodes.iter().filter(|f| holds(f, &r.class)).count() as u64;
                assert_eq!(r.holders, h, "seed {seed}, step {step}: {:?}", r.class);
            }
            let want = MixByShape::new(&scratch);
            for f in capacity.values().chain(gpu_nodes.iter().copied()) {
                let free: Vec<u32> = f.gpus.iter().map(|d| d.free_milli).collect();
                assert_eq!(
                    p.by_shape
                        .fragmentation(f.cpu_milli, f.mem_mib, &f.gpus, &free),
                    want.fragmentation(f.cpu_milli, f.mem_mib, &f.gpus, &free),
                    "seed {seed}, step {step}"
                );
                checks += 1;
            }
        }
        assert!(checks > 1000, "seed {seed}: only {checks} checks");
        assert!(compactions > 0, "seed {seed}: rows never compacted");
    }
}

/// The one-pass delta equals two whole evaluations of the mix and the normalisation walked
/// apart, exactly: seeded random mixes (shared shapes, named models, groups emptied by a
/// later mix), nodes (mixed models, partly used devices) and requests, fitting or not; and
/// so does the delta from what the groups saw of a device state kept while new shapes
/// joined the mix (the placer's `device_sees`).
#[test]
fn one_pass_delta_equals_the_reference() {
    use hetsched_common::rng::SplitMix64;
    for seed in 1..=40u64 {
        let mut rng = SplitMix64::new(seed);
        let mix = random_mix(&mut rng);
        let mut by_shape = MixByShape::default();
        // A device state seen while only the first classes' shapes had groups.
        let kept = random_devices(&mut rng);
        for (c, _) in mix.iter().take(mix.len() / 2) {
            by_shape.group_for(c);
        }
        let mut kept_sees = Vec::new();
        by_shape.see(&kept, &mut kept_sees);
        // Half the seeds: a mix set over a larger one, so emptied groups stay numbered.
        if seed % 2 == 0 {
            for (c, _) in &mix {
                by_shape.group_for(c);
            }
            by_shape.group_for(&class(0, 3, 1000));
        }
        by_shape.clear_weights();
        for (c, w) in &mix {
            let g = by_shape.group_for(c);
            by_shape.add_class(g, c.cpu_milli, c.mem_mib, *w);
        }
        let (mut scratch, mut fitted) = (Vec::new(), 0u32);
        for _ in 0..300 {
            let free = NodeResources {
                cpu_milli: rng.range(0, 16) * 1000,
                mem_mib: rng.range(0, 8) * 1024,
                gpus: random_devices(&mut rng),
                ..Default::default()
            };
            let (count, milli, models) = random_gpu_shape(&mut rng);
            let req = ResourceRequest {
                cpu_milli: rng.range(0, 8) * 1000,
                mem_mib: rng.range(0, 4) * 1024,
                gpu: GpuRequest {
                    count,
                    milli,
                    models,
                },
                ..Default::default()
            };
            let want = by_shape.delta_reference(&free, &req, &mut scratch);
            assert_eq!(
                by_shape.delta(&free, &req, &mut scratch),
                want,
                "seed {seed}"
            );
            fitted += u32::from(want.is_some());
            // The kept device state, with this node's CPU and memory.
            let on_kept = NodeResources {
                gpus: kept.clone(),
                ..free
            };
            by_shape.see(&kept, &mut kept_sees);
            let seen = by_shape.delta_seen(&on_kept, &req, &kept_sees, &mut scratch);
            assert_eq!(
                seen,
                by_shape.delta_reference(&on_kept, &req, &mut scratch),
                "seed {seed}, kept device state"
            );
            // The same through the changes the placer keeps per (state, request), weighed
            // under these weights.
            let mut changes = Vec::new();
            let fits =
                by_shape.changes_seen(&on_kept, &req, &kept_sees, &mut scratch, &mut changes);
            let after = (
                on_kept.cpu_milli.saturating_sub(req.cpu_milli),
                on_kept.mem_mib.saturating_sub(req.mem_mib),
            );
            let weighed = fits.then(|| {
                by_shape.delta_of(
                    changes.iter().copied(),
                    (on_kept.cpu_milli, on_kept.mem_mib),
                    after,
                )
            });
            assert_eq!(weighed, seen, "seed {seed}, kept changes weighed");
        }
        assert!(fitted > 0, "seed {seed}: no request fitted");
    }
}

/// What the placer's node-state cache rests on: every change of what a node has free gives it
/// a version it never had before, in the index or in a clone of it (a clone keeps the version
/// of the state it copied).
#[test]
fn a_node_takes_a_new_version_with_every_change_and_never_an_old_one() {
    use crate::IndexConfig;
    let id = NodeId(1);
    let capacity = node(8000, 1000, &[1000, 1000]);
    let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), vec![(id, capacity.clone())]);
    let version = |ix: &PlacementIndex| ix.free_versioned(id).map(|(_, v)| v);
    let mut seen = BTreeSet::new();
    assert!(seen.insert(version(&ix)));
    let req = ResourceRequest {
        cpu_milli: 1000,
        mem_mib: 10,
        gpu: GpuRequest::fraction(500),
        ..Default::default()
    };
    let alloc = ix.take(id, &req).expect("it fits");
    assert!(seen.insert(version(&ix)), "take");
    let mut clone = ix.clone();
    assert_eq!(
        version(&clone),
        version(&ix),
        "a clone keeps the version of its copy"
    );
    assert!(clone.give_back(id, &req, &alloc, &capacity));
    assert!(ix.take(id, &req).is_some());
    assert!(seen.insert(version(&clone)), "give_back on the clone");
    assert!(seen.insert(version(&ix)), "take on the original");
    ix.upsert_node(id, &capacity);
    assert!(seen.insert(version(&ix)), "upsert");
    assert!(ix.remove_node(id));
    assert_eq!(version(&ix), None);
    ix.upsert_node(id, &capacity);
    assert!(seen.insert(version(&ix)), "removed and added again");
}

fn device(model: &str, free_milli: u32) -> GpuDevice {
    GpuDevice {
        model: model.into(),
        free_milli,
        emulated: false,
    }
}

fn pinned(mut c: DemandShape, model: &str) -> DemandShape {
    c.models = vec![model.into()];
    c
}

/// The rule of the per-model measure: a class that names a model counts as its own (as
/// fragments, as capacity it could use, as a node that could hold it) only devices of that
/// model, whatever the other models on the node or in the cluster have free.
#[test]
fn a_pinned_class_never_counts_capacity_on_other_models_as_its_own() {
    let v100 = pinned(class(1000, 1, 1000), "V100");
    let v100_pair = pinned(class(1000, 2, 1000), "V100");
    let mixed = |t4: [u32; 2]| NodeResources {
        cpu_milli: 8000,
        mem_mib: 1000,
        gpus: vec![
            device("V100", 500),
            device("V100", 1000),
            device("T4", t4[0]),
            device("T4", t4[1]),
        ],
        ..Default::default()
    };
    for t4 in [[0, 0], [1000, 1000], [300, 1000]] {
        let n = mixed(t4);
        // Its fragments: the half V100 only (the whole V100 it can use); T4s never.
        assert_eq!(frag(&n, &v100), 500, "T4 free {t4:?}");
        // Two whole V100s: it cannot run here, so all the V100 capacity is a fragment, and
        // two free T4s do not make it runnable.
        assert_eq!(frag(&n, &v100_pair), 1500, "T4 free {t4:?}");
        // The node's expected fragmentation under a V100-only mix ignores the T4s.
        let mix = vec![(v100.clone(), 1000), (v100_pair.clone(), 2000)];
        assert_eq!(
            node_fragmentation(&n, &mix),
            node_fragmentation(&mixed([0, 0]), &mix)
        );
    }
    // A T4 task on a T4-only node changes nothing of a mix pinned to V100s.
    let t4_node = NodeResources {
        cpu_milli: 8000,
        mem_mib: 1000,
        gpus: vec![device("T4", 1000), device("T4", 1000)],
        ..Default::default()
    };
    let t4_task = ResourceRequest {
        cpu_milli: 1000,
        mem_mib: 10,
        gpu: GpuRequest::whole(1),
        ..Default::default()
    };
    let mix = vec![(v100.clone(), 1000)];
    assert_eq!(
        fragmentation_delta(&t4_node, &t4_task, &mix, &mut Vec::new()),
        Some(0)
    );
    // Scarcity: only nodes with a free V100 hold the pinned class, however many T4s the
    // others have.
    assert!(holds(&mixed([1000, 1000]), &v100));
    assert!(!holds(&t4_node, &v100));
    assert!(holds(&t4_node, &class(1000, 1, 1000)));
}

/// `auto`'s switch: the share of the window's GPU arrivals that name a model, CPU-only
/// arrivals left out, arrivals that left the window forgotten.
#[test]
fn auto_goes_by_best_fit_once_enough_recent_gpu_arrivals_name_a_model() {
    let gpu = |models: &[&str]| ResourceRequest {
        cpu_milli: 1000,
        mem_mib: 10,
        gpu: GpuRequest {
            count: 1,
            milli: 1000,
            models: models.iter().map(|m| m.to_string()).collect(),
        },
        ..Default::default()
    };
    let cpu = ResourceRequest {
        cpu_milli: 1000,
        ..Default::default()
    };
    let mut p = FragPlacer::new(20);
    assert_eq!(p.pinned_permille(), 0);
    assert!(!p.auto_picks_best_fit(), "no arrival: frag");
    for _ in 0..9 {
        p.observe(&gpu(&[]));
        p.observe(&cpu);
    }
    p.observe(&gpu(&["V100"]));
    // 1 of 10 GPU arrivals (the CPU-only ones do not count).
    assert_eq!(p.pinned_permille(), 100);
    assert_eq!(p.auto_picks_best_fit(), 100 >= AUTO_BEST_FIT_FROM_PERMILLE);
    for _ in 0..2 {
        p.observe(&gpu(&["V100", "A100"]));
    }
    // The window holds 20 arrivals: the first (unpinned) left, so 3 of 11 GPU arrivals.
    assert_eq!(p.pinned_permille(), 272);
    assert!(p.auto_picks_best_fit());
    for _ in 0..20 {
        p.observe(&gpu(&[]));
    }
    assert_eq!(
        p.pinned_permille(),
        0,
        "the pinned arrivals left the window"
    );
    assert!(!p.auto_picks_best_fit());
    p.clear();
    assert_eq!(p.pinned_permille(), 0);
}
