//! Load: builds decide's plain-data [`Snapshot`] from the shared reflector caches.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use super::decide::{
    Autoscaler, AutoscalerKind, GUARDED_ANNOTATIONS, Marks, OBSERVATION_LIMIT, Original,
    OwnerRecord, Snapshot, Target, TargetKey, TemplateKind, TemplateView, Workload,
};
use super::index::{
    Index, Kind, Ref, hpa_target, owned_by_scaled_object, owner_uid, scaled_object_target,
};
use super::owners::{
    copied_marks, last_writes, moonin_wrote, replicas_set_by, spec_managers, status_after_spec,
};
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
    /// Where each template's marks are and what scales each target, kept by the caches.
    pub index: Index,
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

/// Whether the template `owner` names exists now, with the UID it records.
fn owner_live(stores: &Stores, owner: &OwnerRecord) -> bool {
    let same = |meta: &ObjectMeta| meta.uid.as_deref() == Some(owner.uid.as_str());
    match &owner.namespace {
        _ if owner.kind == <ClusterScalingTemplate as kube::Resource>::kind(&()) => stores
            .cluster_templates
            .get(&ObjectRef::new(&owner.name))
            .is_some_and(|t| same(&t.metadata)),
        Some(ns) => stores
            .templates
            .get(&ObjectRef::new(&owner.name).within(ns))
            .is_some_and(|t| same(&t.metadata)),
        None => false,
    }
}

fn marks(meta: &ObjectMeta, stores: &Stores) -> Marks {
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
                m.owner_live = owner_live(stores, &o);
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

/// Whether the controller of `hpa` is sure to write its status once it acts on its bounds,
/// its Deployment having `replicas`: outside the bounds it must
/// scale the Deployment into them and say so. Inside them it may write nothing at all
/// (without a metrics server nothing changes), so no wait could end on evidence: the
/// Deployment is restored at once, and restored again if the controller, acting on the
/// override's bounds, scales it back.
fn must_write(hpa: &HorizontalPodAutoscaler, replicas: Option<i32>) -> bool {
    let (min, max) = (hpa.spec.min_replicas.unwrap_or(1), hpa.spec.max_replicas);
    let replicas = replicas.unwrap_or(1);
    // 0 replicas with a minimum above 0 is an HPA switched off: its controller does nothing.
    replicas > 0 && (replicas < min || replicas > max)
}

/// Whether the HPA controller must still act on bounds older than the HPA's, last written
/// at `written`, its target having `replicas`: it must write ([`must_write`]), has written
/// no status since, and the write is recent ([`OBSERVATION_LIMIT`]).
fn hpa_lags(
    hpa: &HorizontalPodAutoscaler,
    written: Option<Timestamp>,
    replicas: Option<i32>,
    now: Timestamp,
) -> bool {
    !status_after_spec(&hpa.metadata)
        && written.is_some_and(|w| now.duration_since(w) < observation_wait(hpa, replicas))
}

/// How long after a write of its bounds a restore of the Deployment waits for the HPA
/// controller's status write, at most: [`OBSERVATION_LIMIT`] when the controller must write
/// ([`must_write`]), else not at all.
pub fn observation_wait(hpa: &HorizontalPodAutoscaler, replicas: Option<i32>) -> SignedDuration {
    if must_write(hpa, replicas) {
        OBSERVATION_LIMIT
    } else {
        SignedDuration::ZERO
    }
}

fn autoscaler_from(
    kind: AutoscalerKind,
    meta: &ObjectMeta,
    min: Option<i32>,
    max: Option<i32>,
    stores: &Stores,
) -> Autoscaler {
    let mut m = marks(meta, stores);
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
        keda_pause(meta)
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
        bounds_written: None,
    }
}

fn workload_from(d: &Deployment, stores: &Stores) -> Workload {
    let copied = copied_marks(&d.metadata);
    let mut m = marks(&d.metadata, stores);
    if copied {
        // Not Moonin's record: read as unmarked (see `copied_marks`); a write still tests
        // their values.
        m = Marks {
            copied,
            has_annotations: m.has_annotations,
            read: m.read,
            ..Marks::default()
        };
    }
    let original_replicas = match annotation(&d.metadata, keys::ORIGINAL_REPLICAS) {
        _ if copied => None,
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
        replicas_set_by: replicas_set_by(&d.metadata),
    }
}

/// Every target in `keys`, with its Deployment and autoscalers, from the caches.
pub fn targets(stores: &Stores, wanted: &BTreeSet<TargetKey>) -> BTreeMap<TargetKey, Target> {
    let mut out: BTreeMap<TargetKey, Target> = wanted
        .iter()
        .map(|k| (k.clone(), Target::default()))
        .collect();
    for key in wanted {
        let r = kube::runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace);
        if let Some(d) = stores.deployments.get(&r)
            && let Some(t) = out.get_mut(key)
        {
            t.deployment = Some(workload_from(&d, stores));
        }
    }
    let now = Timestamp::now();
    // Per ScaledObject (namespace, name): KEDA's HPA's minimum, whether the HPA controller
    // may still be acting on older bounds of it, and when its bounds were last written.
    type KedaHpa = (Option<i32>, bool, Option<Timestamp>);
    let mut keda_hpas: BTreeMap<(String, String), KedaHpa> = BTreeMap::new();
    for (key, hpa) in autoscalers(stores, &stores.hpas, Kind::Hpa, wanted, hpa_target) {
        let Some(t) = out.get_mut(&key) else {
            continue;
        };
        let mut a = autoscaler_from(
            AutoscalerKind::Hpa,
            &hpa.metadata,
            hpa.spec.min_replicas,
            Some(hpa.spec.max_replicas),
            stores,
        );
        let replicas = t.deployment.as_ref().and_then(|d| d.replicas);
        a.bounds_written = last_writes(&hpa.metadata).0;
        if let Some(so) = &a.keda_owner {
            // KEDA writes its HPA's bounds.
            let lags = hpa_lags(&hpa, a.bounds_written, replicas, now);
            keda_hpas.insert(
                (key.namespace.clone(), so.clone()),
                (hpa.spec.min_replicas, lags, a.bounds_written),
            );
        } else {
            a.unobserved = hpa_lags(&hpa, moonin_wrote(&hpa.metadata), replicas, now);
        }
        t.autoscalers.push(a);
    }
    if let Some(sos) = &stores.scaled_objects {
        let found = autoscalers(
            stores,
            sos,
            Kind::ScaledObject,
            wanted,
            scaled_object_target,
        );
        for (key, so) in found {
            if let Some(t) = out.get_mut(&key) {
                let mut a = autoscaler_from(
                    AutoscalerKind::ScaledObject,
                    &so.metadata,
                    so.spec.min_replica_count,
                    so.spec.max_replica_count,
                    stores,
                );
                // KEDA carries the bounds to its HPA (a minimum of 0 scales to zero
                // through a minimum of 1 there), which it is sure to do, and the HPA
                // controller acts on that.
                let expected = so.spec.min_replica_count.unwrap_or(0).max(1);
                let recent = moonin_wrote(&so.metadata)
                    .is_some_and(|w| now.duration_since(w) < OBSERVATION_LIMIT);
                let keda_hpa = keda_hpas.get(&(key.namespace.clone(), a.name.clone()));
                a.unobserved = keda_hpa
                    .is_some_and(|(min, lags, _)| *lags || (*min != Some(expected) && recent));
                a.bounds_written = keda_hpa.and_then(|h| h.2);
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

/// The KEDA annotation that pauses a ScaledObject, if one does. KEDA reads a replica count
/// as a pause always, and the others unless their value is a boolean false as Go reads one
/// (`false`, `0`, `f`, …); a value it cannot read as a boolean it takes for a pause.
fn keda_pause(meta: &ObjectMeta) -> Option<String> {
    let pauses = |key: &str, value: &str| {
        key == "autoscaling.keda.sh/paused-replicas"
            || !matches!(value, "0" | "f" | "F" | "false" | "FALSE" | "False")
    };
    keys::KEDA_PAUSED
        .iter()
        .find(|k| annotation(meta, k).is_some_and(|v| pauses(k, v)))
        .map(|k| (*k).to_string())
}

/// The cached object `r` points at.
fn get<K: crate::runtime::cache::Cached>(store: &Store<K>, r: &Ref) -> Option<Arc<K>> {
    store.get(&ObjectRef::new(&r.name).within(&r.namespace))
}

/// The autoscalers of kind `kind` in `store` that scale each of `wanted`, found through the
/// index; hints the store does not bear out are dropped.
fn autoscalers<K: crate::runtime::cache::Cached>(
    stores: &Stores,
    store: &Store<K>,
    kind: Kind,
    wanted: &BTreeSet<TargetKey>,
    target: fn(&K) -> Option<TargetKey>,
) -> Vec<(TargetKey, Arc<K>)> {
    let mut out = Vec::new();
    for key in wanted {
        for r in stores.index.scaling(key) {
            if r.kind != kind {
                continue;
            }
            match get(store, &r) {
                Some(o) if target(&o).as_ref() == Some(key) => out.push((key.clone(), o)),
                _ => stores.index.not_scaling(key, &r),
            }
        }
    }
    out
}

/// The targets of the objects (Deployments, HPAs not created by KEDA, ScaledObjects) that
/// carry the mark of template `uid`, found through the index; hints the stores do not bear
/// out are dropped.
fn marked_targets(stores: &Stores, uid: &str) -> BTreeSet<TargetKey> {
    let marked = |meta: &ObjectMeta| owner_uid(meta).is_some_and(|u| u == uid);
    let mut out = BTreeSet::new();
    for r in stores.index.marked(uid) {
        let target = match r.kind {
            Kind::Deployment => get(&stores.deployments, &r)
                .filter(|d| marked(&d.metadata))
                .map(|_| TargetKey {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                }),
            Kind::Hpa => get(&stores.hpas, &r)
                .filter(|h| marked(&h.metadata) && !owned_by_scaled_object(&h.metadata))
                .and_then(|h| hpa_target(&h)),
            Kind::ScaledObject => (stores.scaled_objects.as_ref())
                .and_then(|s| get(s, &r))
                .filter(|s| marked(&s.metadata))
                .and_then(|s| scaled_object_target(&s)),
        };
        match target {
            Some(key) => {
                out.insert(key);
            }
            None => stores.index.unmarked(uid, &r),
        }
    }
    out
}

/// Every target carrying the mark of a template that no longer exists.
pub fn orphaned_targets(stores: &Stores, live: &HashSet<String>) -> BTreeMap<TargetKey, Target> {
    let mut wanted = BTreeSet::new();
    for uid in stores.index.owners() {
        if !live.contains(&uid) {
            wanted.extend(marked_targets(stores, &uid));
        }
    }
    targets(stores, &wanted)
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
    wanted.extend(marked_targets(stores, &uid));
    Snapshot {
        targets: targets(stores, &wanted),
        template: view,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::field_manager;
    use crate::scaling::owners::fixtures::*;
    use crate::scaling::owners::{KEPT_OWNERS, field_set, keep_deployment_owners};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn hpa(min: i32, max: i32, meta: ObjectMeta) -> HorizontalPodAutoscaler {
        let mut h = HorizontalPodAutoscaler {
            metadata: meta,
            ..HorizontalPodAutoscaler::default()
        };
        h.spec.min_replicas = Some(min);
        h.spec.max_replicas = max;
        h
    }

    /// `autoscaling.keda.sh/paused: "false"` (as GitOps repositories toggle it) pauses
    /// nothing; `"true"`, a value KEDA cannot read as a boolean, or a replica count does.
    #[test]
    fn a_keda_pause_annotation_set_to_false_pauses_nothing() {
        let with = |key: &str, value: &str| ObjectMeta {
            annotations: Some([(key.to_string(), value.to_string())].into()),
            ..ObjectMeta::default()
        };
        let paused = "autoscaling.keda.sh/paused";
        for (key, value, pauses) in [
            (paused, "false", false),
            (paused, "False", false),
            (paused, "0", false),
            (paused, "true", true),
            (paused, "yes", true),
            ("autoscaling.keda.sh/paused-scale-in", "false", false),
            ("autoscaling.keda.sh/paused-scale-out", "true", true),
            ("autoscaling.keda.sh/paused-replicas", "0", true),
        ] {
            assert_eq!(
                keda_pause(&with(key, value)),
                pauses.then(|| key.to_string()),
                "{key}: {value}"
            );
        }
        assert_eq!(keda_pause(&ObjectMeta::default()), None);
    }

    /// A restored HPA whose controller has written no status since: its Deployment waits 2
    /// min when the controller must write, not at all when it may not; a status write ends
    /// the wait.
    #[test]
    fn a_restore_waits_for_the_controller_as_long_as_it_is_sure_to_say_so() {
        let at = |t: &str| t.parse::<Timestamp>().expect("time");
        let wrote = "2026-11-30T10:00:00Z";
        let bounds = ["minReplicas", "maxReplicas"];
        let restored = hpa(
            1,
            3,
            entries(vec![owning(field_manager::SCALING, wrote, &bounds)]),
        );
        let written = moonin_wrote(&restored.metadata);
        assert_eq!(written, Some(at(wrote)));
        let now = at("2026-11-30T10:01:59Z");
        assert!(
            hpa_lags(&restored, written, Some(4), now),
            "must write: 2 min"
        );
        assert!(!hpa_lags(
            &restored,
            written,
            Some(4),
            at("2026-11-30T10:02:00Z")
        ));
        assert!(
            !hpa_lags(&restored, written, Some(2), at(wrote)),
            "inside: no wait"
        );
        let mut seen = restored.clone();
        seen.metadata
            .managed_fields
            .get_or_insert_default()
            .push(entry(
                "kube-controller-manager",
                Some("status"),
                "2026-11-30T10:00:12Z",
            ));
        assert!(!hpa_lags(&seen, written, Some(4), now), "acted on");
        assert!(!hpa_lags(&restored, None, Some(4), now), "never written");
    }

    /// Marks last written by another field manager are copies (`kubectl rollout undo` puts
    /// a ReplicaSet's annotations back on its Deployment), as read and as cached; marks
    /// Moonin wrote, or whose writer is not recorded, are Moonin's record.
    #[test]
    fn marks_another_field_manager_wrote_are_copies_and_read_as_no_marks() {
        let marks = [keys::OWNER, keys::ORIGINAL_REPLICAS];
        // Moonin's raise: the replicas and both marks in one write.
        let raised = ManagedFieldsEntry {
            fields_v1: Some(field_set(KEPT_OWNERS)),
            ..entry(field_manager::SCALING, None, "2026-11-30T08:00:00Z")
        };
        let undo = "2026-11-30T20:00:00Z";
        let cases = [
            (vec![raised.clone()], false, "Moonin wrote both"),
            (vec![], false, "no writer recorded"),
            (
                vec![annotating("kubectl-rollout", undo, &marks)],
                true,
                "the undo wrote both",
            ),
            (
                // A field changed moves to its new writer: Moonin keeps the rest.
                vec![
                    ManagedFieldsEntry {
                        fields_v1: Some(field_set(KEPT_OWNERS[..2].iter().copied())),
                        ..raised.clone()
                    },
                    annotating("kubectl-rollout", undo, &marks[1..]),
                ],
                true,
                "the undo changed one",
            ),
            (
                vec![annotating("kubectl", undo, &["app"]), raised.clone()],
                false,
                "another manager's other annotation",
            ),
        ];
        let stores = Stores {
            templates: kube::runtime::reflector::store().0,
            cluster_templates: kube::runtime::reflector::store().0,
            deployments: kube::runtime::reflector::store().0,
            hpas: kube::runtime::reflector::store().0,
            scaled_objects: None,
            index: Index::default(),
        };
        for (managed, copied, why) in cases {
            let mut d = Deployment {
                metadata: ObjectMeta {
                    managed_fields: Some(managed),
                    annotations: Some(
                        [
                            (keys::OWNER.to_string(), r#"{"kind":"ScalingTemplate","namespace":"shop","name":"peak","uid":"t1","action":"a"}"#.to_string()),
                            (keys::ORIGINAL_REPLICAS.to_string(), "1".to_string()),
                        ]
                        .into(),
                    ),
                    ..marked_meta("web", None)
                },
                ..Deployment::default()
            };
            assert_eq!(copied_marks(&d.metadata), copied, "{why}");
            keep_deployment_owners(&mut d.metadata);
            assert_eq!(copied_marks(&d.metadata), copied, "{why}, as cached");
            let w = workload_from(&d, &stores);
            assert_eq!(w.marks.copied, copied, "{why}");
            assert_eq!(w.marks.owner.is_none(), copied, "{why}");
            assert_eq!(w.original_replicas.is_none(), copied, "{why}");
            // Whatever they are, a write still tests their values.
            assert_eq!(w.marks.read.len(), 2, "{why}");
        }
    }

    fn marked_meta(name: &str, owner: Option<&str>) -> ObjectMeta {
        let record = |uid: &str| OwnerRecord {
            kind: "ScalingTemplate".into(),
            namespace: Some("shop".into()),
            name: "peak".into(),
            uid: uid.into(),
            action: "a".into(),
        };
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            annotations: owner.map(|uid| {
                [(
                    keys::OWNER.to_string(),
                    serde_json::to_string(&record(uid)).expect("json"),
                )]
                .into()
            }),
            ..ObjectMeta::default()
        }
    }

    fn scaling(name: &str, target: &str, owner: Option<&str>) -> HorizontalPodAutoscaler {
        let mut h = hpa(1, 3, marked_meta(name, owner));
        h.spec.scale_target_ref.kind = "Deployment".into();
        h.spec.scale_target_ref.name = target.into();
        h
    }

    fn key(name: &str) -> TargetKey {
        TargetKey {
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    /// A template's marked targets and a target's autoscalers are found through the index the
    /// caches keep, and read from the stores: a hint the stores no longer bear out (a mark
    /// removed, an HPA re-pointed or deleted without its trigger) is dropped, not acted on.
    #[test]
    fn the_index_finds_marked_targets_and_autoscalers_as_the_stores_show_them() {
        use kube::runtime::{reflector, watcher::Event};
        let (deployments, mut dw) = reflector::store::<Deployment>();
        let (hpas, mut hw) = reflector::store::<HorizontalPodAutoscaler>();
        let index = Index::default();
        let stores = Stores {
            templates: reflector::store().0,
            cluster_templates: reflector::store().0,
            deployments,
            hpas,
            scaled_objects: None,
            index: index.clone(),
        };
        let (on_deployment, on_hpa) = (index.deployments(), index.hpas());
        let deployment = |name, owner| Deployment {
            metadata: marked_meta(name, owner),
            ..Deployment::default()
        };
        for d in [deployment("web", Some("t1")), deployment("db", None)] {
            dw.apply_watcher_event(&Event::Apply(d.clone()));
            on_deployment(&d);
        }
        for h in [
            scaling("web", "web", None),
            scaling("api", "api", Some("t1")),
            scaling("other", "db", Some("t2")),
        ] {
            hw.apply_watcher_event(&Event::Apply(h.clone()));
            on_hpa(&h);
        }
        assert_eq!(
            marked_targets(&stores, "t1"),
            [key("api"), key("web")].into()
        );
        assert_eq!(marked_targets(&stores, "t2"), [key("db")].into());
        let names = |t: &BTreeMap<TargetKey, Target>, k: &str| -> Vec<String> {
            t[&key(k)]
                .autoscalers
                .iter()
                .map(|a| a.name.clone())
                .collect()
        };
        let wanted: BTreeSet<_> = [key("web"), key("db"), key("api")].into();
        let found = targets(&stores, &wanted);
        assert_eq!(names(&found, "web"), ["web"]);
        assert_eq!(names(&found, "db"), ["other"]);
        assert!(found[&key("db")].deployment.is_some());
        assert!(found[&key("api")].deployment.is_none());
        let owner_live = |t: &BTreeMap<TargetKey, Target>| {
            t[&key("web")]
                .deployment
                .as_ref()
                .map(|d| d.marks.owner_live)
        };
        assert_eq!(owner_live(&found), Some(false), "no template t1");
        let template = |uid: &str| -> ScalingTemplate {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "peak", "namespace": "shop", "uid": uid},
                "spec": {"schedule": "0 8 * * *", "duration": "1h", "actions": []},
            }))
            .expect("template")
        };
        let (templates, mut tw) = reflector::store::<ScalingTemplate>();
        let stores = Stores {
            templates,
            ..stores
        };
        tw.apply_watcher_event(&Event::Apply(template("t0")));
        let found = targets(&stores, &wanted);
        assert_eq!(
            owner_live(&found),
            Some(false),
            "peak re-created: another UID"
        );
        tw.apply_watcher_event(&Event::Apply(template("t1")));
        assert_eq!(owner_live(&targets(&stores, &wanted)), Some(true));

        // The stores change and no trigger says so: the stale hints are dropped.
        dw.apply_watcher_event(&Event::Apply(deployment("web", None)));
        hw.apply_watcher_event(&Event::Apply(scaling("other", "web", Some("t2"))));
        hw.apply_watcher_event(&Event::Delete(scaling("api", "api", Some("t1"))));
        assert_eq!(marked_targets(&stores, "t1"), BTreeSet::new());
        assert_eq!(index.marked("t1"), [], "dropped");
        assert_eq!(index.owners(), ["t2"]);
        let found = targets(&stores, &wanted);
        assert_eq!(names(&found, "db"), Vec::<String>::new());
        assert!(index.scaling(&key("db")).is_empty(), "dropped");
        assert_eq!(
            orphaned_targets(&stores, &HashSet::new())
                .keys()
                .collect::<Vec<_>>(),
            [&key("web")],
            "t2's marked HPA scales web now: the target is read from the store"
        );
    }

    /// Replicas outside the restored bounds make the HPA controller write; inside, it may not.
    #[test]
    fn only_replicas_outside_the_bounds_make_the_controller_write() {
        assert!(must_write(&hpa(1, 3, ObjectMeta::default()), Some(4)));
        assert!(must_write(&hpa(2, 5, ObjectMeta::default()), Some(1)));
        assert!(
            must_write(&hpa(2, 5, ObjectMeta::default()), None),
            "absent is 1"
        );
        assert!(!must_write(&hpa(1, 3, ObjectMeta::default()), Some(2)));
        assert!(!must_write(&hpa(1, 3, ObjectMeta::default()), Some(3)));
        assert!(
            !must_write(&hpa(1, 3, ObjectMeta::default()), Some(0)),
            "switched off"
        );
    }
}
