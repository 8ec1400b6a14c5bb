//! Issue 51 at the edge: a submission's dependencies checked before it is proposed, with
//! the exit codes of docs/CONTRACT.md — a job it follows that is unknown or was collected
//! is `not found` (exit 4, "collected" saying so), `--after-each` on a job with another
//! number of tasks is bad input (exit 2), and a job of another user needs read access to
//! it (exit 3, from [`dependency_refusal`] as the request is authorized). `apply` checks
//! the first two again (the state may move between here and the commit). Both are read
//! from the applied state: [`ClientJobs`](super::client_jobs::ClientJobs) and
//! [`Authz`](super::authz::Authz) call them.

use super::reply::not_found;
// `authz::Level` is this type; named at its source so that `authz` (which calls in here)
// and this file do not import each other.
use hetsched_common::protocol::TokenRole as Level;
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply};
use hetsched_common::{ClientRequestId, JobSpec};
use hetsched_master_core::state::{ClusterState, DependencyRefusal};

/// Refuses a submission whose dependencies cannot be recorded (a retried request that
/// already applied is never refused).
pub(super) fn check_dependencies(
    s: &ClusterState,
    request: ClientRequestId,
    spec: &JobSpec,
) -> Result<(), ErrorReply> {
    if !spec.has_dependencies() {
        return Ok(());
    }
    if s.request_applied(request) {
        return Ok(());
    }
    match s.check_dependencies(spec) {
        Ok(()) => Ok(()),
        Err(r @ DependencyRefusal::Missing(_)) => Err(not_found(r.to_string())),
        Err(r @ DependencyRefusal::EachCount(_)) => {
            Err(ErrorReply::new(ErrorKind::Invalid, r.to_string()))
        }
    }
}

/// Why `name` (at `level`) may not submit `req`: it follows a job of another user it may
/// not read (a user reads its own jobs; an operator or admin every job). Unknown jobs are
/// left to [`check_dependencies`] (not found).
pub(super) fn dependency_refusal(
    s: &ClusterState,
    name: &str,
    level: Level,
    req: &ClientRequest,
) -> Option<String> {
    let specs: Vec<&JobSpec> = match req {
        ClientRequest::Submit { spec, .. } | ClientRequest::DryRun { spec } => vec![spec],
        // A flow's steps follow jobs outside it by their own keys alone.
        ClientRequest::SubmitFlow { flow, .. } => flow.steps.iter().map(|s| &s.spec).collect(),
        _ => return None,
    };
    if level >= Level::Operator {
        return None;
    }
    specs
        .iter()
        .flat_map(|spec| spec.dependencies())
        .find_map(|(kind, up)| {
            let owner = &s.job(up)?.spec.user;
            (owner != name).then(|| {
                format!(
                    "{} {up}: it is a job of {owner:?}, and {name} may read only its own jobs",
                    kind.flag()
                )
            })
        })
}
