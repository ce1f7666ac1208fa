//! The part of KEDA's `ScaledObject` (`keda.sh/v1alpha1`) Moonin reads. Writes are JSON
//! Patches, so fields this type does not know are never lost.

use kube::{Api, Client, CustomResource};
use serde::{Deserialize, Serialize};

/// What a ScaledObject scales and within which bounds.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledObject",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectSpec {
    /// The workload KEDA scales.
    #[serde(default)]
    pub scale_target_ref: ScaleTargetRef,
    /// KEDA's `minReplicaCount` (KEDA defaults it to 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,
    /// KEDA's `maxReplicaCount` (KEDA defaults it to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,
}

/// `spec.scaleTargetRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// Defaults to `apps/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Defaults to `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The workload's name.
    #[serde(default)]
    pub name: String,
}

impl ScaleTargetRef {
    /// The Deployment this points at, if it points at one.
    pub fn deployment(&self) -> Option<&str> {
        let kind_ok = self.kind.as_deref().is_none_or(|k| k == "Deployment");
        let api_ok = self
            .api_version
            .as_deref()
            .is_none_or(|a| a == "apps/v1" || a == "apps");
        (kind_ok && api_ok && !self.name.is_empty()).then_some(self.name.as_str())
    }
}

/// Whether KEDA's ScaledObject CRD is installed (a one-item list answers). Any other error
/// is logged and read as "not installed": the controllers then run without ScaledObjects.
pub async fn installed(client: &Client) -> bool {
    let api: Api<ScaledObject> = Api::all(client.clone());
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => {
            tracing::warn!(error = %crate::runtime::errors::brief(&e), "could not tell whether KEDA is installed; ignoring ScaledObjects");
            false
        }
    }
}
