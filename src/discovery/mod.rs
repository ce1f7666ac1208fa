//! Discovery: the cluster's inventory and change log as Kubernetes objects
//! (`ClusterDiscovery`, `NamespaceInventory`, `WorkloadRevision`).
//!
//! Load → Decide → Commit, like the other controllers: the watches keep small projections
//! ([`view`]) in synchronous indexes ([`index`], driven by [`watch`]); pure functions turn
//! them into the cluster status ([`cluster`]), each namespace's inventory and its error
//! signals ([`inventory`], [`signals`]) and the change log ([`revision`]); the controller
//! writes only what changed. Helm release Secrets are
//! decoded one at a time by the sanitiser ([`helm`]) and never kept.

pub mod cluster;
pub mod controller;
pub mod helm;
pub mod index;
pub mod inventory;
pub mod revision;
pub mod signals;
pub mod view;
pub mod watch;
