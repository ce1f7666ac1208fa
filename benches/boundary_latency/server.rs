//! What else competes for the machine and the API server: other managers, and the API
//! server's own request times, which explain the latencies.

use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use crate::shared::{
    machine,
    metrics::label,
    process::{self, ManagerProcess, moonin_managers},
};

/// Other managers that reconcile scaling templates (and so would write to ours).
pub fn rival_managers(identity: &str) -> Vec<ManagerProcess> {
    moonin_managers()
        .into_iter()
        .filter(|m| m.identity != identity && m.runs("scaling"))
        .collect()
}

/// The machine at one instant: load average and what else competes for it.
pub fn machine_note(identity: &str) -> String {
    machine::note(identity, |m| {
        if m.runs("scaling") {
            "RIVAL scaling manager"
        } else {
            "other manager without scaling"
        }
    })
}

/// What the API server's `/metrics` said at one instant.
#[derive(Clone, Debug, Default)]
pub struct ServerTimes {
    /// Its `apiserver_request_duration_seconds` (sum in seconds, count) by
    /// (verb, resource[/subresource]), all clients together.
    pub requests: BTreeMap<(String, String), (f64, f64)>,
    /// Its `apiserver_terminated_watchers_total` by resource: the watches it closed because
    /// their client did not read its events in time. Until it does, or its time budget is
    /// spent, the API server holds back that resource's events from every other watcher too.
    pub closed_watches: BTreeMap<String, f64>,
    /// Its `apiserver_flowcontrol_request_wait_duration_seconds` of the requests it went on
    /// to execute (sum, count) by priority level: the time they waited in its queues
    /// (API Priority and Fairness) before it began to serve them.
    pub queue_wait: BTreeMap<String, (f64, f64)>,
    /// Its `go_gc_duration_seconds_count`: the garbage collections its Go runtime has
    /// completed. A collection of its heap (hundreds of MiB once the objects are cached)
    /// takes a quarter of its cores for the marking and slows every request meanwhile.
    pub gc_cycles: f64,
}

/// The resources whose closed watches are reported: those the manager and this benchmark
/// both watch.
pub const CLOSED_ROWS: [&str; 3] = [
    "deployments",
    "horizontalpodautoscalers",
    "scalingtemplates",
];

fn server_times() -> ServerTimes {
    let mut out = ServerTimes::default();
    let Ok(o) = std::process::Command::new("kubectl")
        .args(["get", "--raw", "/metrics"])
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some(n) = line.strip_prefix("go_gc_duration_seconds_count ") {
            out.gc_cycles = n.trim().parse().unwrap_or(0.0);
        } else if let Some(rest) = line.strip_prefix("apiserver_terminated_watchers_total{") {
            let n = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            *out.closed_watches
                .entry(label(rest, "resource").to_string())
                .or_default() += n.unwrap_or(0.0);
        } else if let Some((sum, rest, v)) =
            histogram_sample(line, "apiserver_request_duration_seconds")
        {
            let resource = match label(rest, "subresource") {
                "" | "?" => label(rest, "resource").to_string(),
                sub => format!("{}/{sub}", label(rest, "resource")),
            };
            let key = (label(rest, "verb").to_string(), resource);
            add(out.requests.entry(key).or_default(), sum, v);
        } else if let Some((sum, rest, v)) =
            histogram_sample(line, "apiserver_flowcontrol_request_wait_duration_seconds")
            && label(rest, "execute") == "true"
        {
            let level = label(rest, "priority_level").to_string();
            add(out.queue_wait.entry(level).or_default(), sum, v);
        }
    }
    out
}

/// `line` as a sample of histogram `metric`'s `_sum` (true) or `_count` (false): its
/// labels (and what follows them) and its value.
fn histogram_sample<'a>(line: &'a str, metric: &str) -> Option<(bool, &'a str, f64)> {
    let rest = line.strip_prefix(metric)?;
    let (sum, rest) = match rest.strip_prefix("_sum{") {
        Some(r) => (true, r),
        None => (false, rest.strip_prefix("_count{")?),
    };
    let value = rest.rsplit(' ').next()?.parse().ok()?;
    Some((sum, rest, value))
}

/// Adds a sample's value to the sum or the count of `e`.
fn add(e: &mut (f64, f64), sum: bool, value: f64) {
    if sum {
        e.0 += value;
    } else {
        e.1 += value;
    }
}

/// The API server's request times now (zero when `kubectl get --raw /metrics` fails).
pub async fn server_times_async() -> ServerTimes {
    tokio::task::spawn_blocking(server_times)
        .await
        .unwrap_or_default()
}

/// The CPU time (user + system) of the `kube-apiserver` process on this machine so far,
/// if it runs here (the local control plane's does).
pub fn server_cpu() -> Option<f64> {
    CpuMark::now().map(|m| m.by[0])
}

/// The API server counts as idle below this many cores of CPU over [`IDLE_OVER`] (it
/// spends 0.05-0.07 here with nothing going on but the watches and the Lease renewals).
pub const IDLE_CORES: f64 = 0.12;
/// … measured over this long: longer than the HPA controller's sync period (15 s), so
/// that a pause between two of its bursts does not pass for quiet.
pub const IDLE_OVER: Duration = Duration::from_secs(16);

/// Whether the API server is idle: its CPU over the last [`IDLE_OVER`], from the samples
/// taken at each call. Without a metrics server the HPA controller records Warning Events
/// about each HPA every 15 s (it cannot read their CPU) until client-go's spam filter stops
/// them, three and a half minutes after the HPAs appear: 500 HPAs make bursts of some 700
/// Event writes. Each edge and floor leaves a cascade (ReplicaSets, Pods, Events) behind it
/// that the API server serves for up to half a minute. A floor or an edge measured in
/// either is measured against them too.
#[derive(Default)]
pub struct IdleServer {
    samples: VecDeque<(Instant, f64)>,
}

impl IdleServer {
    /// `None` when the API server is idle (or does not run on this machine, so that its
    /// CPU cannot be read); otherwise what it spends.
    pub fn busy(&mut self) -> Option<String> {
        let cpu = server_cpu()?;
        let now = Instant::now();
        self.samples.push_back((now, cpu));
        while self
            .samples
            .get(1)
            .is_some_and(|(at, _)| now.duration_since(*at) >= IDLE_OVER)
        {
            self.samples.pop_front();
        }
        let (first_at, first_cpu) = *self.samples.front()?;
        let over = now.duration_since(first_at);
        if over < IDLE_OVER {
            return Some("the API server's CPU not yet sampled for long enough".into());
        }
        let cores = (cpu - first_cpu) / over.as_secs_f64();
        (cores >= IDLE_CORES).then(|| {
            format!(
                "the API server busy ({cores:.2} cores over the last {:.0} s)",
                over.as_secs_f64()
            )
        })
    }
}

/// What one interval of the run cost: the API server's garbage collections, and the CPU
/// time of the API server and of everything else on this machine (see [`CpuMark`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Work {
    /// The CPU spent from the interval's first write until every write was seen (`None`
    /// when the API server does not run on this machine).
    pub cpu: Option<CpuSpent>,
    /// Its garbage collections completed from just before to just after the interval.
    pub gc_cycles: f64,
}

impl Work {
    /// The API server's CPU time over the interval.
    pub fn api_secs(&self) -> Option<f64> {
        self.cpu.map(|c| c.by[0])
    }
}

/// The processes whose CPU time an interval reports, each by the names the kernel gives
/// them (`/proc/PID/comm`, cut at 15 bytes), in the order of [`CpuMark::by`]; the
/// benchmark itself is found by its process id.
pub const CPU_GROUPS: [(&str, &[&str]); 5] = [
    ("API server", &["kube-apiserver"]),
    ("etcd", &["etcd"]),
    (
        "controllers (kube-controller-manager, kube-scheduler, kwok)",
        &["kube-controller", "kube-scheduler", "kwok-controller"],
    ),
    ("the manager", &["moonin"]),
    ("this benchmark", &[]),
];

/// The CPU time (user + system, seconds) of each group of [`CPU_GROUPS`] so far, and of the
/// whole machine: whether the writes of an interval waited for an API server that had the
/// machine's cores to itself, or shared them, and with whom.
#[derive(Clone, Copy, Debug)]
pub struct CpuMark {
    at: Instant,
    /// By group, in the order of [`CPU_GROUPS`].
    by: [f64; 5],
    /// Every core's time not idle (user, nice, system, interrupts; not I/O wait or steal).
    busy: f64,
}

impl CpuMark {
    /// The mark now; `None` when no API server runs on this machine.
    pub fn now() -> Option<Self> {
        let at = Instant::now();
        let me = std::process::id();
        let mut by = [0.0; 5];
        let mut api = false;
        for pid in std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        {
            let group = if pid == me {
                Some(4)
            } else {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                let comm = comm.trim_end();
                CPU_GROUPS
                    .iter()
                    .position(|(_, names)| names.contains(&comm))
            };
            if let Some(g) = group {
                api |= g == 0;
                by[g] += process::usage(pid).cpu_secs;
            }
        }
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<f64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal, in ticks of 1/100 s.
        let busy = [0, 1, 2, 5, 6]
            .iter()
            .filter_map(|&i| ticks.get(i))
            .sum::<f64>()
            / 100.0;
        api.then_some(CpuMark { at, by, busy })
    }

    /// What was spent from `start` to this mark.
    pub fn since(&self, start: &CpuMark) -> CpuSpent {
        let mut by = self.by;
        for (b, s) in by.iter_mut().zip(start.by) {
            *b -= s;
        }
        CpuSpent {
            secs: self.at.duration_since(start.at).as_secs_f64(),
            by,
            busy: self.busy - start.busy,
        }
    }
}

/// The CPU time spent over an interval: by group and by the whole machine.
#[derive(Clone, Copy, Debug)]
pub struct CpuSpent {
    /// The interval's length.
    pub secs: f64,
    /// By group, in the order of [`CPU_GROUPS`].
    pub by: [f64; 5],
    /// By every core together.
    pub busy: f64,
}

impl CpuSpent {
    /// The share of the machine's cores busy over the interval.
    pub fn busy_share(&self) -> f64 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        self.busy / (self.secs * cores).max(f64::EPSILON)
    }
}

/// The API server's garbage collections and the machine's CPU at one instant. The API
/// server's `/metrics` is read before the CPU at an interval's start and after it at the
/// end, so that rendering them is not counted.
#[derive(Clone, Copy, Debug)]
pub struct WorkMark {
    /// Its garbage collections completed so far.
    pub gc_cycles: f64,
    /// The CPU so far (`None` when the API server does not run on this machine).
    pub cpu: Option<CpuMark>,
}

impl WorkMark {
    /// A mark at an interval's start.
    pub async fn start() -> Self {
        let gc_cycles = server_times_async().await.gc_cycles;
        WorkMark {
            gc_cycles,
            cpu: CpuMark::now(),
        }
    }

    /// A mark at an interval's end.
    pub async fn end() -> Self {
        let cpu = CpuMark::now();
        WorkMark {
            gc_cycles: server_times_async().await.gc_cycles,
            cpu,
        }
    }

    /// What was spent from `start` to this mark.
    pub fn since(&self, start: &WorkMark) -> Work {
        Work {
            cpu: self.cpu.zip(start.cpu).map(|(a, b)| a.since(&b)),
            gc_cycles: self.gc_cycles - start.gc_cycles,
        }
    }
}

/// The priority level whose queue waits are reported: the manager's and the floors' (its
/// ServiceAccount's flow schema, `service-accounts`). The local control plane's controllers
/// run as an exempt user, whose requests never queue.
pub const QUEUE_LEVEL: &str = "workload-low";

/// The requests whose server-side time explains the latencies.
pub const SERVER_ROWS: [(&str, &str); 9] = [
    ("PATCH", "horizontalpodautoscalers"),
    ("PATCH", "deployments"),
    // The Deployment controller's writes: a ReplicaSet's replicas, and the annotations it
    // copies from its Deployment; the Deployment's status.
    ("PUT", "replicasets"),
    ("PUT", "deployments/status"),
    ("APPLY", "scalingtemplates/status"),
    ("POST", "events"),
    ("PATCH", "events"),
    ("POST", "pods"),
    ("PATCH", "pods/status"),
];

/// With `MOONIN_BENCH_PPROF=DIR`, the API server's CPU profile from now on, as four
/// back-to-back one-second profiles (`DIR/NN-label-K.pb`, read with `go tool pprof`), so
/// that an interval can be compared with another kind by kind of work. Off by default.
pub fn profile(label: &str) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Ok(dir) = std::env::var("MOONIN_BENCH_PPROF") else {
        return;
    };
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let label = format!("{dir}/{n:02}-{label}");
    tokio::task::spawn_blocking(move || {
        for k in 0..4 {
            let out = std::process::Command::new("kubectl")
                .args(["get", "--raw", "/debug/pprof/profile?seconds=1"])
                .output();
            if let Ok(o) = out {
                let _ = std::fs::write(format!("{label}-{k}.pb"), o.stdout);
            }
        }
    });
}
