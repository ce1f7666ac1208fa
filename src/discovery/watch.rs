//! Projection stores: one watch per kind whose objects are reduced to a small view as they
//! arrive; the full object is dropped at once. A relist (after a watch gap) replaces the
//! map atomically when it is complete and reports what changed or vanished meanwhile.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use crate::manager::access;
use futures::{FutureExt, StreamExt, future::BoxFuture, stream::BoxStream};
use kube::{
    Api, Resource, ResourceExt,
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
    map: HashMap<Key, V>,
    /// The map being rebuilt by a relist.
    next: Option<HashMap<Key, V>>,
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
        self.read(|i| {
            i.map
                .iter()
                .filter(|(k, _)| k.0 == ns)
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// The views of one namespace with their names.
    pub fn in_namespace_keyed(&self, ns: &str) -> Vec<(String, V)> {
        self.read(|i| {
            i.map
                .iter()
                .filter(|(k, _)| k.0 == ns)
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

/// A projection store of `K` reduced by `project`, and the future that drives its watch
/// (poll it as long as the store is used).
pub fn projections<K, V>(
    api: Api<K>,
    config: watcher::Config,
    project: fn(&K) -> V,
    on_change: OnChange<V>,
) -> (Projections<V>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    V: Clone + PartialEq + Send + Sync + 'static,
{
    let kind = K::kind(&()).to_string();
    projections_with(
        watcher(api, config)
            .default_backoff()
            .inspect(move |event| match event {
                Ok(_) => access::watch_ok(&kind),
                Err(e) => access::watch_failed(&kind, e),
            })
            .boxed(),
        project,
        on_change,
    )
}

/// A projection store fed by any watch stream (for example a metadata-only watch). Unlike
/// [`projections`], a refused watch is not reported as a missing permission here: the
/// caller decides (an opt-in watch is not the manager's failure).
pub fn projections_with<K, V>(
    events: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    project: fn(&K) -> V,
    on_change: OnChange<V>,
) -> (Projections<V>, BoxFuture<'static, ()>)
where
    K: Resource + Send + 'static,
    V: Clone + PartialEq + Send + Sync + 'static,
{
    let inner = Arc::new(RwLock::new(Inner {
        map: HashMap::new(),
        next: None,
        synced: false,
    }));
    let store = Projections {
        inner: inner.clone(),
    };
    let drive = events
        .for_each(move |event| {
            let key_of = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
            match event {
                Ok(watcher::Event::Init) => {
                    let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                    g.next = Some(HashMap::new());
                }
                Ok(watcher::Event::InitApply(o)) => {
                    let key = key_of(&o);
                    let view = project(&o);
                    let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                    g.next.get_or_insert_with(HashMap::new).insert(key, view);
                }
                Ok(watcher::Event::InitDone) => {
                    let (old, new) = {
                        let mut g = inner.write().unwrap_or_else(|e| e.into_inner());
                        let new = g.next.take().unwrap_or_default();
                        let old = std::mem::replace(&mut g.map, new.clone());
                        g.synced = true;
                        (old, new)
                    };
                    for (key, after) in &new {
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
                    on_change(Change::Synced);
                }
                Ok(watcher::Event::Apply(o)) => {
                    let key = key_of(&o);
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
                Ok(watcher::Event::Delete(o)) => {
                    let key = key_of(&o);
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
                Err(e) => tracing::warn!(error = %e, "watch error; retrying"),
            }
            futures::future::ready(())
        })
        .boxed();
    (store, drive)
}
