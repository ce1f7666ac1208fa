//! Warm sandbox pools: `SandboxEnv`, `SandboxPool`, `SandboxClaim` (the README's "Sandbox
//! pools").
//!
//! Three controllers, one reconciler per kind, each one Load → Decide → Commit:
//!
//! | step | Pool | Claim | Env |
//! |---|---|---|---|
//! | reconcile | `pool_reconciler.rs` | `claim_reconciler.rs` | `env_reconciler.rs` |
//! | Load | `load.rs` (+ `admission.rs`, the quota probe) | `load.rs` | `load.rs` |
//! | Decide (pure) | `pool.rs`, `autoscaler/decide.rs` | `claim.rs` | `env.rs` |
//! | Commit | `commit.rs`, `autoscaler/commit.rs` | `commit.rs` | `commit.rs` |
//!
//! - `controller.rs`: wiring only: the caches and the triggers between them, the three
//!   controllers, their error policy and the leader gate.
//! - `load.rs`: caches → plain-data snapshots, with a direct read only where a lagging cache
//!   would mislead; the only place the clock is read ([`load::Now`], passed down).
//! - `pool.rs`: the pool plan (Pods to create and delete, FIFO binding, releases) and the
//!   Pool's status; `claim.rs`, `env.rs`: the claim's and the Env's decisions;
//!   `autoscaler/`: the pool autoscaler's snapshot and decision (the seed design's
//!   Snapshot → Decide) and its commit.
//! - `commit.rs`: the guarded writes, their conflict handling, the status patches and the
//!   Events; below it `writer.rs`: where writes go and how they are guarded, and
//!   `shared.rs`: what the reconcilers share.
//! - `memory.rs`: what the process remembers between reconciles (writes the caches do not
//!   show yet, the per-group decision turns, first sightings of claims, the autoscaler's
//!   recommendation history), each a named type.
//!
//! A Pool reconcile runs the autoscaler first (in a scaling group): it decides and commits
//! the Pool's size, then the pool plan works to that size, and one status write reports
//! both.

pub mod admission;
pub mod autoscaler;
pub mod claim;
pub mod claim_reconciler;
pub mod commit;
pub mod controller;
pub mod env;
pub mod env_reconciler;
pub mod load;
pub mod memory;
pub mod pool;
pub mod pool_reconciler;
pub mod shared;
pub mod writer;
