//! The rebuild of one namespace's inventory: load its projections ([`load`], into a
//! [`NamespaceSnapshot`]), build the inventory and the signals of each object ([`decide`],
//! pure), and publish a Warning Event for each new signal ([`ReportedSignals`]); `parts.rs`
//! writes the inventory.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;

use super::{
    baselines, connections, helm_secrets,
    history::{self, Open},
    inventory, network, policy,
    shared::Shared,
    signals,
    snapshot::{NamespaceSnapshot, ObjectSignals},
    suspect,
    view::{DeploymentView, HpaView, JobView, PodView, ScaledObjectView},
};
use crate::api::discovery::{
    ClusterDiscovery, CronJobEntry, DeploymentEntry, NamespaceInventoryStatus,
};

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
        let runs = inventory::merge_runs(&runs_before, &own, c.last_successful);
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

#[cfg(test)]
#[path = "namespace_tests.rs"]
mod tests;
