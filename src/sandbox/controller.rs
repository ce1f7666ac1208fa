//! Wiring of the sandbox controllers: one cache per kind with the triggers between them,
//! the three controllers (Pool, Claim, Env) and their error policy, the leader gate, and
//! the readiness report. The reconciles themselves are in `*_reconciler.rs`.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::{
    StreamExt,
    channel::mpsc::{UnboundedReceiver, UnboundedSender},
    future::BoxFuture,
};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::{
    Resource, ResourceExt,
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use super::load::{Stores, claim_of, claim_targets, holding_pool};
use super::memory::Memory;
use super::pool::keys;
use super::shared::Shared;
use super::writer::{RETRY, SandboxError, Writer};
use super::{claim_reconciler, env_reconciler, pool_reconciler};
use crate::api::sandbox::{SandboxClaim, SandboxEnv, SandboxPool};
use crate::runtime::{
    cache::{self, Echoes},
    context::{Context, Readiness, Registered},
    errors::brief,
    events::Publisher,
    facts, invalid,
    metrics::{ControllerLabels, ErrorLabels},
};

pub use super::writer::CONTROLLER;

/// The sandbox controllers, as the manager registers them.
pub fn registered() -> Registered {
    Registered {
        name: CONTROLLER,
        run: |ctx, readiness| -> BoxFuture<'static, anyhow::Result<()>> {
            Box::pin(run(ctx, readiness))
        },
    }
}

/// Whether reconciles may act: this process leads and every cache has listed. A reconcile
/// triggered by a cache's initial listing waits: a partial Pod or claim list must not drive
/// creates or a scaling decision, and a partial Pool or Env list must not report a claim's
/// Pool or Env as missing. Once they are complete, every object is reconciled again.
fn acting(ctx: &Shared) -> bool {
    ctx.writer.is_leader() && ctx.synced.load(Ordering::Acquire)
}

/// A Pool reconcile, behind the gate ([`acting`]).
async fn reconcile_pool(pool: Arc<SandboxPool>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    let labels = ControllerLabels {
        controller: CONTROLLER.to_string(),
    };
    let metrics = &ctx.writer.metrics;
    metrics.reconciliations.get_or_create(&labels).inc();
    if !acting(&ctx) {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let result = pool_reconciler::reconcile(&pool, &ctx).await;
    metrics
        .reconcile_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    settled(&ctx, pool.as_ref(), result)
}

/// A claim reconcile, behind the gate ([`acting`]).
async fn reconcile_claim(
    claim: Arc<SandboxClaim>,
    ctx: Arc<Shared>,
) -> Result<Action, SandboxError> {
    if !acting(&ctx) {
        return Ok(Action::await_change());
    }
    let result = claim_reconciler::reconcile(&claim, &ctx).await;
    settled(&ctx, claim.as_ref(), result)
}

/// An Env reconcile, behind the gate ([`acting`]). An Env whose Pools were refused keeps its
/// backoff (its reconcile counts it itself).
async fn reconcile_env(env: Arc<SandboxEnv>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    if !acting(&ctx) {
        return Ok(Action::await_change());
    }
    env_reconciler::reconcile(env, &ctx).await
}

/// A failed reconcile: a conflict is retried at once from fresh caches; a refusal backs off
/// per object (logged once per step, with the object and the API server's message).
fn error_policy<K>(obj: Arc<K>, err: &SandboxError, ctx: Arc<Shared>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    ctx.writer
        .metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: CONTROLLER.to_string(),
            reason: match err {
                SandboxError::Conflict(_) => "Conflict".into(),
                SandboxError::Api(_) => "ApiError".into(),
            },
        })
        .inc();
    let object = crate::runtime::reference(obj.as_ref());
    match err {
        SandboxError::Conflict(what) => {
            tracing::debug!(%object, %what, "conflict; retrying");
            Action::requeue(RETRY)
        }
        SandboxError::Api(e) => {
            let message = brief(e);
            let now = tokio::time::Instant::now();
            let step = ctx
                .memory
                .refusals
                .failed(&object, obj.meta().generation, now, &message);
            if step.counted {
                tracing::warn!(
                    %object,
                    error = %message,
                    retry_in_seconds = step.wait.as_secs(),
                    "reconcile failed"
                );
            }
            Action::requeue(step.wait)
        }
    }
}

/// Ends an object's backoff when its reconcile succeeds.
fn settled<K>(
    ctx: &Shared,
    obj: &K,
    result: Result<Action, SandboxError>,
) -> Result<Action, SandboxError>
where
    K: Resource<DynamicType = ()>,
{
    if result.is_ok() {
        ctx.memory
            .refusals
            .succeeded(&crate::runtime::reference(obj));
    }
    result
}

fn trim_pod(p: &mut Pod) {
    p.managed_fields_mut().clear();
    cache::strip_last_applied(&mut p.metadata);
    if let Some(spec) = p.spec.as_mut() {
        spec.containers.clear();
        spec.init_containers = None;
        spec.volumes = None;
    }
}

/// The sending halves of the three controllers' request channels (for the triggers).
#[derive(Clone)]
struct Senders {
    pools: UnboundedSender<ObjectRef<SandboxPool>>,
    claims: UnboundedSender<ObjectRef<SandboxClaim>>,
    envs: UnboundedSender<ObjectRef<SandboxEnv>>,
}

/// The receiving halves (for the controllers).
struct Receivers {
    pools: UnboundedReceiver<ObjectRef<SandboxPool>>,
    claims: UnboundedReceiver<ObjectRef<SandboxClaim>>,
    envs: UnboundedReceiver<ObjectRef<SandboxEnv>>,
}

/// The three controllers' request channels.
fn requests() -> (Senders, Receivers) {
    let (pools_tx, pools) = cache::requests::<SandboxPool>();
    let (claims_tx, claims) = cache::requests::<SandboxClaim>();
    let (envs_tx, envs) = cache::requests::<SandboxEnv>();
    let tx = Senders {
        pools: pools_tx,
        claims: claims_tx,
        envs: envs_tx,
    };
    (
        tx,
        Receivers {
            pools,
            claims,
            envs,
        },
    )
}

/// A Pool change reconciles its Env: the Env reports its Pools' readiness.
fn pool_to_env(tx: UnboundedSender<ObjectRef<SandboxEnv>>) -> cache::Trigger<SandboxPool> {
    Box::new(move |p: &SandboxPool| {
        if let (Some(owner), Some(ns)) = (
            p.owner_references()
                .iter()
                .find(|o| o.kind == "SandboxEnv" && o.controller == Some(true)),
            p.namespace(),
        ) {
            let _ = tx.unbounded_send(ObjectRef::new(&owner.name).within(&ns));
        }
    })
}

/// The stores a trigger reads that exist only once every cache is made (a Pool's trigger
/// reads the claims, whose cache is made after the Pools').
#[derive(Clone, Default)]
struct Later {
    pools: Arc<std::sync::OnceLock<Store<SandboxPool>>>,
    claims: Arc<std::sync::OnceLock<Store<SandboxClaim>>>,
}

/// A Pool deleted (on its own or with its Env) reconciles the Pending claims that target
/// it: they say `PoolNotFound` (or `EnvNotFound`) at once, not at their next resync. The
/// Pool store no longer holds it when its trigger runs.
fn pool_gone_to_claims(
    tx: UnboundedSender<ObjectRef<SandboxClaim>>,
    later: Later,
) -> cache::Trigger<SandboxPool> {
    Box::new(move |p: &SandboxPool| {
        let (Some(pools), Some(claims)) = (later.pools.get(), later.claims.get()) else {
            return;
        };
        if pools.get(&ObjectRef::from_obj(p)).is_some() {
            return;
        }
        for c in claims.state().iter().filter(|c| claim_targets(c, p)) {
            let pending = c
                .status
                .as_ref()
                .is_none_or(|s| s.phase.is_none() || s.phase.as_deref() == Some("Pending"));
            if pending {
                let _ = tx.unbounded_send(ObjectRef::from_obj(c.as_ref()));
            }
        }
    })
}

/// A Pod change reconciles its Pool.
fn pod_to_pool(tx: UnboundedSender<ObjectRef<SandboxPool>>) -> cache::Trigger<Pod> {
    Box::new(move |p: &Pod| {
        if let (Some(pool), Some(ns)) = (p.labels().get(keys::POOL), p.namespace()) {
            let _ = tx.unbounded_send(ObjectRef::new(pool).within(&ns));
        }
    })
}

/// A change of a claimed Pod, its deletion above all, reconciles the claim it names: a
/// Bound claim whose Pod is gone fails (`PodLost`) at once, not at its next resync.
fn pod_to_claim(tx: UnboundedSender<ObjectRef<SandboxClaim>>) -> cache::Trigger<Pod> {
    Box::new(move |p: &Pod| {
        if let (Some((claim, _)), Some(ns)) = (claim_of(p), p.namespace()) {
            let _ = tx.unbounded_send(ObjectRef::new(claim).within(&ns));
        }
    })
}

/// A claim change reconciles every Pool it may bind from, and the Pool whose Pod holds it.
fn claim_to_pools(
    tx: UnboundedSender<ObjectRef<SandboxPool>>,
    pools: Store<SandboxPool>,
    pods: Store<Pod>,
) -> cache::Trigger<SandboxClaim> {
    Box::new(move |c: &SandboxClaim| {
        let mut sent = Vec::new();
        for p in pools.state().iter().filter(|p| claim_targets(c, p)) {
            sent.push(ObjectRef::from_obj(p.as_ref()));
        }
        sent.extend(holding_pool(c, &pods).filter(|r| !sent.contains(r)));
        for r in sent {
            let _ = tx.unbounded_send(r);
        }
    })
}

/// An Env change (its autoscaling groups) reconciles the Pools it owns.
fn env_to_pools(
    tx: UnboundedSender<ObjectRef<SandboxPool>>,
    pools: Store<SandboxPool>,
) -> cache::Trigger<SandboxEnv> {
    Box::new(move |e: &SandboxEnv| {
        let uid = e.uid().unwrap_or_default();
        for p in pools
            .state()
            .iter()
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        {
            let _ = tx.unbounded_send(ObjectRef::from_obj(p.as_ref()));
        }
    })
}

/// The caches, each kind watched once: its cache feeds its own controller (except for the
/// echoes of its status writes) and the triggers of the others. Quotas are read at each
/// decision (a Pool whose scale-up they limited is decided again when its saturation
/// ends). The futures that drive the watches.
fn caches(
    client: &kube::Client,
    tx: &Senders,
    echoes: &Echoes,
) -> (Stores, Vec<BoxFuture<'static, ()>>) {
    let later = Later::default();
    let (pools, pool_drive) = cache::cache::<SandboxPool>(
        client.clone(),
        watcher::Config::default(),
        |p| cache::strip_last_applied(&mut p.metadata),
        vec![
            cache::reconcile_itself(tx.pools.clone(), echoes.clone()),
            pool_to_env(tx.envs.clone()),
            pool_gone_to_claims(tx.claims.clone(), later.clone()),
        ],
    );
    let (pods, pod_drive) = cache::cache::<Pod>(
        client.clone(),
        watcher::Config::default().labels(keys::POOL).page_size(500),
        trim_pod,
        vec![
            pod_to_pool(tx.pools.clone()),
            pod_to_claim(tx.claims.clone()),
        ],
    );
    let (claims, claim_drive) = cache::cache::<SandboxClaim>(
        client.clone(),
        watcher::Config::default().page_size(500),
        |c| cache::strip_last_applied(&mut c.metadata),
        vec![
            cache::reconcile_itself(tx.claims.clone(), echoes.clone()),
            claim_to_pools(tx.pools.clone(), pools.clone(), pods.clone()),
        ],
    );
    let (envs, env_drive) = cache::cache::<SandboxEnv>(
        client.clone(),
        watcher::Config::default(),
        |e| {
            e.managed_fields_mut().clear();
            cache::strip_last_applied(&mut e.metadata);
        },
        vec![
            cache::reconcile_itself(tx.envs.clone(), echoes.clone()),
            env_to_pools(tx.pools.clone(), pools.clone()),
        ],
    );
    let (quotas, quota_drive) = cache::cache::<ResourceQuota>(
        client.clone(),
        watcher::Config::default(),
        |q| {
            q.managed_fields_mut().clear();
            cache::strip_last_applied(&mut q.metadata);
        },
        Vec::new(),
    );
    // Set before any watch runs: the drives are polled only once returned.
    let _ = later.pools.set(pools.clone());
    let _ = later.claims.set(claims.clone());
    let stores = Stores {
        pods,
        claims,
        pools,
        envs,
        quotas,
    };
    let drives = vec![pod_drive, claim_drive, env_drive, quota_drive, pool_drive];
    (stores, drives)
}

/// Once every cache has listed: reconciles may act, every Pool, claim and Env is looked at,
/// and the manager hears that this controller is ready.
async fn synced(stores: Stores, shared: Arc<Shared>, tx: Senders, readiness: Readiness) {
    let _ = stores.pods.wait_until_ready().await;
    let _ = stores.claims.wait_until_ready().await;
    let _ = stores.pools.wait_until_ready().await;
    let _ = stores.envs.wait_until_ready().await;
    let _ = stores.quotas.wait_until_ready().await;
    shared.synced.store(true, Ordering::Release);
    for p in stores.pools.state() {
        let _ = tx.pools.unbounded_send(ObjectRef::from_obj(p.as_ref()));
    }
    for c in stores.claims.state() {
        let _ = tx.claims.unbounded_send(ObjectRef::from_obj(c.as_ref()));
    }
    for e in stores.envs.state() {
        let _ = tx.envs.unbounded_send(ObjectRef::from_obj(e.as_ref()));
    }
    readiness.report_synced();
    tracing::info!("sandbox caches synced");
}

/// Stored objects of the three kinds that do not decode, reported on each.
async fn report_undecodable(ctx: Context, events: Publisher) {
    let (client, leadership, shutdown) = (ctx.client, ctx.leadership, ctx.shutdown);
    futures::future::join3(
        invalid::report::<SandboxEnv>(
            client.clone(),
            leadership.clone(),
            events.clone(),
            shutdown.clone(),
        ),
        invalid::report::<SandboxPool>(
            client.clone(),
            leadership.clone(),
            events.clone(),
            shutdown.clone(),
        ),
        invalid::report::<SandboxClaim>(client, leadership, events, shutdown),
    )
    .await;
}

/// The three controllers, each fed by its cache's requests and by every leadership
/// acquisition, until shutdown.
async fn controllers(ctx: &Context, stores: &Stores, rx: Receivers, shared: Arc<Shared>) {
    let pool_ctl = Controller::for_stream(futures::stream::pending(), stores.pools.clone())
        .reconcile_on(rx.pools)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_pool, error_policy, shared.clone())
        .for_each(cache::controller_result("SandboxPool"));
    let claim_ctl = Controller::for_stream(futures::stream::pending(), stores.claims.clone())
        .reconcile_on(rx.claims)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_claim, error_policy, shared.clone())
        .for_each(cache::controller_result("SandboxClaim"));
    let env_ctl = Controller::for_stream(futures::stream::pending(), stores.envs.clone())
        .reconcile_on(rx.envs)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_env, error_policy, shared)
        .for_each(cache::controller_result("SandboxEnv"));
    futures::future::join3(pool_ctl, claim_ctl, env_ctl).await;
}

/// Runs the sandbox controllers until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let (tx, rx) = requests();
    let echoes = Echoes::default();
    let (stores, drives) = caches(&ctx.client, &tx, &echoes);
    let pools = stores.pools.clone();
    ctx.metrics.facts.add(Box::new(move || {
        let now = jiff::Timestamp::now();
        let counts = pools
            .state()
            .iter()
            .map(|p| facts::pool_counts(p, now))
            .collect();
        facts::pool_facts(counts)
    }));
    let writer = Writer {
        client: ctx.client.clone(),
        events: Publisher::new(ctx.client.clone(), "moonin-sandbox"),
        metrics: ctx.metrics.clone(),
        leader: ctx.leadership.clone(),
        echoes,
    };
    let events = writer.events.clone();
    let shared = Arc::new(Shared {
        stores: stores.clone(),
        memory: Memory::default(),
        writer,
        synced: AtomicBool::new(false),
        claim_requests: tx.claims.clone(),
        cluster_name: ctx.cluster_name.clone(),
    });
    let running = futures::future::join3(
        controllers(&ctx, &stores, rx, shared.clone()),
        synced(stores.clone(), shared, tx.clone(), readiness),
        report_undecodable(ctx.clone(), events),
    );
    let shutdown = ctx.shutdown.clone();
    let watches = cache::spawn_watches(CONTROLLER, drives);
    tokio::select! {
        _ = watches.join_all() => {}
        _ = running => {}
        _ = shutdown.cancelled() => {}
    }
    Ok(())
}
