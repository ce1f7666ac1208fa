//! A namespace's inventory: entries built from the projections, CronJob runs remembered
//! past the Jobs' deletion, and the split of an inventory too large for one object.
//!
//! Everything here is pure: the controller passes the projections and the runs it recorded
//! earlier, and writes the parts this module returns.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use super::signals;
use super::view::{DeploymentView, HpaView, JobView, ScaledObjectView};
use crate::api::discovery::{
    CronJobEntry, CronJobRun, DeploymentEntry, HelmRelease, IngressEntry, InventorySummary,
    NamespaceInventoryStatus, NetworkPolicyEntry, RoleBindingEntry, ServiceEntry, WorkloadBaseline,
};

/// The health of a Deployment entry.
pub mod health {
    /// Rolled out, replicas available, no failure signal.
    pub const HEALTHY: &str = "Healthy";
    /// A rollout or a scale-up is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// At least one failure signal ([`crate::discovery::signals::is_failure`]).
    pub const DEGRADED: &str = "Degraded";
}

/// How many runs a CronJob entry keeps.
pub const MAX_RUNS: usize = 10;

/// The size bound of one `NamespaceInventory` object, serialized as JSON.
pub const MAX_BYTES: usize = 512 * 1024;

/// Room kept, within the bound, for what the status does not hold: `apiVersion`, `kind`,
/// `spec` (part numbers), metadata (name, namespace, uid, resourceVersion, generation,
/// creationTimestamp, the ownerReference to the ClusterDiscovery, labels) and its
/// managedFields — small, because the inventory's lists are atomic and so appear as one
/// `f:<list>` key each — plus the `Ready` and `Truncated` conditions the caller adds after
/// splitting. About 2 KiB in all; twice that is kept, which costs under 1% of the bound.
pub const OBJECT_OVERHEAD: usize = 4 * 1024;

/// The inventory of one namespace: entries sorted by name, the distinct images of all
/// Deployments, and the summary.
///
/// The summary's `errorSignals` is the total number of signals over Deployment and CronJob
/// entries (an entry with three signals counts three), so that the `ClusterDiscovery` total
/// is the plain sum over namespaces and over split parts. `observedGeneration` and
/// `conditions` are left for the caller.
///
/// `namespace` is the inventory's namespace. The status does not repeat it (the object's
/// metadata carries it), so nothing here reads it; it keeps the call self-describing.
pub fn build(
    _namespace: &str,
    mut deployments: Vec<DeploymentEntry>,
    mut cron_jobs: Vec<CronJobEntry>,
    mut helm_releases: Vec<HelmRelease>,
) -> NamespaceInventoryStatus {
    deployments.sort_by(|a, b| a.name.cmp(&b.name));
    cron_jobs.sort_by(|a, b| a.name.cmp(&b.name));
    helm_releases.sort_by(|a, b| a.name.cmp(&b.name));
    let images: BTreeSet<&String> = deployments.iter().flat_map(|d| &d.images).collect();
    let images = images.into_iter().cloned().collect();
    let mut status = NamespaceInventoryStatus {
        deployments,
        cron_jobs,
        helm_releases,
        images,
        ..Default::default()
    };
    status.summary = Some(summarize(&status));
    status
}

/// What connects a namespace's workloads and what they may do: its Services, Ingresses,
/// NetworkPolicies and RBAC bindings, as [`super::network`] and [`super::rbac`] list them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Connections {
    /// Services.
    pub services: Vec<ServiceEntry>,
    /// Ingresses.
    pub ingresses: Vec<IngressEntry>,
    /// NetworkPolicies.
    pub network_policies: Vec<NetworkPolicyEntry>,
    /// RoleBindings and ClusterRoleBindings.
    pub role_bindings: Vec<RoleBindingEntry>,
}

/// [`build`]'s inventory with `connections` added: Services, Ingresses and NetworkPolicies
/// sorted by name, the bindings in the order given; the summary counts them, and the
/// signals of Services and Ingresses (failures: traffic is not served) count in
/// `errorSignals`, the bindings' hazards do not.
pub fn connect(
    mut status: NamespaceInventoryStatus,
    connections: Connections,
) -> NamespaceInventoryStatus {
    let Connections {
        mut services,
        mut ingresses,
        mut network_policies,
        role_bindings,
    } = connections;
    services.sort_by(|a, b| a.name.cmp(&b.name));
    ingresses.sort_by(|a, b| a.name.cmp(&b.name));
    network_policies.sort_by(|a, b| a.name.cmp(&b.name));
    status.services = services;
    status.ingresses = ingresses;
    status.network_policies = network_policies;
    status.role_bindings = role_bindings;
    status.summary = Some(summarize(&status));
    status
}

/// Counts what a status holds.
fn summarize(s: &NamespaceInventoryStatus) -> InventorySummary {
    let signals = s.deployments.iter().map(|d| d.signals.len()).sum::<usize>()
        + s.cron_jobs.iter().map(|c| c.signals.len()).sum::<usize>()
        + s.services.iter().map(|e| e.signals.len()).sum::<usize>()
        + s.ingresses.iter().map(|e| e.signals.len()).sum::<usize>();
    InventorySummary {
        deployments: count(s.deployments.len()),
        cron_jobs: count(s.cron_jobs.len()),
        helm_releases: count(s.helm_releases.len()),
        services: count(s.services.len()),
        ingresses: count(s.ingresses.len()),
        network_policies: count(s.network_policies.len()),
        role_bindings: count(s.role_bindings.len()),
        error_signals: count(signals),
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The inventory entry of a Deployment.
///
/// `autoscaler` is [`autoscaler_summary`] of the autoscaler that scales it (if any);
/// `signals` come from [`signals::deployment_signals`]. `health` is `Degraded` when any
/// signal is of the failure kind (hazards alone do not degrade), else `Progressing` while
/// the controller has not observed the latest generation or updated or available replicas
/// are below the desired count, else `Healthy`. `baseline` is what its next revision is
/// measured from ([`super::baselines`]).
pub fn deployment_entry(
    d: &DeploymentView,
    autoscaler: Option<String>,
    signals: Vec<String>,
    baseline: Option<WorkloadBaseline>,
) -> DeploymentEntry {
    let health = if signals.iter().any(|s| signals::is_failure(s)) {
        health::DEGRADED
    } else if d.observed_generation < d.generation
        || d.updated < d.replicas
        || d.available < d.replicas
    {
        health::PROGRESSING
    } else {
        health::HEALTHY
    };
    DeploymentEntry {
        name: d.name.clone(),
        images: d.images.iter().map(|(_, image)| image.clone()).collect(),
        desired: d.replicas,
        ready: d.ready,
        available: d.available,
        revision: d.revision,
        autoscaler,
        helm_release: d.helm_release.clone(),
        services: Vec::new(),
        isolation: Vec::new(),
        health: health.to_string(),
        signals,
        baseline,
    }
}

/// One line for an autoscaler: `HPA/<name> <min>-<max>`, or `ScaledObject/<name> <min>-<max>`
/// for an HPA that KEDA made (the ScaledObject is what people edit). An unset minimum is
/// the HPA default, 1.
pub fn autoscaler_summary(hpa: &HpaView) -> String {
    let min = hpa.min.unwrap_or(1);
    match &hpa.scaled_object {
        Some(so) => format!("ScaledObject/{so} {min}-{}", hpa.max),
        None => format!("HPA/{} {min}-{}", hpa.name, hpa.max),
    }
}

/// One line for a ScaledObject: `ScaledObject/<name> <min>-<max>`, with KEDA's defaults
/// (0 and 100) for unset bounds.
pub fn scaled_object_summary(so: &ScaledObjectView) -> String {
    format!(
        "ScaledObject/{} {}-{}",
        so.name,
        so.min.unwrap_or(0),
        so.max.unwrap_or(100)
    )
}

/// The runs of a CronJob: the runs recorded earlier, updated from the Jobs that still exist
/// (a Job that finished since replaces its `Running` record), plus new Jobs; one run per
/// Job name; the newest [`MAX_RUNS`] kept, newest first.
///
/// Runs whose Jobs Kubernetes has deleted (history limits, TTL) are kept as recorded: that
/// is what makes the inventory's history longer than the cluster's. A run recorded
/// `Running` whose Job was deleted before it was seen to end (`ttlSecondsAfterFinished: 0`,
/// a history limit of 0, `concurrencyPolicy: Replace`, a leaderless moment) did end: it is
/// `Succeeded` at the CronJob's `lastSuccessfulTime` (`last_successful`) when that falls
/// after its start and before the next run's, else `Unknown`. Newest means the latest
/// start; a Job not started yet is newer than any started one; ties go by Job name,
/// descending (CronJob Job names end with the scheduled minute).
pub fn merge_runs(
    previous: &[CronJobRun],
    jobs: &[&JobView],
    last_successful: Option<Timestamp>,
) -> Vec<CronJobRun> {
    let mut by_job: BTreeMap<&str, CronJobRun> = previous
        .iter()
        .map(|r| (r.job.as_str(), r.clone()))
        .collect();
    for j in jobs {
        by_job.insert(
            &j.name,
            CronJobRun {
                job: j.name.clone(),
                start: j.start.map(Time),
                end: j.end.map(Time),
                result: j.result.to_string(),
            },
        );
    }
    let mut runs: Vec<CronJobRun> = by_job.into_values().collect();
    runs.sort_by(|a, b| {
        let key = |r: &CronJobRun| (r.start.is_none(), r.start.as_ref().map(|t| t.0));
        key(b).cmp(&key(a)).then_with(|| b.job.cmp(&a.job))
    });
    let mut next_start: Option<Timestamp> = None;
    for run in &mut runs {
        let start = run.start.as_ref().map(|t| t.0);
        let gone = !jobs.iter().any(|j| j.name == run.job);
        // `Unknown` is looked at again: the CronJob's `lastSuccessfulTime` may come after
        // the Job's deletion.
        if gone && (run.result == RUNNING || run.result == UNKNOWN) {
            let succeeded = last_successful.filter(|done| {
                start.is_some_and(|s| s <= *done) && next_start.is_none_or(|n| *done < n)
            });
            run.end = succeeded.map(Time);
            run.result = if succeeded.is_some() {
                "Succeeded"
            } else {
                UNKNOWN
            }
            .to_string();
        }
        next_start = start.or(next_start);
    }
    runs.truncate(MAX_RUNS);
    runs
}

/// The result of a run in progress.
const RUNNING: &str = "Running";
/// The result of a run whose Job was deleted before it was seen to end, with no sign that it
/// succeeded.
const UNKNOWN: &str = "Unknown";

/// Counts bytes written, to size JSON without keeping it.
#[derive(Default)]
struct ByteCount(usize);

impl io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The length of `v` as compact JSON. These types always serialize; were one not to, the
/// result is "too large", which only makes the split more careful.
fn json_len<T: Serialize>(v: &T) -> usize {
    let mut w = ByteCount::default();
    match serde_json::to_writer(&mut w, v) {
        Ok(()) => w.0,
        Err(_) => usize::MAX,
    }
}

/// `,"deployments":[]`, `,"cronJobs":[]`, …: what the lists of entries add to a part beyond
/// their entries.
const LIST_KEYS: usize = r#","deployments":[]"#.len()
    + r#","cronJobs":[]"#.len()
    + r#","services":[]"#.len()
    + r#","ingresses":[]"#.len()
    + r#","networkPolicies":[]"#.len()
    + r#","roleBindings":[]"#.len()
    + r#","replicaHistory":[]"#.len();

/// Splits an inventory whose object would pass `max_bytes` (the status as JSON plus
/// [`OBJECT_OVERHEAD`]) into parts that each fit.
///
/// An inventory that fits comes back unchanged, as the only part. Otherwise part 0 keeps
/// the images and Helm releases; then the Deployments, the CronJobs, the Services, the
/// Ingresses, the NetworkPolicies, the RBAC bindings and the replica histories, in the
/// order given (as [`build`]
/// and [`connect`] make it), fill the parts one after another, each part
/// closed when the next entry would not fit. Every part carries the input's
/// `observedGeneration` and `conditions`, and a summary counting what it holds. No entry is
/// dropped: an entry too large for the bound on its own goes alone in its part, which then
/// passes the bound (the API server's own limit, about 1.5 MiB, is far above it); likewise
/// part 0 passes it, holding no entry, when the image list and Helm releases alone do
/// (thousands of distinct images in one namespace). The
/// result depends only on the input. The caller names the parts `inventory`,
/// `inventory-1`, … and sets `Truncated`.
pub fn split(status: NamespaceInventoryStatus, max_bytes: usize) -> Vec<NamespaceInventoryStatus> {
    let budget = max_bytes.saturating_sub(OBJECT_OVERHEAD);
    if json_len(&status) <= budget {
        return vec![status];
    }
    let NamespaceInventoryStatus {
        observed_generation,
        summary: _,
        deployments,
        cron_jobs,
        helm_releases,
        services,
        ingresses,
        network_policies,
        role_bindings,
        replica_history,
        images,
        conditions,
    } = status;
    let empty = NamespaceInventoryStatus {
        observed_generation,
        conditions,
        // The widest summary, so that sizes measured with it bound the real one.
        summary: Some(InventorySummary {
            deployments: i32::MAX,
            cron_jobs: i32::MAX,
            helm_releases: i32::MAX,
            services: i32::MAX,
            ingresses: i32::MAX,
            network_policies: i32::MAX,
            role_bindings: i32::MAX,
            error_signals: i32::MAX,
        }),
        ..Default::default()
    };
    let first = NamespaceInventoryStatus {
        helm_releases,
        images,
        ..empty.clone()
    };
    let first_has_content = !first.images.is_empty() || !first.helm_releases.is_empty();
    let rest_size = json_len(&empty).saturating_add(LIST_KEYS);

    let mut parts = Vec::new();
    let mut size = json_len(&first).saturating_add(LIST_KEYS);
    let mut part = first;
    let mut part_has_content = first_has_content;
    let mut place = |part: &mut NamespaceInventoryStatus,
                     size: &mut usize,
                     has_content: &mut bool,
                     len: usize| {
        // Each entry adds itself and at most one comma.
        let len = len.saturating_add(1);
        if *has_content && size.saturating_add(len) > budget {
            let full = std::mem::replace(part, empty.clone());
            parts.push(full);
            *size = rest_size;
        }
        *size = size.saturating_add(len);
        *has_content = true;
    };
    for d in deployments {
        place(&mut part, &mut size, &mut part_has_content, json_len(&d));
        part.deployments.push(d);
    }
    for c in cron_jobs {
        place(&mut part, &mut size, &mut part_has_content, json_len(&c));
        part.cron_jobs.push(c);
    }
    for e in services {
        place(&mut part, &mut size, &mut part_has_content, json_len(&e));
        part.services.push(e);
    }
    for e in ingresses {
        place(&mut part, &mut size, &mut part_has_content, json_len(&e));
        part.ingresses.push(e);
    }
    for e in network_policies {
        place(&mut part, &mut size, &mut part_has_content, json_len(&e));
        part.network_policies.push(e);
    }
    for e in role_bindings {
        place(&mut part, &mut size, &mut part_has_content, json_len(&e));
        part.role_bindings.push(e);
    }
    for e in replica_history {
        place(&mut part, &mut size, &mut part_has_content, json_len(&e));
        part.replica_history.push(e);
    }
    parts.push(part);
    for p in &mut parts {
        p.summary = Some(summarize(p));
    }
    parts
}

/// The name of part `i` (from 0) of an inventory: `inventory`, `inventory-1`, …
pub fn part_name(i: usize) -> String {
    if i == 0 {
        "inventory".to_string()
    } else {
        format!("inventory-{i}")
    }
}

/// The part a NamespaceInventory's name stands for: `inventory` is 0, `inventory-<i>` is
/// `i`; `None` for any other name.
pub fn part_of(name: &str) -> Option<usize> {
    match name.strip_prefix("inventory") {
        Some("") => Some(0),
        Some(rest) => rest.strip_prefix('-')?.parse().ok(),
        None => None,
    }
}

#[cfg(test)]
#[path = "inventory_tests.rs"]
mod tests;
