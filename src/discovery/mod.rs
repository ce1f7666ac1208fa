//! Discovery: the cluster's inventory and change log as Kubernetes objects
//! (`ClusterDiscovery`, `NamespaceInventory`, `WorkloadRevision`).
//!
//! Load → Decide → Commit, like the other controllers. The watches feed synchronous
//! indexes of small projections ([`index`], [`watch`], [`view`], [`stores`]) and mark what
//! changed ([`dirty`]); the controller ([`controller`]) rebuilds it ([`rebuild`]): the
//! revision records of changed Deployments ([`record`], deciding with [`revision`], and
//! following each rollout to its outcome with [`rollout`]), each changed namespace's
//! inventory ([`namespace`], with [`inventory`], [`signals`], the [`suspect`] change of a
//! failing workload, the autoscaling [`policy`], the Services, Ingresses and NetworkPolicies
//! of [`network`], the RBAC summary of [`rbac`] and the autoscalers' replica [`history`]) and the cluster status ([`status`], with
//! [`cluster`]), writing only what differs; the leader renews a heartbeat Lease
//! ([`heartbeat`]). Helm release Secrets are watched metadata-only and decoded one at a time
//! ([`helm_secrets`]) by the sanitiser ([`helm`]), and never kept.

pub mod baselines;
pub mod cluster;
pub mod config;
pub mod connections;
pub mod controller;
pub mod dirty;
pub mod errors;
pub mod heartbeat;
pub mod helm;
pub mod helm_secrets;
pub mod history;
pub mod index;
pub mod inventory;
pub mod names;
pub mod namespace;
pub mod network;
pub mod opt_in;
pub mod parts;
pub mod policy;
pub mod progress;
pub mod rbac;
pub mod rebuild;
pub mod record;
pub mod revision;
pub mod rollout;
pub mod shared;
pub mod signals;
pub mod snapshot;
pub mod status;
pub mod stores;
pub mod suspect;
pub mod view;
pub mod watch;
