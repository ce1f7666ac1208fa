//! `/healthz`, `/readyz` and `/metrics` on one listener.

use std::net::SocketAddr;

use axum::{
    Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get,
};
use tokio_util::sync::CancellationToken;

use crate::runtime::{context::Readiness, metrics::Metrics};

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
    let missing = crate::runtime::access::missing();
    if !missing.is_empty() {
        let body = format!("missing permission:\n{}\n", missing.join("\n"));
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    if let Some(why) = state.readiness.unreachable() {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
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
