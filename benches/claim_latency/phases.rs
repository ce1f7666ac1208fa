//! The phases of one system's run: claims at a steady rate against a warm pool, then a pool
//! running dry (or, with `MOONIN_BENCH_RAMP`, the rates of [`crate::ramp`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::{Client, api::PostParams};

use crate::{
    POLL, Params,
    floor::Binder,
    shared::{
        report::progress,
        stats::{Stats, ms, stats},
        wait,
    },
    stage::Stage,
    system::System,
    watch::{Seen, Shared, spawn_watches, watches_synced},
};

/// Pods in the pool of the dry phase, and claims issued at once against it.
pub const DRY_POOL: usize = 5;
pub const DRY_CLAIMS: usize = 10;
/// What one rate measured.
pub struct RateResult {
    pub rate: u32,
    pub issued: usize,
    pub create_errors: usize,
    pub first_error: Option<String>,
    pub bound: usize,
    /// create returned → bound (ms).
    pub latency: Option<Stats>,
    /// create issued → bound (ms).
    pub from_issue: Option<Stats>,
    /// The create call's round trip (ms).
    pub create_rtt: Option<Stats>,
    /// Distinct Pods seen: in the pool before the first claim, and added after it.
    pub pool_pods: usize,
    pub added_pods: usize,
    /// Ready, live Pods when the run settled.
    pub settled_ready: usize,
    pub writes: Option<f64>,
    /// The achieved claim rate (claims / the span of issuing).
    pub achieved_rate: f64,
    pub watch_errors: u32,
}

impl RateResult {
    pub fn pods_per_claim(&self) -> Option<f64> {
        (self.issued > 0).then(|| self.added_pods as f64 / self.issued as f64)
    }

    /// Pods beyond the pool plus one per claim.
    pub fn over_creation(&self, pool: usize) -> i64 {
        (self.pool_pods + self.added_pods) as i64 - (pool + self.issued) as i64
    }
}

/// One rate against a fresh pool in a fresh namespace.
pub async fn rate_phase(
    client: &Client,
    system: System,
    p: &Params,
    rate: u32,
) -> Result<RateResult, String> {
    let stage = Stage::new(client, system, &format!("r{rate}")).await?;
    let out = rate_in(client, &stage, p, rate).await;
    if let (Err(_), Some((m, _))) = (&out, &stage.moonin) {
        eprintln!("manager log: {}", m.log.display());
    }
    stage.finish(client).await;
    out
}

async fn rate_in(
    client: &Client,
    stage: &Stage,
    p: &Params,
    rate: u32,
) -> Result<RateResult, String> {
    let system = stage.system;
    let ns = stage.name().to_string();
    let seen: Shared = Arc::default();
    let tasks = spawn_watches(system, client, &ns, seen.clone(), true);
    watches_synced(&seen).await?;
    let filling = Instant::now();
    stage.create_pool(client, p.pool, false).await?;
    stage.pool_full(client, &seen, p.pool).await?;
    progress(&format!(
        "{}: {} {}: pool of {} full in {:.1} s",
        system.label(),
        ns,
        rate,
        p.pool,
        filling.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pool_pods = seen.lock().expect("seen").pods.len();
    let writes_before = stage.writes().await;

    let n = (u64::from(rate) * p.seconds) as usize;
    let binder = stage.floor.as_ref().map(|f| f.binder());
    let (sent, span) = issue_claims(client, system, &ns, (rate, n), binder).await;
    let ok: Vec<String> = sent
        .iter()
        .filter(|(_, (_, r))| r.is_ok())
        .map(|(k, _)| k.clone())
        .collect();
    let all_bound = wait::until(
        "every claim to be bound",
        Instant::now() + Duration::from_secs(60),
        POLL,
        || async {
            let s = seen.lock().expect("seen");
            ok.iter().all(|c| s.bound.contains_key(c)).then_some(())
        },
    )
    .await;
    if let Err(e) = &all_bound {
        progress(&format!("{}: {e}; going on", system.label()));
    }
    // Settle: the pool back to full (released sandboxes replaced), then count.
    let settled = stage.pool_full(client, &seen, p.pool).await;
    if let Err(e) = &settled {
        progress(&format!("{}: after the run: {e}", system.label()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_after = stage.writes().await;
    for t in tasks {
        t.abort();
    }

    let run = Run {
        rate,
        n,
        span,
        pool_pods,
        writes: writes_before.zip(writes_after).map(|(b, a)| a - b),
    };
    Ok(tally(run, &sent, &seen.lock().expect("seen")))
}

/// What a rate's run counted besides the claims themselves.
struct Run {
    rate: u32,
    /// Claims issued.
    n: usize,
    /// Seconds issuing took.
    span: f64,
    /// Pods in the pool before the first claim.
    pool_pods: usize,
    /// The controller's writes during the run.
    writes: Option<f64>,
}

/// When a claim's create was issued, and when it returned (or why it failed).
type Sent = (Instant, Result<Instant, String>);

/// Claims at `rate` per second, `n` of them, each created by its own task at its own
/// instant (and handed to the floor's `binder` once created, when the floor runs); what was
/// sent, and how long issuing took (seconds).
async fn issue_claims(
    client: &Client,
    system: System,
    ns: &str,
    (rate, n): (u32, usize),
    binder: Option<Binder>,
) -> (HashMap<String, Sent>, f64) {
    let claims = system.claims(client, ns);
    let sent: Arc<Mutex<HashMap<String, Sent>>> = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / f64::from(rate))).await;
        let (claims, sent, binder) = (claims.clone(), sent.clone(), binder.clone());
        let name = format!("c{i:05}");
        handles.push(tokio::spawn(async move {
            let issued = Instant::now();
            let r = claims
                .create(&PostParams::default(), &system.claim(&name))
                .await
                .map(|created| {
                    let returned = Instant::now();
                    if let Some(b) = &binder {
                        b.claimed(&created);
                    }
                    returned
                })
                .map_err(|e| e.to_string());
            sent.lock().expect("sent").insert(name, (issued, r));
        }));
    }
    let span = start.elapsed().as_secs_f64();
    futures::future::join_all(handles).await;
    progress(&format!(
        "{}: issued {n} claims in {span:.1} s",
        system.label()
    ));
    let sent = std::mem::take(&mut *sent.lock().expect("sent"));
    (sent, span)
}

/// The latencies and create errors of what was sent, against what the watches saw.
fn tally(run: Run, sent: &HashMap<String, Sent>, s: &Seen) -> RateResult {
    let mut latency = Vec::new();
    let mut from_issue = Vec::new();
    let mut rtt = Vec::new();
    let mut first_error = None;
    let mut create_errors = 0;
    for (name, (issued, r)) in sent.iter() {
        match r {
            Ok(returned) => {
                rtt.push(ms(*returned - *issued));
                if let Some(b) = s.bound.get(name) {
                    latency.push(ms(b.saturating_duration_since(*returned)));
                    from_issue.push(ms(*b - *issued));
                }
            }
            Err(e) => {
                create_errors += 1;
                first_error.get_or_insert_with(|| e.clone());
            }
        }
    }
    RateResult {
        rate: run.rate,
        issued: run.n - create_errors,
        create_errors,
        first_error,
        bound: latency.len(),
        latency: stats(latency),
        from_issue: stats(from_issue),
        create_rtt: stats(rtt),
        pool_pods: run.pool_pods,
        added_pods: s.pods.len() - run.pool_pods,
        settled_ready: s.live_ready(),
        writes: run.writes,
        achieved_rate: run.n as f64 / run.span.max(1e-9),
        watch_errors: s.errors,
    }
}

/// What the dry pool measured.
pub struct DryResult {
    /// Issuing the claims → the first Pod not in the pool Ready (ms).
    pub first_new_ready: Option<f64>,
    /// Issuing → every claim bound (ms), and how many were bound at the deadline.
    pub all_bound: Option<f64>,
    pub bound: usize,
    pub new_pods: usize,
}

pub async fn dry_phase(client: &Client, system: System) -> Result<DryResult, String> {
    let stage = Stage::new(client, system, "dry").await?;
    let out = dry_in(client, &stage).await;
    stage.finish(client).await;
    out
}

async fn dry_in(client: &Client, stage: &Stage) -> Result<DryResult, String> {
    let system = stage.system;
    let ns = stage.name().to_string();
    let seen: Shared = Arc::default();
    let tasks = spawn_watches(system, client, &ns, seen.clone(), false);
    watches_synced(&seen).await?;
    stage.create_pool(client, DRY_POOL, true).await?;
    stage.pool_full(client, &seen, DRY_POOL).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<String> = seen.lock().expect("seen").pods.keys().cloned().collect();
    let claims = system.claims(client, &ns);
    let t0 = Instant::now();
    let creates = (0..DRY_CLAIMS).map(|i| {
        let claims = claims.clone();
        async move {
            claims
                .create(&PostParams::default(), &system.claim(&format!("d{i:02}")))
                .await
        }
    });
    for r in futures::future::join_all(creates).await {
        r.map_err(|e| format!("creating a claim: {e}"))?;
    }
    let within = || Instant::now() + Duration::from_secs(30);
    let first = wait::until("a new Pod to be Ready", within(), POLL, || async {
        let s = seen.lock().expect("seen");
        s.pods
            .iter()
            .filter(|(uid, _)| !before.contains(uid))
            .filter_map(|(_, p)| p.ready)
            .min()
    })
    .await
    .ok();
    let all = wait::until("every claim bound", within(), POLL, || async {
        let s = seen.lock().expect("seen");
        (s.bound.len() >= DRY_CLAIMS).then(|| s.bound.values().max().copied())?
    })
    .await
    .ok();
    for t in tasks {
        t.abort();
    }
    let s = seen.lock().expect("seen");
    Ok(DryResult {
        first_new_ready: first.map(|t| ms(t.saturating_duration_since(t0))),
        all_bound: all.map(|t| ms(t - t0)),
        bound: s.bound.len(),
        new_pods: s.pods.keys().filter(|u| !before.contains(u)).count(),
    })
}

/// Everything one system measured, and what failed.
#[derive(Default)]
pub struct SystemResult {
    pub rates: Vec<RateResult>,
    pub dry: Option<DryResult>,
    pub errors: Vec<String>,
    /// The ramp's first failing step: its rate and why it failed.
    pub ramp_stop: Option<(u32, String)>,
}
