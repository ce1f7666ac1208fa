//! `ScalingTemplate` and `ClusterScalingTemplate`: time-boxed, reversible scaling overrides.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema, core::Duration};
use serde::{Deserialize, Serialize};

/// When a template's window is open: a cron schedule in a time zone, a duration, and the
/// switches that override it. Shared by `ScalingTemplate` and `ClusterScalingTemplate`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpec {
    /// `true` disables the template: any active override is reverted and nothing runs until
    /// it is `false` again.
    #[serde(default)]
    pub suspend: bool,
    /// A standard 5-field cron expression with the same meaning as a CronJob's `schedule`
    /// (names, ranges, steps, and macros such as `@daily` are accepted). Each fire time opens
    /// a window of `duration`; a fire while a window is open starts the next one at once: the
    /// override stays, the window ends `duration` after that fire, and `status.executions`
    /// records a new execution (re-applies are counted afresh).
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// IANA time zone the schedule is read in, for example `Europe/Madrid`. Defaults to UTC.
    /// Daylight-saving gaps and repeats follow the policy in the README.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("timeZone must not be empty; omit it to use UTC"))]
    pub time_zone: Option<String>,
    /// How long each window stays open after a fire time, as a Go duration (`90m`, `10h`).
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("duration must be a positive duration such as 90m or 10h"))]
    pub duration: Duration,
    /// Optional RFC 3339 instant after which the template never runs again; an override
    /// that is active at that instant is reverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Time>,
    /// A one-off window that takes priority over the schedule. Remove it to end the run early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_run: Option<ManualRun>,
}

/// A one-off window started by hand.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManualRun {
    /// When the manual window opens (RFC 3339).
    pub start_time: Time,
    /// How long it stays open; defaults to the template's `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("manualRun.duration must be a positive duration such as 90m or 10h"))]
    pub duration: Option<Duration>,
}

/// One override applied while the window is open.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.minReplicas <= self.maxReplicas").message("minReplicas must be less than or equal to maxReplicas"),
    validation = Rule::new("self.minReplicas >= 1").message("minReplicas must be at least 1: Moonin never scales a workload to zero"),
)]
pub struct ScalingAction {
    /// Unique name of the action within the template; it appears in status and Events.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The workload to scale.
    pub target: TargetRef,
    /// The minimum replicas while the window is open (the HPA's `minReplicas`, or the
    /// ScaledObject's `minReplicaCount`). At least 1.
    pub min_replicas: i32,
    /// The maximum replicas while the window is open. Never applied below the workload's
    /// current replicas.
    pub max_replicas: i32,
    /// Apply order when the window opens: lower first.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub priority_up: i32,
    /// Revert order when the window closes: lower first.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub priority_down: i32,
}

fn deployment() -> String {
    "Deployment".to_string()
}

/// The workload an action scales.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// Kind of the workload. Only `Deployment` is supported.
    #[serde(default = "deployment")]
    #[x_kube(validation = Rule::new("self == 'Deployment'").message("target.kind must be Deployment"))]
    pub kind: String,
    /// Namespace of the workload: required in a `ClusterScalingTemplate`, not allowed in a
    /// `ScalingTemplate` (which targets its own namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Name of the workload.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Schedules temporary overrides of the autoscaling bounds of workloads in this namespace,
/// and restores exactly what was there when each window ends.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "ScalingTemplate",
    namespaced,
    status = "ScalingTemplateStatus",
    shortname = "stpl",
    category = "moonin",
    cel,
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "What the template is doing now"
    ),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".spec.schedule",
        description = "Cron schedule"
    ),
    printcolumn(
        name = "Time Zone",
        type_ = "string",
        json_path = ".spec.timeZone",
        description = "Time zone of the schedule"
    ),
    // The instants are string columns: kubectl prints `<invalid>` for a `date` column in the
    // future, and a relative "in 3h" status field would need a write every minute.
    printcolumn(
        name = "Window End",
        type_ = "string",
        json_path = ".status.window.end",
        description = "When the open window closes (RFC 3339, UTC)"
    ),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextWindows[0].start",
        description = "When the next window opens (RFC 3339, UTC)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ScalingTemplateSpec {
    /// When the window is open.
    #[serde(flatten)]
    pub window: WindowSpec,
    /// The overrides applied while the window is open; names are unique.
    #[schemars(length(min = 1, max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("a template needs at least one action"),
        validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("action names must be unique"),
        validation = Rule::new("self.all(a, !has(a.target.__namespace__))").message("a ScalingTemplate scales workloads in its own namespace: remove target.namespace, or use a ClusterScalingTemplate"),
    )]
    pub actions: Vec<ScalingAction>,
}

/// Like `ScalingTemplate`, cluster-scoped, for platform teams: each action names the
/// namespace of its target.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "ClusterScalingTemplate",
    status = "ScalingTemplateStatus",
    shortname = "cstpl",
    category = "moonin",
    cel,
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "What the template is doing now"
    ),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".spec.schedule",
        description = "Cron schedule"
    ),
    printcolumn(
        name = "Time Zone",
        type_ = "string",
        json_path = ".spec.timeZone",
        description = "Time zone of the schedule"
    ),
    // The instants are string columns: kubectl prints `<invalid>` for a `date` column in the
    // future, and a relative "in 3h" status field would need a write every minute.
    printcolumn(
        name = "Window End",
        type_ = "string",
        json_path = ".status.window.end",
        description = "When the open window closes (RFC 3339, UTC)"
    ),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextWindows[0].start",
        description = "When the next window opens (RFC 3339, UTC)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScalingTemplateSpec {
    /// When the window is open.
    #[serde(flatten)]
    pub window: WindowSpec,
    /// The overrides applied while the window is open; names are unique.
    #[schemars(length(min = 1, max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(
        validation = Rule::new("self.size() > 0").message("a template needs at least one action"),
        validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("action names must be unique"),
        validation = Rule::new("self.all(a, has(a.target.__namespace__))").message("each action of a ClusterScalingTemplate names its target's namespace"),
    )]
    pub actions: Vec<ScalingAction>,
}

/// What a scaling template is doing; written only by the controller.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingTemplateStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Idle`, `Active`, `Suspended`, `Expired` or `Invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The window that is open now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowStatus>,
    /// The next windows (up to 3), flagged when a daylight-saving change moved them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_windows: Vec<PlannedWindow>,
    /// One entry per action: what was done to its target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionStatus>,
    /// The last 10 windows that ran: trigger, start, end, result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executions: Vec<Execution>,
    /// Ready, Active, Conflict, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// The open window.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WindowStatus {
    /// `Schedule` or `Manual`.
    pub trigger: String,
    /// When it opened.
    pub start: Time,
    /// When it closes.
    pub end: Time,
}

/// A future window.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWindow {
    /// When it opens.
    pub start: Time,
    /// When it closes.
    pub end: Time,
    /// True when a daylight-saving change moved the fire time (a spring-forward gap).
    #[serde(default)]
    pub dst_adjusted: bool,
}

/// The state of one action's override.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ActionStatus {
    /// The action's name.
    pub name: String,
    /// The target, as `namespace/name`.
    pub target: String,
    /// `Applied`, `Reverted`, `Pending`, `Conflict`, `Blocked` or `Failed`.
    pub state: String,
    /// What carries the override: `HPA`, `ProvisionalHPA` or `ScaledObject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Hash of the applied override, to tell a re-apply from a no-op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
    /// Why the action is in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How often, in the open window, the override was re-applied after another field
    /// manager undid it. Re-applying stops at a small bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reapplies: Option<i32>,
    /// The Deployment's replicas before the window raised them: what its restore puts back.
    /// Kept after the window closes, so that if the HPA controller, still acting on the
    /// override's bounds, scales the Deployment back right after its restore, Moonin
    /// restores it again (Event `RestoredAgain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_replicas: Option<i32>,
}

/// A window that ran.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// `Schedule` or `Manual`.
    pub trigger: String,
    /// When it opened.
    pub start: Time,
    /// When it closed, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Time>,
    /// `Applied`, `Reverted`, `PartiallyApplied` or `Failed`.
    pub result: String,
}

/// Annotations, labels and the finalizer the scaling controller writes on other objects.
pub mod keys {
    /// On an overridden HPA, ScaledObject or Deployment: which template and action hold it,
    /// as JSON `{"kind","namespace","name","uid","action"}`.
    pub const OWNER: &str = "moonin.io/owner";
    /// On an overridden HPA or ScaledObject: the exact fields the override changed, with
    /// their values before it (JSON; `null` for a field that was absent), and the
    /// Deployment's replicas at that moment.
    pub const ORIGINAL: &str = "moonin.io/original";
    /// On an overridden HPA or ScaledObject: hash of the override, so an unchanged
    /// template re-applies nothing.
    pub const APPLIED_HASH: &str = "moonin.io/applied-hash";
    /// On a Deployment whose replicas the override raised: the replicas to restore.
    pub const ORIGINAL_REPLICAS: &str = "moonin.io/original-replicas";
    /// Label on an HPA Moonin created for a window because nothing scaled the Deployment.
    pub const PROVISIONAL: &str = "moonin.io/provisional";
    /// Finalizer on a template: its overrides are reverted before it goes away.
    pub const FINALIZER: &str = "moonin.io/scaling-revert";
    /// KEDA annotations that pause a ScaledObject; Moonin leaves a paused one alone.
    pub const KEDA_PAUSED: [&str; 4] = [
        "autoscaling.keda.sh/paused",
        "autoscaling.keda.sh/paused-replicas",
        "autoscaling.keda.sh/paused-scale-in",
        "autoscaling.keda.sh/paused-scale-out",
    ];
}

/// Reasons of the Normal Events about a template's writes (the Warnings use [`reasons`]).
pub mod events {
    /// An override written, or a provisional HPA created.
    pub const APPLIED: &str = "Applied";
    /// An override changed mid-window (the action's bounds changed).
    pub const UPDATED: &str = "Updated";
    /// An override another field manager undid, written again (a Warning).
    pub const REAPPLIED: &str = "Reapplied";
    /// Original values restored, or a provisional HPA deleted.
    pub const REVERTED: &str = "Reverted";
    /// The Deployment raised to the new minimum.
    pub const SCALED_UP: &str = "ScaledUp";
    /// A Deployment the HPA controller scaled back on the override's old bounds right
    /// after its restore, restored again.
    pub const RESTORED_AGAIN: &str = "RestoredAgain";
    /// Copies of Moonin's marks that another field manager put on a Deployment (`kubectl
    /// rollout undo` copies them back from a ReplicaSet) removed before an override.
    pub const COPIED_MARKS_REMOVED: &str = "CopiedMarksRemoved";
}

/// Condition types and reasons specific to scaling templates.
pub mod reasons {
    /// Condition: a window is open.
    pub const ACTIVE: &str = "Active";
    /// Condition: an action's target is held by another template.
    pub const CONFLICT: &str = "Conflict";
    /// Condition: another field manager undid an override.
    pub const REVERTED: &str = "Reverted";

    /// The cron schedule does not parse.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// The time zone is not in the IANA database.
    pub const UNKNOWN_TIME_ZONE: &str = "UnknownTimeZone";
    /// A duration is not positive.
    pub const INVALID_DURATION: &str = "InvalidDuration";
    /// A namespaced template names a target in another namespace.
    pub const CROSS_NAMESPACE_TARGET: &str = "CrossNamespaceTarget";
    /// An action's Deployment does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// An action cannot be applied (paused ScaledObject, two autoscalers, …).
    pub const BLOCKED: &str = "Blocked";
    /// A write was refused by the API server.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Waiting for a leftover override of a deleted template to be restored.
    pub const WAITING: &str = "WaitingForRestore";
    /// Another field manager undid an override more often than Moonin re-applies it.
    pub const REAPPLY_LIMIT: &str = "ReapplyLimitReached";
    /// Another field manager undid an override; Moonin re-applied it.
    pub const OVERRIDDEN: &str = "OverriddenByFieldManager";
    /// No conflict.
    pub const NO_CONFLICT: &str = "NoConflict";
    /// Nothing overridden by others.
    pub const NOT_REVERTED: &str = "NotReverted";
}
