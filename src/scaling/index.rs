//! Where a template's marks are and which autoscalers scale a target, kept by the caches'
//! triggers so that loading one template reads its own targets rather than every cached
//! Deployment, HPA and ScaledObject.
//!
//! The index holds hints, never the truth: an object is added when a cache sees it carrying
//! a template's mark (or scaling a target) and is not removed when it stops. Every read goes
//! through the store ([`super::load`]) and drops the hints the store no longer bears out, so
//! a stale hint costs one lookup and a missing one cannot happen (the trigger that adds it
//! runs before the triggers that reconcile on the same change).
//!
//! The readings of one object that the index and Load share are here too: what an HPA or a
//! ScaledObject scales, whose mark an object carries, and whether KEDA made an HPA.

use std::{
    collections::{BTreeMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
};

use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::decide::{OwnerRecord, TargetKey};
use crate::api::keda::ScaledObject;
use crate::api::scaling::keys;
use crate::runtime::cache::Trigger;

/// The Deployment an HPA scales, if it scales one.
pub fn hpa_target(hpa: &HorizontalPodAutoscaler) -> Option<TargetKey> {
    let r = &hpa.spec.scale_target_ref;
    let api_ok = r
        .api_version
        .as_deref()
        .is_none_or(|a| a == "apps/v1" || a == "apps");
    (r.kind == "Deployment" && api_ok).then(|| TargetKey {
        namespace: hpa.namespace().unwrap_or_default(),
        name: r.name.clone(),
    })
}

/// The Deployment a ScaledObject scales, if it scales one.
pub fn scaled_object_target(so: &ScaledObject) -> Option<TargetKey> {
    so.spec.scale_target_ref.deployment().map(|name| TargetKey {
        namespace: so.namespace().unwrap_or_default(),
        name: name.to_string(),
    })
}

/// An HPA KEDA created for a ScaledObject (KEDA copies the ScaledObject's annotations,
/// Moonin's marks included, onto it: they are not Moonin's to act on).
pub fn owned_by_scaled_object(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == "ScaledObject")
}

/// The template UID in an object's `moonin.io/owner`, read without a full parse.
pub fn owner_uid(meta: &ObjectMeta) -> Option<String> {
    let raw = meta.annotations.as_ref()?.get(keys::OWNER)?;
    serde_json::from_str::<OwnerRecord>(raw).ok().map(|o| o.uid)
}

/// Drops `r` from the hints under `key`, and `key` once it has none.
fn forget<Q, B>(hints: &mut BTreeMap<Q, HashSet<Ref>>, key: &B, r: &Ref)
where
    Q: Ord + std::borrow::Borrow<B>,
    B: Ord + ?Sized,
{
    if let Some(set) = hints.get_mut(key) {
        set.remove(r);
        if set.is_empty() {
            hints.remove(key);
        }
    }
}

/// The kinds the index points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A Deployment (a target itself).
    Deployment,
    /// An HPA.
    Hpa,
    /// A KEDA ScaledObject.
    ScaledObject,
}

/// One cached object, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ref {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// The hints. Cheap to clone.
#[derive(Clone, Default)]
pub struct Index(Arc<Mutex<Hints>>);

#[derive(Default)]
struct Hints {
    /// Template UID → objects seen carrying its `moonin.io/owner` mark.
    marked: BTreeMap<String, HashSet<Ref>>,
    /// Target → autoscalers seen scaling it.
    scaling: BTreeMap<TargetKey, HashSet<Ref>>,
}

impl Index {
    fn hints(&self) -> MutexGuard<'_, Hints> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `r` carries the mark of template `owner` and scales `scales`.
    fn saw(&self, r: Ref, owner: Option<String>, scales: Option<TargetKey>) {
        if owner.is_none() && scales.is_none() {
            return;
        }
        let mut h = self.hints();
        if let Some(uid) = owner {
            h.marked.entry(uid).or_default().insert(r.clone());
        }
        if let Some(key) = scales {
            h.scaling.entry(key).or_default().insert(r);
        }
    }

    /// The UIDs of every template whose mark has been seen.
    pub fn owners(&self) -> Vec<String> {
        self.hints().marked.keys().cloned().collect()
    }

    /// The objects seen carrying the mark of template `uid`.
    pub fn marked(&self, uid: &str) -> Vec<Ref> {
        let h = self.hints();
        h.marked.get(uid).into_iter().flatten().cloned().collect()
    }

    /// The autoscalers seen scaling `key`.
    pub fn scaling(&self, key: &TargetKey) -> Vec<Ref> {
        let h = self.hints();
        h.scaling.get(key).into_iter().flatten().cloned().collect()
    }

    /// Drops the hint that `r` carries the mark of `uid`: the store says otherwise.
    pub fn unmarked(&self, uid: &str, r: &Ref) {
        forget(&mut self.hints().marked, uid, r);
    }

    /// Drops the hint that `r` scales `key`: the store says otherwise.
    pub fn not_scaling(&self, key: &TargetKey, r: &Ref) {
        forget(&mut self.hints().scaling, key, r);
    }

    /// The trigger that keeps the hints of a Deployment cache.
    pub fn deployments(&self) -> Trigger<Deployment> {
        let index = self.clone();
        Box::new(move |d: &Deployment| {
            let owner = owner_uid(&d.metadata);
            if owner.is_some() {
                index.saw(Ref::of(Kind::Deployment, d), owner, None);
            }
        })
    }

    /// The trigger that keeps the hints of an HPA cache. An HPA KEDA created carries its
    /// ScaledObject's marks, which are not Moonin's to act on; it is still an autoscaler of
    /// its target.
    pub fn hpas(&self) -> Trigger<HorizontalPodAutoscaler> {
        let index = self.clone();
        Box::new(move |h: &HorizontalPodAutoscaler| {
            let owner = (!owned_by_scaled_object(&h.metadata))
                .then(|| owner_uid(&h.metadata))
                .flatten();
            index.saw(Ref::of(Kind::Hpa, h), owner, hpa_target(h));
        })
    }

    /// The trigger that keeps the hints of a ScaledObject cache.
    pub fn scaled_objects(&self) -> Trigger<ScaledObject> {
        let index = self.clone();
        Box::new(move |s: &ScaledObject| {
            let owner = owner_uid(&s.metadata);
            index.saw(
                Ref::of(Kind::ScaledObject, s),
                owner,
                scaled_object_target(s),
            );
        })
    }
}

impl Ref {
    /// The reference of `o`, of `kind`.
    pub fn of<K: kube::Resource>(kind: Kind, o: &K) -> Self {
        Self {
            kind,
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        }
    }
}
