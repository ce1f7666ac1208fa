//! Soak: a manager running every controller under mixed churn for a long while (40 minutes
//! by default, the first 10 a warm-up while bounded state fills) — a window opening every minute over Deployments with HPAs, claims at a steady
//! rate and released again, an image change every 10 s, a namespace created and an older one
//! deleted every 30 s — with its RSS, open sockets, request rate and reconcile errors sampled
//! every 10 s into a table. No fault is injected, so every reconcile error is unexplained.
//! Numbers, not pass/fail.
//!
//! ```sh
//! e2e/cluster up && eval "$(e2e/cluster env)"
//! cargo bench --bench soak
//! MOONIN_BENCH_MINUTES=5 MOONIN_BENCH_WARMUP_MINUTES=1 cargo bench --bench soak
//! ```
//!
//! Without `--bench` (how `cargo test --all-targets` runs it) it only says how to run it.

#[allow(dead_code)]
#[path = "../shared/mod.rs"]
mod shared;

use std::{
    collections::BTreeMap,
    process::ExitCode,
    time::{Duration, Instant},
};

use futures::future::join_all;
use k8s_openapi::api::{
    apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::Namespace,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use moonin::api::sandbox::{SandboxClaim, SandboxPool};
use moonin::api::scaling::ScalingTemplate;
use serde_json::json;
use tokio_util::sync::CancellationToken;

// The harness and the shared modules reach the tests' helpers as `crate::common`.
use shared::{
    common,
    harness::{self, TestNamespace, kwok_deployment},
    manager::{ManagerSeat, log_levels},
    metrics::{Counters, scrape},
    params::{command_line, positive},
    plane,
    process::{pid_of, usage},
    report::{mib, progress},
    signals::or_interrupted,
};

fn main() -> ExitCode {
    plane::main("soak", 4, "", run)
}

struct Params {
    minutes: u64,
    warmup_minutes: u64,
    sample_secs: u64,
    deployments: usize,
    claims_per_minute: u64,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        Ok(Self {
            minutes: positive("MOONIN_BENCH_MINUTES", 40)?,
            warmup_minutes: positive("MOONIN_BENCH_WARMUP_MINUTES", 10)?,
            sample_secs: positive("MOONIN_BENCH_SAMPLE_SECS", 10)?,
            deployments: positive("MOONIN_BENCH_DEPLOYMENTS", 20)? as usize,
            claims_per_minute: positive("MOONIN_BENCH_CLAIMS_PER_MINUTE", 30)?,
        })
    }
}

/// One sample of the manager.
struct Sample {
    at: Duration,
    rss_kib: u64,
    sockets: usize,
    requests_per_s: f64,
    writes_per_s: f64,
    /// Reconcile errors so far, by reason.
    reasons: BTreeMap<String, f64>,
}

impl Sample {
    /// Reconcile errors so far (an empty sum of floats is -0.0; shown as 0).
    fn errors(&self) -> f64 {
        self.reasons.values().sum::<f64>() + 0.0
    }
}

async fn run() -> ExitCode {
    let p = match Params::from_env() {
        Ok(p) => p,
        Err(e) => return plane::bad_parameters("soak", &e),
    };
    let Some(client) = plane::connect("soak").await else {
        return ExitCode::from(2);
    };
    println!("# Moonin soak");
    println!();
    println!(
        "- command: `{}`",
        command_line(
            "soak",
            &[
                "MOONIN_BENCH_MINUTES",
                "MOONIN_BENCH_WARMUP_MINUTES",
                "MOONIN_BENCH_SAMPLE_SECS",
                "MOONIN_BENCH_DEPLOYMENTS",
                "MOONIN_BENCH_CLAIMS_PER_MINUTE",
            ]
        )
    );
    println!(
        "- load: {} Deployments with HPAs under a ScalingTemplate whose 30 s window opens every minute; a pool of 5 with {} claims a minute, each released after 20 s; an image change every 10 s; a namespace with a Deployment created every 30 s and the one before it deleted; a ClusterDiscovery; {} minutes, sampled every {} s",
        p.deployments, p.claims_per_minute, p.minutes, p.sample_secs
    );
    println!("- server: {}", plane::server_version(&client).await);

    harness::install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "bench-soak").await;
    let seat = ManagerSeat::new(&mut ns, &[]);
    let result = or_interrupted(soak(&client, &p, &seat)).await;
    let code = match result {
        Ok(samples) => {
            report(&p, &samples.0, &samples.1);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(3)
        }
    };
    drop(seat);
    drop(ns);
    code
}

/// Sets up, runs the churn and samples; the samples and the manager's (warnings, errors).
async fn soak(
    client: &Client,
    p: &Params,
    seat: &ManagerSeat,
) -> Result<(Vec<Sample>, (usize, usize)), String> {
    let ns = seat.namespace.as_str();
    set_up(client, ns, p).await?;
    let manager = seat.start("discovery,scaling,sandbox", &[]).await;
    let pid = pid_of(&seat.identity)?;
    let stop = CancellationToken::new();
    let churn = tokio::spawn(churn(
        client.clone(),
        ns.to_string(),
        p.deployments,
        p.claims_per_minute,
        stop.clone(),
    ));

    let started = Instant::now();
    let every = Duration::from_secs(p.sample_secs);
    let mut samples = Vec::new();
    let mut last: Option<(Instant, Counters)> = None;
    while started.elapsed() < Duration::from_secs(p.minutes * 60) {
        tokio::time::sleep(every).await;
        let Some(now) = scrape(manager.addr).await else {
            continue;
        };
        let at = Instant::now();
        if let Some((then, before)) = &last {
            let dt = at.duration_since(*then).as_secs_f64();
            let d = now.minus(before);
            let s = Sample {
                at: started.elapsed(),
                rss_kib: usage(pid).rss_kib,
                sockets: sockets(pid),
                requests_per_s: d.requests.values().sum::<f64>() / dt,
                writes_per_s: d.writes_total() / dt,
                reasons: now.errors.clone(),
            };
            progress(&format!(
                "{:>5.0}s RSS {} sockets {} requests/s {:.1} errors {}",
                s.at.as_secs_f64(),
                mib(s.rss_kib),
                s.sockets,
                s.requests_per_s,
                s.errors()
            ));
            samples.push(s);
        }
        last = Some((at, now));
    }
    stop.cancel();
    let namespaces = churn.await.unwrap_or_default();
    let levels = log_levels(&manager.log_text());
    let all: Api<Namespace> = Api::all(client.clone());
    for n in namespaces {
        let _ = all.delete(&n, &DeleteParams::default()).await;
    }
    Ok((samples, levels))
}

async fn set_up(client: &Client, ns: &str, p: &Params) -> Result<(), String> {
    let pp = PostParams::default();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let mut actions = Vec::new();
    for i in 0..p.deployments {
        let name = format!("soak-{i:02}");
        deployments
            .create(&pp, &kwok_deployment(&name, 1))
            .await
            .map_err(|e| format!("deployment: {e}"))?;
        let h: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1, "maxReplicas": 3,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]
            }
        }))
        .map_err(|e| e.to_string())?;
        hpas.create(&pp, &h)
            .await
            .map_err(|e| format!("hpa: {e}"))?;
        actions.push(
            json!({"name": name, "target": {"name": name}, "minReplicas": 2, "maxReplicas": 4}),
        );
    }
    let t: ScalingTemplate = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {"name": "every-minute"},
        "spec": {"schedule": "* * * * *", "duration": "30s", "actions": actions}
    }))
    .map_err(|e| e.to_string())?;
    Api::<ScalingTemplate>::namespaced(client.clone(), ns)
        .create(&pp, &t)
        .await
        .map_err(|e| format!("template: {e}"))?;
    let pool: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "pool"},
        "spec": {"replicas": 5, "template": {"spec": {
            "containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        }}}
    }))
    .map_err(|e| e.to_string())?;
    Api::<SandboxPool>::namespaced(client.clone(), ns)
        .create(&pp, &pool)
        .await
        .map_err(|e| format!("pool: {e}"))?;
    let discoveries = harness::moonin_api(client, "ClusterDiscovery", "");
    if discoveries
        .get_opt("cluster")
        .await
        .ok()
        .flatten()
        .is_none()
    {
        let cd = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "metadata": {"name": "cluster"},
            "spec": {"clusterName": "soak"}
        }))
        .map_err(|e| e.to_string())?;
        discoveries
            .create(&pp, &cd)
            .await
            .map_err(|e| format!("ClusterDiscovery: {e}"))?;
    }
    Ok(())
}

/// The churn, until `stop`; returns the namespaces it left to delete.
async fn churn(
    client: Client,
    ns: String,
    deployments: usize,
    claims_per_minute: u64,
    stop: CancellationToken,
) -> Vec<String> {
    let pp = PostParams::default();
    let claims: Api<SandboxClaim> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let all: Api<Namespace> = Api::all(client.clone());
    let tick = Duration::from_secs(60) / u32::try_from(claims_per_minute).unwrap_or(30);
    let started = Instant::now();
    let (mut n, mut images, mut spaces) = (0u64, 0u64, 0u64);
    let mut open: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut created: Vec<String> = Vec::new();
    let suffix = harness::random_suffix();
    while !stop.is_cancelled() {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(tick) => {}
        }
        let c: SandboxClaim = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxClaim",
            "metadata": {"name": format!("c-{n}")},
            "spec": {"poolRef": {"name": "pool"}}
        }))
        .expect("claim");
        if claims.create(&pp, &c).await.is_ok() {
            open.insert(n, Instant::now());
        }
        n += 1;
        let old: Vec<u64> = open
            .iter()
            .filter(|(_, at)| at.elapsed() > Duration::from_secs(20))
            .map(|(k, _)| *k)
            .collect();
        let dp = DeleteParams::default();
        join_all(old.iter().map(|k| {
            let (claims, dp) = (&claims, &dp);
            async move { claims.delete(&format!("c-{k}"), dp).await }
        }))
        .await;
        for k in old {
            open.remove(&k);
        }
        let secs = started.elapsed().as_secs();
        if secs / 10 > images {
            images = secs / 10;
            let name = format!("soak-{:02}", images as usize % deployments);
            let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": format!("registry.example/app:{images}")}]}}}});
            let _ = deploys
                .patch(&name, &PatchParams::default(), &Patch::Strategic(body))
                .await;
        }
        if secs / 30 > spaces {
            spaces = secs / 30;
            let name = format!("soak-{suffix}-{spaces}");
            let body: Namespace =
                serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
            if all.create(&pp, &body).await.is_ok() {
                let d: Api<Deployment> = Api::namespaced(client.clone(), &name);
                let _ = d.create(&pp, &kwok_deployment("app", 1)).await;
                created.push(name);
            }
            if created.len() > 2 {
                let gone = created.remove(0);
                let _ = all.delete(&gone, &DeleteParams::default()).await;
            }
        }
    }
    created
}

/// Sockets the process holds open (its connections to the API server, and its listener).
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

fn report(p: &Params, samples: &[Sample], (warnings, errors): &(usize, usize)) {
    println!();
    println!("## Samples");
    println!();
    println!("| t | RSS | sockets | requests/s | writes/s | reconcile errors (total) |");
    println!("|---|---|---|---|---|---|");
    for s in samples {
        println!(
            "| {:.0}s | {} | {} | {:.1} | {:.1} | {} |",
            s.at.as_secs_f64(),
            mib(s.rss_kib),
            s.sockets,
            s.requests_per_s,
            s.writes_per_s,
            s.errors()
        );
    }
    let warm = Duration::from_secs(p.warmup_minutes * 60);
    let (Some(first), Some(last)) = (samples.iter().find(|s| s.at >= warm), samples.last()) else {
        println!();
        println!("(too few samples for a summary)");
        return;
    };
    let rate = |from: Duration, to: Duration| {
        let v: Vec<f64> = samples
            .iter()
            .filter(|s| s.at >= from && s.at < to)
            .map(|s| s.requests_per_s)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let five = Duration::from_secs(300);
    println!();
    println!("## Summary");
    println!();
    println!(
        "- RSS after warm-up ({:.0}s): {}; at the end: {} ({:+.1} %; goal within 10 %)",
        first.at.as_secs_f64(),
        mib(first.rss_kib),
        mib(last.rss_kib),
        (last.rss_kib as f64 / first.rss_kib.max(1) as f64 - 1.0) * 100.0
    );
    println!(
        "- requests/s, mean of the first 5 minutes after warm-up: {:.1}; of the last 5 minutes: {:.1}",
        rate(warm, warm + five),
        rate(
            last.at.saturating_sub(five),
            last.at + Duration::from_secs(1)
        )
    );
    println!(
        "- sockets after warm-up: {}; at the end: {}",
        first.sockets, last.sockets
    );
    let reasons: Vec<String> = last
        .reasons
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    println!(
        "- reconcile errors: {} ({}; no fault was injected); manager log: {warnings} warnings, {errors} errors",
        last.errors(),
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join(", ")
        }
    );
}
