//! Table tests of the fleet views over hand-built clusters: two that answer, one that did
//! not, one without Moonin.

use jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::super::{Cluster, Objects, render_json, render_table};
use super::*;

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

fn now() -> Timestamp {
    "2026-12-03T10:00:00Z".parse().unwrap()
}

fn inventory(
    ns: &str,
    deployments: Value,
    cron_jobs: Value,
) -> crate::api::discovery::NamespaceInventory {
    obj(json!({
        "apiVersion": "moonin.io/v1alpha1", "kind": "NamespaceInventory",
        "metadata": {"name": "inventory", "namespace": ns},
        "spec": {},
        "status": {"deployments": deployments, "cronJobs": cron_jobs},
    }))
}

fn deployment(name: &str, images: &[&str], signals: &[&str]) -> Value {
    json!({"name": name, "images": images, "desired": 1, "ready": 1, "available": 1,
           "health": if signals.is_empty() { "Healthy" } else { "Degraded" }, "signals": signals})
}

/// `a` and `b` answer; `c` did not; `d` has no Moonin.
fn fleet(a: Objects, b: Objects) -> Vec<Cluster> {
    vec![
        Cluster {
            context: "a".into(),
            objects: Ok(a),
        },
        Cluster {
            context: "b".into(),
            objects: Ok(b),
        },
        Cluster {
            context: "c".into(),
            objects: Err("no answer within 10s".into()),
        },
        Cluster {
            context: "d".into(),
            objects: Err(format!(
                "{}: the API server serves no sandboxenvs.moonin.io",
                super::super::NO_MOONIN
            )),
        },
    ]
}

fn fields(r: &Report, field: &str) -> Vec<String> {
    r.items
        .iter()
        .map(|i| i[field].as_str().unwrap_or("-").to_string())
        .collect()
}

#[test]
fn images_say_where_each_runs_in_every_cluster_and_the_silent_ones_say_why() {
    let a = Objects {
        inventories: vec![inventory(
            "shop",
            json!([
                deployment("payments", &["payments:2.3.1", "envoy:1.30"], &[]),
                deployment("refunds", &["payments:2.3.1"], &[])
            ]),
            json!([]),
        )],
        ..Objects::default()
    };
    let b = Objects {
        inventories: vec![inventory(
            "shop",
            json!([deployment("payments", &["payments:2.4.0"], &[])]),
            json!([]),
        )],
        ..Objects::default()
    };
    let clusters = fleet(a, b);
    let r = images(&clusters, None);
    assert_eq!(
        fields(&r, "image"),
        ["envoy:1.30", "payments:2.3.1", "payments:2.4.0"]
    );
    assert_eq!(fields(&r, "cluster"), ["a", "a", "b"]);
    assert_eq!(r.items[1]["deployments"], json!(["payments", "refunds"]));
    let states: Vec<(&str, &str)> = r
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("a", "ok"),
            ("b", "ok"),
            ("c", "unreachable"),
            ("d", "no Moonin")
        ]
    );

    // "Where does payments:2.3.1 still run?"
    let only = images(&clusters, Some("payments:2.3.1"));
    assert_eq!(only.items.len(), 1);
    let table = render_table(&only);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "IMAGE            CLUSTER   NAMESPACE   DEPLOYMENTS"
    );
    assert_eq!(
        lines[1],
        "payments:2.3.1   a         shop        payments,refunds"
    );
    // The clusters that did not answer are rows of their own, under CLUSTER.
    assert_eq!(
        lines[2],
        "                 c         unreachable: no answer within 10s"
    );
    assert!(
        lines[3].starts_with("                 d         no Moonin: the API server serves no"),
        "{}",
        lines[3]
    );
    let parsed: Value = serde_json::from_str(&render_json(&only).unwrap()).unwrap();
    assert_eq!(
        parsed["clusters"][2],
        json!({"cluster": "c", "state": "unreachable", "error": "no answer within 10s"})
    );
    assert_eq!(parsed["items"][0]["namespace"], "shop");
}

#[test]
fn signals_list_the_workloads_with_error_signals_only() {
    let a = Objects {
        inventories: vec![inventory(
            "shop",
            json!([
                deployment("payments", &["p:1"], &["CrashLoopBackOff"]),
                deployment("web", &["w:1"], &[])
            ]),
            json!([{"name": "nightly", "schedule": "0 3 * * *", "signals": ["JobFailed"]},
                   {"name": "hourly", "schedule": "0 * * * *"}]),
        )],
        ..Objects::default()
    };
    let r = signals(&fleet(a, Objects::default()));
    assert_eq!(fields(&r, "name"), ["payments", "nightly"]);
    assert_eq!(fields(&r, "kind"), ["Deployment", "CronJob"]);
    assert_eq!(r.items[0]["signals"], json!(["CrashLoopBackOff"]));
}

#[test]
fn clusters_show_metadata_and_totals_or_that_nothing_inventories_them() {
    let a = Objects {
        discoveries: vec![obj(json!({
            "apiVersion": "moonin.io/v1alpha1", "kind": "ClusterDiscovery",
            "metadata": {"name": "cluster"}, "spec": {},
            "status": {
                "cluster": {"provider": {"value": "aws", "source": "node providerID"},
                            "region": {"value": "eu-west-1", "source": "node label"},
                            "kubernetesVersion": {"value": "v1.36.3", "source": "API server"}},
                "nodeGroups": [{"zone": "a", "instanceType": "m5", "runtime": "containerd", "count": 3, "ready": 2}],
                "totals": {"namespaces": 4, "deployments": 9, "images": 7, "cronJobs": 1, "errorSignals": 2},
                "conditions": [{"type": "Ready", "status": "True", "reason": "Inventoried", "message": "",
                                "lastTransitionTime": "2026-12-03T09:00:00Z"}],
            },
        }))],
        ..Objects::default()
    };
    let r = clusters(&fleet(a, Objects::default()));
    assert_eq!(r.items.len(), 2);
    assert_eq!(r.items[0]["provider"], "aws");
    assert_eq!(r.items[0]["nodes"], "2/3");
    assert_eq!(r.items[0]["errorSignals"], 2);
    assert_eq!(r.items[0]["ready"], "True Inventoried");
    assert_eq!(r.items[1]["cluster"], "b");
    assert!(
        r.items[1]["ready"]
            .as_str()
            .unwrap()
            .starts_with("no ClusterDiscovery")
    );
}

fn revision(ns: &str, name: &str, at: &str, by: &str) -> crate::api::discovery::WorkloadRevision {
    obj(json!({
        "apiVersion": "moonin.io/v1alpha1", "kind": "WorkloadRevision",
        "metadata": {"name": format!("{name}-{at}"), "namespace": ns},
        "spec": {"workload": {"kind": "Deployment", "name": name}, "revision": 2,
                 "observedAt": at, "summary": "image app: a → b", "changedBy": by},
    }))
}

#[test]
fn changes_since_a_time_newest_first_across_clusters() {
    let a = Objects {
        revisions: vec![
            revision("shop", "payments", "2026-12-03T09:10:00Z", "argocd"),
            revision("shop", "web", "2026-12-03T08:00:00Z", "kubectl"),
        ],
        ..Objects::default()
    };
    let b = Objects {
        revisions: vec![revision("shop", "payments", "2026-12-03T09:40:00Z", "flux")],
        ..Objects::default()
    };
    let r = changes(&fleet(a, b), now() - jiff::SignedDuration::from_hours(1));
    assert_eq!(fields(&r, "cluster"), ["b", "a"]);
    assert_eq!(fields(&r, "changedBy"), ["flux", "argocd"]);
    assert_eq!(
        fields(&r, "workload"),
        ["Deployment/payments", "Deployment/payments"]
    );
}

fn template(ns: &str, name: &str, window: Option<Value>) -> crate::api::scaling::ScalingTemplate {
    obj(json!({
        "apiVersion": "moonin.io/v1alpha1", "kind": "ScalingTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedule": "0 8 * * 1-5", "duration": "10h",
                 "actions": [{"name": "web", "target": {"name": "web"}, "minReplicas": 4, "maxReplicas": 8},
                             {"name": "api", "target": {"name": "api"}, "minReplicas": 4, "maxReplicas": 8}]},
        "status": {"phase": if window.is_some() { "Active" } else { "Idle" }, "window": window,
                   "nextWindows": [{"start": "2026-12-04T08:00:00Z", "end": "2026-12-04T18:00:00Z"}],
                   "actions": [{"name": "web", "target": "shop/web", "state": "Applied"},
                               {"name": "api", "target": "shop/api", "state": "Conflict"}]},
    }))
}

#[test]
fn windows_are_the_open_ones_unless_all_are_asked_for() {
    let open = json!({"trigger": "Schedule", "start": "2026-12-03T08:00:00Z", "end": "2026-12-03T18:00:00Z"});
    let a = Objects {
        templates: vec![
            template("shop", "office-hours", Some(open)),
            template("shop", "night", None),
        ],
        ..Objects::default()
    };
    let clusters = fleet(a, Objects::default());
    let r = windows(&clusters, false);
    assert_eq!(fields(&r, "template"), ["shop/office-hours"]);
    assert_eq!(r.items[0]["applied"], "1/2");
    assert_eq!(r.items[0]["closes"], "2026-12-03T18:00:00Z");
    let every = windows(&clusters, true);
    assert_eq!(
        fields(&every, "template"),
        ["shop/office-hours", "shop/night"]
    );
    assert_eq!(every.items[1]["opened"], Value::Null);
    assert_eq!(every.items[1]["next"], "2026-12-04T08:00:00Z");
}

fn env(clusters: &[&str], members: Value) -> crate::api::sandbox::SandboxEnv {
    let declared: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"name": c, "members": []}))
        .collect();
    obj(json!({
        "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxEnv",
        "metadata": {"name": "python", "namespace": "sandboxes"},
        "spec": {"clusters": declared},
        "status": {"localMembers": 1, "members": members},
    }))
}

fn pool(name: &str, status: Value) -> crate::api::sandbox::SandboxPool {
    obj(json!({
        "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": name, "namespace": "sandboxes"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "s", "image": "python:3"}]}}},
        "status": status,
    }))
}

#[test]
fn envs_show_each_clusters_pools_and_the_members_found_nowhere() {
    let a = Objects {
        envs: vec![env(
            &["a", "b", "eu-1"],
            json!([
                {"name": "small", "cluster": "a", "local": true, "pool": "python-small"},
                {"name": "small", "cluster": "b", "local": false},
            ]),
        )],
        pools: vec![pool(
            "python-small",
            json!({
                "replicas": 5, "readyReplicas": 4, "idleReplicas": 3, "claimedReplicas": 1,
                "autoScaling": {"desiredReplicas": 5, "saturatedUntil": "2026-12-03T10:05:00Z"},
            }),
        )],
        ..Objects::default()
    };
    // `b` runs Moonin as cluster "b-prod": the member declared for it is not found as "b".
    let b = Objects {
        envs: vec![env(
            &["a", "b"],
            json!([
                {"name": "small", "cluster": "b-prod", "local": true, "pool": "python-small"},
            ]),
        )],
        ..Objects::default()
    };
    let r = envs(&fleet(a, b), now());
    assert_eq!(fields(&r, "cluster"), ["a", "b", "b", "eu-1"]);
    let first = &r.items[0];
    assert_eq!(
        (
            first["desired"].clone(),
            first["ready"].clone(),
            first["idle"].clone(),
            first["claimed"].clone(),
            first["saturated"].clone()
        ),
        (json!(5), json!(4), json!(3), json!(1), json!(true))
    );
    assert_eq!(r.items[1]["note"], "its SandboxPool is not created yet");
    assert_eq!(
        r.items[2]["note"],
        "declared for b, not found there (2 cluster(s) did not answer)"
    );
    assert_eq!(
        r.items[3]["note"],
        "declared for eu-1, not found there (2 cluster(s) did not answer)"
    );
    // Saturation ends: no longer shown.
    let later = envs(
        &fleet(saturated_until_five_past(), Objects::default()),
        now() + jiff::SignedDuration::from_mins(10),
    );
    assert_eq!(later.items[0]["saturated"], json!(false));
}

/// `a` alone, its pool saturated until 10:05.
fn saturated_until_five_past() -> Objects {
    Objects {
        envs: vec![env(
            &["a"],
            json!([{"name": "small", "cluster": "a", "local": true, "pool": "python-small"}]),
        )],
        pools: vec![pool(
            "python-small",
            json!({"autoScaling": {"saturatedUntil": "2026-12-03T10:05:00Z"}}),
        )],
        ..Objects::default()
    }
}
