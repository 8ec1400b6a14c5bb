//! Tests of the S2 planner: each step on hand-made cases whose arithmetic is written out,
//! the validator's rejections, both input formats, and properties on random instances.

use super::pack::Packer;
use super::trim::{threshold, trim, trim_step, Step};
use super::uniform::uniform_lpt_with;
use super::work::{place_blocks, JobWork, Slot, Timeline};
use super::*;
use super::{improve, second};
use proptest::prelude::*;

/// Float equality to 1e-9, relative.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn block(size: f64, replicas: &[usize]) -> Block {
    Block {
        size,
        replicas: replicas.to_vec(),
    }
}

fn job(speed: f64, blocks: Vec<Block>) -> BatchJob {
    BatchJob { speed, blocks }
}

fn read(block: usize, replica: usize) -> BlockRead {
    BlockRead { block, replica }
}

fn core(host: usize, core: usize, blocks: Vec<BlockRead>) -> CoreWork {
    CoreWork {
        core: CoreRef { host, core },
        blocks,
    }
}

/// Two hosts of one core each, s_t = 50 MB/s, α = 0.1.
/// Job 0: speed 20, block 0 = 100 MB on host 0, block 1 = 50 MB on host 1.
/// Job 1: speed 10, block 0 = 30 MB on host 0.
fn two_hosts() -> Instance {
    Instance::new(
        vec![1, 1],
        50.0,
        0.1,
        vec![
            job(20.0, vec![block(100.0, &[0]), block(50.0, &[1])]),
            job(10.0, vec![block(30.0, &[0])]),
        ],
    )
    .expect("valid")
}

/// Job 0 on both cores (local reads), job 1 after it on host 1's core (remote read).
fn two_hosts_schedule(job1_start: f64) -> Schedule {
    Schedule {
        jobs: vec![
            JobPlan {
                start: 0.0,
                cores: vec![core(0, 0, vec![read(0, 0)]), core(1, 0, vec![read(1, 1)])],
            },
            JobPlan {
                start: job1_start,
                cores: vec![core(1, 0, vec![read(0, 0)])],
            },
        ],
    }
}

// ---------------------------------------------------------------- model and validator

#[test]
fn hand_made_makespan_with_transfer_and_holding() {
    let inst = two_hosts();
    // Job 0 on e = 2 cores: g(2) = 1 − 0.1·1 = 0.9, so each core runs at 20·0.9 = 18 MB/s.
    //   core (0,0): block 0, local:  100 / 18          = 5.5556 s
    //   core (1,0): block 1, local:   50 / 18          = 2.7778 s
    //   job 0 holds both cores until its longest core ends: finish = 100/18.
    // Job 1 on e = 1 core (g = 1) on host 1, reading block 0 from host 0:
    //   transfer 30 / 50 = 0.6 s, execution 30 / 10 = 3 s, so 3.6 s,
    //   starting when job 0 frees core (1,0) at 100/18: finish = 100/18 + 3.6.
    let start1 = 100.0 / 18.0;
    let eval = validate(&inst, &two_hosts_schedule(start1)).expect("valid schedule");
    assert!(close(eval.core_times[0][0], 100.0 / 18.0));
    assert!(close(eval.core_times[0][1], 50.0 / 18.0));
    assert!(close(eval.core_times[1][0], 0.6 + 3.0));
    assert!(close(eval.finish[0], 100.0 / 18.0));
    assert!(close(eval.makespan, 100.0 / 18.0 + 3.6));
}

#[test]
fn a_job_holds_all_its_cores_until_its_last_block_ends() {
    // Core (1,0) finishes job 0's block at 50/18 = 2.78 s, but job 0 holds it until 5.56 s;
    // starting job 1 there at 3 s uses the core for two jobs at once.
    let inst = two_hosts();
    let err = validate(&inst, &two_hosts_schedule(3.0)).unwrap_err();
    assert_eq!(
        err,
        ScheduleError::CoreOverlap {
            core: CoreRef { host: 1, core: 0 },
            first: 0,
            second: 1
        }
    );
}

#[test]
fn hand_made_makespan_single_host_decay() {
    // One host, 2 cores, α = 0.1, s_t irrelevant. Job: speed 10, blocks 40, 20, 20.
    // On 2 cores g(2) = 0.9, speed 9 MB/s: core 0 has 40 MB → 40/9, core 1 has 20+20 → 40/9.
    // On 1 core: 80 / 10 = 8 s, which is longer than 40/9 = 4.44 s.
    let inst = Instance::new(
        vec![2],
        100.0,
        0.1,
        vec![job(
            10.0,
            vec![block(40.0, &[0]), block(20.0, &[0]), block(20.0, &[0])],
        )],
    )
    .expect("valid");
    let two = Schedule {
        jobs: vec![JobPlan {
            start: 0.0,
            cores: vec![
                core(0, 0, vec![read(0, 0)]),
                core(0, 1, vec![read(1, 0), read(2, 0)]),
            ],
        }],
    };
    assert!(close(
        validate(&inst, &two).expect("valid").makespan,
        40.0 / 9.0
    ));
    let one = Schedule {
        jobs: vec![JobPlan {
            start: 0.0,
            cores: vec![core(0, 1, vec![read(2, 0), read(0, 0), read(1, 0)])],
        }],
    };
    assert!(close(validate(&inst, &one).expect("valid").makespan, 8.0));
    // The planner finds the 2-core split: the lower bound is min over e of
    // max(80 / (e·10·g(e)), 40 / (10·g(e))) = e=2: max(4.44, 4.44) = 40/9, so it is optimal.
    let p = plan(&inst).expect("plan");
    assert!(close(p.lower_bound, 40.0 / 9.0));
    assert!(close(p.makespan, 40.0 / 9.0), "makespan {}", p.makespan);
}

#[test]
fn hand_made_single_core_is_sequential() {
    // One core: jobs run one after another. Job 0: (10 + 20) / 10 = 3 s; job 1: 10 / 5 = 2 s.
    // Makespan 5 s = Σ data/speed / T with T = 1, the lower bound, so the planner must hit it.
    let inst = Instance::new(
        vec![1],
        1.0,
        0.05,
        vec![
            job(10.0, vec![block(10.0, &[0]), block(20.0, &[0])]),
            job(5.0, vec![block(10.0, &[0])]),
        ],
    )
    .expect("valid");
    assert_eq!(inst.max_cores(), 1);
    let p = plan(&inst).expect("plan");
    assert!(close(p.lower_bound, 5.0));
    assert!(close(p.makespan, 5.0));
    assert!(close(p.baselines.round_robin, 5.0));
}

#[test]
fn validator_rejects_each_kind_of_invalid_schedule() {
    let inst = two_hosts();
    let ok = two_hosts_schedule(100.0 / 18.0);
    assert!(validate(&inst, &ok).is_ok());
    let edit = |f: &dyn Fn(&mut Schedule)| {
        let mut s = ok.clone();
        f(&mut s);
        validate(&inst, &s).unwrap_err()
    };
    assert_eq!(
        edit(&|s| s.jobs[0].cores[1].blocks.clear()),
        ScheduleError::BlockMissing { job: 0, block: 1 }
    );
    assert_eq!(
        edit(&|s| s.jobs[0].cores[1].blocks.push(read(0, 0))),
        ScheduleError::BlockTwice { job: 0, block: 0 }
    );
    assert_eq!(
        edit(&|s| s.jobs[0].cores[1].blocks[0] = read(1, 0)),
        ScheduleError::NoSuchReplica {
            job: 0,
            block: 1,
            host: 0
        }
    );
    assert_eq!(
        edit(&|s| s.jobs[1].cores[0].blocks[0] = read(7, 0)),
        ScheduleError::NoSuchBlock { job: 1, block: 7 }
    );
    assert_eq!(
        edit(&|s| s.jobs[1].cores[0].core = CoreRef { host: 1, core: 1 }),
        ScheduleError::NoSuchCore {
            job: 1,
            core: CoreRef { host: 1, core: 1 }
        }
    );
    assert_eq!(
        edit(&|s| s.jobs[0].cores[1].core = CoreRef { host: 0, core: 0 }),
        ScheduleError::CoreTwice {
            job: 0,
            core: CoreRef { host: 0, core: 0 }
        }
    );
    assert_eq!(
        edit(&|s| s.jobs[1].cores.clear()),
        ScheduleError::NoCores { job: 1 }
    );
    assert_eq!(
        edit(&|s| s.jobs[1].start = -1.0),
        ScheduleError::BadStart {
            job: 1,
            start: -1.0
        }
    );
    assert_eq!(
        edit(&|s| {
            s.jobs.pop();
        }),
        ScheduleError::JobCount {
            expected: 2,
            got: 1
        }
    );
}

#[test]
fn validator_rejects_more_than_ten_cores() {
    // 12 cores and a small α, so only the ten-core rule forbids 11 cores.
    let inst = Instance::new(
        vec![12],
        100.0,
        0.01,
        vec![job(1.0, (0..11).map(|_| block(1.0, &[0])).collect())],
    )
    .expect("valid");
    assert_eq!(inst.max_cores(), MAX_CORES_PER_JOB);
    let s = Schedule {
        jobs: vec![JobPlan {
            start: 0.0,
            cores: (0..11).map(|c| core(0, c, vec![read(c, 0)])).collect(),
        }],
    };
    assert_eq!(
        validate(&inst, &s).unwrap_err(),
        ScheduleError::TooManyCores {
            job: 0,
            cores: 11,
            max: 10
        }
    );
}

#[test]
fn large_alpha_lowers_the_core_cap() {
    // g(e) = 1 − 0.3(e − 1) > 0 for e ≤ 4 (g(4) = 0.1, g(5) = −0.2).
    let inst =
        Instance::new(vec![8], 1.0, 0.3, vec![job(1.0, vec![block(1.0, &[0])])]).expect("valid");
    assert_eq!(inst.max_cores(), 4);
    assert!(close(inst.decay(4), 0.1));
}

#[test]
fn instance_errors_are_typed() {
    let j = || vec![job(1.0, vec![block(1.0, &[0])])];
    assert_eq!(
        Instance::new(vec![], 1.0, 0.1, j()).unwrap_err(),
        InstanceError::NoHosts
    );
    assert_eq!(
        Instance::new(vec![0, 0], 1.0, 0.1, j()).unwrap_err(),
        InstanceError::NoCores
    );
    assert_eq!(
        Instance::new(vec![usize::MAX, 1], 1.0, 0.1, j()).unwrap_err(),
        InstanceError::TooManyCores {
            max: MAX_TOTAL_CORES
        }
    );
    assert_eq!(
        Instance::new(vec![1], 1.0, 1.0, j()).unwrap_err(),
        InstanceError::BadAlpha(1.0)
    );
    assert_eq!(
        Instance::new(vec![1], 0.0, 0.1, j()).unwrap_err(),
        InstanceError::BadTransferSpeed(0.0)
    );
    assert_eq!(
        Instance::new(vec![1], 1.0, 0.1, vec![job(1.0, vec![block(1.0, &[1])])]).unwrap_err(),
        InstanceError::NoSuchHost {
            job: 0,
            block: 0,
            host: 1,
            hosts: 1
        }
    );
    assert_eq!(
        Instance::new(
            vec![2, 2],
            1.0,
            0.1,
            vec![job(1.0, vec![block(1.0, &[1, 1])])]
        )
        .unwrap_err(),
        InstanceError::DuplicateReplica {
            job: 0,
            block: 0,
            host: 1
        }
    );
    assert_eq!(
        Instance::new(vec![1], 1.0, 0.1, vec![job(1.0, vec![])]).unwrap_err(),
        InstanceError::NoBlocks { job: 0 }
    );
}

// ---------------------------------------------------------------- bounds

#[test]
fn lower_bound_by_hand() {
    // 2 hosts × 2 cores (T = 4), α = 0.1, s_t = 125.
    // Job 0: speed 10, blocks 60 on h0, 20 on h1, 20 on h0 and h1 (100 MB); its shares:
    // h0 = 80, h1 = 40. With e cores its cores sit on ≤ e hosts:
    //   e=1: at most 80 MB local, 20 MB must cross: busy ≥ 100/10 + 20/125 = 10.16;
    //        bound max(10.16 / 1, 60 / 10) = 10.16.
    //   e=2 (g .9): 120 ≥ 100, nothing must cross: busy ≥ 100/9 = 11.11;
    //        bound max(11.11 / 2, 60 / 9) = 6.667.
    //   e=3 (g .8): max(12.5 / 3, 60 / 8) = 7.5;  e=4 (g .7): max(14.29 / 4, 60 / 7) = 8.571.
    //   best: 60/9; least busy time: 10.16 (e=1).
    // Job 1: speed 20, one block of 20 on h1: e=1 gives 1 s, busy 1.
    // Work term: (10.16 + 1) / 4 = 2.79.
    // Lower bound = max(60/9, 1, 2.79) = 60/9.
    let inst = Instance::new(
        vec![2, 2],
        125.0,
        0.1,
        vec![
            job(
                10.0,
                vec![block(60.0, &[0]), block(20.0, &[1]), block(20.0, &[0, 1])],
            ),
            job(20.0, vec![block(20.0, &[1])]),
        ],
    )
    .expect("valid");
    assert!(close(job_bound(&inst, 0), 60.0 / 9.0));
    assert!(close(job_bound(&inst, 1), 1.0));
    assert!(close(lower_bound(&inst), 60.0 / 9.0));
}

#[test]
fn lower_bound_counts_transfers_no_placement_avoids() {
    // Host 1 stores the data but has no cores, so every block crosses the network.
    // One core (T = 1): job 0 reads 100 MB at s_t = 10 and runs it at 10 MB/s: 10 + 10 = 20 s.
    // The naive Σ data / speed / T would say 10; the tight bound is exact here.
    let inst = Instance::new(
        vec![1, 0],
        10.0,
        0.1,
        vec![job(10.0, vec![block(100.0, &[1])])],
    )
    .expect("valid");
    assert!(close(lower_bound(&inst), 20.0));
    let p = plan(&inst).expect("plan");
    assert!(close(p.makespan, 20.0));
}

#[test]
fn lower_bound_work_term_dominates_with_many_jobs() {
    // One core per host, 2 hosts; four jobs of one 10 MB block at 10 MB/s (1 s each).
    // Per job the bound is 1 s; the work term is 4 · 1 / 2 = 2 s. But every block is on
    // host 0, whose one core can run only M seconds of them locally; the rest cross at
    // 10 MB/s (1 s each): busy 4 + (4 − M) ≤ 2M gives M ≥ 8/3 (the optimum is 3: three
    // blocks on host 0, one read by host 1).
    let inst = Instance::new(
        vec![1, 1],
        10.0,
        0.05,
        (0..4).map(|_| job(10.0, vec![block(10.0, &[0])])).collect(),
    )
    .expect("valid");
    assert!((lower_bound(&inst) - 8.0 / 3.0).abs() < 1e-9);
    assert!(plan(&inst).expect("plan").makespan >= 3.0 - 1e-9);
}

// ---------------------------------------------------------------- binary search

#[test]
fn bisect_finds_the_threshold_of_a_monotone_oracle() {
    for k in 1..=40u64 {
        let out = bisect(0, 40, |t| t >= k);
        assert_eq!(out.best, Some(k));
        assert!(
            out.probes <= max_probes(0, 40),
            "k={k}: {} probes",
            out.probes
        );
    }
}

#[test]
fn bisect_terminates_on_constant_oracles_and_degenerate_ranges() {
    let all = bisect(0, GRID_TICKS, |_| true);
    assert_eq!(all.best, Some(1));
    assert!(all.probes <= max_probes(0, GRID_TICKS));
    let none = bisect(0, GRID_TICKS, |_| false);
    assert_eq!(none.best, None);
    assert!(none.probes <= max_probes(0, GRID_TICKS));
    assert_eq!(max_probes(0, GRID_TICKS), 15);
    // lower == upper: one probe, then the probe repeats.
    assert_eq!(
        bisect(7, 7, |_| true),
        SearchOutcome {
            best: Some(7),
            probes: 1
        }
    );
    assert_eq!(
        bisect(7, 8, |_| false),
        SearchOutcome {
            best: None,
            probes: 1
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the oracle answers — here an arbitrary, non-monotone pattern — the search
    /// stops within ceil(log2(d)) + 1 probes and reports the least tick it accepted.
    #[test]
    fn bisect_terminates_on_any_oracle(lower in 0u64..1000, span in 0u64..1_000_000, pattern: u64) {
        let upper = lower + span;
        let mut accepted = Vec::new();
        let out = bisect(lower, upper, |t| {
            let yes = (pattern.rotate_left((t % 64) as u32) ^ t) & 1 == 1;
            if yes { accepted.push(t) }
            yes
        });
        prop_assert!(out.probes <= max_probes(lower, upper));
        prop_assert_eq!(out.best, accepted.iter().copied().min());
    }
}

// ---------------------------------------------------------------- core weight

#[test]
fn core_weight_by_hand() {
    // First core of a job with half its 100 MB on the host, core free at 0, M = 10:
    //   φ = 1 − 0/1 = 1, β = (50 + 0.001·100) / 100 = 0.501, t = 1 − 0/10 = 1.
    assert!(close(core_weight(0, 0, 50.0, 100.0, 0.0, 10.0), 0.501));
    // Second core on the same host, free at 5:
    //   φ = 1 − 1/2 = 0.5, β = 0.501, t = 1 − 5/10 = 0.5 → 0.12525.
    assert!(close(core_weight(1, 1, 50.0, 100.0, 5.0, 10.0), 0.12525));
    // A core busy past M has no weight.
    assert_eq!(core_weight(0, 0, 50.0, 100.0, 12.0, 10.0), 0.0);
    // A host without the job's data still ranks (ε), far below one with it.
    assert!(core_weight(0, 0, 0.0, 100.0, 0.0, 10.0) > 0.0);
}

#[test]
fn cores_are_picked_by_weight() {
    // 2 hosts × 2 cores (ids 0,1 on host 0; 2,3 on host 1); all the job's data on host 1.
    let inst = Instance::new(
        vec![2, 2],
        100.0,
        0.05,
        vec![job(10.0, vec![block(50.0, &[1]), block(50.0, &[1])])],
    )
    .expect("valid");
    let packer = Packer::new(&inst);
    let mut timeline = Timeline::new(&inst);
    let m = 100.0;
    // First pick: β = 1.001 on host 1 vs 0.001 on host 0 → core 2 (lowest id of host 1).
    assert_eq!(packer.pick_core(&timeline, 0, &[], &[0, 0], m), Some(2));
    // Second pick: host 1's other core has φ = 1 − 1/2 = 0.5, λ = 0.5005; host 0's have
    // φ = 1, λ = 0.001 → core 3.
    assert_eq!(packer.pick_core(&timeline, 0, &[2], &[0, 1], m), Some(3));
    // Core 2 busy until 90 (t = 0.1, λ = 0.1001) loses to free core 3 (λ = 1.001).
    timeline.set_avail(1, 2, 90.0);
    assert_eq!(packer.pick_core(&timeline, 0, &[], &[0, 0], m), Some(3));
    // A core free too late to finish the job by M (the job needs ≥ 5 s) is not a candidate.
    for c in 0..4 {
        timeline.set_avail(c / 2, c, 96.0);
    }
    assert_eq!(packer.pick_core(&timeline, 0, &[], &[0, 0], m), None);
}

// ---------------------------------------------------------------- block placement

#[test]
fn blocks_go_where_their_time_is_least_preferring_local() {
    // 2 hosts × 1 core, s_t = 10, α = 0 (no decay), job speed 10.
    // Blocks (largest first): b0 = 30 on h0, b1 = 10 on h0, b2 = 10 on h1.
    //   b0: core h0 → 0 + 3 = 3; core h1 → 0 + 3 (transfer) + 3 = 6 → h0 (local). Loads 3, 0.
    //   b1: core h0 → 3 + 1 = 4; core h1 → 0 + 1 + 1 = 2 → h1, remote read from h0. Loads 3, 2.
    //   b2: core h0 → 3 + 1 + 1 = 5; core h1 → 2 + 1 = 3 → h1 (local). Loads 3, 3.
    let inst = Instance::new(
        vec![1, 1],
        10.0,
        0.0,
        vec![job(
            10.0,
            vec![block(30.0, &[0]), block(10.0, &[0]), block(10.0, &[1])],
        )],
    )
    .expect("valid");
    let w = place_blocks(&inst, 0, &[0, 1], &[0, 1, 2]);
    assert_eq!(w.slots[0].blocks, vec![read(0, 0)]);
    assert_eq!(w.slots[1].blocks, vec![read(1, 0), read(2, 1)]);
    assert!(close(w.slots[0].time, 3.0) && close(w.slots[1].time, 3.0));
}

#[test]
fn a_tie_goes_to_the_local_replica() {
    // Infinite transfer speed makes remote reads free, so both cores tie at 1 s for the only
    // block; the core whose host holds the replica (host 1) wins over the first core.
    let inst = Instance::new(
        vec![1, 1],
        f64::INFINITY,
        0.0,
        vec![job(10.0, vec![block(10.0, &[1])])],
    )
    .expect("valid");
    let w = place_blocks(&inst, 0, &[0, 1], &[0]);
    assert!(w.slots[0].blocks.is_empty());
    assert_eq!(w.slots[1].blocks, vec![read(0, 1)]);
}

// ---------------------------------------------------------------- trimming

/// One host with two cores, α = 0, speed 1: a block's time is its size.
fn trim_instance(sizes: &[f64]) -> Instance {
    Instance::new(
        vec![2],
        1.0,
        0.0,
        vec![job(1.0, sizes.iter().map(|&s| block(s, &[0])).collect())],
    )
    .expect("valid")
}

fn work_on(inst: &Instance, a: &[usize], b: &[usize]) -> JobWork {
    let slot = |core, blocks: &[usize]| Slot {
        core,
        blocks: blocks.iter().map(|&x| read(x, 0)).collect(),
        time: 0.0,
    };
    let mut w = JobWork {
        job: 0,
        slots: vec![slot(0, a), slot(1, b)],
    };
    w.recompute(inst);
    w
}

/// Runs trimming step by step, checking that every step strictly shortens the core that was
/// critical and leaves no core at or above the old critical time.
fn trim_checked(inst: &Instance, w: &mut JobWork) -> Vec<Step> {
    let th = threshold(inst, 0);
    let mut steps = Vec::new();
    loop {
        let before: Vec<f64> = w.slots.iter().map(|s| s.time).collect();
        let crit = (0..before.len()).fold(0, |m, i| if before[i] > before[m] { i } else { m });
        let Some(step) = trim_step(inst, w, th) else {
            return steps;
        };
        steps.push(step);
        assert!(
            w.slots[crit].time < before[crit],
            "critical core not shortened"
        );
        assert!(
            w.slots.iter().all(|s| s.time < before[crit]),
            "a core reached the old critical time"
        );
        assert!(steps.len() < 100, "trimming does not end");
    }
}

#[test]
fn trimming_moves_small_blocks_first_and_balances() {
    // Sizes 4, 3, 2, 1 all on core A (10 s), core B empty; threshold = 1 / 2 = 0.5.
    //   move 1 → A 9, B 1;  move 2 → A 7, B 3;  move 3 → A 4, B 6 (max 6 < 7);
    //   now B is critical: move its 1 → A 5, B 5; difference 0 ≤ 0.5, stop.
    let inst = trim_instance(&[4.0, 3.0, 2.0, 1.0]);
    let mut w = work_on(&inst, &[0, 1, 2, 3], &[]);
    let steps = trim_checked(&inst, &mut w);
    assert_eq!(steps, vec![Step::Move; 4]);
    assert!(close(w.duration(), 5.0));
}

#[test]
fn trimming_swaps_when_no_move_helps() {
    // A = {6, 6} = 12, B = {5, 4} = 9, threshold = 4 / 2 = 2, difference 3 > 2.
    //   moving a 6 makes B 15 > 12: no move helps.
    //   swap A's 6 with B's 5 (B's largest first): A 11, B 10, max 11 < 12 → accepted.
    //   difference 1 ≤ 2: stop. Duration 12 → 11.
    let inst = trim_instance(&[6.0, 6.0, 5.0, 4.0]);
    let mut w = work_on(&inst, &[0, 1], &[2, 3]);
    let steps = trim_checked(&inst, &mut w);
    assert_eq!(steps, vec![Step::Swap]);
    assert!(close(w.duration(), 11.0));
}

#[test]
fn trimming_stops_within_the_threshold() {
    // A = 5, B = 4.6, threshold 4.6/2 = 2.3 (the smallest block is 4.6): nothing to do.
    let inst = trim_instance(&[5.0, 4.6]);
    let mut w = work_on(&inst, &[0], &[1]);
    assert_eq!(trim(&inst, &mut w), Default::default());
}

// ---------------------------------------------------------------- inputs

const COURSE: &str = "3 2 125 0.03\n2 2\n3 2 4\n20 10 25\n60 40 80\n50 30\n40 40 40 20\n\
                      0 1 1\n0 0\n1 0 1 1\n";

#[test]
fn text_format_parses() {
    let inst = parse(COURSE).expect("parses");
    assert_eq!(inst.cores_per_host(), &[2, 2]);
    assert_eq!(inst.transfer_speed(), 125.0);
    assert_eq!(inst.alpha(), 0.03);
    assert_eq!(inst.jobs().len(), 3);
    assert_eq!(
        inst.jobs()[1],
        job(10.0, vec![block(50.0, &[0]), block(30.0, &[0])])
    );
    assert_eq!(inst.jobs()[2].blocks[3], block(20.0, &[1]));
}

#[test]
fn text_format_accepts_the_course_order_and_single_host_files() {
    // The course writes alpha before the transfer speed.
    let swapped = COURSE.replacen("3 2 125 0.03", "3 2 0.03 125", 1);
    assert_eq!(
        parse(&swapped).expect("parses"),
        parse(COURSE).expect("parses")
    );
    // Task 1: one host, no speed.
    let t1 = include_str!("../../../deploy/samples/plan/course-task1.txt");
    let inst = parse(t1).expect("parses");
    assert_eq!(inst.transfer_speed(), f64::INFINITY);
    assert_eq!(inst.total_cores(), 4);
}

fn text_error(input: &str) -> (usize, String) {
    match parse(input) {
        Err(InputError::Text { line, message }) => (line, message),
        other => panic!("expected a text error, got {other:?}"),
    }
}

#[test]
fn text_errors_name_the_line() {
    let (line, msg) = text_error(&COURSE.replacen("20 10 25", "20 x 25", 1));
    assert_eq!(line, 4);
    assert!(msg.contains("\"x\""), "{msg}");
    let (line, msg) = text_error(&COURSE.replacen("50 30", "50 30 7", 1));
    assert_eq!(line, 6);
    assert!(msg.contains("found 3 values"), "{msg}");
    let (line, msg) = text_error(&COURSE.replacen("0 0\n", "0 2\n", 1));
    assert_eq!(line, 9);
    assert!(msg.contains("host id 2 does not exist"), "{msg}");
    let (line, _) = text_error(&COURSE.replacen("3 2 125 0.03", "3 2 125 1.5", 1));
    assert_eq!(line, 1);
    let (line, _) = text_error(&format!("{COURSE}\n1 2 3\n"));
    assert_eq!(line, 12);
    let (line, _) = text_error(&COURSE.replacen("20 10 25", "20 -1 25", 1));
    assert_eq!(line, 4);
    let (line, _) = text_error(&COURSE.replacen("20 10 25", "20 inf 25", 1));
    assert_eq!(line, 4);
    // Three values on the first line only work for one host.
    let (line, _) = text_error(&COURSE.replacen("3 2 125 0.03", "3 2 0.03", 1));
    assert_eq!(line, 1);
    match parse("3 2 125 0.03\n2 2\n3 2 4\n") {
        Err(InputError::TextEnd { line: 3, expected }) => {
            assert!(expected.contains("speed"), "{expected}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(""),
        Err(InputError::TextEnd { line: 0, .. })
    ));
}

#[test]
fn json_round_trips_and_rejects_unknown_keys() {
    let inst = two_hosts();
    assert_eq!(parse(&to_json(&inst)).expect("parses"), inst);
    let extra = r#"{"cores_per_host":[1],"transfer_speed":1,"alpha":0.1,"jobs":[],"colour":1}"#;
    match parse(extra) {
        Err(InputError::Json {
            line: 1, message, ..
        }) => {
            assert!(message.contains("unknown field `colour`"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match parse("{\n  \"cores_per_host\": [1],\n  \"alpha\": oops\n}") {
        Err(InputError::Json { line: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    let bad_host = r#"{"cores_per_host":[1],"transfer_speed":1,"alpha":0.1,
        "jobs":[{"speed":1,"blocks":[{"size":1,"replicas":[3]}]}]}"#;
    assert!(matches!(
        parse(bad_host),
        Err(InputError::Instance(InstanceError::NoSuchHost {
            host: 3,
            ..
        }))
    ));
}

#[test]
fn the_samples_parse_and_plan() {
    for text in [
        include_str!("../../../deploy/samples/plan/small.json"),
        include_str!("../../../deploy/samples/plan/course.txt"),
        include_str!("../../../deploy/samples/plan/course-task1.txt"),
    ] {
        let inst = parse(text).expect("sample parses");
        let p = plan(&inst).expect("plans");
        assert!(validate(&inst, &p.schedule).is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No input makes the parser panic: random text, and random edits of a valid file.
    #[test]
    fn parser_never_panics(s in "\\PC{0,200}") {
        let _ = parse(&s);
    }

    #[test]
    fn parser_never_panics_on_edited_files(pos in 0usize..120, junk in "[0-9 .x\n{-]{0,6}", cut: bool) {
        let mut s = COURSE.to_string();
        let at = pos.min(s.len());
        if cut { s.truncate(at) } else { s.insert_str(at, &junk) }
        let _ = parse(&s);
    }
}

// ---------------------------------------------------------------- planner properties

prop_compose! {
    /// Small random instances: 1–4 hosts (some may have no cores), 1–7 jobs of 1–9 blocks,
    /// α up to 0.25 (so the core cap ranges from 10 down to 5), slow to fast networks.
    fn instances()(
        seed: u64,
        jobs in 1usize..8,
        hosts in 1usize..5,
        max_cores in 1usize..5,
        blocks in 1usize..10,
        replicas in 1usize..4,
        alpha in prop::sample::select(vec![0.0, 0.03, 0.1, 0.25]),
        transfer_speed in prop::sample::select(vec![5.0, 40.0, 125.0, 1000.0]),
    ) -> Option<Instance> {
        let p = GenParams {
            cores: (0, max_cores),
            blocks: (1, blocks),
            replicas,
            size: (1, 100),
            speed: (1, 30),
            transfer_speed,
            alpha,
            ..GenParams::new(jobs, hosts, seed)
        };
        generate(&p).ok()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every emitted schedule is valid; its makespan lies between the lower bound and the
    /// best baseline; the search stays within its probe budget; planning is deterministic.
    #[test]
    fn plans_are_valid_and_bounded(inst in instances()) {
        let Some(inst) = inst else { return Ok(()) }; // every host had zero cores
        let p = plan(&inst).expect("plan");
        let eval = validate(&inst, &p.schedule).expect("the emitted schedule validates");
        prop_assert!(close(eval.makespan, p.makespan));
        prop_assert!(p.makespan >= p.lower_bound * (1.0 - 1e-9),
            "makespan {} below lower bound {}", p.makespan, p.lower_bound);
        let best_baseline = p.baselines.round_robin.min(p.baselines.weighted);
        prop_assert!(p.makespan <= best_baseline);
        if let Some(own) = p.planner_makespan {
            prop_assert!(own >= p.lower_bound * (1.0 - 1e-9));
        }
        prop_assert!(p.probes <= max_probes(0, GRID_TICKS));
        prop_assert_eq!(plan(&inst).expect("plan"), p);
    }

    /// Every probe's schedule validates too, feasible or not for the planner's purposes,
    /// and a feasible probe's schedule finishes by the probed makespan.
    #[test]
    fn every_probe_is_valid(inst in instances(), frac in 0.3f64..1.5) {
        let Some(inst) = inst else { return Ok(()) };
        let upper = validate(&inst, &weighted(&inst)).expect("valid").makespan;
        let m = upper * frac;
        if let Some(s) = Packer::new(&inst).pack(m) {
            let eval = validate(&inst, &s).expect("probe schedule validates");
            prop_assert!(eval.makespan <= m * (1.0 + 1e-9));
        }
    }

    /// Trimming a greedy placement on random cores never lengthens the job, and each step
    /// shortens the critical core.
    #[test]
    fn trimming_only_shortens(inst in instances(), cores in 1usize..6, skew: bool) {
        let Some(inst) = inst else { return Ok(()) };
        let packer = Packer::new(&inst);
        for &j in packer.order() {
            let e = cores.min(inst.max_cores());
            let ids: Vec<usize> = (0..e).collect();
            let order: Vec<usize> = (0..inst.jobs()[j].blocks.len()).collect();
            let mut w = place_blocks(&inst, j, &ids, &order);
            if skew {
                // Pile every block on the first core, so that trimming has work to do.
                let all: Vec<BlockRead> = w.slots.iter_mut().flat_map(|s| s.blocks.drain(..)).collect();
                w.slots[0].blocks = all;
                w.recompute(&inst);
            }
            let before = w.duration();
            let th = threshold(&inst, j);
            let mut n = 0;
            loop {
                let times: Vec<f64> = w.slots.iter().map(|s| s.time).collect();
                let crit = (0..times.len()).fold(0, |m, i| if times[i] > times[m] { i } else { m });
                if trim_step(&inst, &mut w, th).is_none() { break }
                prop_assert!(w.slots[crit].time < times[crit]);
                prop_assert!(w.slots.iter().zip(&times).all(|(s, &t)| s.time < times[crit] || s.time == t));
                prop_assert!(w.duration() <= times.iter().copied().fold(0.0, f64::max));
                n += 1;
                prop_assert!(n < 1000);
            }
            prop_assert!(w.duration() <= before);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The per-host shortcut of `pick_core` picks what weighing every core would.
    #[test]
    fn pick_core_matches_a_scan_of_every_core(
        inst in instances(),
        frees in prop::collection::vec(0u32..8, 64),
        taken in prop::collection::vec(any::<bool>(), 64),
        m in 1.0f64..400.0,
    ) {
        let Some(inst) = inst else { return Ok(()) };
        let packer = Packer::new(&inst);
        let mut timeline = Timeline::new(&inst);
        let t = inst.total_cores();
        for c in 0..t {
            // Coarse times, so that ties in λ and in free time happen.
            timeline.set_avail(inst.host_of(c), c, f64::from(frees[c % 64]) * 10.0);
        }
        let chosen: Vec<usize> = (0..t).filter(|&c| taken[c % 64]).take(inst.max_cores()).collect();
        let mut per_host = vec![0; inst.hosts()];
        for &c in &chosen {
            per_host[inst.host_of(c)] += 1;
        }
        for job in 0..inst.jobs().len() {
            let data = inst.jobs()[job].data();
            let on = super::baseline::data_on_hosts(&inst, job);
            let bound = job_bound(&inst, job);
            let mut best: Option<(f64, f64, usize)> = None;
            for c in 0..t {
                let a = timeline.avail(c);
                if chosen.contains(&c) || a + bound > m {
                    continue;
                }
                let h = inst.host_of(c);
                let w = core_weight(per_host[h], chosen.len(), on[h], data, a, m);
                if best.is_none_or(|(bw, ba, _)| w > bw || (w == bw && a < ba)) {
                    best = Some((w, a, c));
                }
            }
            prop_assert_eq!(
                packer.pick_core(&timeline, job, &chosen, &per_host, m),
                best.map(|(_, _, c)| c)
            );
        }
    }
}

// ---------------------------------------------------------------- uniform-LPT baseline

#[test]
fn uniform_lpt_by_hand_with_transfers() {
    let inst = two_hosts();
    // Estimates: job 0 (100 + 50) / 20 = 7.5 s, job 1 30 / 10 = 3 s: job 0 goes first.
    // k = 1, g = 1. Job 0 takes the earliest free core, (0,0) (all free at 0; host 0 first):
    //   block 0 (100 MB, local): 100 / 20 = 5; block 1 (50 MB, on host 1): 50/50 + 50/20 = 3.5.
    //   Its one core takes 8.5 s. Job 1 takes core (1,0), free at 0, and reads block 0 from
    //   host 0: 30/50 + 30/10 = 3.6. Makespan 8.5.
    let (one, ms1) = uniform_lpt_with(&inst, 1);
    assert!(close(ms1, 8.5), "k = 1: {ms1}");
    let expected_one = Schedule {
        jobs: vec![
            JobPlan {
                start: 0.0,
                cores: vec![core(0, 0, vec![read(0, 0), read(1, 1)])],
            },
            JobPlan {
                start: 0.0,
                cores: vec![core(1, 0, vec![read(0, 0)])],
            },
        ],
    };
    assert_eq!(one, expected_one);
    // k = 2, g(2) = 0.9 (18 MB/s). Job 0 on (0,0) and (1,0): block 0 costs 100/18 = 5.56 on
    //   host 0, 2 + 5.56 on host 1 → host 0; block 1 costs 5.56 + 1 + 50/18 = 9.33 on host 0,
    //   50/18 = 2.78 on host 1 → host 1. Job 0 holds both until 100/18.
    //   Job 1 has one block, so one core: both are free at 100/18, host 0's first; it reads
    //   locally, 3 s. Makespan 100/18 + 3 = 8.56 > 8.5, so k = 1 is kept.
    let (two, ms2) = uniform_lpt_with(&inst, 2);
    assert!(close(ms2, 100.0 / 18.0 + 3.0), "k = 2: {ms2}");
    assert_eq!(two.jobs[1].cores, vec![core(0, 0, vec![read(0, 0)])]);
    assert!(close(two.jobs[1].start, 100.0 / 18.0));
    assert_eq!(inst.max_cores(), 2);
    for s in [&one, &two] {
        validate(&inst, s).expect("each k's schedule validates");
    }
    let best = uniform_lpt(&inst);
    assert_eq!(best, expected_one);
    assert!(close(validate(&inst, &best).expect("valid").makespan, 8.5));
    assert!(close(plan(&inst).expect("plan").baselines.uniform_lpt, 8.5));
}

#[test]
fn uniform_lpt_goes_longest_first_and_caps_cores_at_blocks() {
    // One host, 2 cores, α = 0.1. Job 0: speed 10, one block of 10 MB (estimate 1 s);
    // job 1: speed 10, blocks 40 and 40 (estimate 8 s). Job 1 goes first despite its index.
    let inst = Instance::new(
        vec![2],
        f64::INFINITY,
        0.1,
        vec![
            job(10.0, vec![block(10.0, &[0])]),
            job(10.0, vec![block(40.0, &[0]), block(40.0, &[0])]),
        ],
    )
    .expect("valid");
    // k = 1: job 1 on (0,0), 80/10 = 8 s; job 0 on (0,1) at 0, 1 s. Makespan 8.
    let (_, ms1) = uniform_lpt_with(&inst, 1);
    assert!(close(ms1, 8.0));
    // k = 2: job 1 on both cores at 9 MB/s, 40/9 each. Job 0 has one block, so one core
    // (not two at g(2)): (0,0), free at 40/9 like (0,1) but first; 10/10 = 1 s. Makespan
    // 40/9 + 1 = 5.44 < 8, so k = 2 is kept.
    let s = uniform_lpt(&inst);
    let eval = validate(&inst, &s).expect("valid");
    assert!(close(eval.makespan, 40.0 / 9.0 + 1.0), "{}", eval.makespan);
    assert_eq!(s.jobs[1].start, 0.0);
    assert_eq!(
        s.jobs[1].cores,
        vec![core(0, 0, vec![read(0, 0)]), core(0, 1, vec![read(1, 0)])]
    );
    assert!(close(s.jobs[0].start, 40.0 / 9.0));
    assert_eq!(s.jobs[0].cores, vec![core(0, 0, vec![read(0, 0)])]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The uniform-LPT schedule validates, and so does every k's; it is the best k; it lies
    /// at or above the lower bound; `plan` reports it and returns nothing worse. The planner's
    /// own schedule validates on its own at the makespan reported for it.
    #[test]
    fn uniform_lpt_is_valid_and_the_best_k(inst in instances()) {
        let Some(inst) = inst else { return Ok(()) };
        let s = uniform_lpt(&inst);
        let ms = validate(&inst, &s).expect("uniform-LPT validates").makespan;
        let mut best = f64::INFINITY;
        for k in 1..=inst.max_cores() {
            let (sk, msk) = uniform_lpt_with(&inst, k);
            let eval = validate(&inst, &sk).expect("each k validates");
            prop_assert!(close(eval.makespan, msk));
            best = best.min(msk);
        }
        prop_assert!(close(ms, best));
        let p = plan(&inst).expect("plan");
        prop_assert!(ms >= p.lower_bound * (1.0 - 1e-9));
        prop_assert!(close(p.baselines.uniform_lpt, ms));
        prop_assert!(p.makespan <= ms);
        prop_assert_eq!(p.planner_makespan.is_some(), p.planner_schedule.is_some());
        if let (Some(own), Some(ms)) = (&p.planner_schedule, p.planner_makespan) {
            prop_assert!(close(validate(&inst, own).expect("planner's own validates").makespan, ms));
            if p.chosen == Chosen::Planner {
                prop_assert_eq!(own, &p.schedule);
            }
        }
    }
}

// ---------------------------------------------------------------- local search, second moment

/// A genome for `inst`: jobs longest first, `e` cores each (capped), rank `rank`.
fn genome_of(inst: &Instance, packer: &Packer, e: usize, rank: usize) -> improve::Genome {
    let n = inst.jobs().len();
    improve::Genome {
        order: packer.lpt_order().to_vec(),
        cores: (0..n).map(|j| e.clamp(1, packer.most(j))).collect(),
        rank: vec![rank; n],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A built genome validates at its own makespan; the local search returns a schedule
    /// that validates and is no longer than its start; it is deterministic.
    #[test]
    fn local_search_never_worsens_its_start(inst in instances(), e in 1usize..5, rank in 0usize..3) {
        let Some(inst) = inst else { return Ok(()) };
        let packer = Packer::new(&inst);
        let g = genome_of(&inst, &packer, e, rank);
        let (start, _) = packer.build_traced(&g);
        let eval = validate(&inst, &start.to_schedule(&inst)).expect("built genome validates");
        prop_assert!(close(eval.makespan, start.makespan));
        let (g2, best, evals) = improve::local_search(&packer, g.clone(), 2000);
        // The budget may be overrun by one schedule at most.
        prop_assert!(evals <= 2000 + 2 * inst.jobs().len());
        let eval = validate(&inst, &best.to_schedule(&inst)).expect("searched schedule validates");
        prop_assert!(close(eval.makespan, best.makespan));
        prop_assert!(best.makespan <= start.makespan * (1.0 + 1e-9));
        prop_assert!(close(packer.build_traced(&g2).0.makespan, best.makespan));
        let again = improve::local_search(&packer, g, 2000);
        prop_assert_eq!(again.0, g2);
    }

    /// Compaction keeps every job on its cores and never starts one later; the second
    /// moment only shortens, and its schedule validates.
    #[test]
    fn second_moment_trims_the_critical_chain_only_for_the_better(inst in instances(), e in 1usize..5) {
        let Some(inst) = inst else { return Ok(()) };
        let packer = Packer::new(&inst);
        let (built, _) = packer.build_traced(&genome_of(&inst, &packer, e, 0));
        let compacted = second::compact(&inst, built.jobs.clone());
        for (a, b) in compacted.jobs.iter().zip(&built.jobs) {
            prop_assert!(a.start <= b.start + 1e-9 * b.start.max(1.0));
            prop_assert_eq!(&a.work, &b.work);
        }
        validate(&inst, &compacted.to_schedule(&inst)).expect("compacted validates");
        let chain = second::critical_chain(&inst, &built);
        let last = built.jobs.iter().map(|p| p.finish()).fold(0.0, f64::max);
        prop_assert!(close(built.jobs[chain[0]].finish(), last));
        let (trimmed, kept) = second::trim_critical(&packer, built.clone());
        let eval = validate(&inst, &trimmed.to_schedule(&inst)).expect("trimmed validates");
        prop_assert!(close(eval.makespan, trimmed.makespan));
        prop_assert!(trimmed.makespan <= built.makespan * (1.0 + 1e-9));
        if kept == 0 {
            prop_assert!(close(trimmed.makespan, built.makespan));
        }
    }
}

#[test]
fn compaction_never_starts_a_job_later() {
    // Two jobs on one core, the second planned with a gap after the first: compaction
    // starts it when the first ends.
    let inst = Instance::new(
        vec![1],
        f64::INFINITY,
        0.0,
        vec![
            job(10.0, vec![block(10.0, &[0])]),
            job(10.0, vec![block(20.0, &[0])]),
        ],
    )
    .expect("valid");
    let s = Schedule {
        jobs: vec![
            JobPlan {
                start: 0.0,
                cores: vec![core(0, 0, vec![read(0, 0)])],
            },
            JobPlan {
                start: 5.0,
                cores: vec![core(0, 0, vec![read(0, 0)])],
            },
        ],
    };
    let built = improve::Built::from_schedule(&inst, &s).expect("cores exist");
    let c = second::compact(&inst, built.jobs);
    assert!(close(c.jobs[0].start, 0.0));
    assert!(close(c.jobs[1].start, 1.0));
    assert!(close(c.makespan, 3.0));
}
