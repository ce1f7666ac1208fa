//! Predictive warm-up: the opt-in policy of a scaling group
//! (`SandboxEnv.spec.autoscaling.groups[].scaleUpPolicy.predictive`), the claim history a
//! Pool keeps in its status, and the prediction the autoscaler reports (re-exported by
//! [`super::sandbox`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The most slots a claim history holds (a week of 5-minute slots), so a Pool's status
/// stays small whatever the spec says.
pub const MAX_SLOTS: i32 = 2016;

/// Warm the pool ahead of the claims its history predicts. Claims are counted per slot of a
/// repeating period (by default each 15 minutes of a week, in `timeZone`); each period's
/// count is blended into the slot's expectation, and the pool is grown, one Pod start time
/// ahead, to the idle Pods the expected claims need. The normal idle timeout and
/// scale-down take them back.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.periodSeconds % self.slotSeconds == 0").message("predictive periodSeconds must be a multiple of slotSeconds"))]
#[x_kube(validation = Rule::new("self.periodSeconds / self.slotSeconds <= 2016").message("predictive periodSeconds / slotSeconds must be at most 2016 slots"))]
pub struct PredictivePolicy {
    /// Whether predictions grow the pool. While false the history is still kept.
    #[serde(default = "PredictivePolicy::yes")]
    pub enabled: bool,
    /// Length of one slot of the claim history, in seconds.
    #[serde(default = "PredictivePolicy::default_slot")]
    #[schemars(range(min = 5, max = 86400))]
    pub slot_seconds: i32,
    /// Length of the period the history repeats over, in seconds (a week by default; a
    /// day for pools without a weekly rhythm).
    #[serde(default = "PredictivePolicy::default_period")]
    #[schemars(range(min = 5, max = 2419200))]
    pub period_seconds: i32,
    /// IANA time zone the slots follow, so 09:00 stays 09:00 across daylight saving
    /// changes. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

impl PredictivePolicy {
    fn yes() -> bool {
        true
    }
    fn default_slot() -> i32 {
        900
    }
    fn default_period() -> i32 {
        604_800
    }
}

impl Default for PredictivePolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            slot_seconds: Self::default_slot(),
            period_seconds: Self::default_period(),
            time_zone: None,
        }
    }
}

/// A Pool's claim history: how many claims each slot of the period is expected to bring.
/// Written by the autoscaler at most once per slot (when a slot closes), never per claim;
/// a restarted or newly elected process continues from it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimHistory {
    /// The slot length the history was built with (a new slot length starts a new history).
    pub slot_seconds: i32,
    /// The period the history was built with.
    pub period_seconds: i32,
    /// The time zone the history was built with.
    pub time_zone: String,
    /// The start of the slot whose claims are being counted now.
    pub open_slot_start: Time,
    /// Expected claims per slot, in hundredths, the first slot starting on Monday 00:00 in
    /// the time zone (for a period other than a week: on 1970-01-05 00:00 and every period
    /// after it); -1 for a slot never observed.
    #[schemars(length(max = 2016))]
    pub expected: Vec<i32>,
    /// How long a Pod of this Pool takes from creation to Ready (the 90th percentile of the
    /// Pods seen when the last slot closed), in seconds: how far ahead the pool is warmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_start_seconds: Option<i32>,
}

/// What the claim history predicts now, and what the autoscaler keeps ready for it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Prediction {
    /// Claims expected in the slot that starts one Pod start time from now.
    pub expected_claims: i32,
    /// Idle or starting Pods the prediction keeps, so the claims expected while a new
    /// Pod starts find one ready.
    pub ready_pods: i32,
    /// The Pod start time the pool is warmed ahead by, in seconds.
    pub lead_seconds: i32,
    /// For people, e.g. `Predicted: 14 claims expected in the next 15m`.
    pub message: String,
}
