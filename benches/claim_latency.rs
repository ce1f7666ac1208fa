//! Claim latency (TESTING.md, "Benchmarks"; issue 4, "Benchmark"): a warm pool of sandbox
//! Pods on kwok Nodes, claims at a steady rate, Moonin and agent-sandbox side by side.
//!
//! For each system in turn (never both controllers at once: Moonin's manager is stopped
//! before `e2e/agent-sandbox start`, and agent-sandbox is stopped at the end):
//!
//! 1. for each rate: a fresh namespace and a warm pool of `MOONIN_BENCH_POOL` Pods
//!    (Moonin: a SandboxEnv with one local member, `recyclePolicy: Replace`; agent-sandbox:
//!    a SandboxTemplate and a SandboxWarmPool), waited until every Pod is idle and Ready;
//!    then claims at that rate for `MOONIN_BENCH_SECONDS`. Each claim is deleted as soon as
//!    it is seen bound (its sandbox is released: Moonin replaces the Pod, agent-sandbox
//!    deletes the adopted Sandbox while its warm pool replenishes), so a pool of N serves a
//!    steady stream without an autoscaler;
//! 2. the dry pool: a pool of 5, 10 claims at once (none released); the time from issuing
//!    them to the first Pod that was not in the pool being Ready.
//!
//! Latency is measured in this process from the claim's create call *returning* to the
//! arrival of the first watch event showing the claim bound (Moonin: `status.phase ==
//! Bound`; agent-sandbox: `Ready=True` and `status.sandbox.name` set). The create round trip
//! is printed separately. Pods are counted from ADDED events (distinct UIDs) of a Pod watch
//! on the namespace.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench claim_latency
//! MOONIN_BENCH_POOL=20 MOONIN_BENCH_SECONDS=10 MOONIN_BENCH_RATES=20,50 cargo bench --bench claim_latency
//! MOONIN_BENCH_SYSTEMS=moonin cargo bench --bench claim_latency   # one system only
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

#[allow(dead_code)]
mod shared;
use shared::{common, harness};

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    process::{Command, ExitCode},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams},
    core::GroupVersionKind,
    runtime::watcher,
};
use serde_json::{Value, json};

use harness::{Manager, TestNamespace};
use shared::{
    http::{get_parsed, http_get},
    machine::wait_until_quiet,
    manager::{ManagerSeat, wait_until_leading},
    metrics::{Counters, label, sum},
    params::{command_line, positive},
    plane,
    process::{listed, moonin_managers},
    report::progress,
    stats::{Stats, ms, stats},
    wait,
    watch::{self, Seen as Event},
};

/// Pods in the pool of the dry phase, and claims issued at once against it.
const DRY_POOL: usize = 5;
const DRY_CLAIMS: usize = 10;
/// agent-sandbox's CI gate (simulated nodes, 75 claims/s).
const GATE: &str = "agent-sandbox CI gate (reference): p50 ≤ 300 ms and p99 ≤ 500 ms at 75 claims/s on simulated nodes";
const AS_GROUP: &str = "extensions.agents.x-k8s.io";
const AS_VERSION: &str = "v1beta1";

/// A numeric figure read from one rate's result (for the ratio column).
type RateFigure<'a> = &'a dyn Fn(&RateResult) -> Option<f64>;
/// A rendered figure of the dry-pool phase.
type DryFigure<'a> = &'a dyn Fn(&DryResult) -> String;

/// How often the benchmark looks again at what it waits for.
const POLL: Duration = Duration::from_millis(100);

fn main() -> ExitCode {
    plane::main("claim_latency", 4, "", run)
}

// ---------------------------------------------------------------------------------------
// Parameters.

struct Params {
    pool: usize,
    seconds: u64,
    rates: Vec<u32>,
    systems: Vec<System>,
    /// How long to wait for other managers / agent-sandbox to go away first.
    quiet_secs: u64,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        let rates = match std::env::var("MOONIN_BENCH_RATES") {
            Err(_) => vec![20, 50],
            // Only the dry-pool phase.
            Ok(v) if v.trim() == "none" => Vec::new(),
            Ok(v) => v
                .split(',')
                .map(|r| match r.trim().parse::<u32>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!(
                        "MOONIN_BENCH_RATES={v:?}: expected positive integers separated by commas"
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        let systems = match std::env::var("MOONIN_BENCH_SYSTEMS") {
            Err(_) => vec![System::Moonin, System::AgentSandbox],
            Ok(v) => v
                .split(',')
                .map(|s| match s.trim() {
                    "moonin" => Ok(System::Moonin),
                    "agent-sandbox" => Ok(System::AgentSandbox),
                    other => Err(format!(
                        "MOONIN_BENCH_SYSTEMS: {other:?} is not moonin or agent-sandbox"
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            pool: positive("MOONIN_BENCH_POOL", 200)? as usize,
            seconds: positive("MOONIN_BENCH_SECONDS", 60)?,
            rates,
            systems,
            quiet_secs: positive("MOONIN_BENCH_QUIET_WAIT_SECS", 300)?,
        })
    }

    fn command(&self) -> String {
        command_line(
            "claim_latency",
            &[
                "MOONIN_BENCH_POOL",
                "MOONIN_BENCH_SECONDS",
                "MOONIN_BENCH_RATES",
                "MOONIN_BENCH_SYSTEMS",
                "MOONIN_BENCH_QUIET_WAIT_SECS",
            ],
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Moonin,
    AgentSandbox,
}

impl System {
    fn label(self) -> &'static str {
        match self {
            System::Moonin => "Moonin",
            System::AgentSandbox => "agent-sandbox v0.5.6",
        }
    }

    fn claims(self, client: &Client, ns: &str) -> Api<DynamicObject> {
        match self {
            System::Moonin => harness::moonin_api(client, "SandboxClaim", ns),
            System::AgentSandbox => as_api(client, ns, "SandboxClaim", "sandboxclaims"),
        }
    }

    /// The pool object and the status field that counts its idle, Ready sandboxes.
    fn pool(self, client: &Client, ns: &str) -> (Api<DynamicObject>, &'static str, &'static str) {
        match self {
            System::Moonin => (
                harness::moonin_api(client, "SandboxPool", ns),
                "bench-a",
                "idleReplicas",
            ),
            System::AgentSandbox => (
                as_api(client, ns, "SandboxWarmPool", "sandboxwarmpools"),
                "bench",
                "readyReplicas",
            ),
        }
    }

    fn claim(self, name: &str) -> DynamicObject {
        let v = match self {
            System::Moonin => json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "SandboxClaim",
                "metadata": {"name": name},
                "spec": {"poolRef": {"name": "bench-a"}}
            }),
            System::AgentSandbox => json!({
                "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                "kind": "SandboxClaim",
                "metadata": {"name": name},
                "spec": {"warmPoolRef": {"name": "bench"}}
            }),
        };
        serde_json::from_value(v).expect("claim")
    }

    fn is_bound(self, claim: &DynamicObject) -> bool {
        let status = &claim.data["status"];
        match self {
            System::Moonin => status["phase"] == "Bound",
            System::AgentSandbox => {
                status["sandbox"]["name"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
                    && status["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            }
        }
    }
}

fn as_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(AS_GROUP, AS_VERSION, kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The sandbox container: what every Pod of every pool runs (kwok runs none of it).
fn container() -> Value {
    json!({
        "name": "sandbox",
        "image": "registry.example/sandbox:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
    })
}

// ---------------------------------------------------------------------------------------
// What the watches saw.

#[derive(Default)]
struct PodSeen {
    added: Option<Instant>,
    ready: Option<Instant>,
    terminating: bool,
    gone: bool,
}

#[derive(Default)]
struct Seen {
    /// Claim name → first instant it was seen bound.
    bound: HashMap<String, Instant>,
    /// Pod UID → what happened to it.
    pods: HashMap<String, PodSeen>,
    synced: [bool; 2],
    relists: u32,
    errors: u32,
}

impl Seen {
    /// Counts what a watch event other than an object says: watch `index` synced, relisted
    /// or failed.
    fn count<K>(&mut self, index: usize, event: &Event<K>) {
        match event {
            Event::Synced => self.synced[index] = true,
            Event::Relisted => self.relists += 1,
            Event::Failed => self.errors += 1,
            Event::Object(_) | Event::Deleted(_) => {}
        }
    }

    fn live_ready(&self) -> usize {
        self.pods
            .values()
            .filter(|p| p.ready.is_some() && !p.terminating && !p.gone)
            .count()
    }
}

type Shared = Arc<Mutex<Seen>>;

fn on_pod(seen: &mut Seen, pod: &Pod, at: Instant, deleted: bool) {
    let uid = pod.uid().unwrap_or_default();
    let e = seen.pods.entry(uid).or_default();
    if e.added.is_none() {
        e.added = Some(at);
    }
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if ready && e.ready.is_none() {
        e.ready = Some(at);
    }
    e.terminating |= pod.metadata.deletion_timestamp.is_some();
    e.gone |= deleted;
}

/// Waits until both watches of [`spawn_watches`] listed what there is.
async fn watches_synced(seen: &Shared) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    wait::until("the watches to sync", deadline, POLL, || async {
        seen.lock()
            .expect("seen")
            .synced
            .iter()
            .all(|s| *s)
            .then_some(())
    })
    .await
}

/// Watches the namespace's Pods and the system's claims, recording arrival instants. With
/// `release`, deletes every claim once it is seen bound.
fn spawn_watches(
    system: System,
    client: &Client,
    ns: &str,
    seen: Shared,
    release: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod_seen = seen.clone();
    let pod_task = watch::spawn("pod", pods, watcher::Config::default(), move |event| {
        let at = Instant::now();
        let mut s = pod_seen.lock().expect("seen");
        match event {
            Event::Object(p) => on_pod(&mut s, &p, at, false),
            Event::Deleted(p) => on_pod(&mut s, &p, at, true),
            event => s.count(0, &event),
        }
    });
    let claims = system.claims(client, ns);
    let api = claims.clone();
    let claim_task = watch::spawn("claim", api, watcher::Config::default(), move |event| {
        let at = Instant::now();
        let mut s = seen.lock().expect("seen");
        let Event::Object(c) = event else {
            return s.count(1, &event);
        };
        let name = c.name_any();
        if system.is_bound(&c) && !s.bound.contains_key(&name) {
            s.bound.insert(name.clone(), at);
            if release {
                let claims = claims.clone();
                tokio::spawn(async move {
                    let _ = claims.delete(&name, &DeleteParams::background()).await;
                });
            }
        }
    });
    vec![pod_task, claim_task]
}

// ---------------------------------------------------------------------------------------
// Counters: Moonin's /metrics; agent-sandbox's controller-runtime metrics when reachable.

/// API writes the controller under test has sent so far: Moonin's
/// `moonin_api_writes_total`; agent-sandbox's `rest_client_requests_total` for POST, PUT,
/// PATCH and DELETE (controller-runtime's client metrics), when its metrics answer over
/// plain HTTP.
async fn writes(source: Option<SocketAddr>) -> Option<f64> {
    let count = |body: &str| {
        if body.contains("moonin_api_writes_total") {
            Some(Counters::parse(body).writes_total())
        } else if body.contains("rest_client_requests_total") {
            Some(sum(body, "rest_client_requests_total{", |l| {
                matches!(label(l, "method"), "POST" | "PUT" | "PATCH" | "DELETE")
            }))
        } else {
            None
        }
    };
    get_parsed(source?, "/metrics", count).await.flatten()
}

/// agent-sandbox's metrics address: the TCP port its process listens on besides the health
/// port `e2e/agent-sandbox` recorded (both on loopback, kernel-chosen).
fn agent_sandbox_metrics() -> Option<SocketAddr> {
    let dir = std::env::var("MOONIN_CLUSTER_DIR").unwrap_or_else(|_| {
        let cache = std::env::var("MOONIN_CACHE").unwrap_or_else(|_| {
            format!(
                "{}/.cache/moonin",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        format!("{cache}/cluster")
    });
    let pid = std::fs::read_to_string(format!("{dir}/agent-sandbox.pid")).ok()?;
    let health = std::fs::read_to_string(format!("{dir}/agent-sandbox.health")).ok()?;
    let out = Command::new("ss").args(["-Hltnp"]).output().ok()?;
    let needle = format!("pid={},", pid.trim());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&needle))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<SocketAddr>().ok())
        .find(|a| a.to_string() != health.trim())
        .filter(|a| http_get(*a, "/metrics").is_some())
}

// ---------------------------------------------------------------------------------------
// Other controllers on this machine.

fn agent_sandbox(cmd: &str) -> Result<String, String> {
    let out = Command::new(common::root().join("e2e/agent-sandbox"))
        .arg(cmd)
        .output()
        .map_err(|e| format!("e2e/agent-sandbox {cmd}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text.trim().to_string())
    } else {
        Err(format!("e2e/agent-sandbox {cmd}: {}", text.trim()))
    }
}

/// Waits until no other `moonin run` and no agent-sandbox controller runs.
async fn wait_for_quiet(p: &Params) {
    let quiet = wait_until_quiet(
        "other controllers to stop",
        Duration::from_secs(p.quiet_secs),
        Duration::from_secs(1),
        || {
            let managers = moonin_managers();
            let peer = agent_sandbox("status").is_ok();
            (!managers.is_empty() || peer).then(|| {
                format!(
                    "managers: {}, agent-sandbox running: {peer}",
                    listed(&managers)
                )
            })
        },
    )
    .await;
    if let Err(e) = quiet {
        progress(&format!("{e}; going on"));
    }
}

// ---------------------------------------------------------------------------------------
// One system's setup: its namespace, its controller, its pool.

/// A namespace with the system's pool in it; for Moonin, its own manager (dropped before
/// what it runs as).
struct Stage {
    system: System,
    ns: TestNamespace,
    moonin: Option<(Manager, ManagerSeat)>,
    /// Where the controller's write counters are read.
    metrics: Option<SocketAddr>,
}

impl Stage {
    async fn new(client: &Client, system: System, prefix: &str) -> Result<Self, String> {
        let short = match system {
            System::Moonin => "m",
            System::AgentSandbox => "as",
        };
        let mut ns = TestNamespace::new(client, &format!("bench-claim-{short}-{prefix}")).await;
        let (moonin, metrics) = match system {
            System::Moonin => {
                let seat = ManagerSeat::new(&mut ns, &[]);
                let m = seat.start("sandbox", &[]).await;
                wait_until_leading(m.addr, Instant::now() + Duration::from_secs(60)).await?;
                let addr = m.addr;
                (Some((m, seat)), Some(addr))
            }
            System::AgentSandbox => (None, agent_sandbox_metrics()),
        };
        Ok(Stage {
            system,
            ns,
            moonin,
            metrics,
        })
    }

    fn name(&self) -> &str {
        &self.ns.name
    }

    /// Creates the pool of `size` Pods. `grows`: Moonin's pool is in an autoscaling group
    /// (minimum `size`, maximum four times that, no cooldown), so queued claims scale it
    /// up; agent-sandbox creates a Sandbox for a claim its warm pool cannot serve anyway.
    async fn create_pool(&self, client: &Client, size: usize, grows: bool) -> Result<(), String> {
        let ns = self.name();
        let pp = PostParams::default();
        match self.system {
            System::Moonin => {
                let mut env = json!({
                    "apiVersion": "moonin.io/v1alpha1",
                    "kind": "SandboxEnv",
                    "metadata": {"name": "bench"},
                    "spec": {"clusters": [{"name": "local", "members": [{
                        "name": "a",
                        "spec": {
                            "replicas": size,
                            "recyclePolicy": "Replace",
                            "template": {
                                "metadata": {"labels": {"app": "sandbox"}},
                                "spec": {"containers": [container()]}
                            }
                        }
                    }]}]}
                });
                if grows {
                    env["spec"]["autoscaling"] = json!({"groups": [{
                        "name": "g",
                        "minReplicas": size,
                        "maxReplicas": 4 * size,
                        "scaleUpPolicy": {"cooldownSeconds": 0, "maxStep": 4 * size}
                    }]});
                    env["spec"]["clusters"][0]["members"][0]["config"] =
                        json!({"scalingGroup": "g"});
                }
                let env: DynamicObject = serde_json::from_value(env).expect("env");
                harness::moonin_api(client, "SandboxEnv", ns)
                    .create(&pp, &env)
                    .await
                    .map_err(|e| format!("creating the SandboxEnv: {e}"))?;
            }
            System::AgentSandbox => {
                let template: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                    "kind": "SandboxTemplate",
                    "metadata": {"name": "bench"},
                    "spec": {"podTemplate": {
                        "metadata": {"labels": {"app": "sandbox"}},
                        "spec": {"containers": [container()]}
                    }}
                }))
                .expect("template");
                as_api(client, ns, "SandboxTemplate", "sandboxtemplates")
                    .create(&pp, &template)
                    .await
                    .map_err(|e| format!("creating the SandboxTemplate: {e}"))?;
                let pool: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                    "kind": "SandboxWarmPool",
                    "metadata": {"name": "bench"},
                    "spec": {"replicas": size, "sandboxTemplateRef": {"name": "bench"}}
                }))
                .expect("warm pool");
                as_api(client, ns, "SandboxWarmPool", "sandboxwarmpools")
                    .create(&pp, &pool)
                    .await
                    .map_err(|e| format!("creating the SandboxWarmPool: {e}"))?;
            }
        }
        Ok(())
    }

    /// Waits until the pool reports `size` idle, Ready sandboxes and the watch sees as many
    /// Ready Pods; returns how long filling took.
    async fn pool_full(&self, client: &Client, seen: &Shared, size: usize) -> Result<(), String> {
        let (api, name, field) = self.system.pool(client, self.name());
        wait::until(
            &format!("{size} idle, Ready sandboxes in the pool"),
            Instant::now() + Duration::from_secs(120 + size as u64),
            POLL,
            || async {
                let pool = api.get(name).await.ok()?;
                let n = pool.data["status"][field].as_u64().unwrap_or(0) as usize;
                (n >= size && seen.lock().expect("seen").live_ready() >= size).then_some(())
            },
        )
        .await
    }

    /// Deletes the pool while the controller still runs, then lets the namespace go.
    async fn finish(mut self, client: &Client) {
        let ns = self.name().to_string();
        let dp = DeleteParams::background();
        match self.system {
            System::Moonin => {
                let _ = harness::moonin_api(client, "SandboxClaim", &ns)
                    .delete_collection(&dp, &ListParams::default())
                    .await;
                let _ = harness::moonin_api(client, "SandboxEnv", &ns)
                    .delete("bench", &dp)
                    .await;
            }
            System::AgentSandbox => {
                let _ = as_api(client, &ns, "SandboxClaim", "sandboxclaims")
                    .delete_collection(&dp, &ListParams::default())
                    .await;
                let _ = as_api(client, &ns, "SandboxWarmPool", "sandboxwarmpools")
                    .delete("bench", &dp)
                    .await;
            }
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let gone = wait::until_none_left(
            "the pool's Pods to be gone",
            &pods,
            &ListParams::default(),
            Instant::now() + Duration::from_secs(90),
            POLL,
        )
        .await;
        if let Err(e) = gone {
            progress(&format!(
                "cleanup of {ns}: {e}; deleting the namespace anyway"
            ));
        }
        drop(self.moonin.take());
        drop(self.ns);
    }
}

// ---------------------------------------------------------------------------------------
// The phases.

struct RateResult {
    rate: u32,
    issued: usize,
    create_errors: usize,
    first_error: Option<String>,
    bound: usize,
    /// create returned → bound (ms).
    latency: Option<Stats>,
    /// create issued → bound (ms).
    from_issue: Option<Stats>,
    /// The create call's round trip (ms).
    create_rtt: Option<Stats>,
    /// Distinct Pods seen: in the pool before the first claim, and added after it.
    pool_pods: usize,
    added_pods: usize,
    /// Ready, live Pods when the run settled.
    settled_ready: usize,
    writes: Option<f64>,
    /// The achieved claim rate (claims / the span of issuing).
    achieved_rate: f64,
    watch_errors: u32,
}

impl RateResult {
    fn pods_per_claim(&self) -> Option<f64> {
        (self.issued > 0).then(|| self.added_pods as f64 / self.issued as f64)
    }

    /// Pods beyond the pool plus one per claim.
    fn over_creation(&self, pool: usize) -> i64 {
        (self.pool_pods + self.added_pods) as i64 - (pool + self.issued) as i64
    }
}

async fn rate_phase(
    client: &Client,
    system: System,
    p: &Params,
    rate: u32,
) -> Result<RateResult, String> {
    let stage = Stage::new(client, system, &format!("r{rate}")).await?;
    let out = rate_in(client, &stage, p, rate).await;
    if let (Err(_), Some((m, _))) = (&out, &stage.moonin) {
        eprintln!("manager log: {}", m.log.display());
    }
    stage.finish(client).await;
    out
}

async fn rate_in(
    client: &Client,
    stage: &Stage,
    p: &Params,
    rate: u32,
) -> Result<RateResult, String> {
    let system = stage.system;
    let ns = stage.name().to_string();
    let seen: Shared = Arc::default();
    let tasks = spawn_watches(system, client, &ns, seen.clone(), true);
    watches_synced(&seen).await?;
    let filling = Instant::now();
    stage.create_pool(client, p.pool, false).await?;
    stage.pool_full(client, &seen, p.pool).await?;
    progress(&format!(
        "{}: {} {}: pool of {} full in {:.1} s",
        system.label(),
        ns,
        rate,
        p.pool,
        filling.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pool_pods = seen.lock().expect("seen").pods.len();
    let writes_before = writes(stage.metrics).await;

    // Claims at `rate` per second, each created by its own task at its own instant.
    let claims = system.claims(client, &ns);
    let n = (u64::from(rate) * p.seconds) as usize;
    type Sent = (Instant, Result<Instant, String>);
    let sent: Arc<Mutex<HashMap<String, Sent>>> = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / f64::from(rate))).await;
        let (claims, sent) = (claims.clone(), sent.clone());
        let name = format!("c{i:05}");
        handles.push(tokio::spawn(async move {
            let issued = Instant::now();
            let r = claims
                .create(&PostParams::default(), &system.claim(&name))
                .await
                .map(|_| Instant::now())
                .map_err(|e| e.to_string());
            sent.lock().expect("sent").insert(name, (issued, r));
        }));
    }
    let span = start.elapsed().as_secs_f64();
    futures::future::join_all(handles).await;
    progress(&format!(
        "{}: issued {n} claims in {span:.1} s",
        system.label()
    ));
    let ok: Vec<String> = sent
        .lock()
        .expect("sent")
        .iter()
        .filter(|(_, (_, r))| r.is_ok())
        .map(|(k, _)| k.clone())
        .collect();
    let all_bound = wait::until(
        "every claim to be bound",
        Instant::now() + Duration::from_secs(60),
        POLL,
        || async {
            let s = seen.lock().expect("seen");
            ok.iter().all(|c| s.bound.contains_key(c)).then_some(())
        },
    )
    .await;
    if let Err(e) = &all_bound {
        progress(&format!("{}: {e}; going on", system.label()));
    }
    // Settle: the pool back to full (released sandboxes replaced), then count.
    let settled = stage.pool_full(client, &seen, p.pool).await;
    if let Err(e) = &settled {
        progress(&format!("{}: after the run: {e}", system.label()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_after = writes(stage.metrics).await;
    for t in tasks {
        t.abort();
    }

    let sent = sent.lock().expect("sent");
    let s = seen.lock().expect("seen");
    let mut latency = Vec::new();
    let mut from_issue = Vec::new();
    let mut rtt = Vec::new();
    let mut first_error = None;
    let mut create_errors = 0;
    for (name, (issued, r)) in sent.iter() {
        match r {
            Ok(returned) => {
                rtt.push(ms(*returned - *issued));
                if let Some(b) = s.bound.get(name) {
                    latency.push(ms(b.saturating_duration_since(*returned)));
                    from_issue.push(ms(*b - *issued));
                }
            }
            Err(e) => {
                create_errors += 1;
                first_error.get_or_insert_with(|| e.clone());
            }
        }
    }
    Ok(RateResult {
        rate,
        issued: n - create_errors,
        create_errors,
        first_error,
        bound: latency.len(),
        latency: stats(latency),
        from_issue: stats(from_issue),
        create_rtt: stats(rtt),
        pool_pods,
        added_pods: s.pods.len() - pool_pods,
        settled_ready: s.live_ready(),
        writes: writes_before.zip(writes_after).map(|(b, a)| a - b),
        achieved_rate: n as f64 / span.max(1e-9),
        watch_errors: s.errors,
    })
}

struct DryResult {
    /// Issuing the claims → the first Pod not in the pool Ready (ms).
    first_new_ready: Option<f64>,
    /// Issuing → every claim bound (ms), and how many were bound at the deadline.
    all_bound: Option<f64>,
    bound: usize,
    new_pods: usize,
}

async fn dry_phase(client: &Client, system: System) -> Result<DryResult, String> {
    let stage = Stage::new(client, system, "dry").await?;
    let out = dry_in(client, &stage).await;
    stage.finish(client).await;
    out
}

async fn dry_in(client: &Client, stage: &Stage) -> Result<DryResult, String> {
    let system = stage.system;
    let ns = stage.name().to_string();
    let seen: Shared = Arc::default();
    let tasks = spawn_watches(system, client, &ns, seen.clone(), false);
    watches_synced(&seen).await?;
    stage.create_pool(client, DRY_POOL, true).await?;
    stage.pool_full(client, &seen, DRY_POOL).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<String> = seen.lock().expect("seen").pods.keys().cloned().collect();
    let claims = system.claims(client, &ns);
    let t0 = Instant::now();
    let creates = (0..DRY_CLAIMS).map(|i| {
        let claims = claims.clone();
        async move {
            claims
                .create(&PostParams::default(), &system.claim(&format!("d{i:02}")))
                .await
        }
    });
    for r in futures::future::join_all(creates).await {
        r.map_err(|e| format!("creating a claim: {e}"))?;
    }
    let within = || Instant::now() + Duration::from_secs(30);
    let first = wait::until("a new Pod to be Ready", within(), POLL, || async {
        let s = seen.lock().expect("seen");
        s.pods
            .iter()
            .filter(|(uid, _)| !before.contains(uid))
            .filter_map(|(_, p)| p.ready)
            .min()
    })
    .await
    .ok();
    let all = wait::until("every claim bound", within(), POLL, || async {
        let s = seen.lock().expect("seen");
        (s.bound.len() >= DRY_CLAIMS).then(|| s.bound.values().max().copied())?
    })
    .await
    .ok();
    for t in tasks {
        t.abort();
    }
    let s = seen.lock().expect("seen");
    Ok(DryResult {
        first_new_ready: first.map(|t| ms(t.saturating_duration_since(t0))),
        all_bound: all.map(|t| ms(t - t0)),
        bound: s.bound.len(),
        new_pods: s.pods.keys().filter(|u| !before.contains(u)).count(),
    })
}

#[derive(Default)]
struct SystemResult {
    rates: Vec<RateResult>,
    dry: Option<DryResult>,
    errors: Vec<String>,
}

async fn measure_system(client: &Client, system: System, p: &Params) -> SystemResult {
    let mut r = SystemResult::default();
    for &rate in &p.rates {
        progress(&format!(
            "{}: {rate} claims/s for {} s",
            system.label(),
            p.seconds
        ));
        match rate_phase(client, system, p, rate).await {
            Ok(x) => r.rates.push(x),
            Err(e) => {
                progress(&format!("{}: {rate}/s failed: {e}", system.label()));
                r.errors.push(format!("{rate}/s: {e}"));
            }
        }
    }
    progress(&format!(
        "{}: dry pool ({DRY_POOL} Pods, {DRY_CLAIMS} claims at once)",
        system.label()
    ));
    match dry_phase(client, system).await {
        Ok(d) => r.dry = Some(d),
        Err(e) => r.errors.push(format!("dry pool: {e}")),
    }
    r
}

// ---------------------------------------------------------------------------------------
// The report.

fn f(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.0} ms"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    }
}

fn print_rate(p: &Params, rate: u32, results: &BTreeMap<&'static str, &RateResult>) {
    let m = results.get(System::Moonin.label()).copied();
    let a = results.get(System::AgentSandbox.label()).copied();
    println!();
    println!(
        "### {rate} claims/s for {} s, warm pool of {} Pods",
        p.seconds, p.pool
    );
    println!();
    println!(
        "| figure | {} | {} | Moonin / agent-sandbox |",
        System::Moonin.label(),
        System::AgentSandbox.label()
    );
    println!("|---|---|---|---|");
    let cell =
        |r: Option<&RateResult>, g: &dyn Fn(&RateResult) -> String| r.map_or("not run".into(), g);
    let row = |name: &str, g: &dyn Fn(&RateResult) -> String, num: Option<RateFigure>| {
        let rat = num.map_or(String::new(), |n| ratio(m.and_then(n), a.and_then(n)));
        println!("| {name} | {} | {} | {rat} |", cell(m, g), cell(a, g));
    };
    row(
        "claims created / bound / create errors",
        &|r| format!("{} / {} / {}", r.issued, r.bound, r.create_errors),
        None,
    );
    row(
        "achieved claim rate",
        &|r| format!("{:.1}/s", r.achieved_rate),
        None,
    );
    let lat = |pick: fn(&Stats) -> f64| move |r: &RateResult| r.latency.map(|s| pick(&s));
    let p50 = lat(|s| s.p50);
    let p95 = lat(|s| s.p95);
    let p99 = lat(|s| s.p99);
    let max = lat(|s| s.max);
    row(
        "**p50** create returned → bound",
        &|r| f(p50(r)),
        Some(&p50),
    );
    row("**p95**", &|r| f(p95(r)), Some(&p95));
    row("**p99**", &|r| f(p99(r)), Some(&p99));
    row("max", &|r| f(max(r)), Some(&max));
    let issue99 = |r: &RateResult| r.from_issue.map(|s| s.p99);
    row(
        "p99 create issued → bound",
        &|r| f(issue99(r)),
        Some(&issue99),
    );
    let rtt = |r: &RateResult| r.create_rtt.map(|s| s.p50);
    row("create round trip p50", &|r| f(rtt(r)), None);
    let ppc = |r: &RateResult| r.pods_per_claim();
    row(
        "Pods created per claim (released at once; replacements included)",
        &|r| ppc(r).map_or("n/a".into(), |v| format!("{v:.3}")),
        Some(&ppc),
    );
    row(
        "over-creation: Pods beyond pool + claims",
        &|r| {
            format!(
                "{} ({} pool + {} added; {} Ready after the run)",
                r.over_creation(p.pool),
                r.pool_pods,
                r.added_pods,
                r.settled_ready
            )
        },
        None,
    );
    let wpc = |r: &RateResult| r.writes.map(|w| w / r.issued.max(1) as f64);
    row(
        "controller API writes per claim",
        &|r| wpc(r).map_or("n/a".into(), |v| format!("{v:.2}")),
        Some(&wpc),
    );
    row(
        "watch errors (this process)",
        &|r| r.watch_errors.to_string(),
        None,
    );
    let verdict = match (m.and_then(p99), a.and_then(p99)) {
        (Some(mp), Some(ap)) => format!(
            "{} (Moonin p99 {:.0} ms vs agent-sandbox {:.0} ms: {:.2}×)",
            if mp <= ap / 2.0 { "met" } else { "NOT met" },
            mp,
            ap,
            mp / ap
        ),
        _ => "cannot tell (a system did not run)".into(),
    };
    let over = m.map(|r| r.over_creation(p.pool));
    println!();
    println!(
        "Goal: Moonin's p99 at most half of agent-sandbox's — {verdict}; zero over-creation — {}.",
        match over {
            Some(o) if o <= 0 => format!("met ({o})"),
            Some(o) => format!("NOT met ({o} extra Pods)"),
            None => "cannot tell".into(),
        }
    );
    for (name, r) in [("Moonin", m), ("agent-sandbox", a)] {
        if let Some(e) = r.and_then(|r| r.first_error.as_ref()) {
            println!("{name}: first create error: {e}");
        }
    }
}

fn print_report(p: &Params, results: &[(System, SystemResult)]) {
    println!();
    println!("## Claim latency");
    println!();
    println!("Command: `{}`", p.command());
    println!();
    println!("{GATE}.");
    println!(
        "Latency: from the create call returning in this process to the first watch event showing the claim bound. Each claim is deleted as soon as it is seen bound (Moonin: `recyclePolicy: Replace` replaces its Pod; agent-sandbox: the adopted Sandbox is deleted, the warm pool has already replenished), so 1.0 Pods per claim is exact, not over-creation. Writes: Moonin's `moonin_api_writes_total`; agent-sandbox's `rest_client_requests_total` POST/PUT/PATCH/DELETE when its metrics endpoint answers over plain HTTP, else n/a."
    );
    for &rate in &p.rates {
        let mut by: BTreeMap<&'static str, &RateResult> = BTreeMap::new();
        for (system, r) in results {
            if let Some(x) = r.rates.iter().find(|x| x.rate == rate) {
                by.insert(system.label(), x);
            }
        }
        print_rate(p, rate, &by);
    }
    println!();
    println!(
        "### Pool running dry: a pool of {DRY_POOL}, {DRY_CLAIMS} claims at once (none released; Moonin's pool in an autoscaling group, min {DRY_POOL}, max {}, no cooldown)",
        4 * DRY_POOL
    );
    println!();
    println!(
        "| figure | {} | {} |",
        System::Moonin.label(),
        System::AgentSandbox.label()
    );
    println!("|---|---|---|");
    let get = |s: System| {
        results
            .iter()
            .find(|(x, _)| *x == s)
            .and_then(|(_, r)| r.dry.as_ref())
    };
    let (m, a) = (get(System::Moonin), get(System::AgentSandbox));
    let cell =
        |d: Option<&DryResult>, g: &dyn Fn(&DryResult) -> String| d.map_or("not run".into(), g);
    let rows: [(&str, DryFigure); 4] = [
        ("claims issued → first new Pod Ready", &|d| {
            d.first_new_ready
                .map_or("none within 30 s".into(), |v| format!("{v:.0} ms"))
        }),
        ("claims issued → all bound", &|d| {
            d.all_bound
                .map_or("not within 30 s".into(), |v| format!("{v:.0} ms"))
        }),
        ("claims bound", &|d| format!("{} of {DRY_CLAIMS}", d.bound)),
        ("new Pods created", &|d| d.new_pods.to_string()),
    ];
    for (name, g) in rows {
        println!("| {name} | {} | {} |", cell(m, g), cell(a, g));
    }
    for (system, r) in results {
        for e in &r.errors {
            println!();
            println!("{} failed: {e}", system.label());
        }
    }
}

// ---------------------------------------------------------------------------------------

async fn run() -> ExitCode {
    let p = match Params::from_env() {
        Ok(p) => p,
        Err(e) => return plane::bad_parameters("claim_latency", &e),
    };
    let Some(client) = plane::connect("claim_latency").await else {
        return ExitCode::from(2);
    };
    progress(&format!(
        "pool {}, {} s per rate, rates {:?}, systems {:?}",
        p.pool, p.seconds, p.rates, p.systems
    ));
    let mut results = Vec::new();
    for &system in &p.systems {
        wait_for_quiet(&p).await;
        let r = match system {
            System::Moonin => {
                harness::install_crds(&client).await;
                measure_system(&client, system, &p).await
            }
            System::AgentSandbox => match agent_sandbox("start") {
                Ok(msg) => {
                    progress(&msg);
                    let r = measure_system(&client, system, &p).await;
                    match agent_sandbox("stop") {
                        Ok(msg) => progress(&msg),
                        Err(e) => progress(&e),
                    }
                    r
                }
                Err(e) => SystemResult {
                    errors: vec![format!("could not start agent-sandbox: {e}")],
                    ..Default::default()
                },
            },
        };
        results.push((system, r));
    }
    print_report(&p, &results);
    let failed = results.iter().any(|(_, r)| !r.errors.is_empty());
    if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
