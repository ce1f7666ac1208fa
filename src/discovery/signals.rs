//! Error signals: what is wrong with a workload, or about to go wrong, as short stable
//! strings (`Reason` or `Reason: detail`) that the inventory lists and the controller turns
//! into Warning Events (the part before `": "` is the Event reason).
//!
//! Everything here is pure: the caller passes the projections and `now`. Details never carry
//! timestamps or messages, so a signal that stays open stays byte-identical and the
//! inventory is not rewritten on every reconcile.

use std::collections::BTreeSet;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::view::{Autoscaler, Cond, CronJobView, DeploymentView, HpaView, JobView, PodView};
use crate::api::discovery::CronJobRun;
use crate::api::field_manager;
use crate::cron::{Schedule, fires};

/// The reasons a signal starts with, each defined once.
pub mod reasons {
    /// Deployment condition `Progressing` with reason `ProgressDeadlineExceeded`.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// Deployment condition `ReplicaFailure=True`; the detail is the condition's reason.
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// Deployment condition `Available=False`; the detail is the condition's reason.
    pub const UNAVAILABLE: &str = "Unavailable";
    /// Pods of the Deployment waiting in `CrashLoopBackOff`.
    pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
    /// Pods of the Deployment waiting in `ImagePullBackOff`.
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    /// Pods of the Deployment waiting in `ErrImagePull`.
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// Pods of the Deployment waiting in `InvalidImageName`.
    pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
    /// A Job or a foreign Pod whose labels fall inside the Deployment's selector.
    pub const SELECTOR_OVERLAP: &str = "SelectorOverlap";
    /// More than one HPA or ScaledObject scales the Deployment.
    pub const TWO_AUTOSCALERS: &str = "TwoAutoscalers";
    /// `spec.replicas` is owned by a GitOps or kubectl field manager while an autoscaler
    /// scales the Deployment: the two fight over the replica count.
    pub const REPLICAS_OWNED_BY_GITOPS: &str = "ReplicasOwnedByGitOps";
    /// The newest finished run of a CronJob failed.
    pub const LAST_RUN_FAILED: &str = "LastRunFailed";
    /// A CronJob did not start a run it should have started.
    pub const MISSED_SCHEDULE: &str = "MissedSchedule";
    /// An autoscaler whose scale target does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// A Service whose selector matches no Deployment's Pod template and no Pod: it has no
    /// endpoints.
    pub const SERVICE_SELECTS_NOTHING: &str = "ServiceSelectsNothing";
    /// An Ingress backend names a Service that does not exist.
    pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";
    /// A ServiceAccount of the namespace is bound to `cluster-admin` or to a role with a
    /// wildcard rule (a hazard).
    pub const PRIVILEGED_SERVICE_ACCOUNT: &str = "PrivilegedServiceAccount";
    /// Every reason above: the values of the `signal` label of
    /// `moonin_fleet_workloads_with_signal` (any other is counted as `Other`).
    pub const ALL: [&str; 16] = [
        PROGRESS_DEADLINE_EXCEEDED,
        REPLICA_FAILURE,
        UNAVAILABLE,
        CRASH_LOOP_BACK_OFF,
        IMAGE_PULL_BACK_OFF,
        ERR_IMAGE_PULL,
        INVALID_IMAGE_NAME,
        SELECTOR_OVERLAP,
        TWO_AUTOSCALERS,
        REPLICAS_OWNED_BY_GITOPS,
        LAST_RUN_FAILED,
        MISSED_SCHEDULE,
        TARGET_NOT_FOUND,
        SERVICE_SELECTS_NOTHING,
        BACKEND_NOT_FOUND,
        PRIVILEGED_SERVICE_ACCOUNT,
    ];
}

/// Pod waiting reasons that are signals, in the order they are checked.
pub const POD_WAITING_REASONS: [&str; 4] = [
    reasons::CRASH_LOOP_BACK_OFF,
    reasons::IMAGE_PULL_BACK_OFF,
    reasons::ERR_IMAGE_PULL,
    reasons::INVALID_IMAGE_NAME,
];

/// Reasons of the failure kind: the workload is not working. The hazards (selector overlap,
/// autoscaler conflicts) describe a risk, not a failure, and do not degrade its health.
pub const FAILURE_REASONS: [&str; 7] = [
    reasons::PROGRESS_DEADLINE_EXCEEDED,
    reasons::REPLICA_FAILURE,
    reasons::UNAVAILABLE,
    reasons::CRASH_LOOP_BACK_OFF,
    reasons::IMAGE_PULL_BACK_OFF,
    reasons::ERR_IMAGE_PULL,
    reasons::INVALID_IMAGE_NAME,
];

/// The field manager of the HPA controller (it writes `spec.replicas` through `/scale`).
pub const HPA_CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// Field managers of KEDA start with this (`keda`, `keda-operator`, …).
pub const KEDA_MANAGER_PREFIX: &str = "keda";

/// How late a CronJob run may be before it counts as missed: the controller-manager
/// starts runs within seconds, but a busy or restarting one can lag.
pub const MISSED_SCHEDULE_GRACE: SignedDuration = SignedDuration::from_mins(5);

/// The reason of a signal: the part before `": "` (the whole signal when it has no detail).
pub fn reason_of(signal: &str) -> &str {
    signal.split_once(": ").map_or(signal, |(r, _)| r)
}

/// Whether a signal is of the failure kind ([`FAILURE_REASONS`]).
pub fn is_failure(signal: &str) -> bool {
    FAILURE_REASONS.contains(&reason_of(signal))
}

fn with_detail(reason: &str, detail: &str) -> String {
    if detail.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {detail}")
    }
}

/// The signals of one Deployment, sorted and de-duplicated.
///
/// - `pods`: Pods of the namespace (or any superset of the relevant ones). Waiting reasons
///   are counted over the Deployment's own Pods; the others are checked for selector
///   overlap.
/// - `jobs`: Jobs of the namespace, checked for selector overlap through their template
///   labels. A Pod owned by an overlapping Job is reported through its Job, once.
/// - `hpas`: HPAs of the namespace; those whose target is `Deployment/<name>` scale it.
/// - `scaled_objects`: `(name, target Deployment name)` of the namespace's ScaledObjects.
///   An HPA made by one of them counts as that ScaledObject, not as a second autoscaler.
/// - `replica_sets`: names of the Deployment's ReplicaSets. A Pod is the Deployment's own
///   when its controller owner is one of them.
pub fn deployment_signals(
    d: &DeploymentView,
    pods: &[&PodView],
    jobs: &[&JobView],
    hpas: &[&HpaView],
    scaled_objects: &[(String, String)],
    replica_sets: &[String],
) -> Vec<String> {
    let mut out = BTreeSet::new();
    condition_signals(d, &mut out);

    let owners: BTreeSet<String> = replica_sets
        .iter()
        .map(|rs| format!("ReplicaSet/{rs}"))
        .collect();
    let own = |p: &PodView| p.owner.as_ref().is_some_and(|o| owners.contains(o));
    for reason in POD_WAITING_REASONS {
        let count = pods
            .iter()
            .filter(|p| own(p) && p.waiting.iter().any(|w| w == reason))
            .count();
        if count > 0 {
            let noun = if count == 1 { "Pod" } else { "Pods" };
            out.insert(format!("{reason}: {count} {noun}"));
        }
    }

    let overlapping_jobs: BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.template_labels.selected_by(&d.selector))
        .map(|j| format!("Job/{}", j.name))
        .collect();
    for job in &overlapping_jobs {
        out.insert(with_detail(reasons::SELECTOR_OVERLAP, job));
    }
    for p in pods {
        let via_job = p
            .owner
            .as_ref()
            .is_some_and(|o| overlapping_jobs.contains(o));
        if !own(p) && !via_job && p.labels.selected_by(&d.selector) {
            out.insert(format!("{}: Pod/{}", reasons::SELECTOR_OVERLAP, p.name));
        }
    }

    let autoscalers = autoscalers_of(d, hpas, scaled_objects);
    if autoscalers.len() > 1 {
        let names: Vec<&str> = autoscalers.iter().map(String::as_str).collect();
        out.insert(with_detail(reasons::TWO_AUTOSCALERS, &names.join(", ")));
    }
    if !autoscalers.is_empty() {
        let fighting: BTreeSet<&str> = d
            .replicas_managers
            .iter()
            .map(String::as_str)
            .filter(|m| !scales_on_behalf_of_autoscaler(m))
            .collect();
        if !fighting.is_empty() {
            let names: Vec<&str> = fighting.into_iter().collect();
            out.insert(with_detail(
                reasons::REPLICAS_OWNED_BY_GITOPS,
                &names.join(", "),
            ));
        }
    }
    out.into_iter().collect()
}

/// Deployment condition types the signals and the rollout outcome read.
pub mod condition_types {
    /// `Progressing`: its reason says whether a rollout stalled or finished.
    pub const PROGRESSING: &str = "Progressing";
    /// `ReplicaFailure`.
    pub const REPLICA_FAILURE: &str = "ReplicaFailure";
    /// `Available`.
    pub const AVAILABLE: &str = "Available";
}

/// Whether a Deployment condition says its rollout failed: `Progressing` with reason
/// `ProgressDeadlineExceeded`, or `ReplicaFailure=True`.
pub fn fails_rollout(c: &Cond) -> bool {
    (c.type_ == condition_types::PROGRESSING
        && c.reason.as_deref() == Some(reasons::PROGRESS_DEADLINE_EXCEEDED))
        || (c.type_ == condition_types::REPLICA_FAILURE && c.status == "True")
}

fn condition_signals(d: &DeploymentView, out: &mut BTreeSet<String>) {
    for c in &d.conditions {
        let reason = c.reason.as_deref().unwrap_or_default();
        match c.type_.as_str() {
            condition_types::PROGRESSING if fails_rollout(c) => {
                out.insert(reasons::PROGRESS_DEADLINE_EXCEEDED.to_string());
            }
            condition_types::REPLICA_FAILURE if fails_rollout(c) => {
                out.insert(with_detail(reasons::REPLICA_FAILURE, reason));
            }
            condition_types::AVAILABLE if c.status == "False" => {
                out.insert(with_detail(reasons::UNAVAILABLE, reason));
            }
            _ => {}
        }
    }
}

/// The autoscalers of a Deployment, as `HPA/<name>` or `ScaledObject/<name>`, sorted.
fn autoscalers_of(
    d: &DeploymentView,
    hpas: &[&HpaView],
    scaled_objects: &[(String, String)],
) -> BTreeSet<String> {
    let known_so = |n: &str| scaled_objects.iter().any(|(so, _)| so == n);
    let mut out: BTreeSet<String> = scaled_objects
        .iter()
        .filter(|(_, target)| *target == d.name)
        .map(|(so, _)| format!("ScaledObject/{so}"))
        .collect();
    for h in hpas {
        if h.target.0 != "Deployment" || h.target.1 != d.name {
            continue;
        }
        match &h.scaled_object {
            // KEDA's HPA is the ScaledObject's machinery, not a second autoscaler.
            Some(so) if known_so(so) => out.insert(format!("ScaledObject/{so}")),
            _ => out.insert(format!("HPA/{}", h.name)),
        };
    }
    out
}

/// Field managers allowed to own `spec.replicas` of an autoscaled Deployment: the HPA
/// controller, KEDA, and Moonin's scaling controller (overriding or restoring). Anyone else (Argo CD, Flux, Helm,
/// kubectl) resets the replica count the autoscaler chose.
pub fn scales_on_behalf_of_autoscaler(manager: &str) -> bool {
    manager == HPA_CONTROLLER_MANAGER
        || manager.starts_with(KEDA_MANAGER_PREFIX)
        || field_manager::is_scaling(manager)
}

/// The signals of one CronJob, sorted and de-duplicated.
///
/// - `LastRunFailed: <job>` when the newest finished run failed. `runs` are newest first,
///   as [`super::inventory::merge_runs`] returns them; running runs are skipped.
/// - `MissedSchedule` when the CronJob is not suspended and its first fire after
///   `last_schedule` (else after its creation) is more than [`MISSED_SCHEDULE_GRACE`] in
///   the past: the controller-manager records every run it starts in `lastScheduleTime`,
///   so that fire was not run. Equivalently, more than one period plus the grace has
///   passed since the last scheduled run. Fires are computed in `time_zone` (UTC when
///   unset) with [`fires::next_fire`]. A schedule or zone Moonin cannot read yields no
///   signal rather than a false one (the API server validated both already).
pub fn cron_job_signals(c: &CronJobView, runs: &[CronJobRun], now: Timestamp) -> Vec<String> {
    let mut out = BTreeSet::new();
    if let Some(run) = runs.iter().find(|r| r.result != "Running")
        && run.result == "Failed"
    {
        out.insert(with_detail(reasons::LAST_RUN_FAILED, &run.job));
    }
    if missed_schedule(c, now) {
        out.insert(reasons::MISSED_SCHEDULE.to_string());
    }
    out.into_iter().collect()
}

fn missed_schedule(c: &CronJobView, now: Timestamp) -> bool {
    missed_at(c).is_some_and(|due| due < now)
}

/// When the CronJob's next fire counts as missed, if it runs at all: that fire (after its
/// last scheduled run, else its creation) plus [`MISSED_SCHEDULE_GRACE`]. A fire that does
/// not happen changes no object, so the controller marks the namespace when this passes.
pub fn missed_at(c: &CronJobView) -> Option<Timestamp> {
    if c.suspend {
        return None;
    }
    let since = c.last_schedule.or(c.created)?;
    let schedule = Schedule::parse(&c.schedule).ok()?;
    let tz = match c.time_zone.as_deref() {
        None => TimeZone::UTC,
        Some(name) => TimeZone::get(name).ok()?,
    };
    let fire = fires::next_fire(&schedule, &tz, since)?;
    fire.at.checked_add(MISSED_SCHEDULE_GRACE).ok()
}

/// Autoscalers whose target does not exist: `(name, "TargetNotFound: Deployment/<name>")`
/// for each HPA or ScaledObject that targets a Deployment absent from `deployments`
/// (matched by namespace and name), sorted by name. Autoscalers of other kinds of target are
/// not judged here. A KEDA HPA is reported under its own name; its ScaledObject points at
/// the same missing target and is reported under its own.
pub fn orphan_autoscaler_signals<A: Autoscaler>(
    autoscalers: &[&A],
    deployments: &[&DeploymentView],
) -> Vec<(String, String)> {
    let existing: BTreeSet<(&str, &str)> = deployments
        .iter()
        .map(|d| (d.namespace.as_str(), d.name.as_str()))
        .collect();
    let mut out: Vec<(String, String)> = autoscalers
        .iter()
        .filter(|a| a.target().0 == "Deployment")
        .filter(|a| !existing.contains(&(a.namespace(), a.target().1.as_str())))
        .map(|a| {
            (
                a.name().to_string(),
                format!("{}: Deployment/{}", reasons::TARGET_NOT_FOUND, a.target().1),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
#[path = "signals_tests.rs"]
mod tests;
