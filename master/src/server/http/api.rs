//! API v1 routes: the CLI's requests over HTTP, answered with the CLI's `--json` objects.

use super::{ApiError, Ctx, Route};
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Json;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ListFilter};
use hetsched_common::{jobfile, Attempt, ClientRequestId, JobId, TaskId};
use serde::Deserialize;
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
        r("GET", "/v1/tasks", get(tasks)),
        r("GET", "/v1/tasks/{id}/logs", get(logs)),
        r("GET", "/v1/nodes", get(nodes)),
        r("POST", "/v1/nodes/{id}/drain", post(drain)),
        r("POST", "/v1/nodes/{id}/undrain", post(undrain)),
        r("GET", "/v1/status", get(status)),
        r("GET", "/v1/members", get(members)),
    ]
}

/// A fresh client request id; a client may pin one with the `Idempotency-Key` header (a
/// number) so that a retried POST applies once.
fn request_id(headers: &HeaderMap) -> Result<ClientRequestId, ApiError> {
    if let Some(v) = headers.get("idempotency-key") {
        let text = v.to_str().unwrap_or_default();
        return text
            .trim()
            .parse::<u64>()
            .map(ClientRequestId)
            .map_err(|_| {
                ApiError::bad_input(
                    format!("Idempotency-Key {text:?} is not a number"),
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
    Ok(ClientRequestId(
        hetsched_common::rng::SplitMix64::new(seed).next_u64(),
    ))
}

fn unexpected(r: &ClientResponse) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("unexpected answer: {r:?}"),
    )
}

fn parse_id<T: std::str::FromStr<Err = hetsched_common::Error>>(
    what: &str,
    s: &str,
) -> Result<T, ApiError> {
    s.parse::<T>()
        .map_err(|e| ApiError::bad_input(format!("{what}: {e}"), Some(what.to_string())))
}

/// Query of the listings, as the CLI's filter flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    /// Accept an answer from this master's applied state without a quorum check.
    #[serde(default)]
    stale: bool,
}

impl ListQuery {
    fn filter(&self) -> Result<ListFilter, ApiError> {
        Ok(ListFilter {
            job: self
                .job
                .as_deref()
                .map(|j| parse_id::<JobId>("job", j))
                .transpose()?,
            state: self.state.clone(),
            user: self.user.clone(),
            limit: self.limit,
        })
    }
}

/// Rejections of the query string name the parameter.
fn query<T>(q: Result<Query<T>, axum::extract::rejection::QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| ApiError::bad_input(e.body_text(), None))
}

/// `POST /v1/jobs`: a job spec file's schema in JSON (README, "Job spec files"), whose
/// `allow_unplaceable` is the CLI's `submit --allow-unplaceable`.
async fn submit(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_input(format!("the body is not UTF-8: {e}"), None))?;
    let file = jobfile::parse_job_file("request.json", text).map_err(|e| {
        let field = e.field.clone();
        ApiError::bad_input(
            format!(
                "invalid job spec at line {}, column {}{}: {}",
                e.line,
                e.column,
                field
                    .as_deref()
                    .map(|f| format!(", field {f}"))
                    .unwrap_or_default(),
                e.message
            ),
            field,
        )
    })?;
    let spec = file
        .to_spec("anonymous")
        .map_err(|e| ApiError::bad_input(format!("invalid job spec: {e}"), None))?;
    let request = request_id(&headers)?;
    let r = ctx
        .ask(ClientRequest::Submit {
            request,
            spec,
            allow_unplaceable: file.allow_unplaceable,
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

/// `GET /v1/jobs`.
async fn jobs(
    State(ctx): State<Ctx>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let req = ClientRequest::Jobs {
        stale: q.stale,
        filter: q.filter()?,
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
    match ctx.ask(req).await? {
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
async fn tasks(
    State(ctx): State<Ctx>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let req = ClientRequest::Tasks {
        stale: q.stale,
        job: None,
        filter: q.filter()?,
    };
    match ctx.ask(req).await? {
        ClientResponse::Tasks(t) => Ok(Json(json!(t))),
        other => Err(unexpected(&other)),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsQuery {
    /// `stdout` (default) or `stderr`.
    #[serde(default)]
    stream: Option<String>,
    #[serde(default)]
    attempt: Option<Attempt>,
    /// Keep the response open and send output as it comes until the task ends.
    #[serde(default)]
    follow: bool,
}

/// How often a followed log is polled while the task runs.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /v1/tasks/{id}/logs`: the attempt's output as `text/plain`, streamed in chunks as
/// it is read from the slave (through the master, as `hetsched logs`).
async fn logs(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    q: Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let task: TaskId = parse_id("task", &id)?;
    let stderr = match q.stream.as_deref() {
        None | Some("stdout") => false,
        Some("stderr") => true,
        Some(other) => {
            return Err(ApiError::bad_input(
                format!("stream {other:?} is neither stdout nor stderr"),
                Some("stream".into()),
            ))
        }
    };
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
            // The latest attempt changed while following (a retry, a re-queue): start
            // over at the beginning of the new attempt's file, as `hetsched logs -f`.
            if st.attempt.is_some_and(|a| a != chunk.attempt) && !pinned && chunk.offset != 0 {
                st.offset = 0;
                st.attempt = Some(chunk.attempt);
                continue;
            }
            st.attempt = Some(chunk.attempt);
            let got = chunk.data.len() as u64;
            st.offset = chunk.offset + got;
            let more_now = st.offset < chunk.size;
            let finished = chunk.task_final && !more_now;
            if !more_now {
                if follow && !finished {
                    st.sleep = true;
                } else {
                    st.done = true;
                }
            }
            if got > 0 {
                return Some((Ok(Bytes::from(chunk.data.into_vec())), st));
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

/// `POST /v1/nodes/{id}/drain`, optional body or query `{"deadline": "30s"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    #[serde(default)]
    deadline: Option<String>,
}

async fn drain(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    Path(node): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let b: DrainBody = if body.iter().all(u8::is_ascii_whitespace) {
        DrainBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_input(format!("drain body: {e}"), None))?
    };
    let deadline_after_ms = b
        .deadline
        .as_deref()
        .map(jobfile::parse_duration_ms)
        .transpose()
        .map_err(|e| ApiError::bad_input(format!("deadline: {e}"), Some("deadline".into())))?;
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
async fn nodes(
    State(ctx): State<Ctx>,
    q: Result<Query<StaleQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let stale = query(q)?.stale;
    match ctx.ask(ClientRequest::Nodes { stale }).await? {
        ClientResponse::Nodes(n) => Ok(Json(json!(n))),
        other => Err(unexpected(&other)),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StaleQuery {
    #[serde(default)]
    stale: bool,
}

/// `GET /v1/status`.
async fn status(
    State(ctx): State<Ctx>,
    q: Result<Query<StaleQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let stale = query(q)?.stale;
    match ctx.ask(ClientRequest::Status { stale }).await? {
        ClientResponse::Status(s) => Ok(Json(json!(s))),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/members`: the masters, their cluster addresses, which one leads.
async fn members(
    State(ctx): State<Ctx>,
    q: Result<Query<StaleQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let stale = query(q)?.stale;
    match ctx.ask(ClientRequest::Members { stale }).await? {
        ClientResponse::Members(m) => Ok(Json(json!(m))),
        other => Err(unexpected(&other)),
    }
}
