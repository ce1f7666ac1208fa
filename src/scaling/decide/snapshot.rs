//! What decide looks at: a template and its targets as plain data, with the ownership
//! records (`moonin.io/*` annotations) already parsed.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::api::scaling::{ScalingAction, ScalingTemplateStatus, WindowSpec};

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
    /// The Deployment the autoscaler scaled when the override was applied, whose replicas
    /// `deployment_replicas` are (absent from records written before Moonin kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
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
    /// The raw values of the annotations a write depends on ([`GUARDED_ANNOTATIONS`]) that
    /// the object had when it was read: its write tests that they are still these (and
    /// that the others are still absent).
    pub read: BTreeMap<String, String>,
    /// A Deployment's marks are a copy another field manager wrote (`kubectl rollout
    /// undo` copies a ReplicaSet's annotations back), not Moonin's record: `owner` is then
    /// `None` and the Deployment is read as unmarked.
    pub copied: bool,
}

/// The annotations whose values an override or a restore depends on: Moonin's own records
/// and KEDA's pause annotations.
pub const GUARDED_ANNOTATIONS: [&str; 8] = [
    crate::api::scaling::keys::OWNER,
    crate::api::scaling::keys::ORIGINAL,
    crate::api::scaling::keys::APPLIED_HASH,
    crate::api::scaling::keys::ORIGINAL_REPLICAS,
    crate::api::scaling::keys::KEDA_PAUSED[0],
    crate::api::scaling::keys::KEDA_PAUSED[1],
    crate::api::scaling::keys::KEDA_PAUSED[2],
    crate::api::scaling::keys::KEDA_PAUSED[3],
];

/// An HPA or ScaledObject that targets a Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Autoscaler {
    /// HPA or ScaledObject.
    pub kind: AutoscalerKind,
    /// Its name (same namespace as the Deployment).
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The resourceVersion it was read at: the delete of a provisional HPA is
    /// preconditioned on it.
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
    /// Moonin changed it moments ago and its controller has not acted on that yet (an HPA
    /// whose bounds leave the Deployment's replicas outside and whose status was not written
    /// since its spec; a ScaledObject whose HPA KEDA has not brought to the new bounds, or
    /// that HPA in the same state): a restore of the Deployment waits, or the controller,
    /// acting on the old bounds, could scale it right back.
    pub unobserved: bool,
    /// When the bounds the HPA controller acts on were last written (from `managedFields`,
    /// whole seconds): the HPA's, or for a ScaledObject its KEDA HPA's.
    pub bounds_written: Option<Timestamp>,
}

/// The Deployment an action scales.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The resourceVersion it was read at (for logs and tests; no write tests it).
    pub resource_version: String,
    /// `spec.replicas` (absent means 1).
    pub replicas: Option<i32>,
    /// Ownership annotations.
    pub marks: Marks,
    /// `moonin.io/original-replicas`.
    pub original_replicas: Option<i32>,
    /// The field manager that last set `spec.replicas`, and when (from `managedFields`,
    /// whole seconds).
    pub replicas_set_by: Option<(String, Timestamp)>,
}

impl Workload {
    pub(super) fn replicas(&self) -> i32 {
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

impl Target {
    /// The autoscalers the workload's owners wrote: neither a provisional HPA of Moonin's
    /// nor the HPA KEDA made for a ScaledObject.
    pub fn own_autoscalers(&self) -> impl Iterator<Item = &Autoscaler> {
        self.autoscalers
            .iter()
            .filter(|a| !a.provisional && a.keda_owner.is_none())
    }

    /// The autoscaler that carries an override: the first of [`Self::own_autoscalers`].
    pub fn carrier(&self) -> Option<&Autoscaler> {
        self.own_autoscalers().next()
    }
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
    pub(super) fn owner(&self, action: &str) -> OwnerRecord {
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
