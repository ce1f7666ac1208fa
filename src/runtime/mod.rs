//! The machinery every controller runs on, owned by none of them: watches that decode one
//! object at a time, typed caches fed by them, objects that do not decode and how they are
//! reported, per-object backoff, and how API errors are read.
//!
//! Nothing here knows a controller; the controllers and the manager build on it.

pub mod access;
pub mod backoff;
pub mod cache;
pub mod context;
pub mod decode;
pub mod errors;
pub mod events;
pub mod facts;
pub mod invalid;
pub mod leader;
pub mod lists;
pub mod metrics;

/// How logs and backoff keys name an object: `Kind namespace/name` (`Kind name` when
/// cluster-scoped).
pub fn reference<K: kube::Resource<DynamicType = ()>>(o: &K) -> String {
    let kind = K::kind(&());
    let name = o.meta().name.as_deref().unwrap_or_default();
    match o.meta().namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}
