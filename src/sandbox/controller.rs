//! Wiring of the sandbox controllers: shared caches of sandbox Pods and claims, the Env
//! controller (Env → Pools), the Pool controller (Pool → Pods, FIFO binding, releases)
//! and the Claim controller (missing targets, lifetimes, lost Pods).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use jiff::Timestamp;
use k8s_openapi::{
    api::core::v1::{Pod, ResourceQuota},
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use serde_json::json;

use super::autoscaler::{
    self, Admission, PodState, PoolPod, PoolView, QueueStats, RecommendationHistory, ScaleDownMark,
    SiblingPool, Snapshot,
};
use super::pool::{self, ClaimView, InFlightBinds, PodOp, PodView, PoolSnapshot, keys};
use crate::api::{
    conditions::{self, Desired, types},
    field_manager,
    sandbox::{SandboxClaim, SandboxClaimStatus, SandboxEnv, SandboxPool, ScalingGroup, reasons},
};
use crate::runtime::{
    backoff::Backoff,
    cache,
    decode::Decoded,
    errors::{brief, is_conflict},
    events::Publisher,
    invalid,
};
use crate::runtime::{
    context::{Context, Readiness, Registered},
    metrics::{ControllerLabels, Metrics},
};

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "sandbox";

/// How long a claim waits unbound before its status says `Queued`.
const QUEUED_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// The sandbox controllers, as the manager registers them.
pub fn registered() -> Registered {
    Registered {
        name: CONTROLLER,
        run: |ctx, readiness| -> BoxFuture<'static, anyhow::Result<()>> {
            Box::pin(run(ctx, readiness))
        },
    }
}

/// Why a reconcile stopped early.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// An object changed under us; retry from fresh caches.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The API server refused a write.
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// Writes of this process the caches have not shown yet, per pool (`ns/name`): Pods
/// created, Pods patched as bound (→ claim), claims written as bound (UID → Pod).
#[derive(Default)]
struct InFlight {
    creates: HashMap<String, BTreeMap<String, std::time::Instant>>,
    pod_binds: HashMap<String, BTreeMap<String, (ClaimRef, std::time::Instant)>>,
    claim_binds: HashMap<String, BTreeMap<String, (String, std::time::Instant)>>,
}

/// A claim as a Pod's annotation names it: `(name, uid)`.
type ClaimRef = (String, String);

impl InFlight {
    /// The binds still in flight for a pool, after dropping those older than the TTL.
    fn binds(&mut self, key: &str) -> InFlightBinds {
        let ttl = pool::IN_FLIGHT_TTL.unsigned_abs();
        let pods = self.pod_binds.entry(key.to_string()).or_default();
        pods.retain(|_, (_, at)| at.elapsed() < ttl);
        let claims = self.claim_binds.entry(key.to_string()).or_default();
        claims.retain(|_, (_, at)| at.elapsed() < ttl);
        InFlightBinds {
            pods: pods
                .iter()
                .map(|(k, (c, _))| (k.clone(), c.clone()))
                .collect(),
            claims: claims
                .iter()
                .map(|(k, (p, _))| (k.clone(), p.clone()))
                .collect(),
        }
    }

    /// Forgets binds the caches now show.
    fn seen(&mut self, key: &str, pods: &[String], claims: &[String]) {
        if let Some(m) = self.pod_binds.get_mut(key) {
            for p in pods {
                m.remove(p);
            }
        }
        if let Some(m) = self.claim_binds.get_mut(key) {
            for c in claims {
                m.remove(c);
            }
        }
    }
}

struct Shared {
    client: Client,
    pods: Store<Pod>,
    claims: Store<SandboxClaim>,
    pools: Store<SandboxPool>,
    /// Envs, for a Pool's autoscaling group.
    envs: Store<SandboxEnv>,
    /// ResourceQuotas, for the autoscaler's admission probe.
    quotas: Store<ResourceQuota>,
    /// The autoscaler's recommendation history per Pool (`ns/name`), in process memory.
    history: Mutex<HashMap<String, RecommendationHistory>>,
    in_flight: Mutex<InFlight>,
    /// One autoscaler decision at a time per scaling group (`ns/env-uid/group`): siblings
    /// share the group's min and max.
    groups: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// `spec.replicas` this process wrote per Pool (`ns/name`), with the resourceVersion
    /// the write returned, until the Pool cache shows it: a sibling's decision counts it.
    sizes: Mutex<HashMap<String, (i32, String, std::time::Instant)>>,
    /// When this process first saw each Pending claim (creation times have 1 s resolution).
    first_seen: Mutex<HashMap<String, Timestamp>>,
    events: Publisher,
    metrics: Metrics,
    leader: crate::runtime::leader::Leadership,
    seq: std::sync::atomic::AtomicU64,
    /// Every cache has listed once.
    synced: std::sync::atomic::AtomicBool,
    /// Asks the claim controller to look at a claim again (a Pool it waited for appeared).
    claim_requests: futures::channel::mpsc::UnboundedSender<ObjectRef<SandboxClaim>>,
    /// Status writes of the Pool, Claim and Env reconcilers to their own objects: their
    /// echo does not wake the object again.
    echoes: cache::Echoes,
    /// Reconciles that failed on a refusal, per object (`Kind/ns/name`).
    backoff: Backoff,
    /// Pod creates a Pool's template drew refusals for, per Pool (`ns/name`).
    create_backoff: Backoff,
    /// The cluster this manager runs in (`--cluster-name`): an Env materialises its members.
    cluster_name: String,
}

impl Shared {
    fn wrote(&self, kind: &str) {
        self.metrics.wrote(CONTROLLER, kind);
    }

    async fn event(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        self.events
            .publish(regarding, warning, reason, None, &note)
            .await;
    }
}

fn parse_time(s: Option<&String>) -> Option<Timestamp> {
    s?.parse().ok()
}

fn pod_view(p: &Pod) -> PodView {
    let status = p.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let phase = status.and_then(|s| s.phase.as_deref());
    let annotations = p.annotations();
    let claim = annotations
        .get(keys::CLAIM)
        .and_then(|v| v.split_once('/'))
        .map(|(n, u)| (n.to_string(), u.to_string()));
    let since = parse_time(annotations.get(keys::STATE_SINCE))
        .or_else(|| p.creation_timestamp().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    PodView {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
        resource_version: p.resource_version().unwrap_or_default(),
        ready,
        ip: status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        terminating: p.metadata.deletion_timestamp.is_some(),
        finished: matches!(phase, Some("Failed" | "Succeeded")),
        claim,
        marked: annotations.contains_key(keys::SCALE_DOWN),
        since,
    }
}

/// Whether a claim targets this pool.
fn claim_targets(c: &SandboxClaim, pool: &SandboxPool) -> bool {
    if c.namespace() != pool.namespace() {
        return false;
    }
    if let Some(r) = &c.spec.pool_ref {
        return r.name == pool.name_any();
    }
    if let Some(r) = &c.spec.env_ref {
        let env_owned = pool
            .owner_references()
            .iter()
            .any(|o| o.kind == "SandboxEnv" && o.name == r.name);
        let group_ok = r
            .group
            .as_ref()
            .is_none_or(|g| pool.spec.scaling_group.as_ref() == Some(g));
        return env_owned && group_ok;
    }
    false
}

fn claim_view(c: &SandboxClaim) -> ClaimView {
    let status = c.status.clone().unwrap_or_default();
    ClaimView {
        name: c.name_any(),
        uid: c.uid().unwrap_or_default(),
        created: c
            .creation_timestamp()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        phase: status.phase,
        pod_name: status.pod_name,
    }
}

fn new_pod(pool: &SandboxPool, name: &str, now: Timestamp) -> Pod {
    let template = &pool.spec.template;
    let mut metadata = template.metadata.clone().unwrap_or_default();
    metadata.name = Some(name.to_string());
    metadata.namespace = pool.namespace();
    metadata.generate_name = None;
    let labels = metadata.labels.get_or_insert_with(Default::default);
    labels.insert(keys::POOL.into(), pool.name_any());
    labels.insert(keys::STATE.into(), keys::IDLE.into());
    metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(keys::STATE_SINCE.into(), now.to_string());
    metadata.owner_references = pool.controller_owner_ref(&()).map(|o| vec![o]);
    Pod {
        metadata,
        spec: template.spec.clone(),
        status: None,
    }
}

async fn reconcile_pool(pool: Arc<SandboxPool>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    let result = pool_pass(pool.clone(), ctx.clone()).await;
    settled(&ctx, pool.as_ref(), result)
}

/// One reconcile of a Pool: its Pods, binds and releases, the autoscaler, the status.
async fn pool_pass(pool: Arc<SandboxPool>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    let labels = ControllerLabels {
        controller: CONTROLLER.to_string(),
    };
    ctx.metrics.reconciliations.get_or_create(&labels).inc();
    if !ctx.leader.is_leader() {
        return Ok(Action::await_change());
    }
    // A reconcile (triggered by a cache's initial listing) waits until every cache is
    // complete: a partial Pod or claim list must not drive creates or a scaling decision.
    // Once they are, every Pool is reconciled again.
    if !ctx.synced.load(std::sync::atomic::Ordering::Acquire) {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let key = format!("{ns}/{name}");
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(keys::POOL) == Some(&name)
        })
        .collect();
    let mut views: Vec<PodView> = pods.iter().map(|p| pod_view(p)).collect();
    let in_flight: Vec<String> = {
        let mut g = ctx.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let entry = g.creates.entry(key.clone()).or_default();
        entry.retain(|n, at| {
            !views.iter().any(|v| &v.name == n) && at.elapsed() < pool::IN_FLIGHT_TTL.unsigned_abs()
        });
        entry.keys().cloned().collect()
    };
    let targeting: Vec<Arc<SandboxClaim>> = ctx
        .claims
        .state()
        .into_iter()
        .filter(|c| claim_targets(c, &pool))
        .collect();
    // Claims that reported this Pool (or its Env's group) missing say otherwise now.
    for c in &targeting {
        let conds = c
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        if conditions::has_reason(conds, types::READY, reasons::POOL_NOT_FOUND)
            || conditions::has_reason(conds, types::READY, reasons::ENV_NOT_FOUND)
        {
            let _ = ctx
                .claim_requests
                .unbounded_send(ObjectRef::from_obj(c.as_ref()));
        }
    }
    let mut claims: Vec<ClaimView> = targeting.iter().map(|c| claim_view(c)).collect();
    {
        let mut g = ctx.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let binds = g.binds(&key);
        let (seen_pods, seen_claims) = binds.overlay(&mut views, &mut claims);
        g.seen(&key, &seen_pods, &seen_claims);
    }
    let mut retry = false;
    // The autoscaler (Load → Decide → Commit steps 1–3) for a Pool of a scaling group
    // whose Env the cache shows; it sets the size the plan below works to.
    let mut replicas = pool.spec.replicas;
    let mut auto: Option<AutoCycle> = None;
    if let Some(group_name) = pool.spec.scaling_group.clone()
        && let Some(env) = env_of(&ctx, &pool)
    {
        let group = group_of(&env, &group_name);
        let lock = ctx
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(format!(
                "{ns}/{}/{group_name}",
                env.uid().unwrap_or_default()
            ))
            .or_default()
            .clone();
        let _one_decision_per_group = lock.lock().await;
        // Demand: every Pending claim no Pod names, including those this cycle binds
        // to idle Pods (decide subtracts the idle Pods itself).
        let dry_run = pool::plan(
            &PoolSnapshot {
                replicas: pool.spec.replicas,
                recycle: pool.spec.recycle_policy,
                pods: views.clone(),
                in_flight_creates: in_flight.clone(),
                claims: claims.clone(),
                claims_synced: true,
            },
            String::new,
        );
        let queued = dry_run.queued
            + dry_run
                .ops
                .iter()
                .filter(|o| matches!(o, PodOp::Bind { .. }))
                .count();
        let enabled = group.as_ref().is_some_and(|g| g.enabled);
        let window = jiff::SignedDuration::from_secs(i64::from(group.as_ref().map_or(0, |g| {
            g.scale_down_policy.stabilization_window_seconds.max(0)
        })));
        let snap = load(&ctx, &pool, group, &pods, &views, in_flight.len(), queued);
        let decision = autoscaler::decide(&snap, Timestamp::now());
        match commit_pods_and_size(
            &ctx, &pool, &decision, enabled, &pods, &mut views, &mut retry,
        )
        .await?
        {
            Some((r, resource_version)) => {
                replicas = r;
                auto = Some(AutoCycle {
                    decision,
                    window,
                    resource_version,
                });
            }
            None => return Ok(Action::requeue(Duration::ZERO)),
        }
    }
    let snapshot = PoolSnapshot {
        replicas,
        recycle: pool.spec.recycle_policy,
        pods: views,
        in_flight_creates: in_flight,
        claims,
        claims_synced: true,
    };
    let plan = pool::plan(&snapshot, || {
        let n = ctx.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seed = n
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(Timestamp::now().as_nanosecond() as u64);
        pool::pod_name(&name, seed)
    });
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(field_manager::SANDBOX.to_string()),
        ..PatchParams::default()
    };
    // Conflicts retry at once from fresh caches; refused creates (a template the API
    // server rejects, a quota, a terminating namespace) back off per Pool: while a refusal
    // is waited out, no create is sent and the refusal stands in the status unchanged.
    let generation = pool.metadata.generation;
    let clock = tokio::time::Instant::now();
    let creates = plan.ops.iter().any(|o| matches!(o, PodOp::Create(_)));
    let waiting = if creates {
        ctx.create_backoff.waiting(&key, generation, clock)
    } else {
        // Nothing to create: whatever was refused is no longer asked for.
        ctx.create_backoff.succeeded(&key);
        None
    };
    let mut create_error: Option<String> = waiting.as_ref().map(|w| w.message.clone());
    let mut create_retry: Option<Duration> = waiting.as_ref().map(|w| w.remaining);
    let mut created = false;
    for op in &plan.ops {
        if !ctx.leader.is_leader() {
            return Ok(Action::await_change());
        }
        let now = Timestamp::now();
        match op {
            // One refused create stands for the rest of this round (and for the backoff).
            PodOp::Create(_) if create_error.is_some() => {}
            PodOp::Create(pod_name) => {
                ctx.in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .creates
                    .entry(key.clone())
                    .or_default()
                    .insert(pod_name.clone(), std::time::Instant::now());
                let pod = new_pod(&pool, pod_name, now);
                let params = PostParams {
                    field_manager: Some(field_manager::SANDBOX.to_string()),
                    ..PostParams::default()
                };
                ctx.wrote("Pod");
                match pod_api.create(&params, &pod).await {
                    Ok(_) => created = true,
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => {
                        ctx.in_flight
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .creates
                            .entry(key.clone())
                            .or_default()
                            .remove(pod_name);
                        // The generated name differs at every attempt: it stays out of the
                        // message, so the status does not change from one refusal to the next.
                        let message = pool::without_name(&brief(&e), pod_name);
                        let step = ctx.create_backoff.failed(&key, generation, clock, &message);
                        if step.counted {
                            tracing::warn!(
                                pool = %key,
                                error = %message,
                                retry_in_seconds = step.wait.as_secs(),
                                "the API server refused a sandbox Pod"
                            );
                        }
                        create_retry = Some(step.wait);
                        create_error = Some(message);
                    }
                }
            }
            PodOp::Bind {
                pod,
                resource_version,
                ip,
                claim,
                claim_uid,
            } => {
                let patch = json_patch(json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
                    {"op": "add", "path": "/metadata/labels/moonin.io~1state", "value": keys::CLAIMED},
                    {"op": "add", "path": "/metadata/annotations/moonin.io~1claim", "value": format!("{claim}/{claim_uid}")},
                    {"op": "add", "path": "/metadata/annotations/moonin.io~1state-since", "value": now.to_string()},
                ]));
                ctx.wrote("Pod");
                match pod_api.patch(pod, &pp, &patch).await {
                    Ok(_) => {
                        ctx.in_flight
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .pod_binds
                            .entry(key.clone())
                            .or_default()
                            .insert(
                                pod.clone(),
                                (
                                    (claim.clone(), claim_uid.clone()),
                                    std::time::Instant::now(),
                                ),
                            );
                        if !bind_claim(&ctx, &key, claim, pod, Some(ip.clone()), now).await {
                            retry = true;
                        }
                    }
                    Err(e) if is_conflict(&e) => retry = true,
                    Err(e) => {
                        tracing::warn!(pool = %key, %pod, error = %brief(&e), "binding refused");
                        retry = true;
                    }
                }
            }
            PodOp::FinishBind { pod, ip, claim } => {
                if !bind_claim(&ctx, &key, claim, pod, ip.clone(), now).await {
                    retry = true;
                }
            }
            PodOp::Unclaim {
                pod,
                resource_version,
            } => {
                let patch = json_patch(json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
                    {"op": "add", "path": "/metadata/labels/moonin.io~1state", "value": keys::IDLE},
                    {"op": "remove", "path": "/metadata/annotations/moonin.io~1claim"},
                    {"op": "add", "path": "/metadata/annotations/moonin.io~1state-since", "value": now.to_string()},
                ]));
                ctx.wrote("Pod");
                if let Err(e) = pod_api.patch(pod, &pp, &patch).await {
                    tracing::debug!(pool = %key, %pod, error = %brief(&e), "unclaim refused; retrying");
                    retry = true;
                }
            }
            PodOp::Delete {
                pod,
                uid,
                resource_version,
            } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: Some(resource_version.clone()),
                    }),
                    ..DeleteParams::default()
                };
                ctx.wrote("Pod");
                match pod_api.delete(pod, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        tracing::debug!(pool = %key, %pod, error = %brief(&e), "delete refused; retrying");
                        retry = true;
                    }
                }
            }
        }
    }

    if created && create_error.is_none() {
        ctx.create_backoff.succeeded(&key);
    }
    // Status: counts and conditions, written only when they change.
    let c = plan.counts;
    let current = pool.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let starting = c.replicas - c.ready;
    let mut desired = vec![
        Desired::new(
            types::READY,
            c.ready >= replicas,
            if c.ready >= replicas {
                "PoolReady"
            } else {
                "PodsStarting"
            },
            format!(
                "{} of {} sandbox Pods ready, {} idle, {} claimed",
                c.ready, replicas, c.idle, c.claimed
            ),
        ),
        Desired::new(
            "Progressing",
            starting > 0 || c.replicas != replicas,
            if starting > 0 {
                "PodsStarting"
            } else {
                "Stable"
            },
            format!("{starting} sandbox Pods starting"),
        ),
    ];
    // kstatus (Flux) reads Stalled=True as Failed: the template needs a fix.
    match &create_error {
        Some(msg) => {
            let msg = format!("the API server refused a sandbox Pod from spec.template: {msg}");
            desired[0] = Desired::new(types::READY, false, reasons::POD_CREATE_FAILED, msg.clone());
            desired.push(Desired::new(
                types::STALLED,
                true,
                reasons::POD_CREATE_FAILED,
                msg,
            ));
        }
        None => desired.push(Desired::new(
            types::STALLED,
            false,
            conditions::reasons::RECONCILED,
            "",
        )),
    }
    if let Some(a) = &auto {
        desired.extend(a.decision.conditions.iter().cloned());
    }
    let next_conditions =
        conditions::merge(&current.conditions, &desired, pool.metadata.generation, now);
    let auto_changed = auto
        .as_ref()
        .is_some_and(|a| current.auto_scaling.as_ref() != Some(&a.decision.status));
    let changed = auto_changed
        || current.replicas != c.replicas
        || current.ready_replicas != c.ready
        || current.idle_replicas != c.idle
        || current.claimed_replicas != c.claimed
        || current.observed_generation != pool.metadata.generation
        || !conditions::equal_ignoring_time(&current.conditions, &next_conditions);
    let mut status_written = !changed;
    if changed && ctx.leader.is_leader() {
        let mut body = json!({"status": {
            "observedGeneration": pool.metadata.generation,
            "replicas": c.replicas,
            "readyReplicas": c.ready,
            "idleReplicas": c.idle,
            "claimedReplicas": c.claimed,
            "conditions": next_conditions,
        }});
        if let Some(a) = &auto {
            // The autoscaler's status is guarded by the Pool's resourceVersion, and what
            // the decision dropped is removed (a merge patch keeps absent fields).
            let mut next = serde_json::to_value(&a.decision.status).unwrap_or_default();
            let old = serde_json::to_value(&current.auto_scaling).unwrap_or_default();
            merge_nulls(&old, &mut next);
            body["status"]["autoScaling"] = next;
            body["metadata"] = json!({"resourceVersion": a.resource_version});
        }
        let api: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &ns);
        ctx.wrote("SandboxPool/status");
        match api.patch_status(&name, &pp, &Patch::Merge(&body)).await {
            Ok(written) => {
                ctx.echoes.expect(&written);
                status_written = true;
            }
            Err(e) => {
                tracing::debug!(pool = %key, error = %brief(&e), "pool status write failed; retrying");
                retry = true;
            }
        }
    }
    if let Some(msg) = &create_error
        && status_written
        && !conditions::has_reason(
            &current.conditions,
            types::READY,
            reasons::POD_CREATE_FAILED,
        )
    {
        ctx.event(
            &pool.object_ref(&()),
            true,
            reasons::POD_CREATE_FAILED,
            format!("creating a sandbox Pod from spec.template failed: {msg}"),
        )
        .await;
    }
    // Commit steps 4 and 5: the Events once the writes succeeded, the history, the next
    // look.
    let mut next_look = Duration::from_secs(300);
    if let Some(a) = auto
        && status_written
    {
        let regarding = pool.object_ref(&());
        for e in &a.decision.events {
            ctx.event(
                &regarding,
                e.type_ == autoscaler::EventType::Warning,
                e.reason,
                e.note.clone(),
            )
            .await;
        }
        ctx.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .record(a.decision.recommendation, a.window);
        next_look = Duration::try_from(a.decision.requeue_at.duration_since(Timestamp::now()))
            .unwrap_or(Duration::ZERO)
            .clamp(Duration::from_millis(100), next_look);
    }
    ctx.metrics
        .reconcile_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    Ok(if retry {
        Action::requeue(Duration::from_millis(200))
    } else {
        Action::requeue(create_retry.map_or(next_look, |r| r.min(next_look)))
    })
}

/// The autoscaler's part of one pool reconcile: what Load found and Decide chose, kept
/// until the status write and the Events.
struct AutoCycle {
    decision: autoscaler::Decision,
    window: jiff::SignedDuration,
    /// The Pool's resourceVersion after the `spec.replicas` write (the status guard).
    resource_version: Option<String>,
}

/// The Pool's Env (its controller owner) from the Env cache.
fn env_of(ctx: &Shared, pool: &SandboxPool) -> Option<Arc<SandboxEnv>> {
    let ns = pool.namespace()?;
    let owner = pool
        .owner_references()
        .iter()
        .find(|o| o.kind == "SandboxEnv")?;
    ctx.envs.get(&ObjectRef::new(&owner.name).within(&ns))
}

/// The autoscaling group `name` of an Env, if the Env declares it.
fn group_of(env: &SandboxEnv, name: &str) -> Option<ScalingGroup> {
    env.spec
        .autoscaling
        .as_ref()?
        .groups
        .iter()
        .find(|g| g.name == name)
        .cloned()
}

/// Whether `manager` owns `spec.replicas` of a Pool (from its managedFields).
fn owns_replicas(pool: &SandboxPool, manager: &str) -> bool {
    pool.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(manager)
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.get("f:spec")
                    .and_then(|s| s.get("f:replicas"))
                    .is_some()
            })
    })
}

/// A Kubernetes quantity as a number (`100m`, `2`, `512Mi`, `1G`); `None` if unreadable.
fn quantity(q: &Quantity) -> Option<f64> {
    let s = q.0.trim();
    let (num, mult) = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ]
    .iter()
    .find_map(|(suffix, m)| s.strip_suffix(suffix).map(|n| (n, *m)))
    .unwrap_or((s, 1.0));
    num.parse::<f64>().ok().map(|n| n * mult)
}

/// The sum of one resource's requests over a Pod template's containers.
fn template_request(pool: &SandboxPool, resource: &str) -> f64 {
    pool.spec
        .template
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(resource))
        .filter_map(quantity)
        .sum()
}

/// The admission probe: how many more Pods the namespace's ResourceQuotas accept, beyond
/// the Pods the Pool still has to create for its current size (`missing`). Each quota's
/// `pods`, and its `requests.cpu` / `requests.memory` (also spelled `cpu` / `memory`)
/// divided by the template's summed container requests, count as `hard − used`; the
/// smallest wins. Other quota resources, LimitRange defaults and node capacity are not
/// probed: the API server's refusals of such creates show as Pods that never appear.
fn admission(ctx: &Shared, pool: &SandboxPool, missing: i32) -> Admission {
    let ns = pool.namespace().unwrap_or_default();
    let mut best: Option<(i64, String)> = None;
    for q in ctx.quotas.state() {
        if q.namespace().as_deref() != Some(ns.as_str()) {
            continue;
        }
        let hard = q
            .spec
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default();
        let used = q
            .status
            .as_ref()
            .and_then(|s| s.used.clone())
            .unwrap_or_default();
        let probes = [
            ("pods", "pods", None),
            ("requests.cpu", "cpu", Some("cpu")),
            ("cpu", "cpu", Some("cpu")),
            ("requests.memory", "memory", Some("memory")),
            ("memory", "memory", Some("memory")),
        ];
        for (key, label, per_pod) in probes {
            let Some(h) = hard.get(key).and_then(quantity) else {
                continue;
            };
            let u = used.get(key).and_then(quantity).unwrap_or(0.0);
            let free = (h - u).max(0.0);
            let pods = match per_pod {
                None => free.floor() as i64,
                Some(r) => {
                    let each = template_request(pool, r);
                    if each <= 0.0 {
                        continue;
                    }
                    (free / each).floor() as i64
                }
            };
            if best.as_ref().is_none_or(|(b, _)| pods < *b) {
                best = Some((
                    pods,
                    format!(
                        "ResourceQuota {} allows {pods} more Pods ({label}: {} of {} used)",
                        q.name_any(),
                        used.get(key).map(|x| x.0.as_str()).unwrap_or("0"),
                        hard.get(key).map(|x| x.0.as_str()).unwrap_or("?"),
                    ),
                ));
            }
        }
    }
    match best {
        None => Admission::default(),
        Some((pods, msg)) => Admission {
            headroom: Some((pods - i64::from(missing.max(0))).clamp(0, i64::from(i32::MAX)) as i32),
            message: Some(msg),
        },
    }
}

fn pool_pod(p: &Pod, v: &PodView) -> PoolPod {
    let annotations = p.annotations();
    let state = if v.terminating || v.finished {
        PodState::Terminating
    } else if v.claim.is_some() {
        PodState::Claimed
    } else if !v.ready || v.ip.is_none() {
        PodState::Starting
    } else {
        PodState::Idle
    };
    PoolPod {
        name: v.name.clone(),
        uid: v.uid.clone(),
        resource_version: v.resource_version.clone(),
        state,
        ready: v.ready,
        has_ip: v.ip.is_some(),
        idle_since: (state == PodState::Idle)
            .then(|| parse_time(annotations.get(keys::STATE_SINCE)))
            .flatten(),
        mark: annotations
            .get(keys::SCALE_DOWN)
            .map(|a| ScaleDownMark::from_annotation(a)),
    }
}

/// Load: the autoscaler's snapshot of one Pool from the caches.
fn load(
    ctx: &Shared,
    pool: &SandboxPool,
    group: Option<ScalingGroup>,
    pods: &[Arc<Pod>],
    views: &[PodView],
    in_flight: usize,
    queued: usize,
) -> Snapshot {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let env_owner = pool
        .owner_references()
        .iter()
        .find(|o| o.kind == "SandboxEnv")
        .map(|o| o.uid.clone());
    let siblings = ctx
        .pools
        .state()
        .iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.name_any() != name
                && p.spec.scaling_group.is_some()
                && p.spec.scaling_group == pool.spec.scaling_group
                && p.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == env_owner.as_ref())
        })
        .map(|p| SiblingPool {
            name: p.name_any(),
            // What this process last wrote, until the cache shows that write.
            replicas: written_replicas(ctx, p).unwrap_or(p.spec.replicas),
        })
        .collect();
    let claims: Vec<Arc<SandboxClaim>> = ctx
        .claims
        .state()
        .into_iter()
        .filter(|c| claim_targets(c, pool))
        .collect();
    let bound_pod_names: Vec<&str> = views
        .iter()
        .filter_map(|v| v.claim.as_ref().map(|(n, _)| n.as_str()))
        .collect();
    let oldest_pending_since = claims
        .iter()
        .filter(|c| {
            let s = c.status.as_ref();
            matches!(s.and_then(|s| s.phase.as_deref()), None | Some("Pending"))
                && !bound_pod_names.contains(&c.name_any().as_str())
        })
        .filter_map(|c| c.creation_timestamp().map(|t| t.0))
        .min();
    let last_bound = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.bound_at.as_ref().map(|t| t.0))
        .max();
    let last_claimed = views
        .iter()
        .filter(|v| v.claim.is_some())
        .map(|v| v.since)
        .max();
    let live = views
        .iter()
        .filter(|v| !v.terminating && !v.finished)
        .count()
        + in_flight;
    let missing = pool.spec.replicas - live as i32;
    let history = ctx
        .history
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&format!("{ns}/{name}"))
        .cloned()
        .unwrap_or_default();
    Snapshot {
        pool: PoolView {
            name,
            replicas: pool.spec.replicas,
            auto_scaling: pool
                .status
                .as_ref()
                .and_then(|s| s.auto_scaling.clone())
                .unwrap_or_default(),
        },
        group,
        siblings,
        queue: QueueStats {
            pending: queued as i32,
            oldest_pending_since: if queued > 0 {
                oldest_pending_since
            } else {
                None
            },
        },
        pods: pods
            .iter()
            .zip(views)
            .map(|(p, v)| pool_pod(p, v))
            .collect(),
        in_flight: autoscaler::InFlight {
            creates: in_flight as i32,
            deletes: 0,
        },
        last_claim_at: last_bound.max(last_claimed),
        admission: admission(ctx, pool, missing),
        history,
    }
}

/// The `spec.replicas` this process wrote to `pool` that the cache does not show yet.
fn written_replicas(ctx: &Shared, pool: &SandboxPool) -> Option<i32> {
    let key = format!(
        "{}/{}",
        pool.namespace().unwrap_or_default(),
        pool.name_any()
    );
    let mut sizes = ctx.sizes.lock().unwrap_or_else(|e| e.into_inner());
    let (replicas, rv, at) = sizes.get(&key)?;
    if pool.resource_version().as_ref() == Some(rv)
        || at.elapsed() >= pool::IN_FLIGHT_TTL.unsigned_abs()
    {
        sizes.remove(&key);
        return None;
    }
    Some(*replicas)
}

/// A JSON merge patch that turns `old` into `new`: what `new` lacks is set to null.
fn merge_nulls(old: &serde_json::Value, new: &mut serde_json::Value) {
    if let (Some(o), Some(n)) = (old.as_object(), new.as_object_mut()) {
        for (k, v) in o {
            match n.get_mut(k) {
                None => {
                    n.insert(k.clone(), serde_json::Value::Null);
                }
                Some(nv) => merge_nulls(v, nv),
            }
        }
    }
}

/// Sets (`Some`) or removes (`None`) a Pod's scale-down mark, guarded by its
/// resourceVersion; the Pod's new resourceVersion on success.
async fn set_mark(
    api: &Api<Pod>,
    pp: &PatchParams,
    pod: &str,
    resource_version: &str,
    mark: Option<String>,
) -> Result<String, kube::Error> {
    let path = "/metadata/annotations/moonin.io~1scale-down";
    let op = match mark {
        Some(v) => json!({"op": "add", "path": path, "value": v}),
        None => json!({"op": "remove", "path": path}),
    };
    let patch = json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        op,
    ]));
    let p = api.patch(pod, pp, &patch).await?;
    Ok(p.resource_version().unwrap_or_default())
}

/// Commit steps 1–3 of a decision (marks and unmarks, `spec.replicas`, deletes of marked
/// Pods); the views follow the writes. `Ok(None)`: a mark or the replicas write lost a
/// race, nothing else may be written, decide again at once.
async fn commit_pods_and_size(
    ctx: &Shared,
    pool: &SandboxPool,
    decision: &autoscaler::Decision,
    enabled: bool,
    pods: &[Arc<Pod>],
    views: &mut [PodView],
    retry: &mut bool,
) -> Result<Option<(i32, Option<String>)>, SandboxError> {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(field_manager::SANDBOX_AUTOSCALER.to_string()),
        ..PatchParams::default()
    };
    // 1. Marks: all or none.
    let mut placed: Vec<(String, String)> = Vec::new();
    for m in &decision.marks {
        ctx.wrote("Pod");
        match set_mark(
            &pod_api,
            &pp,
            &m.pod.name,
            &m.pod.resource_version,
            Some(m.mark.to_annotation()),
        )
        .await
        {
            Ok(rv) => placed.push((m.pod.name.clone(), rv)),
            Err(e) => {
                tracing::debug!(pool = %name, pod = %m.pod.name, error = %brief(&e), "mark refused; undoing this decision's marks");
                for (pod, rv) in &placed {
                    ctx.wrote("Pod");
                    let _ = set_mark(&pod_api, &pp, pod, rv, None).await;
                }
                return Ok(None);
            }
        }
    }
    for (pod, rv) in placed {
        if let Some(v) = views.iter_mut().find(|v| v.name == pod) {
            v.marked = true;
            v.resource_version = rv;
        }
    }
    for u in &decision.unmarks {
        ctx.wrote("Pod");
        if let Ok(rv) = set_mark(&pod_api, &pp, &u.pod.name, &u.pod.resource_version, None).await
            && let Some(v) = views.iter_mut().find(|v| v.name == u.pod.name)
        {
            v.marked = false;
            v.resource_version = rv;
        }
    }
    // 2. spec.replicas, under the autoscaler's own field manager.
    let mut replicas = pool.spec.replicas;
    let mut resource_version = pool.resource_version();
    if enabled && decision.desired_replicas != pool.spec.replicas {
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxPool",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": resource_version},
            "spec": {"replicas": decision.desired_replicas},
        });
        let api: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &ns);
        ctx.wrote("SandboxPool");
        match api
            .patch(
                &name,
                &PatchParams::apply(field_manager::SANDBOX_AUTOSCALER).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(p) => {
                replicas = p.spec.replicas;
                resource_version = p.resource_version();
                ctx.sizes.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    format!("{ns}/{name}"),
                    (
                        replicas,
                        resource_version.clone().unwrap_or_default(),
                        std::time::Instant::now(),
                    ),
                );
            }
            Err(e) if is_conflict(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    // 3. Deletes of the Pods the open session marked (never a claimed one), each guarded.
    // A mark of another decision is left to decide (it expires, or its session shows up).
    let session = decision
        .status
        .scale_down_session
        .as_ref()
        .filter(|s| {
            s.state == autoscaler::session_states::STARTED
                || s.state == autoscaler::session_states::STEPPED
        })
        .map(|s| s.id.as_str());
    let of_session: Vec<&str> = pods
        .iter()
        .filter(|p| {
            p.annotations().get(keys::SCALE_DOWN).is_some_and(|a| {
                Some(ScaleDownMark::from_annotation(a).decision.as_str()) == session
            })
        })
        .map(|p| p.metadata.name.as_deref().unwrap_or_default())
        .chain(decision.marks.iter().map(|m| m.pod.name.as_str()))
        .collect();
    for v in views.iter_mut() {
        if !v.marked
            || !of_session.contains(&v.name.as_str())
            || v.claim.is_some()
            || v.terminating
            || v.finished
        {
            continue;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(v.uid.clone()),
                resource_version: Some(v.resource_version.clone()),
            }),
            ..DeleteParams::default()
        };
        ctx.wrote("Pod");
        match pod_api.delete(&v.name, &dp).await {
            Ok(_) => v.terminating = true,
            Err(kube::Error::Api(s)) if s.code == 404 => v.terminating = true,
            Err(e) => {
                tracing::debug!(pool = %name, pod = %v.name, error = %brief(&e), "delete of a marked Pod refused; retrying");
                *retry = true;
            }
        }
    }
    Ok(Some((replicas, resource_version)))
}

fn json_patch(v: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(v).unwrap_or_else(|_| json_patch::Patch(Vec::new())))
}

/// Writes a claim's status as bound to `pod`, guarded by the claim's resourceVersion so a
/// claim is never moved from one Pod to another, and remembers the write until the claim
/// cache shows it. `pool_key` is `ns/pool`. False when the write must be retried.
async fn bind_claim(
    ctx: &Shared,
    pool_key: &str,
    claim: &str,
    pod: &str,
    ip: Option<String>,
    now: Timestamp,
) -> bool {
    let ns = pool_key.split('/').next().unwrap_or_default();
    let Some(c) = ctx
        .claims
        .state()
        .into_iter()
        .find(|c| c.name_any() == claim && c.namespace().as_deref() == Some(ns))
    else {
        // Deleted meanwhile: the pool releases the Pod.
        return true;
    };
    let api: Api<SandboxClaim> = Api::namespaced(ctx.client.clone(), ns);
    let uid = c.uid().unwrap_or_default();
    let seen = ctx
        .first_seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&uid);
    let start = pool::wait_start(seen, c.creation_timestamp().map(|t| t.0), now);
    let wait = now.duration_since(start).as_millis().max(0) as i64;
    let mut status: SandboxClaimStatus = c.status.clone().unwrap_or_default();
    status.observed_generation = c.metadata.generation;
    status.phase = Some("Bound".into());
    status.pod_name = Some(pod.to_string());
    status.pod_ip = ip;
    status.bound_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    status.wait_milliseconds = Some(wait);
    status.conditions = conditions::merge(
        &status.conditions,
        &[Desired::new(
            types::READY,
            true,
            "Bound",
            format!("bound to sandbox Pod {pod}"),
        )],
        c.metadata.generation,
        now,
    );
    let body = json!({
        "metadata": {"resourceVersion": c.resource_version()},
        "status": status,
    });
    let pp = PatchParams {
        field_manager: Some(field_manager::SANDBOX.to_string()),
        ..PatchParams::default()
    };
    ctx.wrote("SandboxClaim/status");
    if let Err(e) = api.patch_status(claim, &pp, &Patch::Merge(&body)).await {
        if !is_conflict(&e) {
            tracing::warn!(%claim, error = %brief(&e), "claim status write failed; the next reconcile finishes it");
        }
        return false;
    }
    ctx.in_flight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .claim_binds
        .entry(pool_key.to_string())
        .or_default()
        .insert(uid.clone(), (pod.to_string(), std::time::Instant::now()));
    let regarding = c.object_ref(&());
    ctx.event(
        &regarding,
        false,
        "Bound",
        format!("bound to sandbox Pod {pod} after {wait} ms"),
    )
    .await;
    true
}

/// Claims: a missing pool or env is reported (not retried in a loop), a lifetime ends the
/// claim, a bound Pod that disappeared fails it. Binding itself is the pool's job.
async fn reconcile_claim(
    claim: Arc<SandboxClaim>,
    ctx: Arc<Shared>,
) -> Result<Action, SandboxError> {
    let result = claim_pass(claim.clone(), ctx.clone()).await;
    settled(&ctx, claim.as_ref(), result)
}

/// One reconcile of a claim.
async fn claim_pass(claim: Arc<SandboxClaim>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    if !ctx.leader.is_leader() {
        return Ok(Action::await_change());
    }
    let ns = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let status = claim.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let mut next = status.clone();
    let mut event: Option<(bool, &str, String)> = None;
    let mut requeue = Duration::from_secs(300);
    match phase {
        "Pending" => {
            ctx.first_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(claim.uid().unwrap_or_default())
                .or_insert(now);
            let missing = if let Some(r) = &claim.spec.pool_ref {
                let exists = ctx
                    .pools
                    .get(&ObjectRef::new(&r.name).within(&ns))
                    .is_some();
                (!exists).then(|| {
                    let why = match invalid::find("SandboxPool", &ns, &r.name) {
                        Some(u) => format!("cannot be decoded ({})", u.message()),
                        None => "does not exist".to_string(),
                    };
                    (
                        reasons::POOL_NOT_FOUND,
                        format!("SandboxPool {ns}/{} {why}", r.name),
                    )
                })
            } else if let Some(r) = &claim.spec.env_ref {
                let pools = ctx
                    .pools
                    .state()
                    .iter()
                    .filter(|p| claim_targets(&claim, p))
                    .count();
                (pools == 0).then(|| {
                    (
                        reasons::ENV_NOT_FOUND,
                        match &r.group {
                            Some(g) => format!(
                                "SandboxEnv {ns}/{} has no pool in group {g} in this cluster",
                                r.name
                            ),
                            None => {
                                format!("SandboxEnv {ns}/{} has no pool in this cluster", r.name)
                            }
                        },
                    )
                })
            } else {
                None
            };
            match missing {
                Some((reason, msg)) => {
                    next.phase = Some("Pending".into());
                    next.conditions = conditions::merge(
                        &status.conditions,
                        &[Desired::new(types::READY, false, reason, msg.clone())],
                        claim.metadata.generation,
                        now,
                    );
                    if !conditions::has_reason(&status.conditions, types::READY, reason) {
                        event = Some((true, reason, msg));
                    }
                }
                // Queued: the pool binds it. A Ready=False left from a missing pool is
                // replaced, so the claim does not keep saying the pool is missing.
                None => {
                    let stale = [reasons::POOL_NOT_FOUND, reasons::ENV_NOT_FOUND]
                        .iter()
                        .any(|r| conditions::has_reason(&status.conditions, types::READY, r));
                    // A claim the pool binds at once never says Queued (a write saved per
                    // claim); one still waiting after QUEUED_AFTER does.
                    let unreported = !status.conditions.iter().any(|c| c.type_ == types::READY);
                    let waited = claim
                        .creation_timestamp()
                        .map_or(jiff::SignedDuration::ZERO, |t| now.duration_since(t.0));
                    if unreported && waited < QUEUED_AFTER {
                        let left =
                            Duration::try_from(QUEUED_AFTER - waited).unwrap_or(Duration::ZERO);
                        return Ok(Action::requeue(left));
                    }
                    if !stale && !unreported {
                        return Ok(Action::await_change());
                    }
                    next.conditions = conditions::merge(
                        &status.conditions,
                        &[Desired::new(
                            types::READY,
                            false,
                            reasons::QUEUED,
                            "waiting for an idle sandbox Pod",
                        )],
                        claim.metadata.generation,
                        now,
                    );
                }
            }
        }
        "Bound" => {
            let pod = status.pod_name.clone().unwrap_or_default();
            let holds = |p: &Pod| {
                p.metadata.deletion_timestamp.is_none()
                    && p.annotations()
                        .get(keys::CLAIM)
                        .is_some_and(|c| c.ends_with(&claim.uid().unwrap_or_default()))
            };
            let mut alive = ctx
                .pods
                .get(&ObjectRef::new(&pod).within(&ns))
                .is_some_and(|p| holds(&p));
            if !alive {
                // The Pod cache can lag the claim cache just after a binding: ask the API
                // server before declaring the Pod lost.
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                alive = match pods.get_opt(&pod).await {
                    Ok(Some(p)) => holds(&p),
                    Ok(None) => false,
                    // Unknown: decide at the next reconcile.
                    Err(_) => true,
                };
            }
            let expiry = claim.spec.lifetime.as_ref().and_then(|l| {
                let d: std::time::Duration = (*l).into();
                let bound = status.bound_at.as_ref()?.0;
                bound
                    .checked_add(jiff::SignedDuration::try_from(d).ok()?)
                    .ok()
            });
            if let Some(end) = expiry
                && end <= now
            {
                next.phase = Some("Released".into());
                next.conditions = conditions::merge(
                    &status.conditions,
                    &[Desired::new(
                        types::READY,
                        false,
                        "Released",
                        "the claim's lifetime ended",
                    )],
                    claim.metadata.generation,
                    now,
                );
                event = Some((
                    false,
                    "Released",
                    format!("lifetime ended; sandbox Pod {pod} released"),
                ));
            } else if !alive && ctx.leader.is_leader() {
                next.phase = Some("Failed".into());
                next.conditions = conditions::merge(
                    &status.conditions,
                    &[Desired::new(
                        types::READY,
                        false,
                        "PodLost",
                        format!("sandbox Pod {pod} was deleted"),
                    )],
                    claim.metadata.generation,
                    now,
                );
                event = Some((
                    true,
                    "PodLost",
                    format!("sandbox Pod {pod} was deleted while bound"),
                ));
            } else if let Some(end) = expiry {
                requeue = Duration::try_from(end.duration_since(now)).unwrap_or(Duration::ZERO);
            }
        }
        _ => return Ok(Action::await_change()),
    }
    if next != status {
        let api: Api<SandboxClaim> = Api::namespaced(ctx.client.clone(), &ns);
        let pp = PatchParams {
            field_manager: Some(field_manager::SANDBOX.to_string()),
            ..PatchParams::default()
        };
        ctx.wrote("SandboxClaim/status");
        match api
            .patch_status(
                &name,
                &pp,
                // Guarded: the pool may bind the claim meanwhile.
                &Patch::Merge(&json!({
                    "metadata": {"resourceVersion": claim.resource_version()},
                    "status": next,
                })),
            )
            .await
        {
            Ok(written) => ctx.echoes.expect(&written),
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(Duration::from_millis(200))),
            Err(e) => return Err(e.into()),
        }
        if let Some((warning, reason, note)) = event {
            ctx.event(&claim.object_ref(&()), warning, reason, note)
                .await;
        }
    }
    Ok(Action::requeue(requeue))
}

/// Env: the Pools of this cluster's members, and the status of every member.
async fn reconcile_env(env: Arc<SandboxEnv>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    // An Env whose Pools were refused keeps its backoff (env_pass counts it itself).
    env_pass(env, ctx).await
}

/// One reconcile of an Env.
async fn env_pass(env: Arc<SandboxEnv>, ctx: Arc<Shared>) -> Result<Action, SandboxError> {
    if !ctx.leader.is_leader() {
        return Ok(Action::await_change());
    }
    let ns = env.namespace().unwrap_or_default();
    let env_name = env.name_any();
    let api: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = env.controller_owner_ref(&());
    let mut wanted: Vec<String> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut members = Vec::new();
    for cluster in &env.spec.clusters {
        for m in &cluster.members {
            let local = cluster.name == ctx.cluster_name;
            let pool_name = format!("{env_name}-{}", m.name);
            let pool = local
                .then(|| ctx.pools.get(&ObjectRef::new(&pool_name).within(&ns)))
                .flatten();
            members.push(crate::api::sandbox::MemberStatus {
                name: m.name.clone(),
                cluster: cluster.name.clone(),
                local,
                pool: local.then(|| pool_name.clone()),
                ready_replicas: pool
                    .as_ref()
                    .and_then(|p| p.status.as_ref())
                    .map(|s| s.ready_replicas),
                idle_replicas: pool
                    .as_ref()
                    .and_then(|p| p.status.as_ref())
                    .map(|s| s.idle_replicas),
            });
            if !local {
                continue;
            }
            // Right after a start the cache can lag a Pool that exists: ask the API server
            // rather than take an autoscaled Pool for a new one and reset its replicas.
            let pool = match pool {
                Some(p) => Some(p),
                // A stored Pool that does not decode is replaced by the Env's spec.
                None => Api::<Decoded<SandboxPool>>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(&pool_name)
                    .await?
                    .and_then(Decoded::valid)
                    .map(Arc::new),
            };
            wanted.push(pool_name.clone());
            let group = m.config.as_ref().and_then(|c| c.scaling_group.clone());
            // `spec.replicas` has exactly one field manager: the autoscaler's while the
            // member's group is enabled (a new Pool starts at the member's replicas), this
            // controller's otherwise.
            let autoscaled = pool.is_some()
                && group
                    .as_ref()
                    .and_then(|g| group_of(&env, g))
                    .is_some_and(|g| g.enabled);
            let mut desired_spec = json!({
                "template": m.spec.template,
                "recyclePolicy": m.spec.recycle_policy,
                "scalingGroup": group,
            });
            if !autoscaled {
                desired_spec["replicas"] = json!(m.spec.replicas);
            }
            let up_to_date = pool.as_ref().is_some_and(|p| {
                let ours = owns_replicas(p, field_manager::SANDBOX);
                serde_json::to_value(&p.spec).ok().is_some_and(|cur| {
                    cur["template"] == desired_spec["template"]
                        && if autoscaled {
                            !ours
                        } else {
                            ours && cur["replicas"] == desired_spec["replicas"]
                        }
                        && cur["recyclePolicy"] == desired_spec["recyclePolicy"]
                        && cur
                            .get("scalingGroup")
                            .cloned()
                            .unwrap_or(serde_json::Value::Null)
                            == desired_spec["scalingGroup"]
                })
            });
            if up_to_date {
                continue;
            }
            // Hand-over: the autoscaler's manager takes the current value first, so
            // dropping it from this controller's apply keeps the field.
            let hand_over = pool
                .as_ref()
                .filter(|p| autoscaled && !owns_replicas(p, field_manager::SANDBOX_AUTOSCALER))
                .map(|p| {
                    json!({
                        "apiVersion": "moonin.io/v1alpha1",
                        "kind": "SandboxPool",
                        "metadata": {"name": pool_name, "namespace": ns},
                        "spec": {"replicas": p.spec.replicas},
                    })
                });
            let body = json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "SandboxPool",
                "metadata": {
                    "name": pool_name,
                    "namespace": ns,
                    "labels": {"moonin.io/env": env_name, "moonin.io/member": m.name},
                    "ownerReferences": [owner],
                },
                "spec": desired_spec,
            });
            let applied = async {
                if let Some(hand_over) = &hand_over {
                    ctx.wrote("SandboxPool");
                    api.patch(
                        &pool_name,
                        &PatchParams::apply(field_manager::SANDBOX_AUTOSCALER).force(),
                        &Patch::Apply(hand_over),
                    )
                    .await?;
                }
                ctx.wrote("SandboxPool");
                api.patch(
                    &pool_name,
                    &PatchParams::apply(field_manager::SANDBOX).force(),
                    &Patch::Apply(&body),
                )
                .await
            };
            match applied.await {
                Ok(_) => {}
                Err(e) if is_conflict(&e) => {
                    return Err(SandboxError::Conflict(format!(
                        "SandboxPool {ns}/{pool_name}"
                    )));
                }
                // Refused (an invalid Pool name or template, an admission policy): the
                // Env says so, and the other members go on.
                Err(e) => refused.push(format!("SandboxPool {pool_name}: {}", brief(&e))),
            }
        }
    }
    // Pools of members that are gone.
    let uid = env.uid().unwrap_or_default();
    for p in ctx.pools.state() {
        let ours = p.owner_references().iter().any(|o| o.uid == uid);
        if ours && p.namespace().as_deref() == Some(ns.as_str()) && !wanted.contains(&p.name_any())
        {
            ctx.wrote("SandboxPool");
            match api.delete(&p.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let now = Timestamp::now();
    let current = env.status.clone().unwrap_or_default();
    let local = members.iter().filter(|m| m.local).count() as i32;
    let msg = format!(
        "{local} of {} members run in cluster {}",
        members.len(),
        ctx.cluster_name
    );
    let desired = if refused.is_empty() {
        vec![
            Desired::new(types::READY, true, "PoolsReconciled", msg),
            Desired::new(types::STALLED, false, conditions::reasons::RECONCILED, ""),
        ]
    } else {
        let msg = format!("the API server refused {}", refused.join("; "));
        vec![
            Desired::new(types::READY, false, reasons::POOL_APPLY_FAILED, msg.clone()),
            Desired::new(types::STALLED, true, reasons::POOL_APPLY_FAILED, msg),
        ]
    };
    let next = crate::api::sandbox::SandboxEnvStatus {
        observed_generation: env.metadata.generation,
        local_members: local,
        members,
        conditions: conditions::merge(&current.conditions, &desired, env.metadata.generation, now),
    };
    if next != current {
        let envs: Api<SandboxEnv> = Api::namespaced(ctx.client.clone(), &ns);
        ctx.wrote("SandboxEnv/status");
        let pp = PatchParams {
            field_manager: Some(field_manager::MANAGER.to_string()),
            ..PatchParams::default()
        };
        let written = envs
            .patch_status(&env_name, &pp, &Patch::Merge(&json!({"status": next})))
            .await?;
        ctx.echoes.expect(&written);
        if !refused.is_empty()
            && !conditions::has_reason(
                &current.conditions,
                types::READY,
                reasons::POOL_APPLY_FAILED,
            )
        {
            ctx.event(
                &env.object_ref(&()),
                true,
                reasons::POOL_APPLY_FAILED,
                desired[0].message.clone(),
            )
            .await;
        }
    }
    let key = crate::runtime::reference(env.as_ref());
    if refused.is_empty() {
        ctx.backoff.succeeded(&key);
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    // Refused again on the same spec: retry on this Env's backoff.
    let step = ctx.backoff.failed(
        &key,
        env.metadata.generation,
        tokio::time::Instant::now(),
        &desired[0].message,
    );
    if step.counted {
        tracing::warn!(
            object = %key,
            error = %desired[0].message,
            retry_in_seconds = step.wait.as_secs(),
            "the API server refused a SandboxPool"
        );
    }
    Ok(Action::requeue(step.wait))
}

/// A failed reconcile: a conflict is retried at once from fresh caches; a refusal backs off
/// per object (logged once per step, with the object and the API server's message).
fn error_policy<K>(obj: Arc<K>, err: &SandboxError, ctx: Arc<Shared>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::runtime::metrics::ErrorLabels {
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
            Action::requeue(Duration::from_millis(200))
        }
        SandboxError::Api(e) => {
            let message = brief(e);
            let step = ctx.backoff.failed(
                &object,
                obj.meta().generation,
                tokio::time::Instant::now(),
                &message,
            );
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
        ctx.backoff.succeeded(&crate::runtime::reference(obj));
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

/// Runs the sandbox controllers until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (pool_tx, pool_rx) = cache::requests::<SandboxPool>();
    let (claim_tx, claim_rx) = cache::requests::<SandboxClaim>();
    let (env_tx, env_rx) = cache::requests::<SandboxEnv>();
    let echoes = cache::Echoes::default();
    // Each kind is watched once; its cache feeds its own controller and the triggers of
    // the others. A Pool change reconciles the Pool and its Env (the Env reports its
    // Pools' readiness).
    let pool_to_env: cache::Trigger<SandboxPool> = {
        let tx = env_tx.clone();
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
    };
    let (pools, pool_drive) = cache::cache::<SandboxPool>(
        client.clone(),
        watcher::Config::default(),
        |p| cache::strip_last_applied(&mut p.metadata),
        vec![
            cache::reconcile_itself(pool_tx.clone(), echoes.clone()),
            pool_to_env,
        ],
    );
    // A Pod change reconciles its pool; a claim change, the claim and every pool it may
    // bind from.
    let pod_trigger: cache::Trigger<Pod> = {
        let tx = pool_tx.clone();
        Box::new(move |p: &Pod| {
            if let (Some(pool), Some(ns)) = (p.labels().get(keys::POOL), p.namespace()) {
                let _ = tx.unbounded_send(ObjectRef::new(pool).within(&ns));
            }
        })
    };
    let claim_trigger: cache::Trigger<SandboxClaim> = {
        let tx = pool_tx.clone();
        let pools = pools.clone();
        Box::new(move |c: &SandboxClaim| {
            for p in pools.state().iter().filter(|p| claim_targets(c, p)) {
                let _ = tx.unbounded_send(ObjectRef::from_obj(p.as_ref()));
            }
        })
    };
    let (pods, pod_drive) = cache::cache::<Pod>(
        client.clone(),
        watcher::Config::default().labels(keys::POOL).page_size(500),
        trim_pod,
        vec![pod_trigger],
    );
    let (claims, claim_drive) = cache::cache::<SandboxClaim>(
        client.clone(),
        watcher::Config::default().page_size(500),
        |c| cache::strip_last_applied(&mut c.metadata),
        vec![
            cache::reconcile_itself(claim_tx.clone(), echoes.clone()),
            claim_trigger,
        ],
    );
    // An Env change (its autoscaling groups) reconciles the Env and the Pools it owns.
    let env_trigger: cache::Trigger<SandboxEnv> = {
        let tx = pool_tx.clone();
        let pools = pools.clone();
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
    };
    let (envs, env_drive) = cache::cache::<SandboxEnv>(
        client.clone(),
        watcher::Config::default(),
        |e| {
            e.managed_fields_mut().clear();
            cache::strip_last_applied(&mut e.metadata);
        },
        vec![
            cache::reconcile_itself(env_tx.clone(), echoes.clone()),
            env_trigger,
        ],
    );
    // Quotas are read at each decision; a Pool whose scale-up they limited is decided
    // again when its saturation ends.
    let (quotas, quota_drive) = cache::cache::<ResourceQuota>(
        client.clone(),
        watcher::Config::default(),
        |q| {
            q.managed_fields_mut().clear();
            cache::strip_last_applied(&mut q.metadata);
        },
        Vec::new(),
    );
    let events = Publisher::new(client.clone(), "moonin-sandbox");
    let shared = Arc::new(Shared {
        client: client.clone(),
        pods: pods.clone(),
        claims: claims.clone(),
        pools: pools.clone(),
        envs: envs.clone(),
        quotas: quotas.clone(),
        history: Mutex::new(HashMap::new()),
        in_flight: Mutex::new(InFlight::default()),
        groups: Mutex::new(HashMap::new()),
        sizes: Mutex::new(HashMap::new()),
        first_seen: Mutex::new(HashMap::new()),
        events: events.clone(),
        metrics: ctx.metrics.clone(),
        leader: ctx.leadership.clone(),
        seq: std::sync::atomic::AtomicU64::new(0),
        synced: std::sync::atomic::AtomicBool::new(false),
        claim_requests: claim_tx,
        echoes,
        backoff: Backoff::default(),
        create_backoff: Backoff::default(),
        cluster_name: ctx.cluster_name.clone(),
    });
    let reporters = futures::future::join3(
        invalid::report::<SandboxEnv>(
            client.clone(),
            ctx.leadership.clone(),
            events.clone(),
            ctx.shutdown.clone(),
        ),
        invalid::report::<SandboxPool>(
            client.clone(),
            ctx.leadership.clone(),
            events.clone(),
            ctx.shutdown.clone(),
        ),
        invalid::report::<SandboxClaim>(
            client.clone(),
            ctx.leadership.clone(),
            events,
            ctx.shutdown.clone(),
        ),
    );

    let pool_ctl = Controller::for_stream(futures::stream::pending(), pools.clone())
        .reconcile_on(pool_rx)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_pool, error_policy, shared.clone())
        .for_each(cache::controller_result("SandboxPool"));
    let claim_ctl = Controller::for_stream(futures::stream::pending(), claims.clone())
        .reconcile_on(claim_rx)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_claim, error_policy, shared.clone())
        .for_each(cache::controller_result("SandboxClaim"));
    let env_ctl = Controller::for_stream(futures::stream::pending(), envs.clone())
        .reconcile_on(env_rx)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_env, error_policy, shared.clone())
        .for_each(cache::controller_result("SandboxEnv"));

    let ready = {
        let (pods, claims, pools) = (pods.clone(), claims.clone(), pools.clone());
        let (synced, ready_tx) = (shared.clone(), pool_tx.clone());
        async move {
            let _ = pods.wait_until_ready().await;
            let _ = claims.wait_until_ready().await;
            let _ = pools.wait_until_ready().await;
            let _ = envs.wait_until_ready().await;
            let _ = quotas.wait_until_ready().await;
            // Pool reconciles wait for this; then every Pool is looked at.
            synced
                .synced
                .store(true, std::sync::atomic::Ordering::Release);
            for p in pools.state() {
                let _ = ready_tx.unbounded_send(ObjectRef::from_obj(p.as_ref()));
            }
            readiness.report_synced();
            tracing::info!("sandbox caches synced");
        }
    };
    let shutdown = ctx.shutdown.clone();
    tokio::select! {
        _ = futures::future::join5(pod_drive, claim_drive, env_drive, quota_drive, pool_drive) => {}
        _ = futures::future::join5(pool_ctl, claim_ctl, env_ctl, ready, reporters) => {}
        _ = shutdown.cancelled() => {}
    }
    Ok(())
}
