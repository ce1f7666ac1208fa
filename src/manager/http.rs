//! `/healthz`, `/readyz` and `/metrics` on one listener.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{
    Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get,
};
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

/// Counts the parts of the manager whose caches have not synced yet; `/readyz` answers 200
/// once the count reaches zero. Cheap to clone; every clone shares the count.
#[derive(Clone, Debug)]
pub struct Readiness(Arc<AtomicUsize>);

impl Readiness {
    /// Waits for `pending` parts to report.
    pub fn new(pending: usize) -> Self {
        Self(Arc::new(AtomicUsize::new(pending)))
    }
    /// One part has synced. Call once per part.
    pub fn report_synced(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
    /// Whether every part has synced.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Readiness,
}

/// Binds `addr` (port 0 picks a free port) and serves until `shutdown` is cancelled.
/// Returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, readiness });
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
    });
    Ok((bound, task))
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let missing = super::access::missing();
    if !missing.is_empty() {
        let body = format!("missing permission:\n{}\n", missing.join("\n"));
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced".to_string(),
        )
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_after_every_part_reports() {
        let r = Readiness::new(2);
        assert!(!r.is_ready());
        r.report_synced();
        assert!(!r.is_ready());
        r.clone().report_synced();
        assert!(r.is_ready());
        r.report_synced();
        assert!(r.is_ready(), "extra reports never underflow");
    }
}
