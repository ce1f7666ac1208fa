//! The manager: one process that runs the selected controllers behind leader election,
//! with health, readiness and metrics endpoints and a graceful shutdown.

pub mod controllers;
pub mod http;
pub mod leader;

use std::{hash::BuildHasher, net::SocketAddr};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::runtime::{
    access,
    context::{Context, Readiness},
    metrics::Metrics,
};

/// The file a Pod's service account mounts with its namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `moonin run` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Namespace of the leader-election Lease. Default: the Pod's namespace in a cluster,
    /// else $POD_NAMESPACE, else `moonin-system`.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of /healthz, /readyz and /metrics. Port 0 picks a free port (it is logged).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Controllers to run, comma-separated. Default: every controller in this build.
    #[arg(long, value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// This cluster's name, as SandboxEnv members and ClusterDiscovery refer to it.
    #[arg(long, env = "MOONIN_CLUSTER_NAME", default_value = "local")]
    pub cluster_name: String,
    /// Leader-election identity. Default: $POD_NAME or the host name, plus the process id
    /// and a random suffix, so every process is distinct.
    #[arg(long)]
    pub identity: Option<String>,
}

/// The Lease namespace, resolved as `--namespace` documents.
pub fn resolve_namespace(flag: Option<&str>) -> String {
    if let Some(ns) = flag.filter(|s| !s.is_empty()) {
        return ns.to_string();
    }
    if let Ok(ns) = std::fs::read_to_string(POD_NAMESPACE_FILE) {
        let ns = ns.trim();
        if !ns.is_empty() {
            return ns.to_string();
        }
    }
    match std::env::var("POD_NAMESPACE") {
        Ok(ns) if !ns.is_empty() => ns,
        _ => "moonin-system".to_string(),
    }
}

fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "moonin".to_string());
    // RandomState is seeded randomly per process: a cheap, dependency-free unique suffix.
    let suffix = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!("{host}-{}-{:06x}", std::process::id(), suffix & 0xff_ffff)
}

/// A client for the configured cluster (kubeconfig or in-cluster) that counts every request
/// in `moonin_api_requests_total`, and the API server's version (it must answer).
async fn connect(
    metrics: &Metrics,
) -> anyhow::Result<(kube::Client, k8s_openapi::apimachinery::pkg::version::Info)> {
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration: set KUBECONFIG or run in a cluster")?;
    let counted = metrics.clone();
    let client = kube::client::ClientBuilder::try_from(config)
        .context("the Kubernetes configuration cannot build a client")?
        .with_layer(&tower::util::MapRequestLayer::new(
            move |req: ::http::Request<kube::client::Body>| {
                counted.requested(req.method(), req.uri().path(), req.uri().query());
                req
            },
        ))
        .build();
    let version = client
        .apiserver_version()
        .await
        .context("the Kubernetes API server is not reachable")?;
    Ok((client, version))
}

/// Runs the manager until SIGTERM or Ctrl-C.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let selected = controllers::select(&args.controllers).map_err(anyhow::Error::msg)?;
    let namespace = resolve_namespace(args.namespace.as_deref());
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let shutdown = CancellationToken::new();
    let metrics = Metrics::new();
    // One part for the manager itself (API reachable, election started) plus one per controller.
    let readiness = Readiness::new(1 + selected.len());

    let (addr, http_task) = http::serve(
        args.http_addr,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("binding --http-addr {}", args.http_addr))?;
    tracing::info!(%addr, "serving /healthz /readyz /metrics");

    let (client, version) = connect(&metrics).await?;
    tracing::info!(
        server = %version.git_version,
        %namespace,
        %identity,
        controllers = ?selected.iter().map(|c| c.name).collect::<Vec<_>>(),
        "connected"
    );

    let (leadership, election) = leader::elect(
        client.clone(),
        &namespace,
        &identity,
        metrics.clone(),
        readiness.clone(),
        shutdown.clone(),
    );
    tracing::info!(
        lease = %format!("{namespace}/{}", leader::LEASE_NAME),
        "competing for leadership"
    );
    readiness.report_synced();

    metrics.facts.set_cluster(&args.cluster_name);
    let ctx = Context {
        client,
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
        cluster_name: args.cluster_name.clone(),
        namespace: namespace.clone(),
    };
    let mut tasks = tokio::task::JoinSet::new();
    for c in &selected {
        let name = c.name;
        let fut = access::CONTROLLER.scope(name, (c.run)(ctx.clone(), readiness.clone()));
        tasks.spawn(async move { (name, fut.await) });
    }
    drop(ctx);

    let signal = shutdown_signal();
    tokio::pin!(signal);
    let mut failure = None;
    loop {
        tokio::select! {
            _ = &mut signal => {
                tracing::info!("shutting down");
                break;
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                let (name, result) = done.context("a controller task panicked")?;
                if let Err(e) = result {
                    tracing::error!(controller = name, error = %e, "controller stopped");
                    failure = Some(e.context(format!("controller {name}")));
                    break;
                }
            }
        }
    }
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    drop(leadership);
    if let Err(e) = election.await {
        failure.get_or_insert_with(|| anyhow::anyhow!("the leader election task failed: {e}"));
    }
    let _ = http_task.await;
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_namespace_wins() {
        assert_eq!(resolve_namespace(Some("ops")), "ops");
    }

    #[test]
    fn identities_differ_between_calls() {
        assert_ne!(default_identity(), default_identity());
    }
}
