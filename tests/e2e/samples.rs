//! The first five minutes: `samples/` applied to a fresh namespace of an empty cluster, with
//! the manager running, all become Ready — the Moonin objects and the workloads the scaling
//! samples target (and the KEDA variant in `samples/keda/` where KEDA runs). The helpers are
//! shared with the image and chart tests.

use std::{path::Path, process::Command, time::Duration};

use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject},
    core::GroupVersionKind,
};
use serde_json::Value;

use crate::{
    common,
    harness::{
        self, Manager, TestNamespace, install_crds, kubectl_apply, moonin_api, wait_for, wait_gone,
    },
    require_cluster,
};

/// Whether the KEDA operator runs (`e2e/keda start`; `e2e/test` starts it).
pub fn keda_running() -> bool {
    Command::new(common::root().join("e2e/keda"))
        .arg("status")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The objects of the sample files in `dir` (not its subdirectories, as `kubectl apply -f`),
/// made ready to apply in `ns`: namespaced objects go there, and the cluster-scoped template
/// targets workloads there (its file names `moonin-samples`, the quick start's namespace).
pub fn objects_in(dir: &Path, ns: &str) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("samples dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for mut obj in common::load_all(&f) {
            if !cluster_scoped(&obj) {
                obj["metadata"]["namespace"] = ns.into();
            }
            if obj["kind"] == "ClusterScalingTemplate" {
                for a in obj["spec"]["actions"].as_array_mut().into_iter().flatten() {
                    a["target"]["namespace"] = ns.into();
                }
            }
            out.push(obj);
        }
    }
    out
}

fn cluster_scoped(obj: &Value) -> bool {
    matches!(
        obj["kind"].as_str(),
        Some("ClusterScalingTemplate") | Some("ClusterDiscovery")
    )
}

/// The dynamic API of any object the samples hold.
fn api_of(client: &Client, obj: &Value) -> Api<DynamicObject> {
    let kind = obj["kind"].as_str().expect("kind");
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    if common::is_moonin(obj) {
        return moonin_api(client, kind, ns);
    }
    let (group, version) = obj["apiVersion"]
        .as_str()
        .expect("apiVersion")
        .split_once('/')
        .expect("a group/version");
    let plural = match kind {
        "Deployment" => "deployments",
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers",
        "ScaledObject" => "scaledobjects",
        other => panic!("a sample of kind {other}: teach samples.rs its plural and readiness"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn condition(obj: &Value, type_: &str) -> Option<String> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Why a stored object is not Ready yet, or `None` when it is.
fn not_ready(obj: &Value) -> Option<String> {
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let ok = match kind {
        // Moonin's kinds: Ready=True for the current generation.
        _ if common::is_moonin(obj) => {
            condition(obj, "Ready").as_deref() == Some("True") && observed == generation
        }
        "Deployment" => {
            condition(obj, "Available").as_deref() == Some("True")
                && observed == generation
                && obj["status"]["readyReplicas"] == obj["spec"]["replicas"]
        }
        // The HPA controller found its target and can scale it. (Computing a replica count
        // needs a metrics API, which the local control plane does not serve, so ScalingActive
        // stays False there.)
        "HorizontalPodAutoscaler" => condition(obj, "AbleToScale").as_deref() == Some("True"),
        // KEDA's own Ready: the scaler is built and the HPA made.
        "ScaledObject" => condition(obj, "Ready").as_deref() == Some("True"),
        _ => false,
    };
    (!ok).then(|| {
        format!(
            "{kind}/{}: {}",
            obj["metadata"]["name"].as_str().unwrap_or_default(),
            obj["status"]
        )
    })
}

/// Waits until every object is Ready; panics naming those that are not.
pub async fn wait_ready(client: &Client, objects: &[Value], timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut waiting = Vec::new();
        for obj in objects {
            let name = obj["metadata"]["name"].as_str().expect("name");
            match api_of(client, obj).get_opt(name).await {
                Ok(Some(stored)) => {
                    let stored = serde_json::to_value(stored).expect("json");
                    waiting.extend(not_ready(&stored));
                }
                Ok(None) => waiting.push(format!("{} {name}: missing", obj["kind"])),
                Err(e) => waiting.push(format!("{} {name}: {e}", obj["kind"])),
            }
        }
        if waiting.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not Ready after {timeout:?}:\n{}",
            waiting.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes earlier copies of the cluster-scoped samples (a ClusterDiscovery is one per
/// cluster), their finalizers too: no manager may be running to serve them.
pub async fn clear_cluster_scoped(client: &Client, objects: &[Value]) {
    for obj in objects.iter().filter(|o| cluster_scoped(o)) {
        let kind = obj["kind"].as_str().expect("kind");
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let api = moonin_api(client, kind, "");
        let _ = api.delete(&name, &DeleteParams::default()).await;
        let crd = moonin::api::all_crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("crd");
        let _ = Command::new("kubectl")
            .args([
                "patch",
                &format!("{}.{}", crd.spec.names.plural, moonin::api::GROUP),
                &name,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ])
            .output();
        wait_gone(&api, &name, Duration::from_secs(60)).await;
    }
}

/// Applies the objects with `kubectl apply --server-side`, as a user applies `samples/`.
pub fn apply(ns: &TestNamespace, objects: &[Value], what: &str) {
    let file = std::env::temp_dir().join(format!("moonin-e2e-{what}-{}.yaml", ns.name));
    let mut text = String::new();
    for o in objects {
        text.push_str("---\n");
        text.push_str(&crate::common::to_yaml(o));
    }
    std::fs::write(&file, text).expect("write samples");
    kubectl_apply(&file, None);
    let _ = std::fs::remove_file(&file);
}

/// Deletes the cluster-scoped objects while the manager still runs (it removes their
/// finalizers); the namespaced ones go with the test namespace.
pub async fn delete_cluster_scoped(client: &Client, objects: &[Value]) {
    for obj in objects.iter().filter(|o| cluster_scoped(o)) {
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let api = api_of(client, obj);
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_for(
            &format!("{} {name} to be deleted", obj["kind"]),
            Duration::from_secs(60),
            || async { api.get_opt(&name).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }
}

/// Every object of `samples/` (and `samples/keda/` where KEDA runs), applied to a fresh
/// namespace with the manager running under the RBAC of `config/rbac`, becomes Ready, and no
/// NamespaceInventory or WorkloadRevision is created but the ones Moonin writes.
#[tokio::test]
async fn every_sample_becomes_ready_in_a_fresh_namespace() {
    let client = require_cluster!();
    let _serial = harness::serial().await;
    install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "samples-ready").await;
    let user = ns.grant_manager_rbac();
    let kubeconfig = harness::impersonating_kubeconfig(&user);

    let mut objects = objects_in(&common::root().join("samples"), &ns.name);
    let keda = keda_running();
    if keda {
        objects.extend(objects_in(&common::root().join("samples/keda"), &ns.name));
    } else {
        assert!(
            std::env::var("MOONIN_E2E").as_deref() != Ok("required"),
            "the KEDA operator is not running: e2e/test starts it with `e2e/keda start`"
        );
        eprintln!("the KEDA operator is not running: samples/keda is left out");
    }
    clear_cluster_scoped(&client, &objects).await;
    let manager = Manager::start(
        &kubeconfig,
        &format!("samples-{}", ns.name),
        &["--namespace", &ns.name],
    )
    .await;
    apply(&ns, &objects, "samples");
    let started = std::time::Instant::now();
    wait_ready(&client, &objects, Duration::from_secs(180)).await;
    eprintln!(
        "{} sample objects Ready in {:.1}s (KEDA variant: {keda})",
        objects.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(manager.get("/readyz").map(|r| r.0), Some(200));

    // The namespace's inventory is Moonin's own (owned by the ClusterDiscovery), and every
    // revision there was recorded by Moonin for a Deployment of the samples (a window that
    // is open while the test runs changes replicas, which is a change worth recording).
    let inventory = moonin_api(&client, "NamespaceInventory", &ns.name)
        .get("inventory")
        .await
        .expect("discovery wrote the namespace's inventory");
    let owners = inventory.metadata.owner_references.unwrap_or_default();
    assert_eq!(
        owners.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>(),
        ["ClusterDiscovery"]
    );
    let revisions = moonin_api(&client, "WorkloadRevision", &ns.name)
        .list(&Default::default())
        .await
        .expect("list revisions");
    for r in revisions.items {
        let owners = r.metadata.owner_references.unwrap_or_default();
        assert!(
            owners.iter().any(|o| {
                o.kind == "Deployment"
                    && objects.iter().any(|s| {
                        s["kind"] == "Deployment" && s["metadata"]["name"] == o.name.as_str()
                    })
            }),
            "{:?} is not a sample Deployment's revision",
            r.metadata.name
        );
    }
    delete_cluster_scoped(&client, &objects).await;
}
