//! Who may send which client request (docs/CONTRACT.md, "Security"; the table is
//! docs/SECURITY.md).
//!
//! On a secured master the caller is the user of the request's API token when it carries
//! one (a token decides, whatever certificate the connection has); else the identity its
//! client certificate carries: a `client` certificate names a user (`root` is the
//! administrator, as in CockroachDB); a master certificate is a peer master
//! (administrator); a slave certificate may only read. On an `--insecure` master every
//! caller is trusted, as before.
//!
//! Rules: a **user** submits only as itself and cancels or reads the logs of its own jobs;
//! an **operator** also drains and acts on every job; an **admin** also changes members,
//! the priority configuration and tokens, and runs benchmark and fault requests. Denials answer
//! `permission denied: ...` (exit 3, HTTP 403); no credentials answer `Unauthenticated`
//! (exit 3, HTTP 401). Every denial is logged.

use hetsched_common::certs::{Identity, Role};
use hetsched_common::protocol::{ClientRequest, ErrorKind, ErrorReply, SlaveRequest};
use hetsched_common::wire::Peer;
use hetsched_common::{JobId, TaskId};
use hetsched_master_core::state::ClusterState;

/// The client certificate name that is the cluster administrator.
pub const ROOT_USER: &str = "root";

/// What a caller may do: a token's role, or the level a certificate gives.
pub use hetsched_common::protocol::TokenRole as Level;

/// An authenticated caller (or everyone, on an insecure master).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Insecure master: trusted, acts as any user.
    Trusted,
    /// A named caller with a level.
    Known {
        /// User name.
        name: String,
        /// What it may do.
        level: Level,
    },
}

/// The caller a verified certificate identity is, or why there is none.
pub(super) fn caller_by_certificate(identity: Option<&Identity>) -> Result<Caller, ErrorReply> {
    match identity {
        Some(i) => Ok(Caller::Known {
            name: i.name.clone(),
            level: match i.role {
                Role::Master => Level::Admin,
                Role::Client if i.name == ROOT_USER => Level::Admin,
                Role::Client | Role::Slave => Level::User,
            },
        }),
        None => Err(ErrorReply::new(
            ErrorKind::Unauthenticated,
            "permission denied: no credentials: give a token (HETSCHED_TOKEN or --token) or \
             a client certificate (HETSCHED_CERTS_DIR with client.USER.crt)",
        )),
    }
}

/// Most verified tokens remembered; the cache starts over beyond it.
const TOKEN_CACHE_CAP: usize = 4096;

/// Tokens whose secret was verified, with the stored hash they matched: a request with a
/// known token costs one map look-up, not a hash (docs/SECURITY.md). A revoked or expired
/// token is refused anyway, since the state is read on every request.
pub type TokenCache = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>;

fn invalid_token() -> ErrorReply {
    ErrorReply::new(
        ErrorKind::Unauthenticated,
        "permission denied: the token is unknown, revoked or expired",
    )
}

/// Fits a request to its caller before it is authorized: a submission that names no user
/// (a CLI holding a token leaves it to the master) is the caller's (on an insecure master,
/// `anonymous`'s); a user's listing of jobs or tasks that names no user shows its own.
pub(super) fn scope_request(caller: &Caller, req: &mut ClientRequest) {
    if let Caller::Known {
        name,
        level: Level::User,
    } = caller
    {
        if let ClientRequest::Jobs { filter, .. } | ClientRequest::Tasks { filter, .. } = req {
            filter.user.get_or_insert_with(|| name.clone());
        }
        // Issue 53: a user's accounting is its own.
        match req {
            ClientRequest::AccountingHistory { filter, .. } => {
                filter.user.get_or_insert_with(|| name.clone());
            }
            ClientRequest::AccountingUsage { user, .. } => {
                user.get_or_insert_with(|| name.clone());
            }
            _ => {}
        }
    }
    let users: Vec<&mut String> = match req {
        ClientRequest::Submit { spec, .. } | ClientRequest::DryRun { spec } => {
            vec![&mut spec.user]
        }
        ClientRequest::SubmitBatch { batch, .. } => vec![&mut batch.user],
        ClientRequest::SubmitFlow { flow, .. } => {
            flow.steps.iter_mut().map(|s| &mut s.spec.user).collect()
        }
        _ => return,
    };
    for user in users.into_iter().filter(|u| u.is_empty()) {
        *user = match caller {
            Caller::Known { name, .. } => name.clone(),
            Caller::Trusted => "anonymous".into(),
        };
    }
}

/// Issue 55: binds a submission's idempotency key to the user it submits as, so that the
/// same key from two users names two requests (docs/CONTRACT.md, "HTTP API"); another
/// write's key to what it names (`cancel job-3`), so that one key on two targets names two
/// requests. Run once, on the leader, after [`scope_request`] named the user: a follower
/// forwards the request unbound. Automatic request ids pass unchanged.
pub(super) fn bind_idempotency_key(req: &mut ClientRequest) {
    use ClientRequest as R;
    let (request, scope) = match req {
        R::Submit { request, spec, .. } => (request, spec.user.clone()),
        R::SubmitBatch { request, batch } => (request, batch.user.clone()),
        R::SubmitFlow { request, flow } => (
            request,
            flow.steps
                .first()
                .map_or(String::new(), |s| s.spec.user.clone()),
        ),
        R::Cancel { request, job } => (request, format!("cancel {job}")),
        R::CancelTask { request, task } => (request, format!("cancel {task}")),
        R::CancelBatch { request, batch } => (request, format!("cancel batch-{batch}")),
        R::CancelFlow { request, flow } => (request, format!("cancel flow-{flow}")),
        R::Drain { request, node, .. } => (request, format!("drain {node}")),
        R::Undrain { request, node } => (request, format!("undrain {node}")),
        _ => return,
    };
    *request = request.scoped(&scope);
}

fn denied(why: String) -> ErrorReply {
    ErrorReply::new(
        ErrorKind::PermissionDenied,
        format!("permission denied: {why}"),
    )
}

/// The level a request needs, and the job whose owner may send it with less.
enum Need {
    Any,
    Level(Level),
    SubmitAs(String),
    ReadsOf(String),
    OwnJob(JobId),
    OwnTask(TaskId),
    OwnBatch(u64),
    OwnFlow(u64),
}

fn need(req: &ClientRequest) -> Need {
    use ClientRequest as R;
    match req {
        R::AclBootstrap | R::CreateToken { .. } | R::Tokens | R::RevokeToken { .. } => {
            Need::Level(Level::Admin)
        }
        R::Submit { spec, .. } => Need::SubmitAs(spec.user.clone()),
        R::DryRun { spec } => Need::SubmitAs(spec.user.clone()),
        R::SubmitBatch { batch, .. } => Need::SubmitAs(batch.user.clone()),
        R::CancelBatch { batch, .. } => Need::OwnBatch(*batch),
        // Every step must be the caller's own (apply refuses a flow of two users).
        R::SubmitFlow { flow, .. } => {
            let first = flow.steps.first().map(|s| s.spec.user.as_str());
            let other = flow.steps.iter().find(|s| Some(s.spec.user.as_str()) != first);
            Need::SubmitAs(other.map_or(first.unwrap_or_default(), |s| &s.spec.user).to_string())
        }
        R::Flow { flow, .. } | R::CancelFlow { flow, .. } => Need::OwnFlow(*flow),
        R::Cancel { job, .. } | R::WaitJob { job, .. } => Need::OwnJob(*job),
        R::CancelTask { task, .. } => Need::OwnTask(*task),
        R::Logs { task, .. } | R::Calls { task } | R::Explain { task } => Need::OwnTask(*task),
        // A user sees its own jobs: one named job must be its own, and a listing another
        // user's is refused ([`scope_request`] narrows an unfiltered listing to its own).
        R::Jobs { filter, .. } => match (&filter.job, &filter.user) {
            (Some(job), _) => Need::OwnJob(*job),
            (None, Some(user)) => Need::ReadsOf(user.clone()),
            (None, None) => Need::Any,
        },
        R::Tasks { job, filter, .. } => match (job.or(filter.job), &filter.user) {
            (Some(job), _) => Need::OwnJob(job),
            (None, Some(user)) => Need::ReadsOf(user.clone()),
            (None, None) => Need::Any,
        },
        R::Batch { batch, .. } => Need::OwnBatch(*batch),
        // Issue 53: a user reads its own records (narrowed by [`scope_request`]), an
        // operator everyone's.
        R::AccountingHistory { filter, .. } => match (&filter.job, &filter.user) {
            (Some(job), _) => Need::OwnJob(*job),
            (None, Some(user)) => Need::ReadsOf(user.clone()),
            (None, None) => Need::Any,
        },
        R::AccountingUsage { user, .. } => match user {
            Some(user) => Need::ReadsOf(user.clone()),
            None => Need::Any,
        },
        R::Status { .. }
        | R::Nodes { .. }
        | R::Members { .. }
        | R::PriorityConfig { .. }
        // Standing against quotas is public, as Slurm's `sshare` shows every user.
        | R::Usage
        | R::Profiles { .. } => Need::Any,
        R::Drain { .. } | R::Undrain { .. } => Need::Level(Level::Operator),
        R::AddMember { .. }
        | R::RemoveMember { .. }
        | R::TransferLeader { .. }
        | R::SetPriorityConfig { .. }
        | R::BenchPropose { .. }
        | R::BenchCheck { .. }
        | R::SetFaults(_)
        | R::SetBugs(_)
        | R::ExportLog { .. } => Need::Level(Level::Admin),
    }
}

/// A short name of a request, for denials.
fn what(req: &ClientRequest) -> String {
    let dbg = format!("{req:?}");
    dbg.split([' ', '(', '{'])
        .next()
        .unwrap_or("request")
        .to_lowercase()
}

/// The authorization decisions of one request (docs/SECURITY.md): who the caller is and
/// whether it may send what it sent. Borrows the applied state (token records, the owners
/// of jobs, tasks, batches and nodes), the verified-token cache and the time; no I/O.
pub(super) struct Authz<'a> {
    state: &'a ClusterState,
    tokens: &'a TokenCache,
    now_ms: u64,
}

impl<'a> Authz<'a> {
    /// Decisions against `state` at `now_ms`, remembering verified tokens in `tokens`.
    pub fn new(state: &'a ClusterState, tokens: &'a TokenCache, now_ms: u64) -> Self {
        Self {
            state,
            tokens,
            now_ms,
        }
    }

    /// The caller a peer is: everyone trusted on an insecure master; else the user of the
    /// request's token when it carries one (a token decides over the certificate), else
    /// the certificate's identity.
    pub fn caller(&self, peer: &Peer) -> Result<Caller, ErrorReply> {
        if !peer.secured {
            return Ok(Caller::Trusted);
        }
        match &peer.token {
            Some(t) => self.token_caller(t),
            None => caller_by_certificate(peer.identity.as_ref()).inspect_err(|e| {
                tracing::warn!(%peer, error = %e.message, "request without credentials refused");
            }),
        }
    }

    /// The user and role of an API token, or `Unauthenticated` (logged).
    pub fn token_caller(&self, token: &str) -> Result<Caller, ErrorReply> {
        let refused = |why: &str| {
            tracing::warn!(%why, "request with a bad token refused");
            invalid_token()
        };
        let (accessor, secret) =
            hetsched_common::tokens::parse(token).ok_or_else(|| refused("not a token"))?;
        let rec = self
            .state
            .acl()
            .tokens
            .get(accessor)
            .ok_or_else(|| refused("unknown or revoked"))?;
        if !rec.valid_at(self.now_ms) {
            return Err(refused("expired"));
        }
        let mut cache = match self.tokens.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if cache.get(token) != Some(&rec.hash) {
            if !hetsched_common::tokens::verify(&rec.salt, &rec.hash, secret) {
                return Err(refused("wrong secret"));
            }
            if cache.len() >= TOKEN_CACHE_CAP {
                cache.clear();
            }
            cache.insert(token.to_string(), rec.hash.clone());
        }
        Ok(Caller::Known {
            name: rec.user.clone(),
            level: rec.role,
        })
    }

    /// Admits `req` from `caller`, or says why not (and logs it).
    pub fn authorize(&self, caller: &Caller, req: &ClientRequest) -> Result<(), ErrorReply> {
        let Caller::Known { name, level } = caller else {
            return Ok(());
        };
        // Issue 51: following another user's job needs read access to it.
        if let Some(why) =
            super::dependency_checks::dependency_refusal(self.state, name, *level, req)
        {
            tracing::warn!(caller = %name, request = %what(req), %why, "request denied");
            return Err(denied(why));
        }
        let refusal = match need(req) {
            Need::Any => None,
            Need::Level(l) if *level >= l => None,
            Need::Level(l) => Some(format!(
                "{} needs the {} role; {name} has {}",
                what(req),
                l.as_str(),
                level.as_str()
            )),
            Need::SubmitAs(user) if *level >= Level::Operator || user == *name => None,
            Need::SubmitAs(user) => {
                Some(format!("{name} may submit only as itself, not as {user:?}"))
            }
            Need::ReadsOf(user) if *level >= Level::Operator || user == *name => None,
            Need::ReadsOf(user) => Some(format!(
                "{name} sees only its own jobs, not those of {user:?}"
            )),
            _ if *level >= Level::Operator => None,
            Need::OwnJob(job) => owner_refusal(name, req, self.job_owner(job)),
            Need::OwnTask(task) => owner_refusal(name, req, self.task_owner(task)),
            Need::OwnBatch(batch) => owner_refusal(name, req, self.batch_owner(batch)),
            Need::OwnFlow(flow) => owner_refusal(name, req, self.flow_owner(flow)),
        };
        match refusal {
            None => Ok(()),
            Some(why) => {
                tracing::warn!(caller = %name, request = %what(req), %why, "request denied");
                Err(denied(why))
            }
        }
    }

    fn job_owner(&self, job: JobId) -> Option<String> {
        self.state.job(job).map(|j| j.spec.user.clone())
    }

    /// A batch's jobs all carry the submitting user, so its first job names the owner.
    fn batch_owner(&self, batch: u64) -> Option<String> {
        let job = *self.state.batch_book().batches.get(&batch)?.jobs.first()?;
        self.job_owner(job)
    }

    /// A flow records the user whose jobs its steps are.
    fn flow_owner(&self, flow: u64) -> Option<String> {
        self.state.flow_book().get(flow).map(|f| f.user.clone())
    }

    fn task_owner(&self, task: TaskId) -> Option<String> {
        self.job_owner(self.state.task(task)?.job)
    }

    /// A slave request's name check: a slave registers and reports only as the name in its
    /// certificate.
    pub fn check_slave_name(&self, peer: &Peer, req: &SlaveRequest) -> Result<(), ErrorReply> {
        let Some(id) = peer.identity.as_ref().filter(|_| peer.secured) else {
            return Ok(());
        };
        let claimed = match req {
            SlaveRequest::Register { name, .. } => Some(name.as_str()),
            other => other
                .node()
                .and_then(|n| self.state.node(n))
                .map(|n| n.name.as_str()),
        };
        match claimed {
            Some(c) if c != id.name => {
                tracing::warn!(peer = %peer, claimed = %c, "slave request under another name denied");
                Err(denied(format!(
                    "the slave certificate of {:?} cannot act as node {c:?}",
                    id.name
                )))
            }
            _ => Ok(()),
        }
    }
}

fn owner_refusal(name: &str, req: &ClientRequest, owner: Option<String>) -> Option<String> {
    match owner {
        // Unknown jobs answer "not found" as before: only a known owner can differ.
        None => None,
        Some(o) if o == name => None,
        Some(o) => Some(format!(
            "{} on a job of {o:?}: {name} may act only on its own jobs",
            what(req)
        )),
    }
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
