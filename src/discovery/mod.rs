//! Discovery: the cluster's inventory and change log as Kubernetes objects
//! (`ClusterDiscovery`, `NamespaceInventory`, `WorkloadRevision`).
//!
//! For now this holds only the pure Helm release sanitiser (`helm`); the discovery
//! controller (watches, inventory building, revision records) is built on top of it later.

pub mod helm;
