//! Tests of the index: the worked example of the source document, unit cases for each
//! constraint, and seeded property tests against the linear scan.

use super::node::minus;
use super::*;
use hetsched_common::{EngineKind, GpuDevice, GpuRequest};
use proptest::prelude::*;

fn res(cpu: u64, mem: u64) -> NodeResources {
    NodeResources {
        cpu_milli: cpu,
        mem_mib: mem,
        ..NodeResources::default()
    }
}

fn ask(cpu: u64, mem: u64) -> ResourceRequest {
    ResourceRequest {
        cpu_milli: cpu,
        mem_mib: mem,
        ..ResourceRequest::default()
    }
}

fn gpus(model: &str, free: &[u32]) -> Vec<GpuDevice> {
    free.iter()
        .map(|f| GpuDevice {
            model: model.into(),
            free_milli: *f,
            emulated: true,
        })
        .collect()
}

/// The nodes of the source document's figure 3 (vcores, GiB), ids 1.. in letter order.
fn worked_nodes() -> Vec<(NodeId, NodeResources)> {
    let spec = [
        ('a', 4, 4),
        ('b', 4, 2),
        ('c', 3, 5),
        ('d', 3, 5),
        ('e', 6, 1),
        ('f', 4, 1),
        ('g', 3, 3),
        ('h', 6, 3),
        ('p', 6, 4),
        ('q', 1, 3),
        ('u', 5, 5),
        ('v', 5, 2),
    ];
    spec.iter()
        .enumerate()
        .map(|(i, (_, v, g))| (NodeId(i as u64 + 1), res(*v, *g)))
        .collect()
}

fn letter(id: NodeId) -> char {
    b"abcdefghpquv"[id.0 as usize - 1] as char
}

fn letters(ids: &[NodeId]) -> String {
    ids.iter().map(|i| letter(*i)).collect()
}

fn worked(theta: [u64; 4], scan_max: usize) -> (PlacementIndex, LinearScan) {
    let g = Granularity::new(theta).unwrap();
    let cfg = IndexConfig {
        theta: g,
        locality_scan_max: scan_max,
    };
    let ix = PlacementIndex::with_nodes(cfg, worked_nodes());
    let mut sc = LinearScan::new(g);
    for (id, r) in worked_nodes() {
        sc.upsert_node(id, &r);
    }
    (ix, sc)
}

#[test]
fn worked_example_least_fit_and_best_fit() {
    let t = ask(1, 2);
    // b, c, e, f
    let cands: Candidates = [2, 3, 5, 6].map(NodeId).into_iter().collect();
    let q = PlacementQuery::new(&t).with_candidates(&cands);
    // Both the tree walk (scan_max 0) and the direct candidate path.
    for scan_max in [0, 32] {
        let (mut ix, mut sc) = worked([1, 1, 1, 1], scan_max);
        assert_eq!(letters(&ix.ordered_fits(&q, Dir::Desc)), "bc");
        assert_eq!(letters(&ix.ordered_fits(&q, Dir::Asc)), "cb");
        assert_eq!(letters(&sc.ordered_fits(&q, Dir::Desc)), "bc");
        assert_eq!(letters(&sc.ordered_fits(&q, Dir::Asc)), "cb");
        assert_eq!(ix.place(&q, &mut LeastFit), Some(NodeId(2)));
        assert_eq!(ix.place(&q, &mut BestFit), Some(NodeId(3)));
    }
}

#[test]
fn worked_example_coarse_granularity_trades_best_for_speed() {
    let t = ask(1, 2);
    let cands: Candidates = [2, 3, 5, 6].map(NodeId).into_iter().collect();
    let q = PlacementQuery::new(&t).with_candidates(&cands);
    for scan_max in [0, 32] {
        let (mut ix, mut sc) = worked([2, 3, 1, 1], scan_max);
        // θ = (2, 3): b → (2, 1), c → (2, 2), e → (3, 1), f → (2, 1). LeastFit meets e first
        // (rejected at the leaf: 1 GiB < 2), then c, then b: c before the better b.
        let order = ix.ordered_fits(&q, Dir::Desc);
        assert_eq!(letters(&order), "cb");
        assert_eq!(ix.place(&q, &mut LeastFit), Some(NodeId(3)));
        assert_eq!(sc.ordered_fits(&q, Dir::Desc), order);
        // Never a node that does not fit: e and f are in the fit region but do not fit.
        for n in order {
            assert!(ix.free(n).unwrap().fits(&t));
        }
    }
    // Without the locality constraint, every fitting node and only those.
    let (mut ix, _) = worked([2, 3, 1, 1], 32);
    let all = ix.ordered_fits(&PlacementQuery::new(&t), Dir::Desc);
    assert_eq!(all.len(), 10); // all but e(6,1) and f(4,1)
    for n in &all {
        assert!(ix.free(*n).unwrap().fits(&t), "{} does not fit", letter(*n));
    }
}

#[test]
fn worked_example_whole_space_orders() {
    let (mut ix, _) = worked([1, 1, 1, 1], 32);
    let t = ask(1, 2);
    let q = PlacementQuery::new(&t);
    // Fitting: everything with ≥ 2 GiB: a b c d g h p q u v (not e, f).
    assert_eq!(letters(&ix.ordered_fits(&q, Dir::Desc)), "phuvabcdgq");
    assert_eq!(letters(&ix.ordered_fits(&q, Dir::Asc)), "qgcdbavuhp");
    // Memory first: (5: c d u) (4: a p) (3: g h q) (2: b v).
    let mem_first = q.with_order(DimOrder::preferring(&[Dim::Mem]).unwrap());
    assert_eq!(
        letters(&ix.ordered_fits(&mem_first, Dir::Desc)),
        "ucdpahgqvb"
    );
}

#[test]
fn placing_and_committing_moves_nodes() {
    let (mut ix, _) = worked([1, 1, 1, 1], 32);
    let t = ask(1, 2);
    let q = PlacementQuery::new(&t);
    // p(6,4) → p(5,2); next LeastFit is h(6,3).
    assert_eq!(ix.place(&q, &mut LeastFit), Some(NodeId(9)));
    assert!(ix.take(NodeId(9), &t).is_some());
    assert_eq!(ix.place(&q, &mut LeastFit), Some(NodeId(8)));
    assert_eq!(ix.free(NodeId(9)), Some(&res(5, 2)));
}

#[test]
fn next_fit_resumes_after_its_cursor_and_wraps() {
    let (mut ix, _) = worked([1, 1, 1, 1], 32);
    let t = ask(1, 2);
    let q = PlacementQuery::new(&t);
    let mut nf = NextFit::default();
    let picks: Vec<NodeId> = (0..12).map(|_| ix.place(&q, &mut nf).unwrap()).collect();
    // Ascending order is q g c d b a v u h p, then it wraps.
    assert_eq!(letters(&picks), "qgcdbavuhpqg");
}

#[test]
fn random_is_seeded_and_only_returns_fits() {
    let (mut ix, _) = worked([1, 1, 1, 1], 32);
    let t = ask(5, 3);
    let q = PlacementQuery::new(&t);
    let run = |ix: &mut PlacementIndex| -> Vec<NodeId> {
        let mut r = Random::new(7);
        (0..50).map(|_| ix.place(&q, &mut r).unwrap()).collect()
    };
    let a = run(&mut ix);
    assert_eq!(a, run(&mut ix));
    // Fitting: h(6,3) p(6,4) u(5,5); all three are drawn.
    for n in &a {
        assert!(ix.free(*n).unwrap().fits(&t));
    }
    for want in [8, 9, 11] {
        assert!(a.contains(&NodeId(want)));
    }
    assert_eq!(
        ix.place(&PlacementQuery::new(&ask(7, 1)), &mut Random::new(1)),
        None
    );
}

#[test]
fn reservation_owner_sees_node_whole_others_see_it_minus() {
    let (mut ix, mut sc) = worked([1, 1, 1, 1], 32);
    let owner = TaskId(42);
    // Hold (4, 3) of p(6,4): others see p as (2,1).
    for r in [
        ix.reserve(NodeId(9), owner, &ask(4, 3)),
        sc.reserve(NodeId(9), owner, &ask(4, 3)),
    ] {
        r.unwrap();
    }
    let t = ask(5, 4);
    let other = PlacementQuery::new(&t);
    let mine = PlacementQuery::new(&t).for_task(owner);
    // Fitting (5, 4): p(6,4) and u(5,5); only u for others.
    assert_eq!(ix.place(&other, &mut LeastFit), Some(NodeId(11)));
    assert_eq!(ix.place(&mine, &mut LeastFit), Some(NodeId(9)));
    assert_eq!(sc.place(&mine, &mut LeastFit), Some(NodeId(9)));
    assert_eq!(ix.place(&mine, &mut BestFit), Some(NodeId(11)));
    assert_eq!(
        ix.reserve(NodeId(9), TaskId(1), &ask(1, 1)),
        Err(IndexError::AlreadyReserved {
            node: NodeId(9),
            holder: owner
        })
    );
    assert_eq!(ix.unreserve(NodeId(9)), Some(owner));
    assert_eq!(ix.place(&other, &mut LeastFit), Some(NodeId(9)));
    assert_eq!(
        ix.reserve(NodeId(99), owner, &ask(1, 1)),
        Err(IndexError::UnknownNode(NodeId(99)))
    );
}

#[test]
fn gpu_models_and_shares_are_exact() {
    let mut ix = PlacementIndex::default();
    let node = |cpu, model: &str, free: &[u32]| NodeResources {
        cpu_milli: cpu,
        mem_mib: 1000,
        gpus: gpus(model, free),
        ..NodeResources::default()
    };
    ix.upsert_node(NodeId(1), &node(8000, "T4", &[1000, 1000]));
    ix.upsert_node(NodeId(2), &node(4000, "V100M32", &[1000, 300]));
    ix.upsert_node(NodeId(3), &node(6000, "V100M16", &[250, 250, 250, 250]));
    ix.upsert_node(NodeId(4), &node(9000, "", &[]));
    let mut q_req = ask(1000, 100);
    q_req.gpu = GpuRequest::fraction(500);
    // 4 × 250 free is 1000 in total but no device has 500: node 3 is out.
    let q = PlacementQuery::new(&q_req);
    assert_eq!(ix.ordered_fits(&q, Dir::Desc), vec![NodeId(1), NodeId(2)]);
    q_req.gpu = GpuRequest::fraction(250);
    let q = PlacementQuery::new(&q_req);
    assert_eq!(
        ix.ordered_fits(&q, Dir::Desc),
        vec![NodeId(1), NodeId(3), NodeId(2)]
    );
    q_req.gpu.models = vec!["V100M16".into(), "V100M32".into()];
    let q = PlacementQuery::new(&q_req);
    assert_eq!(ix.ordered_fits(&q, Dir::Desc), vec![NodeId(3), NodeId(2)]);
    q_req.gpu = GpuRequest::whole(2);
    let q = PlacementQuery::new(&q_req);
    assert_eq!(ix.ordered_fits(&q, Dir::Desc), vec![NodeId(1)]);
    // Taking one whole T4 leaves node 1 with one whole device.
    let one = ResourceRequest {
        gpu: GpuRequest::whole(1),
        ..ask(0, 0)
    };
    assert_eq!(ix.take(NodeId(1), &one), Some(vec![(0, 1000)]));
    assert_eq!(ix.ordered_fits(&q, Dir::Desc), vec![]);
}

#[test]
fn engine_kinds_are_categorical() {
    let mut ix = PlacementIndex::default();
    let mut npu = res(2000, 100);
    npu.engines.insert(EngineKind::Npu, 2);
    ix.upsert_node(NodeId(1), &res(8000, 100));
    ix.upsert_node(NodeId(2), &npu);
    let mut r = ask(1000, 10);
    r.engines.insert(EngineKind::Npu, 1);
    assert_eq!(
        ix.place(&PlacementQuery::new(&r), &mut LeastFit),
        Some(NodeId(2))
    );
    r.engines.insert(EngineKind::Npu, 3);
    assert_eq!(ix.place(&PlacementQuery::new(&r), &mut LeastFit), None);
    assert_eq!(
        ix.place(&PlacementQuery::new(&ask(1000, 10)), &mut LeastFit),
        Some(NodeId(1))
    );
}

#[test]
fn removing_every_node_leaves_only_the_root() {
    let (mut ix, _) = worked([1, 1, 1, 1], 32);
    ix.add_order(DimOrder::preferring(&[Dim::Mem]).unwrap());
    assert!(ix.bucket_count() > 12);
    for (id, _) in worked_nodes() {
        assert!(ix.remove_node(id));
    }
    assert!(!ix.remove_node(NodeId(1)));
    assert_eq!(ix.bucket_count(), 1);
    assert!(ix.is_empty());
    assert_eq!(
        ix.place(&PlacementQuery::new(&ask(0, 0)), &mut LeastFit),
        None
    );
    ix.rebuild(worked_nodes());
    assert_eq!(ix.len(), 12);
}

#[test]
fn policy_names_parse() {
    for k in PolicyKind::ALL {
        assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
    }
    assert!("worst-fit".parse::<PolicyKind>().is_err());
}

// ---------------------------------------------------------------------------------------
// Property tests: random clusters and streams of placements, releases, node changes and
// reservations; the index must answer exactly as the scan does. Each case is driven by one
// seed, printed in every assertion so a failure replays with `sim(seed, ...)`.

const MODELS: [&str; 3] = ["A10", "T4", "V100M32"];

fn random_free(rng: &mut SplitMix64) -> NodeResources {
    let mut r = res(rng.below(9) * 500, rng.below(9) * 256);
    if rng.below(2) == 0 {
        let model = MODELS[rng.below(3) as usize];
        let n = rng.range(1, 3);
        for _ in 0..n {
            r.gpus.push(GpuDevice {
                // Mixed models on one node now and then.
                model: if rng.below(6) == 0 {
                    MODELS[rng.below(3) as usize].into()
                } else {
                    model.into()
                },
                free_milli: [0, 250, 500, 750, 1000][rng.below(5) as usize],
                emulated: true,
            });
        }
    }
    if rng.below(5) == 0 {
        r.engines.insert(EngineKind::Npu, rng.below(3) as u32);
    }
    r
}

fn random_request(rng: &mut SplitMix64) -> ResourceRequest {
    let mut r = ask(rng.below(5) * 500, rng.below(5) * 256);
    r.gpu = match rng.below(4) {
        0 => GpuRequest::whole(rng.range(1, 2) as u32),
        1 => GpuRequest::fraction([250, 500, 750][rng.below(3) as usize]),
        _ => GpuRequest::none(),
    };
    if !r.gpu.is_none() && rng.below(3) == 0 {
        r.gpu.models = MODELS
            .iter()
            .filter(|_| rng.below(2) == 0)
            .map(|m| m.to_string())
            .collect();
    }
    if rng.below(8) == 0 {
        r.engines.insert(EngineKind::Npu, rng.range(1, 2) as u32);
    }
    r
}

fn random_order(rng: &mut SplitMix64) -> DimOrder {
    let mut dims = Dim::ALL;
    for i in (1..DIMS).rev() {
        dims.swap(i, rng.below(i as u64 + 1) as usize);
    }
    if rng.below(2) == 0 {
        DimOrder::CANONICAL
    } else {
        DimOrder::new(dims).unwrap()
    }
}

/// Whether `node` really fits `req` for `task` (independent of both implementations'
/// search code: the reservation view computed here).
fn really_fits(sc: &LinearScan, ix: &PlacementIndex, node: NodeId, q: &PlacementQuery) -> bool {
    let free = sc.free(node).unwrap();
    let view = match ix.reservation(node) {
        Some(r) if Some(r.task) != q.task => minus(free, &r.amount),
        _ => free.clone(),
    };
    q.candidates.is_none_or(|c| c.contains(node)) && view.fits(q.request)
}

fn sim(seed: u64, theta: [u64; 4], scan_max: usize, steps: usize) {
    let mut rng = SplitMix64::new(seed);
    let g = Granularity::new(theta).unwrap();
    let mut ix = PlacementIndex::new(IndexConfig {
        theta: g,
        locality_scan_max: scan_max,
    });
    let mut sc = LinearScan::new(g);
    let mut capacity: BTreeMap<NodeId, NodeResources> = BTreeMap::new();
    let n0 = rng.range(1, 24);
    for i in 1..=n0 {
        let f = random_free(&mut rng);
        ix.upsert_node(NodeId(i), &f);
        sc.upsert_node(NodeId(i), &f);
        capacity.insert(NodeId(i), f);
    }
    let kinds = [
        PolicyKind::LeastFit,
        PolicyKind::BestFit,
        PolicyKind::FirstFit,
        PolicyKind::NextFit,
    ];
    let mut ix_pol: Vec<AnyPolicy> = kinds.iter().map(|k| k.build(seed)).collect();
    let mut sc_pol: Vec<AnyPolicy> = kinds.iter().map(|k| k.build(seed)).collect();
    let mut random = Random::new(seed);
    let mut running: Vec<(NodeId, ResourceRequest, GpuAlloc)> = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} theta {theta:?} scan_max {scan_max} step {step}");
        match rng.below(10) {
            0..=5 => {
                let req = random_request(&mut rng);
                let order = random_order(&mut rng);
                let cands: Option<Candidates> = (rng.below(4) == 0).then(|| {
                    (0..rng.range(0, 8))
                        .map(|_| NodeId(rng.range(1, 30)))
                        .collect()
                });
                let task = (rng.below(3) == 0).then(|| TaskId(rng.range(1, 3)));
                let mut q = PlacementQuery::new(&req).with_order(order);
                if let Some(c) = &cands {
                    q = q.with_candidates(c);
                }
                if let Some(t) = task {
                    q = q.for_task(t);
                }
                for dir in [Dir::Asc, Dir::Desc] {
                    let a = ix.ordered_fits(&q, dir);
                    assert_eq!(a, sc.ordered_fits(&q, dir), "{ctx} ordered {dir:?} {q:?}");
                    for n in &a {
                        assert!(really_fits(&sc, &ix, *n, &q), "{ctx}: {n} does not fit");
                    }
                    // The one-walk form: the same places, in no order.
                    let mut all = Vec::new();
                    ix.fit_positions_into(&q, &mut all);
                    all.sort_by(|x, y| x.cmp_in(y, dir));
                    let nodes: Vec<NodeId> = all.iter().map(|p| p.node).collect();
                    assert_eq!(nodes, a, "{ctx} fit_positions_into {dir:?} {q:?}");
                }
                let mut chosen = None;
                for (k, (pi, ps)) in ix_pol.iter_mut().zip(sc_pol.iter_mut()).enumerate() {
                    let a = ix.place(&q, pi);
                    assert_eq!(a, sc.place(&q, ps), "{ctx} policy {:?} {q:?}", kinds[k]);
                    if let Some(n) = a {
                        assert!(really_fits(&sc, &ix, n, &q), "{ctx}: {n} does not fit");
                    }
                    chosen = chosen.or(a);
                }
                if let Some(n) = ix.place(&q, &mut random) {
                    assert!(
                        really_fits(&sc, &ix, n, &q),
                        "{ctx}: random {n} does not fit"
                    );
                }
                if let Some(n) = chosen {
                    let a = ix.take(n, &req);
                    assert_eq!(a, sc.take(n, &req), "{ctx} take");
                    if let Some(alloc) = a {
                        running.push((n, req.clone(), alloc));
                    }
                }
            }
            6 if !running.is_empty() => {
                let (n, req, alloc) = running.swap_remove(rng.below(running.len() as u64) as usize);
                if let Some(cap) = capacity.get(&n) {
                    assert_eq!(
                        ix.give_back(n, &req, &alloc, cap),
                        sc.give_back(n, &req, &alloc, cap),
                        "{ctx} give back"
                    );
                }
            }
            7 => {
                let id = NodeId(rng.range(1, 30));
                let f = random_free(&mut rng);
                ix.upsert_node(id, &f);
                sc.upsert_node(id, &f);
                capacity.insert(id, f);
            }
            8 => {
                let id = NodeId(rng.range(1, 30));
                assert_eq!(ix.remove_node(id), sc.remove_node(id), "{ctx} remove");
                capacity.remove(&id);
                running.retain(|(n, _, _)| *n != id);
            }
            _ => {
                let id = NodeId(rng.range(1, 30));
                if rng.below(3) == 0 {
                    assert_eq!(ix.unreserve(id), sc.unreserve(id), "{ctx} unreserve");
                } else {
                    let task = TaskId(rng.range(1, 3));
                    let amount = random_request(&mut rng);
                    assert_eq!(
                        ix.reserve(id, task, &amount),
                        sc.reserve(id, task, &amount),
                        "{ctx} reserve"
                    );
                }
            }
        }
        assert_eq!(ix.len(), sc.len(), "{ctx} len");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// θ = 1: the index returns exactly the scan's node, for every policy but Random, with
    /// locality (both the tree walk and the direct candidate path), categorical constraints,
    /// dimension orders and reservations.
    #[test]
    fn exact_index_matches_scan(seed in any::<u64>()) {
        sim(seed, [1, 1, 1, 1], 0, 150);
        sim(seed, [1, 1, 1, 1], 32, 60);
    }

    /// θ > 1: never an over-commit, and still the scan's answer at the same θ.
    #[test]
    fn coarse_index_never_overcommits(seed in any::<u64>()) {
        sim(seed, [1000, 512, 2, 250], 0, 150);
    }
}

/// The benchmark's stream at small scale: every policy but Random chooses as the scan does
/// (bigger leaves, locality sets and model constraints than the property tests make).
#[test]
fn benchmark_workload_agrees_with_scan() {
    let w = workload::random(150, 2500, 11);
    for kind in PolicyKind::ALL {
        let mut ix = PlacementIndex::with_nodes(IndexConfig::default(), w.nodes.iter().cloned());
        let mut sc = LinearScan::new(Granularity::EXACT);
        for (id, r) in &w.nodes {
            sc.upsert_node(*id, r);
        }
        let (mut pi, mut ps) = (kind.build(5), kind.build(5));
        let mut running: BTreeMap<u32, (NodeId, u32, GpuAlloc)> = BTreeMap::new();
        for (step, ev) in w.events.iter().enumerate() {
            match *ev {
                workload::Event::Place {
                    task,
                    request,
                    candidates,
                } => {
                    let req = &w.requests[request as usize];
                    let mut q = PlacementQuery::new(req);
                    if let Some(c) = candidates {
                        q = q.with_candidates(&w.candidate_sets[c as usize]);
                    }
                    let a = ix.place(&q, &mut pi);
                    let b = sc.place(&q, &mut ps);
                    if kind != PolicyKind::Random {
                        assert_eq!(a, b, "{kind} step {step}");
                    }
                    // Follow the index's choice on both sides so that Random stays comparable.
                    if let Some(n) = a {
                        let alloc = ix.take(n, req).expect("chosen node fits");
                        assert_eq!(sc.take(n, req).as_ref(), Some(&alloc));
                        running.insert(task, (n, request, alloc));
                    }
                }
                workload::Event::Release { task } => {
                    if let Some((n, r, alloc)) = running.remove(&task) {
                        let cap = &w.nodes[n.0 as usize - 1].1;
                        let req = &w.requests[r as usize];
                        ix.give_back(n, req, &alloc, cap);
                        sc.give_back(n, req, &alloc, cap);
                    }
                }
            }
        }
    }
}

/// Past 63 classes the bucket masks share their last bit; answers stay exact.
#[test]
fn many_classes_stay_exact() {
    let mut ix = PlacementIndex::default();
    for i in 0..80u64 {
        let r = NodeResources {
            gpus: gpus(&format!("M{i}"), &[1000]),
            ..res(1000 + i, 100)
        };
        ix.upsert_node(NodeId(i + 1), &r);
    }
    for want in [3u64, 63, 64, 79] {
        let mut r = ask(1, 1);
        r.gpu = GpuRequest::whole(1);
        r.gpu.models = vec![format!("M{want}")];
        let q = PlacementQuery::new(&r);
        assert_eq!(ix.ordered_fits(&q, Dir::Desc), vec![NodeId(want + 1)]);
    }
}

/// Hundreds of nodes on few coordinates, of interleaved classes: runs of one coordinate span
/// several chunks of a bucket (`tree.rs`), and searches that resume inside such a run, skip
/// ineligible classes in it, or walk it from either end still answer as the scan does.
#[test]
fn long_runs_across_chunks_stay_exact() {
    let models = ["A", "B", "C"];
    let node = |i: u64| NodeResources {
        gpus: gpus(models[(i % 7 % 3) as usize], &[1000, 1000]),
        ..res(8000 + (i % 2) * 1000, 1024 * (1 + i % 3))
    };
    let mut ix = PlacementIndex::default();
    let mut sc = LinearScan::new(Granularity::EXACT);
    for i in 1..=400u64 {
        ix.upsert_node(NodeId(i), &node(i));
        sc.upsert_node(NodeId(i), &node(i));
    }
    let mut rng = SplitMix64::new(7);
    let mut next_ix = NextFit::default();
    let mut next_sc = NextFit::default();
    for step in 0..600 {
        let mut r = ask(250 * rng.range(1, 8), 256 * rng.range(1, 8));
        if rng.below(2) == 0 {
            r.gpu = GpuRequest::whole(rng.range(1, 2) as u32);
            if rng.below(2) == 0 {
                r.gpu.models = vec![models[rng.below(3) as usize].to_string()];
            }
        }
        let q = PlacementQuery::new(&r);
        if step % 50 == 0 {
            for dir in [Dir::Asc, Dir::Desc] {
                assert_eq!(ix.ordered_fits(&q, dir), sc.ordered_fits(&q, dir), "{step}");
            }
        }
        let chosen = match step % 3 {
            0 => {
                let a = ix.place(&q, &mut next_ix);
                assert_eq!(a, sc.place(&q, &mut next_sc), "next-fit {step}");
                a
            }
            1 => {
                let a = ix.place(&q, &mut LeastFit);
                assert_eq!(a, sc.place(&q, &mut LeastFit), "least-fit {step}");
                a
            }
            _ => {
                let a = ix.place(&q, &mut BestFit);
                assert_eq!(a, sc.place(&q, &mut BestFit), "best-fit {step}");
                a
            }
        };
        match chosen {
            // Every fourth placement is given back at once: nodes return to their run.
            Some(n) if step % 4 == 0 => {
                let a = ix.take(n, &r).unwrap();
                assert_eq!(sc.take(n, &r).as_ref(), Some(&a));
                let cap = node(n.0);
                ix.give_back(n, &r, &a, &cap);
                sc.give_back(n, &r, &a, &cap);
            }
            Some(n) => {
                let a = ix.take(n, &r).unwrap();
                assert_eq!(sc.take(n, &r).as_ref(), Some(&a));
            }
            None => {}
        }
        assert_eq!(ix.free(NodeId(1)), sc.free(NodeId(1)));
    }
}
