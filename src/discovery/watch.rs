//! Projection stores: one watch per kind whose objects are reduced to a small view as they
//! arrive; the full object is dropped at once. A relist (after a watch gap) replaces the
//! map atomically when it is complete and reports what changed or vanished meanwhile.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
};

use crate::runtime::access;
use crate::runtime::{decode::Decoded, invalid};
use futures::{FutureExt, StreamExt, future::BoxFuture, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, watcher},
};

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
pub type Key = (String, String);

/// What a projection store reports.
pub enum Change<'a, V> {
    /// An object appeared, changed or went away (`after == None`).
    Object {
        /// Its key.
        key: &'a Key,
        /// The view before, if the store had one.
        before: Option<&'a V>,
        /// The view after, if it still exists.
        after: Option<&'a V>,
    },
    /// A (re)list completed: the store is complete.
    Synced,
}

/// Called after the store applied each change.
pub type OnChange<V> = Box<dyn Fn(Change<'_, V>) + Send + Sync>;

struct Inner<V> {
    /// Ordered by namespace, so that one namespace's views are a range.
    map: BTreeMap<Key, V>,
    /// The map being rebuilt by a relist.
    next: Option<BTreeMap<Key, V>>,
    synced: bool,
}

/// A read handle on a projection store.
pub struct Projections<V> {
    inner: Arc<RwLock<Inner<V>>>,
}

impl<V> Clone for Projections<V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<V: Clone> Projections<V> {
    /// Whether the first list completed.
    pub fn synced(&self) -> bool {
        self.read(|i| i.synced)
    }

    /// Every view.
    pub fn all(&self) -> Vec<V> {
        self.read(|i| i.map.values().cloned().collect())
    }

    /// The views of one namespace.
    pub fn in_namespace(&self, ns: &str) -> Vec<V> {
        self.read(|i| namespace(&i.map, ns).map(|(_, v)| v.clone()).collect())
    }

    /// The views of one namespace with their names.
    pub fn in_namespace_keyed(&self, ns: &str) -> Vec<(String, V)> {
        self.read(|i| {
            namespace(&i.map, ns)
                .map(|(k, v)| (k.1.clone(), v.clone()))
                .collect()
        })
    }

    /// One view.
    pub fn get(&self, ns: &str, name: &str) -> Option<V> {
        self.read(|i| i.map.get(&(ns.to_string(), name.to_string())).cloned())
    }

    /// How many views the store holds.
    pub fn len(&self) -> usize {
        self.read(|i| i.map.len())
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read<T>(&self, f: impl FnOnce(&Inner<V>) -> T) -> T {
        f(&self.inner.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The entries of one namespace: a range of the ordered map.
fn namespace<'a, V>(
    map: &'a BTreeMap<Key, V>,
    ns: &'a str,
) -> impl Iterator<Item = (&'a Key, &'a V)> + 'a {
    map.range((ns.to_string(), String::new())..)
        .take_while(move |(k, _)| k.0 == ns)
}

/// A projection store of every `K` in the cluster reduced by `project`, and the future that
/// drives its watch (poll it as long as the store is used). Objects are decoded one by one:
/// one that does not decode is recorded in [`invalid`] and left out of the store.
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
                    access::watch_ok(&kind)
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

/// A projection store fed by any watch stream (for example a metadata-only watch). Unlike
/// [`projections`], a refused watch is not reported as a missing permission here: the
/// caller decides (an opt-in watch is not the manager's failure). An object that does not
/// decode is not in the store (a view of an earlier version is removed).
pub fn projections_with<K, V>(
    events: BoxStream<'static, Result<watcher::Event<Decoded<K>>, watcher::Error>>,
    project: fn(&K) -> V,
    on_change: OnChange<V>,
) -> (Projections<V>, BoxFuture<'static, ()>)
where
    K: Resource + Send + 'static,
    V: Clone + PartialEq + Send + Sync + 'static,
{
    let inner = Arc::new(RwLock::new(Inner {
        map: BTreeMap::new(),
        next: None,
        synced: false,
    }));
    let store = Projections {
        inner: inner.clone(),
    };
    let drive = events
        .for_each(move |event| {
            let key_of = |m: &kube::api::ObjectMeta| {
                (
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap_or_default(),
                )
            };
            // An object that no longer decodes is gone as far as the store is concerned.
            let event = match event {
                Ok(watcher::Event::Apply(o @ Decoded::Invalid(_))) => {
                    Ok(watcher::Event::Delete(o))
                }
                other => other,
            };
            match event {
                Ok(watcher::Event::InitApply(Decoded::Invalid(_))) => {}
                Ok(watcher::Event::Init) => {
                    let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                    g.next = Some(BTreeMap::new());
                }
                Ok(watcher::Event::InitApply(Decoded::Valid(o))) => {
                    let key = key_of(o.meta());
                    let view = project(&o);
                    let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                    g.next.get_or_insert_with(BTreeMap::new).insert(key, view);
                }
                Ok(watcher::Event::InitDone) => {
                    let old = {
                        let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                        let new = g.next.take().unwrap_or_default();
                        g.synced = true;
                        std::mem::replace(&mut g.map, new)
                    };
                    // The new map is compared in place: a copy would double the store's
                    // memory at every (re)list. Only this task writes the store.
                    let g = inner.read().unwrap_or_else(|e| e.into_inner());
                    let new = &g.map;
                    for (key, after) in new {
                        let before = old.get(key);
                        if before != Some(after) {
                            on_change(Change::Object {
                                key,
                                before,
                                after: Some(after),
                            });
                        }
                    }
                    for (key, before) in &old {
                        if !new.contains_key(key) {
                            on_change(Change::Object {
                                key,
                                before: Some(before),
                                after: None,
                            });
                        }
                    }
                    drop(g);
                    on_change(Change::Synced);
                }
                Ok(watcher::Event::Apply(Decoded::Valid(o))) => {
                    let key = key_of(o.meta());
                    let view = project(&o);
                    let before = {
                        let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                        g.map.insert(key.clone(), view.clone())
                    };
                    if before.as_ref() != Some(&view) {
                        on_change(Change::Object {
                            key: &key,
                            before: before.as_ref(),
                            after: Some(&view),
                        });
                    }
                }
                Ok(watcher::Event::Delete(o)) | Ok(watcher::Event::Apply(o)) => {
                    let key = key_of(o.meta());
                    let before = {
                        let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                        g.map.remove(&key)
                    };
                    on_change(Change::Object {
                        key: &key,
                        before: before.as_ref(),
                        after: None,
                    });
                }
                // The caller reports watch errors (see [`projections`]).
                Err(e) => tracing::debug!(error = %crate::runtime::errors::brief_watch(&e), "watch error; retrying"),
            }
            futures::future::ready(())
        })
        .boxed();
    (store, drive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    fn value(c: &ConfigMap) -> String {
        c.data
            .as_ref()
            .and_then(|d| d.get("v"))
            .cloned()
            .unwrap_or_default()
    }

    /// Feeds `events` through a store; returns it and what it reported, as
    /// `key before→after` lines and `synced`.
    async fn feed(events: Vec<watcher::Event<ConfigMap>>) -> (Projections<String>, Vec<String>) {
        feed_decoded(events.into_iter().map(all_valid).collect()).await
    }

    async fn feed_decoded(
        events: Vec<watcher::Event<Decoded<ConfigMap>>>,
    ) -> (Projections<String>, Vec<String>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let (store, drive) = projections_with(
            futures::stream::iter(events.into_iter().map(Ok)).boxed(),
            value,
            Box::new(move |c| {
                let line = match c {
                    Change::Object { key, before, after } => format!(
                        "{}/{} {}→{}",
                        key.0,
                        key.1,
                        before.map_or("-", String::as_str),
                        after.map_or("-", String::as_str)
                    ),
                    Change::Synced => "synced".to_string(),
                };
                log.lock().unwrap().push(line);
            }),
        );
        drive.await;
        let seen = seen.lock().unwrap().clone();
        (store, seen)
    }

    #[tokio::test]
    async fn a_namespace_is_exactly_its_own_views() {
        use watcher::Event::*;
        let (store, _) = feed(vec![
            Init,
            InitApply(cm("a", "x", "1")),
            InitApply(cm("ab", "x", "2")),
            InitApply(cm("a", "y", "3")),
            InitApply(cm("", "z", "4")),
            InitApply(cm("b", "x", "5")),
            InitDone,
        ])
        .await;
        let mut a = store.in_namespace("a");
        a.sort();
        assert_eq!(a, ["1", "3"]);
        assert_eq!(
            store.in_namespace_keyed("ab"),
            [("x".to_string(), "2".to_string())]
        );
        assert_eq!(store.in_namespace(""), ["4"]);
        assert!(store.in_namespace("c").is_empty());
        assert_eq!(store.get("b", "x").as_deref(), Some("5"));
        assert_eq!(store.len(), 5);
        assert!(store.synced());
    }

    #[tokio::test]
    async fn a_relist_reports_what_changed_and_vanished_while_the_watch_was_away() {
        use watcher::Event::*;
        let (store, seen) = feed(vec![
            Init,
            InitApply(cm("a", "kept", "1")),
            InitApply(cm("a", "edited", "1")),
            InitApply(cm("a", "gone", "1")),
            InitDone,
            Apply(cm("a", "kept", "1")),
            Apply(cm("a", "live", "1")),
            Delete(cm("a", "live", "1")),
            // A relist after a gap: one edited, one gone, one new.
            Init,
            InitApply(cm("a", "kept", "1")),
            InitApply(cm("a", "edited", "2")),
            InitApply(cm("a", "new", "1")),
            InitDone,
        ])
        .await;
        let mut relist: Vec<String> =
            seen[seen.iter().position(|l| l == "a/live 1→-").unwrap() + 1..].to_vec();
        assert_eq!(relist.pop().as_deref(), Some("synced"));
        relist.sort();
        assert_eq!(relist, ["a/edited 1→2", "a/gone 1→-", "a/new -→1"]);
        // An unchanged Apply reports nothing.
        assert_eq!(seen.iter().filter(|l| l.starts_with("a/kept")).count(), 1);
        let mut all = store.in_namespace_keyed("a");
        all.sort();
        assert_eq!(
            all,
            [
                ("edited".to_string(), "2".to_string()),
                ("kept".to_string(), "1".to_string()),
                ("new".to_string(), "1".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn an_object_that_stops_decoding_leaves_the_store() {
        use watcher::Event::*;
        let bad = || {
            crate::runtime::decode::decode::<ConfigMap>(serde_json::json!({
                "metadata": {"name": "x", "namespace": "a"},
                "data": {"v": ["not", "a", "string"]},
            }))
        };
        let (store, seen) = feed_decoded(vec![
            Init,
            InitApply(Decoded::Valid(cm("a", "x", "1"))),
            InitApply(bad()),
            InitDone,
            Apply(bad()),
        ])
        .await;
        assert_eq!(seen, ["a/x -→1", "synced", "a/x 1→-"]);
        assert!(store.get("a", "x").is_none());
    }
}
