//! What a controller gets from the manager, and what it gives back: the contract between
//! the manager and the controllers, kept apart from the registry that lists them.

use std::sync::{
    Arc, Mutex,
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

/// Counts the parts of the manager whose caches have not synced yet, and says whether the
/// API server answers; `/readyz` answers 200 once the count reaches zero, while the API server
/// answers. Cheap to clone; every clone shares the state.
#[derive(Clone, Debug)]
pub struct Readiness {
    pending: Arc<AtomicUsize>,
    unreachable: Arc<Mutex<Option<String>>>,
}

impl Readiness {
    /// Waits for `pending` parts to report.
    pub fn new(pending: usize) -> Self {
        Self {
            pending: Arc::new(AtomicUsize::new(pending)),
            unreachable: Arc::default(),
        }
    }
    /// One part has synced. Call once per part.
    pub fn report_synced(&self) {
        let _ = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
    /// Whether every part has synced.
    pub fn is_ready(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }
    /// The API server does not answer (`Some`, saying since when and why) or does again.
    pub fn set_unreachable(&self, why: Option<String>) {
        *self.unreachable.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }
    /// Why the API server is unreachable, while it is.
    pub fn unreachable(&self) -> Option<String> {
        self.unreachable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
