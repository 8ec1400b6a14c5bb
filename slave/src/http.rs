//! The slave's HTTP listener (`slave --http HOST:PORT`): `/metrics` (Prometheus, names
//! `hetsched_slave_*` per docs/CONTRACT.md) and `/healthz`.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Histogram buckets of every `_seconds` series, from 1 ms to 30 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A bound HTTP listener with the process's metrics recorder installed.
pub struct HttpListener {
    listener: tokio::net::TcpListener,
    prometheus: PrometheusHandle,
}

impl HttpListener {
    /// Binds `addr` and installs the process-wide Prometheus recorder. Call it before the
    /// slave starts so that every series is recorded from the start.
    pub async fn bind(addr: &str) -> Result<Self, crate::Error> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| crate::Error::Config(format!("cannot listen on {addr} (--http): {e}")))?;
        let prometheus = PrometheusBuilder::new()
            .set_buckets(SECONDS_BUCKETS)
            .and_then(|b| b.install_recorder())
            .map_err(|e| crate::Error::Config(format!("metrics recorder: {e}")))?;
        Ok(Self {
            listener,
            prometheus,
        })
    }

    /// Serves until the process stops.
    pub async fn serve(self) -> std::io::Result<()> {
        let prometheus = self.prometheus;
        let app = Router::new()
            .route(
                "/metrics",
                get(move || {
                    let p = prometheus.clone();
                    async move {
                        (
                            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                            p.render(),
                        )
                            .into_response()
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok\n" }))
            .fallback(|| async { not_found() });
        tracing::info!(addr = %self.listener.local_addr()?, "serving /metrics and /healthz");
        axum::serve(self.listener, app).await
    }
}

fn not_found() -> Response {
    (
        axum::http::StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({
            "error": { "kind": "not-found", "message": "a slave serves only /metrics and /healthz" }
        })),
    )
        .into_response()
}
