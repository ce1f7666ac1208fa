//! The watch index: one kind's objects reduced to small views, in a map ordered by
//! namespace. Synchronous and deterministic: the watch driver ([`super::watch`]) hands each
//! event to [`Index::apply`], which updates the map and reports what changed; readers share
//! the index through a [`Projections`] handle. A relist (after a watch gap) replaces the map
//! when it is complete and reports what changed or vanished meanwhile.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, RwLock},
};

use kube::{Resource, runtime::watcher};

use crate::runtime::decode::Decoded;

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
pub type Key = (String, String);

/// What an index reports after it applied an event.
pub enum Change<'a, V> {
    /// An object appeared, changed or went away (`after == None`).
    Object {
        /// Its key.
        key: &'a Key,
        /// The view before, if the index had one.
        before: Option<&'a V>,
        /// The view after, if it still exists.
        after: Option<&'a V>,
    },
    /// A (re)list completed: the index is complete.
    Synced,
}

/// One kind's views.
pub struct Index<V> {
    /// Ordered by namespace, so that one namespace's views are a range.
    map: BTreeMap<Key, V>,
    /// The map being rebuilt by a relist.
    next: Option<BTreeMap<Key, V>>,
    synced: bool,
}

impl<V> Default for Index<V> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            next: None,
            synced: false,
        }
    }
}

impl<V: PartialEq> Index<V> {
    /// Applies one event of a decoding watch, objects reduced by `project`, and reports each
    /// change to `changed` once the index holds it. An object that does not decode is not in
    /// the index: a view of an earlier version goes, as if the object had been deleted.
    pub fn apply<K: Resource>(
        &mut self,
        event: watcher::Event<Decoded<K>>,
        project: impl Fn(&K) -> V,
        changed: &mut impl FnMut(Change<'_, V>),
    ) {
        use watcher::Event::*;
        match event {
            Init => self.next = Some(BTreeMap::new()),
            InitApply(Decoded::Valid(o)) => {
                let view = project(&o);
                self.next
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key_of(o.meta()), view);
            }
            InitApply(Decoded::Invalid(_)) => {}
            InitDone => self.relisted(changed),
            Apply(Decoded::Valid(o)) => {
                let key = key_of(o.meta());
                let before = self.map.insert(key.clone(), project(&o));
                let after = self.map.get(&key);
                if before.as_ref() != after {
                    changed(Change::Object {
                        key: &key,
                        before: before.as_ref(),
                        after,
                    });
                }
            }
            Apply(o @ Decoded::Invalid(_)) | Delete(o) => {
                let key = key_of(o.meta());
                let before = self.map.remove(&key);
                changed(Change::Object {
                    key: &key,
                    before: before.as_ref(),
                    after: None,
                });
            }
        }
    }

    /// A (re)list is complete: its map replaces the index's, and whatever differs is
    /// reported. The new map is compared with the old in place: a copy would double the
    /// index's memory at every (re)list.
    fn relisted(&mut self, changed: &mut impl FnMut(Change<'_, V>)) {
        let new = self.next.take().unwrap_or_default();
        self.synced = true;
        let old = std::mem::replace(&mut self.map, new);
        for (key, after) in &self.map {
            let before = old.get(key);
            if before != Some(after) {
                changed(Change::Object {
                    key,
                    before,
                    after: Some(after),
                });
            }
        }
        for (key, before) in &old {
            if !self.map.contains_key(key) {
                changed(Change::Object {
                    key,
                    before: Some(before),
                    after: None,
                });
            }
        }
        changed(Change::Synced);
    }
}

impl<V: Clone> Index<V> {
    /// Whether the first list completed.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Every view.
    pub fn all(&self) -> Vec<V> {
        self.map.values().cloned().collect()
    }

    /// The views of one namespace.
    pub fn in_namespace(&self, ns: &str) -> Vec<V> {
        self.namespace(ns).map(|(_, v)| v.clone()).collect()
    }

    /// The views of one namespace with their names.
    pub fn in_namespace_keyed(&self, ns: &str) -> Vec<(String, V)> {
        self.namespace(ns)
            .map(|(k, v)| (k.1.clone(), v.clone()))
            .collect()
    }

    /// One view.
    pub fn get(&self, ns: &str, name: &str) -> Option<V> {
        self.map.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The views `keep` accepts, with their names.
    pub fn filtered(&self, keep: impl Fn(&V) -> bool) -> Vec<(String, V)> {
        self.map
            .iter()
            .filter(|(_, v)| keep(v))
            .map(|(k, v)| (k.1.clone(), v.clone()))
            .collect()
    }

    /// The namespaces of the views `keep` accepts.
    pub fn namespaces_where(&self, keep: impl Fn(&V) -> bool) -> BTreeSet<String> {
        self.map
            .iter()
            .filter(|(_, v)| keep(v))
            .map(|(k, _)| k.0.clone())
            .collect()
    }

    /// How many views the index holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The entries of one namespace: a range of the ordered map.
    fn namespace<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = (&'a Key, &'a V)> + 'a {
        self.map
            .range((ns.to_string(), String::new())..)
            .take_while(move |(k, _)| k.0 == ns)
    }
}

fn key_of(m: &kube::api::ObjectMeta) -> Key {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// A shared handle on an index: the watch driver writes it, the rebuilds read it.
pub struct Projections<V> {
    inner: Arc<RwLock<Index<V>>>,
}

impl<V> Clone for Projections<V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<V> Default for Projections<V> {
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Index::default())),
        }
    }
}

impl<V> Projections<V> {
    /// Reads the index.
    pub fn read<T>(&self, f: impl FnOnce(&Index<V>) -> T) -> T {
        f(&self.inner.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Writes the index (the watch driver does, alone).
    pub fn write<T>(&self, f: impl FnOnce(&mut Index<V>) -> T) -> T {
        f(&mut self.inner.write().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<V: Clone> Projections<V> {
    /// Whether the first list completed.
    pub fn synced(&self) -> bool {
        self.read(Index::synced)
    }

    /// Every view.
    pub fn all(&self) -> Vec<V> {
        self.read(Index::all)
    }

    /// The views of one namespace.
    pub fn in_namespace(&self, ns: &str) -> Vec<V> {
        self.read(|i| i.in_namespace(ns))
    }

    /// The views of one namespace with their names.
    pub fn in_namespace_keyed(&self, ns: &str) -> Vec<(String, V)> {
        self.read(|i| i.in_namespace_keyed(ns))
    }

    /// One view.
    pub fn get(&self, ns: &str, name: &str) -> Option<V> {
        self.read(|i| i.get(ns, name))
    }

    /// The namespaces of the views `keep` accepts.
    pub fn namespaces_where(&self, keep: impl Fn(&V) -> bool) -> BTreeSet<String> {
        self.read(|i| i.namespaces_where(keep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use crate::discovery::watch::all_valid;

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

    /// Applies `events` to a new index; returns it and what it reported, as
    /// `key before→after` lines and `synced`.
    fn feed(events: Vec<watcher::Event<ConfigMap>>) -> (Index<String>, Vec<String>) {
        feed_decoded(events.into_iter().map(all_valid).collect())
    }

    fn feed_decoded(
        events: Vec<watcher::Event<Decoded<ConfigMap>>>,
    ) -> (Index<String>, Vec<String>) {
        let mut index = Index::default();
        let mut seen = Vec::new();
        for event in events {
            index.apply(event, value, &mut |c| {
                seen.push(match c {
                    Change::Object { key, before, after } => format!(
                        "{}/{} {}→{}",
                        key.0,
                        key.1,
                        before.map_or("-", String::as_str),
                        after.map_or("-", String::as_str)
                    ),
                    Change::Synced => "synced".to_string(),
                })
            });
        }
        (index, seen)
    }

    #[test]
    fn a_namespace_is_exactly_its_own_views() {
        use watcher::Event::*;
        let (index, _) = feed(vec![
            Init,
            InitApply(cm("a", "x", "1")),
            InitApply(cm("ab", "x", "2")),
            InitApply(cm("a", "y", "3")),
            InitApply(cm("", "z", "4")),
            InitApply(cm("b", "x", "5")),
            InitDone,
        ]);
        let mut a = index.in_namespace("a");
        a.sort();
        assert_eq!(a, ["1", "3"]);
        assert_eq!(
            index.in_namespace_keyed("ab"),
            [("x".to_string(), "2".to_string())]
        );
        assert_eq!(index.in_namespace(""), ["4"]);
        assert!(index.in_namespace("c").is_empty());
        assert_eq!(index.get("b", "x").as_deref(), Some("5"));
        assert_eq!(index.len(), 5);
        assert!(index.synced());
    }

    #[test]
    fn a_relist_reports_what_changed_and_vanished_while_the_watch_was_away() {
        use watcher::Event::*;
        let (index, seen) = feed(vec![
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
        ]);
        let mut relist: Vec<String> =
            seen[seen.iter().position(|l| l == "a/live 1→-").unwrap() + 1..].to_vec();
        assert_eq!(relist.pop().as_deref(), Some("synced"));
        relist.sort();
        assert_eq!(relist, ["a/edited 1→2", "a/gone 1→-", "a/new -→1"]);
        // An unchanged Apply reports nothing.
        assert_eq!(seen.iter().filter(|l| l.starts_with("a/kept")).count(), 1);
        let mut all = index.in_namespace_keyed("a");
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

    #[test]
    fn an_object_that_stops_decoding_leaves_the_store() {
        use watcher::Event::*;
        let bad = || {
            crate::runtime::decode::decode::<ConfigMap>(serde_json::json!({
                "metadata": {"name": "x", "namespace": "a"},
                "data": {"v": ["not", "a", "string"]},
            }))
        };
        let (index, seen) = feed_decoded(vec![
            Init,
            InitApply(Decoded::Valid(cm("a", "x", "1"))),
            InitApply(bad()),
            InitDone,
            Apply(bad()),
        ]);
        assert_eq!(seen, ["a/x -→1", "synced", "a/x 1→-"]);
        assert!(index.get("a", "x").is_none());
    }
}
