//! Discovery footprint (TESTING.md, "Benchmarks"): `moonin run --controllers discovery` on a
//! kwok cluster of N fake Nodes, K Deployments and K × R Pods, and kube-state-metrics (built
//! from its Go module by `e2e/kube-state-metrics`) on the same cluster, one after the other.
//!
//! Per system: the time from process start until it is warm, its RSS then (VmRSS, VmHWM from
//! `/proc/<pid>/status`), CPU time and API requests during warm-up. For Moonin also the
//! requests and writes per minute in a steady-state window (a `list` there is a relist), and
//! the writes that follow a few image changes. Numbers, not pass/fail.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench discovery_footprint
//! MOONIN_BENCH_NODES=20 MOONIN_BENCH_DEPLOYMENTS=200 MOONIN_BENCH_NAMESPACES=10 \
//!     MOONIN_BENCH_STEADY_SECS=30 MOONIN_BENCH_CLEANUP=1 cargo bench --bench discovery_footprint
//! ```
//!
//! Variables (defaults in brackets): `MOONIN_BENCH_NODES` [1000], `MOONIN_BENCH_DEPLOYMENTS`
//! [10000], `MOONIN_BENCH_PODS_PER_DEPLOYMENT` [5], `MOONIN_BENCH_NAMESPACES` [100],
//! `MOONIN_BENCH_STEADY_SECS` [120], `MOONIN_BENCH_CHANGES` (image changes) [10],
//! `MOONIN_BENCH_CLEANUP` [0], `MOONIN_BENCH_KSM` (run the peer) [1], `MOONIN_BENCH_HELM_RBAC`
//! (also grant config/rbac-helm) [0], `MOONIN_BENCH_SETUP_TIMEOUT_SECS` (Pods Running) [7200],
//! `MOONIN_BENCH_WARMUP_TIMEOUT_SECS` [1800], `MOONIN_BENCH_QUIET_WAIT_SECS` (for other
//! `moonin run` processes to stop) [900].
//!
//! Pods are pinned to their Node (`spec.nodeName`), so the scheduler is not involved. The full
//! size took 35 minutes to set up on 2 cores (the API server, the controller-manager creating
//! Pods and kwok running them share the machine); later runs reuse it.
//!
//! The setup objects (Nodes, Namespaces, Deployments) carry the label
//! `moonin.io/bench=discovery-footprint`; a later run reuses what exists and creates only
//! what is missing. They are kept unless `MOONIN_BENCH_CLEANUP=1`.
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

#[allow(dead_code)]
mod shared;
use shared::{common, harness};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, ExitCode, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use jiff::Timestamp;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Node, Pod, ServiceAccount},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use moonin::api::discovery::{ClusterDiscovery, NamespaceInventory, WorkloadRevision};
use serde_json::{Value, json};

use harness::{Manager, TestNamespace};
use shared::{
    http::get_parsed,
    machine::{self, wait_until_quiet},
    manager::{self as bench_manager, ManagerSeat},
    metrics::{Counters as Scrape, label, scrape, scrape_retrying, value},
    params::{command_line, flag, positive},
    plane,
    process::{self, Usage, listed, moonin_managers, usage},
    report::{breakdown, listing, mib, num, progress},
    signals::or_interrupted,
    wait,
    watch::{self, Seen},
};

/// The label on every setup object.
const LABEL_KEY: &str = "moonin.io/bench";
const LABEL_VALUE: &str = "discovery-footprint";
const SELECTOR: &str = "moonin.io/bench=discovery-footprint";
const NODE_PREFIX: &str = "bench-disc-node-";
const NS_PREFIX: &str = "bench-disc-";
/// The ClusterDiscovery the benchmark creates when none exists.
const DISCOVERY: &str = "cluster";
/// The taint on the benchmark's Nodes: the scheduler places nothing else there.
const KWOK_TAINT: &str = "kwok.x-k8s.io/node";
/// Concurrent creates while setting up.
const CREATE_CONCURRENCY: usize = 32;
/// Moonin's RSS at most this fraction of kube-state-metrics'.
const RSS_GOAL: f64 = 0.25;
/// The manager has settled when its writes (the heartbeat Lease aside) stood still this long.
const QUIET: Duration = Duration::from_secs(5);
/// The verbs of `moonin_api_requests_total`, in table order.
const VERBS: [&str; 7] = [
    "list", "watch", "get", "create", "patch", "update", "delete",
];
/// Kinds the discovery controller may write after a Deployment changed.
const CHANGE_KINDS: [&str; 5] = [
    "NamespaceInventory",
    "NamespaceInventory/status",
    "WorkloadRevision",
    "WorkloadRevision/status",
    "ClusterDiscovery/status",
];
/// The heartbeat Lease: renewed every 10 s by design, whatever changed.
const HEARTBEAT_KIND: &str = "Lease";

/// How often the benchmark looks again at what it waits for.
const POLL: Duration = Duration::from_millis(500);

fn main() -> ExitCode {
    plane::main(
        "discovery_footprint",
        2,
        "; see the file's header for the MOONIN_BENCH_* variables",
        run,
    )
}

// ---------------------------------------------------------------------------------------
// Parameters.

struct Params {
    nodes: usize,
    deployments: usize,
    pods_per_deployment: usize,
    namespaces: usize,
    steady_secs: u64,
    changes: usize,
    cleanup: bool,
    ksm: bool,
    helm_rbac: bool,
    setup_timeout_secs: u64,
    warmup_timeout_secs: u64,
    quiet_wait_secs: u64,
}

/// Every variable the benchmark reads, for the command line it prints.
const ENV: [&str; 12] = [
    "MOONIN_BENCH_NODES",
    "MOONIN_BENCH_DEPLOYMENTS",
    "MOONIN_BENCH_PODS_PER_DEPLOYMENT",
    "MOONIN_BENCH_NAMESPACES",
    "MOONIN_BENCH_STEADY_SECS",
    "MOONIN_BENCH_CHANGES",
    "MOONIN_BENCH_CLEANUP",
    "MOONIN_BENCH_KSM",
    "MOONIN_BENCH_HELM_RBAC",
    "MOONIN_BENCH_SETUP_TIMEOUT_SECS",
    "MOONIN_BENCH_WARMUP_TIMEOUT_SECS",
    "MOONIN_BENCH_QUIET_WAIT_SECS",
];

impl Params {
    fn from_env() -> Result<Self, String> {
        let var = positive;
        let p = Self {
            nodes: var("MOONIN_BENCH_NODES", 1000)? as usize,
            deployments: var("MOONIN_BENCH_DEPLOYMENTS", 10_000)? as usize,
            pods_per_deployment: var("MOONIN_BENCH_PODS_PER_DEPLOYMENT", 5)? as usize,
            namespaces: var("MOONIN_BENCH_NAMESPACES", 100)? as usize,
            steady_secs: var("MOONIN_BENCH_STEADY_SECS", 120)?,
            changes: var("MOONIN_BENCH_CHANGES", 10)? as usize,
            cleanup: flag("MOONIN_BENCH_CLEANUP", false)?,
            ksm: flag("MOONIN_BENCH_KSM", true)?,
            helm_rbac: flag("MOONIN_BENCH_HELM_RBAC", false)?,
            setup_timeout_secs: var("MOONIN_BENCH_SETUP_TIMEOUT_SECS", 7200)?,
            warmup_timeout_secs: var("MOONIN_BENCH_WARMUP_TIMEOUT_SECS", 1800)?,
            quiet_wait_secs: var("MOONIN_BENCH_QUIET_WAIT_SECS", 900)?,
        };
        if p.nodes > 32_768 || p.namespaces > 9_999 || p.deployments > 999_999 {
            return Err(
                "at most 32768 nodes, 9999 namespaces and 999999 Deployments (names and pod CIDRs)"
                    .into(),
            );
        }
        Ok(p)
    }

    fn pods(&self) -> usize {
        self.deployments * self.pods_per_deployment
    }

    /// The Deployments whose image changes: the first ones, each in its own namespace
    /// while there are namespaces enough.
    fn changed(&self) -> Vec<usize> {
        (0..self.changes.min(self.deployments)).collect()
    }

    fn command(&self) -> String {
        command_line("discovery_footprint", &ENV)
    }
}

fn node_name(i: usize) -> String {
    format!("{NODE_PREFIX}{i:04}")
}

fn namespace_name(i: usize) -> String {
    format!("{NS_PREFIX}{i:03}")
}

/// Deployment `i`: its name, namespace and the Node its Pods are pinned to.
fn placement(p: &Params, i: usize) -> (String, String, String) {
    (
        format!("d-{i:05}"),
        namespace_name(i % p.namespaces),
        node_name(i % p.nodes),
    )
}

// ---------------------------------------------------------------------------------------
// Objects.

fn labels() -> Value {
    json!({ LABEL_KEY: LABEL_VALUE })
}

/// A fake Node in one of three zones and of two instance types (six node groups), managed
/// by kwok, tainted so that the scheduler places nothing else on it.
fn node(i: usize, kube_version: &str) -> Node {
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

fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels()}}))
        .expect("namespace")
}

fn image(i: usize) -> String {
    format!("registry.example/bench/svc-{}:1.{}", i % 200, i % 7)
}

/// A Deployment whose Pods are pinned to a Node (no scheduling) and tolerate its taint.
fn deployment(p: &Params, i: usize) -> Deployment {
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
async fn create_all<K>(
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

// ---------------------------------------------------------------------------------------
// Setup.

#[derive(Default)]
struct Setup {
    nodes: (usize, usize),
    namespaces: (usize, usize),
    deployments: (usize, usize),
    nodes_secs: f64,
    namespaces_secs: f64,
    deployments_secs: f64,
    /// From the first Deployment create until the target of Running Pods (or the timeout).
    running_secs: f64,
    total_secs: f64,
    /// What the cluster holds at the end of setup.
    nodes_ready: usize,
    deployments_present: usize,
    pods_running: usize,
    pods_seen: usize,
    timed_out: bool,
}

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

async fn setup(client: &Client, p: &Params) -> Result<Setup, String> {
    let mut s = Setup::default();
    let all_started = Instant::now();
    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| format!("GET /version: {e}"))?;

    // Nodes.
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
        .map(|i| node(i, &version))
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

    // Namespaces, and their default ServiceAccount (Pods are refused without it).
    let started = Instant::now();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let wanted: Vec<String> = (0..p.namespaces).map(namespace_name).collect();
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

    // Deployments, with a watch counting their Pods.
    let (pods, pod_watch) = watch_pods(client);
    let started = Instant::now();
    let mut existing: BTreeSet<(String, String)> = BTreeSet::new();
    for ns in &wanted {
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
    s.deployments = match created {
        Ok((created, conflicts)) => (created, conflicts + existing_deployments),
        Err(e) => {
            pod_watch.abort();
            return Err(e);
        }
    };
    if s.deployments.0 > 0 {
        progress(&format!(
            "created {} Deployments in {:.1} s ({:.0}/s)",
            s.deployments.0,
            s.deployments_secs,
            s.deployments.0 as f64 / s.deployments_secs.max(0.001)
        ));
    }

    // Pods Running (kwok marks them).
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
            break;
        }
        if Instant::now() >= deadline {
            s.timed_out = true;
            progress(&format!(
                "only {running} of {target} Pods Running after {} s (MOONIN_BENCH_SETUP_TIMEOUT_SECS); going on with that",
                p.setup_timeout_secs
            ));
            break;
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
    pod_watch.abort();
    s.running_secs = started.elapsed().as_secs_f64();

    // What the cluster holds now.
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
    for ns in &wanted {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        present += api
            .list_metadata(&ListParams::default().labels(SELECTOR))
            .await
            .map_err(|e| format!("listing Deployments in {ns}: {e}"))?
            .items
            .len();
    }
    s.deployments_present = present;
    s.total_secs = all_started.elapsed().as_secs_f64();
    progress(&format!(
        "setup done in {:.1} s: {} Nodes Ready, {} Deployments, {} Pods Running",
        s.total_secs, s.nodes_ready, s.deployments_present, s.pods_running
    ));
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// Processes: HTTP, memory, CPU, other managers.

/// `GET path` and counts the lines that start with each of `prefixes`, reading the body
/// as it arrives (kube-state-metrics' answer for a large cluster is hundreds of MB).
fn count_lines(addr: SocketAddr, path: &str, prefixes: &[&str]) -> Option<Vec<usize>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).ok()?;
    if !String::from_utf8_lossy(&line).contains(" 200") {
        return None;
    }
    let mut counts = vec![0; prefixes.len()];
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Some(counts),
            Ok(_) => {
                for (i, prefix) in prefixes.iter().enumerate() {
                    if line.starts_with(prefix.as_bytes()) {
                        counts[i] += 1;
                    }
                }
            }
            Err(_) => return None,
        }
    }
}

/// The machine at one instant: load average and what else competes for it.
fn machine_note(own_identity: &str) -> String {
    machine::note(own_identity, |_| "OTHER `moonin run`")
}

/// Waits until no `moonin run` runs on this machine (another discovery manager would write
/// the same inventories; an end-to-end test would replace the ClusterDiscovery).
async fn wait_for_no_manager(p: &Params) -> Option<String> {
    let quiet = wait_until_quiet(
        "other `moonin run` processes to stop (MOONIN_BENCH_QUIET_WAIT_SECS)",
        Duration::from_secs(p.quiet_wait_secs),
        Duration::from_secs(2),
        || {
            let others = moonin_managers();
            (!others.is_empty()).then(|| listed(&others))
        },
    )
    .await;
    let note = format!("{}; measured anyway", quiet.err()?);
    progress(&note);
    Some(note)
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

// ---------------------------------------------------------------------------------------
// Moonin.

/// What happened after the image changes.
#[derive(Default)]
struct ChangeReport {
    changed: Vec<(String, String)>,
    writes: Scrape,
    secs: f64,
    settled: bool,
    /// Namespaces whose inventory (any part) changed: inside / outside the touched set.
    inventories_touched: BTreeSet<String>,
    inventories_elsewhere: BTreeSet<String>,
    /// WorkloadRevisions created since the change: for a changed Deployment / another one.
    revisions_changed: usize,
    revisions_other: Vec<String>,
    /// Kinds written that a Deployment change does not explain.
    unexpected_kinds: Vec<String>,
}

impl ChangeReport {
    fn only_changed(&self) -> bool {
        self.inventories_elsewhere.is_empty()
            && self.revisions_other.is_empty()
            && self.revisions_changed == self.changed.len()
            && self.unexpected_kinds.is_empty()
    }
}

#[derive(Default)]
struct MooninResult {
    warm_secs: f64,
    warm: Usage,
    warm_scrape: Scrape,
    /// What the ClusterDiscovery status counted when warm: (Nodes in node groups,
    /// Deployments, namespaces).
    seen: (i64, i64, i64),
    settle_secs: f64,
    steady_secs: f64,
    steady: Scrape,
    /// The manager's warnings during the steady window, by message.
    steady_warnings: BTreeMap<String, usize>,
    /// Of the steady window's list requests, retries of an initial list that failed.
    steady_failed_lists: usize,
    after_steady: Usage,
    change: ChangeReport,
    end: Usage,
    discovery: String,
    log: String,
    log_warnings: usize,
    log_errors: usize,
    machine: Vec<(String, String)>,
    others: Option<String>,
}

/// The ClusterDiscovery to use: the benchmark's own (created fresh), or an existing one
/// whose status is cleared so that warm-up is judged on what this manager writes.
/// (name, created by the benchmark).
async fn ensure_discovery(client: &Client, p: &Params) -> Result<(String, bool), String> {
    let api: Api<ClusterDiscovery> = Api::all(client.clone());
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing ClusterDiscoveries: {e}"))?
        .items;
    let ours =
        |c: &ClusterDiscovery| c.labels().get(LABEL_KEY).map(String::as_str) == Some(LABEL_VALUE);
    let mut foreign: Vec<&ClusterDiscovery> = all
        .iter()
        .filter(|c| !ours(c) && c.metadata.deletion_timestamp.is_none())
        .collect();
    foreign.sort_by_key(|c| (c.creation_timestamp().map(|t| t.0), c.name_any()));
    if let Some(cd) = foreign.first() {
        let name = cd.name_any();
        let excluded: Vec<String> = (0..p.namespaces)
            .map(namespace_name)
            .filter(|n| cd.spec.exclude_namespaces.contains(n))
            .collect();
        if !excluded.is_empty() {
            return Err(format!(
                "the existing ClusterDiscovery {name} excludes benchmark namespaces ({})",
                excluded.join(", ")
            ));
        }
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .map_err(|e| format!("clearing the status of ClusterDiscovery {name}: {e}"))?;
        return Ok((name, false));
    }
    // A leftover of an interrupted run: start from a fresh one.
    for c in all.iter().filter(|c| ours(c)) {
        let _ = api.delete(&c.name_any(), &DeleteParams::default()).await;
    }
    wait::until_none_left(
        "an earlier benchmark ClusterDiscovery to go",
        &api,
        &ListParams::default().labels(SELECTOR),
        Instant::now() + Duration::from_secs(60),
        POLL,
    )
    .await?;
    let cd: ClusterDiscovery = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterDiscovery",
        "metadata": {"name": DISCOVERY, "labels": labels()},
        "spec": {"clusterName": "bench", "helm": {"enabled": false}}
    }))
    .expect("ClusterDiscovery");
    api.create(&PostParams::default(), &cd)
        .await
        .map_err(|e| format!("creating ClusterDiscovery {DISCOVERY}: {e}"))?;
    Ok((DISCOVERY.to_string(), true))
}

fn condition_true(cd: &ClusterDiscovery, type_: &str) -> bool {
    cd.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// (namespace, name) → resourceVersion of every NamespaceInventory.
async fn inventory_versions(client: &Client) -> Result<BTreeMap<(String, String), String>, String> {
    let api: Api<NamespaceInventory> = Api::all(client.clone());
    Ok(api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("listing NamespaceInventories: {e}"))?
        .items
        .iter()
        .map(|i| {
            (
                (i.namespace().unwrap_or_default(), i.name_any()),
                i.resource_version().unwrap_or_default(),
            )
        })
        .collect())
}

async fn measure_moonin(
    client: &Client,
    p: &Params,
    discovery: &str,
    slot: &mut Option<Manager>,
    result: &mut MooninResult,
) -> Result<(), String> {
    let mut ns = TestNamespace::new(client, "bench-discovery").await;
    let extra: &[&str] = if p.helm_rbac {
        &["config/rbac-helm"]
    } else {
        &[]
    };
    let seat = ManagerSeat::new(&mut ns, extra);
    let outcome = measure_manager(client, p, discovery, &seat, slot, result).await;
    if let Some(m) = slot.as_mut() {
        bench_manager::stop(m).await;
        result.log = m.log.display().to_string();
        (result.log_warnings, result.log_errors) = bench_manager::log_levels(&m.log_text());
    }
    *slot = None;
    drop(ns);
    drop(seat);
    outcome
}

async fn measure_manager(
    client: &Client,
    p: &Params,
    discovery: &str,
    seat: &ManagerSeat,
    slot: &mut Option<Manager>,
    r: &mut MooninResult,
) -> Result<(), String> {
    let identity = seat.identity.as_str();
    let cds: Api<ClusterDiscovery> = Api::all(client.clone());
    let bench_namespaces: BTreeSet<String> = (0..p.namespaces).map(namespace_name).collect();
    r.machine
        .push(("before the manager starts".into(), machine_note(identity)));

    // 1. Warm-up: process start → InventoryComplete and an inventory in every namespace of
    //    the benchmark.
    let launched = Instant::now();
    let manager = seat.start("discovery", &["--cluster-name", "bench"]).await;
    let addr = manager.addr;
    *slot = Some(manager);
    let pid = process::pid_of(identity)?;
    progress(&format!("manager pid {pid} serves {addr}; warming up"));
    let deadline = launched + Duration::from_secs(p.warmup_timeout_secs);
    let mut last_print = Instant::now();
    loop {
        if let Ok(cd) = cds.get(discovery).await
            && condition_true(&cd, "InventoryComplete")
        {
            let have: BTreeSet<String> = inventory_versions(client)
                .await?
                .into_keys()
                .filter(|(_, name)| name == "inventory")
                .map(|(ns, _)| ns)
                .collect();
            if bench_namespaces.is_subset(&have) {
                r.warm_secs = launched.elapsed().as_secs_f64();
                r.warm = usage(pid);
                let status = cd.status.unwrap_or_default();
                r.seen = (
                    status.node_groups.iter().map(|g| i64::from(g.count)).sum(),
                    status
                        .totals
                        .as_ref()
                        .map_or(0, |t| i64::from(t.deployments)),
                    status
                        .totals
                        .as_ref()
                        .map_or(0, |t| i64::from(t.namespaces)),
                );
                break;
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the manager was not warm after {} s (MOONIN_BENCH_WARMUP_TIMEOUT_SECS)",
                p.warmup_timeout_secs
            ));
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            let s = scrape(addr).await.unwrap_or_default();
            let u = usage(pid);
            progress(&format!(
                "warming up {:.0} s: requests {}; writes {}; RSS {}",
                launched.elapsed().as_secs_f64(),
                by_verb(&s, 1.0),
                breakdown(&s.writes, 1.0, "0"),
                mib(u.rss_kib)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    r.warm_scrape = scrape_retrying(addr).await?;
    progress(&format!(
        "warm after {:.1} s: RSS {} (peak {}), requests {}, writes {}",
        r.warm_secs,
        mib(r.warm.rss_kib),
        mib(r.warm.hwm_kib),
        by_verb(&r.warm_scrape, 1.0),
        by_kind(&r.warm_scrape.writes, 1.0)
    ));
    r.machine.push(("warm".into(), machine_note(identity)));

    // 2. Let the last rebuilds finish, then the steady state.
    let settle_started = Instant::now();
    let mut last = r.warm_scrape.writes_except(HEARTBEAT_KIND);
    let mut moved = Instant::now();
    while moved.elapsed() < QUIET && settle_started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(s) = scrape(addr).await
            && s.writes_except(HEARTBEAT_KIND) != last
        {
            last = s.writes_except(HEARTBEAT_KIND);
            moved = Instant::now();
        }
    }
    r.settle_secs = settle_started.elapsed().as_secs_f64();
    let before = scrape_retrying(addr).await?;
    let steady_started = Instant::now();
    let steady_from = Timestamp::now();
    progress(&format!(
        "steady state for {} s (after {:.1} s settling)",
        p.steady_secs, r.settle_secs
    ));
    let end = steady_started + Duration::from_secs(p.steady_secs);
    while Instant::now() < end {
        let left = end.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_secs(30))).await;
        if Instant::now() < end {
            let s = scrape(addr).await.unwrap_or_default().minus(&before);
            progress(&format!(
                "  {:.0} s: requests {}; writes {}",
                steady_started.elapsed().as_secs_f64(),
                by_verb(&s, 1.0),
                by_kind(&s.writes, 1.0)
            ));
        }
    }
    let after = scrape_retrying(addr).await?;
    r.steady_secs = steady_started.elapsed().as_secs_f64();
    r.steady = after.minus(&before);
    r.after_steady = usage(pid);
    if let Some(m) = slot.as_ref() {
        let window = Some((steady_from, Timestamp::now()));
        // The user name, which differs per run, follows " User ".
        r.steady_warnings = bench_manager::problems(&m.log_text(), window, " User ");
        r.steady_failed_lists = r
            .steady_warnings
            .iter()
            .filter(|(k, _)| k.contains("failed to perform initial object list"))
            .map(|(_, n)| n)
            .sum();
    }
    r.machine
        .push(("end of the steady state".into(), machine_note(identity)));

    // 3. K image changes, in distinct namespaces where possible.
    let versions_before = inventory_versions(client).await?;
    let tag = Timestamp::now().as_second();
    let change_started = Instant::now();
    let since = Timestamp::now();
    let mut changed = Vec::new();
    for i in p.changed() {
        let (name, ns, _) = placement(p, i);
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": format!("registry.example/bench/svc-{}:run-{tag}", i % 200)}
        ]}}}});
        api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(|e| format!("changing the image of {ns}/{name}: {e}"))?;
        changed.push((ns, name));
    }
    let k = changed.len() as f64;
    progress(&format!(
        "changed the image of {} Deployments",
        changed.len()
    ));
    let mut last = after.writes_except(HEARTBEAT_KIND);
    let mut moved = Instant::now();
    let mut settled = false;
    while change_started.elapsed() < Duration::from_secs(180) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(s) = scrape(addr).await else {
            continue;
        };
        if s.writes_except(HEARTBEAT_KIND) != last {
            last = s.writes_except(HEARTBEAT_KIND);
            moved = Instant::now();
        }
        let revisions = s.minus(&after).write("WorkloadRevision");
        if revisions >= k && moved.elapsed() >= QUIET {
            settled = true;
            break;
        }
    }
    let done = scrape_retrying(addr).await?;
    let mut c = ChangeReport {
        writes: done.minus(&after),
        secs: change_started.elapsed().as_secs_f64(),
        settled,
        ..Default::default()
    };
    let touched: BTreeSet<String> = changed.iter().map(|(ns, _)| ns.clone()).collect();
    for (key, version) in inventory_versions(client).await? {
        if versions_before.get(&key) != Some(&version) {
            if touched.contains(&key.0) {
                c.inventories_touched.insert(key.0);
            } else {
                c.inventories_elsewhere.insert(key.0);
            }
        }
    }
    let revisions: Api<WorkloadRevision> = Api::all(client.clone());
    for rev in revisions
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing WorkloadRevisions: {e}"))?
        .items
    {
        let new = rev
            .creation_timestamp()
            .is_some_and(|t| t.0 >= since - jiff::SignedDuration::from_secs(1));
        if !new {
            continue;
        }
        let key = (
            rev.namespace().unwrap_or_default(),
            rev.spec.workload.name.clone(),
        );
        if changed.contains(&key) {
            c.revisions_changed += 1;
        } else {
            c.revisions_other
                .push(format!("{}/{}", key.0, rev.name_any()));
        }
    }
    c.unexpected_kinds = c
        .writes
        .writes
        .keys()
        .filter(|k| !CHANGE_KINDS.contains(&k.as_str()) && k.as_str() != HEARTBEAT_KIND)
        .cloned()
        .collect();
    c.changed = changed;
    progress(&format!(
        "the changes settled after {:.1} s: writes {}",
        c.secs,
        by_kind(&c.writes.writes, 1.0)
    ));
    r.change = c;
    r.end = usage(pid);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// kube-state-metrics.

#[derive(Default)]
struct KsmResult {
    version: String,
    /// Seconds spent building it in this run (None: it was in the cache).
    build_secs: Option<f64>,
    /// Process start → the first watch of every resource it lists (each initial list done
    /// and stored).
    warm_secs: f64,
    warm: Usage,
    /// Process start → /metrics showing the benchmark's Pods, Deployments and Nodes.
    confirmed_secs: f64,
    /// After the /metrics scrapes that confirmed it.
    after_scrape: Usage,
    /// kube_node_info, kube_deployment_created, kube_pod_info lines.
    seen: (usize, usize, usize),
    /// kube_state_metrics_{list,watch}_total until warm, and over the steady window.
    warm_lists: f64,
    warm_watches: f64,
    resources: usize,
    steady_secs: f64,
    steady_lists: f64,
    steady_watches: f64,
    end: Usage,
    log: String,
}

/// The kube-state-metrics process, stopped when dropped.
struct Ksm {
    child: Child,
}

impl Drop for Ksm {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kube_state_metrics_{list,watch}_total with result="success", by resource.
#[derive(Default, Clone)]
struct KsmTelemetry {
    lists: BTreeMap<String, f64>,
    watches: BTreeMap<String, f64>,
}

impl KsmTelemetry {
    fn parse(body: &str) -> Self {
        let mut t = KsmTelemetry::default();
        for line in body.lines() {
            let Some(v) = value(line) else { continue };
            let map = if line.starts_with("kube_state_metrics_list_total{") {
                &mut t.lists
            } else if line.starts_with("kube_state_metrics_watch_total{") {
                &mut t.watches
            } else {
                continue;
            };
            if label(line, "result") == "success" {
                *map.entry(label(line, "resource").to_string()).or_default() += v;
            }
        }
        t
    }

    /// Every resource it listed has a watch open: its store is filled.
    fn warm(&self) -> bool {
        ["*v1.Pod", "*v1.Deployment", "*v1.Node"]
            .iter()
            .all(|r| self.lists.contains_key(*r))
            && self
                .lists
                .keys()
                .all(|r| self.watches.get(r).is_some_and(|w| *w >= 1.0))
    }

    fn total(m: &BTreeMap<String, f64>) -> f64 {
        m.values().sum()
    }
}

async fn telemetry(addr: SocketAddr) -> Option<KsmTelemetry> {
    get_parsed(addr, "/metrics", KsmTelemetry::parse).await
}

fn ksm_script() -> PathBuf {
    common::root().join("e2e/kube-state-metrics")
}

async fn measure_ksm(p: &Params, setup: &Setup, r: &mut KsmResult) -> Result<(), String> {
    let script = ksm_script();
    r.version = Command::new(&script)
        .arg("version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cache = std::env::var("MOONIN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache")
                })
                .join("moonin")
        });
    let cached = cache
        .join("bin")
        .join(format!("kube-state-metrics-{}", r.version))
        .exists();
    if !cached {
        progress(&format!(
            "building kube-state-metrics {} (e2e/kube-state-metrics --build; several minutes the first time)",
            r.version
        ));
    }
    let started = Instant::now();
    let built = tokio::task::spawn_blocking(move || Command::new(script).arg("--build").status())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("e2e/kube-state-metrics --build: {e}"))?;
    if !built.success() {
        return Err(format!("e2e/kube-state-metrics --build failed ({built})"));
    }
    if !cached {
        r.build_secs = Some(started.elapsed().as_secs_f64());
    }

    let kubeconfig = std::env::var("KUBECONFIG")
        .ok()
        .and_then(|k| k.split(':').next().map(str::to_string))
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| format!("{}/.kube/config", std::env::var("HOME").unwrap_or_default()));
    let (port, telemetry_port) = (free_port()?, free_port()?);
    let log =
        std::env::temp_dir().join(format!("moonin-bench-ksm-{}.log", harness::random_suffix()));
    r.log = log.display().to_string();
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let launched = Instant::now();
    let child = Command::new(ksm_script())
        .args([
            "run",
            "--kubeconfig",
            &kubeconfig,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--telemetry-host",
            "127.0.0.1",
            "--telemetry-port",
            &telemetry_port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("starting kube-state-metrics: {e}"))?;
    // `run` execs the binary: this is its process id.
    let pid = child.id();
    let ksm = Ksm { child };
    let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
    let telemetry_addr: SocketAddr = ([127, 0, 0, 1], telemetry_port).into();
    progress(&format!(
        "kube-state-metrics {} pid {pid} on :{port} (telemetry :{telemetry_port}); warming up",
        r.version
    ));

    let deadline = launched + Duration::from_secs(p.warmup_timeout_secs);
    let mut last_print = Instant::now();
    let warm_t = loop {
        if let Some(t) = telemetry(telemetry_addr).await
            && t.warm()
        {
            r.warm_secs = launched.elapsed().as_secs_f64();
            r.warm = usage(pid);
            break t;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "kube-state-metrics was not warm after {} s (log: {})",
                p.warmup_timeout_secs, r.log
            ));
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            progress(&format!(
                "  kube-state-metrics warming up {:.0} s: RSS {}",
                launched.elapsed().as_secs_f64(),
                mib(usage(pid).rss_kib)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    r.warm_lists = KsmTelemetry::total(&warm_t.lists);
    r.warm_watches = KsmTelemetry::total(&warm_t.watches);
    r.resources = warm_t.lists.len();
    progress(&format!(
        "kube-state-metrics warm after {:.1} s ({} resources listed): RSS {} (peak {})",
        r.warm_secs,
        r.resources,
        mib(r.warm.rss_kib),
        mib(r.warm.hwm_kib)
    ));

    // Its /metrics must show the benchmark's objects.
    let prefixes = [
        "kube_node_info{",
        "kube_deployment_created{",
        "kube_pod_info{",
    ];
    loop {
        let counts =
            tokio::task::spawn_blocking(move || count_lines(metrics, "/metrics", &prefixes))
                .await
                .ok()
                .flatten();
        if let Some(c) = counts {
            r.seen = (c[0], c[1], c[2]);
            if c[0] >= setup.nodes_ready
                && c[1] >= setup.deployments_present
                && c[2] >= setup.pods_running
            {
                r.confirmed_secs = launched.elapsed().as_secs_f64();
                break;
            }
        }
        if Instant::now() >= deadline {
            progress("kube-state-metrics' /metrics never showed every benchmark object; going on");
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    r.after_scrape = usage(pid);

    // The same steady window as Moonin's: does it relist?
    let before = telemetry(telemetry_addr).await.unwrap_or_default();
    let started = Instant::now();
    progress(&format!(
        "kube-state-metrics steady state for {} s",
        p.steady_secs
    ));
    tokio::time::sleep(Duration::from_secs(p.steady_secs)).await;
    let after = telemetry(telemetry_addr).await.unwrap_or_default();
    r.steady_secs = started.elapsed().as_secs_f64();
    r.steady_lists = KsmTelemetry::total(&after.lists) - KsmTelemetry::total(&before.lists);
    r.steady_watches = KsmTelemetry::total(&after.watches) - KsmTelemetry::total(&before.watches);
    r.end = usage(pid);
    drop(ksm);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The report.

fn by_verb(s: &Scrape, per: f64) -> String {
    let parts: Vec<String> = VERBS
        .iter()
        .map(|v| (v, s.request(v) * per))
        .filter(|(_, n)| *n != 0.0)
        .map(|(v, n)| format!("{v} {}", num(n)))
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(", ")
    }
}

/// Writes by kind, `0` for none.
fn by_kind(m: &BTreeMap<String, f64>, per: f64) -> String {
    breakdown(m, per, "0")
}

fn print_header(p: &Params, version: &str) {
    println!("# Moonin discovery footprint");
    println!();
    println!("- command: `{}`", p.command());
    println!(
        "- target: {} kwok Nodes, {} Deployments × {} replicas = {} Pods, in {} namespaces; steady window {} s; {} image changes",
        p.nodes,
        p.deployments,
        p.pods_per_deployment,
        p.pods(),
        p.namespaces,
        p.steady_secs,
        p.changed().len()
    );
    machine::print_header_lines(version, "");
}

fn print_setup(p: &Params, s: &Setup) {
    println!();
    println!("## Cluster");
    println!();
    println!("| | target | reached | created now | already there | seconds |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| kwok Nodes (Ready) | {} | {} | {} | {} | {:.1} |",
        p.nodes, s.nodes_ready, s.nodes.0, s.nodes.1, s.nodes_secs
    );
    println!(
        "| namespaces | {} | {} | {} | {} | {:.1} |",
        p.namespaces,
        s.namespaces.0 + s.namespaces.1,
        s.namespaces.0,
        s.namespaces.1,
        s.namespaces_secs
    );
    println!(
        "| Deployments | {} | {} | {} | {} | {:.1} (creates) |",
        p.deployments, s.deployments_present, s.deployments.0, s.deployments.1, s.deployments_secs
    );
    println!(
        "| Pods Running | {} | {} (of {} seen) | — | — | {:.1} (first create → target){} |",
        p.pods(),
        s.pods_running,
        s.pods_seen,
        s.running_secs,
        if s.timed_out { ", TIMED OUT" } else { "" }
    );
    println!();
    if s.deployments.0 > 0 {
        println!(
            "Setup took {:.1} s in all; per 1,000 Deployments created (with {} Pods each): {:.1} s of creates, {:.1} s until their Pods ran.",
            s.total_secs,
            p.pods_per_deployment,
            s.deployments_secs / s.deployments.0 as f64 * 1000.0,
            s.running_secs / s.deployments.0 as f64 * 1000.0
        );
    } else {
        println!(
            "Setup took {:.1} s in all: every object was there from an earlier run and was reused.",
            s.total_secs
        );
    }
}

fn print_report(p: &Params, setup: &Setup, m: &Option<MooninResult>, k: &Option<KsmResult>) {
    print_setup(p, setup);
    println!();
    println!("## Footprint");
    println!();
    let na = || "n/a".to_string();
    let mcell = |f: &dyn Fn(&MooninResult) -> String| m.as_ref().map_or_else(na, f);
    let kcell = |f: &dyn Fn(&KsmResult) -> String| k.as_ref().map_or_else(na, f);
    println!("| figure | Moonin | kube-state-metrics |");
    println!("|---|---|---|");
    let row = |name: &str, a: String, b: String| println!("| {name} | {a} | {b} |");
    row(
        "cluster seen when warm: Nodes / Deployments / Pods",
        mcell(&|m| {
            format!(
                "{} / {} / — (ClusterDiscovery: Nodes in node groups, Deployments; {} namespaces)",
                m.seen.0, m.seen.1, m.seen.2
            )
        }),
        kcell(&|k| {
            format!(
                "{} / {} / {} (kube_node_info, kube_deployment_created, kube_pod_info lines)",
                k.seen.0, k.seen.1, k.seen.2
            )
        }),
    );
    row(
        "warm-up time (process start → warm)",
        mcell(&|m| {
            format!(
                "{:.1} s (InventoryComplete, every benchmark namespace inventoried)",
                m.warm_secs
            )
        }),
        kcell(&|k| {
            format!(
                "{:.1} s (every resource listed and watched); /metrics confirmed at {:.1} s",
                k.warm_secs, k.confirmed_secs
            )
        }),
    );
    row(
        "RSS after warm-up (VmRSS)",
        mcell(&|m| mib(m.warm.rss_kib)),
        kcell(&|k| format!("{} (before any /metrics scrape)", mib(k.warm.rss_kib))),
    );
    row(
        "peak RSS during warm-up (VmHWM)",
        mcell(&|m| mib(m.warm.hwm_kib)),
        kcell(&|k| mib(k.warm.hwm_kib)),
    );
    row(
        "RSS later (VmRSS / VmHWM)",
        mcell(&|m| {
            format!(
                "{} / {} (after the image changes)",
                mib(m.end.rss_kib),
                mib(m.end.hwm_kib)
            )
        }),
        kcell(&|k| {
            format!(
                "{} / {} (after the /metrics scrapes that confirmed warm-up); {} / {} at the end",
                mib(k.after_scrape.rss_kib),
                mib(k.after_scrape.hwm_kib),
                mib(k.end.rss_kib),
                mib(k.end.hwm_kib)
            )
        }),
    );
    row(
        "CPU time during warm-up",
        mcell(&|m| format!("{:.1} s", m.warm.cpu_secs)),
        kcell(&|k| format!("{:.1} s", k.warm.cpu_secs)),
    );
    for verb in VERBS {
        row(
            &format!("API requests during warm-up: {verb}"),
            mcell(&|m| num(m.warm_scrape.request(verb))),
            kcell(&|k| match verb {
                "list" => format!("{} (pages, {} resources)", num(k.warm_lists), k.resources),
                "watch" => num(k.warm_watches),
                _ => "n/a".into(),
            }),
        );
    }
    row(
        "writes during warm-up (by kind)",
        mcell(&|m| by_kind(&m.warm_scrape.writes, 1.0)),
        kcell(&|_| "0 (read-only)".into()),
    );
    for verb in VERBS {
        row(
            &format!("steady state: {verb} requests/min"),
            mcell(&|m| num(m.steady.request(verb) * 60.0 / m.steady_secs)),
            kcell(&|k| match verb {
                "list" => num(k.steady_lists * 60.0 / k.steady_secs),
                "watch" => num(k.steady_watches * 60.0 / k.steady_secs),
                _ => "n/a".into(),
            }),
        );
    }
    row(
        "steady state: writes/min (by kind)",
        mcell(&|m| by_kind(&m.steady.writes, 60.0 / m.steady_secs)),
        kcell(&|_| "0 (read-only)".into()),
    );
    row(
        "relists in steady state (list requests during the window; goal 0)",
        mcell(&|m| {
            let failed = if m.steady_failed_lists > 0 {
                format!(
                    " ({} of them retries of an initial list that failed; see Notes)",
                    m.steady_failed_lists
                )
            } else {
                String::new()
            };
            format!(
                "{} in {:.0} s{failed}",
                num(m.steady.request("list")),
                m.steady_secs
            )
        }),
        kcell(&|k| format!("{} in {:.0} s", num(k.steady_lists), k.steady_secs)),
    );
    row(
        "writes after the image changes (by kind)",
        mcell(&|m| {
            format!(
                "{} ({} changes, settled after {:.1} s{})",
                by_kind(&m.change.writes.writes, 1.0),
                m.change.changed.len(),
                m.change.secs,
                if m.change.settled {
                    ""
                } else {
                    ", NOT settled"
                }
            )
        }),
        kcell(&|_| "n/a".into()),
    );
    let ratio = match (m, k) {
        (Some(m), Some(k)) if k.warm.rss_kib > 0 => Some((
            m.warm.rss_kib as f64 / k.warm.rss_kib as f64,
            m.warm.rss_kib as f64 / k.after_scrape.rss_kib.max(1) as f64,
        )),
        _ => None,
    };
    match ratio {
        Some((r, r_scraped)) => row(
            &format!("RSS ratio Moonin / kube-state-metrics (goal ≤ {RSS_GOAL})"),
            format!(
                "{r:.3} — {} (against kube-state-metrics before any scrape; {r_scraped:.3} against it after one)",
                if r <= RSS_GOAL { "met" } else { "not met" }
            ),
            String::new(),
        ),
        None => row(
            &format!("RSS ratio Moonin / kube-state-metrics (goal ≤ {RSS_GOAL})"),
            "n/a".into(),
            String::new(),
        ),
    }

    if let Some(m) = m {
        let c = &m.change;
        println!();
        println!("## After the image changes");
        println!();
        println!(
            "- changed: {}",
            c.changed
                .iter()
                .map(|(ns, n)| format!("{ns}/{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let touched: BTreeSet<&String> = c.changed.iter().map(|(ns, _)| ns).collect();
        println!(
            "- inventories rewritten: {} of the {} touched namespaces; {} elsewhere{}",
            c.inventories_touched.len(),
            touched.len(),
            c.inventories_elsewhere.len(),
            listing(&c.inventories_elsewhere.iter().cloned().collect::<Vec<_>>())
        );
        println!(
            "- NamespaceInventory/status writes: {} for {} touched namespaces (a rollout changes replica counts several times, each a rebuild after {} ms of quiet)",
            num(c.writes.write("NamespaceInventory/status")),
            touched.len(),
            500
        );
        println!(
            "- WorkloadRevisions created since the change: {} for the changed Deployments (expected {}), {} for others{}; WorkloadRevision writes counted: {}",
            c.revisions_changed,
            c.changed.len(),
            c.revisions_other.len(),
            listing(&c.revisions_other),
            num(c.writes.write("WorkloadRevision"))
        );
        if !c.unexpected_kinds.is_empty() {
            println!("- other kinds written: {}", c.unexpected_kinds.join(", "));
        }
        println!(
            "- writes for changed objects only: {} (the heartbeat Lease, renewed every 10 s by design, is not counted)",
            if c.only_changed() { "yes" } else { "no" }
        );

        println!();
        println!("## Notes");
        println!();
        println!(
            "- Moonin: `moonin run --controllers discovery` (release build), impersonating the ServiceAccount with config/rbac{}; ClusterDiscovery `{}`; settled {:.1} s after warm-up before the steady window; manager log: {} ({} warnings, {} errors)",
            if p.helm_rbac {
                " and config/rbac-helm (MOONIN_BENCH_HELM_RBAC=1)"
            } else {
                " only (MOONIN_BENCH_HELM_RBAC=1 adds the opt-in config/rbac-helm)"
            },
            m.discovery,
            m.settle_secs,
            m.log,
            m.log_warnings,
            m.log_errors
        );
        println!(
            "- Moonin's warm-up writes include one WorkloadRevision (create + status) per Deployment seen for the first time at its current revision: {} creates this run (0 when an earlier run recorded them)",
            num(m.warm_scrape.write("WorkloadRevision"))
        );
        if m.steady_warnings.is_empty() {
            println!("- the manager logged no warnings during the steady window");
        } else {
            println!("- the manager's warnings during the steady window:");
            for (msg, n) in &m.steady_warnings {
                println!("  - {n}× {msg}");
            }
        }
        println!(
            "- Moonin RSS after the steady window: {} (VmHWM {})",
            mib(m.after_steady.rss_kib),
            mib(m.after_steady.hwm_kib)
        );
        for (when, note) in &m.machine {
            println!("- the machine {when}: {note}");
        }
        if let Some(o) = &m.others {
            println!("- WARNING: {o}");
        }
    }
    if let Some(k) = k {
        println!(
            "- kube-state-metrics {} (`e2e/kube-state-metrics`, default resources: it lists and watches {} kinds, Secrets and ConfigMaps included, with the admin kubeconfig){}; log: {}",
            k.version,
            k.resources,
            k.build_secs
                .map(|s| format!("; built in this run in {s:.0} s"))
                .unwrap_or_default(),
            k.log
        );
    }
}

// ---------------------------------------------------------------------------------------
// The run.

async fn run() -> ExitCode {
    let params = match Params::from_env() {
        Ok(p) => p,
        Err(e) => return plane::bad_parameters("discovery_footprint", &e),
    };
    let Some(client) = plane::connect("discovery_footprint").await else {
        return ExitCode::from(2);
    };
    let version = plane::server_version(&client).await;
    print_header(&params, &version);

    let mut setup_result = Setup::default();
    let mut moonin: Option<MooninResult> = None;
    let mut ksm: Option<KsmResult> = None;
    let mut manager: Option<Manager> = None;
    let mut discovery: Option<(String, bool)> = None;
    let mut errors: Vec<String> = Vec::new();
    let work = async {
        setup_result = setup(&client, &params).await?;
        let others = wait_for_no_manager(&params).await;
        harness::install_crds(&client).await;
        let d = ensure_discovery(&client, &params).await?;
        discovery = Some(d.clone());
        let mut m = MooninResult {
            discovery: if d.1 {
                format!("{} (created by the benchmark, deleted at the end)", d.0)
            } else {
                format!(
                    "{} (existing; its status was cleared before the manager started)",
                    d.0
                )
            },
            others,
            ..Default::default()
        };
        let outcome = measure_moonin(&client, &params, &d.0, &mut manager, &mut m).await;
        moonin = Some(m);
        if let Err(e) = outcome {
            errors.push(format!("Moonin: {e}"));
        }
        if params.ksm {
            let mut k = KsmResult::default();
            match measure_ksm(&params, &setup_result, &mut k).await {
                Ok(()) => ksm = Some(k),
                Err(e) => errors.push(format!("kube-state-metrics: {e}")),
            }
        }
        Ok::<(), String>(())
    };
    let outcome = or_interrupted(work).await;
    drop(manager.take());
    if let Err(e) = outcome {
        errors.push(e);
    }
    print_report(&params, &setup_result, &moonin, &ksm);
    for e in &errors {
        eprintln!("discovery_footprint: {e}");
        println!();
        println!("ERROR: {e}");
    }
    cleanup(&client, &params, discovery).await;
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

/// Deletes the benchmark's ClusterDiscovery (its inventories go with it) and, with
/// `MOONIN_BENCH_CLEANUP=1`, the namespaces and Nodes.
async fn cleanup(client: &Client, p: &Params, discovery: Option<(String, bool)>) {
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
    let names: Vec<String> = namespaces
        .list_metadata(&ListParams::default().labels(SELECTOR))
        .await
        .map(|l| l.items.iter().map(|n| n.name_any()).collect())
        .unwrap_or_default();
    progress(&format!("cleanup: deleting {} namespaces", names.len()));
    stream::iter(names)
        .for_each_concurrent(CREATE_CONCURRENCY, |n| {
            let namespaces = namespaces.clone();
            async move {
                let _ = namespaces.delete(&n, &DeleteParams::default()).await;
            }
        })
        .await;
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
    let node_names: Vec<String> = nodes
        .list_metadata(&ListParams::default().labels(SELECTOR))
        .await
        .map(|l| l.items.iter().map(|n| n.name_any()).collect())
        .unwrap_or_default();
    progress(&format!("cleanup: deleting {} Nodes", node_names.len()));
    stream::iter(node_names)
        .for_each_concurrent(CREATE_CONCURRENCY, |n| {
            let nodes = nodes.clone();
            async move {
                let _ = nodes.delete(&n, &DeleteParams::default()).await;
            }
        })
        .await;
    progress(&format!(
        "cleanup done in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    println!();
    println!("Setup objects deleted (MOONIN_BENCH_CLEANUP=1).");
}
