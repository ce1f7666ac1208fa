//! `SandboxEnv`, `SandboxPool` and `SandboxClaim`: warm pools of pre-started sandbox Pods.

use k8s_openapi::{
    api::core::v1::PodTemplateSpec,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{CustomResource, KubeSchema, core::Duration};
use serde::{Deserialize, Serialize};

pub use super::forecast::{ClaimHistory, Prediction, PredictivePolicy};

/// A DNS-1123 label, so `<env>-<member>` is a valid object name.
const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A set of sandbox pools, possibly spread over several clusters, and how they autoscale.
/// Owned by git: the controllers never write its spec.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "SandboxEnv",
    namespaced,
    status = "SandboxEnvStatus",
    shortname = "senv",
    category = "moonin",
    cel,
    // On every write, status included (a root rule sees the whole object): an Env stored
    // before this rule with too long a name never ran a Pod, and is recreated renamed.
    validation = Rule::new("self.spec.clusters.all(c, c.members.all(m, size(self.metadata.name) + size(m.name) <= 62))").message("the Env's name and each member's name, joined by '-', must fit in 63 characters: the joined name labels the member's Pods"),
    printcolumn(
        name = "Local Pools",
        type_ = "integer",
        json_path = ".status.localMembers",
        description = "Members materialised in this cluster"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Ready condition"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.clusters.all(c, c.members.all(m, !has(m.config) || !has(m.config.scalingGroup) || (has(self.autoscaling) && self.autoscaling.groups.exists(g, g.name == m.config.scalingGroup))))").message("every member's config.scalingGroup must name a group in spec.autoscaling.groups"))]
#[serde(rename_all = "camelCase")]
pub struct SandboxEnvSpec {
    /// The clusters this environment spans. Each Moonin manager materialises only the
    /// members of the cluster named by its `--cluster-name`.
    #[schemars(length(min = 1, max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("cluster names must be unique"))]
    pub clusters: Vec<EnvCluster>,
    /// Autoscaling groups shared by members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

/// The members of one cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvCluster {
    /// The cluster's name, as given to its manager's `--cluster-name`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The pools of this cluster.
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("member names must be unique within a cluster"))]
    pub members: Vec<EnvMember>,
}

/// One pool of the environment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvMember {
    /// The member's name; its pool is named `<env>-<member>`.
    #[schemars(length(min = 1, max = 40), regex(pattern = DNS_LABEL))]
    pub name: String,
    /// The pool's shape.
    pub spec: MemberSpec,
    /// How the member takes part in autoscaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<MemberConfig>,
}

/// The shape of a member's pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSpec {
    /// Baseline number of sandbox Pods (idle + claimed + starting) while autoscaling is off.
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
    /// The Pod template of every sandbox.
    #[schemars(schema_with = "crate::api::schema::pod_template")]
    pub template: PodTemplateSpec,
    /// What happens to a sandbox when its claim is released.
    #[serde(default)]
    pub recycle_policy: RecyclePolicy,
}

/// What happens to a sandbox Pod when its claim ends.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum RecyclePolicy {
    /// Delete the Pod; the pool replaces it with a fresh one, so nothing leaks between users.
    #[default]
    Replace,
    /// Return the Pod to the idle set.
    Reuse,
    /// A policy this version does not know (written by a newer Moonin); treated as `Replace`.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

/// Member settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberConfig {
    /// The autoscaling group the member belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_group: Option<String>,
}

/// Autoscaling groups.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// The groups; names are unique.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))").message("autoscaling group names must be unique"))]
    pub groups: Vec<ScalingGroup>,
}

fn yes() -> bool {
    true
}
fn one() -> i32 {
    1
}

/// A set of pools that scale together within shared bounds.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message("group minReplicas must be less than or equal to maxReplicas"))]
pub struct ScalingGroup {
    /// The group's name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Whether the autoscaler drives the group's pools. While false, each pool keeps its
    /// member's `replicas`.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Floor on the sum of the group's pool sizes in this cluster.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,
    /// Ceiling on the sum of the group's pool sizes in this cluster.
    #[schemars(range(min = 0, max = 10000))]
    pub max_replicas: i32,
    /// How the group grows.
    #[serde(default)]
    pub scale_up_policy: ScaleUpPolicy,
    /// How the group shrinks.
    #[serde(default)]
    pub scale_down_policy: ScaleDownPolicy,
}

/// Scale-up knobs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpPolicy {
    /// Minimum seconds between two scale-ups of a pool.
    #[serde(default = "ScaleUpPolicy::default_cooldown")]
    #[schemars(range(min = 0))]
    pub cooldown_seconds: i32,
    /// Seconds the pool must have had no idle Pod before a proactive scale-up (no claim
    /// waiting yet).
    #[serde(default = "ScaleUpPolicy::default_quiet_window")]
    #[schemars(range(min = 0))]
    pub quiet_window_seconds: i32,
    /// Idle Pods at or below which the pool counts as dry for the proactive trigger.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub idle_threshold: i32,
    /// Most Pods added in one scale-up.
    #[serde(default = "ScaleUpPolicy::default_max_step")]
    #[schemars(range(min = 1))]
    pub max_step: i32,
    /// Predictive warm-up from the pool's claim history (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictive: Option<PredictivePolicy>,
}

impl ScaleUpPolicy {
    fn default_cooldown() -> i32 {
        10
    }
    fn default_quiet_window() -> i32 {
        30
    }
    fn default_max_step() -> i32 {
        10
    }
}

impl Default for ScaleUpPolicy {
    fn default() -> Self {
        Self {
            cooldown_seconds: Self::default_cooldown(),
            quiet_window_seconds: Self::default_quiet_window(),
            idle_threshold: 0,
            max_step: Self::default_max_step(),
            predictive: None,
        }
    }
}

/// Scale-down knobs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDownPolicy {
    /// The pool shrinks only to the highest size recommended over this many seconds.
    #[serde(default = "ScaleDownPolicy::default_stabilization")]
    #[schemars(range(min = 0))]
    pub stabilization_window_seconds: i32,
    /// An idle Pod is removable once it has been idle this long.
    #[serde(default = "ScaleDownPolicy::default_idle_timeout")]
    #[schemars(range(min = 0))]
    pub idle_timeout_seconds: i32,
    /// Most Pods removed in one step.
    #[serde(default = "ScaleDownPolicy::default_max_step")]
    #[schemars(range(min = 1))]
    pub max_step: i32,
}

impl ScaleDownPolicy {
    fn default_stabilization() -> i32 {
        300
    }
    fn default_idle_timeout() -> i32 {
        600
    }
    fn default_max_step() -> i32 {
        5
    }
}

impl Default for ScaleDownPolicy {
    fn default() -> Self {
        Self {
            stabilization_window_seconds: Self::default_stabilization(),
            idle_timeout_seconds: Self::default_idle_timeout(),
            max_step: Self::default_max_step(),
        }
    }
}

/// Where each member of the environment lives and how it is doing.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxEnvStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many members this cluster materialises.
    #[serde(default)]
    pub local_members: i32,
    /// Every member of every cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// Ready, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// One member as seen from this cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member's name.
    pub name: String,
    /// The cluster that runs it.
    pub cluster: String,
    /// True when this cluster materialises it.
    pub local: bool,
    /// The pool's name, when local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Ready sandbox Pods, when local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Idle sandbox Pods, when local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_replicas: Option<i32>,
}

/// A pool of sandbox Pods. Created and owned by its `SandboxEnv`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "SandboxPool",
    namespaced,
    status = "SandboxPoolStatus",
    shortname = "spool",
    category = "moonin",
    cel,
    validation = Rule::new("size(self.metadata.name) <= 63").message("a SandboxPool's name must fit in 63 characters: it labels the pool's Pods"),
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}"#,
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Sandbox Pods wanted"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Ready sandbox Pods"
    ),
    printcolumn(
        name = "Idle",
        type_ = "integer",
        json_path = ".status.idleReplicas",
        description = "Ready Pods free to claim"
    ),
    printcolumn(
        name = "Claimed",
        type_ = "integer",
        json_path = ".status.claimedReplicas",
        description = "Pods bound to a claim"
    ),
    printcolumn(
        name = "Autoscaler",
        type_ = "integer",
        json_path = ".status.autoScaling.desiredReplicas",
        description = "The autoscaler's decision",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPoolSpec {
    /// Total sandbox Pods: idle, claimed and starting.
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
    /// The Pod template of every sandbox.
    #[schemars(schema_with = "crate::api::schema::pod_template")]
    pub template: PodTemplateSpec,
    /// What happens to a sandbox when its claim is released.
    #[serde(default)]
    pub recycle_policy: RecyclePolicy,
    /// The autoscaling group the pool belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_group: Option<String>,
}

/// How many sandboxes the pool has and what the autoscaler decided.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxPoolStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Sandbox Pods that exist and are not terminating.
    #[serde(default)]
    pub replicas: i32,
    /// Ready sandbox Pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Ready sandbox Pods with an IP that no claim holds.
    #[serde(default)]
    pub idle_replicas: i32,
    /// Sandbox Pods bound to a claim.
    #[serde(default)]
    pub claimed_replicas: i32,
    /// The autoscaler's bookkeeping and last decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_scaling: Option<PoolAutoScalingStatus>,
    /// Claims per slot of the period, kept while the pool's group has
    /// `scaleUpPolicy.predictive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_history: Option<ClaimHistory>,
    /// Ready, Progressing, Saturated, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// The autoscaler's state for one pool.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolAutoScalingStatus {
    /// The pool size the autoscaler wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// Since when the pool has had no idle Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_zero_since: Option<Time>,
    /// The last scale-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_up_time: Option<Time>,
    /// The last scale-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_down_time: Option<Time>,
    /// Until when the namespace is known to accept no more Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated_until: Option<Time>,
    /// Why the last scale-up was cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up_error_message: Option<String>,
    /// The last scale-up attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_up_attempt: Option<ScaleUpAttempt>,
    /// The scale-down in progress or last finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_session: Option<ScaleDownSession>,
    /// What the claim history predicts, while the group has `scaleUpPolicy.predictive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
}

/// A scale-up attempt.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpAttempt {
    /// Pool size before.
    pub from: i32,
    /// Pool size asked for.
    pub target: i32,
    /// Pool size the cluster accepted.
    pub accepted: i32,
    /// `Full`, `Partial` or `Rejected`.
    pub result: String,
}

/// A two-phase scale-down: Pods are marked, then deleted.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDownSession {
    /// The decision id written on marked Pods.
    pub id: String,
    /// `Started`, `Stepped`, `Completed`, `Aborted` or `Stuck`.
    pub state: String,
    /// Pool size when the session started.
    pub from: i32,
    /// Pool size the session aims for.
    pub target: i32,
    /// When it started.
    pub started_at: Time,
    /// When it last changed.
    pub updated_at: Time,
    /// Pods removed so far.
    #[serde(default)]
    pub removed: i32,
    /// Why it is in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A request for one sandbox Pod. Deleting the claim releases the sandbox.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "SandboxClaim",
    namespaced,
    status = "SandboxClaimStatus",
    shortname = "sclaim",
    category = "moonin",
    cel,
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Bound, Released or Failed"
    ),
    printcolumn(
        name = "Pod",
        type_ = "string",
        json_path = ".status.podName",
        description = "The bound sandbox Pod"
    ),
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".status.podIP",
        description = "The sandbox's IP"
    ),
    printcolumn(
        name = "Wait ms",
        type_ = "integer",
        json_path = ".status.waitMilliseconds",
        description = "Creation to Bound"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.poolRef) != has(self.envRef)").message("exactly one of poolRef or envRef must be set"),
    validation = Rule::new("self == oldSelf").message("a claim's spec is immutable; delete it and create a new one"),
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimSpec {
    /// The pool to claim from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_ref: Option<PoolRef>,
    /// The environment (and optionally its group) to claim from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_ref: Option<EnvRef>,
    /// How long the claim holds its sandbox once bound; it is released after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("lifetime must be a positive duration such as 30m"))]
    pub lifetime: Option<Duration>,
}

/// A pool in the claim's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    /// The pool's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// An environment in the claim's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvRef {
    /// The environment's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Restrict to the pools of this autoscaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// The claim's binding.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Pending`, `Bound`, `Released` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The bound Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The bound Pod's IP.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podIP")]
    pub pod_ip: Option<String>,
    /// When the claim was bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_at: Option<Time>,
    /// Milliseconds from creation to Bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_milliseconds: Option<i64>,
    /// Ready, Reconciling, Stalled.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// Condition reasons and Event reasons of the sandbox controllers that are not named where
/// they are decided.
pub mod reasons {
    /// Pool `Ready=False`: the API server refused a Pod built from `spec.template`
    /// (an invalid template, a quota, an admission webhook); the message quotes it.
    pub const POD_CREATE_FAILED: &str = "PodCreateFailed";
    /// Pool Warning Event: the API server refused a bind, a release or a delete of one of its
    /// Pods (an admission policy or webhook on Pods); retried with backoff.
    pub const POD_WRITE_REFUSED: &str = "PodWriteRefused";
    /// Claim `Ready=False`: its `poolRef` names no SandboxPool in the namespace.
    pub const POOL_NOT_FOUND: &str = "PoolNotFound";
    /// Claim `Ready=False`: its `envRef` (and group) has no Pool in this cluster.
    pub const ENV_NOT_FOUND: &str = "EnvNotFound";
    /// Claim `Ready=False`: the pool exists; the claim waits for an idle Pod.
    pub const QUEUED: &str = "Queued";
    /// Env `Ready=False`, `Stalled=True`: the API server refused a member's SandboxPool
    /// (for example its name or template); the message quotes it.
    pub const POOL_APPLY_FAILED: &str = "PoolApplyFailed";
}
