use std::sync::Arc;

use super::*;
use crate::api::discovery::{AutoscalingPolicy, CronJobRun};
use crate::discovery::view::CronJobView;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn snapshot() -> NamespaceSnapshot {
    let web = DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        uid: "u-web".into(),
        replicas: 2,
        ready: 2,
        available: 2,
        updated: 2,
        images: vec![("app".into(), "web:2".into())],
        ..Default::default()
    };
    let hpa = |name: &str, target: &str| HpaView {
        namespace: "shop".into(),
        name: name.into(),
        target: ("Deployment".into(), target.into()),
        min: Some(2),
        max: 5,
        scaled_object: None,
        desired: None,
        overridden_min: None,
    };
    NamespaceSnapshot {
        namespace: "shop".into(),
        deployments: vec![Arc::new(web)],
        hpas: vec![hpa("web", "web"), hpa("orphan", "gone")],
        cron_jobs: vec![CronJobView {
            namespace: "shop".into(),
            name: "nightly".into(),
            schedule: "0 3 * * *".into(),
            ..Default::default()
        }],
        jobs: vec![JobView {
            namespace: "shop".into(),
            name: "nightly-2".into(),
            cron_job: Some("nightly".into()),
            start: Some(ts("2026-03-01T03:00:00Z")),
            end: Some(ts("2026-03-01T03:01:00Z")),
            result: "Succeeded",
            ..Default::default()
        }],
        // The run of a Job Kubernetes has deleted since.
        published_runs: vec![CronJobEntry {
            name: "nightly".into(),
            schedule: "0 3 * * *".into(),
            suspend: false,
            runs: vec![CronJobRun {
                job: "nightly-1".into(),
                start: Some(Time(ts("2026-02-28T03:00:00Z"))),
                end: Some(Time(ts("2026-02-28T03:01:00Z"))),
                result: "Succeeded".into(),
            }],
            signals: vec![],
        }],
        published_signals: [("web".to_string(), vec!["Old".to_string()])].into(),
        now: ts("2026-03-01T04:00:00Z"),
        ..Default::default()
    }
}

#[test]
fn a_namespace_is_its_entries_and_the_signals_of_its_objects() {
    let plan = decide(&snapshot());
    let web = &plan.status.deployments[0];
    assert_eq!(
        (
            web.name.as_str(),
            web.autoscaler.as_deref(),
            web.health.as_str()
        ),
        ("web", Some("HPA/web 2-5"), inventory::health::HEALTHY)
    );
    let runs: Vec<&str> = plan.status.cron_jobs[0]
        .runs
        .iter()
        .map(|r| r.job.as_str())
        .collect();
    assert_eq!(runs, ["nightly-2", "nightly-1"], "runs outlive their Jobs");
    assert_eq!(plan.status.images, ["web:2"]);
    let signals: Vec<(String, Vec<String>, Option<Vec<String>>)> = plan
        .signals
        .iter()
        .map(|s| {
            (
                format!(
                    "{}/{}",
                    s.regarding.kind.as_deref().unwrap_or_default(),
                    s.regarding.name.as_deref().unwrap_or_default()
                ),
                s.signals.clone(),
                s.published.clone(),
            )
        })
        .collect();
    assert_eq!(
        signals,
        [
            (
                "Deployment/web".to_string(),
                vec![],
                Some(vec!["Old".to_string()])
            ),
            ("HorizontalPodAutoscaler/web".to_string(), vec![], None),
            (
                "HorizontalPodAutoscaler/orphan".to_string(),
                vec!["TargetNotFound: Deployment/gone".to_string()],
                None
            ),
            // The namespace itself (a group of all its ServiceAccounts bound to a
            // privileged role): none here.
            ("Namespace/shop".to_string(), vec![], None),
        ]
    );
}

fn object(name: &str, signals: &[&str], published: Option<&[&str]>) -> ObjectSignals {
    let strings = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    ObjectSignals {
        regarding: ObjectReference {
            kind: Some("Deployment".into()),
            namespace: Some("shop".into()),
            name: Some(name.into()),
            ..Default::default()
        },
        signals: strings(signals),
        published: published.map(strings),
    }
}

#[test]
fn a_signal_is_reported_when_it_appears_and_again_only_after_it_cleared() {
    let mut reported = ReportedSignals::default();
    // A restart: what the published inventory shows was reported already.
    assert_eq!(
        reported.appeared(&object("web", &["A", "B"], Some(&["A"]))),
        ["B"]
    );
    assert!(
        reported
            .appeared(&object("web", &["A", "B"], None))
            .is_empty()
    );
    assert!(reported.appeared(&object("web", &["B"], None)).is_empty());
    assert_eq!(reported.appeared(&object("web", &["A", "B"], None)), ["A"]);
    assert_eq!(reported.appeared(&object("api", &["A"], None)), ["A"]);
    // A count that changes is the same signal.
    assert_eq!(
        reported.appeared(&object("db", &["CrashLoopBackOff: 1 Pod"], None)),
        ["CrashLoopBackOff: 1 Pod"]
    );
    assert!(
        reported
            .appeared(&object("db", &["CrashLoopBackOff: 2 Pods"], None))
            .is_empty()
    );
}

#[test]
fn a_deleted_namespace_is_forgotten_by_what_reported_it() {
    let mut reported = ReportedSignals::default();
    assert_eq!(reported.appeared(&object("web", &["A"], None)), ["A"]);
    reported.forget_namespace("other");
    assert!(
        reported.appeared(&object("web", &["A"], None)).is_empty(),
        "another namespace's"
    );
    reported.forget_namespace("shop");
    // Recreated with the same object and signal: a new namespace, reported anew.
    assert_eq!(reported.appeared(&object("web", &["A"], None)), ["A"]);
}

#[test]
fn a_policy_violation_is_listed_on_the_deployment_and_reported_on_the_scaled_object() {
    let mut s = snapshot();
    s.hpas.clear();
    s.scaled_objects = vec![ScaledObjectView {
        namespace: "shop".into(),
        name: "web".into(),
        target: ("Deployment".into(), "web".into()),
        min: Some(0),
        max: Some(4),
        triggers: vec![("prometheus".into(), None)],
        set_fields: vec![],
        overridden_min: None,
    }];
    s.policy = Some(AutoscalingPolicy {
        allowed_trigger_types: vec!["cpu".into()],
        min_replica_count_at_least: Some(1),
        ..Default::default()
    });
    let expected = "AutoscalingPolicy: trigger prometheus is not allowed (allowed: cpu); \
                    minReplicaCount 0 is below 1";
    let plan = decide(&s);
    let web = &plan.status.deployments[0];
    assert!(
        web.signals.iter().any(|x| x == expected),
        "{:?}",
        web.signals
    );
    assert_eq!(
        web.health,
        inventory::health::HEALTHY,
        "a hazard, not a failure"
    );
    let reported = |kind: &str| -> Vec<String> {
        plan.signals
            .iter()
            .find(|o| o.regarding.kind.as_deref() == Some(kind))
            .map(|o| o.signals.clone())
            .unwrap_or_default()
    };
    assert_eq!(reported("ScaledObject"), [expected]);
    assert!(
        !reported("Deployment").iter().any(|x| x == expected),
        "one Event, on the ScaledObject"
    );

    // Without a policy, nothing.
    s.policy = None;
    let plan = decide(&s);
    assert!(
        !plan.status.deployments[0]
            .signals
            .iter()
            .any(|x| x.starts_with("AutoscalingPolicy"))
    );
}
