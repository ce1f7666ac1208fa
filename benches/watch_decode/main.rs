//! What one Deployment watch event costs the scaling controller to decode: read off the
//! wire as no more than its cache keeps (`moonin::scaling::wire::WireDeployment`), beside
//! decoding the whole Deployment and cutting it down afterwards (what the cache did before).
//! No cluster is involved: the events are built here, as the API server sends them (the
//! event's type first), for a Deployment created with `kubectl apply` (the last-applied
//! annotation), scaled by an HPA controller, its status written and Moonin's marks on it.
//!
//! ```sh
//! cargo bench --bench watch_decode
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

#[allow(dead_code)]
#[path = "../shared/stats.rs"]
mod stats;

use std::{hint::black_box, process::ExitCode, time::Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::core::WatchEvent;
use moonin::{
    runtime::decode::Decoded,
    scaling::wire::{self, WireDeployment},
};
use serde_json::{Value, json};

/// Decodings per way and event, taken in alternating blocks so that drift hits both alike.
const ROUNDS: usize = 20_000;
const BLOCK: usize = 1_000;

fn main() -> ExitCode {
    if !std::env::args().any(|a| a == "--bench") {
        println!("watch_decode: run it with `cargo bench --bench watch_decode`");
        return ExitCode::SUCCESS;
    }
    println!("| event | bytes | decoding | n | p50 µs | p95 µs | p99 µs | max µs |");
    println!("|---|---|---|---|---|---|---|---|");
    for containers in [1, 4] {
        let line = event(containers);
        let (cut, read) = (whole(&line), wire(&line));
        if cut != read {
            eprintln!("the two decodings disagree:\n{cut:?}\n{read:?}");
            return ExitCode::FAILURE;
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS / BLOCK {
            a.extend(timed(|| drop(black_box(whole(black_box(&line))))));
            b.extend(timed(|| drop(black_box(wire(black_box(&line))))));
        }
        let name = format!("{containers} container(s)");
        for (how, v) in [("whole, then cut", a), ("off the wire (the cache)", b)] {
            let s = stats::stats(v).expect("timed");
            println!(
                "| {name} | {} | {how} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                line.len(),
                s.n,
                s.p50,
                s.p95,
                s.p99,
                s.max
            );
        }
    }
    ExitCode::SUCCESS
}

/// `BLOCK` runs of `f`, each timed in microseconds.
fn timed(f: impl Fn()) -> Vec<f64> {
    (0..BLOCK)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Decoded whole, then cut to what the cache keeps.
fn whole(line: &str) -> Deployment {
    let Ok(WatchEvent::Modified(Decoded::Valid(d))) =
        serde_json::from_str::<WatchEvent<Decoded<Deployment>>>(line)
    else {
        panic!("not a decodable MODIFIED event");
    };
    wire::cut(d)
}

/// Read off the wire as the scaling cache reads it.
fn wire(line: &str) -> Deployment {
    let Ok(WatchEvent::Modified(Decoded::Valid(w))) =
        serde_json::from_str::<WatchEvent<Decoded<WireDeployment>>>(line)
    else {
        panic!("not a decodable MODIFIED event");
    };
    w.into()
}

/// A `MODIFIED` watch line, the type first as the API server writes it.
fn event(containers: usize) -> String {
    let names: Vec<String> = (0..containers).map(|i| format!("c{i}")).collect();
    let spec_containers: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"name": n, "image": format!("registry.example/shop/{n}:1.27.3"),
                   "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                   "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}],
                   "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                   "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
                   "terminationMessagePolicy": "File"})
        })
        .collect();
    let field_sets: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| {
            (
                format!("k:{{\"name\":\"{n}\"}}"),
                json!({".": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                       "f:ports": {}, "f:resources": {}, "f:terminationMessagePath": {},
                       "f:terminationMessagePolicy": {}}),
            )
        })
        .collect();
    let template = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": spec_containers, "dnsPolicy": "ClusterFirst",
                                   "restartPolicy": "Always", "schedulerName": "default-scheduler",
                                   "securityContext": {}, "terminationGracePeriodSeconds": 30}});
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": "web", "namespace": "shop"},
                         "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}});
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "shop", "uid": "6b0f3c1e-2b1a-4d2f-9b8e-0c1d2e3f4a5b",
            "resourceVersion": "912345", "generation": 7, "creationTimestamp": "2026-12-01T08:00:00Z",
            "labels": {"app": "web"},
            "annotations": {
                "deployment.kubernetes.io/revision": "3",
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string(),
                "moonin.io/original-replicas": "2"
            },
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-12-01T08:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                             "f:labels": {".": {}, "f:app": {}}},
                              "f:spec": {"f:progressDeadlineSeconds": {}, "f:replicas": {}, "f:revisionHistoryLimit": {},
                                         "f:selector": {}, "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
                                         "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                                        "f:spec": {"f:containers": field_sets, "f:dnsPolicy": {}, "f:restartPolicy": {}}}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-12-01T09:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                              "f:status": {"f:availableReplicas": {}, "f:conditions": {".": {}}, "f:observedGeneration": {},
                                           "f:readyReplicas": {}, "f:replicas": {}, "f:updatedReplicas": {}}}},
                {"manager": "moonin-scaling", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-12-01T09:00:01Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:moonin.io/original-replicas": {}}}, "f:spec": {"f:replicas": {}}}}
            ]
        },
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}}, "progressDeadlineSeconds": 600,
                 "revisionHistoryLimit": 10,
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": template},
        "status": {"replicas": 5, "readyReplicas": 5, "availableReplicas": 5, "updatedReplicas": 5, "observedGeneration": 7,
                   "conditions": [
                       {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability.",
                        "lastTransitionTime": "2026-12-01T08:00:10Z", "lastUpdateTime": "2026-12-01T08:00:10Z"},
                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                        "message": "ReplicaSet \"web-5d9c7b8f6d\" has successfully progressed.",
                        "lastTransitionTime": "2026-12-01T08:00:00Z", "lastUpdateTime": "2026-12-01T08:00:10Z"}]}
    });
    format!("{{\"type\":\"MODIFIED\",\"object\":{object}}}")
}
