//! The report: latencies per phase and per action, the manager's writes, the API server's
//! times, the published defaults of the systems Moonin replaces, and the checks.

use std::{collections::BTreeMap, net::SocketAddr};

use jiff::Timestamp;

use crate::{
    GOAL_MS, Params, SCRAPE_EVERY,
    server::{CLOSED_ROWS, CPU_GROUPS, QUEUE_LEVEL, SERVER_ROWS, ServerTimes, Work},
    shared::{
        metrics::Counters as Scrape,
        process,
        report::{breakdown, listing, mib, num},
        stats::{Stats, stats},
    },
    watch::{Latencies, ms_since},
};

/// One boundary, from a scrape 1 s before it until it settled.
pub struct Boundary {
    /// The manager's counters 1 s before.
    pub before: Scrape,
    /// Its counters once the boundary settled.
    pub settled: Scrape,
    /// When the write counter last moved (±[`SCRAPE_EVERY`]).
    pub last_write: Option<Timestamp>,
    /// Whether every write was seen before the deadline.
    pub complete: bool,
    /// Template changes the watch saw meanwhile (a status write that changed nothing
    /// makes none).
    pub template_changes: u64,
    /// API server times from just before to just after.
    pub server: (ServerTimes, ServerTimes),
    /// The manager's CPU time from 1 s before until settled, in seconds.
    pub cpu_secs: f64,
    /// What the API server spent on it: its CPU from the edge until every target was
    /// seen done, its garbage collections from 3 s before until then.
    pub work: Work,
}

/// The manager from its start until every template was Idle.
pub struct Startup {
    /// Its `/metrics` address.
    pub addr: SocketAddr,
    /// Its process.
    pub pid: u32,
    /// Its log file.
    pub log_path: String,
    /// Its counters once settled.
    pub writes: Scrape,
    /// Process start → settled, in seconds.
    pub secs: f64,
    /// Templates carrying Moonin's finalizer more than once after startup.
    pub duplicate_finalizers: usize,
    /// p50 of one PATCH round trip from this process while the manager is idle.
    pub round_trip: Option<f64>,
}

/// Both edges of the window.
pub struct Window {
    /// The window opens.
    pub open: Boundary,
    /// The window closes.
    pub close: Boundary,
    /// The counters 10 s after the close settled.
    pub after_close: Scrape,
    /// The manager's memory 1 s before the window opens.
    pub idle: process::Usage,
    /// Its memory at the end.
    pub peak: process::Usage,
    /// Load and competing processes at each checkpoint.
    pub machine: Vec<(String, String)>,
}

/// What is left after the close.
pub struct Leftovers {
    /// Targets not exactly restored.
    pub not_restored: Vec<String>,
    /// Templates by phase.
    pub phases: BTreeMap<String, usize>,
}

/// The manager's log.
pub struct LogSummary {
    /// Warning lines.
    pub warnings: usize,
    /// Error lines.
    pub errors: usize,
    /// The most frequent warning and error messages, with counts.
    pub top: Vec<(usize, String)>,
    /// Its file.
    pub path: String,
}

/// One floor: its writes timed as the edges are, and as their responses came back.
#[derive(Clone, Copy)]
pub struct Floor {
    /// Per target, from the instant the floor began to the first watch event of this
    /// process showing its second write: how the edges' "target done" is timed, so the
    /// ratio compares like with like.
    pub seen: Stats,
    /// Per write, from that instant to its response (what the sender itself sees; a
    /// watch event follows the response).
    pub answered: Stats,
    /// As `seen`, each kind's writes alone: the autoscalers', the Deployments'.
    pub kinds: (Option<Stats>, Option<Stats>),
    /// What the API server spent on it.
    pub work: Work,
}

/// The floors measured at one point of the run.
#[derive(Clone, Copy)]
pub struct Floors {
    /// The same number of writes sent by this process at one instant (see
    /// [`crate::probes::write_floor`]).
    pub write: Option<Floor>,
    /// The window's own spec writes sent by this process, open and close (see
    /// [`crate::probes::spec_floor`]); HPAs only.
    pub spec: Option<(Floor, Floor)>,
}

/// The write floor sent once more after the floors with the manager stopped: still
/// stopped, then with the manager started again and idle. With `floors_beside` (running)
/// and `floors_after` (stopped) before them, each condition comes once early and once late.
#[derive(Clone, Copy)]
pub struct Presence {
    pub stopped: Option<Floor>,
    pub running: Option<Floor>,
    /// The manager's writes while `running` ran, its startup's left out (it should have
    /// sent none).
    pub writes: Option<f64>,
}

/// Everything one run measured.
pub struct Report {
    /// The window's start.
    pub open: Timestamp,
    /// The window's end.
    pub close: Timestamp,
    /// What the watches saw.
    pub latencies: Latencies,
    /// The floors before the manager starts.
    pub floors: Floors,
    /// The API server's request times around the floor and around the spec-write floors
    /// (empty when not measured).
    pub floor_server: ((ServerTimes, ServerTimes), (ServerTimes, ServerTimes)),
    /// The write floor between the window's edges, the manager running (its overrides in
    /// place, the Deployments settled at the window's minimum).
    /// With it, the manager's CPU time while it ran, in seconds.
    pub floor_between: Option<(Floor, f64)>,
    /// The floors again after the window, the manager stopped: on objects and a control
    /// plane that went through the window's writes too.
    pub floors_after: Floors,
    /// The floors after the window with the manager running and idle, just before
    /// `floors_after`.
    pub floors_beside: Floors,
    /// The manager's writes while `floors_beside` ran (it should have sent none).
    pub writes_beside: Option<f64>,
    /// The write floor sent again after `floors_after`, in the other order.
    pub presence: Option<Presence>,
    /// The manager until the window.
    pub startup: Startup,
    /// The window's edges.
    pub window: Window,
    /// What is left after the close.
    pub left: Leftovers,
    /// The manager's log.
    pub log: LogSummary,
    /// Events published by moonin-scaling: (objects, occurrences, by type and reason).
    pub events: (usize, i64, BTreeMap<String, i64>),
    /// With templates the controller must refuse beside the window: how many carried their
    /// exact reason before it opened.
    pub refused: Option<usize>,
}

/// The goal for an edge's p99 ÷ the floor's.
const FLOOR_GOAL: f64 = 1.2;
/// The goal for an edge's writes ÷ the minimum.
const WRITES_GOAL: f64 = 1.02;
/// The goal for conflict retries, in % of an edge's writes.
const CONFLICT_GOAL_PCT: f64 = 1.0;

/// An edge's figure ÷ the same figure of a floor, or `—` when either is missing.
fn over(edge: Option<f64>, floor: Option<f64>) -> String {
    edge.zip(floor)
        .map_or_else(|| "—".into(), |(e, f)| format!("{:.2}", e / f))
}

/// A counter difference as an integer (never `-0`).
pub fn count(v: f64) -> i64 {
    v.round() as i64
}

/// The manager's writes over a stretch of the run, or that its counters were not scraped.
fn writes(v: Option<f64>) -> String {
    v.map_or_else(|| "not scraped".into(), |w| count(w).to_string())
}

impl Report {
    /// Prints the report (Markdown) on stdout.
    pub fn print(&self, p: &Params) {
        self.print_edges(p);
        self.print_beside();
        self.print_drift();
        self.print_work(p);
        self.print_latencies(p);
        self.print_kinds(p);
        self.print_positions(p);
        self.print_writes(p);
        self.print_server_times();
        self.print_reference();
        self.print_checks(p);
    }

    /// The summary: each edge against the floor measured in this run, its writes against
    /// the minimum, and the conflict retries among them.
    fn print_edges(&self, p: &Params) {
        let min = p.minimum_writes() as f64;
        let floor = self.floors.write.map(|f| f.seen.p99);
        println!();
        println!(
            "## Edges against the floor ({}; the floor measured in this run)",
            p.autoscaler.label()
        );
        println!();
        println!(
            "| edge | p99 ms (target done) | floor p99 ms | ÷ floor (goal ≤ {FLOOR_GOAL}) | spec-write floor p99 ms | ÷ it | floor after ÷, spec-write floor after ÷ | writes | minimum | ÷ minimum (goal ≤ {WRITES_GOAL}) | conflict retries | % of writes (goal ≤ {CONFLICT_GOAL_PCT} %) |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        let l = &self.latencies;
        let spec = self.floors.spec.map(|(o, c)| (o.seen.p99, c.seen.p99));
        let floor_after = self.floors_after.write.map(|f| f.seen.p99);
        let spec_after = self
            .floors_after
            .spec
            .map(|(o, c)| (o.seen.p99, c.seen.p99));
        for (what, values, b, spec, spec_after) in [
            (
                "open",
                &l.both_open,
                &self.window.open,
                spec.map(|s| s.0),
                spec_after.map(|s| s.0),
            ),
            (
                "close",
                &l.both_close,
                &self.window.close,
                spec.map(|s| s.1),
                spec_after.map(|s| s.1),
            ),
        ] {
            let d = b.settled.minus(&b.before);
            let writes = d.writes_total();
            let conflicts = d.errors.get("Conflict").copied().unwrap_or(0.0);
            let p99 = stats(values.clone()).map(|s| s.p99);
            let ratio = p99.zip(floor).map(|(m, f)| m / f);
            let ms = |v: Option<f64>| v.map_or_else(|| "—".into(), |v| format!("{v:.0}"));
            let after = |f: Option<f64>| {
                f.zip(p99)
                    .map_or_else(|| "—".into(), |(f, m)| format!("{f:.0} ms: {:.2}", m / f))
            };
            println!(
                "| {what} | {} | {} | {} | {} | {} | {}; {} | {} | {} | {:.3} {} | {} | {:.1} {} |",
                ms(p99),
                ms(floor),
                ratio.map_or_else(
                    || "—".into(),
                    |r| format!("{r:.2} {}", if r <= FLOOR_GOAL { "met" } else { "MISSED" })
                ),
                ms(spec),
                over(p99, spec),
                after(floor_after),
                after(spec_after),
                count(writes),
                count(min),
                writes / min,
                if writes / min <= WRITES_GOAL {
                    "met"
                } else {
                    "MISSED"
                },
                count(conflicts),
                100.0 * conflicts / writes.max(1.0),
                if 100.0 * conflicts / writes.max(1.0) <= CONFLICT_GOAL_PCT {
                    "met"
                } else {
                    "MISSED"
                },
            );
        }
    }

    /// The floors beside the idle manager against the same floors with it stopped, and
    /// the edges against the spec-write floors beside it.
    fn print_beside(&self) {
        let (beside, stopped) = (&self.floors_beside, &self.floors_after);
        let pair =
            |b: Option<Floor>, s: Option<Floor>| b.zip(s).map(|(b, s)| (b.seen.p99, s.seen.p99));
        let again = self.presence.and_then(|pr| pair(pr.running, pr.stopped));
        let rows = [
            (
                "write floor (the manager running, then stopped)",
                pair(beside.write, stopped.write),
            ),
            (
                "write floor again (the manager stopped, then started again)",
                again,
            ),
            (
                "spec-write floor, open",
                pair(beside.spec.map(|f| f.0), stopped.spec.map(|f| f.0)),
            ),
            (
                "spec-write floor, close",
                pair(beside.spec.map(|f| f.1), stopped.spec.map(|f| f.1)),
            ),
        ];
        if rows.iter().all(|(_, r)| r.is_none()) {
            return;
        }
        println!();
        println!("## The floors beside the idle manager (after the window, every window closed)");
        println!();
        println!("| floor | p99 ms, manager running | p99 ms, manager stopped | ÷ |");
        println!("|---|---|---|---|");
        for (what, row) in rows {
            if let Some((b, s)) = row {
                println!("| {what} | {b:.0} | {s:.0} | {:.2} |", b / s);
            }
        }
        self.print_presence();
        let l = &self.latencies;
        let edge = |values: &Vec<f64>, f: Option<Floor>| {
            over(stats(values.clone()).map(|m| m.p99), f.map(|f| f.seen.p99))
        };
        println!();
        println!(
            "Edges ÷ the spec-write floor beside the manager: open {}, close {}. The manager's writes while these floors ran: {}.",
            edge(&l.both_open, beside.spec.map(|f| f.0)),
            edge(&l.both_close, beside.spec.map(|f| f.1)),
            writes(self.writes_beside)
        );
    }

    /// The write floor with the manager running against it stopped, both orders together
    /// (first running, then stopped; then the other way), in p99 and in the API server's CPU
    /// time.
    fn print_presence(&self) {
        let first = self.floors_beside.write.zip(self.floors_after.write);
        let Some((pr, (running, stopped))) = self.presence.zip(first) else {
            return;
        };
        let Some((running_again, stopped_again)) = pr.running.zip(pr.stopped) else {
            return;
        };
        let ratio = |of: fn(&Floor) -> Option<f64>| {
            let sum = |a: &Floor, b: &Floor| of(a).zip(of(b)).map(|(a, b)| a + b);
            over(sum(&running, &running_again), sum(&stopped, &stopped_again))
        };
        println!();
        println!(
            "Both orders together, the write floor with the manager running ÷ with it stopped: p99 {}, the API server's CPU time {}. The manager's writes while it ran again: {}.",
            ratio(|f| Some(f.seen.p99)),
            ratio(|f| f.work.api_secs()),
            writes(pr.writes)
        );
    }

    /// The write floor at each point of the run where it was sent, and each edge against it.
    fn print_drift(&self) {
        let rows = [
            (
                "before the window, the manager not started (the goal's floor)",
                self.floors.write,
            ),
            (
                "between the edges, the manager running",
                self.floor_between.map(|f| f.0),
            ),
            (
                "after the close, the manager running and idle",
                self.floors_beside.write,
            ),
            (
                "after the close, the manager stopped",
                self.floors_after.write,
            ),
            (
                "again, the manager still stopped",
                self.presence.and_then(|p| p.stopped),
            ),
            (
                "again, the manager started again and idle",
                self.presence.and_then(|p| p.running),
            ),
        ];
        let l = &self.latencies;
        let p99 = |v: &Vec<f64>| stats(v.clone()).map(|s| s.p99);
        let (open, close) = (p99(&l.both_open), p99(&l.both_close));
        println!();
        println!("## The write floor through the run");
        println!();
        println!("| write floor sent | p99 ms, seen | open p99 ÷ it | close p99 ÷ it |");
        println!("|---|---|---|---|");
        for (when, floor) in rows {
            match floor {
                Some(f) => println!(
                    "| {when} | {:.0} | {} | {} |",
                    f.seen.p99,
                    over(open, Some(f.seen.p99)),
                    over(close, Some(f.seen.p99))
                ),
                None => println!("| {when} | not measured | — | — |"),
            }
        }
        if let Some((_, cpu)) = self.floor_between {
            println!();
            println!(
                "The manager's CPU time while the floor between the edges ran (from its first write until the watches saw the last): {cpu:.2} s; it wrote nothing (see \"between boundaries\" below)."
            );
        }
    }

    /// What the API server and the rest of the machine spent on each floor and each edge:
    /// the work behind their latencies, which a garbage collection inside the interval, or
    /// any other process sharing the cores, adds to.
    fn print_work(&self, p: &Params) {
        let (open, close) = (&self.window.open, &self.window.close);
        let spec = |pick: fn(&(Floor, Floor)) -> &Floor| self.floors.spec.as_ref().map(pick);
        let again = |pick: fn(&Presence) -> Option<Floor>| {
            self.presence.as_ref().and_then(pick).map(|f| f.work)
        };
        let rows: [(&str, Option<Work>); 10] = [
            (
                "write floor before the manager starts (the goal's floor)",
                self.floors.write.map(|f| f.work),
            ),
            (
                "spec-write floor, open, before the manager starts",
                spec(|s| &s.0).map(|f| f.work),
            ),
            (
                "spec-write floor, close, before the manager starts",
                spec(|s| &s.1).map(|f| f.work),
            ),
            ("**the open edge (Moonin)**", Some(open.work)),
            (
                "write floor between the edges, the manager running",
                self.floor_between.map(|f| f.0.work),
            ),
            ("**the close edge (Moonin)**", Some(close.work)),
            (
                "write floor after the close, the manager running and idle",
                self.floors_beside.write.map(|f| f.work),
            ),
            (
                "write floor after the close, the manager stopped",
                self.floors_after.write.map(|f| f.work),
            ),
            (
                "write floor again, the manager still stopped",
                again(|p| p.stopped),
            ),
            (
                "write floor again, the manager started again and idle",
                again(|p| p.running),
            ),
        ];
        let goal = self.floors.write.and_then(|f| f.work.api_secs());
        println!();
        println!("## What the API server and the machine spent on each floor and each edge");
        println!();
        println!(
            "CPU time (user + system) from the first write until the watches saw the last: the kube-apiserver process's, with the garbage collections its Go runtime completed meanwhile (go_gc_duration_seconds_count; for an edge, from 3 s before it); then every other process of the local control plane's, the manager's and this benchmark's, and the share of the machine's {} cores busy over the interval. Each interval writes {} times to the targets; an edge's statuses and Events wait until every target write is answered. Where the cores are near fully busy, any other work on the machine delays the writes.",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            2 * p.targets()
        );
        println!();
        let others: Vec<&str> = CPU_GROUPS[1..].iter().map(|(name, _)| *name).collect();
        println!(
            "| interval | API server CPU s | ÷ the goal's floor | its garbage collections | {} CPU s | the machine busy |",
            others.join(" CPU s | ")
        );
        println!("|---|---|---|---|{}---|", "---|".repeat(others.len()));
        for (what, work) in rows {
            match work {
                Some(Work {
                    cpu: Some(cpu),
                    gc_cycles,
                }) => println!(
                    "| {what} | {:.2} | {} | {gc_cycles:.0} | {} | {:.0} % |",
                    cpu.by[0],
                    over(Some(cpu.by[0]), goal),
                    cpu.by[1..]
                        .iter()
                        .map(|s| format!("{s:.2}"))
                        .collect::<Vec<_>>()
                        .join(" | "),
                    100.0 * cpu.busy_share()
                ),
                Some(Work { gc_cycles, .. }) => println!(
                    "| {what} | not on this machine | — | {gc_cycles:.0} |{}",
                    " — |".repeat(others.len() + 1)
                ),
                None => println!(
                    "| {what} | not measured | — | — |{}",
                    " — |".repeat(others.len() + 1)
                ),
            }
        }
    }

    fn print_latencies(&self, p: &Params) {
        let n = p.targets();
        let l = &self.latencies;
        println!();
        println!(
            "## Boundary latency (window {} → {}; from the boundary instant to the first watch event showing the write)",
            self.open, self.close
        );
        println!();
        println!("| phase | n | p50 ms | p95 ms | p99 ms | max ms | goal: p99 < {GOAL_MS:.0} ms |");
        println!("|---|---|---|---|---|---|---|");
        let kind = p.autoscaler.label();
        let rows: [(String, &Vec<f64>); 6] = [
            (format!("window open → {kind} override"), &l.hpa_open),
            (
                "window open → Deployment replicas raised".into(),
                &l.dep_open,
            ),
            (
                "window open → target done (both writes)".into(),
                &l.both_open,
            ),
            (format!("window close → {kind} restored"), &l.hpa_close),
            (
                "window close → Deployment replicas restored".into(),
                &l.dep_close,
            ),
            (
                "window close → target done (both writes)".into(),
                &l.both_close,
            ),
        ];
        for (phase, values) in rows {
            match stats(values.clone()) {
                Some(s) => println!(
                    "| {phase} | {}/{n} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                    s.n,
                    s.p50,
                    s.p95,
                    s.p99,
                    s.max,
                    if s.p99 < GOAL_MS && s.n == n {
                        "met"
                    } else {
                        "MISSED"
                    }
                ),
                None => println!("| {phase} | 0/{n} | — | — | — | — | MISSED |"),
            }
        }
        match &self.floors.write {
            Some(Floor {
                seen: f, answered, ..
            }) => println!(
                "| *floor: the same {} writes sent by this benchmark as the manager's ServiceAccount at one instant, {} in flight (annotation patches: no controller reacts); per target, both writes seen by the watches (their responses: p99 {:.0} ms)* | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                2 * n,
                moonin::scaling::commit::MAX_IN_FLIGHT,
                answered.p99,
                f.n,
                f.p50,
                f.p95,
                f.p99,
                f.max,
                if f.p99 < GOAL_MS {
                    "the goal is reachable here"
                } else {
                    "the API server alone misses the goal here"
                }
            ),
            None => println!("| *floor* | 0 | — | — | — | — | not measured |"),
        }
        for (edge, f) in [
            ("open", self.floors.spec.map(|s| s.0)),
            ("close", self.floors.spec.map(|s| s.1)),
        ] {
            match f {
                Some(Floor {
                    seen: f, answered, ..
                }) => println!(
                    "| *spec-write floor, {edge}: the window's own {} spec writes sent by this benchmark as the manager's ServiceAccount (the controllers react{}); per target, both writes seen by the watches (their responses: p99 {:.0} ms)* | {} | {:.0} | {:.0} | {:.0} | {:.0} | — |",
                    2 * n,
                    if edge == "close" {
                        "; the autoscaler first, then the Deployment, as Moonin does (after the HPA controller has acted when it must rescale)"
                    } else {
                        ""
                    },
                    answered.p99,
                    f.n,
                    f.p50,
                    f.p95,
                    f.p99,
                    f.max,
                ),
                None => {
                    println!("| *spec-write floor, {edge}* | 0 | — | — | — | — | not measured |")
                }
            }
        }
    }

    /// Each kind's writes alone, at Moonin's edges and in the floors: which of a target's
    /// two writes the time goes to.
    fn print_kinds(&self, p: &Params) {
        let kind = p.autoscaler.label();
        let p99 =
            |v: &Vec<f64>| stats(v.clone()).map_or_else(|| "—".into(), |s| format!("{:.0}", s.p99));
        let of = |s: Option<Stats>| s.map_or_else(|| "—".into(), |s| format!("{:.0}", s.p99));
        let l = &self.latencies;
        println!();
        println!(
            "Each kind's writes alone (p99 ms from the instant they began, seen by the watches; the Deployment is written first at open, the {kind} first at close):"
        );
        println!();
        println!("| writes | {kind} p99 ms | Deployment p99 ms |");
        println!("|---|---|---|");
        let spec = self.floors.spec;
        for (edge, moonin, floor) in [
            ("open", (&l.hpa_open, &l.dep_open), spec.map(|s| s.0)),
            ("close", (&l.hpa_close, &l.dep_close), spec.map(|s| s.1)),
        ] {
            println!("| Moonin, {edge} | {} | {} |", p99(moonin.0), p99(moonin.1));
            if let Some(f) = floor {
                println!(
                    "| spec-write floor, {edge} | {} | {} |",
                    of(f.kinds.0),
                    of(f.kinds.1)
                );
            }
        }
        if let Some(w) = self.floors.write {
            println!(
                "| write floor (annotations, the Deployment first) | {} | {} |",
                of(w.kinds.0),
                of(w.kinds.1)
            );
        }
        println!();
        println!(
            "Deployments raised by Moonin's own patch (its restore record in the same event): {} of {} ({} raised first by the HPA controller enforcing the new minimum).",
            l.raised_by_moonin,
            l.dep_open.len(),
            l.dep_open.len() - l.raised_by_moonin
        );
    }

    fn print_positions(&self, p: &Params) {
        println!();
        println!(
            "By the action's position in its template (a template's actions of equal priority are written concurrently, each as Deployment then autoscaler; the manager keeps at most {} requests in flight):",
            moonin::scaling::commit::MAX_IN_FLIGHT
        );
        println!();
        println!(
            "| action | open → HPA p50 / max ms | open → Deployment p50 / max ms | close → HPA p50 / max ms | close → Deployment p50 / max ms |"
        );
        println!("|---|---|---|---|---|");
        for (a, row) in self.latencies.positions.iter().enumerate() {
            let cell = |s: &Option<Stats>| {
                s.map_or_else(|| "—".into(), |s| format!("{:.0} / {:.0}", s.p50, s.max))
            };
            println!(
                "| a{a} | {} | {} | {} | {} |",
                cell(&row[0]),
                cell(&row[1]),
                cell(&row[2]),
                cell(&row[3])
            );
        }
        if let Some(rt) = self.startup.round_trip {
            println!();
            println!(
                "For scale: one PATCH round trip from this process took {rt:.0} ms (p50 of 20, just before the window, manager idle); a boundary needs at least {} writes.",
                p.minimum_writes()
            );
        }
        println!();
        for (what, b, boundary) in [
            ("open", &self.window.open, self.open),
            ("close", &self.window.close, self.close),
        ] {
            println!(
                "Last write of the {what} boundary counted at {} after it (status writes included; ±{} ms){}.",
                b.last_write
                    .map(|t| format!("{:.0} ms", ms_since(boundary, t)))
                    .unwrap_or_else(|| "—".into()),
                SCRAPE_EVERY.as_millis(),
                if b.complete {
                    ""
                } else {
                    "; NOT every write was seen before the deadline"
                }
            );
        }
        self.print_manager_view();
    }

    /// The manager's own `moonin_scaling_edge_delay_seconds`, once the close settled.
    fn print_manager_view(&self) {
        let delays = &self.window.close.settled.edge_delays;
        println!();
        println!(
            "The manager's own view (`moonin_scaling_edge_delay_seconds`: from the scheduled edge to the end of the reconcile that acted on it, its status written; bucket bounds):"
        );
        println!();
        for edge in ["open", "close"] {
            let line = delays.get(edge).filter(|h| h.count > 0.0).map_or_else(
                || "none counted".to_string(),
                |h| {
                    let bound = |q| {
                        h.bound(q)
                            .map_or_else(|| "—".into(), |b| format!("≤ {b} s"))
                    };
                    format!(
                        "{:.0} templates, mean {:.0} ms, half {}, 99 % {}",
                        h.count,
                        1000.0 * h.sum / h.count,
                        bound(0.5),
                        bound(0.99)
                    )
                },
            );
            println!("- {edge}: {line}");
        }
    }

    fn print_writes(&self, p: &Params) {
        let w = &self.window;
        println!();
        println!("## API writes by the manager (moonin_api_writes_total)");
        println!();
        println!("| interval | writes | by kind | reconciles | reconcile errors | goal |");
        println!("|---|---|---|---|---|---|");
        let min = p.minimum_writes();
        let rows = [
            (
                format!(
                    "startup (process start → settled, {:.1} s)",
                    self.startup.secs
                ),
                self.startup.writes.clone(),
                format!("minimum {}", p.minimum_startup_writes()),
            ),
            (
                "window open (1 s before → settled)".to_string(),
                w.open.settled.minus(&w.open.before),
                format!("minimum {min}"),
            ),
            (
                "between boundaries (settled after open → 1 s before close)".to_string(),
                w.close.before.minus(&w.open.settled),
                "0".to_string(),
            ),
            (
                "window close (1 s before → settled)".to_string(),
                w.close.settled.minus(&w.close.before),
                format!("minimum {min}"),
            ),
            (
                "after close (settled → +10 s)".to_string(),
                w.after_close.minus(&w.close.settled),
                "0".to_string(),
            ),
        ];
        for (interval, d, goal) in rows {
            println!(
                "| {interval} | {} | {} | {} | {} | {goal} |",
                num(d.writes_total()),
                breakdown(&d.writes, 1.0, "—"),
                num(d.reconciles),
                breakdown(&d.errors, 1.0, "0")
            );
        }
        println!();
        for (what, b) in [("open", &w.open), ("close", &w.close)] {
            let d = b.settled.minus(&b.before);
            let status = d
                .writes
                .iter()
                .filter(|(k, _)| k.ends_with("/status"))
                .map(|(_, v)| count(*v))
                .sum::<i64>();
            println!(
                "Window {what}: {status} template status writes; the benchmark's watch saw {} template changes, so {} status writes changed nothing.",
                b.template_changes,
                (status - b.template_changes as i64).max(0)
            );
        }
    }

    fn print_server_times(&self) {
        println!();
        println!(
            "API server time per request during each boundary and during the floors (its own apiserver_request_duration_seconds, all clients; from 3 s before the boundary until it settled; the floors run before the manager starts, the spec-write floors' column holds their open and close together, until the Deployments settled; then the time requests waited in its queues (API Priority and Fairness, `apiserver_flowcontrol_request_wait_duration_seconds`) at the manager's priority level; the last rows count the watches it closed because their client did not read their events in time, its `apiserver_terminated_watchers_total`: before closing one it holds that resource's events back from every watcher for up to 100 ms):"
        );
        println!();
        println!(
            "| request | open: n | open: mean ms | close: n | close: mean ms | floor: n | floor: mean ms | spec-write floors: n | spec-write floors: mean ms |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        type Phase = (ServerTimes, ServerTimes);
        let row = |what: &str, cell: &dyn Fn(&Phase) -> String| {
            println!(
                "| {what} | {} | {} | {} | {} |",
                cell(&self.window.open.server),
                cell(&self.window.close.server),
                cell(&self.floor_server.0),
                cell(&self.floor_server.1)
            );
        };
        // n and mean ms of a (sum, count) between the phase's two scrapes.
        let mean = |of: &dyn Fn(&ServerTimes) -> (f64, f64), (before, after): &Phase| {
            let ((s1, c1), (s2, c2)) = (of(before), of(after));
            let n = c2 - c1;
            if n > 0.0 {
                format!("{} | {:.0}", count(n), (s2 - s1) / n * 1000.0)
            } else {
                "0 | —".to_string()
            }
        };
        for (verb, resource) in SERVER_ROWS {
            let key = (verb.to_string(), resource.to_string());
            let of = |t: &ServerTimes| t.requests.get(&key).copied().unwrap_or_default();
            row(&format!("{verb} {resource}"), &|p| mean(&of, p));
        }
        let queued = |t: &ServerTimes| t.queue_wait.get(QUEUE_LEVEL).copied().unwrap_or_default();
        let what = format!("waited in the queues of priority level {QUEUE_LEVEL}");
        row(&what, &|p| mean(&queued, p));
        // Counts only: a watch closed for not reading (apiserver_terminated_watchers_total).
        for resource in CLOSED_ROWS {
            let n = |t: &ServerTimes| t.closed_watches.get(resource).copied().unwrap_or(0.0);
            row(
                &format!("watches of {resource} closed as unresponsive"),
                &|(b, a)| format!("{} | —", count(n(a) - n(b))),
            );
        }
        println!();
        println!(
            "Events published by moonin-scaling during the run (each one an API create or patch, not counted in moonin_api_writes_total): {} objects, {} occurrences ({}).",
            self.events.0,
            self.events.1,
            self.events
                .2
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!();
        let (idle, peak) = (&self.window.idle, &self.window.peak);
        println!(
            "Manager RSS: idle {} (VmRSS 1 s before the window opens; VmHWM until then {}), peak {} (VmHWM after both boundaries), {} at the end (VmRSS).",
            mib(idle.rss_kib),
            mib(idle.hwm_kib),
            mib(peak.hwm_kib),
            mib(peak.rss_kib)
        );
        let (open, close) = (&self.window.open, &self.window.close);
        println!(
            "Manager CPU time (user + system, 1 s before → settled): open {:.2} s, close {:.2} s.",
            open.cpu_secs, close.cpu_secs
        );
    }

    fn print_reference(&self) {
        println!();
        println!(
            "## Reference: published defaults of the polling systems Moonin replaces (NOT measured here)"
        );
        println!();
        let worst = [&self.latencies.both_open, &self.latencies.both_close]
            .into_iter()
            .filter_map(|v| stats(v.clone()))
            .map(|s| s.p99)
            .fold(f64::NAN, f64::max);
        let ratio = |ms: f64| {
            if worst.is_finite() && worst > 0.0 {
                format!("{:.1}×", ms / worst)
            } else {
                "—".into()
            }
        };
        println!(
            "| system | how a boundary takes effect (published defaults) | delay after the boundary | ÷ Moonin's worst p99 above |"
        );
        println!("|---|---|---|---|");
        println!(
            "| KEDA cron scaler | KEDA polls the scaler every `pollingInterval` (default 30 s), then the HPA controller acts on its next sync (`--horizontal-pod-autoscaler-sync-period`, default 15 s) | up to ~45 000 ms | {} |",
            ratio(45_000.0)
        );
        println!(
            "| the agent Moonin replaces | polled an external \"Scaling Rules API\" every 30 s | up to ~30 000 ms | {} |",
            ratio(30_000.0)
        );
        println!();
        println!(
            "These rows are published defaults, not measurements: KEDA's metrics adapter is not run on the local control plane, so KEDA is not run side by side here."
        );
    }

    fn print_checks(&self, p: &Params) {
        let (left, l) = (&self.left, &self.latencies);
        println!();
        println!("## Checks");
        println!();
        println!(
            "- targets not exactly restored after the close (spec, replicas or moonin.io/ marks): {}{}",
            left.not_restored.len(),
            listing(&left.not_restored)
        );
        println!(
            "- objects whose value changed more than twice (override + restore): {}{}",
            l.flapping.len(),
            listing(&l.flapping)
        );
        println!(
            "- templates carrying Moonin's finalizer more than once after startup: {}",
            self.startup.duplicate_finalizers
        );
        if let Some(refused) = self.refused {
            println!(
                "- templates the controller must refuse: {refused} of {} carried their reason (Ready=False: UnknownTimeZone, InvalidSchedule, and TargetNotFound, which a missing target gets once the window opens) when the open edge settled; every template reconciled and the manager quiet {:.1} s after it started",
                p.invalid, self.startup.secs
            );
        }
        println!(
            "- template phases after the close: {}",
            left.phases
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "- manager log: {} warnings, {} errors ({})",
            self.log.warnings, self.log.errors, self.log.path
        );
        for (n, msg) in &self.log.top {
            println!("  - {n}× {msg}");
        }
        println!(
            "- benchmark watches: {} relists, {} errors (a relist would delay an arrival time)",
            l.relists, l.watch_errors
        );
        println!("- the machine at each checkpoint:");
        for (when, note) in &self.window.machine {
            println!("  - {when}: {note}");
        }
        if self.window.machine.iter().any(|(_, n)| n.contains("RIVAL")) {
            println!(
                "- WARNING: another `moonin run` with the scaling controller was running; it reconciles these templates too, so rerun for clean numbers"
            );
        } else {
            println!("- no other `moonin run` with the scaling controller at any checkpoint");
        }
    }
}
