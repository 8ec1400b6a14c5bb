#![deny(missing_docs)]

//! S2 — makespan planner for data-local batch jobs; see docs/DESIGN.md §S2.
//!
//! Pure: an [`Instance`] in, a [`BatchPlan`] out — no I/O, no clock, deterministic.
//!
//! ```text
//!  Instance ──► lower_bound ─────────────────────────────┐
//!     │                                                   ▼
//!     ├──► round_robin, weighted ──► best of them = upper end of the search
//!     ├──► uniform_lpt (a yardstick only: not the search's upper end)
//!     │                                                   │
//!     └──► bisect(lower, upper): probe M ──► pack(M) ─────┤  jobs longest first; per job
//!                    ▲  feasible / not        │           │  the fewest core-seconds that
//!                    └────────────────────────┘           │  end by M over core counts and
//!                                                         ▼  start-time / data-aware sets
//!          best probe ──► local search (improve.rs) ──► critical-path trimming (second.rs)
//!                                                         │  = the planner's own schedule
//!                                                         ▼
//!            validate every candidate ──► the best of planner and baselines (`chosen`)
//! ```
//!
//! The planner's own schedule is kept beside the chosen one (`planner_schedule`), so that it
//! can be measured against the baselines on its own; it never looks at the baselines'
//! schedules.
//!
//! The model (the course problem docs/DESIGN.md adopts): a job on `e ≤ 10` cores runs each at
//! `speed · g(e)`, `g(e) = 1 − α(e − 1)`; a core's time is the transfers of its remote
//! blocks plus the execution of all its blocks; a job's cores start together and are held
//! until its longest core ends; the makespan is the last finish.
//!
//! Where we depart from the patent's steps (docs/DESIGN.md §S2): the search
//! runs from our [`lower_bound`] to the best baseline's makespan rather than from "all
//! cores" to "one core per job" (one core per job is no upper bound when jobs outnumber
//! cores); it probes whole ticks of a grid so that it ends despite floating point
//! ([`bisect`]); a job is trimmed when it is placed and the critical chain again after all
//! are (see the `pack` and `second` modules); and the best probe's schedule is improved by
//! a local search over whole schedules (`improve`).

mod baseline;
mod bounds;
mod gen;
mod improve;
mod input;
mod model;
mod pack;
mod schedule;
mod search;
mod second;
mod trim;
mod uniform;
mod work;

#[cfg(test)]
mod tests;

pub use baseline::{round_robin, weighted};
pub use bounds::{job_bound, lower_bound};
pub use gen::{generate, GenParams, Shape};
pub use input::{parse, parse_json, parse_text, to_json, InputError};
pub use model::{
    decay, BatchJob, Block, CoreRef, Instance, InstanceError, MAX_CORES_PER_JOB, MAX_TOTAL_CORES,
};
pub use pack::{core_weight, DATA_EPSILON};
pub use schedule::{validate, BlockRead, CoreWork, Evaluation, JobPlan, Schedule, ScheduleError};
pub use search::{bisect, max_probes, SearchOutcome, GRID_TICKS};
pub use uniform::uniform_lpt;

use thiserror::Error;

/// Which schedule [`plan`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// The binary-search planner's own schedule.
    Planner,
    /// The round-robin baseline (the planner found nothing better).
    RoundRobin,
    /// The capacity-weighted baseline (the planner found nothing better).
    Weighted,
    /// The uniform-cores LPT baseline (the planner found nothing better).
    UniformLpt,
}

impl Chosen {
    /// The name used in output: `planner`, `round_robin`, `weighted`, `uniform_lpt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Chosen::Planner => "planner",
            Chosen::RoundRobin => "round_robin",
            Chosen::Weighted => "weighted",
            Chosen::UniformLpt => "uniform_lpt",
        }
    }
}

/// The baselines' makespans.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Baselines {
    /// Round-robin.
    pub round_robin: f64,
    /// Capacity-weighted.
    pub weighted: f64,
    /// Uniform cores, longest job first, best k (not the search's upper end).
    pub uniform_lpt: f64,
}

/// The planner's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPlan {
    /// The schedule returned: the best of the planner's and the baselines'.
    pub schedule: Schedule,
    /// Its makespan, as the validator computes it.
    pub makespan: f64,
    /// Whose schedule it is.
    pub chosen: Chosen,
    /// The lower bound.
    pub lower_bound: f64,
    /// The baselines' makespans.
    pub baselines: Baselines,
    /// The planner's own makespan, if any probe of the search was feasible.
    pub planner_makespan: Option<f64>,
    /// The planner's own schedule (the one `planner_makespan` measures), whether or not it
    /// was chosen.
    pub planner_schedule: Option<Schedule>,
    /// Probes of the binary search.
    pub probes: u32,
}

/// An internal inconsistency: a schedule built here failed validation.
#[derive(Debug, Error)]
#[error("bug: the {which} schedule failed validation ({error}); please report it with the input")]
pub struct PlanError {
    /// Which schedule.
    pub which: &'static str,
    /// What the validator said.
    pub error: ScheduleError,
}

fn check(inst: &Instance, s: &Schedule, which: &'static str) -> Result<f64, PlanError> {
    validate(inst, s)
        .map(|e| e.makespan)
        .map_err(|error| PlanError { which, error })
}

/// Plans `inst` (docs/DESIGN.md §S2): binary search on the makespan between the lower bound and
/// the better of round-robin and weighted, then returns the best schedule seen, every
/// baseline included. The uniform-LPT baseline is a candidate but not the search's upper end,
/// so the planner's own schedule is the same with or without it.
pub fn plan(inst: &Instance) -> Result<BatchPlan, PlanError> {
    let lower = lower_bound(inst);
    let rr = round_robin(inst);
    let rr_ms = check(inst, &rr, "round-robin")?;
    let w = weighted(inst);
    let w_ms = check(inst, &w, "weighted")?;
    let lpt = uniform_lpt(inst);
    let lpt_ms = check(inst, &lpt, "uniform-LPT")?;
    let upper = rr_ms.min(w_ms);

    // Ticks of upper / GRID_TICKS: the grid ends at the upper bound, starts at or below the
    // lower bound.
    let quantum = upper / GRID_TICKS as f64;
    let low_tick = ((lower / quantum).floor() as u64).min(GRID_TICKS);
    let packer = pack::Packer::new(inst);
    let mut own: Option<(Schedule, f64)> = None;
    let mut bug = None;
    let outcome = bisect(low_tick, GRID_TICKS, |tick| {
        let Some(s) = packer.pack(tick as f64 * quantum) else {
            return false;
        };
        match check(inst, &s, "planner") {
            Ok(ms) => {
                if own.as_ref().is_none_or(|(_, best)| ms < *best) {
                    own = Some((s, ms));
                }
                true
            }
            Err(e) => {
                bug.get_or_insert(e);
                false
            }
        }
    });
    if let Some(e) = bug {
        return Err(e);
    }

    let (own_s, own_ms) = refine(inst, &packer, own.map(|(s, _)| s))?;
    let planner_makespan = Some(own_ms);
    let planner_schedule = Some(own_s.clone());
    let own = Some((own_s, own_ms));
    // The planner wins ties: its schedule uses the fewest cores that meet the makespan.
    let mut best = (rr, rr_ms, Chosen::RoundRobin);
    if w_ms < best.1 {
        best = (w, w_ms, Chosen::Weighted);
    }
    if lpt_ms < best.1 {
        best = (lpt, lpt_ms, Chosen::UniformLpt);
    }
    if let Some((s, ms)) = own {
        if ms <= best.1 {
            best = (s, ms, Chosen::Planner);
        }
    }
    Ok(BatchPlan {
        schedule: best.0,
        makespan: best.1,
        chosen: best.2,
        lower_bound: lower,
        baselines: Baselines {
            round_robin: rr_ms,
            weighted: w_ms,
            uniform_lpt: lpt_ms,
        },
        planner_makespan,
        planner_schedule,
        probes: outcome.probes,
    })
}

/// The planner's own schedule after the search: the local search over whole schedules
/// started from the best probe's schedule (or, if no probe was feasible, from jobs longest
/// first on capacity-weighted core counts), the better of the two, then critical-path
/// trimming (docs/DESIGN.md §S2.5, §S2.6).
fn refine(
    inst: &Instance,
    packer: &pack::Packer,
    probe: Option<Schedule>,
) -> Result<(Schedule, f64), PlanError> {
    let probe = probe.and_then(|s| improve::Built::from_schedule(inst, &s));
    let genome = match &probe {
        Some(b) => b.genome(),
        None => {
            let total: f64 = inst.jobs().iter().map(|j| j.estimate()).sum();
            let t = inst.total_cores() as f64;
            improve::Genome {
                order: packer.lpt_order().to_vec(),
                cores: (0..inst.jobs().len())
                    .map(|j| {
                        let share = (t * inst.jobs()[j].estimate() / total).round() as usize;
                        share.clamp(1, packer.most(j))
                    })
                    .collect(),
                rank: vec![0; inst.jobs().len()],
            }
        }
    };
    let (_, searched, _) = improve::local_search(packer, genome, improve::PLACEMENT_BUDGET);
    let best = match probe {
        Some(p) if !searched.beats(&p) => p,
        _ => searched,
    };
    let (best, _) = second::trim_critical(packer, best);
    let s = best.to_schedule(inst);
    let ms = check(inst, &s, "planner")?;
    Ok((s, ms))
}
