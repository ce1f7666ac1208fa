//! The cluster the benchmark measures on: what exists is reused, what is missing created,
//! then the Pods waited for until Running; and deleting it all again.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Node, Pod, Service, ServiceAccount},
    networking::v1::Ingress,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams},
    runtime::watcher,
};
use moonin::api::discovery::ClusterDiscovery;

use crate::{
    CREATE_CONCURRENCY, NODE_PREFIX, NS_PREFIX, POLL, Params, SELECTOR, namespace_name, node_name,
    objects::{DEPLOYMENTS_PER_INGRESS, create_all, deployment, ingress, namespace, node, service},
    placement,
    shared::{
        report::progress,
        wait,
        watch::{self, Seen},
    },
};

/// What the setup found, made and reached: (created now, already there) per kind.
#[derive(Default)]
pub struct Setup {
    pub nodes: (usize, usize),
    pub namespaces: (usize, usize),
    pub deployments: (usize, usize),
    /// One Service per Deployment, one Ingress per ten.
    pub services: (usize, usize),
    pub ingresses: (usize, usize),
    /// Creating the missing Services and Ingresses.
    pub connections_secs: f64,
    pub nodes_secs: f64,
    pub namespaces_secs: f64,
    pub deployments_secs: f64,
    /// From the first Deployment create until the target of Running Pods (or the timeout).
    pub running_secs: f64,
    pub total_secs: f64,
    /// What the cluster holds at the end of setup.
    pub nodes_ready: usize,
    pub deployments_present: usize,
    pub services_present: usize,
    pub ingresses_present: usize,
    pub pods_running: usize,
    pub pods_seen: usize,
    pub timed_out: bool,
}

/// The benchmark's Pods, from a watch.
#[derive(Default)]
struct PodCount {
    /// Per Pod, whether it is Running.
    running: HashMap<(String, String), bool>,
    synced: bool,
}

impl PodCount {
    fn running(&self) -> usize {
        self.running.values().filter(|r| **r).count()
    }
}

/// Counts the benchmark's Pods and how many are Running, from a watch.
fn watch_pods(client: &Client) -> (Arc<Mutex<PodCount>>, tokio::task::JoinHandle<()>) {
    let count: Arc<Mutex<PodCount>> = Arc::default();
    let api: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().labels(SELECTOR).page_size(500);
    let task = watch::spawn("pod", api, config, {
        let count = count.clone();
        move |event| {
            let mut c = count.lock().expect("pods");
            let key = |p: &Pod| (p.namespace().unwrap_or_default(), p.name_any());
            match event {
                Seen::Object(p) => {
                    let running = p.status.as_ref().and_then(|s| s.phase.as_deref());
                    c.running.insert(key(&p), running == Some("Running"));
                }
                Seen::Deleted(p) => {
                    c.running.remove(&key(&p));
                }
                Seen::Synced => c.synced = true,
                Seen::Relisted | Seen::Failed => {}
            }
        }
    });
    (count, task)
}

/// Makes the cluster `p` asks for (reusing what a previous run left) and waits until its
/// Pods run.
pub async fn setup(client: &Client, p: &Params) -> Result<Setup, String> {
    let mut s = Setup::default();
    let all_started = Instant::now();
    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| format!("GET /version: {e}"))?;
    create_nodes(client, p, &version, &mut s).await?;
    let wanted: Vec<String> = (0..p.namespaces).map(namespace_name).collect();
    create_namespaces(client, p, &wanted, &mut s).await?;

    // Deployments, with a watch counting their Pods.
    let (pods, pod_watch) = watch_pods(client);
    let started = Instant::now();
    let mut created = create_deployments(client, p, &wanted, &mut s).await;
    if created.is_ok() {
        created = create_connections(client, p, &mut s).await;
    }
    if let Err(e) = created {
        pod_watch.abort();
        return Err(e);
    }
    wait_for_pods(p, &pods, started, &mut s).await;
    pod_watch.abort();
    s.running_secs = started.elapsed().as_secs_f64();
    count_present(client, &wanted, &mut s).await?;
    s.total_secs = all_started.elapsed().as_secs_f64();
    progress(&format!(
        "setup done in {:.1} s: {} Nodes Ready, {} Deployments, {} Services, {} Ingresses, {} Pods Running",
        s.total_secs,
        s.nodes_ready,
        s.deployments_present,
        s.services_present,
        s.ingresses_present,
        s.pods_running
    ));
    Ok(s)
}

/// The Nodes that are missing.
async fn create_nodes(
    client: &Client,
    p: &Params,
    version: &str,
    s: &mut Setup,
) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    let existing: BTreeSet<String> = nodes
        .list_metadata(&ListParams::default().labels(SELECTOR))
        .await
        .map_err(|e| format!("listing Nodes: {e}"))?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    let missing: Vec<Node> = (0..p.nodes)
        .filter(|i| !existing.contains(&node_name(*i)))
        .map(|i| node(i, version))
        .collect();
    progress(&format!(
        "Nodes: {} of {} exist; creating {}",
        p.nodes - missing.len(),
        p.nodes,
        missing.len()
    ));
    let there = p.nodes - missing.len();
    s.nodes = create_all(|_| nodes.clone(), missing).await?;
    s.nodes.1 += there;
    s.nodes_secs = started.elapsed().as_secs_f64();
    Ok(())
}

/// The namespaces of `wanted` that are missing, and their default ServiceAccount (Pods are
/// refused without it).
async fn create_namespaces(
    client: &Client,
    p: &Params,
    wanted: &[String],
    s: &mut Setup,
) -> Result<(), String> {
    let started = Instant::now();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let present: BTreeMap<String, bool> = namespaces
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .map_err(|e| format!("listing namespaces: {e}"))?
        .items
        .iter()
        .map(|n| (n.name_any(), n.metadata.deletion_timestamp.is_some()))
        .collect();
    if let Some((ns, _)) = present.iter().find(|(n, t)| **t && wanted.contains(n)) {
        return Err(format!(
            "namespace {ns} is still being deleted (an earlier cleanup); wait for it and run again"
        ));
    }
    let missing: Vec<Namespace> = wanted
        .iter()
        .filter(|n| !present.contains_key(*n))
        .map(|n| namespace(n))
        .collect();
    progress(&format!(
        "Namespaces: {} of {} exist; creating {}",
        p.namespaces - missing.len(),
        p.namespaces,
        missing.len()
    ));
    let there = p.namespaces - missing.len();
    s.namespaces = create_all(|_| namespaces.clone(), missing).await?;
    s.namespaces.1 += there;
    let accounts: Api<ServiceAccount> = Api::all(client.clone());
    wait::until(
        "every benchmark namespace's default ServiceAccount",
        Instant::now() + Duration::from_secs(120),
        POLL,
        || async {
            let have: BTreeSet<String> = accounts
                .list_metadata(&ListParams::default().fields("metadata.name=default"))
                .await
                .ok()?
                .items
                .iter()
                .filter_map(|a| a.namespace())
                .collect();
            wanted.iter().all(|n| have.contains(n)).then_some(())
        },
    )
    .await?;
    s.namespaces_secs = started.elapsed().as_secs_f64();
    Ok(())
}

/// The Deployments that are missing from the namespaces of `wanted`.
async fn create_deployments(
    client: &Client,
    p: &Params,
    wanted: &[String],
    s: &mut Setup,
) -> Result<(), String> {
    let started = Instant::now();
    let mut existing: BTreeSet<(String, String)> = BTreeSet::new();
    for ns in wanted {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let list = api
            .list_metadata(&ListParams::default().labels(SELECTOR))
            .await
            .map_err(|e| format!("listing Deployments in {ns}: {e}"))?;
        existing.extend(list.items.iter().map(|d| (ns.clone(), d.name_any())));
    }
    let missing: Vec<Deployment> = (0..p.deployments)
        .filter(|i| {
            let (name, ns, _) = placement(p, *i);
            !existing.contains(&(ns, name))
        })
        .map(|i| deployment(p, i))
        .collect();
    progress(&format!(
        "Deployments: {} of {} exist; creating {} ({} replicas each, {CREATE_CONCURRENCY} creates in flight)",
        p.deployments - missing.len(),
        p.deployments,
        missing.len(),
        p.pods_per_deployment
    ));
    let existing_deployments = p.deployments - missing.len();
    let created = create_all(
        |d: &Deployment| Api::namespaced(client.clone(), &d.namespace().unwrap_or_default()),
        missing,
    )
    .await;
    s.deployments_secs = started.elapsed().as_secs_f64();
    let (created, conflicts) = created?;
    s.deployments = (created, conflicts + existing_deployments);
    if s.deployments.0 > 0 {
        progress(&format!(
            "created {} Deployments in {:.1} s ({:.0}/s)",
            s.deployments.0,
            s.deployments_secs,
            s.deployments.0 as f64 / s.deployments_secs.max(0.001)
        ));
    }
    Ok(())
}

/// `(namespace, name)` of each object listed.
fn keys<K: kube::Resource>(
    items: &[kube::core::PartialObjectMeta<K>],
) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
        .collect()
}

/// The Services (one per Deployment) and Ingresses (one per [`DEPLOYMENTS_PER_INGRESS`])
/// that are missing.
async fn create_connections(client: &Client, p: &Params, s: &mut Setup) -> Result<(), String> {
    let started = Instant::now();
    let lp = ListParams::default().labels(SELECTOR);
    let services = keys(
        &Api::<Service>::all(client.clone())
            .list_metadata(&lp)
            .await
            .map_err(|e| format!("listing Services: {e}"))?
            .items,
    );
    let ingresses = keys(
        &Api::<Ingress>::all(client.clone())
            .list_metadata(&lp)
            .await
            .map_err(|e| format!("listing Ingresses: {e}"))?
            .items,
    );
    let missing = |i: &usize, have: &BTreeSet<(String, String)>| {
        let (name, ns, _) = placement(p, *i);
        !have.contains(&(ns, name))
    };
    let missing_services: Vec<Service> = (0..p.deployments)
        .filter(|i| missing(i, &services))
        .map(|i| service(p, i))
        .collect();
    let wanted_ingresses: Vec<usize> = (0..p.deployments)
        .step_by(DEPLOYMENTS_PER_INGRESS)
        .collect();
    let missing_ingresses: Vec<Ingress> = wanted_ingresses
        .iter()
        .filter(|i| missing(i, &ingresses))
        .map(|i| ingress(p, *i))
        .collect();
    progress(&format!(
        "Services: {} of {} exist; Ingresses: {} of {} exist; creating the rest",
        p.deployments - missing_services.len(),
        p.deployments,
        wanted_ingresses.len() - missing_ingresses.len(),
        wanted_ingresses.len()
    ));
    let there = (
        p.deployments - missing_services.len(),
        wanted_ingresses.len() - missing_ingresses.len(),
    );
    s.services = create_all(
        |o: &Service| Api::namespaced(client.clone(), &o.namespace().unwrap_or_default()),
        missing_services,
    )
    .await?;
    s.services.1 += there.0;
    s.ingresses = create_all(
        |o: &Ingress| Api::namespaced(client.clone(), &o.namespace().unwrap_or_default()),
        missing_ingresses,
    )
    .await?;
    s.ingresses.1 += there.1;
    s.connections_secs = started.elapsed().as_secs_f64();
    Ok(())
}

/// Waits until the watch counts every Pod Running (kwok marks them), or for
/// `MOONIN_BENCH_SETUP_TIMEOUT_SECS`; `started`: the first Deployment create.
async fn wait_for_pods(p: &Params, pods: &Arc<Mutex<PodCount>>, started: Instant, s: &mut Setup) {
    let target = p.pods();
    let deadline = Instant::now() + Duration::from_secs(p.setup_timeout_secs);
    let mut last_print = Instant::now();
    loop {
        let (synced, running, seen) = {
            let c = pods.lock().expect("pods");
            (c.synced, c.running(), c.running.len())
        };
        s.pods_running = running;
        s.pods_seen = seen;
        if synced && running >= target {
            return;
        }
        if Instant::now() >= deadline {
            s.timed_out = true;
            progress(&format!(
                "only {running} of {target} Pods Running after {} s (MOONIN_BENCH_SETUP_TIMEOUT_SECS); going on with that",
                p.setup_timeout_secs
            ));
            return;
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            progress(&format!(
                "Pods: {running} Running of {seen} seen, target {target} ({:.0} s since the first create)",
                started.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the cluster holds now: Ready Nodes and Deployments of the benchmark.
async fn count_present(client: &Client, wanted: &[String], s: &mut Setup) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    s.nodes_ready = nodes
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .map_err(|e| format!("listing Nodes: {e}"))?
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    let mut present = 0;
    for ns in wanted {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        present += api
            .list_metadata(&ListParams::default().labels(SELECTOR))
            .await
            .map_err(|e| format!("listing Deployments in {ns}: {e}"))?
            .items
            .len();
    }
    s.deployments_present = present;
    let lp = ListParams::default().labels(SELECTOR);
    s.services_present = Api::<Service>::all(client.clone())
        .list_metadata(&lp)
        .await
        .map_err(|e| format!("listing Services: {e}"))?
        .items
        .len();
    s.ingresses_present = Api::<Ingress>::all(client.clone())
        .list_metadata(&lp)
        .await
        .map_err(|e| format!("listing Ingresses: {e}"))?
        .items
        .len();
    Ok(())
}

/// Deletes the benchmark's ClusterDiscovery (its inventories go with it) and, with
/// `MOONIN_BENCH_CLEANUP=1`, the namespaces and Nodes.
pub async fn cleanup(client: &Client, p: &Params, discovery: Option<(String, bool)>) {
    if let Some((name, true)) = discovery {
        let api: Api<ClusterDiscovery> = Api::all(client.clone());
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    if !p.cleanup {
        println!();
        println!(
            "Setup objects kept for the next run (label {SELECTOR}: Nodes {NODE_PREFIX}*, namespaces {NS_PREFIX}*); `MOONIN_BENCH_CLEANUP=1` deletes them at the end of a run."
        );
        return;
    }
    let started = Instant::now();
    delete_labelled(&namespaces, "namespaces").await;
    let gone = wait::until_none_left(
        "the benchmark namespaces to be deleted",
        &namespaces,
        &ListParams::default().labels(SELECTOR),
        Instant::now() + Duration::from_secs(600),
        POLL,
    )
    .await;
    if let Err(e) = gone {
        progress(&format!(
            "cleanup: {e}; they go on terminating in the background"
        ));
    }
    delete_labelled(&nodes, "Nodes").await;
    progress(&format!(
        "cleanup done in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    println!();
    println!("Setup objects deleted (MOONIN_BENCH_CLEANUP=1).");
}

/// Deletes every object of `api` that carries the benchmark's label, a few at a time.
async fn delete_labelled<K>(api: &Api<K>, what: &str)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let names: Vec<String> = api
        .list_metadata(&ListParams::default().labels(SELECTOR))
        .await
        .map(|l| l.items.iter().map(|n| n.name_any()).collect())
        .unwrap_or_default();
    progress(&format!("cleanup: deleting {} {what}", names.len()));
    stream::iter(names)
        .for_each_concurrent(CREATE_CONCURRENCY, |n| async move {
            let _ = api.delete(&n, &DeleteParams::default()).await;
        })
        .await;
}
