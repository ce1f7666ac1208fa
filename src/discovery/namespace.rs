//! The rebuild of one namespace's inventory: load its projections ([`load`]), build the
//! inventory and the signals of each object ([`decide`], pure), publish a Warning Event
//! for each new signal ([`ReportedSignals`]), then write the inventory in as many parts as
//! it takes ([`write`]), skipping parts that did not change ([`WrittenDigests`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::reflector::ObjectRef,
};
use serde_json::json;

use super::{
    baselines, connections,
    errors::gone_is_done,
    helm_secrets,
    history::{self, Keeping, Open},
    inventory,
    names::CONTROLLER,
    names::{condition_reasons, condition_types},
    network::{self, IngressView, NetworkPolicyView, ServiceView},
    policy,
    rbac::{BindingView, RoleView},
    revision::RevView,
    shared::Shared,
    signals,
    stores::RsView,
    suspect,
    view::{CronJobView, DeploymentView, HpaView, JobView, PodView, ScaledObjectView},
};
use crate::api::{
    conditions::{self, Desired, types},
    discovery::{
        AutoscalingPolicy, ClusterDiscovery, CronJobEntry, DeploymentEntry, HelmRelease,
        NamespaceInventory, NamespaceInventoryStatus, ReplicaHistory, WorkloadBaseline,
    },
    field_manager,
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
    /// The ClusterRoleBindings that bind one of its ServiceAccounts, with their names.
    pub cluster_role_bindings: Vec<(String, BindingView)>,
    /// The roles those bindings grant, as `(kind, name)` (`Role` of this namespace or
    /// `ClusterRole`), that exist.
    pub roles: HashMap<(String, String), RoleView>,
    /// The signals the published Service, Ingress and RBAC entries show, per object the
    /// Events are about (`Service/<name>`, `Ingress/<name>`, `ServiceAccount/<name>`).
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

/// A namespace's inventory, unsplit, and the signals of its objects.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespacePlan {
    /// The inventory.
    pub status: NamespaceInventoryStatus,
    /// The signals of each Deployment, then of each HPA and ScaledObject, then of each
    /// Service, Ingress and bound ServiceAccount.
    pub signals: Vec<ObjectSignals>,
    /// The slots now open of its autoscalers, kept once the inventory is written.
    pub open_slots: HashMap<String, Open>,
}

/// Loads what `ns`'s inventory is built from (reading the Secrets of changed Helm releases
/// when Helm discovery is on).
pub async fn load(shared: &Shared, ns: &str, cd: &ClusterDiscovery) -> NamespaceSnapshot {
    let helm_enabled = cd.spec.helm.enabled;
    let s = &shared.stores;
    let now = Timestamp::now();
    let mut published_runs = Vec::new();
    let mut published_signals = HashMap::new();
    let mut published_baselines = HashMap::new();
    let mut published_connections = HashMap::new();
    let mut published_history = HashMap::new();
    for part in s.inventory_parts(ns) {
        if let Some(st) = &part.status {
            for h in &st.replica_history {
                published_history.insert(h.autoscaler.clone(), h.clone());
            }
            connections::published_signals(ns, st, &mut published_connections);
            published_runs.extend(st.cron_jobs.iter().cloned());
            for d in &st.deployments {
                published_signals.insert(d.name.clone(), d.signals.clone());
                if let Some(b) = &d.baseline {
                    published_baselines.insert(d.name.clone(), b.clone());
                }
            }
        }
    }
    let deployments = s.deployments.in_namespace(ns);
    let baselines = deployments
        .iter()
        .filter_map(|d| {
            let remembered = shared.baselines.get(&(ns.to_string(), d.name.clone()));
            let b = remembered
                .map(|v| baselines::published(&v))
                .or_else(|| published_baselines.remove(&d.name))?;
            Some((d.name.clone(), b))
        })
        .collect();
    let releases = if helm_enabled {
        helm_secrets::releases(
            &shared.client,
            &shared.stores.helm_secrets,
            &shared.helm,
            ns,
        )
        .await
        .into_iter()
        .map(|(_, r, _)| r)
        .collect()
    } else {
        Vec::new()
    };
    let role_bindings = s.role_bindings.in_namespace_keyed(ns);
    let cluster_role_bindings = s.cluster_role_bindings_of(ns);
    NamespaceSnapshot {
        namespace: ns.to_string(),
        deployments,
        replica_sets: s.replica_sets.in_namespace_keyed(ns),
        pods: s.pods.in_namespace(ns),
        jobs: s.jobs.in_namespace(ns),
        hpas: s.hpas.in_namespace(ns),
        scaled_objects: s
            .scaled_objects
            .as_ref()
            .map(|so| so.in_namespace(ns))
            .unwrap_or_default(),
        cron_jobs: s.cron_jobs.in_namespace(ns),
        published_runs,
        published_signals,
        baselines,
        releases,
        policy: cd.spec.autoscaling_policy.clone(),
        revisions: s.revisions.in_namespace(ns),
        services: s.services.in_namespace(ns),
        ingresses: s.ingresses.in_namespace(ns),
        network_policies: s.network_policies.in_namespace(ns),
        roles: connections::granted_roles(
            &shared.stores,
            ns,
            &role_bindings,
            &cluster_role_bindings,
        ),
        role_bindings,
        cluster_role_bindings,
        published_connections,
        history: history::Keeping::of(&cd.spec.replica_history).ok(),
        published_history,
        open_slots: shared.open_slots.of(ns),
        now,
    }
}

/// The inventory of a namespace and the signals of its objects.
pub fn decide(s: &NamespaceSnapshot) -> NamespacePlan {
    let (mut entries, mut found) = deployment_entries(s);
    found.extend(orphan_autoscalers(s));
    let connections = connections::connections(s);
    let deployments: Vec<&DeploymentView> = s.deployments.iter().map(|d| &**d).collect();
    network::annotate_deployments(
        &mut entries,
        &deployments,
        &connections.services,
        &s.network_policies,
    );
    found.extend(connections::signals(s, &connections));
    let status = inventory::build(
        &s.namespace,
        entries,
        cron_job_entries(s),
        s.releases.clone(),
    );
    let mut status = inventory::connect(status, connections);
    let mut open_slots = HashMap::new();
    if let Some(keeping) = &s.history {
        let hpas: Vec<&HpaView> = s.hpas.iter().collect();
        let scaled: Vec<&ScaledObjectView> = s.scaled_objects.iter().collect();
        (status.replica_history, open_slots) = history::histories(
            keeping,
            &hpas,
            &scaled,
            &s.published_history,
            &s.open_slots,
            s.now,
        );
    }
    NamespacePlan {
        status,
        signals: found,
        open_slots,
    }
}

/// Each Deployment's entry, and its signals.
fn deployment_entries(s: &NamespaceSnapshot) -> (Vec<DeploymentEntry>, Vec<ObjectSignals>) {
    let so_targets: Vec<(String, String)> = s
        .scaled_objects
        .iter()
        .filter(|so| so.target.0 == "Deployment")
        .map(|so| (so.name.clone(), so.target.1.clone()))
        .collect();
    let pods: Vec<&PodView> = s.pods.iter().collect();
    let jobs: Vec<&JobView> = s.jobs.iter().collect();
    let mut entries = Vec::new();
    let mut found = Vec::new();
    for d in &s.deployments {
        let own_rs: Vec<String> = s
            .replica_sets
            .iter()
            .filter(|(_, r)| r.deployment.as_deref() == Some(d.name.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        let targeting: Vec<&HpaView> = s
            .hpas
            .iter()
            .filter(|h| h.target.0 == "Deployment" && h.target.1 == d.name)
            .collect();
        let mut signals = suspect::annotate(
            signals::deployment_signals(d, &pods, &jobs, &targeting, &so_targets, &own_rs),
            suspect::suspect(&d.name, &s.revisions, s.now),
        );
        // Its ScaledObjects' policy violations: listed here, reported on the ScaledObject.
        let violations: Vec<String> = s
            .scaled_objects
            .iter()
            .filter(|so| so.target.0 == "Deployment" && so.target.1 == d.name)
            .filter_map(|so| policy::signal(s.policy.as_ref(), so, &s.hpas))
            .collect();
        // The ScaledObject is what people edit; its KEDA HPA only carries its bounds.
        let autoscaler = s
            .scaled_objects
            .iter()
            .find(|so| so.target.0 == "Deployment" && so.target.1 == d.name)
            .map(inventory::scaled_object_summary)
            .or_else(|| targeting.first().map(|h| inventory::autoscaler_summary(h)));
        found.push(ObjectSignals {
            regarding: ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                namespace: Some(d.namespace.clone()),
                name: Some(d.name.clone()),
                uid: Some(d.uid.clone()),
                ..Default::default()
            },
            signals: signals.clone(),
            published: s.published_signals.get(&d.name).cloned(),
        });
        signals.extend(violations);
        let baseline = s.baselines.get(&d.name).cloned();
        entries.push(inventory::deployment_entry(
            d, autoscaler, signals, baseline,
        ));
    }
    (entries, found)
}

/// The signals of every HPA and ScaledObject: `TargetNotFound` when the Deployment it
/// scales is missing (none otherwise, which ends an earlier report).
fn orphan_autoscalers(s: &NamespaceSnapshot) -> Vec<ObjectSignals> {
    let deployments: Vec<&DeploymentView> = s.deployments.iter().map(|d| &**d).collect();
    let hpas: Vec<&HpaView> = s.hpas.iter().collect();
    let orphans = signals::orphan_autoscaler_signals(&hpas, &deployments);
    let scaled_objects: Vec<&ScaledObjectView> = s.scaled_objects.iter().collect();
    let so_orphans = signals::orphan_autoscaler_signals(&scaled_objects, &deployments);
    let autoscalers = s
        .hpas
        .iter()
        .map(|h| {
            (
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                &h.name,
                &orphans,
            )
        })
        .chain(
            s.scaled_objects
                .iter()
                .map(|so| ("keda.sh/v1alpha1", "ScaledObject", &so.name, &so_orphans)),
        );
    autoscalers
        .map(|(api_version, kind, name, orphans)| ObjectSignals {
            regarding: ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
                namespace: Some(s.namespace.clone()),
                name: Some(name.clone()),
                ..Default::default()
            },
            signals: orphans
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, signal)| signal.clone())
                .chain(
                    (kind == "ScaledObject")
                        .then(|| s.scaled_objects.iter().find(|so| &so.name == name))
                        .flatten()
                        .and_then(|so| policy::signal(s.policy.as_ref(), so, &s.hpas)),
                )
                .collect(),
            published: None,
        })
        .collect()
}

/// Each CronJob's entry: its runs (those published, updated from its Jobs) and signals.
fn cron_job_entries(s: &NamespaceSnapshot) -> Vec<CronJobEntry> {
    let mut entries = Vec::new();
    for c in &s.cron_jobs {
        let runs_before = s
            .published_runs
            .iter()
            .find(|e| e.name == c.name)
            .map(|e| e.runs.clone())
            .unwrap_or_default();
        let own: Vec<&JobView> = s
            .jobs
            .iter()
            .filter(|j| j.cron_job.as_deref() == Some(c.name.as_str()))
            .collect();
        let runs = inventory::merge_runs(&runs_before, &own);
        let found = signals::cron_job_signals(c, &runs, s.now);
        entries.push(CronJobEntry {
            name: c.name.clone(),
            schedule: c.schedule.clone(),
            suspend: c.suspend,
            runs,
            signals: found,
        });
    }
    entries
}

/// The signals last reported per object (`(namespace, "Kind/name")`), for Events on
/// transitions only.
#[derive(Debug, Default)]
pub struct ReportedSignals(HashMap<(String, String), Vec<String>>);

impl ReportedSignals {
    /// Forgets the objects of namespace `ns` (deleted, or no longer inventoried).
    pub fn forget_namespace(&mut self, ns: &str) {
        self.0.retain(|(n, _), _| n != ns);
    }

    /// Records the signals `object` has now; returns those it did not have (as last
    /// reported, else as its published entry shows), in order.
    pub fn appeared(&mut self, object: &ObjectSignals) -> Vec<String> {
        let r = &object.regarding;
        let key = (
            r.namespace.clone().unwrap_or_default(),
            format!(
                "{}/{}",
                r.kind.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default()
            ),
        );
        let before = self
            .0
            .insert(key, object.signals.clone())
            .or_else(|| object.published.clone())
            .unwrap_or_default();
        // A signal is known by its reason: "CrashLoopBackOff: 2 Pods" after "…: 1 Pod" is the
        // same signal (Kubernetes folds a repeated Event into a count anyway).
        object
            .signals
            .iter()
            .filter(|s| {
                !before
                    .iter()
                    .any(|b| signals::reason_of(b) == signals::reason_of(s))
            })
            .cloned()
            .collect()
    }
}

/// A Warning Event on each object for each signal it did not have before (while this
/// process leads).
pub async fn report_signals(
    shared: &Shared,
    reported: &mut ReportedSignals,
    found: &[ObjectSignals],
) {
    for object in found {
        for signal in reported.appeared(object) {
            if !shared.ctx.leadership.is_leader() {
                break;
            }
            shared
                .events
                .publish(
                    &object.regarding,
                    true,
                    signals::reason_of(&signal),
                    Some("Discovered"),
                    &signal,
                )
                .await;
        }
    }
}

/// A digest of each inventory status written, per `(namespace, part)` (`-1`: a part whose
/// name says no number), to skip unchanged writes while the store has not caught up (a
/// copy would double the memory the inventories take). Shared by the namespaces written at
/// once; the lock is never held across a request.
#[derive(Debug, Default)]
pub struct WrittenDigests(Mutex<HashMap<(String, i32), u64>>);

impl WrittenDigests {
    fn digests(&self) -> MutexGuard<'_, HashMap<(String, i32), u64>> {
        // A panic elsewhere cannot leave a digest half-written: take the map as it is.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `status` is what was last written to that part.
    fn unchanged(&self, key: &(String, i32), status: &NamespaceInventoryStatus) -> bool {
        self.digests().get(key) == Some(&digest(status))
    }

    /// `status` was written to that part.
    fn written(&self, key: (String, i32), status: &NamespaceInventoryStatus) {
        let d = digest(status);
        self.digests().insert(key, d);
    }

    /// That part is gone.
    /// Forgets every part of namespace `ns` (deleted, or no longer inventoried).
    pub fn forget_namespace(&self, ns: &str) {
        self.digests().retain(|(n, _), _| n != ns);
    }

    fn forget(&self, key: &(String, i32)) {
        self.digests().remove(key);
    }
}

/// A digest of a status as it is serialised (the same value gives the same digest).
fn digest(status: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(status).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// One part's write: the whole object (a NamespaceInventory has no status subresource, so
/// one server-side apply creates or updates it, spec and status together).
#[derive(Debug, Clone, PartialEq)]
pub struct PartWrite {
    /// The part's name.
    pub name: String,
    /// The key of its digest.
    key: (String, i32),
    /// Whether its spec (part numbers, owner) changes: it is new, or its numbers changed.
    pub spec: bool,
    /// Its status.
    pub status: NamespaceInventoryStatus,
    /// Whether to write it: its spec changes, or its status says something other than what
    /// the stored part says (conditions' times aside) and what was last written.
    pub write: bool,
}

/// The writes of an inventory split into `parts`, given the stored parts (`existing`) and
/// what was last written. A part carries no `observedGeneration`: without a status
/// subresource every write moves the generation, so none could say it is current.
pub fn plan_parts(
    ns: &str,
    parts: Vec<NamespaceInventoryStatus>,
    existing: impl Fn(&str) -> Option<Arc<NamespaceInventory>>,
    written: &WrittenDigests,
    now: Timestamp,
) -> Vec<PartWrite> {
    let n = parts.len();
    let mut writes = Vec::new();
    for (i, mut part) in parts.into_iter().enumerate() {
        let name = inventory::part_name(i);
        let existing = existing(&name);
        let spec_ok = existing
            .as_ref()
            .is_some_and(|e| e.spec.part == i as i32 && e.spec.parts == n as i32);
        let current = existing
            .as_ref()
            .and_then(|e| e.status.clone())
            .unwrap_or_default();
        part.observed_generation = None;
        part.conditions = conditions::merge(&current.conditions, &part_conditions(i, n), None, now);
        let key = (ns.to_string(), i as i32);
        let same = conditions::same_status(&current, &part, |st| &mut st.conditions)
            || written.unchanged(&key, &part);
        writes.push(PartWrite {
            name,
            key,
            spec: !spec_ok,
            write: !spec_ok || !same,
            status: part,
        });
    }
    writes
}

/// `Ready`, and `Truncated` saying which part of how many this is.
fn part_conditions(i: usize, n: usize) -> [Desired; 2] {
    let truncated = if n > 1 {
        Desired::new(
            condition_types::TRUNCATED,
            true,
            condition_reasons::SPLIT,
            format!(
                "the inventory passes {} KiB; this is part {} of {n}",
                inventory::MAX_BYTES / 1024,
                i + 1
            ),
        )
    } else {
        Desired::new(
            condition_types::TRUNCATED,
            false,
            condition_reasons::COMPLETE,
            "the inventory fits one object",
        )
    };
    [
        Desired::new(
            types::READY,
            true,
            condition_reasons::INVENTORIED,
            "the namespace's inventory is current",
        ),
        truncated,
    ]
}

/// Writes a namespace's inventory, split into parts when it would be too large; removes
/// parts left from an earlier, larger split. Returns the number of parts.
pub async fn write(
    shared: &Shared,
    written: &WrittenDigests,
    cd: &ClusterDiscovery,
    ns: &str,
    status: NamespaceInventoryStatus,
    now: Timestamp,
) -> Result<usize, kube::Error> {
    let parts = inventory::split(status, inventory::MAX_BYTES);
    let n = parts.len();
    let existing = |name: &str| {
        shared
            .stores
            .inventories
            .get(&ObjectRef::new(name).within(ns))
    };
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    let pp = PatchParams::apply(field_manager::DISCOVERY).force();
    for (i, part) in plan_parts(ns, parts, existing, written, now)
        .into_iter()
        .enumerate()
    {
        if !part.write {
            continue;
        }
        // Always the whole object: a field left out of an apply is a field given up.
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "NamespaceInventory",
            "metadata": {
                "name": part.name,
                "namespace": ns,
                "ownerReferences": [{
                    "apiVersion": "moonin.io/v1alpha1",
                    "kind": "ClusterDiscovery",
                    "name": cd.name_any(),
                    "uid": cd.uid().unwrap_or_default(),
                }],
            },
            "spec": {"part": i, "parts": n},
            "status": part.status,
        });
        shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
        api.patch(&part.name, &pp, &Patch::Apply(&body)).await?;
        written.written(part.key, &part.status);
    }
    delete_parts(shared, written, ns, n).await?;
    Ok(n)
}

/// Deletes a namespace's inventory parts from the `n`th on (all of them for 0).
pub async fn delete_parts(
    shared: &Shared,
    written: &WrittenDigests,
    ns: &str,
    n: usize,
) -> Result<(), kube::Error> {
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    for old in shared.stores.inventories.state() {
        // A part is known by its name (`inventory`, `inventory-<i>`; admission allows no
        // other), whatever its spec says: one someone else wrote goes as well.
        let index = inventory::part_of(&old.name_any());
        if old.namespace().as_deref() != Some(ns) || index.is_some_and(|i| i < n) {
            continue;
        }
        shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
        gone_is_done(api.delete(&old.name_any(), &DeleteParams::default()).await)?;
        written.forget(&(ns.to_string(), index.map_or(-1, |i| i as i32)));
    }
    Ok(())
}

#[cfg(test)]
#[path = "namespace_tests.rs"]
mod tests;
