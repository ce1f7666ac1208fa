//! End-to-end tests against a real Kubernetes control plane (`e2e/cluster up`).
//!
//! Without a reachable cluster every test skips with a message, unless `MOONIN_E2E=required`
//! (set by `e2e/test`, the README's test command), where a missing cluster fails instead.

mod chart;
#[path = "../common/mod.rs"]
mod common;
mod discovery;
mod foundation;
mod gitops;
mod harness;
mod hostile;
mod image;
mod rbac;
mod samples;
mod sandbox;
mod scaling;
mod tilt;
