//! Expired watches: the manager is cut off (by the proxy) while the cluster churns and etcd
//! compacts every 5 s, on an API server without a watch cache, so that every watch resumed
//! afterwards is refused with 410 Gone and lists again. Afterwards the inventory is what the
//! API server lists, every change is one revision, and the pool acted on the relisted world.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Pod},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use moonin::api::{
    discovery::{NamespaceInventory, WorkloadRevision},
    sandbox::{SandboxClaim, SandboxPool},
};
use serde_json::json;

use crate::{
    harness::{self, Manager, kwok_deployment, wait_for},
    partition::through,
    plane::{Plane, leading},
    proxy::Proxy,
};

const NS: &str = "faults";
const DEPLOYMENTS: usize = 20;
const POOL: i32 = 4;
const CLAIMS: usize = 2;

fn pool_pods_live(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_expired_watches_the_manager_sees_what_the_api_server_lists() {
    if harness::cluster().await.is_none() {
        return;
    }
    let _serial = harness::serial().await;
    let plane = Plane::up_with("expiry", "watch-cache=false etcd-compaction-interval=5s").await;
    let client = plane.client.clone();
    harness::install_crds(&client).await;
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_body = |name: &str| {
        serde_json::from_value::<Namespace>(json!({"metadata": {"name": name}})).expect("ns")
    };
    namespaces
        .create(&pp, &ns_body(NS))
        .await
        .expect("namespace");

    let proxy = Proxy::start(crate::partition::upstream(&plane.kubeconfig)).await;
    let manager = Manager::start(
        &through(&plane.kubeconfig, proxy.addr),
        "expiry",
        &["--namespace", NS],
    )
    .await;
    leading(&manager).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for i in 0..DEPLOYMENTS {
        deployments
            .create(&pp, &kwok_deployment(&format!("d{i:02}"), 1))
            .await
            .expect("deployment");
    }
    let cd = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterDiscovery",
        "metadata": {"name": "cluster"},
        "spec": {"clusterName": "expiry"}
    }))
    .expect("cd");
    harness::moonin_api(&client, "ClusterDiscovery", "")
        .create(&pp, &cd)
        .await
        .expect("ClusterDiscovery");
    let pools: Api<SandboxPool> = Api::namespaced(client.clone(), NS);
    let pool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "pool"},
        "spec": {"replicas": POOL, "template": {"spec": {
            "containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        }}}
    }))
    .expect("pool");
    pools.create(&pp, &pool).await.expect("pool");
    let inventories: Api<NamespaceInventory> = Api::namespaced(client.clone(), NS);
    wait_for(
        "every baseline in the inventory",
        Duration::from_secs(90),
        || async {
            let i = inventories.get_opt("inventory").await.ok()??;
            let v = serde_json::to_value(i.status?).ok()?;
            let with = v["deployments"]
                .as_array()?
                .iter()
                .filter(|d| d["baseline"].is_object())
                .count();
            (with == DEPLOYMENTS).then_some(())
        },
    )
    .await;
    wait_for("the pool's Pods idle", Duration::from_secs(60), || async {
        let s = serde_json::to_value(pools.get("pool").await.ok()?.status?).ok()?;
        (s["idleReplicas"] == POOL).then_some(())
    })
    .await;

    // The test's own watch of the pool's Pods, direct: the most that were ever alive at once.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let most = Arc::new(AtomicUsize::new(0));
    let counted = most.clone();
    let pod_watch = tokio::spawn({
        let pods = pods.clone();
        async move {
            let (store, writer) = kube::runtime::reflector::store();
            let events = watcher(pods, watcher::Config::default().labels("moonin.io/pool"))
                .default_backoff()
                .reflect(writer)
                .applied_objects();
            futures::pin_mut!(events);
            while events.next().await.is_some() {
                let alive: Vec<Pod> = store.state().iter().map(|p| (**p).clone()).collect();
                counted.fetch_max(pool_pods_live(&alive), Ordering::Relaxed);
            }
        }
    });
    let lists_before = lists(&manager);

    // Cut off: the cluster changes, etcd compacts the history the manager's watches stand on.
    proxy.cut();
    let cut = Instant::now();
    for i in 0..DEPLOYMENTS {
        let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.example/app:2"}]}}}});
        deployments
            .patch(
                &format!("d{i:02}"),
                &PatchParams::default(),
                &Patch::Strategic(body),
            )
            .await
            .expect("image change");
    }
    let idle = pods
        .list(&ListParams::default().labels("moonin.io/pool"))
        .await
        .expect("pods");
    let removed = idle.items[0].name_any();
    pods.delete(&removed, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete a pool Pod");
    let claims: Api<SandboxClaim> = Api::namespaced(client.clone(), NS);
    for i in 0..CLAIMS {
        let c = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxClaim",
            "metadata": {"name": format!("claim-{i}")},
            "spec": {"poolRef": {"name": "pool"}}
        }))
        .expect("claim");
        claims.create(&pp, &c).await.expect("claim");
    }
    for i in 0..3 {
        namespaces
            .create(&pp, &ns_body(&format!("churn-{i}")))
            .await
            .expect("namespace");
    }
    namespaces
        .delete("churn-0", &DeleteParams::default())
        .await
        .expect("delete namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "churn-1");
    let cm = serde_json::from_value(json!({"metadata": {"name": "churn"}})).expect("cm");
    cms.create(&pp, &cm).await.expect("configmap");
    for i in 0..300 {
        cms.patch(
            "churn",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .expect("churn");
    }
    // Two compactions past the churn.
    tokio::time::sleep(Duration::from_secs(12)).await;
    proxy.heal();
    eprintln!("expiry: cut off for {:.0}s", cut.elapsed().as_secs_f64());
    let healed = Instant::now();

    // The end state, from the relisted world.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    loop {
        match end_state(&client, &pods, &claims, &removed).await {
            Ok(()) => break,
            Err(e) => {
                if e != last {
                    eprintln!(
                        "{:6.1}s after the heal: {e}",
                        healed.elapsed().as_secs_f64()
                    );
                    last = e;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no end state after the relist: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "expiry: the end state {:.1}s after the heal",
        healed.elapsed().as_secs_f64()
    );
    // The watches expired and listed again (410 Gone on resuming), which is what was tested.
    let log = manager.log_text();
    let expired = log
        .lines()
        .find(|l| l.contains("watch expired; relisting"))
        .expect("no watch expired: the test did not test expiry");
    eprintln!("expiry: {}", &expired[..expired.len().min(300)]);
    let relists = lists(&manager) - lists_before;
    assert!(relists >= 5, "{relists} lists after the heal");
    // Never more Pods alive than the pool's size: no decision on a view that missed a Pod.
    assert!(
        most.load(Ordering::Relaxed) <= POOL as usize,
        "{} pool Pods alive at once (size {POOL})",
        most.load(Ordering::Relaxed)
    );
    eprintln!(
        "expiry: {relists} lists after the heal; at most {} pool Pods alive",
        most.load(Ordering::Relaxed)
    );
    pod_watch.abort();
}

/// `moonin_api_requests_total{verb="list"}` of the manager.
fn lists(m: &Manager) -> u64 {
    let (_, body) = m.get("/metrics").expect("/metrics");
    harness::metric_sum(&body, "moonin_api_requests_total", &["verb=\"list\""]).unwrap_or_default()
        as u64
}

/// `Ok` once the inventory lists exactly the Deployments the API server lists, with their
/// images, each changed Deployment has exactly one revision, the deleted Pod was replaced and
/// the claims are bound to Pods of their own.
async fn end_state(
    client: &kube::Client,
    pods: &Api<Pod>,
    claims: &Api<SandboxClaim>,
    removed: &str,
) -> Result<(), String> {
    let err = |e: kube::Error| e.to_string();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let listed: BTreeMap<String, String> = deployments
        .list(&ListParams::default())
        .await
        .map_err(err)?
        .into_iter()
        .map(|d| {
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            (d.name_any(), image)
        })
        .collect();
    let inventories: Api<NamespaceInventory> = Api::namespaced(client.clone(), NS);
    let inv = inventories.get("inventory").await.map_err(err)?;
    let status = serde_json::to_value(inv.status).map_err(|e| e.to_string())?;
    let inventoried: BTreeMap<String, String> = status["deployments"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let image = d["images"][0].as_str().unwrap_or_default().to_string();
            (d["name"].as_str().unwrap_or_default().to_string(), image)
        })
        .collect();
    if inventoried != listed {
        return Err(format!("inventory {inventoried:?} ≠ listed {listed:?}"));
    }
    let revisions: Api<WorkloadRevision> = Api::namespaced(client.clone(), NS);
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for r in revisions.list(&ListParams::default()).await.map_err(err)? {
        *per.entry(r.spec.workload.name.clone()).or_default() += 1;
    }
    if per.len() != DEPLOYMENTS || per.values().any(|n| *n != 1) {
        return Err(format!(
            "revisions per Deployment: {per:?} (want one each of {DEPLOYMENTS})"
        ));
    }
    let live: Vec<Pod> = pods
        .list(&ListParams::default().labels("moonin.io/pool"))
        .await
        .map_err(err)?
        .items;
    if live.iter().any(|p| p.name_any() == removed) || pool_pods_live(&live) != POOL as usize {
        return Err(format!(
            "pool Pods {:?} (want {POOL}, without {removed})",
            live.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        ));
    }
    let mut bound = std::collections::BTreeSet::new();
    for c in claims.list(&ListParams::default()).await.map_err(err)? {
        let s = serde_json::to_value(&c.status).map_err(|e| e.to_string())?;
        if s["phase"] != "Bound" || !bound.insert(s["podName"].to_string()) {
            return Err(format!("claim {}: {s}", c.name_any()));
        }
    }
    if bound.len() != CLAIMS {
        return Err(format!("{} claims bound", bound.len()));
    }
    Ok(())
}
