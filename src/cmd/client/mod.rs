//! Client commands: submit, cancel, status, jobs, tasks, nodes, members, explain.
//!
//! Requests go first to the leader the last command reached (`leader_hint.rs`), then to the
//! masters in `--masters` order; a follower's `NotLeader` answer sends the
//! client to the leader it names; unreachable masters and elections are retried until a
//! deadline (`HETSCHED_CLIENT_TIMEOUT_MS`, default 15 s), after which the command exits 5. A
//! submit keeps one client request id across retries, so it applies at most once. Every
//! error carries its exit code ([`super::exit`]).
//!
//! `args.rs` holds the command lines, `call.rs` the requests (leader following itself is
//! `hetsched_common::leader`; `leader_hint.rs` remembers the last leader between commands),
//! `spec.rs` the submitted spec, `actions.rs` the commands that
//! change things, `listings.rs` the ones that read and print, `explain.rs` why a task waits.

mod accounting;
mod actions;
mod args;
mod call;
mod explain;
mod leader_hint;
mod listings;
mod spec;

pub use accounting::{history, usage, HistoryArgs, UsageArgs};
pub use actions::{cancel, members, submit};
pub use args::{
    CancelArgs, JobsArgs, ListArgs, MembersArgs, ReadFlags, StatusArgs, SubmitArgs, TasksArgs,
};
pub use call::{block_on, call, keyed_request_id, request_id, short};
pub use explain::{explain, ExplainArgs};
pub use listings::{jobs, nodes, status, tasks};
pub use spec::{default_user, read_job_file};
