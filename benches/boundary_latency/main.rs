//! Scaling boundary latency (every run in `docs/scaling-benchmark.md`, the latest in the
//! README's "Scheduled scaling"): N templates × M actions whose scheduled windows open at the
//! same instant and close at the same instant, each action on its own Deployment with its own
//! HPA (or, with `MOONIN_BENCH_AUTOSCALER=scaledobject`, its own KEDA ScaledObject;
//! `e2e/keda start` first).
//!
//! Watches in this process time every write from the boundary instant (the arrival of
//! the first event showing the new value); the manager's own `moonin_api_writes_total`
//! counts its writes; `/proc/<pid>/status` and `stat` give its memory and CPU time. The
//! floors (the same writes sent by this process, timed by the same watches from the instant
//! they began) are measured before the manager starts, after the window with the manager
//! running and idle, and again with it stopped; the write floor then once more in the other
//! order (stopped, then the manager started again), so that a drift of the control plane
//! over the run and the cost of the manager's presence both show and are not mistaken for
//! each other; the manager's own
//! `moonin_scaling_edge_delay_seconds` is printed beside. For each floor and each edge the
//! report also gives what the API server spent on it, where it runs on this machine: its
//! process's CPU time and the garbage collections its `/metrics` counts; and the CPU time of
//! etcd, the other control-plane processes, the manager and this benchmark, with the share of
//! the machine's cores busy (`server::CpuMark`). Every floor, and
//! the creation of the templates, waits for an idle API server first (see
//! `server::IdleServer`). Numbers, not pass/fail.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench boundary_latency
//! MOONIN_BENCH_TEMPLATES=10 MOONIN_BENCH_ACTIONS=2 cargo bench --bench boundary_latency
//! e2e/keda start && MOONIN_BENCH_AUTOSCALER=scaledobject cargo bench --bench boundary_latency
//! MOONIN_BENCH_INVALID=1000 MOONIN_BENCH_SETUP_SECS=150 cargo bench --bench boundary_latency
//! ```
//!
//! `MOONIN_BENCH_INVALID=N` creates N templates the controller must refuse (an unknown time
//! zone, a schedule the cron parser refuses, a missing target, in turn) beside the measured
//! ones, before the manager starts, which must reconcile them all before the window opens
//! (give it the time: `MOONIN_BENCH_SETUP_SECS`); the report says how many carry their
//! reason once the open edge settled (a missing target is reported when its window opens).
//!
//! `MOONIN_BENCH_PPROF=DIR` also records the API server's CPU profile (four one-second
//! profiles back to back) from the start of each spec-write floor and from each edge
//! instant, to compare them with `go tool pprof -top -cum DIR/NN-edge-open-*.pb`.
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

mod measure;
mod objects;
mod probes;
mod report;
mod server;
#[allow(dead_code)]
#[path = "../shared/mod.rs"]
mod shared;
mod targets;
mod watch;
mod window;

use std::{process::ExitCode, time::Duration};

use kube::Client;

// The harness and the shared modules reach the tests' helpers as `crate::common`.
use shared::{
    common,
    harness::{self, Manager, TestNamespace},
    machine,
    manager::ManagerSeat,
    params::{command_line, positive},
    plane,
    process::moonin_managers,
    report::progress,
    signals::or_interrupted,
};

/// Deployment replicas before and after the window.
const REPLICAS: i32 = 1;
/// The HPA's own bounds.
const HPA_MIN: i32 = 1;
const HPA_MAX: i32 = 3;
/// The action's bounds during the window.
const ACTION_MIN: i32 = 2;
const ACTION_MAX: i32 = 4;
/// How long every window lasts: long enough that the open's cascade (the new Pods) is
/// served and the API server idle again before the write floor between the edges, and
/// that floor's before the close.
const WINDOW_MINUTES: i64 = 2;
/// The goal for p99 of every phase, on this machine.
const GOAL_MS: f64 = 1000.0;
/// A boundary has settled when every write was seen and the write counter stood still
/// this long.
const QUIET: Duration = Duration::from_secs(2);
const SCRAPE_EVERY: Duration = Duration::from_millis(200);
/// Concurrent creates while setting up.
const CREATE_CONCURRENCY: usize = 32;

/// How often the benchmark looks again at what it waits for.
const POLL: Duration = Duration::from_millis(200);

fn main() -> ExitCode {
    plane::main("boundary_latency", 4, "", run)
}

/// What scales each benchmark Deployment, and so carries the override.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carrier {
    /// An HPA.
    Hpa,
    /// A KEDA ScaledObject (KEDA's operator makes its HPA).
    ScaledObject,
}

impl Carrier {
    fn from_env() -> Result<Self, String> {
        match std::env::var("MOONIN_BENCH_AUTOSCALER").as_deref() {
            Err(_) | Ok("hpa") => Ok(Carrier::Hpa),
            Ok("scaledobject") => Ok(Carrier::ScaledObject),
            Ok(other) => Err(format!(
                "MOONIN_BENCH_AUTOSCALER={other}: expected hpa or scaledobject"
            )),
        }
    }

    /// The carrier's kind, as the report names it.
    fn label(self) -> &'static str {
        match self {
            Carrier::Hpa => "HPA",
            Carrier::ScaledObject => "ScaledObject",
        }
    }
}

struct Params {
    autoscaler: Carrier,
    templates: usize,
    /// Templates the controller must refuse, created beside the measured ones.
    invalid: usize,
    actions: usize,
    setup_secs: i64,
    quiet_secs: u64,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        Ok(Self {
            autoscaler: Carrier::from_env()?,
            templates: positive("MOONIN_BENCH_TEMPLATES", 100)? as usize,
            invalid: match std::env::var("MOONIN_BENCH_INVALID") {
                Err(_) => 0,
                Ok(v) => v.parse().map_err(|_| {
                    format!("MOONIN_BENCH_INVALID={v:?}: expected a number of templates")
                })?,
            },
            actions: positive("MOONIN_BENCH_ACTIONS", 5)? as usize,
            setup_secs: positive("MOONIN_BENCH_SETUP_SECS", 40)? as i64,
            quiet_secs: positive("MOONIN_BENCH_QUIET_WAIT_SECS", 300)?,
        })
    }

    fn targets(&self) -> usize {
        self.templates * self.actions
    }

    /// Fewest writes a boundary can take: the autoscaler and the Deployment of every action,
    /// and one status write per template whose window opens and closes — the measured ones
    /// and the refused ones whose only fault is a missing target (their schedule is valid:
    /// they report `TargetNotFound` once the window opens, and their phase follows it).
    fn minimum_writes(&self) -> usize {
        let missing_target = (0..self.invalid)
            .filter(|&i| objects::invalid_reason(i) == "TargetNotFound")
            .count();
        2 * self.targets() + self.templates + missing_target
    }

    /// Fewest writes a start can take: every template's finalizer and its first status,
    /// the refused ones' included.
    fn minimum_startup_writes(&self) -> usize {
        2 * (self.templates + self.invalid)
    }

    fn names(&self) -> Vec<String> {
        (0..self.templates)
            .flat_map(|t| (0..self.actions).map(move |a| target_name(t, a)))
            .collect()
    }

    fn command(&self) -> String {
        command_line(
            "boundary_latency",
            &[
                "MOONIN_BENCH_AUTOSCALER",
                "MOONIN_BENCH_TEMPLATES",
                "MOONIN_BENCH_INVALID",
                "MOONIN_BENCH_ACTIONS",
                "MOONIN_BENCH_SETUP_SECS",
                "MOONIN_BENCH_QUIET_WAIT_SECS",
            ],
        )
    }
}

fn target_name(template: usize, action: usize) -> String {
    format!("t{template:03}-a{action}")
}

fn template_name(template: usize) -> String {
    format!("t{template:03}")
}

async fn run() -> ExitCode {
    let params = match Params::from_env() {
        Ok(p) => p,
        Err(e) => return plane::bad_parameters("boundary_latency", &e),
    };
    let Some(client) = plane::connect("boundary_latency").await else {
        return ExitCode::from(2);
    };
    print_header(&client, &params).await;

    harness::install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "bench-boundary").await;
    let seat = ManagerSeat::new(&mut ns, &[]);
    let identity = seat.identity.clone();
    progress(&format!("namespace {}", ns.name));

    let mut manager: Option<Manager> = None;
    // Ctrl-C or SIGTERM still cleans up: the templates carry finalizers.
    let outcome = or_interrupted(measure::measure(&client, &params, &seat, &mut manager)).await;
    let code = match &outcome {
        Ok(report) => {
            report.print(&params);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("boundary_latency: {e}");
            if let Some(m) = &manager {
                eprintln!("manager log: {}", m.log.display());
            }
            ExitCode::from(3)
        }
    };
    // A signal to the process group may have stopped the manager too.
    let alive = manager.is_some() && moonin_managers().iter().any(|m| m.identity == identity);
    probes::cleanup(&client, &ns.name, alive).await;
    drop(manager);
    drop(ns);
    drop(seat);
    code
}

async fn print_header(client: &Client, p: &Params) {
    let version = plane::server_version(client).await;
    println!("# Moonin scaling boundary latency");
    println!();
    println!("- command: `{}`", p.command());
    println!(
        "- parameters: {} templates × {} actions = {} Deployments (replicas {REPLICAS}), each with its own {} (min {HPA_MIN}, max {HPA_MAX}); action minReplicas {ACTION_MIN}, maxReplicas {ACTION_MAX}; every template `schedule: \"M H * * *\"`, `timeZone: UTC`, `duration: {WINDOW_MINUTES}m` (the same minute for all)",
        p.templates,
        p.actions,
        p.targets(),
        match p.autoscaler {
            Carrier::Hpa => "HPA",
            Carrier::ScaledObject =>
                "KEDA ScaledObject (cron trigger; KEDA's operator makes its HPA)",
        }
    );
    machine::print_header_lines(&version, " as the manager and this benchmark");
    println!(
        "- manager: one `moonin run --controllers scaling` (release build), impersonating the ServiceAccount with config/rbac; latencies are taken by watches in this process"
    );
    println!(
        "- every floor, and the templates whose window opens a setup time later, start on an idle API server (below {} cores over {} s), so that none meets the HPA controller's Warnings (two per HPA every 15 s for its first minutes without a metrics server) or the cascade an earlier interval left",
        server::IDLE_CORES,
        server::IDLE_OVER.as_secs()
    );
}
