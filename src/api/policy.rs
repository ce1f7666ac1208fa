//! The platform's rules for KEDA ScaledObjects, as `ClusterDiscovery.spec.autoscalingPolicy`
//! holds them (re-exported by [`super::discovery`]).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Rules for KEDA ScaledObjects. Each is off unless set. (To refuse such ScaledObjects at
/// admission instead, apply the ValidatingAdmissionPolicy in `config/policies/`.)
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingPolicy {
    /// The trigger types a ScaledObject may use, for example `[cpu, memory]`; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub allowed_trigger_types: Vec<String>,
    /// The `metricType` every trigger must set, for example `Utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_metric_type: Option<String>,
    /// The lowest `minReplicaCount` allowed (unset in a ScaledObject counts as KEDA's
    /// default, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replica_count_at_least: Option<i32>,
    /// `maxReplicaCount` must be written out (KEDA's default, 100, is not taken).
    #[serde(default)]
    pub require_max_replica_count: bool,
    /// Fields a ScaledObject must leave unset: any of `idleReplicaCount`, `fallback`,
    /// `advanced`, `pollingInterval`, `cooldownPeriod`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(f, f in ['idleReplicaCount', 'fallback', 'advanced', 'pollingInterval', 'cooldownPeriod'])").message("forbiddenFields lists only idleReplicaCount, fallback, advanced, pollingInterval and cooldownPeriod"))]
    #[schemars(length(max = 5))]
    pub forbidden_fields: Vec<String>,
    /// A ScaledObject is named after the Deployment it scales.
    #[serde(default)]
    pub require_name_matches_target: bool,
    /// No HorizontalPodAutoscaler of anyone but KEDA beside a ScaledObject on the same
    /// Deployment.
    #[serde(default)]
    pub forbid_hpa_beside_scaled_object: bool,
}
