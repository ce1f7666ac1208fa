//! Predictive warm-up on a four-week trace (the README's "Predictive warm-up" section
//! reports it): the autoscaler's pure decision core driven by a simulated clock, simulated
//! Pod start times and a generated claim trace (`trace.rs`), for three systems side by
//! side on the same trace:
//!
//! - **reactive**: the autoscaler as it is without `scaleUpPolicy.predictive` (queued
//!   claims, the proactive idle-zero trigger, idle timeout and stabilization);
//! - **predictive**: the same group with `scaleUpPolicy.predictive` (15-minute slots of a
//!   week, in the trace's time zone);
//! - **static**: no autoscaler, a Pool sized to the 95th percentile of the trace's demand
//!   (claims holding a Pod, sampled each minute).
//!
//! For each: claims that found no idle Pod ("cold"), the wait of every claim (p50/p99),
//! idle Pod-hours (Pods starting or idle, not bound) and all Pod-hours — over the whole
//! trace and over weeks 2–4, once the predictive history has seen one week. No cluster is
//! involved: `sim.rs` applies each decision at once, so the figures are the policy's, not
//! the API server's.
//!
//! ```sh
//! cargo bench --bench warmup_trace
//! MOONIN_BENCH_SEED=7 MOONIN_BENCH_START_SECS=5,40 cargo bench --bench warmup_trace
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

mod sim;
#[allow(dead_code)]
#[path = "../shared/stats.rs"]
mod stats;
mod trace;

use std::process::ExitCode;

use moonin::api::sandbox::PredictivePolicy;
use sim::{Outcome, Starts, System};
use trace::{Shape, Trace};

fn main() -> ExitCode {
    if !std::env::args().any(|a| a == "--bench") {
        println!("warmup_trace: run it with `cargo bench --bench warmup_trace`");
        return ExitCode::SUCCESS;
    }
    let seed = std::env::var("MOONIN_BENCH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42u64);
    let starts = match std::env::var("MOONIN_BENCH_START_SECS") {
        Ok(v) => match v
            .split_once(',')
            .map(|(a, b)| (a.trim().parse(), b.trim().parse()))
        {
            Some((Ok(min), Ok(max))) if 0.0 < min && min <= max => Starts {
                min_secs: min,
                max_secs: max,
            },
            _ => {
                eprintln!("MOONIN_BENCH_START_SECS={v:?}: expected `min,max` seconds");
                return ExitCode::from(2);
            }
        },
        Err(_) => Starts {
            min_secs: 15.0,
            max_secs: 45.0,
        },
    };
    let shape = Shape::default();
    let trace = shape.generate(seed);
    let static_size = p95_demand(&trace);
    let predictive = PredictivePolicy {
        time_zone: Some(shape.zone.clone()),
        ..PredictivePolicy::default()
    };
    let systems = [
        ("reactive", System::Reactive),
        ("predictive", System::Predictive(predictive)),
        (
            "static (p95 demand)",
            System::Static(i32::try_from(static_size).unwrap_or(i32::MAX)),
        ),
    ];
    let results: Vec<(&str, Outcome)> = systems
        .into_iter()
        .map(|(name, system)| (name, sim::run(&trace, system, starts, seed)))
        .collect();
    print_report(&shape, &trace, starts, seed, static_size, &results);
    ExitCode::SUCCESS
}

/// The 95th percentile, over the minutes of the trace, of claims holding a Pod.
fn p95_demand(trace: &Trace) -> usize {
    let minutes = usize::try_from(trace.end.duration_since(trace.start).as_mins()).unwrap_or(0);
    let mut delta = vec![0i64; minutes + 2];
    for c in &trace.claims {
        let from = usize::try_from(c.at.duration_since(trace.start).as_mins()).unwrap_or(0);
        let to = usize::try_from((c.at + c.hold).duration_since(trace.start).as_mins())
            .unwrap_or(0)
            .min(minutes);
        if from < to {
            delta[from] += 1;
            delta[to] -= 1;
        }
    }
    let mut level = 0;
    let mut holding: Vec<f64> = delta[..minutes]
        .iter()
        .map(|d| {
            level += d;
            level as f64
        })
        .collect();
    holding.sort_by(f64::total_cmp);
    stats::stats(holding).map_or(0, |s| s.p95.round() as usize)
}

/// Totals over the weeks `from..`.
fn totals(o: &Outcome, from: usize) -> (usize, f64, f64) {
    let cold = o.cold_by_week.iter().skip(from).sum();
    let idle = o.idle_hours_by_week.iter().skip(from).sum();
    let all = o.pod_hours_by_week.iter().skip(from).sum();
    (cold, idle, all)
}

fn print_report(
    shape: &Shape,
    trace: &Trace,
    starts: Starts,
    seed: u64,
    static_size: usize,
    results: &[(&str, Outcome)],
) {
    println!(
        "\nwarmup_trace: {} weeks in {}, {} claims ({} bursts of {}), seed {seed}; Pods start in {}–{} s; claims hold a Pod {:.0} s on average; static pool {static_size} Pods (p95 demand)\n",
        shape.weeks,
        shape.zone,
        trace.claims.len(),
        trace.bursts,
        shape.burst_size,
        starts.min_secs,
        starts.max_secs,
        shape.mean_hold_secs
    );
    println!(
        "| system | cold claims (4 wk) | cold claims (wk 2–4) | wait p50 | wait p99 | idle Pod-h (4 wk) | idle Pod-h (wk 2–4) | Pod-h (wk 2–4) | Pods created | decisions | predicted scale-ups |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, o) in results {
        let (cold_all, idle_all, _) = totals(o, 0);
        let (cold, idle, all) = totals(o, 1);
        let waits = stats::stats(o.waits.clone());
        println!(
            "| {name} | {cold_all} | {cold} | {:.1} s | {:.1} s | {idle_all:.0} | {idle:.0} | {all:.0} | {} | {} | {} |",
            waits.map_or(0.0, |s| s.p50),
            waits.map_or(0.0, |s| s.p99),
            o.created,
            o.decisions,
            o.predicted_scale_ups
        );
    }
    let find = |n: &str| {
        results
            .iter()
            .find(|(name, _)| name.starts_with(n))
            .map(|r| &r.1)
    };
    let (Some(reactive), Some(predictive), Some(fixed)) =
        (find("reactive"), find("predictive"), find("static"))
    else {
        return;
    };
    let (rc, ri, _) = totals(reactive, 1);
    let (pc, pi, pa) = totals(predictive, 1);
    let (sc, _, sa) = totals(fixed, 1);
    let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * (a - b) / b } else { 0.0 };
    println!("\nweeks 2–4 (the predictive history has seen one week):");
    println!(
        "- cold claims, predictive against reactive: {pc} vs {rc} ({:+.0} %; goal ≤ −80 %)",
        pct(pc as f64, rc as f64)
    );
    println!(
        "- idle Pod-hours, predictive against reactive: {pi:.0} vs {ri:.0} ({:+.0} %; goal ≤ +15 %)",
        pct(pi, ri)
    );
    println!(
        "- predictive against the static pool: {pa:.0} vs {sa:.0} Pod-hours, {pc} vs {sc} cold claims (goal: fewer Pod-hours, no more cold claims)"
    );
}
