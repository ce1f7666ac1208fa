//! End-to-end tests against a real Kubernetes control plane (`e2e/cluster up`).
//!
//! Without a reachable cluster every test skips with a message, unless `MOONIN_E2E=required`
//! (set by `e2e/test`, the README's test command), where a missing cluster fails instead.
//!
//! A scenario reads top to bottom as one story against the plane (set up, act, wait, check),
//! so the 100-line limit the library keeps (`too_many_lines`) does not apply here.
#![allow(clippy::too_many_lines)]

mod chart;
#[path = "../common/mod.rs"]
mod common;
mod crowd;
mod discovery;
mod discovery_config;
mod foundation;
mod gitops;
mod harness;
mod history;
mod hostile;
mod image;
mod network;
mod policy;
mod predictive;
mod rbac;
mod samples;
mod sandbox;
mod scaling;
mod tilt;
