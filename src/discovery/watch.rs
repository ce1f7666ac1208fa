//! The watch drivers: each watch's events go, one at a time and in order, into a
//! synchronous [`Index`](super::index::Index); the full object is dropped at once, and what
//! the index reports changed goes to the caller's [`OnChange`].

use futures::{FutureExt, StreamExt, future::BoxFuture, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, watcher},
};

use super::index::{Change, Projections};
use crate::runtime::access;
use crate::runtime::{decode::Decoded, invalid};

/// Called after the index applied each change (with the index locked: it must not read it).
pub type OnChange<V> = Box<dyn Fn(Change<'_, V>) + Send + Sync>;

/// A projection index of every `K` in the cluster reduced by `project`, and the future that
/// drives its watch (poll it as long as the index is used). Objects are decoded one by one:
/// one that does not decode is recorded in [`invalid`] and left out of the index.
pub fn projections<K, V>(
    client: kube::Client,
    config: watcher::Config,
    project: fn(&K) -> V,
    on_change: OnChange<V>,
) -> (Projections<V>, BoxFuture<'static, ()>)
where
    K: crate::runtime::cache::Cached,
    V: Clone + PartialEq + Send + Sync + 'static,
{
    let kind = K::kind(&()).to_string();
    projections_with(
        watcher(Api::<Decoded<K>>::all(client), config)
            .default_backoff()
            .inspect(move |event| match event {
                Ok(e) => {
                    invalid::observe(e);
                    // `Init` comes before each (re)list is asked for: it proves no access.
                    if !matches!(e, watcher::Event::Init) {
                        access::watch_ok(&kind);
                    }
                }
                Err(e) => access::watch_failed(&kind, e),
            })
            .boxed(),
        project,
        on_change,
    )
}

/// Every object of a watch stream that needs no decoding of its own (a metadata-only
/// watch) as [`Decoded::Valid`].
pub fn all_valid<K>(event: watcher::Event<K>) -> watcher::Event<Decoded<K>> {
    use watcher::Event::*;
    match event {
        Init => Init,
        InitApply(k) => InitApply(Decoded::Valid(k)),
        InitDone => InitDone,
        Apply(k) => Apply(Decoded::Valid(k)),
        Delete(k) => Delete(Decoded::Valid(k)),
    }
}

/// A projection index fed by any watch stream (for example a metadata-only watch). Unlike
/// [`projections`], a refused watch is not reported as a missing permission here: the
/// caller decides (an opt-in watch is not the manager's failure).
pub fn projections_with<K, V>(
    events: BoxStream<'static, Result<watcher::Event<Decoded<K>>, watcher::Error>>,
    project: fn(&K) -> V,
    on_change: OnChange<V>,
) -> (Projections<V>, BoxFuture<'static, ()>)
where
    K: Resource + Send + 'static,
    V: Clone + PartialEq + Send + Sync + 'static,
{
    let store = Projections::default();
    let index = store.clone();
    let drive = events
        .for_each(move |event| {
            match event {
                Ok(e) => index.write(|i| i.apply(e, project, &mut |c| on_change(c))),
                // The caller reports watch errors (see [`projections`]).
                Err(e) => {
                    tracing::debug!(error = %crate::runtime::errors::brief_watch(&e), "watch error; retrying")
                }
            }
            futures::future::ready(())
        })
        .boxed();
    (store, drive)
}
