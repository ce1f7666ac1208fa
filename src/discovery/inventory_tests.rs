#[test]
fn a_part_is_known_by_its_name() {
    assert_eq!(part_of("inventory"), Some(0));
    assert_eq!(part_of("inventory-7"), Some(7));
    assert_eq!(part_of("inventory-x"), None);
    assert_eq!(part_of("inventoryx"), None);
    assert_eq!(part_of("other"), None);
}

use super::*;
use crate::api::discovery::{IngressEntry, NetworkPolicyEntry, RoleBindingEntry, ServiceEntry};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use proptest::prelude::*;

fn view() -> DeploymentView {
    DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        generation: 3,
        observed_generation: 3,
        replicas: 3,
        ready: 3,
        available: 3,
        updated: 3,
        images: vec![
            ("init".into(), "busybox:1.36".into()),
            ("app".into(), "shop/web:1.2".into()),
        ],
        revision: Some(7),
        helm_release: Some("shop".into()),
        ..Default::default()
    }
}

#[test]
fn a_deployment_entry_copies_the_view() {
    let e = deployment_entry(&view(), Some("HPA/web 2-10".into()), vec![], None);
    assert_eq!(
        e,
        DeploymentEntry {
            name: "web".into(),
            images: vec!["busybox:1.36".into(), "shop/web:1.2".into()],
            desired: 3,
            ready: 3,
            available: 3,
            revision: Some(7),
            autoscaler: Some("HPA/web 2-10".into()),
            helm_release: Some("shop".into()),
            services: vec![],
            isolation: vec![],
            health: "Healthy".into(),
            signals: vec![],
            baseline: None,
        }
    );
}

#[test]
fn health_from_signals_and_rollout() {
    let base = view();
    let with = |f: &dyn Fn(&mut DeploymentView)| {
        let mut d = base.clone();
        f(&mut d);
        d
    };
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: Vec<(DeploymentView, Vec<String>, &str)> = vec![
        (base.clone(), s(&[]), "Healthy"),
        (base.clone(), s(&["CrashLoopBackOff: 1 Pod"]), "Degraded"),
        (base.clone(), s(&["ProgressDeadlineExceeded"]), "Degraded"),
        (
            base.clone(),
            s(&["ReplicaFailure: FailedCreate", "SelectorOverlap: Job/x"]),
            "Degraded",
        ),
        // Hazards alone do not degrade.
        (
            base.clone(),
            s(&["SelectorOverlap: Job/x", "TwoAutoscalers: HPA/a, HPA/b"]),
            "Healthy",
        ),
        (with(&|d| d.observed_generation = 2), s(&[]), "Progressing"),
        (with(&|d| d.updated = 1), s(&[]), "Progressing"),
        (with(&|d| d.available = 2), s(&[]), "Progressing"),
        (
            with(&|d| d.available = 0),
            s(&["ImagePullBackOff: 3 Pods"]),
            "Degraded",
        ),
        // Ready below desired while available is not: availability is what counts.
        (with(&|d| d.ready = 2), s(&[]), "Healthy"),
        (
            with(&|d| {
                d.replicas = 0;
                d.updated = 0;
                d.available = 0;
                d.ready = 0;
            }),
            s(&[]),
            "Healthy",
        ),
    ];
    for (d, signals, want) in cases {
        let got = deployment_entry(&d, None, signals.clone(), None).health;
        assert_eq!(got, want, "{signals:?} {d:?}");
    }
}

#[test]
fn autoscaler_summaries() {
    let hpa = HpaView {
        name: "web".into(),
        target: ("Deployment".into(), "web".into()),
        min: Some(2),
        max: 10,
        ..Default::default()
    };
    assert_eq!(autoscaler_summary(&hpa), "HPA/web 2-10");
    let keda = HpaView {
        name: "keda-hpa-web".into(),
        min: None,
        max: 20,
        scaled_object: Some("web".into()),
        ..hpa.clone()
    };
    assert_eq!(autoscaler_summary(&keda), "ScaledObject/web 1-20");
    let so = ScaledObjectView {
        namespace: "shop".into(),
        name: "queue".into(),
        target: ("Deployment".into(), "worker".into()),
        min: None,
        max: Some(30),
        ..Default::default()
    };
    assert_eq!(scaled_object_summary(&so), "ScaledObject/queue 0-30");
}

fn entry(name: &str, images: &[&str], signals: &[&str]) -> DeploymentEntry {
    DeploymentEntry {
        name: name.into(),
        images: images.iter().map(|s| s.to_string()).collect(),
        health: "Healthy".into(),
        signals: signals.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn cron(name: &str, signals: &[&str]) -> CronJobEntry {
    CronJobEntry {
        name: name.into(),
        schedule: "0 2 * * *".into(),
        signals: signals.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn release(name: &str) -> HelmRelease {
    HelmRelease {
        name: name.into(),
        revision: 1,
        status: "deployed".into(),
        chart: name.into(),
        chart_version: "1.0.0".into(),
        ..Default::default()
    }
}

#[test]
fn build_sorts_collects_images_and_counts() {
    let status = build(
        "shop",
        vec![
            entry(
                "web",
                &["shop/web:1", "envoy:1.30"],
                &["CrashLoopBackOff: 1 Pod"],
            ),
            entry("api", &["shop/api:2", "envoy:1.30"], &[]),
        ],
        vec![
            cron("report", &["LastRunFailed: report-1", "MissedSchedule"]),
            cron("backup", &[]),
        ],
        vec![release("shop"), release("cache")],
    );
    let names = |v: &[DeploymentEntry]| v.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&status.deployments), ["api", "web"]);
    assert_eq!(
        status
            .cron_jobs
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["backup", "report"]
    );
    assert_eq!(
        status
            .helm_releases
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["cache", "shop"]
    );
    assert_eq!(status.images, ["envoy:1.30", "shop/api:2", "shop/web:1"]);
    assert_eq!(
        status.summary,
        Some(InventorySummary {
            deployments: 2,
            cron_jobs: 2,
            helm_releases: 2,
            error_signals: 3,
            ..Default::default()
        })
    );
    assert!(status.conditions.is_empty());
    assert_eq!(status.observed_generation, None);
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn job(name: &str, start: &str, end: Option<&str>, result: &'static str) -> JobView {
    JobView {
        namespace: "shop".into(),
        name: name.into(),
        cron_job: Some("nightly".into()),
        start: Some(ts(start)),
        end: end.map(ts),
        result,
        ..Default::default()
    }
}

fn day(n: u32) -> String {
    format!("2026-03-{n:02}T02:00:00Z")
}

fn recorded(name: &str, start: &str, result: &str) -> CronJobRun {
    CronJobRun {
        job: name.into(),
        start: Some(Time(ts(start))),
        end: None,
        result: result.into(),
    }
}

#[test]
fn merged_runs_keep_deleted_jobs_and_update_changed_ones() {
    let previous = vec![
        recorded("n-3", &day(3), "Running"),
        recorded("n-2", &day(2), "Failed"),
        recorded("n-1", &day(1), "Succeeded"),
    ];
    // n-1 and n-2 were deleted by the history limit; n-3 finished; n-4 is new.
    let j3 = job("n-3", &day(3), Some("2026-03-03T02:10:00Z"), "Succeeded");
    let j4 = job("n-4", &day(4), None, "Running");
    let runs = merge_runs(&previous, &[&j3, &j4], None);
    assert_eq!(
        runs,
        vec![
            recorded("n-4", &day(4), "Running"),
            CronJobRun {
                end: Some(Time(ts("2026-03-03T02:10:00Z"))),
                ..recorded("n-3", &day(3), "Succeeded")
            },
            recorded("n-2", &day(2), "Failed"),
            recorded("n-1", &day(1), "Succeeded"),
        ]
    );
    // Merging again with nothing new changes nothing.
    assert_eq!(merge_runs(&runs, &[&j3, &j4], None), runs);
}

/// A run whose Job was deleted before it was seen to end does not stay `Running` for good:
/// the CronJob's `lastSuccessfulTime` says it succeeded, or its result is `Unknown`.
#[test]
fn a_running_run_whose_job_is_gone_ends() {
    let previous = vec![
        recorded("n-3", &day(3), "Running"),
        recorded("n-2", &day(2), "Running"),
        recorded("n-1", &day(1), "Succeeded"),
    ];
    // n-2 succeeded at 02:05 on the 2nd (the last success); n-3's Job went without a trace.
    let done = ts("2026-03-02T02:05:00Z");
    let runs = merge_runs(&previous, &[], Some(done));
    assert_eq!(
        runs,
        vec![
            recorded("n-3", &day(3), "Unknown"),
            CronJobRun {
                end: Some(Time(done)),
                ..recorded("n-2", &day(2), "Succeeded")
            },
            recorded("n-1", &day(1), "Succeeded"),
        ]
    );
    // The newest run, gone after the last success: that success was its own.
    let later = ts("2026-03-03T02:07:00Z");
    let runs = merge_runs(&previous[..1], &[], Some(later));
    assert_eq!(
        (runs[0].result.as_str(), runs[0].end.clone()),
        ("Succeeded", Some(Time(later)))
    );
    // An `Unknown` run whose success is recorded later (the CronJob's status came after the
    // Job's deletion) is `Succeeded` then.
    let unknown = merge_runs(&previous[..1], &[], None);
    assert_eq!(unknown[0].result, "Unknown");
    assert_eq!(
        merge_runs(&unknown, &[], Some(later))[0].result,
        "Succeeded"
    );
    // Still running while its Job is there.
    let j3 = job("n-3", &day(3), None, "Running");
    assert_eq!(merge_runs(&previous, &[&j3], None)[0].result, "Running");
}

#[test]
fn merged_runs_are_capped_newest_first() {
    let previous: Vec<CronJobRun> = (1..=9)
        .map(|n| recorded(&format!("n-{n:02}"), &day(n), "Succeeded"))
        .collect();
    let jobs: Vec<JobView> = (10..=14)
        .map(|n| job(&format!("n-{n:02}"), &day(n), None, "Failed"))
        .collect();
    let refs: Vec<&JobView> = jobs.iter().collect();
    let runs = merge_runs(&previous, &refs, None);
    let names: Vec<&str> = runs.iter().map(|r| r.job.as_str()).collect();
    assert_eq!(
        names,
        [
            "n-14", "n-13", "n-12", "n-11", "n-10", "n-09", "n-08", "n-07", "n-06", "n-05"
        ]
    );
}

#[test]
fn a_job_not_started_yet_is_the_newest_run() {
    let previous = vec![recorded("n-2", &day(2), "Succeeded")];
    let pending = JobView {
        name: "n-3".into(),
        result: "Running",
        ..Default::default()
    };
    let runs = merge_runs(&previous, &[&pending], None);
    assert_eq!(runs[0].job, "n-3");
    assert_eq!(runs[0].start, None);
    assert_eq!(runs[1].job, "n-2");
}

fn bytes(s: &NamespaceInventoryStatus) -> usize {
    serde_json::to_vec(s).unwrap().len() + OBJECT_OVERHEAD
}

fn big_namespace(deployments: usize) -> NamespaceInventoryStatus {
    let entries = (0..deployments)
        .map(|i| {
            let mut e = entry(
                &format!("service-{i:05}"),
                &[
                    &format!("registry.example.com/team-{}/service-{i:05}:v1.2.3", i % 40),
                    "registry.example.com/platform/envoy-proxy:v1.30.2",
                    "registry.example.com/platform/log-shipper:v4.1.0",
                ],
                if i % 7 == 0 {
                    &["CrashLoopBackOff: 2 Pods", "SelectorOverlap: Job/migrate"]
                } else {
                    &[]
                },
            );
            e.autoscaler = Some(format!("HPA/service-{i:05} 2-10"));
            e.helm_release = Some(format!("team-{}", i % 40));
            e.revision = Some(i as i64);
            e
        })
        .collect();
    let crons = (0..200)
        .map(|i| cron(&format!("job-{i:03}"), &[]))
        .collect();
    let releases = (0..40).map(|i| release(&format!("team-{i}"))).collect();
    build("shop", entries, crons, releases)
}

#[test]
fn an_inventory_under_the_bound_is_one_part_equal_to_the_input() {
    let status = build(
        "shop",
        vec![entry("web", &["shop/web:1"], &["CrashLoopBackOff: 1 Pod"])],
        vec![cron("backup", &[])],
        vec![release("shop")],
    );
    assert_eq!(split(status.clone(), MAX_BYTES), vec![status]);
}

#[test]
fn a_large_namespace_splits_into_parts_under_the_bound() {
    let status = big_namespace(3000);
    assert!(
        bytes(&status) > MAX_BYTES,
        "the test needs an inventory over the bound"
    );
    let parts = split(status.clone(), MAX_BYTES);
    // About 1.3 MB of entries: three parts.
    assert_eq!(parts.len(), 3, "{} bytes", bytes(&status));
    for (i, p) in parts.iter().enumerate() {
        assert!(bytes(p) <= MAX_BYTES, "part {i}: {} bytes", bytes(p));
    }
    // Part 0 keeps the namespace-wide lists; the others hold entries only.
    assert_eq!(parts[0].images, status.images);
    assert_eq!(parts[0].helm_releases, status.helm_releases);
    for p in &parts[1..] {
        assert!(p.images.is_empty() && p.helm_releases.is_empty());
    }
    let deployments: Vec<DeploymentEntry> =
        parts.iter().flat_map(|p| p.deployments.clone()).collect();
    let crons: Vec<CronJobEntry> = parts.iter().flat_map(|p| p.cron_jobs.clone()).collect();
    assert_eq!(deployments, status.deployments);
    assert_eq!(crons, status.cron_jobs);
    // Each part counts what it holds, and the counts add up to the whole.
    for p in &parts {
        let s = p.summary.clone().unwrap();
        assert_eq!(s.deployments as usize, p.deployments.len());
        assert_eq!(s.cron_jobs as usize, p.cron_jobs.len());
        assert_eq!(s.helm_releases as usize, p.helm_releases.len());
    }
    let total = |f: fn(&InventorySummary) -> i32| {
        parts
            .iter()
            .map(|p| f(p.summary.as_ref().unwrap()))
            .sum::<i32>()
    };
    let whole = status.summary.clone().unwrap();
    assert_eq!(total(|s| s.deployments), whole.deployments);
    assert_eq!(total(|s| s.cron_jobs), whole.cron_jobs);
    assert_eq!(total(|s| s.helm_releases), whole.helm_releases);
    assert_eq!(total(|s| s.error_signals), whole.error_signals);
    // Deterministic.
    assert_eq!(split(status.clone(), MAX_BYTES), parts);
    assert_eq!(split(big_namespace(3000), MAX_BYTES), parts);
}

#[test]
fn an_entry_larger_than_the_bound_goes_alone() {
    let huge_signal = format!("SelectorOverlap: Pod/{}", "p".repeat(8 * 1024));
    let status = build(
        "shop",
        vec![
            entry("a", &["a:1"], &[]),
            entry("b", &["b:1"], &[&huge_signal]),
            entry("c", &["c:1"], &[]),
        ],
        vec![cron("d", &[])],
        vec![],
    );
    let parts = split(status.clone(), OBJECT_OVERHEAD + 2048);
    let names: Vec<Vec<&str>> = parts
        .iter()
        .map(|p| {
            let d = p.deployments.iter().map(|d| d.name.as_str());
            d.chain(p.cron_jobs.iter().map(|c| c.name.as_str()))
                .collect()
        })
        .collect();
    assert_eq!(names, vec![vec!["a"], vec!["b"], vec!["c", "d"]]);
    assert!(bytes(&parts[1]) > OBJECT_OVERHEAD + 2048);
    assert_eq!(parts[1].summary.as_ref().map(|s| s.error_signals), Some(1));
}

#[test]
fn namespace_lists_past_the_bound_keep_part_0_to_themselves() {
    let huge_image = "x".repeat(8 * 1024);
    let status = build(
        "shop",
        vec![
            entry("a", &["a:1"], &[]),
            entry("b", &[&huge_image], &[]),
            entry("c", &["c:1"], &[]),
        ],
        vec![],
        vec![],
    );
    // Part 0 holds the image list, which with `b`'s image passes the bound on its own:
    // it keeps no entry, and `b` is alone in its part.
    let parts = split(status.clone(), OBJECT_OVERHEAD + 2048);
    let names: Vec<Vec<&str>> = parts
        .iter()
        .map(|p| p.deployments.iter().map(|d| d.name.as_str()).collect())
        .collect();
    assert_eq!(names, vec![vec![], vec!["a"], vec!["b"], vec!["c"]]);
    assert_eq!(parts[0].images, status.images);
}

#[test]
fn connections_follow_the_workloads_into_the_parts() {
    let mut status = big_namespace(3000);
    let services: Vec<ServiceEntry> = status
        .deployments
        .iter()
        .map(|d| ServiceEntry {
            name: d.name.clone(),
            type_: "ClusterIP".into(),
            selector: Some(format!("app={}", d.name)),
            ports: vec!["http 80/TCP→8080".into()],
            deployments: vec![d.name.clone()],
            signals: vec![],
        })
        .collect();
    let ingresses: Vec<IngressEntry> = (0..300)
        .map(|i| IngressEntry {
            name: format!("ingress-{i:03}"),
            hosts: vec![format!("shop-{i}.example")],
            backends: vec![format!("Service/service-{:05}:80", i * 10)],
            signals: if i == 7 {
                vec!["BackendNotFound: Service/gone".into()]
            } else {
                vec![]
            },
            ..Default::default()
        })
        .collect();
    status = connect(
        status,
        Connections {
            services: services.clone(),
            ingresses: ingresses.clone(),
            network_policies: vec![NetworkPolicyEntry {
                name: "deny-all".into(),
                ..Default::default()
            }],
            role_bindings: vec![RoleBindingEntry {
                name: "RoleBinding/ci".into(),
                role: "ClusterRole/cluster-admin".into(),
                subjects: vec!["ServiceAccount/ci".into()],
                signals: vec!["PrivilegedServiceAccount: ServiceAccount/ci".into()],
            }],
        },
    );
    let parts = split(status.clone(), MAX_BYTES);
    assert!(parts.len() > 3, "{} parts", parts.len());
    for (i, p) in parts.iter().enumerate() {
        assert!(bytes(p) <= MAX_BYTES, "part {i}: {} bytes", bytes(p));
        let s = p.summary.clone().unwrap();
        assert_eq!(s.services as usize, p.services.len());
        assert_eq!(s.ingresses as usize, p.ingresses.len());
        assert_eq!(s.role_bindings as usize, p.role_bindings.len());
    }
    let all_services: Vec<ServiceEntry> = parts.iter().flat_map(|p| p.services.clone()).collect();
    let all_ingresses: Vec<IngressEntry> = parts.iter().flat_map(|p| p.ingresses.clone()).collect();
    assert_eq!(all_services, services);
    assert_eq!(all_ingresses, ingresses);
    assert_eq!(
        parts.iter().map(|p| p.role_bindings.len()).sum::<usize>(),
        1
    );
    let signals: i32 = parts
        .iter()
        .map(|p| p.summary.as_ref().unwrap().error_signals)
        .sum();
    assert_eq!(Some(signals), status.summary.map(|s| s.error_signals));
}

#[test]
fn split_copies_generation_and_conditions_to_every_part() {
    let mut status = big_namespace(3000);
    status.observed_generation = Some(4);
    status.conditions = vec![Condition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: "Inventoried".into(),
        message: "inventory complete".into(),
        observed_generation: Some(4),
        last_transition_time: Time(ts("2026-03-10T02:00:00Z")),
    }];
    let parts = split(status.clone(), MAX_BYTES);
    assert!(parts.len() > 1);
    for p in &parts {
        assert_eq!(p.observed_generation, Some(4));
        assert_eq!(p.conditions, status.conditions);
        assert!(bytes(p) <= MAX_BYTES);
    }
}

proptest! {
    #[test]
    fn split_never_loses_or_duplicates_an_entry(
        deployments in prop::collection::vec(("[a-z]{1,8}", 0usize..600, 0usize..3), 0..60),
        crons in prop::collection::vec(("[a-z]{1,8}", 0usize..3), 0..30),
        connections in prop::collection::vec(("[a-z]{1,8}", 0usize..400, 0usize..4), 0..40),
        images in 0usize..20,
        max_bytes in (OBJECT_OVERHEAD..OBJECT_OVERHEAD + 6000),
    ) {
        let deployments: Vec<DeploymentEntry> = deployments
            .into_iter()
            .map(|(name, pad, signals)| DeploymentEntry {
                name,
                images: vec!["i".repeat(pad)],
                signals: (0..signals).map(|s| format!("Unavailable: {s}")).collect(),
                ..Default::default()
            })
            .collect();
        let crons: Vec<CronJobEntry> = crons
            .into_iter()
            .map(|(name, signals)| CronJobEntry {
                name,
                signals: (0..signals).map(|s| format!("MissedSchedule{s}")).collect(),
                ..Default::default()
            })
            .collect();
        let mut c = Connections::default();
        for (name, pad, kind) in connections {
            let signals = vec![format!("ServiceSelectsNothing{}", "s".repeat(pad))];
            match kind {
                0 => c.services.push(ServiceEntry { name, signals, ..Default::default() }),
                1 => c.ingresses.push(IngressEntry { name, signals, ..Default::default() }),
                2 => c.network_policies.push(NetworkPolicyEntry {
                    name,
                    pod_selector: "p".repeat(pad),
                    ..Default::default()
                }),
                _ => c.role_bindings.push(RoleBindingEntry { name, signals, ..Default::default() }),
            }
        }
        let mut status = connect(build("shop", deployments, crons, vec![]), c);
        status.images.extend((0..images).map(|i| format!("extra-{i}")));
        let parts = split(status.clone(), max_bytes);
        prop_assert!(!parts.is_empty());
        let ds: Vec<DeploymentEntry> = parts.iter().flat_map(|p| p.deployments.clone()).collect();
        let cs: Vec<CronJobEntry> = parts.iter().flat_map(|p| p.cron_jobs.clone()).collect();
        prop_assert_eq!(&ds, &status.deployments);
        prop_assert_eq!(&cs, &status.cron_jobs);
        prop_assert_eq!(
            parts.iter().flat_map(|p| p.ingresses.clone()).collect::<Vec<_>>(),
            status.ingresses.clone()
        );
        prop_assert_eq!(
            parts.iter().flat_map(|p| p.network_policies.clone()).collect::<Vec<_>>(),
            status.network_policies.clone()
        );
        prop_assert_eq!(
            parts.iter().flat_map(|p| p.role_bindings.clone()).collect::<Vec<_>>(),
            status.role_bindings.clone()
        );
        prop_assert_eq!(
            parts.iter().flat_map(|p| p.services.clone()).collect::<Vec<_>>(),
            status.services.clone()
        );
        prop_assert_eq!(&parts[0].images, &status.images);
        let signals: i32 = parts.iter().map(|p| p.summary.as_ref().map_or(0, |s| s.error_signals)).sum();
        prop_assert_eq!(Some(signals), status.summary.as_ref().map(|s| s.error_signals));
        for p in &parts {
            let entries = p.deployments.len()
                + p.cron_jobs.len()
                + p.services.len()
                + p.ingresses.len()
                + p.network_policies.len()
                + p.role_bindings.len();
            // Past the bound only: an entry alone, or part 0 whose namespace-wide
            // lists alone pass it (then it holds no entry).
            let alone = entries == 1 && p.images.is_empty();
            let lists_only = entries == 0;
            prop_assert!(
                bytes(p) <= max_bytes || alone || lists_only,
                "{} > {}",
                bytes(p),
                max_bytes
            );
        }
        prop_assert_eq!(split(status, max_bytes), parts);
    }
}
