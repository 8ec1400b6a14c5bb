#![deny(missing_docs)]

//! hetsched's scheduling core: everything the masters decide, as plain Rust with no sockets,
//! clocks, threads or files, so that the same Raft log gives the same state on every replica
//! and every decision can be tested without a runtime. See `docs/DESIGN.md` for the map from
//! each seed mechanism (S0.1…S4.7) to the module here that implements it.
//!
//! - [`state`]: the replicated state machine, `ClusterState::apply(Command) -> Outcome`.
//! - [`sched`]: the scheduler as stages (queue → engine choice → feasibility → selection →
//!   preemption), pools, DRF, stealing and the CPU-count search; the DistBuckets index
//!   is the `hetsched-index` crate, re-exported as `sched::index`.
//! - [`duties`]: the leader's duties as a pure engine (events in, effects out).
//! - [`forward`]: which peer a slave should forward an API call to.
//! - [`plan`]: batch submission, and the makespan planner for data-local batch jobs (the
//!   `hetsched-planner` crate, re-exported as `plan::makespan`).
//! - [`sim`]: the offline simulator that replays traces through the real scheduler.
//! - [`policy`]: what `apply` and the scheduler both need (quota priority, queue kinds),
//!   kept below `state` so that no import goes back up from the log to the scheduler.
//!
//! The crate's normal dependencies include no async runtime, no network, no storage:
//! the compiler, not a comment, keeps the core pure.

pub mod duties;
pub mod forward;
pub mod plan;
pub mod policy;
pub mod sched;
pub mod sim;
pub mod state;

pub use duties::{DutiesCore, DutyEvent, Effect};
pub use sched::{IndexedScheduler, Scheduler};
pub use state::{ClusterState, Command, CommandEnvelope, Outcome};
