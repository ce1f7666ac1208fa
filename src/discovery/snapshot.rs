//! What Load reads of one namespace for its inventory ([`NamespaceSnapshot`]), and the
//! signals the pure planners find on its objects ([`ObjectSignals`]): plain data, shared by
//! `namespace.rs` and the planners it calls.

use std::{collections::HashMap, sync::Arc};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

use super::{
    history::{Keeping, Open},
    network::{IngressView, NetworkPolicyView, ServiceView},
    rbac::{BindingView, RoleView},
    revision::RevView,
    stores::RsView,
    view::{CronJobView, DeploymentView, HpaView, JobView, PodView, ScaledObjectView},
};
use crate::api::discovery::{
    AutoscalingPolicy, CronJobEntry, HelmRelease, ReplicaHistory, WorkloadBaseline,
};

/// What a namespace's inventory is built from.
#[derive(Debug, Clone, Default)]
pub struct NamespaceSnapshot {
    /// The namespace.
    pub namespace: String,
    /// Its Deployments.
    pub deployments: Vec<Arc<DeploymentView>>,
    /// Its ReplicaSets, with their names.
    pub replica_sets: Vec<(String, RsView)>,
    /// Its Pods.
    pub pods: Vec<PodView>,
    /// Its Jobs.
    pub jobs: Vec<JobView>,
    /// Its HPAs.
    pub hpas: Vec<HpaView>,
    /// Its ScaledObjects (none when KEDA is not installed).
    pub scaled_objects: Vec<ScaledObjectView>,
    /// Its CronJobs.
    pub cron_jobs: Vec<CronJobView>,
    /// The CronJob entries the published inventory (all its parts) holds: runs whose Jobs
    /// may be gone.
    pub published_runs: Vec<CronJobEntry>,
    /// Per Deployment, the signals its published entry shows (already reported).
    pub published_signals: HashMap<String, Vec<String>>,
    /// Per Deployment, the baseline its next revision is measured from: this process's,
    /// else the one the published entry holds.
    pub baselines: HashMap<String, WorkloadBaseline>,
    /// Its Helm releases, sanitised (none when Helm discovery is off).
    pub releases: Vec<HelmRelease>,
    /// The autoscaling rules ScaledObjects are checked against, if any.
    pub policy: Option<AutoscalingPolicy>,
    /// Its WorkloadRevisions: a failing Deployment's signals name the newest change.
    pub revisions: Vec<RevView>,
    /// Its Services.
    pub services: Vec<ServiceView>,
    /// Its Ingresses.
    pub ingresses: Vec<IngressView>,
    /// Its NetworkPolicies.
    pub network_policies: Vec<NetworkPolicyView>,
    /// Its RoleBindings, with their names.
    pub role_bindings: Vec<(String, BindingView)>,
    /// The ClusterRoleBindings that reach its ServiceAccounts, with their names.
    pub cluster_role_bindings: Vec<(String, BindingView)>,
    /// The roles those bindings grant, as `(kind, name)` (`Role` of this namespace or
    /// `ClusterRole`), that exist.
    pub roles: HashMap<(String, String), RoleView>,
    /// The signals the published Service, Ingress and RBAC entries show, per object the
    /// Events are about (`Service/<name>`, `Ingress/<name>`, `ServiceAccount/<name>`,
    /// `Namespace/<name>`).
    pub published_connections: HashMap<String, Vec<String>>,
    /// How replica histories are kept (none: switched off, or an unknown time zone).
    pub history: Option<Keeping>,
    /// The replica histories the published inventory holds, by autoscaler.
    pub published_history: HashMap<String, ReplicaHistory>,
    /// The slot this process observes of each autoscaler, by autoscaler.
    pub open_slots: HashMap<String, Open>,
    /// When it was loaded.
    pub now: Timestamp,
}

/// The signals an object has now, for Warning Events on those it did not have before.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectSignals {
    /// The object.
    pub regarding: ObjectReference,
    /// Its signals now.
    pub signals: Vec<String>,
    /// What its published inventory entry shows, if it has one: a restart does not report
    /// those again.
    pub published: Option<Vec<String>>,
}
