//! The setup's objects: fake Nodes, namespaces and Deployments whose Pods are pinned to
//! their Node, all labelled so that a later run finds them; and creating many of them.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Node, Service},
    networking::v1::Ingress,
};
use kube::{Api, Resource, ResourceExt, api::PostParams};
use serde_json::{Value, json};

use crate::{
    CREATE_CONCURRENCY, KWOK_TAINT, LABEL_KEY, LABEL_VALUE, Params, node_name, placement,
    shared::report::progress,
};

/// The label every setup object carries.
pub fn labels() -> Value {
    json!({ LABEL_KEY: LABEL_VALUE })
}

/// A fake Node in one of three zones and of two instance types (six node groups), managed
/// by kwok, tainted so that the scheduler places nothing else on it.
pub fn node(i: usize, kube_version: &str) -> Node {
    let name = node_name(i);
    let zone = ["a", "b", "c"][i % 3];
    let instance = ["bench.large", "bench.xlarge"][(i / 3) % 2];
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                LABEL_KEY: LABEL_VALUE,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
                "node.kubernetes.io/instance-type": instance,
                "topology.kubernetes.io/region": "bench-1",
                "topology.kubernetes.io/zone": format!("bench-1{zone}"),
            }
        },
        "spec": {
            "providerID": format!("kwok://{name}"),
            // Outside e2e/cluster's 10.244.0.0/16.
            "podCIDR": format!("10.{}.{}.0/24", 128 + i / 256, i % 256),
            "podCIDRs": [format!("10.{}.{}.0/24", 128 + i / 256, i % 256)],
            "taints": [{"key": KWOK_TAINT, "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name}
            ],
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"},
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "kwok",
                "kernelVersion": "kwok",
                "kubeletVersion": kube_version,
                "kubeProxyVersion": kube_version,
                "containerRuntimeVersion": "kwok://bench",
                "bootID": "",
                "machineID": "",
                "systemUUID": ""
            }
        }
    }))
    .expect("node")
}

/// A namespace of the benchmark.
pub fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels()}}))
        .expect("namespace")
}

fn image(i: usize) -> String {
    format!("registry.example/bench/svc-{}:1.{}", i % 200, i % 7)
}

/// A Deployment whose Pods are pinned to a Node (no scheduling) and tolerate its taint.
pub fn deployment(p: &Params, i: usize) -> Deployment {
    let (name, ns, node) = placement(p, i);
    let tier = ["web", "api", "worker"][i % 3];
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL_KEY: LABEL_VALUE, "app": name}},
        "spec": {
            "replicas": p.pods_per_deployment,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {LABEL_KEY: LABEL_VALUE, "app": name, "tier": tier}},
                "spec": {
                    "nodeName": node,
                    "containers": [{
                        "name": "app",
                        "image": image(i),
                        "ports": [{"containerPort": 8080, "name": "http"}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                    }],
                    "tolerations": [{"key": KWOK_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    }))
    .expect("deployment")
}

/// Deployments per Ingress: one Ingress for every this many Deployments (a realistic
/// ratio: most Services are internal).
pub const DEPLOYMENTS_PER_INGRESS: usize = 10;

/// The Service in front of Deployment `i`: same name, selecting its Pods. Headless
/// (`clusterIP: None`): the local control plane's Service range (the API server's default,
/// 10.0.0.0/24) holds 254 cluster IPs, and the object both systems watch is the same but
/// for that one field.
pub fn service(p: &Params, i: usize) -> Service {
    let (name, ns, _) = placement(p, i);
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels()},
        "spec": {
            "clusterIP": "None",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]
        }
    }))
    .expect("service")
}

/// The Ingress of Deployment `i` (one of every [`DEPLOYMENTS_PER_INGRESS`]): one host,
/// TLS, routing to its Service.
pub fn ingress(p: &Params, i: usize) -> Ingress {
    let (name, ns, _) = placement(p, i);
    let host = format!("{name}.{ns}.bench.example");
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels()},
        "spec": {
            "tls": [{"hosts": [host], "secretName": format!("{name}-tls")}],
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/",
                "pathType": "Prefix",
                "backend": {"service": {"name": name, "port": {"name": "http"}}}
            }]}}]
        }
    }))
    .expect("ingress")
}

/// Creates `obj`; `Ok(false)` when it exists already. Throttling and server errors are
/// retried a few times (the control plane is busy while thousands of objects arrive).
async fn create<K>(api: &Api<K>, obj: &K) -> Result<bool, String>
where
    K: Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let err = match api.create(&PostParams::default(), obj).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
            Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                return Err(format!("creating {}: {e}", obj.name_any()));
            }
            Err(e) => e,
        };
        if attempt >= 6 {
            return Err(format!("creating {}: {err}", obj.name_any()));
        }
        tokio::time::sleep(Duration::from_millis(250 << attempt)).await;
    }
}

/// Creates every object of `objs` with at most [`CREATE_CONCURRENCY`] in flight; (created,
/// already there).
pub async fn create_all<K>(
    api_of: impl Fn(&K) -> Api<K>,
    objs: Vec<K>,
) -> Result<(usize, usize), String>
where
    K: Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let total = objs.len();
    let started = Instant::now();
    let mut last = Instant::now();
    let mut done = (0, 0);
    let mut results = stream::iter(objs)
        .map(|o| {
            let api = api_of(&o);
            async move { create(&api, &o).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY);
    while let Some(r) = results.next().await {
        if r? {
            done.0 += 1;
        } else {
            done.1 += 1;
        }
        if last.elapsed() >= Duration::from_secs(10) {
            last = Instant::now();
            let n = done.0 + done.1;
            progress(&format!(
                "  {n}/{total} ({:.0}/s)",
                n as f64 / started.elapsed().as_secs_f64()
            ));
        }
    }
    Ok(done)
}
