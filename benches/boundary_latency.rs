//! Scaling boundary latency (TESTING.md, "Benchmarks"): N templates × M actions whose
//! scheduled windows open at the same instant and close at the same instant, each action
//! on its own Deployment with its own HPA.
//!
//! Watches in this process time every write from the boundary instant (the arrival of
//! the first event showing the new value); the manager's own `moonin_api_writes_total`
//! counts its writes; `/proc/<pid>/status` gives its memory. Numbers, not pass/fail.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench boundary_latency
//! MOONIN_BENCH_TEMPLATES=10 MOONIN_BENCH_ACTIONS=2 cargo bench --bench boundary_latency
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

#[allow(dead_code)]
mod shared;
use shared::{common, harness};

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use jiff::{SignedDuration, Timestamp, tz::TimeZone};
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use moonin::api::scaling::{ScalingTemplate, keys};
use serde_json::{Value, json};

use harness::{Manager, TestNamespace};
use shared::{
    machine::{self, builds, wait_until_quiet},
    manager::{self as bench_manager, ManagerSeat, wait_until_leading},
    metrics::{Counters as Scrape, label, scrape, scrape_retrying},
    params::{command_line, positive},
    plane,
    process::{self, ManagerProcess, moonin_managers},
    report::{breakdown, listing, mib, num, progress},
    signals::or_interrupted,
    stats::{Stats, stats},
    wait,
    watch::{self, Seen as Event},
};

/// Deployment replicas before and after the window.
const REPLICAS: i32 = 1;
/// The HPA's own bounds.
const HPA_MIN: i32 = 1;
const HPA_MAX: i32 = 3;
/// The action's bounds during the window.
const ACTION_MIN: i32 = 2;
const ACTION_MAX: i32 = 4;
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

struct Params {
    templates: usize,
    actions: usize,
    setup_secs: i64,
    quiet_secs: u64,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        Ok(Self {
            templates: positive("MOONIN_BENCH_TEMPLATES", 100)? as usize,
            actions: positive("MOONIN_BENCH_ACTIONS", 5)? as usize,
            setup_secs: positive("MOONIN_BENCH_SETUP_SECS", 40)? as i64,
            quiet_secs: positive("MOONIN_BENCH_QUIET_WAIT_SECS", 300)?,
        })
    }

    fn targets(&self) -> usize {
        self.templates * self.actions
    }

    /// Fewest writes a boundary can take: the HPA and the Deployment of every action,
    /// and one status write per template.
    fn minimum_writes(&self) -> usize {
        2 * self.targets() + self.templates
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
                "MOONIN_BENCH_TEMPLATES",
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

// ---------------------------------------------------------------------------------------
// What the watches saw.

/// One object's edges: when its override and its restore were first seen.
#[derive(Default)]
struct Edges {
    open: Option<Timestamp>,
    close: Option<Timestamp>,
    /// The first event showing the override carried Moonin's restore record
    /// (for a Deployment: Moonin raised it, not the HPA controller).
    open_by_moonin: bool,
    /// Value changes seen after the first sighting (2 = one override, one restore).
    changes: u32,
    last: Option<(i32, i32)>,
}

impl Edges {
    fn record(
        &mut self,
        value: (i32, i32),
        at: Timestamp,
        applied: bool,
        restored: bool,
        by_moonin: bool,
    ) {
        if self.last.is_some_and(|l| l != value) {
            self.changes += 1;
        }
        self.last = Some(value);
        if self.open.is_none() {
            if applied {
                self.open = Some(at);
                self.open_by_moonin = by_moonin;
            }
        } else if self.close.is_none() && restored {
            self.close = Some(at);
        }
    }
}

#[derive(Default)]
struct Seen {
    hpas: HashMap<String, Edges>,
    deployments: HashMap<String, Edges>,
    available: HashMap<String, i32>,
    synced: [bool; 3],
    /// Template changes (new resourceVersions) seen after the initial list.
    template_changes: u64,
    relists: u32,
    errors: u32,
}

type Shared = Arc<Mutex<Seen>>;

fn on_hpa(seen: &mut Seen, h: &HorizontalPodAutoscaler, at: Timestamp) {
    let value = (h.spec.min_replicas.unwrap_or(1), h.spec.max_replicas);
    let marked = h.annotations().contains_key(keys::ORIGINAL);
    seen.hpas.entry(h.name_any()).or_default().record(
        value,
        at,
        value == (ACTION_MIN, ACTION_MAX),
        value == (HPA_MIN, HPA_MAX),
        marked,
    );
}

fn on_template(seen: &mut Seen, _: &ScalingTemplate, _: Timestamp) {
    if seen.synced[2] {
        seen.template_changes += 1;
    }
}

fn on_deployment(seen: &mut Seen, d: &Deployment, at: Timestamp) {
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let marked = d.annotations().contains_key(keys::ORIGINAL_REPLICAS);
    let name = d.name_any();
    let available = d
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    seen.available.insert(name.clone(), available);
    seen.deployments.entry(name).or_default().record(
        (replicas, 0),
        at,
        replicas >= ACTION_MIN,
        replicas == REPLICAS,
        marked,
    );
}

/// Watches `api` and records the arrival instant of every event.
fn spawn_watch<K>(api: Api<K>, seen: Shared, index: usize, on: fn(&mut Seen, &K, Timestamp))
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let what = ["HPA", "Deployment", "template"][index];
    watch::spawn(what, api, watcher::Config::default(), move |event| {
        let at = Timestamp::now();
        let mut seen = seen.lock().expect("seen");
        match event {
            Event::Object(o) => on(&mut seen, &o, at),
            Event::Synced => seen.synced[index] = true,
            Event::Relisted => seen.relists += 1,
            Event::Failed => seen.errors += 1,
            Event::Deleted(_) => {}
        }
    });
}

// ---------------------------------------------------------------------------------------
// The manager: metrics, memory, and other managers on this machine.

/// Other managers that reconcile scaling templates (and so would write to ours).
fn rival_managers(identity: &str) -> Vec<ManagerProcess> {
    moonin_managers()
        .into_iter()
        .filter(|m| m.identity != identity && m.runs("scaling"))
        .collect()
}

/// The machine at one instant: load average and what else competes for it.
fn machine_note(identity: &str) -> String {
    machine::note(identity, |m| {
        if m.runs("scaling") {
            "RIVAL scaling manager"
        } else {
            "other manager without scaling"
        }
    })
}

/// The API server's own `apiserver_request_duration_seconds` (sum, count) by
/// (verb, resource[/subresource]), all clients together.
type ServerTimes = BTreeMap<(String, String), (f64, f64)>;

fn server_times() -> ServerTimes {
    let mut out = ServerTimes::new();
    let Ok(o) = std::process::Command::new("kubectl")
        .args(["get", "--raw", "/metrics"])
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let (is_sum, rest) =
            if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
                (true, r)
            } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_count{") {
                (false, r)
            } else {
                continue;
            };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let sub = label(rest, "subresource");
        let resource = match sub {
            "" | "?" => label(rest, "resource").to_string(),
            sub => format!("{}/{sub}", label(rest, "resource")),
        };
        let e = out
            .entry((label(rest, "verb").to_string(), resource))
            .or_default();
        if is_sum {
            e.0 += value;
        } else {
            e.1 += value;
        }
    }
    out
}

async fn server_times_async() -> ServerTimes {
    tokio::task::spawn_blocking(server_times)
        .await
        .unwrap_or_default()
}

/// The requests whose server-side time explains the latencies.
const SERVER_ROWS: [(&str, &str); 7] = [
    ("PATCH", "horizontalpodautoscalers"),
    ("PATCH", "deployments"),
    ("APPLY", "scalingtemplates/status"),
    ("POST", "events"),
    ("PATCH", "events"),
    ("POST", "pods"),
    ("PATCH", "pods/status"),
];

// ---------------------------------------------------------------------------------------
// Objects.

fn deployment(name: &str) -> Deployment {
    harness::kwok_deployment(name, REPLICAS)
}

fn hpa(name: &str) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": HPA_MIN,
            "maxReplicas": HPA_MAX,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
            ]
        }
    }))
    .expect("hpa")
}

fn template(index: usize, actions: usize, open: Timestamp) -> ScalingTemplate {
    let at = open.to_zoned(TimeZone::UTC);
    let actions: Vec<Value> = (0..actions)
        .map(|a| {
            json!({
                "name": format!("a{a}"),
                "target": {"name": target_name(index, a)},
                "minReplicas": ACTION_MIN,
                "maxReplicas": ACTION_MAX
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {"name": template_name(index)},
        "spec": {
            "schedule": format!("{} {} * * *", at.minute(), at.hour()),
            "timeZone": "UTC",
            "duration": "1m",
            "actions": actions
        }
    }))
    .expect("template")
}

// ---------------------------------------------------------------------------------------
// Statistics and the report.

fn ms_since(boundary: Timestamp, at: Timestamp) -> f64 {
    at.duration_since(boundary).as_millis_f64()
}

/// Per target: boundary → the edge `pick` of the HPA, of the Deployment, and of both.
fn latencies(
    seen: &Seen,
    names: &[String],
    boundary: Timestamp,
    pick: fn(&Edges) -> Option<Timestamp>,
) -> [Vec<f64>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for name in names {
        let h = seen.hpas.get(name).and_then(pick);
        let d = seen.deployments.get(name).and_then(pick);
        if let Some(h) = h {
            out[0].push(ms_since(boundary, h));
        }
        if let Some(d) = d {
            out[1].push(ms_since(boundary, d));
        }
        if let (Some(h), Some(d)) = (h, d) {
            out[2].push(ms_since(boundary, h.max(d)));
        }
    }
    out
}

/// One boundary, from a scrape 1 s before it until it settled.
struct Boundary {
    before: Scrape,
    settled: Scrape,
    /// When the write counter last moved (±[`SCRAPE_EVERY`]).
    last_write: Option<Timestamp>,
    complete: bool,
    /// Template changes the watch saw meanwhile (a status write that changed nothing
    /// makes none).
    template_changes: u64,
    /// API server times from just before to just after.
    server: (ServerTimes, ServerTimes),
}

struct Report {
    open: Timestamp,
    close: Timestamp,
    hpa_open: Vec<f64>,
    dep_open: Vec<f64>,
    both_open: Vec<f64>,
    hpa_close: Vec<f64>,
    dep_close: Vec<f64>,
    both_close: Vec<f64>,
    raised_by_moonin: usize,
    /// Templates carrying Moonin's finalizer more than once after startup.
    duplicate_finalizers: usize,
    /// p50 of one PATCH round trip from this process while the manager is idle.
    round_trip: Option<f64>,
    /// The same number of writes sent by this process at one instant (see [`write_floor`]).
    floor: Option<Stats>,
    /// Per action position in its template: p50 and max of [HPA open, Deployment open,
    /// HPA close, Deployment close].
    positions: Vec<[Option<Stats>; 4]>,
    /// Events published by moonin-scaling: (objects, occurrences, by type and reason).
    events: (usize, i64, BTreeMap<String, i64>),
    flapping: Vec<String>,
    startup: Scrape,
    startup_secs: f64,
    open_boundary: Boundary,
    close_boundary: Boundary,
    after_close: Scrape,
    idle: process::Usage,
    peak: process::Usage,
    /// Load and competing processes at each checkpoint.
    machine: Vec<(String, String)>,
    any_other_manager: bool,
    not_restored: Vec<String>,
    phases: BTreeMap<String, usize>,
    log_warnings: usize,
    log_errors: usize,
    /// The most frequent warning and error messages, with counts.
    log_top: Vec<(usize, String)>,
    log_path: String,
    relists: u32,
    watch_errors: u32,
}

/// A counter difference as an integer (never `-0`).
fn count(v: f64) -> i64 {
    v.round() as i64
}

impl Report {
    fn print(&self, p: &Params) {
        let n = p.targets();
        println!();
        println!(
            "## Boundary latency (window {} → {}; from the boundary instant to the first watch event showing the write)",
            self.open, self.close
        );
        println!();
        println!("| phase | n | p50 ms | p95 ms | p99 ms | max ms | goal: p99 < {GOAL_MS:.0} ms |");
        println!("|---|---|---|---|---|---|---|");
        let rows: [(&str, &Vec<f64>); 6] = [
            ("window open → HPA override", &self.hpa_open),
            ("window open → Deployment replicas raised", &self.dep_open),
            ("window open → target done (both writes)", &self.both_open),
            ("window close → HPA restored", &self.hpa_close),
            (
                "window close → Deployment replicas restored",
                &self.dep_close,
            ),
            ("window close → target done (both writes)", &self.both_close),
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
        match &self.floor {
            Some(f) => println!(
                "| *floor: the same {} writes sent by this benchmark at one instant, {} in flight (annotation patches: no controller reacts)* | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                2 * n,
                moonin::scaling::commit::MAX_IN_FLIGHT,
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
        println!();
        println!(
            "Deployments raised by Moonin's own patch (its restore record in the same event): {} of {} ({} raised first by the HPA controller enforcing the new minimum).",
            self.raised_by_moonin,
            self.dep_open.len(),
            self.dep_open.len() - self.raised_by_moonin
        );
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
        for (a, row) in self.positions.iter().enumerate() {
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
        if let Some(rt) = self.round_trip {
            println!();
            println!(
                "For scale: one PATCH round trip from this process took {rt:.0} ms (p50 of 20, just before the window, manager idle); a boundary needs at least {} writes.",
                p.minimum_writes()
            );
        }
        println!();
        for (what, b, boundary) in [
            ("open", &self.open_boundary, self.open),
            ("close", &self.close_boundary, self.close),
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
                    self.startup_secs
                ),
                self.startup.clone(),
                format!("minimum {}", 2 * p.templates),
            ),
            (
                "window open (1 s before → settled)".to_string(),
                self.open_boundary.settled.minus(&self.open_boundary.before),
                format!("minimum {min}"),
            ),
            (
                "between boundaries (settled after open → 1 s before close)".to_string(),
                self.close_boundary
                    .before
                    .minus(&self.open_boundary.settled),
                "0".to_string(),
            ),
            (
                "window close (1 s before → settled)".to_string(),
                self.close_boundary
                    .settled
                    .minus(&self.close_boundary.before),
                format!("minimum {min}"),
            ),
            (
                "after close (settled → +10 s)".to_string(),
                self.after_close.minus(&self.close_boundary.settled),
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
        for (what, b) in [
            ("open", &self.open_boundary),
            ("close", &self.close_boundary),
        ] {
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
        println!();
        println!(
            "API server time per request during each boundary (its own apiserver_request_duration_seconds, all clients; from 3 s before the boundary until it settled):"
        );
        println!();
        println!("| request | open: n | open: mean ms | close: n | close: mean ms |");
        println!("|---|---|---|---|---|");
        for (verb, resource) in SERVER_ROWS {
            let cell = |b: &Boundary| {
                let key = (verb.to_string(), resource.to_string());
                let (s1, c1) = b.server.0.get(&key).copied().unwrap_or_default();
                let (s2, c2) = b.server.1.get(&key).copied().unwrap_or_default();
                let n = c2 - c1;
                if n > 0.0 {
                    format!("{} | {:.0}", count(n), (s2 - s1) / n * 1000.0)
                } else {
                    "0 | —".to_string()
                }
            };
            println!(
                "| {verb} {resource} | {} | {} |",
                cell(&self.open_boundary),
                cell(&self.close_boundary)
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
        println!(
            "Manager RSS: idle {} (VmRSS 1 s before the window opens; VmHWM until then {}), peak {} (VmHWM after both boundaries), {} at the end (VmRSS).",
            mib(self.idle.rss_kib),
            mib(self.idle.hwm_kib),
            mib(self.peak.hwm_kib),
            mib(self.peak.rss_kib)
        );

        println!();
        println!(
            "## Reference: published defaults of the polling systems Moonin replaces (NOT measured here)"
        );
        println!();
        let worst = [&self.both_open, &self.both_close]
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

        println!();
        println!("## Checks");
        println!();
        println!(
            "- targets not exactly restored after the close (spec, replicas or moonin.io/ marks): {}{}",
            self.not_restored.len(),
            listing(&self.not_restored)
        );
        println!(
            "- objects whose value changed more than twice (override + restore): {}{}",
            self.flapping.len(),
            listing(&self.flapping)
        );
        println!(
            "- templates carrying Moonin's finalizer more than once after startup: {}",
            self.duplicate_finalizers
        );
        println!(
            "- template phases after the close: {}",
            self.phases
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "- manager log: {} warnings, {} errors ({})",
            self.log_warnings, self.log_errors, self.log_path
        );
        for (n, msg) in &self.log_top {
            println!("  - {n}× {msg}");
        }
        println!(
            "- benchmark watches: {} relists, {} errors (a relist would delay an arrival time)",
            self.relists, self.watch_errors
        );
        println!("- the machine at each checkpoint:");
        for (when, note) in &self.machine {
            println!("  - {when}: {note}");
        }
        if self.any_other_manager {
            println!(
                "- WARNING: another `moonin run` with the scaling controller was running; it reconciles these templates too, so rerun for clean numbers"
            );
        } else {
            println!("- no other `moonin run` with the scaling controller at any checkpoint");
        }
    }
}

// ---------------------------------------------------------------------------------------
// The run.

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
    let outcome = or_interrupted(measure(&client, &params, &seat, &mut manager)).await;
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
    cleanup(&client, &ns.name, alive).await;
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
        "- parameters: {} templates × {} actions = {} Deployments (replicas {REPLICAS}), each with its own HPA (min {HPA_MIN}, max {HPA_MAX}); action minReplicas {ACTION_MIN}, maxReplicas {ACTION_MAX}; every template `schedule: \"M H * * *\"`, `timeZone: UTC`, `duration: 1m` (the same minute for all)",
        p.templates,
        p.actions,
        p.targets()
    );
    machine::print_header_lines(&version, " as the manager and this benchmark");
    println!(
        "- manager: one `moonin run --controllers scaling` (release build), impersonating the ServiceAccount with config/rbac; latencies are taken by watches in this process"
    );
}

async fn sleep_until(t: Timestamp) {
    if let Ok(d) = Duration::try_from(t.duration_since(Timestamp::now())) {
        tokio::time::sleep(d).await;
    }
}

/// Waits out a boundary: until `done` holds for what the watches saw and the write
/// counter stood still for [`QUIET`], or `deadline`.
async fn boundary(
    addr: SocketAddr,
    seen: &Shared,
    before: Scrape,
    deadline: Instant,
    done: impl Fn(&Seen) -> bool,
) -> Boundary {
    let changes_before = seen.lock().expect("seen").template_changes;
    let mut last = before.clone();
    let mut last_write = None;
    let mut moved = Instant::now();
    loop {
        tokio::time::sleep(SCRAPE_EVERY).await;
        if let Some(s) = scrape(addr).await {
            if s.writes_total() != last.writes_total() {
                last_write = Some(Timestamp::now());
                moved = Instant::now();
            }
            last = s;
        }
        let (complete, changes) = {
            let s = seen.lock().expect("seen");
            (done(&s), s.template_changes - changes_before)
        };
        if (complete && moved.elapsed() >= QUIET) || Instant::now() >= deadline {
            return Boundary {
                before,
                settled: last,
                last_write,
                complete,
                template_changes: changes,
                server: Default::default(),
            };
        }
    }
}

async fn measure(
    client: &Client,
    p: &Params,
    seat: &ManagerSeat,
    manager_slot: &mut Option<Manager>,
) -> Result<Report, String> {
    let (ns, identity) = (seat.namespace.as_str(), seat.identity.as_str());
    let names = p.names();
    let n = names.len();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let templates: Api<ScalingTemplate> = Api::namespaced(client.clone(), ns);

    let seen: Shared = Arc::default();
    spawn_watch(hpas.clone(), seen.clone(), 0, on_hpa);
    spawn_watch(deployments.clone(), seen.clone(), 1, on_deployment);
    spawn_watch(templates.clone(), seen.clone(), 2, on_template);
    wait::until(
        "the benchmark's watches to sync",
        Instant::now() + Duration::from_secs(30),
        POLL,
        || async {
            seen.lock()
                .expect("seen")
                .synced
                .iter()
                .all(|s| *s)
                .then_some(())
        },
    )
    .await?;

    // 1. The targets.
    let started = Instant::now();
    let pp = PostParams::default();
    stream::iter(names.clone())
        .map(|name| {
            let (deployments, hpas, pp) = (deployments.clone(), hpas.clone(), pp.clone());
            async move {
                deployments.create(&pp, &deployment(&name)).await?;
                hpas.create(&pp, &hpa(&name)).await?;
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| format!("creating the Deployments and HPAs: {e}"))?;
    progress(&format!(
        "created {n} Deployments and {n} HPAs in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let available = wait::until(
        "every Deployment to be available",
        Instant::now() + Duration::from_secs(300),
        POLL,
        || async {
            let s = seen.lock().expect("seen");
            (s.hpas.len() == n && s.available.values().filter(|a| **a >= REPLICAS).count() == n)
                .then_some(())
        },
    )
    .await;
    if let Err(e) = available {
        progress(&format!("{e}; going on (the control plane is still busy)"));
    } else {
        progress(&format!(
            "every Deployment available after {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    let quiet = wait_until_quiet(
        "a quiet machine (no other scaling manager, no build)",
        Duration::from_secs(p.quiet_secs),
        POLL,
        || {
            let busy = !rival_managers(identity).is_empty() || !builds().is_empty();
            busy.then(|| machine_note(identity))
        },
    )
    .await;
    if let Err(e) = quiet {
        progress(&format!("{e}; going on, numbers may be noisy"));
    }

    // The API server's write floor on this machine: the same number of writes (one per
    // Deployment and one per HPA, Deployment first), sent by this process as fast as the
    // same in-flight bound allows. Annotation-only, so no controller cascades follow.
    let floor = write_floor(client, ns, &names).await;
    if let Some(f) = &floor {
        progress(&format!(
            "write floor: {} writes, p99 {:.0} ms, all done after {:.0} ms",
            f.n, f.p99, f.max
        ));
    }

    // 2. The templates, on the next whole minute that leaves time to set up.
    let earliest = Timestamp::now().as_second() + p.setup_secs;
    let open = Timestamp::from_second((earliest + 59) / 60 * 60).expect("timestamp");
    let close = open + SignedDuration::from_secs(60);
    progress(&format!("window {open} → {close}"));
    stream::iter(0..p.templates)
        .map(|t| {
            let (templates, pp) = (templates.clone(), pp.clone());
            async move { templates.create(&pp, &template(t, p.actions, open)).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| format!("creating the templates: {e}"))?;
    progress(&format!("created {} templates", p.templates));

    // 3. The manager.
    let launched = Instant::now();
    let manager = seat.start("scaling", &[]).await;
    let addr = manager.addr;
    let log_path = manager.log.display().to_string();
    let pid = process::pid_of(identity)?;
    *manager_slot = Some(manager);
    let setup_deadline = Instant::now()
        + Duration::try_from(open.duration_since(Timestamp::now()) - SignedDuration::from_secs(3))
            .unwrap_or_default();
    wait_until_leading(addr, setup_deadline)
        .await
        .map_err(|e| format!("{e} before the window (raise MOONIN_BENCH_SETUP_SECS)"))?;
    progress(&format!(
        "manager pid {pid} ready and leading after {:.1} s",
        launched.elapsed().as_secs_f64()
    ));
    let templates_idle = |list: &[ScalingTemplate]| {
        list.len() == p.templates
            && list.iter().all(|t| {
                t.finalizers().iter().any(|f| f == keys::FINALIZER)
                    && t.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Idle")
            })
    };
    let mut last_total = f64::NAN;
    let mut moved = Instant::now();
    let startup = loop {
        if let Some(s) = scrape(addr).await {
            if s.writes_total() != last_total {
                (last_total, moved) = (s.writes_total(), Instant::now());
            } else if moved.elapsed() >= QUIET
                && let Ok(list) = templates.list(&ListParams::default()).await
                && templates_idle(&list.items)
            {
                break s;
            }
        }
        if Instant::now() >= setup_deadline {
            return Err(
                "timed out waiting for every template to be Idle and the manager quiet \
                        before the window (raise MOONIN_BENCH_SETUP_SECS)"
                    .into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let startup_secs = launched.elapsed().as_secs_f64() - QUIET.as_secs_f64();
    let duplicate_finalizers = templates
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|t| {
                    t.finalizers()
                        .iter()
                        .filter(|f| *f == keys::FINALIZER)
                        .count()
                        > 1
                })
                .count()
        })
        .unwrap_or(0);
    let round_trip = patch_round_trip(client, ns).await;
    progress(&format!(
        "templates Idle; {} startup writes; {:.0} s until the window opens",
        count(startup.writes_total()),
        open.duration_since(Timestamp::now()).as_secs_f64()
    ));

    // 4. The window opens.
    let mut seen_others: Vec<(String, String)> = Vec::new();
    sleep_until(open - SignedDuration::from_secs(3)).await;
    let server_before_open = server_times_async().await;
    sleep_until(open - SignedDuration::from_secs(1)).await;
    let before_open = scrape_retrying(addr).await?;
    let idle = process::usage(pid);
    seen_others.push(("1 s before open".to_string(), machine_note(identity)));
    let all = |pick: fn(&Edges) -> Option<Timestamp>| {
        let names = names.clone();
        move |s: &Seen| {
            names.iter().all(|name| {
                s.hpas.get(name).and_then(pick).is_some()
                    && s.deployments.get(name).and_then(pick).is_some()
            })
        }
    };
    let mut open_boundary = boundary(
        addr,
        &seen,
        before_open,
        Instant::now() + Duration::from_secs(50),
        all(|e| e.open),
    )
    .await;
    open_boundary.server = (server_before_open, server_times_async().await);
    progress(&format!(
        "open boundary settled ({} writes)",
        count(
            open_boundary
                .settled
                .minus(&open_boundary.before)
                .writes_total()
        )
    ));
    seen_others.push(("open settled".to_string(), machine_note(identity)));

    // 5. The window closes.
    sleep_until(close - SignedDuration::from_secs(3)).await;
    let server_before_close = server_times_async().await;
    sleep_until(close - SignedDuration::from_secs(1)).await;
    let before_close = scrape_retrying(addr).await?;
    seen_others.push(("1 s before close".to_string(), machine_note(identity)));
    let mut close_boundary = boundary(
        addr,
        &seen,
        before_close,
        Instant::now() + Duration::from_secs(60),
        all(|e| e.close),
    )
    .await;
    close_boundary.server = (server_before_close, server_times_async().await);
    progress(&format!(
        "close boundary settled ({} writes)",
        count(
            close_boundary
                .settled
                .minus(&close_boundary.before)
                .writes_total()
        )
    ));
    seen_others.push(("close settled".to_string(), machine_note(identity)));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after_close = scrape_retrying(addr).await?;
    let peak = process::usage(pid);

    // 6. What is left.
    let mut not_restored = Vec::new();
    let marked = |a: &BTreeMap<String, String>| a.keys().any(|k| k.starts_with("moonin.io/"));
    for h in hpas
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        if h.spec.min_replicas != Some(HPA_MIN)
            || h.spec.max_replicas != HPA_MAX
            || marked(h.annotations())
        {
            not_restored.push(format!(
                "HPA {} min {:?} max {}",
                h.name_any(),
                h.spec.min_replicas,
                h.spec.max_replicas
            ));
        }
    }
    for d in deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        let replicas = d.spec.as_ref().and_then(|s| s.replicas);
        if replicas != Some(REPLICAS) || marked(d.annotations()) {
            not_restored.push(format!("Deployment {} replicas {replicas:?}", d.name_any()));
        }
    }
    let mut phases = BTreeMap::new();
    for t in templates
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        let phase = t
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "none".into());
        *phases.entry(phase).or_default() += 1;
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    // One line per kind of problem: the message and the error without object names.
    let mut log_top: Vec<(usize, String)> = bench_manager::problems(&log, None, &format!("{ns}/"))
        .into_iter()
        .map(|(k, n)| (n, k))
        .collect();
    log_top.sort_by_key(|b| std::cmp::Reverse(b.0));
    log_top.truncate(5);
    let (log_warnings, log_errors) = bench_manager::log_levels(&log);

    let events = moonin_events(client, ns).await;

    let s = seen.lock().expect("seen");
    let positions = (0..p.actions)
        .map(|a| {
            let names: Vec<String> = (0..p.templates).map(|t| target_name(t, a)).collect();
            let [h_open, d_open, _] = latencies(&s, &names, open, |e| e.open);
            let [h_close, d_close, _] = latencies(&s, &names, close, |e| e.close);
            [h_open, d_open, h_close, d_close].map(stats)
        })
        .collect();
    let [hpa_open, dep_open, both_open] = latencies(&s, &names, open, |e| e.open);
    let [hpa_close, dep_close, both_close] = latencies(&s, &names, close, |e| e.close);
    let raised_by_moonin = names
        .iter()
        .filter(|n| {
            s.deployments
                .get(*n)
                .is_some_and(|e| e.open.is_some() && e.open_by_moonin)
        })
        .count();
    let mut flapping: Vec<String> = s
        .hpas
        .iter()
        .filter(|(_, e)| e.changes > 2)
        .map(|(n, e)| format!("HPA {n}: {} changes", e.changes))
        .chain(
            s.deployments
                .iter()
                .filter(|(_, e)| e.changes > 2)
                .map(|(n, e)| format!("Deployment {n}: {} changes", e.changes)),
        )
        .collect();
    flapping.sort();
    Ok(Report {
        open,
        close,
        hpa_open,
        dep_open,
        both_open,
        hpa_close,
        dep_close,
        both_close,
        raised_by_moonin,
        duplicate_finalizers,
        round_trip,
        floor,
        positions,
        events,
        flapping,
        startup,
        startup_secs,
        open_boundary,
        close_boundary,
        after_close,
        idle,
        peak,
        any_other_manager: seen_others.iter().any(|(_, n)| n.contains("RIVAL")),
        machine: seen_others,
        not_restored,
        phases,
        log_top,
        log_warnings,
        log_errors,
        log_path,
        relists: s.relists,
        watch_errors: s.errors,
    })
}

/// p50 of 20 sequential PATCHes of a ConfigMap of our own, before the boundary: what one
/// request costs on this control plane when nothing else is going on.
/// Sends a merge patch of one annotation to every target's Deployment and then its HPA,
/// with at most [`moonin::scaling::commit::MAX_IN_FLIGHT`] requests in flight, all started
/// at one instant; the time from that instant to each write's response.
async fn write_floor(client: &Client, ns: &str, names: &[String]) -> Option<Stats> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let patch = Patch::Merge(json!({"metadata": {"annotations": {"bench/floor": "1"}}}));
    let pp = PatchParams::default();
    let start = Instant::now();
    let times: Vec<f64> = stream::iter(names)
        .map(|name| {
            let (deployments, hpas, patch, pp) = (&deployments, &hpas, &patch, &pp);
            async move {
                let mut out = Vec::new();
                if deployments.patch(name, pp, patch).await.is_ok() {
                    out.push(start.elapsed().as_secs_f64() * 1000.0);
                }
                if hpas.patch(name, pp, patch).await.is_ok() {
                    out.push(start.elapsed().as_secs_f64() * 1000.0);
                }
                out
            }
        })
        .buffer_unordered(moonin::scaling::commit::MAX_IN_FLIGHT)
        .flat_map(stream::iter)
        .collect()
        .await;
    stats(times)
}

async fn patch_round_trip(client: &Client, ns: &str) -> Option<f64> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = serde_json::from_value(json!({"metadata": {"name": "bench-probe"}})).ok()?;
    api.create(&PostParams::default(), &cm).await.ok()?;
    let mut times = Vec::new();
    for i in 0..20 {
        let started = Instant::now();
        api.patch(
            "bench-probe",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .ok()?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    stats(times).map(|s| s.p50)
}

/// Events from moonin-scaling: (objects, occurrences counting series, occurrences by
/// type and reason).
async fn moonin_events(client: &Client, ns: &str) -> (usize, i64, BTreeMap<String, i64>) {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let ours: Vec<_> = list
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("moonin-scaling"))
        .collect();
    let times = |e: &k8s_openapi::api::events::v1::Event| {
        e.series.as_ref().map_or(1, |s| i64::from(s.count))
    };
    let mut by_reason = BTreeMap::new();
    for e in &ours {
        let key = format!(
            "{} {}",
            e.type_.as_deref().unwrap_or("?"),
            e.reason.as_deref().unwrap_or("?")
        );
        *by_reason.entry(key).or_default() += times(e);
    }
    (ours.len(), ours.iter().map(times).sum(), by_reason)
}

/// Deletes the templates while the manager runs (their finalizers revert the targets),
/// then lets the namespace go. Without a manager, or if it does not finish, the
/// finalizers are removed so the namespace is not stuck.
async fn cleanup(client: &Client, ns: &str, manager_running: bool) {
    let templates: Api<ScalingTemplate> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    let _ = templates
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let gone = if manager_running {
        wait::until_none_left(
            "the templates to be deleted",
            &templates,
            &ListParams::default(),
            Instant::now() + Duration::from_secs(120),
            POLL,
        )
        .await
    } else {
        Err("no manager".into())
    };
    match gone {
        Ok(()) => progress(&format!(
            "cleanup: templates deleted (finalizers ran) in {:.1} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => {
            progress(&format!("cleanup: {e}; removing the finalizers"));
            if let Ok(list) = templates.list(&ListParams::default()).await {
                for t in list.items {
                    let _ = templates
                        .patch(
                            &t.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            }
        }
    }
}
