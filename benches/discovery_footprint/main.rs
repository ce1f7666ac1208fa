//! Discovery footprint (reported in the README's "Discovery"): `moonin run --controllers
//! discovery` on a kwok cluster of N fake Nodes, K Deployments and K × R Pods, one (headless)
//! Service per Deployment and one Ingress per ten Deployments, and
//! kube-state-metrics (built from its Go module by `e2e/kube-state-metrics`) on the same
//! cluster, one after the other.
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
//! The setup objects (Nodes, Namespaces, Deployments, Services, Ingresses) carry the label
//! `moonin.io/bench=discovery-footprint`; a later run reuses what exists and creates only
//! what is missing. They are kept unless `MOONIN_BENCH_CLEANUP=1`.
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

mod discovery;
mod ksm;
mod objects;
mod report;
mod setup;
#[allow(dead_code)]
#[path = "../shared/mod.rs"]
mod shared;

use std::{process::ExitCode, time::Duration};

use discovery::{MooninResult, ensure_discovery, measure_moonin, wait_for_no_manager};
use ksm::{KsmResult, measure_ksm};
use report::{print_header, print_report};
use setup::{Setup, cleanup, setup};
// The harness and the shared modules reach the tests' helpers as `crate::common`.
use shared::{
    common,
    harness::{self, Manager},
    params::{command_line, flag, positive},
    plane,
    signals::or_interrupted,
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
const CHANGE_KINDS: [&str; 4] = [
    "NamespaceInventory",
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
        "; see the header of benches/discovery_footprint/main.rs for the MOONIN_BENCH_* variables",
        run,
    )
}

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
