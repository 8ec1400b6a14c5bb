//! API v1 routes: the CLI's requests over HTTP, answered with the CLI's `--json` objects.

use super::{ApiError, Ctx, Route};
use crate::http_input::{self, ListQuery, LogsQuery, StaleQuery, SubmitBody};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Json;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ListFilter};
use hetsched_common::{Attempt, ClientRequestId, JobId, TaskId};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) fn routes() -> Vec<Route> {
    let r = |method, path, handler| Route {
        method,
        path,
        handler,
    };
    vec![
        r("POST", "/v1/jobs", post(submit)),
        r("GET", "/v1/jobs", get(jobs)),
        r("GET", "/v1/jobs/{id}", get(job)),
        r("DELETE", "/v1/jobs/{id}", delete(cancel)),
        r("POST", "/v1/flows", post(submit_flow)),
        r("GET", "/v1/flows/{id}", get(flow)),
        r("GET", "/v1/tasks", get(tasks)),
        r("GET", "/v1/tasks/{id}/logs", get(logs)),
        r("GET", "/v1/tasks/{id}/explain", get(explain)),
        r("GET", "/v1/usage", get(usage)),
        r("GET", "/v1/accounting/history", get(accounting_history)),
        r("GET", "/v1/accounting/usage", get(accounting_usage)),
        r("GET", "/v1/nodes", get(nodes)),
        r("POST", "/v1/nodes/{id}/drain", post(drain)),
        r("POST", "/v1/nodes/{id}/undrain", post(undrain)),
        r("GET", "/v1/status", get(status)),
        r("GET", "/v1/members", get(members)),
    ]
}

/// A fresh client request id; a client may pin one with the `Idempotency-Key` header (a
/// string of 1 to 64 visible ASCII bytes; a number is a key too) so that a retried POST
/// applies once: on a submit or a flow, the same key from the same user answers the first
/// job for 24 h (issue 55).
fn request_id(headers: &HeaderMap) -> Result<ClientRequestId, ApiError> {
    if let Some(v) = headers.get("idempotency-key") {
        let text = String::from_utf8_lossy(v.as_bytes());
        return ClientRequestId::from_key(text.trim()).map_err(|why| {
            ApiError::bad_input(
                format!("Idempotency-Key {text:?}: {why}"),
                Some("Idempotency-Key".into()),
            )
        });
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = super::super::now_ms()
        ^ (u64::from(std::process::id()) << 32)
        ^ NEXT
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    Ok(ClientRequestId::automatic(
        hetsched_common::rng::SplitMix64::new(seed).next_u64(),
    ))
}

pub(super) fn unexpected(r: &ClientResponse) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("unexpected answer: {r:?}"),
    )
}

/// Reads the query string (absent = empty) through the pure reader the fuzz targets drive.
pub(super) fn query<T: serde::de::DeserializeOwned>(raw: Option<String>) -> Result<T, ApiError> {
    Ok(http_input::query(raw.as_deref().unwrap_or(""))?)
}

pub(super) fn parse_id<T: std::str::FromStr<Err = hetsched_common::Error>>(
    what: &str,
    s: &str,
) -> Result<T, ApiError> {
    Ok(http_input::id(what, s)?)
}

/// `POST /v1/jobs`: a job spec file's schema in JSON (README, "Job spec files"), whose
/// `allow_unplaceable` is the CLI's `submit --allow-unplaceable`.
async fn submit(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let SubmitBody {
        spec,
        allow_unplaceable,
    } = http_input::submit_body(&body)?;
    let request = request_id(&headers)?;
    let r = ctx
        .ask(ClientRequest::Submit {
            request,
            spec,
            allow_unplaceable,
        })
        .await;
    metrics::histogram!("hetsched_master_submit_seconds", "via" => "http")
        .record(started.elapsed());
    match r? {
        ClientResponse::Submitted { job, tasks } => Ok((
            StatusCode::CREATED,
            [(header::LOCATION, format!("/v1/jobs/{}", job.get()))],
            Json(json!({ "job_id": job, "tasks": tasks.len() })),
        )
            .into_response()),
        other => Err(unexpected(&other)),
    }
}

/// `POST /v1/flows`: a flow file's schema in JSON; answered as `submit-flow --json`.
async fn submit_flow(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let flow = http_input::flow_body(&body)?;
    let request = request_id(&headers)?;
    match ctx.ask(ClientRequest::SubmitFlow { request, flow }).await? {
        ClientResponse::FlowSubmitted(f) => Ok((
            StatusCode::CREATED,
            [(header::LOCATION, format!("/v1/flows/{}", f.flow_id))],
            Json(json!(f)),
        )
            .into_response()),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/flows/{id}` (`3` or `flow-3`): as `flow N --json`.
async fn flow(State(ctx): State<Ctx>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let Some(flow) = id
        .strip_prefix("flow-")
        .unwrap_or(&id)
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
    else {
        return Err(ApiError::bad_input(
            format!("flow: {id:?} is not a flow (give N or flow-N)"),
            Some("flow".into()),
        ));
    };
    match ctx.ask(ClientRequest::Flow { stale: false, flow }).await? {
        ClientResponse::Flow(f) => Ok(Json(json!(f))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/jobs`.
async fn jobs(State(ctx): State<Ctx>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let q: ListQuery = query(q)?;
    let req = ClientRequest::Jobs {
        stale: q.stale,
        filter: q.filter().map_err(ApiError::from)?,
    };
    match ctx.ask(req).await? {
        ClientResponse::Jobs(j) => Ok(Json(json!(j))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/jobs/{id}`: the job as listed.
async fn job(State(ctx): State<Ctx>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let id: JobId = parse_id("job", &id)?;
    let req = ClientRequest::Jobs {
        stale: false,
        filter: ListFilter {
            job: Some(id),
            ..ListFilter::default()
        },
    };
    the_job(id, ctx.ask(req).await?)
}

/// The one job of a listing answer, or 404.
pub(super) fn the_job(id: JobId, answer: ClientResponse) -> Result<Json<Value>, ApiError> {
    match answer {
        ClientResponse::Jobs(j) => j.into_iter().next().map(|j| Json(json!(j))).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no such job: {id}"),
            )
        }),
        other => Err(unexpected(&other)),
    }
}

/// `DELETE /v1/jobs/{id}`: cancels the job.
async fn cancel(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job: JobId = parse_id("job", &id)?;
    let request = request_id(&headers)?;
    match ctx.ask(ClientRequest::Cancel { request, job }).await? {
        ClientResponse::Cancelled { job, tasks } => {
            Ok(Json(json!({ "job_id": job, "cancelled": tasks })))
        }
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/tasks?job=&state=`.
async fn tasks(State(ctx): State<Ctx>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let q: ListQuery = query(q)?;
    let req = ClientRequest::Tasks {
        stale: q.stale,
        job: None,
        filter: q.filter().map_err(ApiError::from)?,
    };
    match ctx.ask(req).await? {
        ClientResponse::Tasks(t) => Ok(Json(json!(t))),
        other => Err(unexpected(&other)),
    }
}

/// How often a followed log is polled while the task runs.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /v1/tasks/{id}/logs`: the attempt's output as `text/plain`, streamed in chunks as
/// it is read from the slave (through the master, as `hetsched logs`).
async fn logs(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: LogsQuery = query(q)?;
    let task: TaskId = parse_id("task", &id)?;
    // The stream asks again after this handler returned: it keeps this request's caller.
    let ctx = ctx.bound()?;
    let stderr = q.stderr()?;
    let ask = move |ctx: Ctx, offset: u64| async move {
        match ctx
            .ask(ClientRequest::Logs {
                task,
                attempt: q.attempt,
                stderr,
                offset,
                max_bytes: 0,
            })
            .await?
        {
            ClientResponse::Logs(c) => Ok(c),
            other => Err(unexpected(&other)),
        }
    };
    // The first chunk decides the status (404 for no such task); the rest streams.
    let first = ask(ctx.clone(), 0).await?;
    let follow = q.follow;
    let pinned = q.attempt.is_some();
    let start = LogFollow {
        ctx,
        offset: 0,
        attempt: None,
        pending: Some(first),
        sleep: false,
        done: false,
    };
    let stream = futures::stream::unfold(start, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            if st.sleep {
                tokio::time::sleep(FOLLOW_POLL).await;
                st.sleep = false;
            }
            let chunk = match st.pending.take() {
                Some(c) => c,
                None => match ask(st.ctx.clone(), st.offset).await {
                    Ok(c) => c,
                    Err(e) => {
                        st.done = true;
                        let end = format!("\n[log stream ended: {}]\n", e.message);
                        return Some((Ok::<_, std::io::Error>(Bytes::from(end)), st));
                    }
                },
            };
            if let Some(bytes) = st.take(chunk, follow, pinned) {
                return Some((Ok(bytes), st));
            }
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Where a streamed log stands.
struct LogFollow {
    ctx: Ctx,
    offset: u64,
    attempt: Option<Attempt>,
    pending: Option<hetsched_common::protocol::LogChunk>,
    sleep: bool,
    done: bool,
}

impl LogFollow {
    /// Takes one chunk (`follow`: wait for more while the task runs; `pinned`: the client
    /// named the attempt): its bytes to send, `None` to ask again at once.
    fn take(
        &mut self,
        chunk: hetsched_common::protocol::LogChunk,
        follow: bool,
        pinned: bool,
    ) -> Option<Bytes> {
        // The latest attempt changed while following (a retry, a re-queue): start over at
        // the beginning of the new attempt's file, as `hetsched logs -f`.
        if self.attempt.is_some_and(|a| a != chunk.attempt) && !pinned && chunk.offset != 0 {
            self.offset = 0;
            self.attempt = Some(chunk.attempt);
            return None;
        }
        self.attempt = Some(chunk.attempt);
        let got = chunk.data.len() as u64;
        self.offset = chunk.offset + got;
        let more_now = self.offset < chunk.size;
        let finished = chunk.task_final && !more_now;
        if !more_now {
            if follow && !finished {
                self.sleep = true;
            } else {
                self.done = true;
            }
        }
        (got > 0).then(|| Bytes::from(chunk.data.into_vec()))
    }
}

/// `POST /v1/nodes/{id}/drain`, optional body `{"deadline": "30s"}`.
async fn drain(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let deadline_after_ms = http_input::drain_body(&body)?;
    let request = request_id(&headers)?;
    node_answer(
        ctx.ask(ClientRequest::Drain {
            request,
            node,
            deadline_after_ms,
        })
        .await?,
    )
}

/// `POST /v1/nodes/{id}/undrain`.
async fn undrain(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let request = request_id(&headers)?;
    node_answer(ctx.ask(ClientRequest::Undrain { request, node }).await?)
}

fn node_answer(r: ClientResponse) -> Result<Json<Value>, ApiError> {
    match r {
        ClientResponse::Node(n) => Ok(Json(json!(n))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/nodes`.
async fn nodes(State(ctx): State<Ctx>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let stale = query::<StaleQuery>(q)?.stale;
    match ctx.ask(ClientRequest::Nodes { stale }).await? {
        ClientResponse::Nodes(n) => Ok(Json(json!(n))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/status`.
async fn status(State(ctx): State<Ctx>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let stale = query::<StaleQuery>(q)?.stale;
    match ctx.ask(ClientRequest::Status { stale }).await? {
        ClientResponse::Status(s) => Ok(Json(json!(s))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/members`: the masters, their cluster addresses, which one leads.
async fn members(State(ctx): State<Ctx>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let stale = query::<StaleQuery>(q)?.stale;
    match ctx.ask(ClientRequest::Members { stale }).await? {
        ClientResponse::Members(m) => Ok(Json(json!(m))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/tasks/{id}/explain`: why the task waits, node by node (as `explain --json`).
async fn explain(State(ctx): State<Ctx>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let task: TaskId = parse_id("task", &id)?;
    match ctx.ask(ClientRequest::Explain { task }).await? {
        ClientResponse::Explain(e) => Ok(Json(json!(e))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/usage`: users against their quotas with DRF shares, and the leader's last hour.
async fn usage(State(ctx): State<Ctx>) -> Result<Json<Value>, ApiError> {
    match ctx.ask(ClientRequest::Usage).await? {
        ClientResponse::Usage(u) => Ok(Json(json!(u))),
        other => Err(unexpected(&other)),
    }
}

/// Query of `GET /v1/accounting/history` (issue 53; as `history`'s flags).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    user: Option<String>,
    job: Option<String>,
    since: Option<String>,
    until: Option<String>,
    state: Option<String>,
    #[serde(default)]
    stale: bool,
}

/// Query of `GET /v1/accounting/usage` (issue 53; as `usage`'s flags).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountingUsageQuery {
    since: Option<String>,
    by: Option<hetsched_common::protocol::UsageBy>,
    user: Option<String>,
    #[serde(default)]
    stale: bool,
}

/// A `since`/`until` value, or a 400 naming the field.
fn time_bound(field: &str, v: Option<String>) -> Result<Option<u64>, ApiError> {
    v.map(|s| {
        hetsched_common::protocol::time_bound(&s, super::super::now_ms())
            .map_err(|e| ApiError::bad_input(e, Some(field.into())))
    })
    .transpose()
}

/// `GET /v1/accounting/history`: ended attempts' usage records, as `history --json`.
async fn accounting_history(
    State(ctx): State<Ctx>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let q = query::<HistoryQuery>(q)?;
    let filter = hetsched_common::protocol::HistoryFilter {
        user: q.user,
        job: q.job.as_deref().map(|j| parse_id("job", j)).transpose()?,
        since_ms: time_bound("since", q.since)?,
        until_ms: time_bound("until", q.until)?,
        state: q.state,
    };
    let req = ClientRequest::AccountingHistory {
        filter,
        stale: q.stale,
    };
    match ctx.ask(req).await? {
        ClientResponse::History(h) => Ok(Json(json!(h))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/accounting/usage`: totals of the usage records, as `usage --json`.
async fn accounting_usage(
    State(ctx): State<Ctx>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let q = query::<AccountingUsageQuery>(q)?;
    let since = q.since.unwrap_or_else(|| "7d".into());
    let req = ClientRequest::AccountingUsage {
        since_ms: time_bound("since", Some(since))?.unwrap_or(0),
        by: q.by.unwrap_or_default(),
        user: q.user,
        stale: q.stale,
    };
    match ctx.ask(req).await? {
        ClientResponse::AccountingUsage(u) => Ok(Json(json!(u))),
        other => Err(unexpected(&other)),
    }
}
