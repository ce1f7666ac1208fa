//! Warm sandbox pools: `SandboxEnv`, `SandboxPool`, `SandboxClaim`.
//!
//! `autoscaler` holds the pool autoscaler's pure core (Snapshot → Decide → Decision); the
//! controllers around it do the Load and the Commit.

pub mod autoscaler;
pub mod controller;
pub mod pool;
