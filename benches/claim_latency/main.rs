//! Claim latency (the README's "Sandbox pools" section reports it): a warm pool of sandbox
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

mod phases;
mod report;
#[allow(dead_code)]
#[path = "../shared/mod.rs"]
mod shared;
mod system;
mod watch;

use std::{process::ExitCode, time::Duration};

use phases::{SystemResult, measure_system};
use report::print_report;
// The harness and the shared modules reach the tests' helpers as `crate::common`.
use shared::{
    common, harness,
    params::{command_line, positive},
    plane,
    report::progress,
};
use system::{System, agent_sandbox, wait_for_quiet};

/// How often the benchmark looks again at what it waits for.
const POLL: Duration = Duration::from_millis(100);

fn main() -> ExitCode {
    plane::main("claim_latency", 4, "", run)
}

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
