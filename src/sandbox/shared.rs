//! What the three sandbox reconcilers share — the caches, what the process remembers, the
//! writer — kept apart from the wiring that builds it.

use std::sync::atomic::AtomicBool;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use super::{load::Stores, memory::Memory, writer::Writer};
use crate::api::sandbox::SandboxClaim;

/// What the three reconcilers share.
pub struct Shared {
    /// The caches they load from.
    pub stores: Stores,
    /// What the process remembers between reconciles.
    pub memory: Memory,
    /// Where their writes go.
    pub writer: Writer,
    /// Every cache has listed once.
    pub synced: AtomicBool,
    /// Asks the claim controller to look at a claim again (a Pool it waited for appeared).
    pub claim_requests: UnboundedSender<ObjectRef<SandboxClaim>>,
    /// The cluster this manager runs in (`--cluster-name`): an Env materialises its members.
    pub cluster_name: String,
}
