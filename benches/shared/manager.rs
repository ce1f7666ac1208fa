//! The benchmark's own `moonin run`: what it runs as, starting it, waiting until it leads,
//! stopping it, and reading its log.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use jiff::Timestamp;
use serde_json::Value;

use super::{http::http_get, wait::until};
use crate::harness::{self, Manager, TestNamespace};

/// What a benchmark's manager runs as: the ServiceAccount `moonin` of a namespace of its own
/// (which also holds its Lease), given the RBAC of `config/rbac`, through a kubeconfig that
/// impersonates it; and an identity naming that namespace. Dropping it removes the
/// kubeconfig.
pub struct ManagerSeat {
    /// The kubeconfig the manager reads.
    pub kubeconfig: PathBuf,
    /// Its leader-election identity, `bench-<namespace>`.
    pub identity: String,
    /// The namespace of its Lease.
    pub namespace: String,
}

impl ManagerSeat {
    /// Grants `config/rbac`, and the RBAC directories of `extra_rbac`, in `ns`.
    pub fn new(ns: &mut TestNamespace, extra_rbac: &[&str]) -> Self {
        let user = ns.grant_manager_rbac();
        for dir in extra_rbac {
            ns.grant_rbac(dir);
        }
        Self {
            kubeconfig: harness::impersonating_kubeconfig(&user),
            identity: format!("bench-{}", ns.name),
            namespace: ns.name.clone(),
        }
    }

    /// Starts `moonin run --namespace <ns> --controllers <controllers>` with `args` after.
    pub async fn start(&self, controllers: &str, args: &[&str]) -> Manager {
        let mut all = vec!["--namespace", &self.namespace, "--controllers", controllers];
        all.extend_from_slice(args);
        Manager::start(&self.kubeconfig, &self.identity, &all).await
    }
}

impl Drop for ManagerSeat {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// Whether the manager at `addr` is ready and holds the Lease.
pub fn ready_and_leading(addr: SocketAddr) -> bool {
    http_get(addr, "/readyz").is_some()
        && http_get(addr, "/metrics").is_some_and(|m| m.lines().any(|l| l == "moonin_leader 1"))
}

/// Waits until the manager at `addr` is ready and leads, or fails at `deadline`.
pub async fn wait_until_leading(addr: SocketAddr, deadline: Instant) -> Result<(), String> {
    until(
        "the manager to be ready and lead",
        deadline,
        Duration::from_millis(200),
        || async move {
            tokio::task::spawn_blocking(move || ready_and_leading(addr))
                .await
                .ok()?
                .then_some(())
        },
    )
    .await
}

/// SIGTERM, then SIGKILL if it has not exited within 15 s.
pub async fn stop(manager: &mut Manager) {
    if !manager.terminate(Duration::from_secs(15)).await {
        manager.kill();
    }
}

/// How many lines of a JSON log are warnings and how many errors.
pub fn log_levels(log: &str) -> (usize, usize) {
    let level = |l: &str| {
        let needle = format!("\"level\":\"{l}\"");
        log.lines().filter(|line| line.contains(&needle)).count()
    };
    (level("WARN"), level("ERROR"))
}

/// The warnings and errors of a JSON log, by level, message and error, each cut before
/// `cut_at` (where run-specific names begin) and to 120 characters; only those logged within
/// `window` when there is one.
pub fn problems(
    log: &str,
    window: Option<(Timestamp, Timestamp)>,
    cut_at: &str,
) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let level = v["level"].as_str().unwrap_or_default();
        if !matches!(level, "WARN" | "ERROR") {
            continue;
        }
        if let Some((from, to)) = window {
            let at = v["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok());
            if at.is_none_or(|at| at < from || at > to) {
                continue;
            }
        }
        let cut = |s: &str| {
            let s = s.split(cut_at).next().unwrap_or_default();
            s.chars().take(120).collect::<String>()
        };
        let message = cut(v["fields"]["message"].as_str().unwrap_or_default());
        let error = cut(v["fields"]["error"].as_str().unwrap_or_default());
        let key = if error.is_empty() {
            format!("{level} {message}")
        } else {
            format!("{level} {message}: {error}")
        };
        *out.entry(key).or_default() += 1;
    }
    out
}
