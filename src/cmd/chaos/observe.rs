//! What a run records and reads back: the shared, timestamped history ([`Recorder`]), and
//! every request that polls the masters — statuses, the leader, task listings, this run's
//! jobs, the final state, and each master's committed log through its admin listener.
//! Every call is bounded in time: a master that is killed or paused must not hold up the run.

use super::super::client::{call, short};
use hetsched_chaos::history::{Event, FinalTask, MasterView};
use hetsched_chaos::replay::{LogItem, MasterLog};
use hetsched_chaos::report::TimelineEntry;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ListFilter, StatusInfo};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shared, timestamped history of one run.
#[derive(Clone)]
pub(super) struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
    timeline: Arc<Mutex<Vec<TimelineEntry>>>,
}

impl Recorder {
    /// An empty history whose clock starts now.
    pub(super) fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Arc::new(Mutex::new(Vec::new())),
            timeline: Arc::new(Mutex::new(Vec::new())),
        }
    }
    pub(super) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    pub(super) fn push(&self, e: Event) {
        if let Ok(mut v) = self.events.lock() {
            v.push(e);
        }
    }
    /// Records a fault or another step of the run, in the history and the report's timeline.
    pub(super) fn note(&self, event: String) {
        let t_ms = self.now_ms();
        tracing::info!("{event}");
        self.push(Event::Fault {
            t_ms,
            fault: event.clone(),
        });
        if let Ok(mut v) = self.timeline.lock() {
            v.push(TimelineEntry { t_ms, event });
        }
    }
    /// The history so far.
    pub(super) fn events(&self) -> Vec<Event> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }
    /// The report's timeline so far.
    pub(super) fn timeline(&self) -> Vec<TimelineEntry> {
        self.timeline.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// One master's own status, or `None` if it does not answer within 1.5 s (killed, paused).
pub(super) async fn status_of(addr: &str) -> Option<StatusInfo> {
    let addrs = [addr.to_string()];
    let req = call(&addrs, ClientRequest::Status { stale: true }, true);
    match tokio::time::timeout(Duration::from_millis(1500), req).await {
        Ok(Ok(ClientResponse::Status(s))) => Some(s),
        _ => None,
    }
}

/// `call`, bounded by `limit` (a stalled call must not hold up the nemesis).
async fn call_within(
    masters: &[String],
    req: ClientRequest,
    limit: Duration,
) -> Option<ClientResponse> {
    match tokio::time::timeout(limit, call(masters, req, false)).await {
        Ok(Ok(r)) => Some(r),
        _ => None,
    }
}

/// The current leader's index, as any master answering says.
pub(super) async fn leader_index(masters: &[String]) -> Option<usize> {
    for addr in masters {
        if let Some(s) = status_of(addr).await {
            if let Some(l) = s.leader {
                return (l.0 as usize).checked_sub(1).filter(|i| *i < masters.len());
            }
        }
    }
    None
}

/// The leader's index once one is known, or `None` after `limit`.
pub(super) async fn wait_leader(masters: &[String], limit: Duration) -> Option<usize> {
    let end = Instant::now() + limit;
    loop {
        if let Some(l) = leader_index(masters).await {
            return Some(l);
        }
        if Instant::now() > end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Samples every master's view (leadership claims) and the leader's task listing; `ours`
/// (attached) keeps only the tasks of the jobs this run submitted.
pub(super) async fn observe(
    masters: &[String],
    rec: &Recorder,
    last: &mut BTreeMap<u64, (String, u32)>,
    ours: Option<&BTreeSet<u64>>,
) {
    for addr in masters {
        if let Some(s) = status_of(addr).await {
            if s.role == "leader" {
                rec.push(Event::Leader {
                    t_ms: rec.now_ms(),
                    master: s.master_id.0,
                    term: s.term,
                });
            }
        }
    }
    let tasks_req = ClientRequest::Tasks {
        stale: false,
        job: None,
        filter: ListFilter::default(),
    };
    let limit = Duration::from_secs(3);
    if let Some(ClientResponse::Tasks(tasks)) = call_within(masters, tasks_req, limit).await {
        for t in tasks {
            if ours.is_some_and(|o| !o.contains(&t.job_id.0)) {
                continue;
            }
            let state = task_state(&t.state);
            let now = (state.clone(), t.attempt);
            if last.get(&t.id.0) != Some(&now) {
                rec.push(Event::Task {
                    t_ms: rec.now_ms(),
                    task: t.id.0,
                    job: t.job_id.0,
                    state,
                    attempt: t.attempt,
                });
                last.insert(t.id.0, now);
            }
        }
    }
}

/// Jobs this run's submits were acknowledged with.
pub(super) fn acked_jobs(rec: &Recorder) -> BTreeSet<u64> {
    rec.events
        .lock()
        .map(|v| {
            v.iter()
                .filter_map(|e| match e {
                    Event::Ack { job, .. } => Some(*job),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Jobs whose name starts with `prefix` (this run's, including submits whose answer was lost).
pub(super) async fn jobs_named(masters: &[String], prefix: &str) -> BTreeSet<u64> {
    let req = ClientRequest::Jobs {
        stale: false,
        filter: ListFilter::default(),
    };
    match call_within(masters, req, Duration::from_secs(10)).await {
        Some(ClientResponse::Jobs(jobs)) => jobs
            .into_iter()
            .filter(|j| j.name.starts_with(prefix))
            .map(|j| j.id.0)
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// Reads one master's whole applied log through its admin listener, page by page.
pub(super) async fn export_log(admin: &str, master: u64) -> anyhow::Result<MasterLog> {
    let addr = [admin.to_string()];
    let mut from = 1u64;
    let mut items = Vec::new();
    // A bound on pages, so a master that never reaches the end cannot hold the run forever.
    for _ in 0..100_000 {
        let req = ClientRequest::ExportLog { from, max_bytes: 0 };
        let page = match tokio::time::timeout(Duration::from_secs(10), call(&addr, req, true)).await
        {
            Ok(Ok(ClientResponse::LogPage(p))) => p,
            Ok(Ok(other)) => anyhow::bail!("unexpected answer: {}", short(&other)),
            Ok(Err(e)) => return Err(e),
            Err(_) => anyhow::bail!("no answer within 10 s"),
        };
        if let Some(snap) = page.snapshot {
            items.push(LogItem::Snapshot {
                index: snap.index,
                state: snap.state.into_vec(),
            });
        }
        items.extend(page.entries.into_iter().map(|e| LogItem::Command {
            index: e.index,
            bytes: e.command.into_vec(),
        }));
        if page.next > page.applied {
            return Ok(MasterLog { master, items });
        }
        if page.next <= from {
            anyhow::bail!("the export did not move past index {from}");
        }
        from = page.next;
    }
    anyhow::bail!("more than 100000 pages")
}

fn task_state(s: &hetsched_common::TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Every task as the leader lists it, for the final state.
pub(super) async fn final_tasks(masters: &[String]) -> anyhow::Result<Vec<FinalTask>> {
    match call(
        masters,
        ClientRequest::Tasks {
            stale: false,
            job: None,
            filter: ListFilter::default(),
        },
        false,
    )
    .await?
    {
        ClientResponse::Tasks(t) => Ok(t
            .into_iter()
            .map(|t| FinalTask {
                task: t.id.0,
                job: t.job_id.0,
                state: task_state(&t.state),
                attempt: t.attempt,
                preemptions: t.preemptions,
            })
            .collect()),
        other => anyhow::bail!("unexpected answer: {}", short(&other)),
    }
}

/// One master's applied index and state hash, as its status gives them.
pub(super) fn view_of(s: &StatusInfo) -> MasterView {
    MasterView {
        master: s.master_id.0,
        applied_index: s.applied_index,
        state_hash: s.state_hash.clone(),
    }
}

/// Each master's applied index and hash, once they agree on the index (or `limit` passes).
pub(super) async fn master_views(masters: &[String], limit: Duration) -> Vec<MasterView> {
    let end = Instant::now() + limit;
    loop {
        let mut views = Vec::new();
        for addr in masters {
            if let Some(s) = status_of(addr).await {
                views.push(view_of(&s));
            }
        }
        let agreed = views.len() == masters.len()
            && views
                .windows(2)
                .all(|w| w[0].applied_index == w[1].applied_index);
        if agreed || Instant::now() > end {
            return views;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
