//! A benchmark's run against the local control plane: only under `cargo bench` (not under
//! `cargo test --all-targets`), on a runtime of its own, with a client for the plane.

use std::{future::Future, process::ExitCode};

use kube::Client;

/// The `main` of a benchmark: without `--bench` it only says how to run it (`hint` adds to
/// what it needs); with it, it runs `run` on a runtime of `workers` threads.
pub fn main<F, Fut>(bench: &str, workers: usize, hint: &str, run: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ExitCode>,
{
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        println!(
            "{bench} is a benchmark, not a test; run it with `cargo bench --bench {bench}` (needs `e2e/cluster up` and `eval \"$(e2e/cluster env)\"`{hint})"
        );
        return ExitCode::SUCCESS;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run())
}

/// Exit code 2 after saying what is wrong with the parameters.
pub fn bad_parameters(bench: &str, error: &str) -> ExitCode {
    eprintln!("{bench}: {error}");
    ExitCode::from(2)
}

/// A client for the control plane, or `None` after saying how to start the local one.
pub async fn connect(bench: &str) -> Option<Client> {
    let client = crate::harness::cluster().await;
    if client.is_none() {
        eprintln!(
            "{bench}: no Kubernetes control plane is reachable. Start the local one and point KUBECONFIG at it:\n  e2e/cluster up\n  eval \"$(e2e/cluster env)\"\n  cargo bench --bench {bench}"
        );
    }
    client
}

/// The API server's `gitVersion`, `?` when it does not say.
pub async fn server_version(client: &Client) -> String {
    client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "?".into())
}
