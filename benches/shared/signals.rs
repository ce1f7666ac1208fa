//! Ctrl-C and SIGTERM: a benchmark stops measuring and cleans up first (its objects may
//! carry finalizers that only a running manager removes).

use std::future::Future;

/// Resolves on Ctrl-C or SIGTERM, saying which.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted (SIGINT); cleaning up",
        _ = term.recv() => "terminated (SIGTERM); cleaning up",
    }
}

/// `work`'s outcome, or the signal that stopped it as the error; the caller cleans up
/// either way.
pub async fn or_interrupted<T>(work: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::select! {
        r = work => r,
        why = interrupted() => Err(why.to_string()),
    }
}
