//! Decide: from a plain-data [`Snapshot`] of a template and its targets, and `now`, the
//! [`Plan`] of writes, the next status, the Events and when to look again. No client, no
//! clock, no I/O: every branch is a table test below.
//!
//! How an override lives on someone else's object:
//! - the HPA or ScaledObject that scales the Deployment (the *carrier*) gets the new
//!   min/max **and** `moonin.io/owner`, `moonin.io/original` and `moonin.io/applied-hash`
//!   in one JSON Patch whose first op tests the `resourceVersion` it was read at;
//! - with no autoscaler, a provisional HPA owned by the template carries it;
//! - the Deployment's replicas are raised to the new minimum at once (no waiting for the
//!   HPA's 15 s sync), recording `moonin.io/original-replicas` in the same patch.
//!
//! Reverting restores only fields Moonin still owns (per `managedFields`), so a value
//! someone else wrote in the meantime is never clobbered.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::window::{self, ActiveWindow, WindowError, WindowInputs};
use crate::api::conditions::{self, Desired, reasons as common, types};
use crate::api::field_manager;
use crate::api::scaling::{
    ActionStatus, Execution, PlannedWindow, ScalingAction, ScalingTemplateStatus, WindowSpec,
    WindowStatus, keys, reasons,
};

/// How often an override undone by another field manager is re-applied in one window.
pub const MAX_REAPPLIES: i32 = 3;
/// How many executions `status.executions` keeps.
pub const EXECUTIONS_KEPT: usize = 10;
/// The slow safety resync: a template is looked at again at least this often.
pub const RESYNC: SignedDuration = SignedDuration::from_mins(5);

/// Namespaced or cluster-scoped template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateKind {
    /// `ScalingTemplate`.
    Namespaced,
    /// `ClusterScalingTemplate`.
    Cluster,
}

impl TemplateKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateKind::Namespaced => "ScalingTemplate",
            TemplateKind::Cluster => "ClusterScalingTemplate",
        }
    }
}

/// The `moonin.io/owner` annotation: which template and action hold an override.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRecord {
    /// `ScalingTemplate` or `ClusterScalingTemplate`.
    pub kind: String,
    /// The template's namespace (absent for a cluster template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The template's name.
    pub name: String,
    /// The template's UID: a re-created template with the same name is another owner.
    pub uid: String,
    /// The action's name.
    pub action: String,
}

impl OwnerRecord {
    /// `ScalingTemplate shop/peak (action checkout)`.
    pub fn describe(&self) -> String {
        let name = match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        };
        format!("{} {name} (action {})", self.kind, self.action)
    }
}

/// The `moonin.io/original` annotation: what the override replaced.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Original {
    /// The spec fields the override changed and their values before it (`null`: absent).
    pub spec: BTreeMap<String, Option<i32>>,
    /// The Deployment's `spec.replicas` when the override was applied.
    pub deployment_replicas: Option<i32>,
}

/// What scales a Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AutoscalerKind {
    /// `autoscaling/v2` HorizontalPodAutoscaler.
    Hpa,
    /// KEDA `keda.sh/v1alpha1` ScaledObject.
    ScaledObject,
}

impl AutoscalerKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoscalerKind::Hpa => "HorizontalPodAutoscaler",
            AutoscalerKind::ScaledObject => "ScaledObject",
        }
    }
    /// The spec field holding the minimum.
    pub fn min_field(self) -> &'static str {
        match self {
            AutoscalerKind::Hpa => "minReplicas",
            AutoscalerKind::ScaledObject => "minReplicaCount",
        }
    }
    /// The spec field holding the maximum.
    pub fn max_field(self) -> &'static str {
        match self {
            AutoscalerKind::Hpa => "maxReplicas",
            AutoscalerKind::ScaledObject => "maxReplicaCount",
        }
    }
}

/// The ownership annotations found on an object, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Marks {
    /// `moonin.io/owner`.
    pub owner: Option<OwnerRecord>,
    /// Whether that owner template still exists (same UID). Filled in by load.
    pub owner_live: bool,
    /// Whether the object has a `metadata.annotations` map at all (JSON Patch needs it).
    pub has_annotations: bool,
    /// A Moonin annotation that could not be read, and why.
    pub unreadable: Option<String>,
}

/// An HPA or ScaledObject that targets a Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Autoscaler {
    /// HPA or ScaledObject.
    pub kind: AutoscalerKind,
    /// Its name (same namespace as the Deployment).
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The resourceVersion it was read at: every write tests it.
    pub resource_version: String,
    /// Labelled `moonin.io/provisional`: created by Moonin for a window.
    pub provisional: bool,
    /// For an HPA created by KEDA: the ScaledObject that owns it.
    pub keda_owner: Option<String>,
    /// The min field (`minReplicas` / `minReplicaCount`).
    pub min: Option<i32>,
    /// The max field (`maxReplicas` / `maxReplicaCount`).
    pub max: Option<i32>,
    /// A KEDA pause annotation present on a ScaledObject.
    pub paused: Option<String>,
    /// Ownership annotations.
    pub marks: Marks,
    /// `moonin.io/original`.
    pub original: Option<Original>,
    /// `moonin.io/applied-hash`.
    pub applied_hash: Option<String>,
    /// The field manager that last wrote each spec field (from `managedFields`), for the
    /// min and max fields.
    pub managers: BTreeMap<String, String>,
}

/// The Deployment an action scales.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The resourceVersion it was read at.
    pub resource_version: String,
    /// `spec.replicas` (absent means 1).
    pub replicas: Option<i32>,
    /// Ownership annotations.
    pub marks: Marks,
    /// `moonin.io/original-replicas`.
    pub original_replicas: Option<i32>,
}

impl Workload {
    fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }
}

/// A Deployment, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TargetKey {
    /// Namespace.
    pub namespace: String,
    /// Deployment name.
    pub name: String,
}

impl std::fmt::Display for TargetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Deployment and everything that scales it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Target {
    /// The Deployment, if it exists.
    pub deployment: Option<Workload>,
    /// Every HPA and ScaledObject whose `scaleTargetRef` is the Deployment.
    pub autoscalers: Vec<Autoscaler>,
}

/// The template, as decide needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateView {
    /// Namespaced or cluster.
    pub kind: TemplateKind,
    /// Its namespace (namespaced templates only).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// It carries Moonin's finalizer.
    pub has_finalizer: bool,
    /// The window spec.
    pub window: WindowSpec,
    /// The actions.
    pub actions: Vec<ScalingAction>,
    /// The current status.
    pub status: ScalingTemplateStatus,
}

impl TemplateView {
    fn owner(&self, action: &str) -> OwnerRecord {
        OwnerRecord {
            kind: self.kind.as_str().to_string(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            action: action.to_string(),
        }
    }

    /// The Deployment an action targets.
    pub fn target_key(&self, action: &ScalingAction) -> TargetKey {
        TargetKey {
            namespace: action
                .target
                .namespace
                .clone()
                .or_else(|| self.namespace.clone())
                .unwrap_or_default(),
            name: action.target.name.clone(),
        }
    }
}

/// Everything decide looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The template.
    pub template: TemplateView,
    /// Each action's target, plus every target that carries this template's marks.
    pub targets: BTreeMap<TargetKey, Target>,
}

/// The object a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// An HPA.
    Hpa,
    /// A ScaledObject.
    ScaledObject,
    /// A Deployment.
    Deployment,
}

impl From<AutoscalerKind> for ObjectKind {
    fn from(k: AutoscalerKind) -> Self {
        match k {
            AutoscalerKind::Hpa => ObjectKind::Hpa,
            AutoscalerKind::ScaledObject => ObjectKind::ScaledObject,
        }
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A JSON Patch whose first op tests the resourceVersion.
    Patch {
        /// What is patched.
        kind: ObjectKind,
        /// The JSON Patch operations.
        ops: Vec<Value>,
    },
    /// Create a provisional HPA (the whole object).
    CreateHpa(Value),
    /// Delete a provisional HPA, preconditioned on its UID and resourceVersion.
    DeleteHpa {
        /// UID precondition.
        uid: String,
        /// resourceVersion precondition.
        resource_version: String,
    },
}

/// A write to one object, on behalf of one action, and the Event to publish once it
/// succeeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// The action (or, for a sweep, the owner record's action).
    pub action: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// The write.
    pub write: Write,
    /// Published after the write succeeds.
    pub event: Option<EventNote>,
    /// Ops of different actions in the same wave may be written concurrently; waves run
    /// in ascending order, and one action's ops always run in plan order.
    pub wave: Wave,
}

/// When an op may run: every revert before every apply, each by its priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Wave {
    /// 0 for reverts, 1 for applies.
    pub phase: u8,
    /// `priorityDown` for a revert, `priorityUp` for an apply.
    pub priority: i32,
}

/// An Event about the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    /// Warning or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human note.
    pub note: String,
}

impl EventNote {
    fn normal(reason: &'static str, note: String) -> Self {
        Self {
            warning: false,
            reason,
            note,
        }
    }
    fn warning(reason: &'static str, note: String) -> Self {
        Self {
            warning: true,
            reason,
            note,
        }
    }
}

/// What to do with the template's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalizer {
    /// Leave it.
    Keep,
    /// Add it (first reconcile).
    Add,
    /// Remove it: everything is reverted and the template is being deleted.
    Remove,
}

/// The answer of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Writes, in order: reverts by `priorityDown`, then applies by `priorityUp`.
    pub ops: Vec<Op>,
    /// The status the template should have once every op succeeded.
    pub status: ScalingTemplateStatus,
    /// Events about the template that do not depend on a write.
    pub events: Vec<EventNote>,
    /// When to reconcile again at the latest.
    pub requeue_at: Timestamp,
    /// The finalizer.
    pub finalizer: Finalizer,
}

/// Action states.
pub mod state {
    /// The override is in place.
    pub const APPLIED: &str = "Applied";
    /// The override was reverted (window closed) or undone by someone else.
    pub const REVERTED: &str = "Reverted";
    /// Waiting for a window, or for something to clear.
    pub const PENDING: &str = "Pending";
    /// Another template holds the target.
    pub const CONFLICT: &str = "Conflict";
    /// The target cannot be overridden as it is.
    pub const BLOCKED: &str = "Blocked";
    /// The target is missing or a write failed.
    pub const FAILED: &str = "Failed";
}

/// Stable, short hash of an override: FNV-1a 64 over its defining values.
pub fn override_hash(uid: &str, action: &ScalingAction, key: &TargetKey) -> String {
    let text = format!(
        "{uid}\0{}\0{}\0{}\0{}\0{}",
        action.name, key.namespace, key.name, action.min_replicas, action.max_replicas
    );
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The name of the provisional HPA for a Deployment: `moonin-<deployment>`, shortened
/// with a hash suffix when that would pass the 253-character limit.
pub fn provisional_name(deployment: &str) -> String {
    let name = format!("moonin-{deployment}");
    if name.len() <= 253 {
        return name;
    }
    let hash = override_hash(
        "",
        &empty_action(),
        &TargetKey {
            namespace: String::new(),
            name: deployment.to_string(),
        },
    );
    format!("{}-{}", &name[..253 - 17], &hash)
}

fn empty_action() -> ScalingAction {
    ScalingAction {
        name: String::new(),
        target: crate::api::scaling::TargetRef {
            kind: String::new(),
            namespace: None,
            name: String::new(),
        },
        min_replicas: 0,
        max_replicas: 0,
        priority_up: 0,
        priority_down: 0,
    }
}

fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", esc(key))
}

fn test_rv(rv: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
}

/// Ops that set annotations, creating the map when the object has none.
fn set_annotations(has_annotations: bool, pairs: &[(&str, String)]) -> Vec<Value> {
    if !has_annotations {
        let map: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
            .collect();
        return vec![json!({"op": "add", "path": "/metadata/annotations", "value": map})];
    }
    pairs
        .iter()
        .map(|(k, v)| json!({"op": "add", "path": annotation_path(k), "value": v}))
        .collect()
}

fn remove_annotations(keys_present: &[&str]) -> Vec<Value> {
    keys_present
        .iter()
        .map(|k| json!({"op": "remove", "path": annotation_path(k)}))
        .collect()
}

fn set_field(path: &str, current: Option<i32>, value: Option<i32>) -> Option<Value> {
    match (current, value) {
        (a, b) if a == b => None,
        (_, Some(v)) => Some(json!({"op": "add", "path": path, "value": v})),
        (Some(_), None) => Some(json!({"op": "remove", "path": path})),
        (None, None) => None,
    }
}

fn show(v: Option<i32>) -> String {
    v.map_or_else(|| "unset".to_string(), |v| v.to_string())
}

/// One action's outcome: its status entry and the ops that get it there.
struct Outcome {
    status: ActionStatus,
    ops: Vec<Op>,
    /// Condition-level facts.
    conflict: Option<String>,
    drift: Option<(bool, String)>,
    warning: Option<(&'static str, String)>,
}

impl Outcome {
    fn new(action: &str, key: &TargetKey, state: &str, message: impl Into<String>) -> Self {
        Outcome {
            status: ActionStatus {
                name: action.to_string(),
                target: key.to_string(),
                state: state.to_string(),
                via: None,
                applied_hash: None,
                message: Some(message.into()),
                reapplies: None,
            },
            ops: Vec::new(),
            conflict: None,
            drift: None,
            warning: None,
        }
    }
}

fn is_ours(marks: &Marks, uid: &str) -> bool {
    marks.owner.as_ref().is_some_and(|o| o.uid == uid)
}

fn is_ours_for(marks: &Marks, uid: &str, action: &str) -> bool {
    marks
        .owner
        .as_ref()
        .is_some_and(|o| o.uid == uid && o.action == action)
}

/// Reverts everything on `target` that `owned` says is to be released, in the order
/// carrier first, Deployment second.
fn revert_target(
    key: &TargetKey,
    target: &Target,
    owned: &dyn Fn(&Marks) -> bool,
    keep_carrier: Option<&str>,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut restored_bounds: Option<(Option<i32>, Option<i32>)> = None;
    let mut recorded_replicas: Option<i32> = None;
    let mut raised_by_override = false;
    let mut carrier_action = String::new();
    for a in &target.autoscalers {
        // KEDA copies a ScaledObject's annotations onto its HPA: those copies are KEDA's.
        if !owned(&a.marks) || keep_carrier == Some(a.name.as_str()) || a.keda_owner.is_some() {
            continue;
        }
        let action = a
            .marks
            .owner
            .as_ref()
            .map(|o| o.action.clone())
            .unwrap_or_default();
        if a.marks.unreadable.is_some() {
            // Never drop restore data that cannot be read: decide reports it instead.
            continue;
        }
        carrier_action = action.clone();
        if let Some(orig) = &a.original {
            recorded_replicas = orig.deployment_replicas;
            raised_by_override = orig
                .deployment_replicas
                .zip(a.min)
                .is_some_and(|(r, m)| m > r);
        }
        if a.provisional {
            ops.push(Op {
                action: action.clone(),
                namespace: key.namespace.clone(),
                name: a.name.clone(),
                write: Write::DeleteHpa {
                    uid: a.uid.clone(),
                    resource_version: a.resource_version.clone(),
                },
                event: Some(EventNote::normal(
                    "Reverted",
                    format!(
                        "{action}: deleted provisional HorizontalPodAutoscaler {}/{}",
                        key.namespace, a.name
                    ),
                )),
                wave: Wave::default(),
            });
            continue;
        }
        let mut patch = vec![test_rv(&a.resource_version)];
        let mut restored = Vec::new();
        let mut kept = Vec::new();
        let original = a.original.clone().unwrap_or_default();
        let mut bounds = (a.min, a.max);
        for (field, value) in &original.spec {
            let current = if field == a.kind.min_field() {
                a.min
            } else if field == a.kind.max_field() {
                a.max
            } else {
                continue;
            };
            let manager = a.managers.get(field).map(String::as_str);
            if manager.is_some_and(|m| m != field_manager::SCALING) {
                kept.push(format!(
                    "{field} (now {} by {})",
                    show(current),
                    manager.unwrap_or("?")
                ));
                continue;
            }
            if let Some(op) = set_field(&format!("/spec/{field}"), current, *value) {
                patch.push(op);
            }
            if field == a.kind.min_field() {
                bounds.0 = *value;
            } else {
                bounds.1 = *value;
            }
            restored.push(format!("{field} {}", show(*value)));
        }
        restored_bounds = Some(bounds);
        patch.extend(remove_annotations(
            &[keys::OWNER, keys::ORIGINAL, keys::APPLIED_HASH]
                .into_iter()
                .filter(|k| {
                    *k == keys::OWNER
                        || (*k == keys::ORIGINAL && a.original.is_some())
                        || (*k == keys::APPLIED_HASH && a.applied_hash.is_some())
                })
                .collect::<Vec<_>>(),
        ));
        let mut note = format!(
            "{action}: restored {} {}/{}: {}",
            a.kind.as_str(),
            key.namespace,
            a.name,
            if restored.is_empty() {
                "nothing to restore".to_string()
            } else {
                restored.join(", ")
            }
        );
        if !kept.is_empty() {
            note.push_str(&format!(
                "; left {} as another field manager set it",
                kept.join(", ")
            ));
        }
        ops.push(Op {
            action,
            namespace: key.namespace.clone(),
            name: a.name.clone(),
            write: Write::Patch {
                kind: a.kind.into(),
                ops: patch,
            },
            event: Some(EventNote::normal("Reverted", note)),
            wave: Wave::default(),
        });
    }
    if let Some(d) = &target.deployment {
        let annotated = owned(&d.marks);
        // The Deployment is restored from its own record; if a crash came between the
        // carrier's write and the Deployment's, from the carrier's record instead.
        let restore_to = if annotated {
            d.original_replicas
        } else if raised_by_override
            && d.marks.owner.is_none()
            && recorded_replicas.is_some_and(|r| r != d.replicas())
        {
            recorded_replicas
        } else {
            None
        };
        if annotated || restore_to.is_some() {
            let clamp = |r: i32| match restored_bounds {
                Some((lo, hi)) => r.max(lo.unwrap_or(r)).min(hi.unwrap_or(r)),
                None => r,
            };
            let mut patch = vec![test_rv(&d.resource_version)];
            let target_replicas = restore_to.map(clamp);
            if let Some(r) = target_replicas
                && Some(r) != d.replicas
            {
                patch.push(json!({"op": "add", "path": "/spec/replicas", "value": r}));
            }
            if annotated {
                let mut present = vec![keys::OWNER];
                if d.original_replicas.is_some() {
                    present.push(keys::ORIGINAL_REPLICAS);
                }
                patch.extend(remove_annotations(&present));
            }
            let action = d
                .marks
                .owner
                .as_ref()
                .map(|o| o.action.clone())
                .unwrap_or(carrier_action);
            ops.push(Op {
                action: action.clone(),
                namespace: key.namespace.clone(),
                name: d.name.clone(),
                write: Write::Patch {
                    kind: ObjectKind::Deployment,
                    ops: patch,
                },
                event: Some(EventNote::normal(
                    "Reverted",
                    format!(
                        "{action}: Deployment {key} replicas {} -> {}",
                        d.replicas(),
                        target_replicas.map_or_else(|| "unchanged".to_string(), |r| r.to_string())
                    ),
                )),
                wave: Wave::default(),
            });
        }
    }
    ops
}

/// Reverts overrides whose owner template no longer exists (the startup sweep, and any
/// object found later whose owner is gone).
pub fn sweep(targets: &BTreeMap<TargetKey, Target>) -> Vec<Op> {
    let orphan = |m: &Marks| m.owner.is_some() && !m.owner_live;
    targets
        .iter()
        .flat_map(|(key, target)| revert_target(key, target, &orphan, None))
        .collect()
}

fn holder_outcome(
    t: &TemplateView,
    action: &ScalingAction,
    key: &TargetKey,
    holder: &OwnerRecord,
    live: bool,
    what: &str,
) -> Outcome {
    if holder.uid == t.uid {
        // An action renamed or retargeted mid-window: its old override is reverted in this
        // same plan, and the next reconcile applies the new one.
        Outcome::new(
            &action.name,
            key,
            state::PENDING,
            format!(
                "{what} is being released by action {} of this template",
                holder.action
            ),
        )
    } else if live {
        let msg = format!("{what} is held by {}", holder.describe());
        let mut o = Outcome::new(&action.name, key, state::CONFLICT, msg.clone());
        o.conflict = Some(msg);
        o
    } else {
        Outcome::new(
            &action.name,
            key,
            state::PENDING,
            format!(
                "{what} still carries an override of {}, which no longer exists; it is being restored",
                holder.describe()
            ),
        )
    }
}

/// Applies one action on its target.
fn apply_action(
    t: &TemplateView,
    action: &ScalingAction,
    key: &TargetKey,
    target: Option<&Target>,
    window: &ActiveWindow,
    prev: Option<&ActionStatus>,
    same_window: bool,
) -> Outcome {
    let blocked = |msg: String| {
        let mut o = Outcome::new(&action.name, key, state::BLOCKED, msg.clone());
        o.warning = Some((reasons::BLOCKED, msg));
        o
    };
    let Some(target) = target else {
        return not_found(action, key);
    };
    let Some(dep) = &target.deployment else {
        return not_found(action, key);
    };
    if let Some(why) = &dep.marks.unreadable {
        return blocked(format!("Deployment {key}: {why}"));
    }
    if let Some(h) = &dep.marks.owner
        && !(h.uid == t.uid && h.action == action.name)
    {
        return holder_outcome(
            t,
            action,
            key,
            h,
            dep.marks.owner_live,
            &format!("Deployment {key}"),
        );
    }
    let scaled_objects: Vec<&Autoscaler> = target
        .autoscalers
        .iter()
        .filter(|a| a.kind == AutoscalerKind::ScaledObject)
        .collect();
    for a in &target.autoscalers {
        if let Some(so) = &a.keda_owner
            && !scaled_objects.iter().any(|s| &s.name == so)
        {
            return blocked(format!(
                "HorizontalPodAutoscaler {}/{} belongs to ScaledObject {so}, which Moonin cannot see; install KEDA's ScaledObject CRD before starting Moonin",
                key.namespace, a.name
            ));
        }
    }
    let real: Vec<&Autoscaler> = target
        .autoscalers
        .iter()
        .filter(|a| a.keda_owner.is_none() && !a.provisional)
        .collect();
    if real.len() > 1 {
        let names: Vec<String> = real
            .iter()
            .map(|a| format!("{} {}", a.kind.as_str(), a.name))
            .collect();
        return blocked(format!(
            "Deployment {key} has {} autoscalers ({}); Moonin overrides only a workload with one",
            real.len(),
            names.join(", ")
        ));
    }
    let provisional = target
        .autoscalers
        .iter()
        .find(|a| a.provisional && a.keda_owner.is_none());
    let carrier = real.first().copied().or(provisional);
    let hash = override_hash(&t.uid, action, key);
    let owner = t.owner(&action.name);
    let owner_json = serde_json::to_string(&owner).unwrap_or_default();
    let mut ops = Vec::new();
    let mut outcome_msg;
    let mut reapplies = prev
        .filter(|_| same_window)
        .and_then(|p| p.reapplies)
        .unwrap_or(0);
    let mut drift = None;

    // A provisional HPA of ours that a real autoscaler has since replaced goes away.
    if let Some(p) = provisional
        && carrier.is_some_and(|c| c.name != p.name)
        && is_ours(&p.marks, &t.uid)
    {
        let only_p = Target {
            deployment: None,
            autoscalers: vec![p.clone()],
        };
        ops.extend(revert_target(key, &only_p, &|m| is_ours(m, &t.uid), None));
    }

    // The Deployment's replicas before any override: its own record when an earlier
    // commit already raised it (the Deployment is written first), else what it has now.
    let dep_ours = is_ours_for(&dep.marks, &t.uid, &action.name);
    let base_replicas = if dep_ours {
        dep.original_replicas
    } else {
        dep.replicas
    };
    let dep_at = ops.len();
    let recorded_replicas;
    let via;
    match carrier {
        None => {
            let name = provisional_name(&key.name);
            let eff_max = action.max_replicas.max(dep.replicas());
            let original = Original {
                spec: BTreeMap::new(),
                deployment_replicas: base_replicas,
            };
            recorded_replicas = base_replicas;
            let hpa = provisional_hpa(
                t,
                &name,
                key,
                action.min_replicas,
                eff_max,
                &[
                    (keys::OWNER, owner_json.clone()),
                    (
                        keys::ORIGINAL,
                        serde_json::to_string(&original).unwrap_or_default(),
                    ),
                    (keys::APPLIED_HASH, hash.clone()),
                ],
            );
            ops.push(Op {
                action: action.name.clone(),
                namespace: key.namespace.clone(),
                name: name.clone(),
                write: Write::CreateHpa(hpa),
                event: Some(EventNote::normal(
                    "Applied",
                    format!(
                        "{}: created provisional HorizontalPodAutoscaler {}/{name} (min {}, max {eff_max}) until {}",
                        action.name, key.namespace, action.min_replicas, window.end
                    ),
                )),
                wave: Wave::default(),
            });
            via = "ProvisionalHPA";
            outcome_msg = format!(
                "provisional HorizontalPodAutoscaler {name}: min {}, max {eff_max}",
                action.min_replicas
            );
        }
        Some(c) => {
            via = match (c.kind, c.provisional) {
                (AutoscalerKind::ScaledObject, _) => "ScaledObject",
                (AutoscalerKind::Hpa, true) => "ProvisionalHPA",
                (AutoscalerKind::Hpa, false) => "HPA",
            };
            let what = format!("{} {}/{}", c.kind.as_str(), key.namespace, c.name);
            if let Some(why) = &c.marks.unreadable {
                return blocked(format!("{what}: {why}"));
            }
            if let Some(h) = &c.marks.owner
                && !(h.uid == t.uid && h.action == action.name)
            {
                return holder_outcome(t, action, key, h, c.marks.owner_live, &what);
            }
            if let Some(p) = &c.paused {
                return blocked(format!(
                    "{what} is paused by KEDA's {p} annotation; Moonin leaves a paused ScaledObject alone"
                ));
            }
            let (min_f, max_f) = (c.kind.min_field(), c.kind.max_field());
            let ours = is_ours_for(&c.marks, &t.uid, &action.name);
            let eff_max = action.max_replicas.max(dep.replicas());
            let drifted = ours
                && c.applied_hash.as_deref() == Some(hash.as_str())
                && (c.min != Some(action.min_replicas)
                    || c.max.unwrap_or(i32::MAX) < action.max_replicas);
            recorded_replicas = if ours {
                c.original
                    .as_ref()
                    .and_then(|o| o.deployment_replicas)
                    .or(dep.replicas)
            } else {
                base_replicas
            };
            outcome_msg = format!("{what}: {min_f} {}, {max_f} {eff_max}", action.min_replicas);
            let write = if !ours {
                true
            } else if c.applied_hash.as_deref() != Some(hash.as_str()) {
                reapplies = 0;
                true
            } else if drifted {
                let mut who: Vec<String> = [min_f, max_f]
                    .iter()
                    .filter_map(|f| c.managers.get(*f))
                    .filter(|m| m.as_str() != field_manager::SCALING)
                    .cloned()
                    .collect();
                who.dedup();
                let who = if who.is_empty() {
                    "another writer".to_string()
                } else {
                    who.join(", ")
                };
                let changed = format!(
                    "{who} changed {what} to {min_f} {}, {max_f} {}",
                    show(c.min),
                    show(c.max)
                );
                if reapplies < MAX_REAPPLIES {
                    reapplies += 1;
                    drift = Some((
                        false,
                        format!("{changed}; re-applied ({reapplies} of {MAX_REAPPLIES})"),
                    ));
                    true
                } else {
                    drift = Some((
                        true,
                        format!(
                            "{changed}; stopped re-applying after {MAX_REAPPLIES} times in this window. Configure the GitOps tool to ignore these fields (see the README)"
                        ),
                    ));
                    false
                }
            } else {
                false
            };
            if write {
                let mut patch = vec![test_rv(&c.resource_version)];
                patch.extend(set_field(
                    &format!("/spec/{min_f}"),
                    c.min,
                    Some(action.min_replicas),
                ));
                patch.extend(set_field(&format!("/spec/{max_f}"), c.max, Some(eff_max)));
                let mut marks = vec![
                    (keys::OWNER, owner_json.clone()),
                    (keys::APPLIED_HASH, hash.clone()),
                ];
                if !ours || c.original.is_none() {
                    let original = Original {
                        spec: BTreeMap::from([
                            (min_f.to_string(), c.min),
                            (max_f.to_string(), c.max),
                        ]),
                        deployment_replicas: base_replicas,
                    };
                    marks.push((
                        keys::ORIGINAL,
                        serde_json::to_string(&original).unwrap_or_default(),
                    ));
                }
                patch.extend(set_annotations(c.marks.has_annotations, &marks));
                let (reason, verb) = match (&drift, ours) {
                    (Some(_), _) => ("Reapplied", "re-applied"),
                    (None, true) => ("Updated", "updated"),
                    (None, false) => ("Applied", "applied"),
                };
                ops.push(Op {
                    action: action.name.clone(),
                    namespace: key.namespace.clone(),
                    name: c.name.clone(),
                    write: Write::Patch {
                        kind: c.kind.into(),
                        ops: patch,
                    },
                    event: Some(EventNote {
                        warning: drift.is_some(),
                        reason,
                        note: format!(
                            "{}: {verb} {what}: {min_f} {} -> {}, {max_f} {} -> {eff_max} until {}",
                            action.name,
                            show(c.min),
                            action.min_replicas,
                            show(c.max),
                            window.end
                        ),
                    }),
                    wave: Wave::default(),
                });
            }
        }
    }

    // The Deployment: raised to the new minimum now, its original replicas recorded once.
    // It is written before the autoscaler: raised first, it already meets the new minimum
    // when the HPA controller reacts to the override, so that controller never scales it
    // between our two writes (which would refuse the second one's precondition).
    let original_replicas = if dep_ours {
        dep.original_replicas
    } else {
        recorded_replicas
    };
    let below = dep.replicas() < action.min_replicas;
    let raised = original_replicas.unwrap_or(1) < action.min_replicas;
    if below || (!dep_ours && raised) {
        let mut patch = vec![test_rv(&dep.resource_version)];
        if below {
            patch
                .push(json!({"op": "add", "path": "/spec/replicas", "value": action.min_replicas}));
        }
        if !dep_ours {
            let mut marks = vec![(keys::OWNER, owner_json.clone())];
            marks.push((
                keys::ORIGINAL_REPLICAS,
                original_replicas.unwrap_or(1).to_string(),
            ));
            patch.extend(set_annotations(dep.marks.has_annotations, &marks));
        }
        ops.insert(
            dep_at,
            Op {
                action: action.name.clone(),
                namespace: key.namespace.clone(),
                name: dep.name.clone(),
                write: Write::Patch {
                    kind: ObjectKind::Deployment,
                    ops: patch,
                },
                event: below.then(|| {
                    EventNote::normal(
                        "ScaledUp",
                        format!(
                            "{}: Deployment {key} replicas {} -> {}",
                            action.name,
                            dep.replicas(),
                            action.min_replicas
                        ),
                    )
                }),
                wave: Wave::default(),
            },
        );
    }

    let gave_up = drift.as_ref().is_some_and(|(stopped, _)| *stopped);
    if let Some((_, m)) = &drift {
        outcome_msg = m.clone();
    }
    let mut o = Outcome::new(
        &action.name,
        key,
        if gave_up {
            state::REVERTED
        } else {
            state::APPLIED
        },
        outcome_msg,
    );
    o.status.via = Some(via.to_string());
    o.status.applied_hash = Some(hash);
    o.status.reapplies = (reapplies > 0).then_some(reapplies);
    o.ops = ops;
    o.drift = drift;
    o
}

fn not_found(action: &ScalingAction, key: &TargetKey) -> Outcome {
    let msg = format!("Deployment {key} not found");
    let mut o = Outcome::new(&action.name, key, state::FAILED, msg.clone());
    o.warning = Some((reasons::TARGET_NOT_FOUND, msg));
    o
}

fn provisional_hpa(
    t: &TemplateView,
    name: &str,
    key: &TargetKey,
    min: i32,
    max: i32,
    marks: &[(&str, String)],
) -> Value {
    let annotations: serde_json::Map<String, Value> = marks
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
        .collect();
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": key.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "moonin",
                keys::PROVISIONAL: "true",
            },
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
                "kind": t.kind.as_str(),
                "name": t.name,
                "uid": t.uid,
            }],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": key.name},
            "minReplicas": min,
            "maxReplicas": max,
        },
    })
}

/// Why the template cannot run, if it cannot: `(reason, message)`.
fn invalid(t: &TemplateView) -> Result<WindowInputs, (&'static str, String)> {
    if t.kind == TemplateKind::Namespaced {
        let own = t.namespace.as_deref().unwrap_or_default();
        if let Some(a) = t
            .actions
            .iter()
            .find(|a| a.target.namespace.as_deref().is_some_and(|ns| ns != own))
        {
            return Err((
                reasons::CROSS_NAMESPACE_TARGET,
                format!(
                    "action {} targets namespace {}, but a ScalingTemplate may only scale workloads in its own namespace ({own}); use a ClusterScalingTemplate",
                    a.name,
                    a.target.namespace.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    WindowInputs::from_spec(&t.window).map_err(|e| {
        let reason = match e {
            WindowError::Schedule(_) => reasons::INVALID_SCHEDULE,
            WindowError::UnknownTimeZone(_) => reasons::UNKNOWN_TIME_ZONE,
            WindowError::InvalidDuration(_) | WindowError::InvalidManualDuration(_) => {
                reasons::INVALID_DURATION
            }
        };
        (reason, e.to_string())
    })
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

/// The heart of the scaling controller.
pub fn decide(snap: &Snapshot, now: Timestamp) -> Plan {
    let t = &snap.template;
    let prev = &t.status;
    let mut events = Vec::new();

    let inputs = invalid(t);
    let evaluated = inputs.as_ref().ok().map(|i| window::evaluate(i, now));
    let active = match (&evaluated, t.deleting) {
        (Some(s), false) => s.active,
        _ => None,
    };
    let same_window = active.is_some_and(|w| {
        prev.window
            .as_ref()
            .is_some_and(|p| p.start.0 == w.start && p.trigger == w.trigger.as_str())
    });

    // Which action holds which target: the first by apply order; a second action of
    // this template on the same Deployment conflicts with it.
    let mut order: Vec<&ScalingAction> = t.actions.iter().collect();
    order.sort_by_key(|a| (a.priority_up, a.name.clone()));
    let mut holder_of: BTreeMap<TargetKey, &str> = BTreeMap::new();
    for a in &order {
        holder_of.entry(t.target_key(a)).or_insert(&a.name);
    }

    // Reverts: every target carrying our marks that no active action holds.
    let mut reverts: Vec<(i32, String, Vec<Op>)> = Vec::new();
    for (key, target) in &snap.targets {
        let keep = match active {
            Some(_) => holder_of.get(key).copied(),
            None => None,
        };
        let releasable = |m: &Marks| {
            m.owner
                .as_ref()
                .is_some_and(|o| o.uid == t.uid && Some(o.action.as_str()) != keep)
        };
        let ops = revert_target(key, target, &releasable, None);
        if !ops.is_empty() {
            let action = ops[0].action.clone();
            let prio = t
                .actions
                .iter()
                .find(|a| a.name == action)
                .map_or(0, |a| a.priority_down);
            reverts.push((prio, action, ops));
        }
    }
    reverts.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let reverted_actions: Vec<String> = reverts.iter().map(|r| r.1.clone()).collect();
    let mut ops: Vec<Op> = reverts
        .into_iter()
        .flat_map(|(priority, _, ops)| {
            ops.into_iter().map(move |o| Op {
                wave: Wave { phase: 0, priority },
                ..o
            })
        })
        .collect();

    // Applies, or the idle state of each action.
    let prev_action = |name: &str| prev.actions.iter().find(|a| a.name == name);
    let mut outcomes: Vec<Outcome> = Vec::new();
    for a in &order {
        let key = t.target_key(a);
        let outcome = match (&inputs, active) {
            (Err((_, msg)), _) => {
                let was = prev_action(&a.name).map(|p| p.state.as_str());
                let reverted = reverted_actions.contains(&a.name)
                    || matches!(was, Some(state::APPLIED | state::REVERTED));
                let st = if reverted {
                    state::REVERTED
                } else {
                    state::PENDING
                };
                Outcome::new(&a.name, &key, st, msg.clone())
            }
            (Ok(_), Some(w)) => {
                if holder_of.get(&key) != Some(&a.name.as_str()) {
                    let msg = format!(
                        "Deployment {key} is already targeted by action {} of this template",
                        holder_of.get(&key).copied().unwrap_or_default()
                    );
                    let mut o = Outcome::new(&a.name, &key, state::CONFLICT, msg.clone());
                    o.conflict = Some(msg);
                    o
                } else {
                    apply_action(
                        t,
                        a,
                        &key,
                        snap.targets.get(&key),
                        &w,
                        prev_action(&a.name),
                        same_window,
                    )
                }
            }
            (Ok(_), None) => {
                let was = prev_action(&a.name).map(|p| p.state.as_str());
                let reverted = reverted_actions.contains(&a.name)
                    || matches!(was, Some(state::APPLIED | state::REVERTED));
                let next = evaluated
                    .as_ref()
                    .and_then(|s| s.next_windows.first())
                    .map(|w| format!("the next window opens at {}", w.start));
                let msg = match (reverted, next) {
                    (true, _) => "override reverted; original values restored".to_string(),
                    (false, Some(n)) => format!("waiting: {n}"),
                    (false, None) => "no window ahead".to_string(),
                };
                let st = if reverted {
                    state::REVERTED
                } else {
                    state::PENDING
                };
                Outcome::new(&a.name, &key, st, msg)
            }
        };
        let wave = Wave {
            phase: 1,
            priority: a.priority_up,
        };
        ops.extend(outcome.ops.iter().map(|o| Op { wave, ..o.clone() }));
        outcomes.push(outcome);
    }

    // Warnings once, on the transition into the state that warrants them.
    for o in &outcomes {
        let before = prev_action(&o.status.name);
        let changed =
            before.is_none_or(|b| b.state != o.status.state || b.message != o.status.message);
        if !changed {
            continue;
        }
        if let Some((reason, msg)) = &o.warning {
            events.push(EventNote::warning(
                reason,
                format!("{}: {msg}", o.status.name),
            ));
        }
        if let Some(msg) = &o.conflict {
            events.push(EventNote::warning(
                reasons::CONFLICT,
                format!("{}: {msg}", o.status.name),
            ));
        }
        if let Some((true, msg)) = &o.drift {
            events.push(EventNote::warning(
                reasons::REAPPLY_LIMIT,
                format!("{}: {msg}", o.status.name),
            ));
        }
    }

    // Conditions.
    let mut desired: Vec<Desired> = Vec::new();
    let phase;
    match &inputs {
        Err((reason, msg)) => {
            phase = "Invalid";
            desired.push(Desired::new(types::READY, false, *reason, msg.clone()));
            desired.push(Desired::new(types::STALLED, true, *reason, msg.clone()));
            if prev.phase.as_deref() != Some("Invalid")
                || !conditions::has_reason(&prev.conditions, types::READY, reason)
            {
                events.push(EventNote::warning(reason, msg.clone()));
            }
        }
        Ok(_) => {
            let state = evaluated
                .as_ref()
                .map(|s| s.reason.as_str())
                .unwrap_or("Idle");
            phase = if t.deleting { "Idle" } else { state };
            let worst = outcomes.iter().find_map(|o| match o.status.state.as_str() {
                state::FAILED => Some((reasons::TARGET_NOT_FOUND, o)),
                state::CONFLICT => Some((reasons::CONFLICT, o)),
                state::BLOCKED => Some((reasons::BLOCKED, o)),
                state::REVERTED if o.drift.is_some() => Some((reasons::REAPPLY_LIMIT, o)),
                _ => None,
            });
            // Restore data Moonin cannot read is never dropped: it is reported instead.
            let unreadable = snap.targets.iter().find_map(|(key, target)| {
                target.autoscalers.iter().find_map(|a| {
                    let why = a.marks.unreadable.as_ref()?;
                    is_ours(&a.marks, &t.uid).then(|| {
                        format!(
                            "cannot restore {} {}/{}: {why}; fix or remove its moonin.io annotations by hand",
                            a.kind.as_str(),
                            key.namespace,
                            a.name
                        )
                    })
                })
            });
            if let Some(msg) = &unreadable
                && !conditions::has_reason(&prev.conditions, types::READY, reasons::BLOCKED)
            {
                events.push(EventNote::warning(reasons::BLOCKED, msg.clone()));
            }
            // A target that is missing, contested or blocked needs someone to act: Ready=False
            // and Stalled=True with the same reason (kstatus reads Stalled as Failed, as Argo
            // CD's check reads Ready=False as Degraded); the template still retries.
            let stuck = match worst {
                _ if unreadable.is_some() => {
                    Some((reasons::BLOCKED, unreadable.clone().unwrap_or_default()))
                }
                Some((reason, o)) => Some((
                    reason,
                    format!(
                        "action {}: {}",
                        o.status.name,
                        o.status.message.clone().unwrap_or_default()
                    ),
                )),
                None => None,
            };
            match stuck {
                Some((reason, msg)) => {
                    desired.push(Desired::new(types::READY, false, reason, msg.clone()));
                    desired.push(Desired::new(types::STALLED, true, reason, msg));
                }
                None => {
                    let msg = match (active, evaluated.as_ref()) {
                        (Some(w), _) => format!(
                            "{} window open until {}; {} of {} action(s) applied",
                            w.trigger.as_str(),
                            w.end,
                            outcomes
                                .iter()
                                .filter(|o| o.status.state == state::APPLIED)
                                .count(),
                            outcomes.len()
                        ),
                        (None, Some(s)) => match s.next_windows.first() {
                            Some(n) => format!(
                                "{}; the next window opens at {}",
                                s.reason.as_str(),
                                n.start
                            ),
                            None => format!("{}; no window ahead", s.reason.as_str()),
                        },
                        (None, None) => "idle".to_string(),
                    };
                    desired.push(Desired::new(types::READY, true, common::RECONCILED, msg));
                    desired.push(Desired::new(types::STALLED, false, common::RECONCILED, ""));
                }
            }
        }
    }
    let waiting = outcomes
        .iter()
        .find(|o| o.status.state == state::PENDING && active.is_some());
    desired.push(match waiting {
        Some(o) => Desired::new(
            types::RECONCILING,
            true,
            reasons::WAITING,
            o.status.message.clone().unwrap_or_default(),
        ),
        None => Desired::new(types::RECONCILING, false, common::RECONCILED, ""),
    });
    desired.push(match (active, evaluated.as_ref()) {
        (Some(w), _) => Desired::new(
            reasons::ACTIVE,
            true,
            w.trigger.as_str(),
            format!("window open from {} until {}", w.start, w.end),
        ),
        (None, Some(_)) if t.deleting => Desired::new(reasons::ACTIVE, false, "Deleting", ""),
        (None, Some(s)) => Desired::new(reasons::ACTIVE, false, s.reason.as_str(), ""),
        (None, None) => Desired::new(reasons::ACTIVE, false, "Invalid", ""),
    });
    let conflicts: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.conflict
                .as_ref()
                .map(|c| format!("{}: {c}", o.status.name))
        })
        .collect();
    desired.push(if conflicts.is_empty() {
        Desired::new(reasons::CONFLICT, false, reasons::NO_CONFLICT, "")
    } else {
        Desired::new(
            reasons::CONFLICT,
            true,
            reasons::CONFLICT,
            conflicts.join("; "),
        )
    });
    let drifts: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.drift
                .as_ref()
                .map(|(_, m)| format!("{}: {m}", o.status.name))
        })
        .collect();
    // Drift is remembered for the rest of the window, even after a successful re-apply.
    let keep_drift =
        same_window && conditions::is_true(&prev.conditions, reasons::REVERTED) && active.is_some();
    desired.push(if !drifts.is_empty() {
        let stopped = outcomes.iter().any(|o| matches!(o.drift, Some((true, _))));
        Desired::new(
            reasons::REVERTED,
            true,
            if stopped {
                reasons::REAPPLY_LIMIT
            } else {
                reasons::OVERRIDDEN
            },
            drifts.join("; "),
        )
    } else if keep_drift {
        let c = prev
            .conditions
            .iter()
            .find(|c| c.type_ == reasons::REVERTED);
        Desired::new(
            reasons::REVERTED,
            true,
            reasons::OVERRIDDEN,
            c.map(|c| c.message.clone()).unwrap_or_default(),
        )
    } else {
        Desired::new(reasons::REVERTED, false, reasons::NOT_REVERTED, "")
    });
    // Keep the reason of a remembered drift stable.
    if keep_drift
        && drifts.is_empty()
        && let Some(c) = prev
            .conditions
            .iter()
            .find(|c| c.type_ == reasons::REVERTED)
        && let Some(d) = desired.iter_mut().find(|d| d.type_ == reasons::REVERTED)
    {
        d.reason = c.reason.clone();
    }

    // Executions.
    let mut executions = prev.executions.clone();
    let result = if outcomes.iter().all(|o| o.status.state == state::APPLIED) {
        "Applied"
    } else if outcomes.iter().any(|o| o.status.state == state::APPLIED) {
        "PartiallyApplied"
    } else if outcomes.iter().any(|o| o.drift.is_some()) {
        "Reverted"
    } else {
        "Failed"
    };
    match (active, prev.window.as_ref()) {
        (Some(w), _) => {
            if !same_window {
                let closed_at = prev.window.as_ref().map_or(now, |pw| now.min(pw.end.0));
                close_open(&mut executions, closed_at);
                executions.push(Execution {
                    trigger: w.trigger.as_str().to_string(),
                    start: time(w.start),
                    end: None,
                    result: result.to_string(),
                });
            } else if let Some(last) = executions.last_mut()
                && last.end.is_none()
            {
                last.result = result.to_string();
            }
        }
        (None, Some(pw)) => close_open(&mut executions, now.min(pw.end.0)),
        (None, None) => {}
    }
    if executions.len() > EXECUTIONS_KEPT {
        executions.drain(..executions.len() - EXECUTIONS_KEPT);
    }

    let status = ScalingTemplateStatus {
        observed_generation: t.generation,
        phase: Some(phase.to_string()),
        window: active.map(|w| WindowStatus {
            trigger: w.trigger.as_str().to_string(),
            start: time(w.start),
            end: time(w.end),
        }),
        next_windows: evaluated
            .as_ref()
            .map(|s| {
                s.next_windows
                    .iter()
                    .map(|w| PlannedWindow {
                        start: time(w.start),
                        end: time(w.end),
                        dst_adjusted: w.dst_adjusted,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        actions: outcomes.into_iter().map(|o| o.status).collect(),
        executions,
        conditions: conditions::merge(&prev.conditions, &desired, t.generation, now),
    };

    let finalizer = if t.deleting {
        if ops.is_empty() && t.has_finalizer {
            Finalizer::Remove
        } else {
            Finalizer::Keep
        }
    } else if t.has_finalizer {
        Finalizer::Keep
    } else {
        Finalizer::Add
    };
    let resync = now.saturating_add(RESYNC).unwrap_or(now);
    let requeue_at = evaluated
        .as_ref()
        .and_then(|s| s.next_boundary)
        .map_or(resync, |b| b.min(resync));
    Plan {
        ops,
        status,
        events,
        requeue_at,
        finalizer,
    }
}

fn close_open(executions: &mut [Execution], at: Timestamp) {
    if let Some(last) = executions.last_mut()
        && last.end.is_none()
    {
        last.end = Some(time(at));
    }
}

/// Marks actions whose writes failed: the status written after a partial commit.
pub fn record_failures(
    status: &mut ScalingTemplateStatus,
    failed: &BTreeMap<String, String>,
    now: Timestamp,
) {
    if failed.is_empty() {
        return;
    }
    for a in &mut status.actions {
        if let Some(err) = failed.get(&a.name) {
            a.state = state::FAILED.to_string();
            a.message = Some(err.clone());
        }
    }
    let msg = failed
        .iter()
        .map(|(a, e)| format!("action {a}: {e}"))
        .collect::<Vec<_>>()
        .join("; ");
    status.conditions = conditions::merge(
        &status.conditions,
        &[Desired::new(
            types::READY,
            false,
            reasons::APPLY_FAILED,
            msg,
        )],
        status.observed_generation,
        now,
    );
    if let Some(last) = status.executions.last_mut()
        && last.end.is_none()
    {
        let any_applied = status.actions.iter().any(|a| a.state == state::APPLIED);
        last.result = if any_applied {
            "PartiallyApplied"
        } else {
            "Failed"
        }
        .to_string();
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
