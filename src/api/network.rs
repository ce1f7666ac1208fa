//! The entries of a `NamespaceInventory` for what connects workloads and what they may do:
//! Services, Ingresses, NetworkPolicies and the RBAC bindings of the namespace
//! (re-exported by [`super::discovery`]).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// One Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntry {
    /// Name.
    pub name: String,
    /// `spec.type`: `ClusterIP`, `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `spec.selector` as `key=value` pairs joined by `,`; absent for a Service without a
    /// selector (ExternalName, or Endpoints managed by hand), which is never judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Ports, as `<port>/<protocol>` with `→<targetPort>` when it differs, and the port's
    /// name in front (`http 80/TCP→8080`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
    /// The Deployments it fronts: those whose Pod template carries every label of its
    /// selector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<String>,
    /// Open error signals (`ServiceSelectsNothing`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

/// One Ingress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IngressEntry {
    /// Name.
    pub name: String,
    /// `spec.ingressClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The hosts of its rules, sorted (`*` for a rule without a host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Whether it has a `tls` section.
    #[serde(default)]
    pub tls: bool,
    /// What it routes to, sorted: `Service/<name>:<port>` (the default backend too), or
    /// `<kind>/<name>` for a resource backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
    /// Open error signals (`BackendNotFound`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}

/// One NetworkPolicy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyEntry {
    /// Name.
    pub name: String,
    /// The traffic it isolates the Pods it selects for: `Ingress`, `Egress` or both
    /// (`spec.policyTypes`; when unset, `Ingress`, and `Egress` too if it has egress rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_types: Vec<String>,
    /// `spec.podSelector` as `key=value` pairs and expressions joined by `,`; `*` when it
    /// is empty and so selects every Pod of the namespace.
    #[serde(default)]
    pub pod_selector: String,
    /// The Deployments whose Pod template it selects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<String>,
}

/// One RoleBinding of the namespace, or one ClusterRoleBinding to ServiceAccounts of the
/// namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleBindingEntry {
    /// `RoleBinding/<name>` or `ClusterRoleBinding/<name>`.
    pub name: String,
    /// The role it grants: `Role/<name>` or `ClusterRole/<name>`.
    pub role: String,
    /// Its subjects: `ServiceAccount/<name>` (`ServiceAccount/<namespace>/<name>` for one
    /// of another namespace), `User/<name>`, `Group/<name>`. For a ClusterRoleBinding, only
    /// those that reach the ServiceAccounts of this namespace: its own, and the groups all
    /// of them are in (`system:serviceaccounts:<namespace>`, `system:serviceaccounts`,
    /// `system:authenticated`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<String>,
    /// Open hazard signals (`PrivilegedServiceAccount`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
}
