//! The plain data the pool autoscaler decides on: one `SandboxPool`, its autoscaling group,
//! its sibling Pools, its Pods, its claim queue, the admission probe and the recommendation
//! history. Load fills it from the shared caches (and the ResourceQuota probe); nothing in
//! here can reach the API server or the clock.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::forecast::Geometry;
use crate::api::sandbox::{ClaimHistory, PoolAutoScalingStatus, ScalingGroup};

/// Everything [`decide`](super::decide::decide) looks at for one Pool.
///
/// Load must read the Pool from the same cache generation it guards its writes with: commit
/// writes `spec.replicas` and the status with the Pool's `resourceVersion` as precondition,
/// so a decision taken on a stale Pool is dropped and retried, never applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The Pool being reconciled.
    pub pool: PoolView,
    /// The Pool's autoscaling group, or `None` when the Pool has no group (no
    /// `scalingGroup`, or its Env has no `spec.autoscaling`). With `None`, or with
    /// `enabled: false`, the autoscaler only keeps its bookkeeping and reports
    /// `desiredReplicas = spec.replicas`.
    pub group: Option<ScalingGroup>,
    /// The other Pools of the same group in this cluster (this Pool excluded). The group's
    /// `minReplicas`/`maxReplicas` bound the **sum** of all its Pools, so this Pool may
    /// range over `[min − Σ siblings, max − Σ siblings]`, clamped at 0.
    ///
    /// The sum is only exact if the Pools of one group are not decided concurrently: the
    /// controller serialises reconciles per group (or Load counts each sibling at the larger
    /// of its `spec.replicas` and its `status.autoScaling.desiredReplicas`).
    pub siblings: Vec<SiblingPool>,
    /// The claim queue of this Pool.
    pub queue: QueueStats,
    /// Every Pod of the Pool the cache shows, terminating ones included.
    pub pods: Vec<PoolPod>,
    /// Writes to Pods issued by this process that the cache does not show yet.
    pub in_flight: InFlight,
    /// When a claim was last bound to a Pod of this Pool (`None`: never, or unknown after
    /// a restart). Load derives it from the objects (the newest `boundAt` of the Pool's
    /// claims, or the claimed-since time of its Pods), never from process memory alone.
    pub last_claim_at: Option<Timestamp>,
    /// The admission probe: how many more Pods the namespace accepts.
    pub admission: Admission,
    /// The recommendations of recent reconciles, for the scale-down stabilization window.
    pub history: RecommendationHistory,
    /// Predictive warm-up's inputs, when the group has `scaleUpPolicy.predictive`.
    pub forecast: Option<ForecastInput>,
}

/// A claim's arrival in a Pool: when it was created, and the share of it the Pool counts
/// (1 for a claim for the Pool; 1/n for a claim for an Env, or a group of it, that may bind
/// in n Pools, so that those Pools together expect it once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// The claim's creation time.
    pub at: Timestamp,
    /// Its share, in (0, 1].
    pub share: f64,
}

impl Arrival {
    /// A claim for this Pool alone.
    pub fn whole(at: Timestamp) -> Self {
        Arrival { at, share: 1.0 }
    }
}

/// What predictive warm-up decides on.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecastInput {
    /// The slots of the period, or why there are none (an unknown time zone).
    pub geometry: Result<Geometry, String>,
    /// `predictive.enabled`: predictions grow the pool (else only the history is kept).
    pub enabled: bool,
    /// `status.claimHistory` as last written.
    pub history: Option<ClaimHistory>,
    /// The Pool's claims created since the history's open slot started: those the cache
    /// shows and those this process saw that are gone since (after a restart, a claim
    /// created and deleted while no process watched is not counted).
    pub arrivals: Vec<Arrival>,
    /// How long each Ready Pod of the Pool took from creation to Ready.
    pub starts: Vec<SignedDuration>,
}

/// The Pool as the autoscaler needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolView {
    /// `metadata.name`; also the prefix of scale-down decision ids.
    pub name: String,
    /// `spec.replicas`: total Pods wanted (idle + claimed + starting).
    pub replicas: i32,
    /// `status.autoScaling` as last written (default when absent).
    pub auto_scaling: PoolAutoScalingStatus,
}

/// Another Pool of the same autoscaling group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiblingPool {
    /// Its name (for messages).
    pub name: String,
    /// Its `spec.replicas`.
    pub replicas: i32,
}

/// The Pool's claim queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Claims waiting for a Pod of this Pool. Load counts a claim only if it is `Pending`
    /// **and** no Pod of the Pool names it as its claim, so a binding the Pod cache already
    /// shows but the claim cache does not yet is never counted as demand (the over-creation
    /// bug of cache lag).
    pub pending: i32,
    /// Creation time of the oldest waiting claim (for messages).
    pub oldest_pending_since: Option<Timestamp>,
}

/// What a sandbox Pod is doing, from the Pool's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodState {
    /// Created, not yet Ready with an IP.
    Starting,
    /// Labelled idle: no claim holds it.
    Idle,
    /// Bound to a claim.
    Claimed,
    /// Being deleted (`deletionTimestamp` set) or finished (`Succeeded`/`Failed`).
    Terminating,
}

/// One sandbox Pod, reduced to what the autoscaler needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: delete precondition.
    pub uid: String,
    /// `metadata.resourceVersion`: every mark and unmark tests it.
    pub resource_version: String,
    /// The Pool's label for the Pod, or `Terminating`.
    pub state: PodState,
    /// The Pod's `Ready` condition is `True`.
    pub ready: bool,
    /// `status.podIP` is set.
    pub has_ip: bool,
    /// Since when the Pod has been idle (its state-since annotation); `None` when unknown,
    /// which makes it the youngest idle Pod and never old enough to remove for idleness.
    pub idle_since: Option<Timestamp>,
    /// The scale-down mark (`moonin.io/scale-down`), if any.
    pub mark: Option<ScaleDownMark>,
}

impl PoolPod {
    /// Free to claim: idle, Ready, with an IP, and not marked for removal (binding refuses
    /// marked Pods). These are the Pool's idle Pods for every rule of the autoscaler.
    pub fn claimable(&self) -> bool {
        self.state == PodState::Idle && self.ready && self.has_ip && self.mark.is_none()
    }
}

/// The value of the `moonin.io/scale-down` annotation: which scale-down decision marked
/// the Pod, and until when the mark protects it from binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleDownMark {
    /// The decision id (also `status.autoScaling.scaleDownSession.id`).
    pub decision: String,
    /// After this instant the mark is stale: decide removes it and reports `Stuck`.
    pub expires_at: Timestamp,
}

/// The annotation's JSON shape: `{"decision": "...", "expiresAt": "RFC 3339"}`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MarkJson {
    decision: String,
    expires_at: Time,
}

impl ScaleDownMark {
    /// The annotation value, `{"decision":"…","expiresAt":"…"}` (whole seconds).
    pub fn to_annotation(&self) -> String {
        let json = MarkJson {
            decision: self.decision.clone(),
            expires_at: Time(self.expires_at),
        };
        serde_json::to_string(&json).unwrap_or_default()
    }

    /// Reads an annotation value. A value that does not parse (written by hand, or by a
    /// newer Moonin) yields [`ScaleDownMark::unreadable`], so decide sweeps it at once.
    pub fn from_annotation(value: &str) -> ScaleDownMark {
        match serde_json::from_str::<MarkJson>(value) {
            Ok(m) => ScaleDownMark {
                decision: m.decision,
                expires_at: m.expires_at.0,
            },
            Err(_) => ScaleDownMark::unreadable(),
        }
    }

    /// A mark of no decision that expired at the Unix epoch.
    pub fn unreadable() -> ScaleDownMark {
        ScaleDownMark {
            decision: String::new(),
            expires_at: Timestamp::UNIX_EPOCH,
        }
    }
}

/// Pod writes this process issued that the cache does not show yet (the pool controller
/// forgets an entry once its watch delivers the change). A Pod this process deleted is not
/// counted here: Load shows it [`PodState::Terminating`], as the cache soon will.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InFlight {
    /// Pods created, not yet in the cache.
    pub creates: i32,
}

/// The admission probe, run by Load before every decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// How many Pods the namespace accepts beyond those that exist or that the Pool still
    /// has to create for its current `spec.replicas` (ResourceQuota `hard − used` over
    /// the Pod template's requests, and known node headroom). `None`: unlimited.
    pub headroom: Option<i32>,
    /// Why it is limited (the quota and the resource that is short), when it is.
    pub message: Option<String>,
}

/// One recommendation: the Pool size a reconcile would have chosen on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    /// When it was made.
    pub at: Timestamp,
    /// The recommended `spec.replicas`.
    pub replicas: i32,
}

/// The recommendations of recent reconciles of one Pool, kept in process memory like the
/// HPA controller keeps its own. It is empty after a restart, and decide treats time not
/// covered by it as recommending the current size (see [`RecommendationHistory::covers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecommendationHistory {
    /// When this process recorded its first recommendation for the Pool.
    pub since: Option<Timestamp>,
    /// Recommendations, oldest first.
    pub entries: Vec<Recommendation>,
}

impl RecommendationHistory {
    /// Appends a decision's recommendation and drops entries that no stabilization window
    /// of this length can reach any more.
    pub fn record(&mut self, recommendation: Recommendation, window: SignedDuration) {
        if self.since.is_none() {
            self.since = Some(recommendation.at);
        }
        let horizon = recommendation
            .at
            .checked_sub(window)
            .unwrap_or(Timestamp::MIN);
        self.entries.retain(|r| r.at > horizon);
        self.entries.push(recommendation);
    }

    /// True when the history reaches back to `start`: recommendations have been recorded
    /// since at least then.
    pub fn covers(&self, start: Timestamp) -> bool {
        self.since.is_some_and(|s| s <= start)
    }
}
