//! The Env reconciler: Load the Pools of this cluster's members, decide ([`env::decide`])
//! which to apply and which to delete, write them, then the Env's status (every member and
//! where it lives). A Pool the API server refuses stalls the Env on its own backoff; the
//! other members go on.

use std::{sync::Arc, time::Duration};

use kube::{ResourceExt, runtime::controller::Action};

use super::commit;
use super::env;
use super::load;
use super::shared::Shared;
use super::writer::SandboxError;
use crate::api::sandbox::SandboxEnv;

/// How often an Env is looked at when nothing else wakes it.
const RESYNC: Duration = super::autoscaler::RESYNC.unsigned_abs();

/// One reconcile of an Env. It counts its own refusals on the Env's backoff.
pub async fn reconcile(env: Arc<SandboxEnv>, ctx: &Shared) -> Result<Action, SandboxError> {
    let client = &ctx.writer.client;
    let (snap, now) = load::env(&ctx.stores, client, env.clone(), &ctx.cluster_name).await?;
    let plan = env::decide(&snap);
    let ns = env.namespace().unwrap_or_default();
    let refused = commit::apply_pools(&ctx.writer, &ns, &plan.applies).await?;
    commit::delete_pools(&ctx.writer, &ns, &plan.deletes).await?;
    let status = env::status(&snap, plan.members, &refused, now.wall);
    commit::env_status(&ctx.writer, &env, &status).await?;
    let key = crate::runtime::reference(env.as_ref());
    let Some(refusal) = status.refusal else {
        ctx.memory.refusals.succeeded(&key);
        return Ok(Action::requeue(RESYNC));
    };
    // Refused again on the same spec: retry on this Env's backoff.
    let step = ctx
        .memory
        .refusals
        .failed(&key, env.metadata.generation, now.mono, &refusal);
    if step.counted {
        tracing::warn!(
            object = %key,
            error = %refusal,
            retry_in_seconds = step.wait.as_secs(),
            "the API server refused a SandboxPool"
        );
    }
    Ok(Action::requeue(step.wait))
}
