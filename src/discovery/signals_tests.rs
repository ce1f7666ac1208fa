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
        updated: None,
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
        desired: None,
        overridden_min: None,
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
        updated: None,
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
    let cases: [(&[&str], bool, Vec<&str>); 7] = [
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
        // What a window's restore put back.
        (&["moonin-restore"], true, vec![]),
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

/// The instant the controller wakes the namespace at: the next fire plus the grace; none for
/// a suspended CronJob.
#[test]
fn a_missed_schedule_is_due_at_the_next_fire_plus_the_grace() {
    let c = nightly();
    assert_eq!(missed_at(&c), Some(ts("2026-03-11T02:05:00Z")));
    let suspended = CronJobView {
        suspend: true,
        ..nightly()
    };
    assert_eq!(missed_at(&suspended), None);
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
        ..Default::default()
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
