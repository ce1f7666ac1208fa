//! Moonin: a small Kubernetes operator for cluster discovery, scheduled scaling and warm
//! sandbox pools, driven entirely by custom resources.
#![forbid(unsafe_code)]

pub mod api;
pub mod cron;
pub mod discovery;
pub mod fleet;
pub mod gitops;
pub mod manager;
pub mod runtime;
pub mod sandbox;
pub mod scaling;
