//! The systems under test, Moonin, agent-sandbox and the floor (this process in the
//! controller's place, [`crate::floor`]), and their objects; [`crate::stage`] starts them.

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::GroupVersionKind,
};
use serde_json::{Value, json};

use crate::shared::harness;

pub const AS_GROUP: &str = "extensions.agents.x-k8s.io";
pub const AS_VERSION: &str = "v1beta1";
/// A system under test.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum System {
    Moonin,
    AgentSandbox,
    /// No controller: this benchmark makes the API calls of a bind and a replacement
    /// itself ([`crate::floor`]), against Moonin's claims.
    Floor,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::Moonin => "Moonin",
            System::AgentSandbox => "agent-sandbox v0.5.6",
            System::Floor => "floor (no controller)",
        }
    }

    /// How `MOONIN_BENCH_SYSTEMS` names it.
    pub fn key(self) -> &'static str {
        match self {
            System::Moonin => "moonin",
            System::AgentSandbox => "agent-sandbox",
            System::Floor => "floor",
        }
    }

    pub fn claims(self, client: &Client, ns: &str) -> Api<DynamicObject> {
        match self {
            System::Moonin | System::Floor => harness::moonin_api(client, "SandboxClaim", ns),
            System::AgentSandbox => as_api(client, ns, "SandboxClaim", "sandboxclaims"),
        }
    }

    /// The pool object and the status field that counts its idle, Ready sandboxes (the
    /// floor has none: it counts its own).
    pub fn pool(
        self,
        client: &Client,
        ns: &str,
    ) -> Option<(Api<DynamicObject>, &'static str, &'static str)> {
        match self {
            System::Moonin => Some((
                harness::moonin_api(client, "SandboxPool", ns),
                POOL,
                "idleReplicas",
            )),
            System::AgentSandbox => Some((
                as_api(client, ns, "SandboxWarmPool", "sandboxwarmpools"),
                "bench",
                "readyReplicas",
            )),
            System::Floor => None,
        }
    }

    pub fn claim(self, name: &str) -> DynamicObject {
        let v = match self {
            System::Moonin | System::Floor => json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "SandboxClaim",
                "metadata": {"name": name},
                "spec": {"poolRef": {"name": POOL}}
            }),
            System::AgentSandbox => json!({
                "apiVersion": format!("{AS_GROUP}/{AS_VERSION}"),
                "kind": "SandboxClaim",
                "metadata": {"name": name},
                "spec": {"warmPoolRef": {"name": "bench"}}
            }),
        };
        serde_json::from_value(v).expect("claim")
    }

    pub fn is_bound(self, claim: &DynamicObject) -> bool {
        let status = &claim.data["status"];
        match self {
            System::Moonin | System::Floor => status["phase"] == "Bound",
            System::AgentSandbox => {
                status["sandbox"]["name"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
                    && status["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            }
        }
    }
}

pub fn as_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(AS_GROUP, AS_VERSION, kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// The name of Moonin's pool (`<env>-<member>`), which the floor's Pods and claims name too.
pub const POOL: &str = "bench-a";

/// The Pod template of every pool: Moonin's SandboxEnv member, agent-sandbox's
/// SandboxTemplate and the floor's Pods (kwok runs none of its container).
pub fn pod_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "sandbox"}},
        "spec": {"containers": [{
            "name": "sandbox",
            "image": "registry.example/sandbox:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
        }]}
    })
}

// Counters: Moonin's /metrics; agent-sandbox's controller-runtime metrics when reachable.
