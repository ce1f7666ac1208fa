//! Commit: the writes of the sandbox reconcilers, their conflict handling, the status
//! patches and the Events (published only after the writes they report succeeded).
//!
//! Every write to an object another writer may change is guarded: a Pod patch tests the
//! resourceVersion it was decided on, a Pod delete carries UID and resourceVersion
//! preconditions, a claim's status names its resourceVersion. A write that loses a race
//! is retried from fresh caches, never forced. The autoscaler's own writes (marks, the
//! size, deletes of marked Pods) are in [`super::autoscaler::commit`].

use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{controller::Action, reflector::ObjectRef},
};
use serde_json::{Value, json};

use super::claim::{self, ClaimPlan};
use super::shared::Shared;
use super::writer::{RETRY, SandboxError, Writer, guarded_delete, json_patch, params};

use super::env::{EnvStatusPlan, PoolApply};
use super::load::{self, Now};
use super::memory::ClaimRef;
use super::pool::{self, Counts, PodOp, keys};
use crate::api::conditions::types;
use crate::api::field_manager;
use crate::api::sandbox::{
    ClaimHistory, PoolAutoScalingStatus, SandboxClaim, SandboxEnv, SandboxPool, reasons,
};
use crate::runtime::errors::{brief, is_conflict};

/// A JSON merge patch that turns `old` into `new`: what `new` lacks is set to null.
fn merge_nulls(old: &Value, new: &mut Value) {
    if let (Some(o), Some(n)) = (old.as_object(), new.as_object_mut()) {
        for (k, v) in o {
            match n.get_mut(k) {
                None => {
                    n.insert(k.clone(), Value::Null);
                }
                Some(nv) => merge_nulls(v, nv),
            }
        }
    }
}

/// What the Pod writes of one pool plan came to.
#[derive(Debug, Default)]
pub struct PodWrites {
    /// A write lost a race or was refused: look again soon.
    pub retry: bool,
    /// Why the API server refused a Pod create (this round, or a backoff still waited out).
    pub create_error: Option<String>,
    /// When to try a create again.
    pub create_retry: Option<Duration>,
    /// When to try the binds, releases and deletes again after a refusal.
    pub write_retry: Option<Duration>,
    /// Leadership was lost midway: nothing more was written.
    pub lost_leadership: bool,
}

/// How many of one Pool's Pod writes are in flight at once. Each plan op touches its own
/// Pod (and at most its own claim), so they need no order among themselves.
const POD_WRITERS: usize = 16;

/// Performs a pool plan's Pod writes, concurrently: binds, releases and deletes at once,
/// creates beside them. Refused creates (a template the API server rejects, a quota, a
/// terminating namespace) back off per Pool: while a refusal is waited out no create is
/// sent, and the first create of a round goes alone, so one refusal stands for the rest.
/// Refused binds, releases and deletes (an admission policy or webhook on Pods) back off
/// per Pool too, each counted refusal logged and published as a `PodWriteRefused` Event;
/// a write that lost a race is no refusal.
pub async fn pod_ops(
    ctx: &Shared,
    pool: &SandboxPool,
    key: &str,
    ops: &[PodOp],
    now: Now,
) -> PodWrites {
    let backoff = &ctx.memory.refused_creates;
    let generation = pool.metadata.generation;
    let (creates, others): (Vec<&PodOp>, Vec<&PodOp>) =
        ops.iter().partition(|o| matches!(o, PodOp::Create(_)));
    let waiting = if creates.is_empty() {
        // Nothing to create: whatever was refused is no longer asked for.
        backoff.succeeded(key);
        None
    } else {
        backoff.waiting(key, generation, now.mono)
    };
    let writer = PodWriter::new(ctx, pool, key, now);
    let names: Vec<&str> = match waiting {
        Some(_) => Vec::new(),
        None => creates
            .iter()
            .filter_map(|o| match o {
                PodOp::Create(name) => Some(name.as_str()),
                _ => None,
            })
            .collect(),
    };
    // Binds, releases and deletes wait out a refusal of theirs as creates do.
    let refused = &ctx.memory.refused_writes;
    let held = if others.is_empty() {
        refused.succeeded(key);
        None
    } else {
        refused.waiting(key, generation, now.mono)
    };
    let others = if held.is_some() { Vec::new() } else { others };
    let (done, made) = futures::join!(writer.each(&others), writer.creates(&names));
    let mut writes = PodWrites {
        retry: done.retry,
        lost_leadership: done.lost_leadership || made.lost_leadership,
        create_error: waiting.as_ref().map(|w| w.message.clone()),
        create_retry: waiting.as_ref().map(|w| w.remaining),
        write_retry: held.map(|w| w.remaining),
    };
    match done.refused {
        Some(message) => {
            let step = refused.failed(key, generation, now.mono, &message);
            if step.counted {
                tracing::warn!(pool = %key, error = %message, retry_in_seconds = step.wait.as_secs(), "the API server refused a sandbox Pod write");
                let note = format!("{message}; retrying in {} s", step.wait.as_secs());
                let pool_ref = pool.object_ref(&());
                ctx.writer
                    .event(&pool_ref, true, reasons::POD_WRITE_REFUSED, &note)
                    .await;
            }
            writes.write_retry = Some(step.wait);
        }
        None if !others.is_empty() && !done.retry => refused.succeeded(key),
        None => {}
    }
    match made.refused {
        Some(message) => {
            let step = backoff.failed(key, generation, now.mono, &message);
            if step.counted {
                tracing::warn!(pool = %key, error = %message, retry_in_seconds = step.wait.as_secs(), "the API server refused a sandbox Pod");
            }
            writes.create_retry = Some(step.wait);
            writes.create_error = Some(message);
        }
        None if made.created => backoff.succeeded(key),
        None => {}
    }
    writes
}

/// What a batch of Pod writes came to.
#[derive(Debug, Default)]
struct Batch {
    /// A write lost a race or was refused.
    retry: bool,
    /// Leadership was lost before a write was sent.
    lost_leadership: bool,
    /// A Pod was created.
    created: bool,
    /// The API server's message for a refused write (the first of the batch).
    refused: Option<String>,
}

/// Whether a guarded write went through (false: it lost a race; retry soon from fresh
/// caches), or the API server refused it: what was refused, and its message.
type Written = Result<bool, String>;

/// The Pod writes of one Pool reconcile. Each is one guarded write; a method answers
/// whether it went through (false: retry soon).
struct PodWriter<'a> {
    ctx: &'a Shared,
    pool: &'a SandboxPool,
    /// The Pool's `ns/name`.
    key: &'a str,
    ns: String,
    pods: Api<Pod>,
    now: Now,
}

impl<'a> PodWriter<'a> {
    fn new(ctx: &'a Shared, pool: &'a SandboxPool, key: &'a str, now: Now) -> Self {
        let ns = pool.namespace().unwrap_or_default();
        let pods = ctx.writer.api(&ns);
        Self {
            ctx,
            pool,
            key,
            ns,
            pods,
            now,
        }
    }

    /// Sends the binds, releases and deletes of a plan, [`POD_WRITERS`] at a time. A write
    /// is sent only while this replica leads.
    async fn each(&self, ops: &[&PodOp]) -> Batch {
        let sends: Vec<_> = ops.iter().map(|op| self.apply(op)).collect();
        let results: Vec<Option<Written>> = futures::stream::iter(sends)
            .buffer_unordered(POD_WRITERS)
            .collect()
            .await;
        Batch {
            retry: results
                .iter()
                .any(|r| matches!(r, Some(Ok(false) | Err(_)))),
            lost_leadership: results.iter().any(Option::is_none),
            refused: results.into_iter().find_map(|r| r?.err()),
            ..Batch::default()
        }
    }

    /// One bind, release or delete; whether it went through (none: not sent, this replica
    /// no longer leads).
    async fn apply(&self, op: &PodOp) -> Option<Written> {
        if !self.ctx.writer.is_leader() {
            return None;
        }
        let done = match op {
            // Creates go through [`Self::creates`].
            PodOp::Create(_) => Ok(true),
            PodOp::Bind {
                pod,
                resource_version,
                ip,
                claim,
                claim_uid,
            } => {
                let held = (claim.clone(), claim_uid.clone());
                self.bind(pod, resource_version, ip, held).await
            }
            PodOp::FinishBind {
                pod,
                ip,
                claim,
                claim_uid,
            } => {
                let held = (claim.clone(), claim_uid.clone());
                self.bind_claim(&held, pod, ip.clone()).await
            }
            PodOp::Unclaim {
                pod,
                resource_version,
            } => self.unclaim(pod, resource_version).await,
            PodOp::Delete {
                pod,
                uid,
                resource_version,
            } => self.delete(pod, uid, resource_version).await,
        };
        Some(done)
    }

    /// Creates the Pods `names`: the first alone, the rest [`POD_WRITERS`] at a time once
    /// it went through. The first refusal's message is the round's.
    async fn creates(&self, names: &[&str]) -> Batch {
        let mut batch = Batch::default();
        let Some((first, rest)) = names.split_first() else {
            return batch;
        };
        for chunk in [std::slice::from_ref(first), rest] {
            if batch.refused.is_some() || chunk.is_empty() {
                break;
            }
            let sends: Vec<_> = chunk.iter().map(|name| self.create(name)).collect();
            let results: Vec<Option<Result<bool, String>>> = futures::stream::iter(sends)
                .buffer_unordered(POD_WRITERS)
                .collect()
                .await;
            for result in results {
                match result {
                    None => batch.lost_leadership = true,
                    Some(Ok(made)) => batch.created |= made,
                    Some(Err(message)) => {
                        batch.refused.get_or_insert(message);
                    }
                }
            }
        }
        batch
    }

    /// Creates the Pod `name` from the Pool's template, counting it in flight until the
    /// cache shows it. Whether it was created (a name taken already is no error); the API
    /// server's message when it refused; none when this replica no longer leads.
    async fn create(&self, name: &str) -> Option<Result<bool, String>> {
        if !self.ctx.writer.is_leader() {
            return None;
        }
        let in_flight = &self.ctx.memory.in_flight;
        in_flight.creating(self.key, name, self.now.mono);
        let params = PostParams {
            field_manager: Some(field_manager::SANDBOX.to_string()),
            ..PostParams::default()
        };
        self.ctx.writer.wrote("Pod");
        let pod = new_pod(self.pool, name, self.now.wall);
        Some(match self.pods.create(&params, &pod).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => {
                in_flight.create_refused(self.key, name);
                // The generated name differs at every attempt: it stays out of the message,
                // so the status does not change from one refusal to the next.
                Err(pool::without_name(&brief(&e), name))
            }
        })
    }

    /// A bind, in two guarded writes: the Pod moves from idle to claimed (its
    /// resourceVersion tested, so two claims never get one Pod), then the claim's status
    /// names the Pod.
    async fn bind(&self, pod: &str, resource_version: &str, ip: &str, held: ClaimRef) -> Written {
        let (claim, claim_uid) = &held;
        let patch = json_patch(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "add", "path": "/metadata/labels/moonin.io~1state", "value": keys::CLAIMED},
            {"op": "add", "path": "/metadata/annotations/moonin.io~1claim", "value": format!("{claim}/{claim_uid}")},
            {"op": "add", "path": "/metadata/annotations/moonin.io~1state-since", "value": self.now.wall.to_string()},
        ]));
        self.ctx.writer.wrote("Pod");
        match self
            .pods
            .patch(pod, &params(field_manager::SANDBOX), &patch)
            .await
        {
            Ok(_) => {
                let in_flight = &self.ctx.memory.in_flight;
                in_flight.pod_bound(self.key, pod, held.clone(), self.now.mono);
                self.bind_claim(&held, pod, Some(ip.to_string())).await
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(format!("binding Pod {pod} to claim {claim}: {}", brief(&e))),
        }
    }

    /// Writes a claim's status as bound to `pod`, guarded by the claim's resourceVersion so
    /// a claim is never moved from one Pod to another, and remembers the write until the
    /// claim cache shows it. Not when the claim is bound already: another Pool of its
    /// Env's group, planning from a cache that still showed it Pending, may have bound it
    /// first (the guard alone would pass if this Pool's cache showed that bind already);
    /// the Pod this Pool marked for it is then freed at its next pass.
    async fn bind_claim(&self, held: &ClaimRef, pod: &str, ip: Option<String>) -> Written {
        let (ctx, ns, now) = (self.ctx, self.ns.as_str(), self.now);
        let (claim, uid) = (held.0.as_str(), held.1.as_str());
        // The freshest cached claim: its resourceVersion guards the write, and the claim
        // reconciler may have written its status since Load.
        let Some(c) = ctx.stores.claims.get(&ObjectRef::new(claim).within(ns)) else {
            // Deleted meanwhile: the pool releases the Pod.
            return Ok(true);
        };
        if c.uid().as_deref() != Some(uid) {
            // Deleted and made again under its name: the pool releases the Pod.
            return Ok(true);
        }
        if !load::claim_view(&c).pending() {
            return Ok(false);
        }
        let seen = ctx.memory.first_seen.take(uid);
        let start = pool::wait_start(seen, c.creation_timestamp().map(|t| t.0), now.wall);
        let wait = now.wall.duration_since(start).as_millis().max(0) as i64;
        let current = c.status.clone().unwrap_or_default();
        let status = claim::bound_status(&current, c.metadata.generation, pod, ip, wait, now.wall);
        let body = json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "status": status,
        });
        ctx.writer.wrote("SandboxClaim/status");
        let api = ctx.writer.api::<SandboxClaim>(ns);
        match api
            .patch_status(claim, &params(field_manager::SANDBOX), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => return Ok(false),
            // The Pod is claimed: the next reconcile finishes the bind (`FinishBind`).
            Err(e) => return Err(format!("writing claim {claim}'s status: {}", brief(&e))),
        }
        ctx.memory
            .in_flight
            .claim_bound(self.key, uid, pod, now.mono);
        let note = format!("bound to sandbox Pod {pod} after {wait} ms");
        ctx.writer
            .event(&c.object_ref(&()), false, "Bound", &note)
            .await;
        Ok(true)
    }

    /// Returns a claimed Pod to idle (guarded by its resourceVersion).
    async fn unclaim(&self, pod: &str, resource_version: &str) -> Written {
        let patch = json_patch(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "add", "path": "/metadata/labels/moonin.io~1state", "value": keys::IDLE},
            {"op": "remove", "path": "/metadata/annotations/moonin.io~1claim"},
            {"op": "add", "path": "/metadata/annotations/moonin.io~1state-since", "value": self.now.wall.to_string()},
        ]));
        self.ctx.writer.wrote("Pod");
        let result = self
            .pods
            .patch(pod, &params(field_manager::SANDBOX), &patch)
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(format!("returning Pod {pod} to idle: {}", brief(&e))),
        }
    }

    /// Deletes a Pod with UID and resourceVersion preconditions.
    async fn delete(&self, pod: &str, uid: &str, resource_version: &str) -> Written {
        self.ctx.writer.wrote("Pod");
        match self
            .pods
            .delete(pod, &guarded_delete(uid, resource_version))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) if is_conflict(&e) => return Ok(false),
            Err(e) => return Err(format!("deleting Pod {pod}: {}", brief(&e))),
        }
        let in_flight = &self.ctx.memory.in_flight;
        in_flight.deleted(self.key, pod, uid, self.now.mono);
        Ok(true)
    }
}

/// A new idle sandbox Pod of `pool`, owned by it.
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

/// The autoscaler's part of a Pool's status write: its next `status.autoScaling`, and the
/// Pool's resourceVersion after its size write (the guard).
pub struct AutoScalingWrite<'a> {
    /// The decision's `status.autoScaling`.
    pub status: &'a PoolAutoScalingStatus,
    /// The decision's `status.claimHistory`, when it changed (once per slot at most).
    pub claim_history: Option<&'a ClaimHistory>,
    /// The Pool's resourceVersion.
    pub resource_version: Option<String>,
}

/// Writes a Pool's status: the counts, the conditions, and the autoscaler's part (guarded
/// by the Pool's resourceVersion; what the decision dropped is removed, as a merge patch
/// keeps absent fields). Whether it was written.
pub async fn pool_status(
    ctx: &Shared,
    pool: &SandboxPool,
    counts: Counts,
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    auto: Option<AutoScalingWrite<'_>>,
) -> bool {
    let mut body = json!({"status": {
        "observedGeneration": pool.metadata.generation,
        "replicas": counts.replicas,
        "readyReplicas": counts.ready,
        "idleReplicas": counts.idle,
        "claimedReplicas": counts.claimed,
        "conditions": conditions,
    }});
    if let Some(a) = auto {
        let mut next = serde_json::to_value(a.status).unwrap_or_default();
        let current = pool.status.as_ref().and_then(|s| s.auto_scaling.as_ref());
        let old = serde_json::to_value(current).unwrap_or_default();
        merge_nulls(&old, &mut next);
        body["status"]["autoScaling"] = next;
        if let Some(history) = a.claim_history {
            body["status"]["claimHistory"] = serde_json::to_value(history).unwrap_or_default();
        }
        body["metadata"] = json!({"resourceVersion": a.resource_version});
    } else if pool
        .status
        .as_ref()
        .is_some_and(|s| s.auto_scaling.is_some())
    {
        // No longer autoscaled: what the autoscaler published goes.
        body["status"]["autoScaling"] = serde_json::Value::Null;
        body["status"]["claimHistory"] = serde_json::Value::Null;
    }
    let ns = pool.namespace().unwrap_or_default();
    ctx.writer.wrote("SandboxPool/status");
    let api = ctx.writer.api::<SandboxPool>(&ns);
    let written = api
        .patch_status(
            &pool.name_any(),
            &params(field_manager::SANDBOX),
            &Patch::Merge(&body),
        )
        .await;
    match written {
        Ok(written) => {
            ctx.writer.echoes.expect(&written);
            true
        }
        Err(e) => {
            tracing::debug!(pool = %super::load::pool_key(pool), error = %brief(&e), "pool status write failed; retrying");
            false
        }
    }
}

/// Publishes `PodCreateFailed` when a refusal is new to the Pool's status.
pub async fn pod_create_failed(writer: &Writer, pool: &SandboxPool, message: &str) {
    let current = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if crate::api::conditions::has_reason(current, types::READY, reasons::POD_CREATE_FAILED) {
        return;
    }
    let note = format!("creating a sandbox Pod from spec.template failed: {message}");
    writer
        .event(
            &pool.object_ref(&()),
            true,
            reasons::POD_CREATE_FAILED,
            &note,
        )
        .await;
}

/// Writes a claim's status (guarded: the pool may bind the claim meanwhile), then its
/// Event. The reconcile's answer.
pub async fn claim(
    writer: &Writer,
    claim: &SandboxClaim,
    plan: ClaimPlan,
) -> Result<Action, SandboxError> {
    let requeue = plan
        .requeue
        .map_or_else(Action::await_change, Action::requeue);
    let Some(status) = plan.status else {
        return Ok(requeue);
    };
    let ns = claim.namespace().unwrap_or_default();
    let body = json!({
        "metadata": {"resourceVersion": claim.resource_version()},
        "status": status,
    });
    writer.wrote("SandboxClaim/status");
    let api = writer.api::<SandboxClaim>(&ns);
    match api
        .patch_status(
            &claim.name_any(),
            &params(field_manager::SANDBOX),
            &Patch::Merge(&body),
        )
        .await
    {
        Ok(written) => writer.echoes.expect(&written),
        Err(e) if is_conflict(&e) => return Ok(Action::requeue(RETRY)),
        Err(e) => return Err(e.into()),
    }
    if let Some((warning, reason, note)) = plan.event {
        writer
            .event(&claim.object_ref(&()), warning, reason, &note)
            .await;
    }
    Ok(requeue)
}

/// Applies the Env's Pools (the autoscaler's hand-over first, then this controller's
/// apply). A conflict stops the reconcile; a refusal (an invalid Pool name or template, an
/// admission policy) is returned, and the other members go on.
pub async fn apply_pools(
    writer: &Writer,
    ns: &str,
    applies: &[PoolApply],
) -> Result<Vec<String>, SandboxError> {
    let api = writer.api::<SandboxPool>(ns);
    let mut refused = Vec::new();
    for a in applies {
        let applied = async {
            if let Some(hand_over) = &a.hand_over {
                writer.wrote("SandboxPool");
                api.patch(
                    &a.pool,
                    &PatchParams::apply(field_manager::SANDBOX_AUTOSCALER).force(),
                    &Patch::Apply(hand_over),
                )
                .await?;
            }
            writer.wrote("SandboxPool");
            api.patch(
                &a.pool,
                &PatchParams::apply(field_manager::SANDBOX).force(),
                &Patch::Apply(&a.body),
            )
            .await
        };
        match applied.await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {
                return Err(SandboxError::Conflict(format!(
                    "SandboxPool {ns}/{}",
                    a.pool
                )));
            }
            Err(e) => refused.push(format!("SandboxPool {}: {}", a.pool, brief(&e))),
        }
    }
    Ok(refused)
}

/// Deletes the Pools of members that are gone.
pub async fn delete_pools(writer: &Writer, ns: &str, pools: &[String]) -> Result<(), SandboxError> {
    let api = writer.api::<SandboxPool>(ns);
    for p in pools {
        writer.wrote("SandboxPool");
        match api.delete(p, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes an Env's status when it changed, then its Warning Event.
pub async fn env_status(
    writer: &Writer,
    env: &SandboxEnv,
    plan: &EnvStatusPlan,
) -> Result<(), SandboxError> {
    let Some(status) = &plan.status else {
        return Ok(());
    };
    let ns = env.namespace().unwrap_or_default();
    writer.wrote("SandboxEnv/status");
    let written = writer
        .api::<SandboxEnv>(&ns)
        .patch_status(
            &env.name_any(),
            &params(field_manager::MANAGER),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    writer.echoes.expect(&written);
    if let Some(note) = &plan.event {
        writer
            .event(&env.object_ref(&()), true, reasons::POOL_APPLY_FAILED, note)
            .await;
    }
    Ok(())
}
