//! `ClusterDiscovery`, `NamespaceInventory` and `WorkloadRevision`: the cluster's inventory
//! and change log, published as Kubernetes objects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use super::history::{ReplicaHistory, ReplicaHistoryPolicy};
pub use super::network::{IngressEntry, NetworkPolicyEntry, RoleBindingEntry, ServiceEntry};
pub use super::policy::AutoscalingPolicy;

/// Turns on discovery for this cluster. One per cluster, usually named `cluster`, kept in git.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "ClusterDiscovery",
    status = "ClusterDiscoveryStatus",
    shortname = "cdisc",
    category = "moonin",
    cel,
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".status.cluster.name.value",
        description = "Cluster name"
    ),
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".status.cluster.provider.value",
        description = "Cloud provider"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.cluster.kubernetesVersion.value",
        description = "Kubernetes version"
    ),
    printcolumn(
        name = "Namespaces",
        type_ = "integer",
        json_path = ".status.totals.namespaces",
        description = "Namespaces inventoried"
    ),
    printcolumn(
        name = "Signals",
        type_ = "integer",
        json_path = ".status.totals.errorSignals",
        description = "Open error signals"
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
pub struct ClusterDiscoverySpec {
    /// The name this cluster is published under; defaults to the manager's `--cluster-name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.size() <= 63").message("clusterName must be a DNS label: lower-case letters, digits and '-', at most 63 characters"))]
    pub cluster_name: Option<String>,
    /// Helm release discovery (reads Helm release Secrets; needs the opt-in RBAC role).
    #[serde(default)]
    pub helm: HelmDiscovery,
    /// Change tracking of the Secrets workloads refer to (watches Secrets; needs the opt-in
    /// RBAC role of Helm discovery).
    #[serde(default)]
    pub secret_changes: SecretChanges,
    /// Namespaces that are never inventoried; an excluded namespace's inventory is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub exclude_namespaces: Vec<String>,
    /// The platform's rules for KEDA ScaledObjects, checked on every ScaledObject; a
    /// ScaledObject that breaks one gets the signal `AutoscalingPolicy` (on itself, as a
    /// Warning Event, and on its Deployment's inventory entry). Unset: nothing is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling_policy: Option<AutoscalingPolicy>,
    /// Each autoscaler's replica history, which `moonin suggest` turns into
    /// ScalingTemplates. On by default: hourly slots of a week, four weeks.
    #[serde(default)]
    pub replica_history: ReplicaHistoryPolicy,
}

/// Helm discovery switches.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmDiscovery {
    /// Decode Helm release Secrets (sanitised: values, manifests and notes are never published).
    #[serde(default)]
    pub enabled: bool,
}

/// Secret change tracking switches.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretChanges {
    /// Record a change of the data of a Secret a Deployment refers to (env, envFrom,
    /// volumes) as a WorkloadRevision of that Deployment, naming the keys that changed: key
    /// names only, never a value or a hash of one. Secrets are watched in full (except Helm
    /// release Secrets) and reduced at once to key names.
    #[serde(default)]
    pub enabled: bool,
}

/// What discovery found about the cluster as a whole.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDiscoveryStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Cluster metadata, each value with where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterMetadata>,
    /// Node groups by zone, instance type and container runtime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_groups: Vec<NodeGroup>,
    /// Counts across the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<Totals>,
    /// Ready, ApiReachable, InventoryComplete, HelmAccess, Truncated.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// A discovered value and its source (for example `node.spec.providerID` or `flag`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sourced {
    /// The value.
    pub value: String,
    /// Where it came from.
    pub source: String,
}

/// Cluster metadata.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMetadata {
    /// The cluster's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Sourced>,
    /// Cloud provider, from Node `providerID` prefixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Sourced>,
    /// Region, from topology labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Sourced>,
    /// Zones with at least one Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// The API server's version, as its `/version` gives it; asked again at the next
    /// rebuild once 10 minutes have passed, so an upgrade shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<Sourced>,
}

/// Nodes that share a zone, an instance type and a container runtime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// Zone (topology label).
    pub zone: String,
    /// Instance type (`node.kubernetes.io/instance-type`).
    pub instance_type: String,
    /// Container runtime and version.
    pub runtime: String,
    /// Nodes in the group.
    pub count: i32,
    /// Ready nodes in the group.
    pub ready: i32,
    /// Summed capacity (cpu, memory, pods).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
    /// Summed allocatable (cpu, memory, pods).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    /// Nodes reporting each pressure condition (MemoryPressure, DiskPressure, PIDPressure).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pressure: BTreeMap<String, i32>,
}

/// Counts across the cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Namespaces inventoried.
    pub namespaces: i32,
    /// Deployments.
    pub deployments: i32,
    /// Distinct container images.
    pub images: i32,
    /// CronJobs.
    pub cron_jobs: i32,
    /// Open error signals.
    pub error_signals: i32,
}

/// The inventory of one namespace. Published by discovery, named `inventory` (split parts:
/// `inventory-1`, `inventory-2`, …), owned by the `ClusterDiscovery`. A report, written only
/// by discovery: it has no status subresource, so one write creates or updates it whole.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "NamespaceInventory",
    namespaced,
    status = "NamespaceInventoryStatus",
    shortname = "nsinv",
    category = "moonin",
    cel,
    validation = Rule::new("self.metadata.name == 'inventory' || self.metadata.name.matches('^inventory-[1-9][0-9]*$')").message("a NamespaceInventory is named 'inventory', or 'inventory-<n>' for the parts of a split inventory"),
    printcolumn(name = "Deployments", type_ = "integer", json_path = ".status.summary.deployments", description = "Deployments in this part"),
    printcolumn(name = "CronJobs", type_ = "integer", json_path = ".status.summary.cronJobs", description = "CronJobs in this part"),
    printcolumn(name = "Signals", type_ = "integer", json_path = ".status.summary.errorSignals", description = "Open error signals"),
    printcolumn(name = "Part", type_ = "integer", json_path = ".spec.part", description = "Part number of a split inventory"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceInventorySpec {
    /// Part number when the inventory is split (0 for the first or only part).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub part: i32,
    /// How many parts the inventory has.
    #[serde(default = "one_part")]
    #[schemars(range(min = 1))]
    pub parts: i32,
}

fn one_part() -> i32 {
    1
}

/// The namespace's inventory.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceInventoryStatus {
    /// Not set: with no status subresource, every write moves the generation (earlier
    /// versions set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Counts of what this part holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<InventorySummary>,
    /// Deployments with their images, replicas, revision, autoscaler and health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<DeploymentEntry>,
    /// CronJobs with their recent runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cron_jobs: Vec<CronJobEntry>,
    /// Helm releases, sanitised.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub helm_releases: Vec<HelmRelease>,
    /// Services with their type, selector, ports and the Deployments they front.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceEntry>,
    /// Ingresses with their hosts, TLS and backends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingresses: Vec<IngressEntry>,
    /// NetworkPolicies with the Deployments they select.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_policies: Vec<NetworkPolicyEntry>,
    /// RoleBindings of the namespace, and ClusterRoleBindings to its ServiceAccounts (by
    /// name or by a group all of them are in): which role each grants to whom.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub role_bindings: Vec<RoleBindingEntry>,
    /// Per autoscaler, the replicas it asked for, slot by slot (`spec.replicaHistory` of
    /// the ClusterDiscovery).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_history: Vec<ReplicaHistory>,
    /// Distinct images used in the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// Ready, Truncated.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// Counts of one inventory part.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InventorySummary {
    /// Deployments.
    pub deployments: i32,
    /// CronJobs.
    pub cron_jobs: i32,
    /// Helm releases.
    pub helm_releases: i32,
    /// Services.
    #[serde(default)]
    pub services: i32,
    /// Ingresses.
    #[serde(default)]
    pub ingresses: i32,
    /// NetworkPolicies.
    #[serde(default)]
    pub network_policies: i32,
    /// RoleBindings and ClusterRoleBindings listed.
    #[serde(default)]
    pub role_bindings: i32,
    /// Open error signals: those of Deployments, CronJobs, Services and Ingresses (RBAC
    /// hazards are not counted).
    pub error_signals: i32,
}

/// One Deployment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentEntry {
    /// Name.
    pub name: String,
    /// Container images, in container order.
    #[serde(default)]
    pub images: Vec<String>,
    /// `spec.replicas`.
    #[serde(default)]
    pub desired: i32,
    /// Ready replicas.
    #[serde(default)]
    pub ready: i32,
    /// Available replicas.
    #[serde(default)]
    pub available: i32,
    /// The current ReplicaSet revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The autoscaler, as `HPA/<name> min-max` or `ScaledObject/<name> min-max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<String>,
    /// The Helm release that manages it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_release: Option<String>,
    /// The Services that front it (their selector matches its Pod template).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// The traffic NetworkPolicies isolate its Pods for: `Ingress`, `Egress`, both, or
    /// none (everything allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolation: Vec<String>,
    /// `Healthy`, `Progressing` or `Degraded`.
    #[serde(default)]
    pub health: String,
    /// Open error signals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// What the next WorkloadRevision of this Deployment is measured from: the Deployment
    /// as first seen or as of its last recorded change. Kept here so that a restart finds a
    /// change made while Moonin was down, and a first start writes no revision at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<WorkloadBaseline>,
}

/// The state of a Deployment that its next change is measured from (names, never data).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadBaseline {
    /// The Deployment's UID: one deleted and created again under its name starts afresh.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The ReplicaSet revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// `spec.replicas`.
    #[serde(default)]
    pub replicas: i32,
    /// Containers and their images, init containers first, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerImage>,
    /// ConfigMaps and Secrets the template refers to, as `ConfigMap/<name>` or
    /// `Secret/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_refs: Vec<String>,
    /// What the ConfigMaps and Secrets it refers to held: key names, and a hash of a
    /// ConfigMap's data (never a value, never a hash of a Secret's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<ConfigBaseline>,
}

/// The content of a ConfigMap or Secret a workload refers to, as its baseline holds it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigBaseline {
    /// `ConfigMap/<name>` or `Secret/<name>`.
    pub source: String,
    /// It did not exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
    /// Its key names (of `data` and `binaryData`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// A ConfigMap's data hash: SHA-256 over its keys and values, 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_hash: Option<String>,
}

/// A change of the data of a ConfigMap or Secret a workload refers to (names, never values).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChange {
    /// `ConfigMap/<name>` or `Secret/<name>`.
    pub source: String,
    /// The keys added, removed or whose value changed, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Values of other keys changed too, while no Moonin process watched: which ones is not
    /// known (only a ConfigMap's data hash survives a restart).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keys_unknown: bool,
    /// A ConfigMap's new data hash: SHA-256 over its keys and values, 16 hex digits. A
    /// Secret has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_hash: Option<String>,
    /// It was deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The field manager of its latest change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
}

/// A container and its image.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerImage {
    /// Container name.
    pub name: String,
    /// Image.
    pub image: String,
}

/// One CronJob.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CronJobEntry {
    /// Name.
    pub name: String,
    /// Schedule.
    pub schedule: String,
    /// Whether it is suspended.
    #[serde(default)]
    pub suspend: bool,
    /// The last 10 runs, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<CronJobRun>,
    /// Open error signals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

/// One run of a CronJob.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CronJobRun {
    /// The Job's name.
    pub job: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Time>,
    /// `Running`, `Succeeded`, `Failed`, or `Unknown`: its Job was deleted before discovery
    /// saw it end, and the CronJob's `lastSuccessfulTime` does not say it succeeded.
    pub result: String,
}

/// A Helm release, sanitised: only allowlisted fields; values and manifest only as hashes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmRelease {
    /// Release name.
    pub name: String,
    /// Latest revision.
    pub revision: i64,
    /// Status (`deployed`, `failed`, …).
    pub status: String,
    /// Chart name.
    pub chart: String,
    /// Chart version.
    pub chart_version: String,
    /// The chart's appVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// When it was last deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<Time>,
    /// HMAC-SHA256 of the values under the cluster's key (the Secret `moonin-helm-hash-key`
    /// in the manager's namespace): it changes with them but cannot be tested against guessed
    /// values; the values themselves are never published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_hash: Option<String>,
    /// HMAC-SHA256 of the manifest under the same key; the manifest itself is never
    /// published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_hash: Option<String>,
}

/// One observed change of a workload: what changed, when, and by whom. Published by discovery.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    derive = "PartialEq",
    group = "moonin.io",
    version = "v1alpha1",
    kind = "WorkloadRevision",
    namespaced,
    status = "WorkloadRevisionStatus",
    shortname = "wrev",
    category = "moonin",
    cel,
    printcolumn(
        name = "Workload",
        type_ = "string",
        json_path = ".spec.workload.name",
        description = "The workload that changed"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".spec.revision",
        description = "ReplicaSet revision"
    ),
    printcolumn(
        name = "Change",
        type_ = "string",
        json_path = ".spec.summary",
        description = "What changed"
    ),
    printcolumn(
        name = "By",
        type_ = "string",
        json_path = ".spec.changedBy",
        description = "Field manager that made the change"
    ),
    printcolumn(
        name = "Outcome",
        type_ = "string",
        json_path = ".status.outcome",
        description = "How the rollout ended: Complete, Failed, Superseded or RolledBack"
    ),
    printcolumn(
        name = "Took",
        type_ = "string",
        json_path = ".status.took",
        description = "From the change to its outcome"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("a WorkloadRevision records a past change and is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRevisionSpec {
    /// The workload that changed.
    pub workload: WorkloadRef,
    /// The ReplicaSet revision this change produced.
    #[x_kube(validation = Rule::new("self >= 1").message("revision is a ReplicaSet revision and starts at 1"))]
    pub revision: i64,
    /// When the change was observed.
    pub observed_at: Time,
    /// One line saying what changed.
    #[schemars(length(max = 1024))]
    pub summary: String,
    /// The field manager that made the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
    /// Pod template hash of the new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
    /// Image changes, per container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageChange>,
    /// Replicas before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicasChange>,
    /// ConfigMaps and Secrets the new template refers to (names only, never data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_refs: Vec<String>,
    /// Changes of the data of ConfigMaps and Secrets the template refers to: the keys that
    /// changed and a ConfigMap's new data hash, never a value. Such a change restarts no
    /// Pod, so it starts no rollout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_changes: Vec<ConfigChange>,
    /// The Helm release behind the change, when Helm manages the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRevision>,
    /// Whether the Pod template changed: the change started a rollout, whose outcome the
    /// status records. (A change of replicas alone starts none.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollout: bool,
}

/// The workload a revision belongs to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// Kind, for example `Deployment`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// An image change in one container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageChange {
    /// Container name.
    pub container: String,
    /// Image before (absent for a new container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Image after (absent for a removed container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// A replicas change.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicasChange {
    /// Before.
    pub from: i32,
    /// After.
    pub to: i32,
}

/// The Helm release revision behind a change.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmRevision {
    /// Release name.
    pub release: String,
    /// Release revision.
    pub revision: i64,
    /// Chart name.
    pub chart: String,
    /// Chart version.
    pub version: String,
}

/// How a rollout ends (`status.outcome` of a WorkloadRevision).
pub mod outcomes {
    /// Every replica of the new revision is updated and available.
    pub const COMPLETE: &str = "Complete";
    /// The Deployment reports `ProgressDeadlineExceeded` or a `ReplicaFailure`.
    pub const FAILED: &str = "Failed";
    /// A newer change came before this one completed.
    pub const SUPERSEDED: &str = "Superseded";
    /// The next change restored the images this one replaced.
    pub const ROLLED_BACK: &str = "RolledBack";
}

/// Bookkeeping for a revision record, and how its rollout ended.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRevisionStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How the rollout ended: `Complete`, `Failed`, `Superseded` or `RolledBack`; absent
    /// while it runs, and for a change that started none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why: the failure's reason and message, or the change that superseded or rolled
    /// this one back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_message: Option<String>,
    /// When the outcome was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// From the change to its outcome, such as `42s` or `3m10s` (for `Complete`: the time
    /// to available).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took: Option<String>,
    /// Ready once the record is complete.
    #[serde(default)]
    #[schemars(schema_with = "crate::api::schema::conditions")]
    pub conditions: Vec<Condition>,
}
