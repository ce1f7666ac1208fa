//! The report: one table per rate, Moonin beside agent-sandbox and the floor, and the dry
//! pool.

use std::collections::BTreeMap;

use crate::{
    Params,
    phases::{DRY_CLAIMS, DRY_POOL, DryResult, RateResult, SystemResult},
    shared::stats::Stats,
    system::System,
};

/// agent-sandbox's CI gate (simulated nodes, 75 claims/s).
const GATE: &str = "agent-sandbox CI gate (reference): p50 ≤ 300 ms and p99 ≤ 500 ms at 75 claims/s on simulated nodes";

/// A numeric figure read from one rate's result (for the ratio column).
type RateFigure<'a> = &'a dyn Fn(&RateResult) -> Option<f64>;
/// A rendered figure of the dry-pool phase.
type DryFigure<'a> = &'a dyn Fn(&DryResult) -> String;
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
    let fl = results.get(System::Floor.label()).copied();
    println!();
    println!(
        "### {rate} claims/s for {} s, warm pool of {} Pods",
        p.seconds, p.pool
    );
    println!();
    println!(
        "| figure | {} | {} | {} | Moonin / agent-sandbox | Moonin / floor |",
        System::Moonin.label(),
        System::AgentSandbox.label(),
        System::Floor.label()
    );
    println!("|---|---|---|---|---|---|");
    let cell =
        |r: Option<&RateResult>, g: &dyn Fn(&RateResult) -> String| r.map_or("not run".into(), g);
    let row = |name: &str, g: &dyn Fn(&RateResult) -> String, num: Option<RateFigure>| {
        let (ra, rf) = num.map_or((String::new(), String::new()), |n| {
            let mn = m.and_then(n);
            (ratio(mn, a.and_then(n)), ratio(mn, fl.and_then(n)))
        });
        println!(
            "| {name} | {} | {} | {} | {ra} | {rf} |",
            cell(m, g),
            cell(a, g),
            cell(fl, g)
        );
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
    print_goal(p, m, a);
    if let Some(e) = fl.and_then(|r| r.first_error.as_ref()) {
        println!("floor: first create error: {e}");
    }
}

/// Whether Moonin met the goals at this rate, and the first create error of each system.
fn print_goal(p: &Params, m: Option<&RateResult>, a: Option<&RateResult>) {
    let p99 = |r: &RateResult| r.latency.map(|s| s.p99);
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

/// Prints the report of every system that ran.
pub fn print_report(p: &Params, results: &[(System, SystemResult)]) {
    println!();
    println!("## Claim latency");
    println!();
    println!("Command: `{}`", p.command());
    println!();
    println!("{GATE}.");
    println!(
        "Latency: from the create call returning in this process to the first watch event showing the claim bound. Each claim is deleted as soon as it is seen bound (Moonin: `recyclePolicy: Replace` replaces its Pod; agent-sandbox: the adopted Sandbox is deleted, the warm pool has already replenished), so 1.0 Pods per claim is exact, not over-creation. Writes: Moonin's `moonin_api_writes_total` (its `Bound` Events are not counted); agent-sandbox's `rest_client_requests_total` POST/PUT/PATCH/DELETE when its metrics endpoint answers over plain HTTP, else n/a; the floor's (no controller runs: this benchmark binds Moonin claims itself, see `benches/claim_latency/floor.rs`), the writes it makes in the controller's place — the Pod patch, the claim's status, the Pod delete and the replacement's create, 4 per claim when none is retried. The claim's create, the client's write, is counted in no column: the floor makes 5 writes per claim in all."
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
