//! The names discovery publishes under, defined once: the controller's name (metrics and
//! logs) and the condition types and reasons of its kinds (`ClusterDiscovery`,
//! `NamespaceInventory`, `WorkloadRevision`).

/// The controller's name on the command line and in metrics.
pub const CONTROLLER: &str = "discovery";

/// Condition types of `ClusterDiscovery`.
pub mod condition_types {
    /// The API server answers.
    pub const API_REACHABLE: &str = "ApiReachable";
    /// Every watched kind has listed and every namespace's inventory is written.
    pub const INVENTORY_COMPLETE: &str = "InventoryComplete";
    /// Helm release Secrets can be read (or Helm discovery is off).
    pub const HELM_ACCESS: &str = "HelmAccess";
    /// The Secrets workloads refer to can be read (or Secret change tracking is off).
    pub const SECRET_ACCESS: &str = "SecretAccess";
    /// Some namespace's inventory was split into parts.
    pub const TRUNCATED: &str = "Truncated";
}

/// Condition reasons of discovery's kinds (and the reason of its reconcile errors).
pub mod condition_reasons {
    /// `Ready`: every namespace's inventory is written (on an inventory: it is current).
    pub const INVENTORIED: &str = "Inventoried";
    /// `Ready`: the first pass is still writing inventories.
    pub const INVENTORYING: &str = "Inventorying";
    /// `InventoryComplete` true; `Truncated` false (everything fits one object).
    pub const COMPLETE: &str = "Complete";
    /// `InventoryComplete`: not yet.
    pub const IN_PROGRESS: &str = "InProgress";
    /// `Truncated`: an inventory was split into parts.
    pub const SPLIT: &str = "Split";
    /// `HelmAccess`, `SecretAccess`: switched off in the spec.
    pub const DISABLED: &str = "Disabled";
    /// `HelmAccess`, `SecretAccess`: listing the Secrets is refused.
    pub const FORBIDDEN: &str = "Forbidden";
    /// `HelmAccess`, `SecretAccess`: the Secrets are read.
    pub const SECRETS_READABLE: &str = "SecretsReadable";
    /// `ApiReachable`.
    pub const REACHABLE: &str = "Reachable";
    /// `ApiReachable`: the heartbeat or `GET /version` failed.
    pub const UNREACHABLE: &str = "Unreachable";
    /// `Ready` of a WorkloadRevision.
    pub const RECORDED: &str = "Recorded";
    /// `Ready=False` of a WorkloadRevision that Moonin's discovery did not write: it is not
    /// part of the change log.
    pub const NOT_RECORDED: &str = "NotRecorded";
    /// `Ready=False`, `Stalled=True` of a ClusterDiscovery that is not the oldest: another
    /// one is in charge of the cluster.
    pub const NOT_IN_CHARGE: &str = "NotInCharge";
    /// `moonin_reconcile_errors_total`: a rebuild failed on an API error.
    pub const API_ERROR: &str = "ApiError";
}
