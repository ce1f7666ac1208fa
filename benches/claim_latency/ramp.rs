//! The ramp (`MOONIN_BENCH_RAMP=1`): for each system, increasing claim rates, each against
//! a fresh pool for `MOONIN_BENCH_SECONDS`, until the first step that fails; then each
//! system's highest rate at which the bind p99 stayed under 1 s, and the ratios of Moonin's
//! to the floor's and to agent-sandbox's.
//!
//! A step passes when every claim was created and seen bound and the p99 from the create
//! returning to the claim seen bound is under [`P99_LIMIT_MS`]. A system whose every step
//! passed has no ceiling within the list: its highest rate is then a lower bound (`≥`).

use kube::Client;

use crate::{
    Params,
    phases::{RateResult, SystemResult, rate_phase},
    shared::report::progress,
    system::System,
};

/// The ramp's rates when `MOONIN_BENCH_RAMP_RATES` is not set (claims per second).
pub const RAMP_RATES: [u32; 8] = [2, 5, 10, 20, 40, 80, 160, 320];
/// A step passes while the bind p99 stays under this (ms).
pub const P99_LIMIT_MS: f64 = 1000.0;
/// The goals of issue 18: Moonin's highest rate at least this share of the floor's, and at
/// least this multiple of agent-sandbox's.
const GOAL_OF_FLOOR: f64 = 0.8;
const GOAL_OF_AGENT_SANDBOX: f64 = 2.0;

/// Why a step failed, or `None` when it passed.
fn failure(r: &RateResult) -> Option<String> {
    let unbound = r.issued.saturating_sub(r.bound);
    if r.create_errors > 0 {
        return Some(format!("{} creates refused", r.create_errors));
    }
    if unbound > 0 {
        return Some(format!(
            "{unbound} of {} claims not bound within 60 s",
            r.issued
        ));
    }
    match r.latency.map(|s| s.p99) {
        Some(p99) if p99 < P99_LIMIT_MS => None,
        Some(p99) => Some(format!("p99 {p99:.0} ms")),
        None => Some("no claim bound".into()),
    }
}

/// Every rate of `rates` in order, for one system, until the first that fails.
pub async fn climb(client: &Client, system: System, p: &Params, rates: &[u32]) -> SystemResult {
    let mut out = SystemResult::default();
    for &rate in rates {
        progress(&format!(
            "{}: ramp step {rate} claims/s for {} s",
            system.label(),
            p.seconds
        ));
        let why = match rate_phase(client, system, p, rate).await {
            Ok(r) => {
                let why = failure(&r);
                if why.is_none() {
                    progress(&format!(
                        "{}: {rate}/s passed (p99 {})",
                        system.label(),
                        p99(Some(&r))
                    ));
                }
                out.rates.push(r);
                why
            }
            Err(e) => {
                out.errors.push(format!("{rate}/s: {e}"));
                Some(format!("error: {e}"))
            }
        };
        if let Some(why) = why {
            progress(&format!(
                "{}: {rate}/s failed ({why}); the ramp stops",
                system.label()
            ));
            out.ramp_stop = Some((rate, why));
            break;
        }
    }
    out
}

/// One system's ceiling: the highest passing step, and the first failing one.
struct Ceiling<'a> {
    highest: Option<&'a RateResult>,
    stop: Option<&'a (u32, String)>,
    next: Option<&'a RateResult>,
}

fn ceiling(r: &SystemResult) -> Ceiling<'_> {
    let stop = r.ramp_stop.as_ref();
    let passed = |x: &&RateResult| stop.is_none_or(|(rate, _)| x.rate != *rate);
    Ceiling {
        highest: r.rates.iter().filter(passed).max_by_key(|x| x.rate),
        stop,
        next: stop.and_then(|(rate, _)| r.rates.iter().find(|x| x.rate == *rate)),
    }
}

impl Ceiling<'_> {
    /// The highest passing rate (0 when none passed), and whether it is only a lower bound.
    fn rate(&self) -> (u32, bool) {
        (self.highest.map_or(0, |r| r.rate), self.stop.is_none())
    }
}

fn p99(r: Option<&RateResult>) -> String {
    r.and_then(|r| r.latency)
        .map_or("n/a".into(), |s| format!("{:.0} ms", s.p99))
}

fn per_claim(r: &RateResult) -> String {
    r.writes.map_or("n/a".into(), |w| {
        format!("{:.2}", w / r.issued.max(1) as f64)
    })
}

/// One row per step of every system.
fn print_steps(results: &[(System, SystemResult)]) {
    println!();
    println!(
        "| system | rate | achieved | claims created / bound / create errors | p50 | p99 | controller writes per claim | step |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (system, r) in results {
        for x in &r.rates {
            let verdict = failure(x).unwrap_or_else(|| "passed".into());
            println!(
                "| {} | {}/s | {:.1}/s | {} / {} / {} | {} | {} | {} | {verdict} |",
                system.label(),
                x.rate,
                x.achieved_rate,
                x.issued,
                x.bound,
                x.create_errors,
                x.latency
                    .map_or("n/a".into(), |s| format!("{:.0} ms", s.p50)),
                p99(Some(x)),
                per_claim(x),
            );
        }
        if let Some((rate, why)) = &r.ramp_stop
            && !r.rates.iter().any(|x| x.rate == *rate)
        {
            println!("| {} | {rate}/s | | | | | | {why} |", system.label());
        }
    }
}

/// The ceiling of every system that ran.
fn print_ceilings(results: &[(System, SystemResult)]) {
    println!();
    println!(
        "| system | highest rate with p99 < 1 s | p99 at that rate | p99 at the next step | controller writes per claim |"
    );
    println!("|---|---|---|---|---|");
    for (system, r) in results {
        let c = ceiling(r);
        let (rate, open) = c.rate();
        let highest = match (c.highest, open) {
            (None, _) => "none".to_string(),
            (Some(_), true) => format!("≥ {rate}/s (no step failed)"),
            (Some(_), false) => format!("{rate}/s"),
        };
        let next = match (c.stop, c.next) {
            (None, _) => "not reached".to_string(),
            (Some((rate, _)), Some(x)) => format!("{} ({rate}/s)", p99(Some(x))),
            (Some((rate, why)), None) => format!("n/a ({rate}/s: {why})"),
        };
        println!(
            "| {} | {highest} | {} | {next} | {} |",
            system.label(),
            p99(c.highest),
            c.highest.map_or("n/a".into(), per_claim),
        );
    }
}

/// `a ÷ b` of the highest passing rates, as measured, against `goal`.
fn print_ratio(results: &[(System, SystemResult)], of: System, to: System, goal: f64) {
    let get = |s: System| {
        results
            .iter()
            .find(|(x, _)| *x == s)
            .map(|(_, r)| ceiling(r).rate())
    };
    let name = format!("{} ÷ {}", of.label(), to.label());
    let line = match (get(of), get(to)) {
        (Some((a, a_open)), Some((b, b_open))) if b > 0 => {
            let bound = match (a_open, b_open) {
                (false, false) => "",
                (true, false) => " (a lower bound: the first failed no step)",
                (false, true) => " (an upper bound: the second failed no step)",
                (true, true) => " (neither failed a step: not a ceiling)",
            };
            format!(
                "{a}/s ÷ {b}/s = {:.2}{bound} (goal ≥ {goal})",
                f64::from(a) / f64::from(b)
            )
        }
        (Some(_), Some(_)) => format!("n/a: {} passed no step (goal ≥ {goal})", to.label()),
        _ => format!("n/a: not both run (goal ≥ {goal})"),
    };
    println!("- {name}: {line}");
}

/// Prints the ramp's report: the command, every step, each system's ceiling, the ratios.
pub fn print_ramp(p: &Params, results: &[(System, SystemResult)]) {
    println!();
    println!("## Claim throughput ceiling (ramp)");
    println!();
    println!("Command: `{}`", p.command());
    println!();
    println!(
        "Each step: a fresh warm pool of {} Pods, claims at the step's rate for {} s, each deleted as soon as it is seen bound. A step passes when every claim is created and seen bound and the p99 from the create returning to the claim seen bound is under {P99_LIMIT_MS:.0} ms; a system's ramp stops at its first failing step. Rates: {:?}.",
        p.pool,
        p.seconds,
        p.ramp.as_deref().unwrap_or_default()
    );
    print_steps(results);
    print_ceilings(results);
    println!();
    println!(
        "Controller writes per claim: Moonin's `moonin_api_writes_total` (its `Bound` Events are not counted); agent-sandbox's `rest_client_requests_total` POST/PUT/PATCH/DELETE when its metrics answer over plain HTTP, else n/a; the floor's, the writes this benchmark makes in the controller's place: the Pod patch, the claim's status, the Pod delete and the replacement's create (4 per claim when none is retried). The claim's create, the client's write, is in no column: the floor makes 5 writes per claim in all."
    );
    println!();
    print_ratio(results, System::Moonin, System::Floor, GOAL_OF_FLOOR);
    print_ratio(
        results,
        System::Moonin,
        System::AgentSandbox,
        GOAL_OF_AGENT_SANDBOX,
    );
    for (system, r) in results {
        for e in &r.errors {
            println!();
            println!("{} failed: {e}", system.label());
        }
    }
}
