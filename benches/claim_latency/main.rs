//! Claim latency and the throughput ceiling (the README's "Sandbox pools" section reports
//! them): a warm pool of sandbox Pods on kwok Nodes, claims at a steady rate, Moonin,
//! agent-sandbox and the floor side by side.
//!
//! The floor ([`floor`]) is no controller: with Moonin's manager and agent-sandbox both
//! stopped, this process itself makes, at the claim rate, the API calls one bind and one
//! replacement need (the Pod's guarded patch to claimed, the claim's status `Bound`, the
//! Pod's delete, a replacement Pod of the same template), against Moonin `SandboxClaim`s in
//! a namespace no manager watches: what the control plane allows with no controller's cost.
//!
//! For each system in turn (never two at once: Moonin's manager is stopped before
//! `e2e/agent-sandbox start`, and agent-sandbox is stopped before the next system):
//!
//! 1. for each rate: a fresh namespace and a warm pool of `MOONIN_BENCH_POOL` Pods
//!    (Moonin: a SandboxEnv with one local member, `recyclePolicy: Replace`; agent-sandbox:
//!    a SandboxTemplate and a SandboxWarmPool; the floor: the Pods, created by this
//!    process), waited until every Pod is idle and Ready; then claims at that rate for
//!    `MOONIN_BENCH_SECONDS`. Each claim is deleted as soon as it is seen bound (its sandbox
//!    is released: Moonin replaces the Pod, agent-sandbox deletes the adopted Sandbox while
//!    its warm pool replenishes, the floor replaces the Pod after the bind), so a pool of N
//!    serves a steady stream without an autoscaler;
//! 2. the dry pool (not for the floor): a pool of 5, 10 claims at once (none released); the
//!    time from issuing them to the first Pod that was not in the pool being Ready.
//!
//! With `MOONIN_BENCH_RAMP=1` ([`ramp`]), each system instead climbs the rates of
//! `MOONIN_BENCH_RAMP_RATES` (default 2,5,10,20,40,80,160,320), step 1 above for each, until
//! its first step whose bind p99 is 1 s or more (or whose claims were not all created and
//! bound); the report gives each system's highest passing rate, and Moonin's ÷ the floor's
//! (goal ≥ 0.8) and ÷ agent-sandbox's (goal ≥ 2). `MOONIN_BENCH_RATES` and the dry pool are
//! not run then.
//!
//! Latency is measured in this process from the claim's create call *returning* to the
//! arrival of the first watch event showing the claim bound (Moonin and the floor:
//! `status.phase == Bound`; agent-sandbox: `Ready=True` and `status.sandbox.name` set). The
//! create round trip is printed separately. Pods are counted from ADDED events (distinct
//! UIDs) of a Pod watch on the namespace.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench claim_latency
//! MOONIN_BENCH_POOL=20 MOONIN_BENCH_SECONDS=10 MOONIN_BENCH_RATES=20,50 cargo bench --bench claim_latency
//! MOONIN_BENCH_SYSTEMS=moonin,floor cargo bench --bench claim_latency   # some systems only
//! MOONIN_BENCH_RAMP=1 MOONIN_BENCH_SECONDS=30 cargo bench --bench claim_latency   # the ceiling
//! MOONIN_BENCH_RAMP=1 MOONIN_BENCH_RAMP_RATES=10,15,20,30 cargo bench --bench claim_latency
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

mod floor;
mod phases;
mod ramp;
mod report;
#[allow(dead_code)]
#[path = "../shared/mod.rs"]
mod shared;
mod stage;
mod system;
mod watch;

use std::{process::ExitCode, time::Duration};

use phases::{DRY_CLAIMS, DRY_POOL, SystemResult, dry_phase, rate_phase};
use ramp::{RAMP_RATES, print_ramp};
use report::print_report;
// The harness and the shared modules reach the tests' helpers as `crate::common`.
use shared::{
    common, harness,
    params::{command_line, flag, positive},
    plane,
    report::progress,
};
use stage::{agent_sandbox, wait_for_quiet};
use system::System;

/// How often the benchmark looks again at what it waits for.
const POLL: Duration = Duration::from_millis(100);

fn main() -> ExitCode {
    plane::main("claim_latency", 4, "", run)
}

struct Params {
    pool: usize,
    seconds: u64,
    rates: Vec<u32>,
    /// `MOONIN_BENCH_RAMP`: the ramp's rates, in order, instead of `rates` and the dry pool.
    ramp: Option<Vec<u32>>,
    systems: Vec<System>,
    /// How long to wait for other managers / agent-sandbox to go away first.
    quiet_secs: u64,
}

/// The rates of `name`, positive integers separated by commas (`none`: no rate), `default`
/// when it is not set.
fn rate_list(name: &str, default: &[u32]) -> Result<Vec<u32>, String> {
    match std::env::var(name) {
        Err(_) => Ok(default.to_vec()),
        Ok(v) if v.trim() == "none" => Ok(Vec::new()),
        Ok(v) => v
            .split(',')
            .map(|r| match r.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "{name}={v:?}: expected positive integers separated by commas"
                )),
            })
            .collect(),
    }
}

impl Params {
    fn from_env() -> Result<Self, String> {
        let systems = match std::env::var("MOONIN_BENCH_SYSTEMS") {
            Err(_) => vec![System::Moonin, System::AgentSandbox, System::Floor],
            Ok(v) => {
                v.split(',')
                    .map(|s| {
                        let all = [System::Moonin, System::AgentSandbox, System::Floor];
                        all.into_iter().find(|x| x.key() == s.trim()).ok_or_else(|| {
                        format!(
                            "MOONIN_BENCH_SYSTEMS: {s:?} is not moonin, agent-sandbox or floor"
                        )
                    })
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let ramp = if flag("MOONIN_BENCH_RAMP", false)? {
            Some(rate_list("MOONIN_BENCH_RAMP_RATES", &RAMP_RATES)?)
        } else {
            None
        };
        Ok(Self {
            pool: positive("MOONIN_BENCH_POOL", 200)? as usize,
            seconds: positive("MOONIN_BENCH_SECONDS", 60)?,
            // `none`: only the dry-pool phase.
            rates: rate_list("MOONIN_BENCH_RATES", &[20, 50])?,
            ramp,
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
                "MOONIN_BENCH_RAMP",
                "MOONIN_BENCH_RAMP_RATES",
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
        p.pool,
        p.seconds,
        p.ramp.as_ref().unwrap_or(&p.rates),
        p.systems
    ));
    let mut results = Vec::new();
    for &system in &p.systems {
        wait_for_quiet(&p).await;
        let r = match system {
            System::Moonin | System::Floor => {
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
    if p.ramp.is_some() {
        print_ramp(&p, &results);
    } else {
        print_report(&p, &results);
    }
    let failed = results.iter().any(|(_, r)| !r.errors.is_empty());
    if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// Every rate, then the dry pool (not for the floor: it has no autoscaler), for one
/// system; or, with `MOONIN_BENCH_RAMP`, the ramp.
async fn measure_system(client: &kube::Client, system: System, p: &Params) -> SystemResult {
    if let Some(rates) = &p.ramp {
        return ramp::climb(client, system, p, rates).await;
    }
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
    if system == System::Floor {
        return r;
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
