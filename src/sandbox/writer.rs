//! Where the sandbox reconcilers' writes go ([`Writer`]), how a write is guarded, and why a
//! reconcile stops early ([`SandboxError`]). Below the commits, which say what to write.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, Resource,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use serde_json::Value;

use crate::runtime::{cache::Echoes, events::Publisher, leader::Leadership, metrics::Metrics};

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "sandbox";

/// How soon an object is looked at again after a write lost a race.
pub const RETRY: Duration = Duration::from_millis(200);

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

/// Where the sandbox reconcilers' writes go: the client, the leader gate, the write
/// counter, the Events, and the echoes of status writes.
#[derive(Clone)]
pub struct Writer {
    /// The API client.
    pub client: Client,
    /// Publishes Events as `moonin-sandbox`.
    pub events: Publisher,
    /// Counts writes.
    pub metrics: Metrics,
    /// Only the leader writes.
    pub leader: Leadership,
    /// Status writes of the reconcilers to their own objects: their echo does not wake the
    /// object again.
    pub echoes: Echoes,
}

impl Writer {
    /// Whether this process may write now.
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    /// Counts a write of `kind`.
    pub fn wrote(&self, kind: &str) {
        self.metrics.wrote(CONTROLLER, kind);
    }

    /// Publishes an Event about `regarding`.
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: &str,
    ) {
        self.events
            .publish(regarding, warning, reason, None, note)
            .await;
    }

    /// The API of `K` in `ns`.
    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }
}

/// Patch parameters under `manager`.
pub fn params(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    }
}

/// A JSON Patch from its JSON form.
pub fn json_patch(v: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(v).unwrap_or_else(|_| json_patch::Patch(Vec::new())))
}

/// Delete preconditions: the object `uid` at `resource_version`, nothing newer.
pub fn guarded_delete(uid: &str, resource_version: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: Some(resource_version.to_string()),
        }),
        ..DeleteParams::default()
    }
}
