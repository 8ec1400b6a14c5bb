//! The master's HTTP server: API v1 (JSON, the same objects as the CLI's `--json`),
//! `/metrics`, `/healthz`, `/readyz` and the dashboard at `/ui` (files embedded in the
//! binary). Every API request goes through [`Master::client`], the handler of the cluster
//! port, so the API and the CLI answer identically; the admin-only requests (benchmark
//! proposals, fault injection) have no route here.
//!
//! A follower answers a request it cannot serve itself (a write, a linearizable read) by
//! sending it on to the leader's cluster port, so a client may talk to any master.
//!
//! On a secured master the port serves HTTPS and API requests need a bearer token
//! (`https.rs`); on an `--insecure` one it is plain HTTP and every caller is trusted (`run`
//! warns at start).

mod api;
mod api_wait;
mod https;
mod linger;

use super::Master;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use axum::Router;
use hetsched_common::protocol::{ClientRequest, ClientResponse, ErrorKind, ErrorReply, Message};
use hetsched_common::wire::{CallError, Connection};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::time::Duration;

/// Largest request body accepted (a job spec), bytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Histogram buckets of every `_seconds` series, from 1 ms to 30 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the process-wide Prometheus recorder; its handle renders `/metrics`.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct Ctx {
    master: Master,
    prometheus: PrometheusHandle,
    /// The connection forwards go over, to the leader last seen.
    leader_conn: std::sync::Arc<tokio::sync::Mutex<Option<Connection>>>,
    /// HTTPS with bearer tokens (the master runs secured).
    secured: bool,
    /// The caller, for work that outlives its request's task (a followed log stream);
    /// `None`: the caller of the request being answered.
    caller: Option<crate::server::authz::Caller>,
}

/// One route of the API: the OpenAPI document (`docs/openapi.json`) is checked against
/// this table, and the router is built from it, so the two cannot drift apart.
pub(crate) struct Route {
    /// `GET`, `POST`, `DELETE`.
    pub method: &'static str,
    /// Path in OpenAPI form (`/v1/jobs/{id}`; axum 0.8 uses the same syntax).
    pub path: &'static str,
    handler: MethodRouter<Ctx>,
}

/// Every route this server serves.
pub(crate) fn routes() -> Vec<Route> {
    let r = |method, path, handler| Route {
        method,
        path,
        handler,
    };
    let mut all = api::routes();
    all.extend([
        // Issue 55's long poll and event stream (`api_wait` builds on `api`'s readers).
        r("GET", "/v1/jobs/{id}/wait", get(api_wait::wait)),
        r("GET", "/v1/events", get(api_wait::events)),
        r("GET", "/metrics", get(metrics)),
        r("GET", "/healthz", get(healthz)),
        r("GET", "/readyz", get(readyz)),
        r("GET", "/", get(root)),
        r("GET", "/ui", get(ui_index)),
        r("GET", "/ui/", get(ui_index)),
        r("GET", "/ui/app.js", get(ui_js)),
        r("GET", "/ui/style.css", get(ui_css)),
    ]);
    all
}

fn router(ctx: Ctx) -> Router {
    let mut router = Router::new();
    for route in routes() {
        tracing::trace!(method = route.method, path = route.path, "http route");
        let counted = (route.handler).layer(axum::middleware::from_fn_with_state(
            route.path,
            count_request,
        ));
        router = router.route(route.path, counted);
    }
    router
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such route").into_response()
        })
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            https::authenticate,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(ctx)
}

/// Counts every request by its route (`hetsched_master_http_requests_total{route}`, the
/// route as the table writes it: `/v1/jobs/{id}/wait`).
async fn count_request(
    axum::extract::State(route): axum::extract::State<&'static str>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    metrics::counter!("hetsched_master_http_requests_total", "route" => route).increment(1);
    next.run(req).await
}

/// Serves the API, metrics and dashboard on `listener` until the process stops: HTTPS with
/// bearer tokens when the master runs secured, plain HTTP otherwise.
pub async fn serve(
    listener: tokio::net::TcpListener,
    master: Master,
    prometheus: PrometheusHandle,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let secured = hetsched_common::wire::tls::current().is_some_and(|t| t.server.is_some());
    let spawner = tokio_gauges(master.clone());
    let app = router(Ctx {
        master,
        prometheus,
        leader_conn: Default::default(),
        secured,
        caller: None,
    });
    let r = if secured {
        tracing::info!(%addr, "serving the API, /metrics and the dashboard at /ui over HTTPS (bearer tokens)");
        let listener = https::HttpsListener::new(listener)?;
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<https::HttpPeer>(),
        )
        .await
    } else {
        tracing::warn!(
            %addr,
            "serving the HTTP API, /metrics and the dashboard at /ui WITHOUT TLS or \
             authentication (--insecure): anyone who can reach this address can submit and \
             cancel jobs"
        );
        axum::serve(linger::LingeringTcp(listener), app).await
    };
    spawner.abort();
    r
}

/// Refreshes the queue-length gauges from the applied state once a second.
fn tokio_gauges(master: Master) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let (tasks, nodes, jobs) = {
                let s = master.shared.read_state();
                (s.task_counts(), s.node_counts(), s.jobs().len())
            };
            for (state, n) in tasks {
                metrics::gauge!("hetsched_master_tasks", "state" => state).set(n as f64);
            }
            for (state, n) in [
                ("up", nodes.up),
                ("down", nodes.down),
                ("draining", nodes.draining),
            ] {
                metrics::gauge!("hetsched_master_nodes", "state" => state).set(n as f64);
            }
            metrics::gauge!("hetsched_master_jobs").set(jobs as f64);
        }
    })
}

/// An API error: `{"error": {"kind", "message"}}` (plus `"field"` when one is to blame).
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    field: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            field: None,
        }
    }

    /// 400, naming the field at fault when known.
    fn bad_input(message: impl Into<String>, field: Option<String>) -> Self {
        Self {
            field,
            ..Self::new(StatusCode::BAD_REQUEST, "bad-input", message)
        }
    }

    fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

/// The status code of a master's answer: the CLI's exit codes (docs/CONTRACT.md) as HTTP.
impl From<crate::http_input::InputError> for ApiError {
    fn from(e: crate::http_input::InputError) -> Self {
        Self::bad_input(e.message, e.field)
    }
}

impl From<ErrorReply> for ApiError {
    fn from(e: ErrorReply) -> Self {
        let (status, kind) = match e.kind {
            ErrorKind::Invalid | ErrorKind::Malformed => (StatusCode::BAD_REQUEST, "bad-input"),
            ErrorKind::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "bad-input"),
            ErrorKind::NotFound | ErrorKind::UnknownNode => (StatusCode::NOT_FOUND, "not-found"),
            ErrorKind::Forbidden | ErrorKind::PermissionDenied => {
                (StatusCode::FORBIDDEN, "forbidden")
            }
            ErrorKind::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ErrorKind::NotLeader { .. }
            | ErrorKind::Unavailable
            | ErrorKind::Unknown
            | ErrorKind::WrongVersion => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            // Admission back-pressure: the client should retry later (CLI exit 5).
            ErrorKind::Busy => (StatusCode::TOO_MANY_REQUESTS, "busy"),
            ErrorKind::Unsupported | ErrorKind::Internal => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        Self::new(status, kind, e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({ "kind": self.kind, "message": self.message });
        if let Some(f) = self.field {
            error["field"] = serde_json::Value::String(f);
        }
        (
            self.status,
            axum::Json(serde_json::json!({ "error": error })),
        )
            .into_response()
    }
}

/// How long a forwarded request may take at the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Most leader hops one request follows (leadership may move while it is forwarded).
const MAX_FORWARDS: usize = 3;

impl Ctx {
    /// Answers `req` here, or at the leader when this master is not it.
    /// This context bound to the current request's caller, for a stream that keeps asking
    /// after the handler returned.
    fn bound(&self) -> Result<Ctx, ApiError> {
        Ok(Ctx {
            caller: Some(https::caller(self.secured)?),
            ..self.clone()
        })
    }

    async fn ask(&self, mut req: ClientRequest) -> Result<ClientResponse, ApiError> {
        let caller = match &self.caller {
            Some(c) => c.clone(),
            None => https::caller(self.secured)?,
        };
        crate::server::authz::scope_request(&caller, &mut req);
        self.master.authorize(&caller, &req)?;
        let mut err = match self.master.client(req.clone()).await {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        for _ in 0..MAX_FORWARDS {
            let ErrorKind::NotLeader { leader_addr, .. } = &err.kind else {
                return Err(err.into());
            };
            let Some(addr) = leader_addr.clone() else {
                return Err(ApiError::unavailable(format!(
                    "{}; retry when a leader is elected",
                    err.message
                )));
            };
            err = match self.forward(&addr, req.clone()).await? {
                Message::ClientReply(r) => return Ok(r),
                Message::Error(e) => e,
                other => {
                    return Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        format!(
                            "unexpected answer from the leader: {}",
                            super::reply::message_name(&other)
                        ),
                    ))
                }
            };
        }
        Err(ApiError::unavailable(format!(
            "leadership kept moving while the request was forwarded: {}",
            err.message
        )))
    }

    /// Sends `req` to the cluster port at `addr` over a kept connection (one retry on a
    /// fresh one when the kept one turns out closed).
    async fn forward(&self, addr: &str, req: ClientRequest) -> Result<Message, ApiError> {
        for fresh in [false, true] {
            let conn = {
                let mut kept = self.leader_conn.lock().await;
                match kept.as_ref() {
                    Some(c) if !fresh && c.addr() == addr && !c.is_closed() => c.clone(),
                    _ => {
                        let c = Connection::connect(addr, Duration::from_secs(5))
                            .await
                            .map_err(|e| {
                                ApiError::unavailable(format!("cannot reach the leader: {e}"))
                            })?;
                        *kept = Some(c.clone());
                        c
                    }
                }
            };
            // A forwarded long poll may take its whole wait on top.
            let waits = match &req {
                ClientRequest::WaitJob { timeout_ms, .. } => Duration::from_millis(*timeout_ms),
                _ => Duration::ZERO,
            };
            match conn
                .call(Message::Client(req.clone()), FORWARD_TIMEOUT + waits)
                .await
            {
                Ok(m) => return Ok(m),
                Err(CallError::Closed(_)) if !fresh => continue,
                Err(e) => {
                    return Err(ApiError::unavailable(format!(
                        "the leader did not answer: {e}"
                    )))
                }
            }
        }
        Err(ApiError::unavailable("the leader closed the connection"))
    }
}

async fn metrics(axum::extract::State(ctx): axum::extract::State<Ctx>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        ctx.prometheus.render(),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when this master is a member of a cluster that has a leader.
async fn readyz(axum::extract::State(ctx): axum::extract::State<Ctx>) -> Response {
    let st = ctx.master.raft.status();
    match st.leader {
        Some(l) => format!("ok: leader {l}, term {}\n", st.term).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: no leader known in term {}\n", st.term),
        )
            .into_response(),
    }
}

async fn root() -> axum::response::Redirect {
    axum::response::Redirect::temporary("/ui")
}

async fn ui_index() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("ui/index.html"),
    )
        .into_response()
}

async fn ui_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("ui/app.js"),
    )
        .into_response()
}

async fn ui_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("ui/style.css"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The OpenAPI document lists exactly the API routes the router serves.
    #[test]
    fn openapi_documents_every_route_and_only_served_ones() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../../docs/openapi.json"))
                .expect("docs/openapi.json is JSON");
        let mut documented = std::collections::BTreeSet::new();
        for (path, ops) in doc["paths"].as_object().expect("paths") {
            for method in ops.as_object().expect("operations").keys() {
                if ["get", "post", "delete", "put", "patch"].contains(&method.as_str()) {
                    documented.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let served: std::collections::BTreeSet<(String, String)> = routes()
            .iter()
            .filter(|r| !r.path.starts_with("/ui") && r.path != "/")
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty(),
            "routes missing from docs/openapi.json: {undocumented:?}"
        );
        assert!(
            unserved.is_empty(),
            "documented but not served: {unserved:?}"
        );
    }

    #[test]
    fn errors_map_to_the_exit_code_statuses() {
        let s = |k| ApiError::from(ErrorReply::new(k, "x")).status;
        assert_eq!(s(ErrorKind::Invalid), StatusCode::BAD_REQUEST);
        assert_eq!(s(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(s(ErrorKind::Unavailable), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(s(ErrorKind::Forbidden), StatusCode::FORBIDDEN);
        assert_eq!(
            s(ErrorKind::NotLeader {
                leader: None,
                leader_addr: None
            }),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
