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
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use serde_json::json;

use super::pool::{self, ClaimView, PodOp, PodView, PoolSnapshot, keys};
use crate::api::{
    conditions::{self, Desired, types},
    field_manager,
    sandbox::{SandboxClaim, SandboxClaimStatus, SandboxEnv, SandboxPool},
};
use crate::manager::{
    cache,
    controllers::{Context, Registered},
    http::Readiness,
    metrics::{ControllerLabels, Metrics},
};

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "sandbox";

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

fn conflict(e: &kube::Error) -> bool {
    crate::scaling::commit::is_conflict(e)
}

/// Pods created by this process that the cache has not shown yet, per pool.
#[derive(Default)]
struct InFlight {
    creates: HashMap<String, BTreeMap<String, std::time::Instant>>,
}

struct Shared {
    client: Client,
    pods: Store<Pod>,
    claims: Store<SandboxClaim>,
    pools: Store<SandboxPool>,
    in_flight: Mutex<InFlight>,
    /// When this process first saw each Pending claim (creation times have 1 s resolution).
    first_seen: Mutex<HashMap<String, Timestamp>>,
    recorder: Recorder,
    metrics: Metrics,
    leader: crate::manager::leader::Leadership,
    seq: std::sync::atomic::AtomicU64,
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
        let e = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&e, regarding).await {
            tracing::warn!(error = %err, "could not publish an Event");
        }
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
    let labels = ControllerLabels {
        controller: CONTROLLER.to_string(),
    };
    ctx.metrics.reconciliations.get_or_create(&labels).inc();
    if !ctx.leader.is_leader() {
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
    let views: Vec<PodView> = pods.iter().map(|p| pod_view(p)).collect();
    let in_flight: Vec<String> = {
        let mut g = ctx.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let entry = g.creates.entry(key.clone()).or_default();
        entry.retain(|n, at| {
            !views.iter().any(|v| &v.name == n) && at.elapsed() < pool::IN_FLIGHT_TTL.unsigned_abs()
        });
        entry.keys().cloned().collect()
    };
    let claims: Vec<ClaimView> = ctx
        .claims
        .state()
        .iter()
        .filter(|c| claim_targets(c, &pool))
        .map(|c| claim_view(c))
        .collect();
    let snapshot = PoolSnapshot {
        replicas: pool.spec.replicas,
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
    // Conflicts retry at once from fresh caches; refusals (quota, a terminating namespace)
    // back off.
    let mut retry = false;
    let mut failed = false;
    for op in &plan.ops {
        if !ctx.leader.is_leader() {
            return Ok(Action::await_change());
        }
        let now = Timestamp::now();
        match op {
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
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => {
                        ctx.in_flight
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .creates
                            .entry(key.clone())
                            .or_default()
                            .remove(pod_name);
                        tracing::warn!(pool = %key, error = %e, "creating a sandbox Pod failed");
                        failed = true;
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
                    Ok(_) => bind_claim(&ctx, &ns, claim, pod, Some(ip.clone()), now).await,
                    Err(e) if conflict(&e) => retry = true,
                    Err(e) => {
                        tracing::warn!(pool = %key, %pod, error = %e, "binding refused");
                        retry = true;
                    }
                }
            }
            PodOp::FinishBind { pod, ip, claim } => {
                bind_claim(&ctx, &ns, claim, pod, ip.clone(), now).await;
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
                    tracing::debug!(pool = %key, %pod, error = %e, "unclaim refused; retrying");
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
                        tracing::debug!(pool = %key, %pod, error = %e, "delete refused; retrying");
                        retry = true;
                    }
                }
            }
        }
    }

    // Status: counts and conditions, written only when they change.
    let c = plan.counts;
    let current = pool.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let starting = c.replicas - c.ready;
    let desired = vec![
        Desired::new(
            types::READY,
            c.ready >= pool.spec.replicas,
            if c.ready >= pool.spec.replicas {
                "PoolReady"
            } else {
                "PodsStarting"
            },
            format!(
                "{} of {} sandbox Pods ready, {} idle, {} claimed",
                c.ready, pool.spec.replicas, c.idle, c.claimed
            ),
        ),
        Desired::new(
            "Progressing",
            starting > 0 || c.replicas != pool.spec.replicas,
            if starting > 0 {
                "PodsStarting"
            } else {
                "Stable"
            },
            format!("{starting} sandbox Pods starting"),
        ),
    ];
    let next_conditions =
        conditions::merge(&current.conditions, &desired, pool.metadata.generation, now);
    let changed = current.replicas != c.replicas
        || current.ready_replicas != c.ready
        || current.idle_replicas != c.idle
        || current.claimed_replicas != c.claimed
        || current.observed_generation != pool.metadata.generation
        || !conditions::equal_ignoring_time(&current.conditions, &next_conditions);
    if changed && ctx.leader.is_leader() {
        let body = json!({"status": {
            "observedGeneration": pool.metadata.generation,
            "replicas": c.replicas,
            "readyReplicas": c.ready,
            "idleReplicas": c.idle,
            "claimedReplicas": c.claimed,
            "conditions": next_conditions,
        }});
        let api: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &ns);
        ctx.wrote("SandboxPool/status");
        if let Err(e) = api.patch_status(&name, &pp, &Patch::Merge(&body)).await {
            tracing::debug!(pool = %key, error = %e, "pool status write failed; retrying");
            retry = true;
        }
    }
    ctx.metrics
        .reconcile_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    Ok(if failed {
        Action::requeue(Duration::from_secs(5))
    } else if retry {
        Action::requeue(Duration::from_millis(200))
    } else {
        Action::requeue(Duration::from_secs(300))
    })
}

fn json_patch(v: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(v).unwrap_or_else(|_| json_patch::Patch(Vec::new())))
}

/// Writes a claim's Bound status (only from Pending: the patch tests that it has no Pod).
async fn bind_claim(
    ctx: &Shared,
    ns: &str,
    claim: &str,
    pod: &str,
    ip: Option<String>,
    now: Timestamp,
) {
    let Some(c) = ctx
        .claims
        .state()
        .into_iter()
        .find(|c| c.name_any() == claim && c.namespace().as_deref() == Some(ns))
    else {
        return;
    };
    let api: Api<SandboxClaim> = Api::namespaced(ctx.client.clone(), ns);
    let uid = c.uid().unwrap_or_default();
    let seen = ctx
        .first_seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&uid)
        .or_else(|| c.creation_timestamp().map(|t| t.0))
        .unwrap_or(now);
    let wait = now.duration_since(seen).as_millis().max(0) as i64;
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
    let body = json!({"status": status});
    let pp = PatchParams {
        field_manager: Some(field_manager::SANDBOX.to_string()),
        ..PatchParams::default()
    };
    ctx.wrote("SandboxClaim/status");
    if let Err(e) = api.patch_status(claim, &pp, &Patch::Merge(&body)).await {
        tracing::warn!(%claim, error = %e, "claim status write failed; the next reconcile finishes it");
        return;
    }
    let regarding = c.object_ref(&());
    ctx.event(
        &regarding,
        false,
        "Bound",
        format!("bound to sandbox Pod {pod} after {wait} ms"),
    )
    .await;
}

/// Claims: a missing pool or env is reported (not retried in a loop), a lifetime ends the
/// claim, a bound Pod that disappeared fails it. Binding itself is the pool's job.
async fn reconcile_claim(
    claim: Arc<SandboxClaim>,
    ctx: Arc<Shared>,
) -> Result<Action, SandboxError> {
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
                    (
                        "PoolNotFound",
                        format!("SandboxPool {ns}/{} does not exist", r.name),
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
                        "EnvNotFound",
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
                None => return Ok(Action::await_change()),
            }
        }
        "Bound" => {
            let pod = status.pod_name.clone().unwrap_or_default();
            let alive = ctx
                .pods
                .get(&ObjectRef::new(&pod).within(&ns))
                .is_some_and(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.annotations()
                            .get(keys::CLAIM)
                            .is_some_and(|c| c.ends_with(&claim.uid().unwrap_or_default()))
                });
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
            .patch_status(&name, &pp, &Patch::Merge(&json!({"status": next})))
            .await
        {
            Ok(_) => {}
            Err(e) if conflict(&e) => return Ok(Action::requeue(Duration::from_millis(200))),
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
async fn reconcile_env(env: Arc<SandboxEnv>, ctx: Arc<EnvShared>) -> Result<Action, SandboxError> {
    if !ctx.shared.leader.is_leader() {
        return Ok(Action::await_change());
    }
    let ns = env.namespace().unwrap_or_default();
    let env_name = env.name_any();
    let api: Api<SandboxPool> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let owner = env.controller_owner_ref(&());
    let mut wanted: Vec<String> = Vec::new();
    let mut members = Vec::new();
    for cluster in &env.spec.clusters {
        for m in &cluster.members {
            let local = cluster.name == ctx.cluster_name;
            let pool_name = format!("{env_name}-{}", m.name);
            let pool = local
                .then(|| {
                    ctx.shared
                        .pools
                        .get(&ObjectRef::new(&pool_name).within(&ns))
                })
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
            wanted.push(pool_name.clone());
            let group = m.config.as_ref().and_then(|c| c.scaling_group.clone());
            let desired_spec = json!({
                "replicas": m.spec.replicas,
                "template": m.spec.template,
                "recyclePolicy": m.spec.recycle_policy,
                "scalingGroup": group,
            });
            let up_to_date = pool.as_ref().is_some_and(|p| {
                serde_json::to_value(&p.spec).ok().is_some_and(|cur| {
                    cur["template"] == desired_spec["template"]
                        && cur["replicas"] == desired_spec["replicas"]
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
            ctx.shared.wrote("SandboxPool");
            api.patch(
                &pool_name,
                &PatchParams::apply(field_manager::SANDBOX).force(),
                &Patch::Apply(&body),
            )
            .await?;
        }
    }
    // Pools of members that are gone.
    let uid = env.uid().unwrap_or_default();
    for p in ctx.shared.pools.state() {
        let ours = p.owner_references().iter().any(|o| o.uid == uid);
        if ours && p.namespace().as_deref() == Some(ns.as_str()) && !wanted.contains(&p.name_any())
        {
            ctx.shared.wrote("SandboxPool");
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
    let next = crate::api::sandbox::SandboxEnvStatus {
        observed_generation: env.metadata.generation,
        local_members: local,
        members,
        conditions: conditions::merge(
            &current.conditions,
            &[Desired::new(types::READY, true, "PoolsReconciled", msg)],
            env.metadata.generation,
            now,
        ),
    };
    if next != current {
        let envs: Api<SandboxEnv> = Api::namespaced(ctx.shared.client.clone(), &ns);
        ctx.shared.wrote("SandboxEnv/status");
        let pp = PatchParams {
            field_manager: Some(field_manager::MANAGER.to_string()),
            ..PatchParams::default()
        };
        envs.patch_status(&env_name, &pp, &Patch::Merge(&json!({"status": next})))
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

struct EnvShared {
    shared: Arc<Shared>,
    cluster_name: String,
}

fn error_policy<K>(_: Arc<K>, err: &SandboxError, ctx: Arc<Shared>) -> Action {
    on_error(err, &ctx)
}

fn env_error_policy(_: Arc<SandboxEnv>, err: &SandboxError, ctx: Arc<EnvShared>) -> Action {
    on_error(err, &ctx.shared)
}

fn on_error(err: &SandboxError, ctx: &Shared) -> Action {
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::manager::metrics::ErrorLabels {
            controller: CONTROLLER.to_string(),
            reason: match err {
                SandboxError::Conflict(_) => "Conflict".into(),
                SandboxError::Api(_) => "ApiError".into(),
            },
        })
        .inc();
    tracing::warn!(error = %err, "sandbox reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
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

async fn log_result<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) {
    if let Err(e) = r {
        tracing::warn!(error = %e, "sandbox controller");
    }
}

/// Runs the sandbox controllers until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let claim_ctl = Controller::new(
        Api::<SandboxClaim>::all(client.clone()),
        watcher::Config::default().page_size(500),
    );
    let pool_ctl = Controller::new(
        Api::<SandboxPool>::all(client.clone()),
        watcher::Config::default(),
    );
    let pools = pool_ctl.store();
    let (pool_tx, pool_rx) = cache::requests::<SandboxPool>();
    // A Pod change reconciles its pool; a claim change, every pool it may bind from.
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
        Api::all(client.clone()),
        watcher::Config::default().labels(keys::POOL).page_size(500),
        trim_pod,
        vec![pod_trigger],
    );
    let (claims, claim_drive) = cache::cache::<SandboxClaim>(
        Api::all(client.clone()),
        watcher::Config::default().page_size(500),
        |_| {},
        vec![claim_trigger],
    );
    let shared = Arc::new(Shared {
        client: client.clone(),
        pods: pods.clone(),
        claims: claims.clone(),
        pools: pools.clone(),
        in_flight: Mutex::new(InFlight::default()),
        first_seen: Mutex::new(HashMap::new()),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "moonin-sandbox".into(),
                instance: None,
            },
        ),
        metrics: ctx.metrics.clone(),
        leader: ctx.leadership.clone(),
        seq: std::sync::atomic::AtomicU64::new(0),
    });

    let pool_ctl = pool_ctl
        .reconcile_on(pool_rx)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_pool, error_policy, shared.clone())
        .for_each(log_result);

    let claim_ctl = claim_ctl
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile_claim, error_policy, shared.clone())
        .for_each(log_result);

    let env_shared = Arc::new(EnvShared {
        shared: shared.clone(),
        cluster_name: ctx.cluster_name.clone(),
    });
    let env_ctl = Controller::new(
        Api::<SandboxEnv>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<SandboxPool>::all(client.clone()),
        watcher::Config::default(),
    )
    .reconcile_all_on(ctx.leadership.acquisitions())
    .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
    .run(reconcile_env, env_error_policy, env_shared)
    .for_each(log_result);

    let ready = {
        let (pods, claims, pools) = (pods.clone(), claims.clone(), pools.clone());
        async move {
            let _ = pods.wait_until_ready().await;
            let _ = claims.wait_until_ready().await;
            let _ = pools.wait_until_ready().await;
            readiness.report_synced();
            tracing::info!("sandbox caches synced");
        }
    };
    let shutdown = ctx.shutdown.clone();
    tokio::select! {
        _ = futures::future::join(pod_drive, claim_drive) => {}
        _ = futures::future::join4(pool_ctl, claim_ctl, env_ctl, ready) => {}
        _ = shutdown.cancelled() => {}
    }
    Ok(())
}
