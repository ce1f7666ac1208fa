//! The Pool reconciler: Load the Pool's Pods and claims (and, in a scaling group, the
//! autoscaler's snapshot); the autoscaler decides and commits its size first; the pool plan
//! then works to that size (binds, releases, creates, deletes); one status write reports
//! both; the Events follow it.

use std::time::Duration;

use kube::{ResourceExt, runtime::controller::Action};

use super::autoscaler::{self, Decision, Snapshot, commit::Resized};
use super::commit::{self, AutoScalingWrite, PodWrites};
use super::load::{self, Now};
use super::pool::{self, PoolPlan};
use super::shared::Shared;
use super::writer::{RETRY, SandboxError};
use crate::api::conditions;
use crate::api::sandbox::SandboxPool;

/// How often a Pool is looked at when nothing else wakes it.
const RESYNC: Duration = autoscaler::RESYNC.unsigned_abs();

/// The soonest a Pool is decided again at the autoscaler's request.
const SOONEST: Duration = Duration::from_millis(100);

/// What the autoscaler decided on and committed this reconcile.
struct Autoscaled<'a> {
    snap: &'a Snapshot,
    decision: Decision,
    resized: Resized,
}

/// One reconcile of a Pool.
pub async fn reconcile(pool: &SandboxPool, ctx: &Shared) -> Result<Action, SandboxError> {
    // One autoscaler decision at a time per scaling group: the turn is taken before Load
    // (the siblings' sizes are read there) and held until this Pool's size is written.
    let turn = match load::group_key(&ctx.stores, pool) {
        Some(group) => Some(ctx.memory.groups.lock(&group).await),
        None => None,
    };
    let load = load::pool(&ctx.stores, &ctx.memory, pool);
    // Claims that reported this Pool (or its Env's group) missing say otherwise now.
    for claim in &load.waiting_claims {
        let _ = ctx.claim_requests.unbounded_send(claim.clone());
    }
    let mut views = load.views.clone();
    let autoscaled = match &load.autoscaler {
        None => None,
        Some(snap) => {
            let decision = autoscaler::decide(snap, load.now.wall);
            match autoscaler::commit::resize(ctx, pool, snap, &decision, &mut views, load.now)
                .await?
            {
                Some(resized) => Some(Autoscaled {
                    snap,
                    decision,
                    resized,
                }),
                // A mark or the size write lost a race: decide again at once.
                None => return Ok(Action::requeue(Duration::ZERO)),
            }
        }
    };
    drop(turn);
    let replicas = autoscaled
        .as_ref()
        .map_or(pool.spec.replicas, |a| a.resized.replicas);
    let name = pool.name_any();
    let plan = pool::plan(&load.plan_input(pool, replicas, views), || {
        ctx.memory.names.next(&name, load.now.wall)
    });
    let writes = commit::pod_ops(ctx, pool, &load.key, &plan.ops, load.now).await;
    if writes.lost_leadership {
        return Ok(Action::await_change());
    }
    Ok(report(
        ctx,
        pool,
        load.now,
        replicas,
        &plan,
        &writes,
        autoscaled.as_ref(),
    )
    .await)
}

/// The status write and the Events once the Pool's writes are done; when to look again.
async fn report(
    ctx: &Shared,
    pool: &SandboxPool,
    now: Now,
    replicas: i32,
    plan: &PoolPlan,
    writes: &PodWrites,
    autoscaled: Option<&Autoscaled<'_>>,
) -> Action {
    let current = pool.status.clone().unwrap_or_default();
    let generation = pool.metadata.generation;
    let create_error = writes.create_error.as_deref();
    let auto_conditions = autoscaled.map_or(&[][..], |a| a.decision.conditions.as_slice());
    let desired = pool::status_conditions(plan.counts, replicas, create_error, auto_conditions);
    let mut next = conditions::merge(&current.conditions, &desired, generation, now.wall);
    // A Pool the autoscaler no longer sizes (its member left its scaling group) keeps none of
    // its conditions, nor its status (`autoScaling` is removed below).
    if autoscaled.is_none() {
        next.retain(|c| !autoscaler::condition_types::ALL.contains(&c.type_.as_str()));
    }
    let auto_status = autoscaled.map(|a| &a.decision.status);
    let history = autoscaled.and_then(|a| a.decision.claim_history.as_ref());
    let changed = pool::status_changed(&current, generation, plan.counts, &next, auto_status)
        || history.is_some();
    let mut retry = writes.retry || autoscaled.is_some_and(|a| a.resized.retry);
    // Counts and conditions alone wait out the interval since the last status write; the
    // autoscaler's part, a new generation and a refused create are written at once.
    let key = load::pool_key(pool);
    let urgent = current.auto_scaling.as_ref() != auto_status
        || autoscaled.is_some_and(|a| !a.decision.events.is_empty())
        || history.is_some()
        || current.observed_generation != generation
        || create_error.is_some();
    let deferred = (changed && !urgent)
        .then(|| ctx.memory.status_writes.wait(&key, now.mono))
        .flatten();
    let written = if !changed {
        true
    } else if deferred.is_some() {
        // Nothing of the autoscaler's is waiting to be published.
        true
    } else if ctx.writer.is_leader() {
        let auto = autoscaled.map(|a| AutoScalingWrite {
            status: &a.decision.status,
            claim_history: history,
            resource_version: a.resized.resource_version.clone(),
        });
        let ok = commit::pool_status(ctx, pool, plan.counts, &next, auto).await;
        if ok {
            ctx.memory.status_writes.wrote(&key, now.mono);
        }
        retry |= !ok;
        ok
    } else {
        false
    };
    if let Some(message) = create_error
        && written
    {
        commit::pod_create_failed(&ctx.writer, pool, message).await;
    }
    let mut next_look = deferred.map_or(RESYNC, |d| d.max(SOONEST));
    if let Some(a) = autoscaled
        && written
    {
        autoscaler::commit::published(ctx, pool, a.snap, &a.decision).await;
        next_look = Duration::try_from(a.decision.requeue_at.duration_since(now.wall))
            .unwrap_or(Duration::ZERO)
            .clamp(SOONEST, next_look);
    }
    // A refusal waits out its backoff; anything else that must be tried again, a moment.
    let refusals = [writes.create_retry, writes.write_retry];
    let backoff = refusals.into_iter().flatten().min();
    match backoff {
        Some(wait) if writes.write_retry.is_some() => Action::requeue(wait.min(next_look)),
        _ if retry => Action::requeue(RETRY),
        _ => Action::requeue(backoff.map_or(next_look, |r| r.min(next_look))),
    }
}
