//! What the benchmarks share, one module per concern. Each benchmark uses some of them.
//!
//! - [`plane`]: running only under `cargo bench`, the runtime, a client for the control plane;
//! - [`params`]: `MOONIN_BENCH_*` variables and the command line that repeats a run;
//! - [`manager`]: the benchmark's own `moonin run` (RBAC, kubeconfig, start, lead, stop, log);
//! - [`watch`]: the benchmark's watches, each event handed over as it arrives;
//! - [`http`] and [`metrics`]: `/metrics` and `/readyz`, the manager's request and write
//!   counters;
//! - [`process`]: memory and CPU time from `/proc`, the `moonin run` processes on the machine;
//! - [`machine`]: the machine for the report's header, and how busy it is;
//! - [`stats`]: percentiles; [`report`]: progress lines and the pieces of the report;
//! - [`wait`]: polling with a deadline; [`signals`]: Ctrl-C and SIGTERM, to clean up first.

/// The tests' samples and paths (`crate::common` to the harness).
#[path = "../../tests/common/mod.rs"]
pub mod common;
/// The end-to-end tests' harness: namespaces, RBAC, the manager's process.
#[path = "../../tests/e2e/harness.rs"]
pub mod harness;
pub mod http;
pub mod machine;
pub mod manager;
pub mod metrics;
pub mod params;
pub mod plane;
pub mod process;
pub mod report;
pub mod signals;
pub mod stats;
pub mod wait;
pub mod watch;
