//! Reflector caches the controllers read from.
//!
//! A cache is a reflector store whose own event stream triggers reconciles (through
//! `Controller::reconcile_on`), so a reconcile never reads a store older than its trigger.
//! A separate trigger watch (`Controller::watches`) races its cache; kube-runtime's
//! shared-stream subscriptions do not deliver deletions.

use futures::{FutureExt, StreamExt, future::BoxFuture};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};

/// Called with every object the cache applies or deletes, after the store has it: a
/// reconcile triggered from here always reads at least what triggered it.
pub type Trigger<K> = Box<dyn Fn(&K) + Send + Sync>;

/// A store of `K` kept in sync by one watch, trimmed by `trim` before anything is stored,
/// calling each of `triggers` after each change, and the future that drives it (poll it
/// for as long as the store is used).
pub fn cache<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    triggers: Vec<Trigger<K>>,
) -> (Store<K>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let kind = K::kind(&()).to_string();
    let drive = reflector::reflector(writer, watcher(api, config).default_backoff().modify(trim))
        .for_each(move |event| {
            match event {
                Ok(
                    watcher::Event::Apply(o)
                    | watcher::Event::Delete(o)
                    | watcher::Event::InitApply(o),
                ) => {
                    super::access::watch_ok(&kind);
                    for t in &triggers {
                        t(&o);
                    }
                }
                Ok(_) => super::access::watch_ok(&kind),
                Err(e) => super::access::watch_failed(&kind, &e),
            }
            futures::future::ready(())
        })
        .boxed();
    (store, drive)
}

/// Reports one result of a kube-runtime `Controller` of `kind`: a refused watch is a
/// missing permission ([`super::access`]); a failed reconcile was reported by the error
/// policy already; anything else is logged.
pub fn controller_result<T, R>(
    kind: &'static str,
) -> impl FnMut(
    Result<T, kube::runtime::controller::Error<R, watcher::Error>>,
) -> futures::future::Ready<()>
where
    R: std::error::Error + 'static,
{
    use kube::runtime::controller::Error;
    move |result| {
        match result {
            Err(Error::QueueError(e)) => super::access::watch_failed(kind, &e),
            Ok(_) | Err(Error::ReconcilerFailed(..)) => super::access::watch_ok(kind),
            Err(e) => tracing::warn!(%kind, error = %e, "controller"),
        }
        futures::future::ready(())
    }
}

/// A channel of reconcile requests for `Controller::reconcile_on`, and the sending half
/// for triggers.
pub fn requests<T>() -> (
    futures::channel::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<T>>,
    futures::channel::mpsc::UnboundedReceiver<kube::runtime::reflector::ObjectRef<T>>,
)
where
    T: Resource<DynamicType = ()>,
{
    futures::channel::mpsc::unbounded()
}

/// Strips what no controller reads from any cached object: `managedFields` are kept only
/// where a controller needs them (scaling reads them on HPAs and ScaledObjects).
pub fn strip_last_applied(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}
