//! What decide answers: the writes (each a guarded JSON Patch, create or delete), the
//! status, the Events and the finalizer, plus the names and hashes an override carries.

use jiff::Timestamp;
use serde_json::Value;

use super::snapshot::{AutoscalerKind, TargetKey};
use crate::api::scaling::{ScalingAction, ScalingTemplateStatus};

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

impl ObjectKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Hpa => "HorizontalPodAutoscaler",
            ObjectKind::ScaledObject => "ScaledObject",
            ObjectKind::Deployment => "Deployment",
        }
    }

    /// Its API group and version.
    pub fn api_version(self) -> &'static str {
        match self {
            ObjectKind::Hpa => "autoscaling/v2",
            ObjectKind::ScaledObject => "keda.sh/v1alpha1",
            ObjectKind::Deployment => "apps/v1",
        }
    }
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
    /// A JSON Patch whose first ops test what the write depends on.
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

impl Write {
    /// The kind of the object written.
    pub fn object_kind(&self) -> ObjectKind {
        match self {
            Write::Patch { kind, .. } => *kind,
            Write::CreateHpa(_) | Write::DeleteHpa { .. } => ObjectKind::Hpa,
        }
    }
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
    /// Puts back (or only removes) what an override wrote, rather than taking fields over:
    /// written as [`crate::api::field_manager::RESTORE`], so that `moonin-scaling` owns
    /// nothing on the object once its override is gone.
    pub restores: bool,
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
    pub(super) fn normal(reason: &'static str, note: String) -> Self {
        Self {
            warning: false,
            reason,
            note,
        }
    }
    pub(super) fn warning(reason: &'static str, note: String) -> Self {
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
    /// The status is written by the next plan instead: this one restores autoscalers whose
    /// Deployments wait for their controller, and the next reconcile (within
    /// [`super::WAITING_RECHECK`], or as soon as the controller acts) restores the
    /// Deployments and writes the status then. A plan that writes nothing, or whose write is
    /// refused, writes its status, so a wait that lasts is always reported.
    pub defer_status: bool,
    /// Events about the template that do not depend on a write.
    pub events: Vec<EventNote>,
    /// When to reconcile again at the latest.
    pub requeue_at: Timestamp,
    /// The finalizer.
    pub finalizer: Finalizer,
    /// The scheduled edges this plan is the first to act on (see
    /// [`super::status::scheduled_edges`]).
    pub edges: Vec<Edge>,
}

/// A window edge that had been announced in the template's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// The window opens (its start was the status's next window) or closes (it was the
    /// status's open window).
    pub opens: bool,
    /// When, as scheduled.
    pub at: Timestamp,
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
