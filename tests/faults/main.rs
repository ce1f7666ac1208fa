//! Faults of the control plane under load, each on a plane of its own (`e2e/cluster up` in a
//! directory of its own, taken down at the end): the API server down for a minute, etcd
//! restarted, a leader cut off from the API server. Each test asserts the exact end state.
//! `moonin fleet` is tested here too, over two planes at once (one stopped mid-test).
//!
//! Like the end-to-end tests, these skip without a reachable plane unless `MOONIN_E2E=required`
//! (set by `e2e/test`). They run one at a time: each kills parts of its plane on purpose.
#![allow(clippy::too_many_lines)]

#[path = "../common/mod.rs"]
mod common;
mod expiry;
mod fleet;
#[allow(dead_code)]
#[path = "../e2e/harness.rs"]
mod harness;
mod load;
mod outage;
mod partition;
mod plane;
mod proxy;
