//! What a controller gets from the manager, and what it gives back: the contract between
//! the manager and the controllers, kept apart from the registry that lists them.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use kube::Client;
use tokio_util::sync::CancellationToken;

use super::{leader::Leadership, metrics::Metrics};

/// What a controller gets from the manager.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Whether this process may write; every write checks it.
    pub leadership: Leadership,
    /// Shared metrics.
    pub metrics: Metrics,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
    /// The cluster this manager runs in (`--cluster-name`).
    pub cluster_name: String,
    /// The manager's namespace.
    pub namespace: String,
}

/// A controller the manager can run.
pub struct Registered {
    /// Its name on the command line.
    pub name: &'static str,
    /// Runs until `ctx.shutdown` is cancelled. Calls `synced` once its caches are warm.
    pub run: fn(Context, Readiness) -> futures::future::BoxFuture<'static, anyhow::Result<()>>,
}

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
