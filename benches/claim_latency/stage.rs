//! The controllers under test, started, found and counted, and a stage per phase: a
//! namespace, the system's pool, and Moonin's manager or the floor.

use std::{
    net::SocketAddr,
    process::Command,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
};
use serde_json::json;

use crate::{
    POLL, Params,
    floor::Floor,
    shared::{
        common,
        harness::{self, Manager, TestNamespace},
        http::{get_parsed, http_get},
        machine::wait_until_quiet,
        manager::{ManagerSeat, wait_until_leading},
        metrics::Counters,
        process::{listed, moonin_managers},
        report::progress,
        wait,
    },
    system::{AS_GROUP, AS_VERSION, System, as_api, pod_template},
    watch::Shared,
};

/// API writes the controller under test has sent so far: Moonin's
/// `moonin_api_writes_total`; agent-sandbox's `rest_client_requests_total` for POST, PUT,
/// PATCH and DELETE (controller-runtime's client metrics), when its metrics answer over
/// plain HTTP.
pub async fn writes(source: Option<SocketAddr>) -> Option<f64> {
    let count = |body: &str| {
        if body.contains("moonin_api_writes_total") {
            Some(Counters::parse(body).writes_total())
        } else if body.contains("rest_client_requests_total") {
            let method = |m: &str| {
                let label = format!("method=\"{m}\"");
                harness::metric_sum(body, "rest_client_requests_total", &[&label])
                    .unwrap_or_default()
            };
            Some(["POST", "PUT", "PATCH", "DELETE"].map(method).iter().sum())
        } else {
            None
        }
    };
    get_parsed(source?, "/metrics", count).await.flatten()
}

/// agent-sandbox's metrics address: the TCP port its process listens on besides the health
/// port `e2e/agent-sandbox` recorded (both on loopback, kernel-chosen).
fn agent_sandbox_metrics() -> Option<SocketAddr> {
    let dir = std::env::var("MOONIN_CLUSTER_DIR").unwrap_or_else(|_| {
        let cache = std::env::var("MOONIN_CACHE").unwrap_or_else(|_| {
            format!(
                "{}/.cache/moonin",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        format!("{cache}/cluster")
    });
    let pid = std::fs::read_to_string(format!("{dir}/agent-sandbox.pid")).ok()?;
    let health = std::fs::read_to_string(format!("{dir}/agent-sandbox.health")).ok()?;
    let out = Command::new("ss").args(["-Hltnp"]).output().ok()?;
    let needle = format!("pid={},", pid.trim());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&needle))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<SocketAddr>().ok())
        .find(|a| a.to_string() != health.trim())
        .filter(|a| http_get(*a, "/metrics").is_some())
}

// Other controllers on this machine.

/// Runs `e2e/agent-sandbox <cmd>` (`start`, `stop`, `status`); its output, or why it failed.
pub fn agent_sandbox(cmd: &str) -> Result<String, String> {
    let out = Command::new(common::root().join("e2e/agent-sandbox"))
        .arg(cmd)
        .output()
        .map_err(|e| format!("e2e/agent-sandbox {cmd}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text.trim().to_string())
    } else {
        Err(format!("e2e/agent-sandbox {cmd}: {}", text.trim()))
    }
}

/// Waits until no other `moonin run` and no agent-sandbox controller runs.
pub async fn wait_for_quiet(p: &Params) {
    let quiet = wait_until_quiet(
        "other controllers to stop",
        Duration::from_secs(p.quiet_secs),
        Duration::from_secs(1),
        || {
            let managers = moonin_managers();
            let peer = agent_sandbox("status").is_ok();
            (!managers.is_empty() || peer).then(|| {
                format!(
                    "managers: {}, agent-sandbox running: {peer}",
                    listed(&managers)
                )
            })
        },
    )
    .await;
    if let Err(e) = quiet {
        progress(&format!("{e}; going on"));
    }
}

// One system's setup: its namespace, its controller, its pool.

/// A namespace with the system's pool in it; for Moonin, its own manager (dropped before
/// what it runs as); for the floor, the floor's cache of Pods and its counters.
pub struct Stage {
    pub system: System,
    pub ns: TestNamespace,
    pub moonin: Option<(Manager, ManagerSeat)>,
    pub floor: Option<Floor>,
    /// Where the controller's write counters are read.
    pub metrics: Option<SocketAddr>,
}

impl Stage {
    pub async fn new(client: &Client, system: System, prefix: &str) -> Result<Self, String> {
        let short = match system {
            System::Moonin => "m",
            System::AgentSandbox => "as",
            System::Floor => "f",
        };
        let mut ns = TestNamespace::new(client, &format!("bench-claim-{short}-{prefix}")).await;
        let (mut moonin, mut floor, mut metrics) = (None, None, None);
        match system {
            System::Moonin => {
                let seat = ManagerSeat::new(&mut ns, &[]);
                let m = seat.start("sandbox", &[]).await;
                wait_until_leading(m.addr, Instant::now() + Duration::from_secs(60)).await?;
                metrics = Some(m.addr);
                moonin = Some((m, seat));
            }
            System::AgentSandbox => metrics = agent_sandbox_metrics(),
            System::Floor => floor = Some(Floor::start(client, &ns.name)),
        }
        Ok(Stage {
            system,
            ns,
            moonin,
            floor,
            metrics,
        })
    }

    pub fn name(&self) -> &str {
        &self.ns.name
    }

    /// The API writes the controller under test (or the floor in its place) has sent so far.
    pub async fn writes(&self) -> Option<f64> {
        match &self.floor {
            Some(f) => Some(f.writes() as f64),
            None => writes(self.metrics).await,
        }
    }

    /// Creates the pool of `size` Pods. `grows`: Moonin's pool is in an autoscaling group
    /// (minimum `size`, maximum four times that, no cooldown), so queued claims scale it
    /// up; agent-sandbox creates a Sandbox for a claim its warm pool cannot serve anyway.
    pub async fn create_pool(
        &self,
        client: &Client,
        size: usize,
        grows: bool,
    ) -> Result<(), String> {
        let ns = self.name();
        let pp = PostParams::default();
        match self.system {
            System::Moonin => {
                let mut env = json!({
                    "apiVersion": "moonin.io/v1alpha1",
                    "kind": "SandboxEnv",
                    "metadata": {"name": "bench"},
                    "spec": {"clusters": [{"name": "local", "members": [{
                        "name": "a",
                        "spec": {
                            "replicas": size,
                            "recyclePolicy": "Replace",
                            "template": pod_template()
                        }
                    }]}]}
                });
                if grows {
                    env["spec"]["autoscaling"] = json!({"groups": [{
                        "name": "g",
                        "minReplicas": size,
                        "maxReplicas": 4 * size,
                        "scaleUpPolicy": {"cooldownSeconds": 0, "maxStep": 4 * size}
                    }]});
                    env["spec"]["clusters"][0]["members"][0]["config"] =
                        json!({"scalingGroup": "g"});
                }
                let env: DynamicObject = serde_json::from_value(env).expect("env");
                harness::moonin_api(client, "SandboxEnv", ns)
                    .create(&pp, &env)
                    .await
                    .map_err(|e| format!("creating the SandboxEnv: {e}"))?;
            }
            System::AgentSandbox => {
                let template: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                    "kind": "SandboxTemplate",
                    "metadata": {"name": "bench"},
                    "spec": {"podTemplate": pod_template()}
                }))
                .expect("template");
                as_api(client, ns, "SandboxTemplate", "sandboxtemplates")
                    .create(&pp, &template)
                    .await
                    .map_err(|e| format!("creating the SandboxTemplate: {e}"))?;
                let pool: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                    "kind": "SandboxWarmPool",
                    "metadata": {"name": "bench"},
                    "spec": {"replicas": size, "sandboxTemplateRef": {"name": "bench"}}
                }))
                .expect("warm pool");
                as_api(client, ns, "SandboxWarmPool", "sandboxwarmpools")
                    .create(&pp, &pool)
                    .await
                    .map_err(|e| format!("creating the SandboxWarmPool: {e}"))?;
            }
            System::Floor => {
                let floor = self.floor.as_ref().expect("the floor's stage has a floor");
                floor.create_pool(size).await?;
            }
        }
        Ok(())
    }

    /// Waits until the pool reports `size` idle, Ready sandboxes (the floor: its cache
    /// holds as many) and the watch sees as many Ready Pods.
    pub async fn pool_full(
        &self,
        client: &Client,
        seen: &Shared,
        size: usize,
    ) -> Result<(), String> {
        let pool = self.system.pool(client, self.name());
        wait::until(
            &format!("{size} idle, Ready sandboxes in the pool"),
            Instant::now() + Duration::from_secs(120 + size as u64),
            POLL,
            || async {
                let n = match (&pool, &self.floor) {
                    (Some((api, name, field)), _) => {
                        let pool = api.get(name).await.ok()?;
                        pool.data["status"][*field].as_u64().unwrap_or(0) as usize
                    }
                    (None, Some(floor)) => floor.idle(),
                    (None, None) => 0,
                };
                (n >= size && seen.lock().expect("seen").live_ready() >= size).then_some(())
            },
        )
        .await
    }

    /// Deletes the pool while the controller still runs, then lets the namespace go.
    pub async fn finish(mut self, client: &Client) {
        let ns = self.name().to_string();
        let dp = DeleteParams::background();
        match self.system {
            System::Moonin => {
                let _ = harness::moonin_api(client, "SandboxClaim", &ns)
                    .delete_collection(&dp, &ListParams::default())
                    .await;
                let _ = harness::moonin_api(client, "SandboxEnv", &ns)
                    .delete("bench", &dp)
                    .await;
            }
            System::AgentSandbox => {
                let _ = as_api(client, &ns, "SandboxClaim", "sandboxclaims")
                    .delete_collection(&dp, &ListParams::default())
                    .await;
                let _ = as_api(client, &ns, "SandboxWarmPool", "sandboxwarmpools")
                    .delete("bench", &dp)
                    .await;
            }
            System::Floor => {
                // Its binds in flight finish first; then nothing replaces a deleted Pod.
                if let Some(floor) = self.floor.take() {
                    floor.stop().await;
                }
                let _ = harness::moonin_api(client, "SandboxClaim", &ns)
                    .delete_collection(&dp, &ListParams::default())
                    .await;
                let _ = Api::<Pod>::namespaced(client.clone(), &ns)
                    .delete_collection(&dp, &ListParams::default())
                    .await;
            }
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let gone = wait::until_none_left(
            "the pool's Pods to be gone",
            &pods,
            &ListParams::default(),
            Instant::now() + Duration::from_secs(90),
            POLL,
        )
        .await;
        if let Err(e) = gone {
            progress(&format!(
                "cleanup of {ns}: {e}; deleting the namespace anyway"
            ));
        }
        drop(self.moonin.take());
        drop(self.ns);
    }
}
