//! The watches a ClusterDiscovery switches on, both of Secrets: Helm release Secrets
//! (`spec.helm`) and the Secrets workloads refer to (`spec.secretChanges`). Reading Secrets
//! is opt-in (the role in `config/rbac-helm` grants it): a watch runs only while its switch is on, and a
//! refusal is reported in the ClusterDiscovery's status ([`Access`]), not as the manager's
//! missing permission.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;

use crate::runtime::access;

/// How long a refused watch waits before it asks again.
const DENIED_RETRY: Duration = Duration::from_secs(60);
/// How often a watch waiting for its switch looks again.
const ENABLED_POLL: Duration = Duration::from_secs(2);

/// Whether an opt-in watch may read what it watches: the last refusal, if any.
#[derive(Debug)]
pub struct Access {
    denied: Mutex<Option<String>>,
    /// What a refused list is reported as.
    watch_denied: &'static str,
}

impl Access {
    /// No refusal yet; a refused list will read `watch_denied`.
    pub fn new(watch_denied: &'static str) -> Self {
        Self {
            denied: Mutex::new(None),
            watch_denied,
        }
    }

    /// Records whether the watch's list is refused; true when that changes what the status
    /// says. Only the watch lifts its own refusal: a refused read of one object stands
    /// until a read succeeds.
    pub fn watch_refused(&self, refused: bool) -> bool {
        let mut g = self.locked();
        let before = g.clone();
        if refused {
            *g = Some(self.watch_denied.to_string());
        } else if g.as_deref() == Some(self.watch_denied) {
            *g = None;
        }
        before != *g
    }

    /// Why reading is refused, if it is.
    pub fn denied(&self) -> Option<String> {
        self.locked().clone()
    }

    /// A read of one object was refused: why.
    pub fn read_refused(&self, why: String) {
        *self.locked() = Some(why);
    }

    /// A read of one object succeeded: reading works.
    pub fn read_ok(&self) {
        *self.locked() = None;
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.denied.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The events of a watch of `api` that runs only while `enabled()`: one round per period
/// of being enabled (a fresh watch, whose first list replaces the index), ended when it is
/// disabled or the list is refused; a refused list is asked again after [`DENIED_RETRY`]
/// rather than at the watcher's pace. Whether listing is allowed goes to `on_refusal` as
/// the events say; other errors are logged as `what`'s.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    enabled: impl Fn() -> bool + Clone + Send + Sync + 'static,
    on_refusal: impl Fn(bool) + Clone + Send + Sync + 'static,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    // The state is the previous round's "refused" flag: `flat_map` drains a round before it
    // asks for the next, so the flag is final by then.
    futures::stream::unfold(Arc::new(AtomicBool::new(false)), move |refused_before| {
        let (api, config, enabled, on_refusal) = (
            api.clone(),
            config.clone(),
            enabled.clone(),
            on_refusal.clone(),
        );
        async move {
            if refused_before.load(Ordering::Acquire) {
                tokio::time::sleep(DENIED_RETRY).await;
            }
            while !enabled() {
                tokio::time::sleep(ENABLED_POLL).await;
            }
            let refused = Arc::new(AtomicBool::new(false));
            let round = round(api, config, what, enabled, on_refusal, refused.clone());
            Some((round, refused))
        }
    })
    .flat_map(|round| round)
    .boxed()
}

/// One round: until `enabled()` turns false, or the list is refused (then `refused` is set).
fn round<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    enabled: impl Fn() -> bool + Send + 'static,
    on_refusal: impl Fn(bool) + Send + 'static,
    refused: Arc<AtomicBool>,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher(api, config)
        .default_backoff()
        .inspect(move |event| {
            let denied = match event {
                Err(e) if access::forbidden(e).is_some() => Some(true),
                Err(e) => {
                    tracing::warn!(error = %crate::runtime::errors::brief_watch(e), "{what}: watch error; retrying");
                    None
                }
                // `Init` comes before the list: only data says the list was allowed.
                Ok(watcher::Event::Init) => None,
                Ok(_) => Some(false),
            };
            if let Some(denied) = denied {
                on_refusal(denied);
            }
        })
        .take_while(move |event| {
            let stop = matches!(event, Err(e) if access::forbidden(e).is_some());
            if stop {
                refused.store(true, Ordering::Release);
            }
            futures::future::ready(!stop && enabled())
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DENIED: &str = "listing is forbidden";

    #[test]
    fn a_refused_watch_is_reported_once_and_lifted_by_its_own_success() {
        let a = Access::new(DENIED);
        assert!(!a.watch_refused(false), "allowed from the start: no change");
        assert!(a.watch_refused(true));
        assert!(!a.watch_refused(true), "still refused: no change");
        assert_eq!(a.denied().as_deref(), Some(DENIED));
        assert!(a.watch_refused(false));
        assert_eq!(a.denied(), None);
    }

    #[test]
    fn a_refused_read_stands_until_a_read_succeeds() {
        let a = Access::new(DENIED);
        a.read_refused("reading Secret shop/x is forbidden".into());
        assert!(
            !a.watch_refused(false),
            "the watch does not lift a refused read"
        );
        assert!(a.denied().is_some());
        a.read_ok();
        assert_eq!(a.denied(), None);
    }
}
