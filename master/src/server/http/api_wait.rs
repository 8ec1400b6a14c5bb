//! Issue 55, waiting without polling: `GET /v1/jobs/{id}/wait?timeout=30s` (a long poll,
//! answered with the job when it ends or the timeout passed) and `GET /v1/events?since=SEQ`
//! (server-sent events of job and task state changes, SEQ the log index; a SEQ older than
//! this master keeps is 410 with the oldest it has; a user's stream carries only its own
//! jobs).

use super::api::{parse_id, query, the_job};
use super::{https, ApiError, Ctx};
use crate::http_input::{EventsQuery, WaitQuery};
use crate::server::authz::{Caller, Level};
use crate::server::events::{Event, Journal};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hetsched_common::protocol::ClientRequest;
use hetsched_common::JobId;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A comment line on an idle stream this often keeps proxies from closing it.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /v1/jobs/{id}/wait?timeout=30s`: the job as `GET /v1/jobs/{id}` shows it, once it
/// ended or `timeout` (default 30s, at most 10m) passed; its `state` says which.
pub(super) async fn wait(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let q: WaitQuery = query(q)?;
    let job: JobId = parse_id("job", &id)?;
    let timeout_ms = q.timeout_ms()?;
    let req = ClientRequest::WaitJob {
        job,
        timeout_ms,
        change: false,
    };
    the_job(job, ctx.ask(req).await?)
}

fn lock(j: &Mutex<Journal>) -> MutexGuard<'_, Journal> {
    match j.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The user whose jobs alone a caller's stream carries (`None`: every job).
fn only_user(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Known {
            name,
            level: Level::User,
        } => Some(name.clone()),
        _ => None,
    }
}

/// `410 Gone` with the oldest `since` still answered.
fn gone(since: u64, oldest: u64) -> Response {
    let error = json!({
        "kind": "gone",
        "message": format!("events after {since} are no longer kept: re-read the state and resume with since={oldest}"),
        "oldest": oldest,
    });
    (StatusCode::GONE, Json(json!({ "error": error }))).into_response()
}

/// One event as the stream writes it.
fn sse(e: &Event) -> String {
    let data = serde_json::to_string(e).unwrap_or_default();
    format!("id: {}\nevent: {}\ndata: {data}\n\n", e.seq, e.kind)
}

/// Where a stream stands.
struct Stream {
    journal: Arc<Mutex<Journal>>,
    applied: tokio::sync::watch::Receiver<u64>,
    cursor: u64,
    user: Option<String>,
    /// Whether the opening `: since N` line went out.
    opened: bool,
    done: bool,
}

impl Stream {
    /// What to send next: the events after the cursor, `gone` once they are no longer
    /// kept, or a keep-alive after a quiet while.
    async fn next(&mut self) -> Option<Bytes> {
        if !self.opened {
            // Where the stream starts, for a client that must resume before any event.
            self.opened = true;
            return Some(Bytes::from(format!(": since {}\n\n", self.cursor)));
        }
        loop {
            if self.done {
                return None;
            }
            let got = {
                let j = lock(&self.journal);
                let user = self.user.as_deref();
                let visible = |e: &Event| user.is_none_or(|u| e.user == u);
                (j.applied(), j.since(self.cursor, usize::MAX, visible))
            };
            match got {
                (_, Err(oldest)) => {
                    self.done = true;
                    let data = json!({ "oldest": oldest });
                    return Some(Bytes::from(format!("event: gone\ndata: {data}\n\n")));
                }
                (applied, Ok(events)) => {
                    self.cursor = self.cursor.max(applied);
                    if !events.is_empty() {
                        let text: String = events.iter().map(sse).collect();
                        return Some(Bytes::from(text));
                    }
                }
            }
            match tokio::time::timeout(KEEP_ALIVE, self.applied.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => self.done = true,
                Err(_) => return Some(Bytes::from_static(b": keep-alive\n\n")),
            }
        }
    }
}

/// `GET /v1/events?since=SEQ`: `text/event-stream`, one event per job or task state change
/// (`id:` the log index, `event:` `job` or `task`, `data:` `{"seq", "kind", "job", "task",
/// "user", "state"}`); without `since` (or `Last-Event-ID`) from now on. The stream opens
/// with the comment line `: since N` (where it starts).
pub(super) async fn events(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: EventsQuery = query(q)?;
    let caller = match &ctx.caller {
        Some(c) => c.clone(),
        None => https::caller(ctx.secured)?,
    };
    let journal = ctx.master.events.clone();
    let last_id = (headers.get("last-event-id"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (since, applied) = {
        let j = lock(&journal);
        let since = q.since.or(last_id).unwrap_or_else(|| j.applied());
        if let Err(oldest) = j.since(since, 0, |_| true) {
            return Ok(gone(since, oldest));
        }
        (since, j.subscribe())
    };
    let start = Stream {
        journal,
        applied,
        cursor: since,
        user: only_user(&caller),
        opened: false,
        done: false,
    };
    let stream = futures::stream::unfold(start, |mut st| async move {
        let bytes = st.next().await?;
        Some((Ok::<_, std::io::Error>(bytes), st))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}
