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

use super::view::{Autoscaler, CronJobView, DeploymentView, HpaView, JobView, PodView};
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

fn condition_signals(d: &DeploymentView, out: &mut BTreeSet<String>) {
    for c in &d.conditions {
        let reason = c.reason.as_deref().unwrap_or_default();
        match c.type_.as_str() {
            "Progressing" if reason == reasons::PROGRESS_DEADLINE_EXCEEDED => {
                out.insert(reasons::PROGRESS_DEADLINE_EXCEEDED.to_string());
            }
            "ReplicaFailure" if c.status == "True" => {
                out.insert(with_detail(reasons::REPLICA_FAILURE, reason));
            }
            "Available" if c.status == "False" => {
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
/// controller, KEDA, and Moonin's scaling controller. Anyone else (Argo CD, Flux, Helm,
/// kubectl) resets the replica count the autoscaler chose.
fn scales_on_behalf_of_autoscaler(manager: &str) -> bool {
    manager == HPA_CONTROLLER_MANAGER
        || manager.starts_with(KEDA_MANAGER_PREFIX)
        || manager == field_manager::SCALING
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
    if c.suspend {
        return false;
    }
    let Some(since) = c.last_schedule.or(c.created) else {
        return false;
    };
    let Ok(schedule) = Schedule::parse(&c.schedule) else {
        return false;
    };
    let tz = match c.time_zone.as_deref() {
        None => TimeZone::UTC,
        Some(name) => match TimeZone::get(name) {
            Ok(tz) => tz,
            Err(_) => return false,
        },
    };
    fires::next_fire(&schedule, &tz, since).is_some_and(|fire| {
        fire.at
            .checked_add(MISSED_SCHEDULE_GRACE)
            .is_ok_and(|due| due < now)
    })
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
mod tests {
    use super::*;
    use crate::discovery::view::Cond;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web() -> DeploymentView {
        DeploymentView {
            namespace: "shop".into(),
            name: "web".into(),
            generation: 1,
            observed_generation: 1,
            replicas: 2,
            ready: 2,
            available: 2,
            updated: 2,
            selector: labels(&[("app", "web")]),
            ..Default::default()
        }
    }

    fn cond(type_: &str, status: &str, reason: &str) -> Cond {
        Cond {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some("changes every time".into()),
        }
    }

    fn pod(name: &str, owner: Option<&str>, app: &str, waiting: &[&str]) -> PodView {
        PodView {
            name: name.into(),
            labels: (&labels(&[("app", app), ("pod-template-hash", "abc")])).into(),
            owner: owner.map(str::to_string),
            waiting: waiting.iter().map(|w| w.to_string()).collect(),
        }
    }

    fn job(name: &str, app: &str) -> JobView {
        JobView {
            namespace: "shop".into(),
            name: name.into(),
            template_labels: (&labels(&[("app", app), ("role", "migrate")])).into(),
            result: "Running",
            ..Default::default()
        }
    }

    fn hpa(name: &str, target: &str, scaled_object: Option<&str>) -> HpaView {
        HpaView {
            namespace: "shop".into(),
            name: name.into(),
            target: ("Deployment".into(), target.into()),
            min: Some(2),
            max: 10,
            scaled_object: scaled_object.map(str::to_string),
        }
    }

    fn rs() -> Vec<String> {
        vec!["web-abc".into(), "web-old".into()]
    }

    fn signals_of(d: &DeploymentView) -> Vec<String> {
        deployment_signals(d, &[], &[], &[], &[], &rs())
    }

    #[test]
    fn a_healthy_deployment_has_no_signals() {
        let mut d = web();
        d.conditions = vec![
            cond("Progressing", "True", "NewReplicaSetAvailable"),
            cond("Available", "True", "MinimumReplicasAvailable"),
            cond("ReplicaFailure", "False", "FailedCreate"),
        ];
        let own = pod("web-abc-1", Some("ReplicaSet/web-abc"), "web", &[]);
        let hpa = hpa("web", "web", None);
        assert_eq!(
            deployment_signals(&d, &[&own], &[], &[&hpa], &[], &rs()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn condition_signals_name_their_reason() {
        let cases = [
            (
                cond("Progressing", "False", "ProgressDeadlineExceeded"),
                vec!["ProgressDeadlineExceeded"],
            ),
            (cond("Progressing", "True", "ReplicaSetUpdated"), vec![]),
            (
                cond("ReplicaFailure", "True", "FailedCreate"),
                vec!["ReplicaFailure: FailedCreate"],
            ),
            (cond("ReplicaFailure", "False", "FailedCreate"), vec![]),
            (
                cond("Available", "False", "MinimumReplicasUnavailable"),
                vec!["Unavailable: MinimumReplicasUnavailable"],
            ),
            (
                cond("Available", "True", "MinimumReplicasAvailable"),
                vec![],
            ),
            (cond("Available", "Unknown", "Whatever"), vec![]),
        ];
        for (c, want) in cases {
            let mut d = web();
            d.conditions = vec![c.clone()];
            assert_eq!(signals_of(&d), want, "{c:?}");
        }
    }

    #[test]
    fn a_condition_without_reason_still_signals() {
        let mut d = web();
        d.conditions = vec![Cond {
            type_: "Available".into(),
            status: "False".into(),
            reason: None,
            message: None,
        }];
        assert_eq!(signals_of(&d), vec!["Unavailable"]);
    }

    #[test]
    fn waiting_pods_of_the_deployment_are_counted_per_reason() {
        let d = web();
        let a = pod(
            "web-abc-1",
            Some("ReplicaSet/web-abc"),
            "web",
            &["CrashLoopBackOff"],
        );
        let b = pod(
            "web-old-2",
            Some("ReplicaSet/web-old"),
            "web",
            &["CrashLoopBackOff", "ErrImagePull"],
        );
        let c = pod(
            "web-abc-3",
            Some("ReplicaSet/web-abc"),
            "web",
            &["ImagePullBackOff"],
        );
        let e = pod(
            "web-abc-4",
            Some("ReplicaSet/web-abc"),
            "web",
            &["InvalidImageName"],
        );
        let fine = pod(
            "web-abc-5",
            Some("ReplicaSet/web-abc"),
            "web",
            &["ContainerCreating"],
        );
        // Another Deployment's crashing Pod is not ours (and its labels do not overlap).
        let other = pod(
            "api-x-1",
            Some("ReplicaSet/api-x"),
            "api",
            &["CrashLoopBackOff"],
        );
        assert_eq!(
            deployment_signals(&d, &[&a, &b, &c, &e, &fine, &other], &[], &[], &[], &rs()),
            vec![
                "CrashLoopBackOff: 2 Pods",
                "ErrImagePull: 1 Pod",
                "ImagePullBackOff: 1 Pod",
                "InvalidImageName: 1 Pod",
            ]
        );
    }

    #[test]
    fn selector_overlap_with_a_job_and_a_bare_pod_not_the_own_pods() {
        let d = web();
        let own = pod("web-abc-1", Some("ReplicaSet/web-abc"), "web", &[]);
        let bare = pod("debug", None, "web", &[]);
        let migrate = job("migrate", "web");
        let migrate_pod = pod("migrate-xyz", Some("Job/migrate"), "web", &[]);
        let unrelated_job = job("report", "reports");
        let unrelated_pod = pod("report-1", Some("Job/report"), "reports", &[]);
        assert_eq!(
            deployment_signals(
                &d,
                &[&own, &bare, &migrate_pod, &unrelated_pod],
                &[&migrate, &unrelated_job],
                &[],
                &[],
                &rs()
            ),
            vec!["SelectorOverlap: Job/migrate", "SelectorOverlap: Pod/debug"]
        );
    }

    #[test]
    fn selector_overlap_needs_every_selector_label() {
        let mut d = web();
        d.selector = labels(&[("app", "web"), ("tier", "front")]);
        let partial = pod("debug", None, "web", &[]);
        assert_eq!(
            deployment_signals(&d, &[&partial], &[], &[], &[], &rs()),
            Vec::<String>::new()
        );
        let mut full = partial.clone();
        full.labels = (&labels(&[
            ("app", "web"),
            ("pod-template-hash", "abc"),
            ("tier", "front"),
        ]))
            .into();
        assert_eq!(
            deployment_signals(&d, &[&full], &[], &[], &[], &rs()),
            vec!["SelectorOverlap: Pod/debug"]
        );
        let mut wrong = full.clone();
        wrong.labels = (&labels(&[
            ("app", "web"),
            ("pod-template-hash", "abc"),
            ("tier", "back"),
        ]))
            .into();
        assert_eq!(
            deployment_signals(&d, &[&wrong], &[], &[], &[], &rs()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_empty_selector_overlaps_nothing() {
        let mut d = web();
        d.selector.clear();
        let bare = pod("debug", None, "web", &[]);
        let migrate = job("migrate", "web");
        assert_eq!(
            deployment_signals(&d, &[&bare], &[&migrate], &[], &[], &rs()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_pod_of_another_replica_set_inside_the_selector_overlaps() {
        let d = web();
        let stranger = pod(
            "canary-1",
            Some("ReplicaSet/canary-1a"),
            "web",
            &["CrashLoopBackOff"],
        );
        // Its waiting reason is not ours to count; its labels are our hazard.
        assert_eq!(
            deployment_signals(&d, &[&stranger], &[], &[], &[], &rs()),
            vec!["SelectorOverlap: Pod/canary-1"]
        );
    }

    #[test]
    fn two_autoscalers_are_named() {
        let d = web();
        let a = hpa("web", "web", None);
        let b = hpa("web-extra", "web", None);
        let elsewhere = hpa("api", "api", None);
        assert_eq!(
            deployment_signals(&d, &[], &[], &[&a, &b, &elsewhere], &[], &rs()),
            vec!["TwoAutoscalers: HPA/web, HPA/web-extra"]
        );
        assert_eq!(
            deployment_signals(&d, &[], &[], &[&a, &elsewhere], &[], &rs()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_keda_hpa_counts_once_with_its_scaled_object() {
        let d = web();
        let keda = hpa("keda-hpa-web", "web", Some("web"));
        let so = vec![("web".to_string(), "web".to_string())];
        assert_eq!(
            deployment_signals(&d, &[], &[], &[&keda], &so, &rs()),
            Vec::<String>::new()
        );
        // Without its HPA yet, the ScaledObject alone is one autoscaler.
        assert_eq!(
            deployment_signals(&d, &[], &[], &[], &so, &rs()),
            Vec::<String>::new()
        );
        let plain = hpa("web", "web", None);
        assert_eq!(
            deployment_signals(&d, &[], &[], &[&keda, &plain], &so, &rs()),
            vec!["TwoAutoscalers: HPA/web, ScaledObject/web"]
        );
        // An HPA owned by a ScaledObject that is not listed counts as an HPA.
        let foreign = hpa("keda-hpa-gone", "web", Some("gone"));
        assert_eq!(
            deployment_signals(&d, &[], &[], &[&foreign], &so, &rs()),
            vec!["TwoAutoscalers: HPA/keda-hpa-gone, ScaledObject/web"]
        );
    }

    #[test]
    fn gitops_owning_replicas_of_an_autoscaled_deployment() {
        let a = hpa("web", "web", None);
        let cases: [(&[&str], bool, Vec<&str>); 6] = [
            (
                &["argocd-controller"],
                true,
                vec!["ReplicasOwnedByGitOps: argocd-controller"],
            ),
            (
                &["kube-controller-manager", "kubectl", "kustomize-controller"],
                true,
                vec!["ReplicasOwnedByGitOps: kubectl, kustomize-controller"],
            ),
            (
                &["kube-controller-manager", "keda-operator", "moonin-scaling"],
                true,
                vec![],
            ),
            // No autoscaler: whoever owns the replicas is not fighting anyone.
            (&["argocd-controller"], false, vec![]),
            (&["helm"], true, vec!["ReplicasOwnedByGitOps: helm"]),
            (&[], true, vec![]),
        ];
        for (managers, autoscaled, want) in cases {
            let mut d = web();
            d.replicas_managers = managers.iter().map(|m| m.to_string()).collect();
            let hpas: Vec<&HpaView> = if autoscaled { vec![&a] } else { vec![] };
            assert_eq!(
                deployment_signals(&d, &[], &[], &hpas, &[], &rs()),
                want,
                "{managers:?}"
            );
        }
        // A ScaledObject is an autoscaler too.
        let mut d = web();
        d.replicas_managers = vec!["kubectl-client-side-apply".into()];
        let so = vec![("web".to_string(), "web".to_string())];
        assert_eq!(
            deployment_signals(&d, &[], &[], &[], &so, &rs()),
            vec!["ReplicasOwnedByGitOps: kubectl-client-side-apply"]
        );
    }

    #[test]
    fn signals_are_sorted_and_unique() {
        let mut d = web();
        d.conditions = vec![
            cond("Available", "False", "MinimumReplicasUnavailable"),
            cond("Available", "False", "MinimumReplicasUnavailable"),
            cond("Progressing", "False", "ProgressDeadlineExceeded"),
        ];
        let crash = pod(
            "web-abc-1",
            Some("ReplicaSet/web-abc"),
            "web",
            &["CrashLoopBackOff"],
        );
        let migrate = job("migrate", "web");
        let got = deployment_signals(&d, &[&crash], &[&migrate, &migrate], &[], &[], &rs());
        assert_eq!(
            got,
            vec![
                "CrashLoopBackOff: 1 Pod",
                "ProgressDeadlineExceeded",
                "SelectorOverlap: Job/migrate",
                "Unavailable: MinimumReplicasUnavailable",
            ]
        );
    }

    #[test]
    fn failure_kind_and_reason() {
        assert!(is_failure("CrashLoopBackOff: 2 Pods"));
        assert!(is_failure("ProgressDeadlineExceeded"));
        assert!(is_failure("Unavailable: MinimumReplicasUnavailable"));
        assert!(!is_failure("SelectorOverlap: Job/migrate"));
        assert!(!is_failure("TwoAutoscalers: HPA/a, HPA/b"));
        assert!(!is_failure("ReplicasOwnedByGitOps: helm"));
        assert_eq!(reason_of("TwoAutoscalers: HPA/a, HPA/b"), "TwoAutoscalers");
        assert_eq!(reason_of("MissedSchedule"), "MissedSchedule");
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn nightly() -> CronJobView {
        CronJobView {
            namespace: "shop".into(),
            name: "nightly".into(),
            schedule: "0 2 * * *".into(),
            created: Some(ts("2026-01-01T00:00:00Z")),
            last_schedule: Some(ts("2026-03-10T02:00:00Z")),
            ..Default::default()
        }
    }

    fn run(job: &str, result: &str) -> CronJobRun {
        CronJobRun {
            job: job.into(),
            start: Some(Time(ts("2026-03-10T02:00:00Z"))),
            end: None,
            result: result.into(),
        }
    }

    #[test]
    fn last_run_failed_looks_at_the_newest_finished_run() {
        let now = ts("2026-03-10T03:00:00Z");
        let c = nightly();
        let cases: [(Vec<CronJobRun>, Vec<&str>); 5] = [
            (
                vec![run("n-3", "Failed"), run("n-2", "Succeeded")],
                vec!["LastRunFailed: n-3"],
            ),
            (vec![run("n-3", "Succeeded"), run("n-2", "Failed")], vec![]),
            (
                vec![run("n-4", "Running"), run("n-3", "Failed")],
                vec!["LastRunFailed: n-3"],
            ),
            (vec![run("n-4", "Running")], vec![]),
            (vec![], vec![]),
        ];
        for (runs, want) in cases {
            assert_eq!(cron_job_signals(&c, &runs, now), want, "{runs:?}");
        }
    }

    #[test]
    fn missed_schedule_after_one_period_and_the_grace() {
        let c = nightly();
        let cases = [
            // The next fire (03-11 02:00) has not come yet.
            ("2026-03-10T12:00:00Z", false),
            // It came, but the grace has not passed.
            ("2026-03-11T02:04:00Z", false),
            ("2026-03-11T02:05:00Z", false),
            ("2026-03-11T02:06:00Z", true),
            ("2026-03-15T00:00:00Z", true),
        ];
        for (now, want) in cases {
            let got = cron_job_signals(&c, &[], ts(now));
            assert_eq!(got == vec!["MissedSchedule"], want, "{now}: {got:?}");
        }
    }

    #[test]
    fn missed_schedule_counts_from_creation_when_never_scheduled() {
        let mut c = nightly();
        c.last_schedule = None;
        c.created = Some(ts("2026-03-10T10:00:00Z"));
        assert!(cron_job_signals(&c, &[], ts("2026-03-11T01:00:00Z")).is_empty());
        assert_eq!(
            cron_job_signals(&c, &[], ts("2026-03-11T03:00:00Z")),
            vec!["MissedSchedule"]
        );
        c.created = None;
        assert!(cron_job_signals(&c, &[], ts("2026-03-11T03:00:00Z")).is_empty());
    }

    #[test]
    fn a_suspended_cron_job_misses_nothing() {
        let mut c = nightly();
        c.suspend = true;
        assert!(cron_job_signals(&c, &[], ts("2026-03-15T00:00:00Z")).is_empty());
    }

    #[test]
    fn missed_schedule_reads_the_time_zone() {
        // 02:00 in Tokyo is 17:00 UTC the day before.
        let mut c = nightly();
        c.time_zone = Some("Asia/Tokyo".into());
        c.last_schedule = Some(ts("2026-03-09T17:00:00Z"));
        assert!(cron_job_signals(&c, &[], ts("2026-03-10T17:04:00Z")).is_empty());
        assert_eq!(
            cron_job_signals(&c, &[], ts("2026-03-10T17:06:00Z")),
            vec!["MissedSchedule"]
        );
        // In UTC, the same last schedule would not be due until 03-10 02:00 + grace, long
        // passed at 03-10 17:04.
        c.time_zone = None;
        assert_eq!(
            cron_job_signals(&c, &[], ts("2026-03-10T17:04:00Z")),
            vec!["MissedSchedule"]
        );
    }

    #[test]
    fn an_unreadable_schedule_or_zone_raises_no_signal() {
        let mut c = nightly();
        c.schedule = "not a schedule".into();
        assert!(cron_job_signals(&c, &[], ts("2026-03-15T00:00:00Z")).is_empty());
        let mut c = nightly();
        c.time_zone = Some("Mars/Olympus_Mons".into());
        assert!(cron_job_signals(&c, &[], ts("2026-03-15T00:00:00Z")).is_empty());
    }

    #[test]
    fn frequent_schedules_use_their_own_period() {
        let mut c = nightly();
        c.schedule = "*/15 * * * *".into();
        c.last_schedule = Some(ts("2026-03-10T02:00:00Z"));
        assert!(cron_job_signals(&c, &[], ts("2026-03-10T02:19:00Z")).is_empty());
        assert_eq!(
            cron_job_signals(&c, &[], ts("2026-03-10T02:21:00Z")),
            vec!["MissedSchedule"]
        );
    }

    #[test]
    fn orphan_autoscalers_name_the_missing_target() {
        let d = web();
        let ok = hpa("web", "web", None);
        let orphan = hpa("gone", "checkout", None);
        let keda = hpa("keda-hpa-old", "old", Some("old"));
        let mut sts = hpa("db", "db", None);
        sts.target.0 = "StatefulSet".into();
        let mut other_ns = hpa("web", "web", None);
        other_ns.namespace = "staging".into();
        assert_eq!(
            orphan_autoscaler_signals(&[&ok, &orphan, &keda, &sts, &other_ns], &[&d]),
            vec![
                (
                    "gone".to_string(),
                    "TargetNotFound: Deployment/checkout".to_string()
                ),
                (
                    "keda-hpa-old".to_string(),
                    "TargetNotFound: Deployment/old".to_string()
                ),
                (
                    "web".to_string(),
                    "TargetNotFound: Deployment/web".to_string()
                ),
            ]
        );
        assert!(orphan_autoscaler_signals(&[&ok], &[&d]).is_empty());
    }

    #[test]
    fn orphan_scaled_objects_name_the_missing_target() {
        let d = web();
        let so = |name: &str, kind: &str, target: &str| crate::discovery::view::ScaledObjectView {
            namespace: "shop".into(),
            name: name.into(),
            target: (kind.into(), target.into()),
            min: None,
            max: None,
        };
        let (ok, gone, sts) = (
            so("web", "Deployment", "web"),
            so("queue", "Deployment", "worker"),
            so("db", "StatefulSet", "db"),
        );
        assert_eq!(
            orphan_autoscaler_signals(&[&ok, &gone, &sts], &[&d]),
            vec![(
                "queue".to_string(),
                "TargetNotFound: Deployment/worker".to_string()
            )]
        );
    }
}
