//! Replica history: how `ClusterDiscovery.spec.replicaHistory` configures it and the
//! `NamespaceInventory` entry that holds one autoscaler's (re-exported by
//! [`super::discovery`]). `moonin suggest` reads these entries.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// How discovery keeps each autoscaler's replica history: the highest replica count its
/// HorizontalPodAutoscaler asked for (`status.desiredReplicas`) in each slot of a repeating
/// period, for the last few periods. Fed by the HPAs discovery already watches; no metrics
/// server is needed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.periodSeconds % self.slotSeconds == 0").message("replicaHistory periodSeconds must be a multiple of slotSeconds"))]
#[x_kube(validation = Rule::new("self.periodSeconds / self.slotSeconds <= 2016").message("replicaHistory periodSeconds / slotSeconds must be at most 2016 slots"))]
pub struct ReplicaHistoryPolicy {
    /// Keep the history. Switched off, the histories are no longer published.
    #[serde(default = "ReplicaHistoryPolicy::yes")]
    pub enabled: bool,
    /// Length of one slot, in seconds (an hour by default).
    #[serde(default = "ReplicaHistoryPolicy::default_slot")]
    #[schemars(range(min = 5, max = 86400))]
    pub slot_seconds: i32,
    /// Length of the period the history repeats over, in seconds (a week by default).
    #[serde(default = "ReplicaHistoryPolicy::default_period")]
    #[schemars(range(min = 10, max = 2419200))]
    pub period_seconds: i32,
    /// How many periods are kept, the newest first.
    #[serde(default = "ReplicaHistoryPolicy::default_periods")]
    #[schemars(range(min = 1, max = 8))]
    pub periods: i32,
    /// IANA time zone the slots follow (09:00 stays 09:00 across daylight saving changes);
    /// also the time zone `moonin suggest` writes windows in. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

impl ReplicaHistoryPolicy {
    fn yes() -> bool {
        true
    }
    fn default_slot() -> i32 {
        3600
    }
    fn default_period() -> i32 {
        604_800
    }
    fn default_periods() -> i32 {
        4
    }
}

impl Default for ReplicaHistoryPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            slot_seconds: Self::default_slot(),
            period_seconds: Self::default_period(),
            periods: Self::default_periods(),
            time_zone: None,
        }
    }
}

/// One autoscaler's replica history.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaHistory {
    /// The autoscaler, as `HPA/<name>` or `ScaledObject/<name>` (KEDA's HPA is recorded
    /// under its ScaledObject).
    pub autoscaler: String,
    /// What it scales, as `<kind>/<name>`.
    pub target: String,
    /// Its minimum replicas when the history was last written.
    pub min_replicas: i32,
    /// Its maximum replicas when the history was last written.
    pub max_replicas: i32,
    /// Slot length, seconds.
    pub slot_seconds: i32,
    /// Period length, seconds.
    pub period_seconds: i32,
    /// The time zone the slots follow.
    pub time_zone: String,
    /// When the newest period (the first of `periods`) started.
    pub newest_period_start: Time,
    /// Per period, newest first, per slot: the highest replica count the autoscaler asked
    /// for in that slot; -1 where it was not observed.
    #[serde(default)]
    pub periods: Vec<Vec<i32>>,
}
