//! The Claim reconciler: Load what the claim's reference finds (Pending) or whether its Pod
//! still holds it (Bound), decide ([`claim::decide`]), write its status and Event. Binding
//! itself is the Pool reconciler's.

use kube::{ResourceExt, runtime::controller::Action};

use super::claim::{self, Found};
use super::commit;
use super::load;
use super::shared::Shared;
use super::writer::SandboxError;
use crate::api::sandbox::SandboxClaim;

/// One reconcile of a claim.
pub async fn reconcile(claim: &SandboxClaim, ctx: &Shared) -> Result<Action, SandboxError> {
    let (mut snap, now) = load::claim(&ctx.stores, &ctx.writer.client, claim).await;
    match &mut snap.found {
        // Its wait is counted from this first sighting (creation times have 1 s resolution).
        Found::Pending(_) => ctx
            .memory
            .first_seen
            .saw(&claim.uid().unwrap_or_default(), now.wall),
        // A process that lost the lease while Load asked the API server leaves the verdict
        // on the Pod to the new leader.
        Found::Bound { pod_alive } => *pod_alive |= !ctx.writer.is_leader(),
        Found::Settled => {}
    }
    let plan = claim::decide(&snap, now.wall);
    commit::claim(&ctx.writer, claim, plan).await
}
