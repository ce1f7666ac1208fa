//! Load: builds decide's plain-data [`Snapshot`] from the shared reflector caches.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{ResourceExt, runtime::reflector::Store};

use super::decide::{
    Autoscaler, AutoscalerKind, GUARDED_ANNOTATIONS, Marks, Original, OwnerRecord, Snapshot,
    Target, TargetKey, TemplateKind, TemplateView, Workload,
};
use crate::api::field_manager;
use crate::api::keda::ScaledObject;
use crate::api::scaling::{
    ClusterScalingTemplate, ScalingAction, ScalingTemplate, ScalingTemplateStatus, WindowSpec, keys,
};

/// What both template kinds have in common.
pub trait Template: crate::runtime::cache::Cached {
    /// Namespaced or cluster.
    const KIND: TemplateKind;
    /// The window.
    fn window(&self) -> &WindowSpec;
    /// The actions.
    fn actions(&self) -> &[ScalingAction];
    /// The status, or an empty one.
    fn status_or_default(&self) -> ScalingTemplateStatus;
    /// The API of this kind where `self` lives.
    fn api(&self, client: kube::Client) -> kube::Api<Self>;
}

impl Template for ScalingTemplate {
    const KIND: TemplateKind = TemplateKind::Namespaced;
    fn window(&self) -> &WindowSpec {
        &self.spec.window
    }
    fn actions(&self) -> &[ScalingAction] {
        &self.spec.actions
    }
    fn status_or_default(&self) -> ScalingTemplateStatus {
        self.status.clone().unwrap_or_default()
    }
    fn api(&self, client: kube::Client) -> kube::Api<Self> {
        kube::Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

impl Template for ClusterScalingTemplate {
    const KIND: TemplateKind = TemplateKind::Cluster;
    fn window(&self) -> &WindowSpec {
        &self.spec.window
    }
    fn actions(&self) -> &[ScalingAction] {
        &self.spec.actions
    }
    fn status_or_default(&self) -> ScalingTemplateStatus {
        self.status.clone().unwrap_or_default()
    }
    fn api(&self, client: kube::Client) -> kube::Api<Self> {
        kube::Api::all(client)
    }
}

/// The caches the scaling controller reads.
#[derive(Clone)]
pub struct Stores {
    /// Namespaced templates.
    pub templates: Store<ScalingTemplate>,
    /// Cluster templates.
    pub cluster_templates: Store<ClusterScalingTemplate>,
    /// Deployments, trimmed to metadata and replicas.
    pub deployments: Store<Deployment>,
    /// HPAs.
    pub hpas: Store<HorizontalPodAutoscaler>,
    /// ScaledObjects, when KEDA's CRD is installed.
    pub scaled_objects: Option<Store<ScaledObject>>,
}

impl Stores {
    /// Waits until every cache has listed once.
    pub async fn wait_until_ready(&self) {
        let _ = self.deployments.wait_until_ready().await;
        let _ = self.hpas.wait_until_ready().await;
        if let Some(so) = &self.scaled_objects {
            let _ = so.wait_until_ready().await;
        }
        let _ = self.templates.wait_until_ready().await;
        let _ = self.cluster_templates.wait_until_ready().await;
    }
}

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

/// UIDs of every template that exists now.
pub fn live_uids(stores: &Stores) -> HashSet<String> {
    let mut uids: HashSet<String> = stores
        .templates
        .state()
        .iter()
        .filter_map(|t| t.uid())
        .collect();
    uids.extend(
        stores
            .cluster_templates
            .state()
            .iter()
            .filter_map(|t| t.uid()),
    );
    uids
}

fn marks(meta: &ObjectMeta, live: &HashSet<String>) -> Marks {
    let annotations = meta.annotations.as_ref();
    let mut m = Marks {
        has_annotations: annotations.is_some(),
        read: GUARDED_ANNOTATIONS
            .iter()
            .filter_map(|k| Some(((*k).to_string(), annotations?.get(*k)?.clone())))
            .collect(),
        ..Marks::default()
    };
    if let Some(raw) = annotations.and_then(|a| a.get(keys::OWNER)) {
        match serde_json::from_str::<OwnerRecord>(raw) {
            Ok(o) => {
                m.owner_live = live.contains(&o.uid);
                m.owner = Some(o);
            }
            Err(e) => {
                m.unreadable = Some(format!("annotation {} is not readable: {e}", keys::OWNER))
            }
        }
    }
    m
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a String> {
    meta.annotations.as_ref()?.get(key)
}

/// The manager that owns each of `fields` under `spec`, from `managedFields`.
fn spec_managers(meta: &ObjectMeta, fields: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in meta.managed_fields.iter().flatten() {
        let Some(manager) = &entry.manager else {
            continue;
        };
        let Some(spec) = entry.fields_v1.as_ref().and_then(|f| f.0.get("f:spec")) else {
            continue;
        };
        for f in fields {
            if spec.get(format!("f:{f}")).is_some() {
                out.insert((*f).to_string(), manager.clone());
            }
        }
    }
    out
}

/// How long after Moonin's last write to an autoscaler a restore of its Deployment waits for
/// the autoscaler's controller to act on that write, at most.
const OBSERVATION_WAIT: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// Whether Moonin (`moonin-scaling`) wrote the object's spec less than [`OBSERVATION_WAIT`]
/// before `now`, from `managedFields`.
fn written_recently(meta: &ObjectMeta, now: Timestamp) -> bool {
    meta.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(field_manager::SCALING)
            && m.time
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0) < OBSERVATION_WAIT)
    })
}

fn autoscaler_from(
    kind: AutoscalerKind,
    meta: &ObjectMeta,
    min: Option<i32>,
    max: Option<i32>,
    live: &HashSet<String>,
) -> Autoscaler {
    let mut m = marks(meta, live);
    let original = match annotation(meta, keys::ORIGINAL) {
        None => None,
        Some(raw) => match serde_json::from_str::<Original>(raw) {
            Ok(o) => Some(o),
            Err(e) => {
                m.unreadable = Some(format!(
                    "annotation {} is not readable: {e}",
                    keys::ORIGINAL
                ));
                None
            }
        },
    };
    let paused = if kind == AutoscalerKind::ScaledObject {
        keys::KEDA_PAUSED
            .iter()
            .find(|k| annotation(meta, k).is_some())
            .map(|k| (*k).to_string())
    } else {
        None
    };
    let keda_owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == "ScaledObject")
        .map(|r| r.name.clone());
    Autoscaler {
        kind,
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        provisional: meta
            .labels
            .as_ref()
            .is_some_and(|l| l.get(keys::PROVISIONAL).is_some_and(|v| v == "true")),
        keda_owner,
        min,
        max,
        paused,
        marks: m,
        original,
        applied_hash: annotation(meta, keys::APPLIED_HASH).cloned(),
        managers: spec_managers(meta, &[kind.min_field(), kind.max_field()]),
        unobserved: false,
    }
}

fn workload_from(d: &Deployment, live: &HashSet<String>) -> Workload {
    let mut m = marks(&d.metadata, live);
    let original_replicas = match annotation(&d.metadata, keys::ORIGINAL_REPLICAS) {
        None => None,
        Some(raw) => match raw.parse::<i32>() {
            Ok(r) => Some(r),
            Err(e) => {
                m.unreadable = Some(format!(
                    "annotation {} is not a number: {e}",
                    keys::ORIGINAL_REPLICAS
                ));
                None
            }
        },
    };
    Workload {
        name: d.name_any(),
        resource_version: d.resource_version().unwrap_or_default(),
        replicas: d.spec.as_ref().and_then(|s| s.replicas),
        marks: m,
        original_replicas,
    }
}

/// Every target in `keys`, with its Deployment and autoscalers, from the caches.
pub fn targets(
    stores: &Stores,
    wanted: &BTreeSet<TargetKey>,
    live: &HashSet<String>,
) -> BTreeMap<TargetKey, Target> {
    let mut out: BTreeMap<TargetKey, Target> = wanted
        .iter()
        .map(|k| (k.clone(), Target::default()))
        .collect();
    for key in wanted {
        let r = kube::runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace);
        if let Some(d) = stores.deployments.get(&r)
            && let Some(t) = out.get_mut(key)
        {
            t.deployment = Some(workload_from(&d, live));
        }
    }
    let now = Timestamp::now();
    // Per ScaledObject (namespace, name): whether KEDA's HPA is at the given minimum and
    // the HPA controller has seen it.
    let mut keda_hpas: BTreeMap<(String, String), (Option<i32>, bool)> = BTreeMap::new();
    for hpa in stores.hpas.state() {
        let behind =
            hpa.metadata.generation > hpa.status.as_ref().and_then(|s| s.observed_generation);
        let Some(key) = hpa_target(&hpa) else {
            continue;
        };
        let Some(t) = out.get_mut(&key) else {
            continue;
        };
        let mut a = autoscaler_from(
            AutoscalerKind::Hpa,
            &hpa.metadata,
            hpa.spec.min_replicas,
            Some(hpa.spec.max_replicas),
            live,
        );
        a.unobserved = behind && written_recently(&hpa.metadata, now);
        if let Some(so) = &a.keda_owner {
            keda_hpas.insert(
                (key.namespace.clone(), so.clone()),
                (hpa.spec.min_replicas, !behind),
            );
        }
        t.autoscalers.push(a);
    }
    if let Some(sos) = &stores.scaled_objects {
        for so in sos.state() {
            if let Some(key) = scaled_object_target(&so)
                && let Some(t) = out.get_mut(&key)
            {
                let mut a = autoscaler_from(
                    AutoscalerKind::ScaledObject,
                    &so.metadata,
                    so.spec.min_replica_count,
                    so.spec.max_replica_count,
                    live,
                );
                // KEDA carries the bounds to its HPA (a minimum of 0 scales to zero
                // through a minimum of 1 there), and the HPA controller acts on that.
                let expected = so.spec.min_replica_count.unwrap_or(0).max(1);
                let synced = keda_hpas
                    .get(&(key.namespace.clone(), a.name.clone()))
                    .is_none_or(|(min, seen)| *seen && *min == Some(expected));
                a.unobserved = !synced && written_recently(&so.metadata, now);
                t.autoscalers.push(a);
            }
        }
    }
    for t in out.values_mut() {
        t.autoscalers
            .sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    }
    out
}

/// Targets of every object (Deployment, HPA not created by KEDA, ScaledObject) whose
/// `moonin.io/owner` UID satisfies `pick`.
fn marked_targets(stores: &Stores, pick: impl Fn(&str) -> bool) -> BTreeSet<TargetKey> {
    let mut out = BTreeSet::new();
    let marked = |meta: &ObjectMeta| owner_uid(meta).is_some_and(|u| pick(&u));
    for d in stores.deployments.state() {
        if marked(&d.metadata) {
            out.insert(TargetKey {
                namespace: d.namespace().unwrap_or_default(),
                name: d.name_any(),
            });
        }
    }
    for hpa in stores.hpas.state() {
        if marked(&hpa.metadata) && !owned_by_scaled_object(&hpa.metadata) {
            out.extend(hpa_target(&hpa));
        }
    }
    for so in stores.scaled_objects.iter().flat_map(|s| s.state()) {
        if marked(&so.metadata) {
            out.extend(scaled_object_target(&so));
        }
    }
    out
}

/// Every target carrying the mark of a template that no longer exists.
pub fn orphaned_targets(stores: &Stores, live: &HashSet<String>) -> BTreeMap<TargetKey, Target> {
    let wanted = marked_targets(stores, |uid| !live.contains(uid));
    targets(stores, &wanted, live)
}

/// The snapshot of one template.
pub fn snapshot<T: Template>(tpl: &T, stores: &Stores) -> Snapshot {
    let meta = tpl.meta();
    let uid = meta.uid.clone().unwrap_or_default();
    let view = TemplateView {
        kind: T::KIND,
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
        uid: uid.clone(),
        generation: meta.generation,
        deleting: meta.deletion_timestamp.is_some(),
        has_finalizer: meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == keys::FINALIZER),
        window: tpl.window().clone(),
        actions: tpl.actions().to_vec(),
        status: tpl.status_or_default(),
    };
    let mut wanted: BTreeSet<TargetKey> = view.actions.iter().map(|a| view.target_key(a)).collect();
    wanted.extend(marked_targets(stores, |u| u == uid));
    let live = live_uids(stores);
    Snapshot {
        targets: targets(stores, &wanted, &live),
        template: view,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    fn written_by(manager: &str, at: &str) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some(manager.into()),
                time: Some(Time(at.parse().expect("time"))),
                ..ManagedFieldsEntry::default()
            }]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_moonins_own_recent_write_is_waited_for() {
        let now: Timestamp = "2026-11-30T10:00:30Z".parse().expect("now");
        let ours = written_by(field_manager::SCALING, "2026-11-30T10:00:10Z");
        assert!(written_recently(&ours, now));
        let old = written_by(field_manager::SCALING, "2026-11-30T09:59:59Z");
        assert!(!written_recently(&old, now), "waits 30 s at most");
        let theirs = written_by("kubectl-edit", "2026-11-30T10:00:10Z");
        assert!(!written_recently(&theirs, now));
    }
}
