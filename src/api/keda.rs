//! The part of KEDA's `ScaledObject` (`keda.sh/v1alpha1`) Moonin reads (scaling overrides
//! its bounds, discovery inventories it). Writes are JSON
//! Patches, so fields this type does not know are never lost.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// What a ScaledObject scales and within which bounds.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    derive = "PartialEq",
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
    /// What makes KEDA scale (read by discovery's autoscaling policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<Trigger>,
    /// The optional fields an autoscaling policy may forbid, read only for whether they are
    /// set (their content is never kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_replica_count: Option<serde_json::Value>,
    /// See `idle_replica_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<serde_json::Value>,
    /// See `idle_replica_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced: Option<serde_json::Value>,
    /// See `idle_replica_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polling_interval: Option<serde_json::Value>,
    /// See `idle_replica_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_period: Option<serde_json::Value>,
}

/// One trigger of a ScaledObject: its type and `metricType` (its metadata is not read).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    /// `cpu`, `memory`, `prometheus`, `cron`, …
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `Utilization` or `AverageValue` (cpu and memory triggers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_type: Option<String>,
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
