//! kube-state-metrics' side: built from its Go module, run beside the same cluster, timed
//! until warm, then the same steady window.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    Params,
    setup::Setup,
    shared::{
        common, harness,
        http::get_parsed,
        metrics::{label, value},
        process::{Usage, usage},
        report::{mib, progress},
    },
};

/// What kube-state-metrics measured (fields as the report names them).
#[derive(Default)]
pub struct KsmResult {
    /// Its version.
    pub version: String,
    /// Seconds spent building it in this run (None: it was in the cache).
    pub build_secs: Option<f64>,
    /// Process start → the first watch of every resource it lists (each initial list done
    /// and stored).
    pub warm_secs: f64,
    pub warm: Usage,
    /// Process start → /metrics showing the benchmark's Pods, Deployments, Nodes, Services
    /// and Ingresses.
    pub confirmed_secs: f64,
    /// After the /metrics scrapes that confirmed it.
    pub after_scrape: Usage,
    /// kube_node_info, kube_deployment_created, kube_pod_info, kube_service_info,
    /// kube_ingress_info lines.
    pub seen: (usize, usize, usize, usize, usize),
    /// kube_state_metrics_{list,watch}_total until warm, and over the steady window.
    pub warm_lists: f64,
    pub warm_watches: f64,
    pub resources: usize,
    pub steady_secs: f64,
    pub steady_lists: f64,
    pub steady_watches: f64,
    pub end: Usage,
    pub log: String,
}

/// The kube-state-metrics process, stopped when dropped.
struct Ksm {
    child: Child,
}

impl Drop for Ksm {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kube_state_metrics_{list,watch}_total with result="success", by resource.
#[derive(Default, Clone)]
struct KsmTelemetry {
    lists: BTreeMap<String, f64>,
    watches: BTreeMap<String, f64>,
}

impl KsmTelemetry {
    fn parse(body: &str) -> Self {
        let mut t = KsmTelemetry::default();
        for line in body.lines() {
            let Some(v) = value(line) else { continue };
            let map = if line.starts_with("kube_state_metrics_list_total{") {
                &mut t.lists
            } else if line.starts_with("kube_state_metrics_watch_total{") {
                &mut t.watches
            } else {
                continue;
            };
            if label(line, "result") == "success" {
                *map.entry(label(line, "resource").to_string()).or_default() += v;
            }
        }
        t
    }

    /// Every resource it listed has a watch open: its store is filled.
    fn warm(&self) -> bool {
        ["*v1.Pod", "*v1.Deployment", "*v1.Node"]
            .iter()
            .all(|r| self.lists.contains_key(*r))
            && self
                .lists
                .keys()
                .all(|r| self.watches.get(r).is_some_and(|w| *w >= 1.0))
    }

    fn total(m: &BTreeMap<String, f64>) -> f64 {
        m.values().sum()
    }
}

async fn telemetry(addr: SocketAddr) -> Option<KsmTelemetry> {
    get_parsed(addr, "/metrics", KsmTelemetry::parse).await
}

fn ksm_script() -> PathBuf {
    common::root().join("e2e/kube-state-metrics")
}

/// Builds kube-state-metrics when it is not in the cache, runs it against the cluster, and
/// measures it into `r`.
pub async fn measure_ksm(p: &Params, setup: &Setup, r: &mut KsmResult) -> Result<(), String> {
    build(r).await?;
    let (ksm, addrs, launched) = start(r)?;
    let pid = ksm.child.id();
    let deadline = launched + Duration::from_secs(p.warmup_timeout_secs);
    warm_up(p, r, pid, addrs.1, launched, deadline).await?;
    confirm(setup, r, addrs.0, launched, deadline).await;
    r.after_scrape = usage(pid);

    // The same steady window as Moonin's: does it relist?
    let before = telemetry(addrs.1).await.unwrap_or_default();
    let started = Instant::now();
    progress(&format!(
        "kube-state-metrics steady state for {} s",
        p.steady_secs
    ));
    tokio::time::sleep(Duration::from_secs(p.steady_secs)).await;
    let after = telemetry(addrs.1).await.unwrap_or_default();
    r.steady_secs = started.elapsed().as_secs_f64();
    r.steady_lists = KsmTelemetry::total(&after.lists) - KsmTelemetry::total(&before.lists);
    r.steady_watches = KsmTelemetry::total(&after.watches) - KsmTelemetry::total(&before.watches);
    r.end = usage(pid);
    drop(ksm);
    Ok(())
}

/// `e2e/kube-state-metrics --build`, timed when it was not in the cache.
async fn build(r: &mut KsmResult) -> Result<(), String> {
    let script = ksm_script();
    r.version = Command::new(&script)
        .arg("version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cache = std::env::var("MOONIN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            std::env::var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache")
                })
                .join("moonin")
        });
    let cached = cache
        .join("bin")
        .join(format!("kube-state-metrics-{}", r.version))
        .exists();
    if !cached {
        progress(&format!(
            "building kube-state-metrics {} (e2e/kube-state-metrics --build; several minutes the first time)",
            r.version
        ));
    }
    let started = Instant::now();
    let built = tokio::task::spawn_blocking(move || Command::new(script).arg("--build").status())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("e2e/kube-state-metrics --build: {e}"))?;
    if !built.success() {
        return Err(format!("e2e/kube-state-metrics --build failed ({built})"));
    }
    if !cached {
        r.build_secs = Some(started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Starts kube-state-metrics with the current kubeconfig, its log in a temporary file; the
/// process, its (metrics, telemetry) addresses, and when it was launched.
fn start(r: &mut KsmResult) -> Result<(Ksm, (SocketAddr, SocketAddr), Instant), String> {
    let kubeconfig = std::env::var("KUBECONFIG")
        .ok()
        .and_then(|k| k.split(':').next().map(str::to_string))
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| format!("{}/.kube/config", std::env::var("HOME").unwrap_or_default()));
    let (port, telemetry_port) = (free_port()?, free_port()?);
    let log =
        std::env::temp_dir().join(format!("moonin-bench-ksm-{}.log", harness::random_suffix()));
    r.log = log.display().to_string();
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let launched = Instant::now();
    let child = Command::new(ksm_script())
        .args([
            "run",
            "--kubeconfig",
            &kubeconfig,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--telemetry-host",
            "127.0.0.1",
            "--telemetry-port",
            &telemetry_port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("starting kube-state-metrics: {e}"))?;
    // `run` execs the binary: this is its process id.
    let pid = child.id();
    progress(&format!(
        "kube-state-metrics {} pid {pid} on :{port} (telemetry :{telemetry_port}); warming up",
        r.version
    ));
    let addrs = (
        ([127, 0, 0, 1], port).into(),
        ([127, 0, 0, 1], telemetry_port).into(),
    );
    Ok((Ksm { child }, addrs, launched))
}

/// Waits until its telemetry says every resource is listed and watched.
async fn warm_up(
    p: &Params,
    r: &mut KsmResult,
    pid: u32,
    telemetry_addr: SocketAddr,
    launched: Instant,
    deadline: Instant,
) -> Result<(), String> {
    let mut last_print = Instant::now();
    let warm_t = loop {
        if let Some(t) = telemetry(telemetry_addr).await
            && t.warm()
        {
            r.warm_secs = launched.elapsed().as_secs_f64();
            r.warm = usage(pid);
            break t;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "kube-state-metrics was not warm after {} s (log: {})",
                p.warmup_timeout_secs, r.log
            ));
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            progress(&format!(
                "  kube-state-metrics warming up {:.0} s: RSS {}",
                launched.elapsed().as_secs_f64(),
                mib(usage(pid).rss_kib)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    r.warm_lists = KsmTelemetry::total(&warm_t.lists);
    r.warm_watches = KsmTelemetry::total(&warm_t.watches);
    r.resources = warm_t.lists.len();
    progress(&format!(
        "kube-state-metrics warm after {:.1} s ({} resources listed): RSS {} (peak {})",
        r.warm_secs,
        r.resources,
        mib(r.warm.rss_kib),
        mib(r.warm.hwm_kib)
    ));
    Ok(())
}

/// Waits until its /metrics shows the benchmark's Nodes, Deployments and Pods, or the
/// deadline; goes on either way.
async fn confirm(
    setup: &Setup,
    r: &mut KsmResult,
    metrics: SocketAddr,
    launched: Instant,
    deadline: Instant,
) {
    let prefixes = [
        "kube_node_info{",
        "kube_deployment_created{",
        "kube_pod_info{",
        "kube_service_info{",
        "kube_ingress_info{",
    ];
    loop {
        let counts =
            tokio::task::spawn_blocking(move || count_lines(metrics, "/metrics", &prefixes))
                .await
                .ok()
                .flatten();
        if let Some(c) = counts {
            r.seen = (c[0], c[1], c[2], c[3], c[4]);
            if c[0] >= setup.nodes_ready
                && c[1] >= setup.deployments_present
                && c[2] >= setup.pods_running
                && c[3] >= setup.services_present
                && c[4] >= setup.ingresses_present
            {
                r.confirmed_secs = launched.elapsed().as_secs_f64();
                return;
            }
        }
        if Instant::now() >= deadline {
            progress("kube-state-metrics' /metrics never showed every benchmark object; going on");
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `GET path` and counts the lines that start with each of `prefixes`, reading the body
/// as it arrives (kube-state-metrics' answer for a large cluster is hundreds of MB).
fn count_lines(addr: SocketAddr, path: &str, prefixes: &[&str]) -> Option<Vec<usize>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).ok()?;
    if !String::from_utf8_lossy(&line).contains(" 200") {
        return None;
    }
    let mut counts = vec![0; prefixes.len()];
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Some(counts),
            Ok(_) => {
                for (i, prefix) in prefixes.iter().enumerate() {
                    if line.starts_with(prefix.as_bytes()) {
                        counts[i] += 1;
                    }
                }
            }
            Err(_) => return None,
        }
    }
}

/// A port nothing listens on now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
