//! The SandboxPool autoscaler: a plain-data [`Snapshot`] of one Pool goes into [`decide()`],
//! which returns the [`Decision`]: the new `spec.replicas`, the complete next
//! `status.autoScaling`, the Pods to mark or unmark, the conditions, the Events and when to
//! look again. `snapshot.rs` and `decide.rs` are its pure core: no client, no clock, no I/O
//! (ARCHITECTURE.md, rule 1); `commit.rs` performs the decision (Load is the pool's,
//! [`crate::sandbox::load`]).
//!
//! Every name the autoscaler writes (annotation key, condition types, reasons, session
//! states, attempt results) is defined once, here; Load and Commit use these constants.
//!
//! The commit contract, in order:
//! 1. mark ([`Decision::marks`]) and unmark ([`Decision::unmarks`]) Pods, each patch
//!    guarded by the Pod's `resourceVersion`. If any **mark** fails (the Pod changed —
//!    usually a claim won the race), remove the marks this decision placed, write nothing
//!    else and requeue at once: the next Load sees the change. A failed unmark is ignored
//!    (the Pod is gone, or the next decision sees it again).
//! 2. write `spec.replicas` = [`Decision::desired_replicas`] (server-side apply, field
//!    manager `moonin-sandbox-autoscaler`, guarded by the Pool's `resourceVersion`), when
//!    it changed. If it fails (a conflict when the Pool changed since Load), remove the
//!    marks of step 1 (no status would name their decision, so they would keep their
//!    Pods from claims until they expire), write nothing else and requeue at once;
//! 3. delete the Pods the open session marked (the second phase of a scale-down), each
//!    with a UID + `resourceVersion` precondition, never a claimed Pod; a refused delete is
//!    retried soon;
//! 4. write the status once: `autoScaling` = [`Decision::status`] and the
//!    [`Decision::conditions`] merged into the Pool's conditions, when either changed;
//! 5. publish [`Decision::events`], only after the writes succeeded;
//! 6. record [`Decision::recommendation`] in the Pool's [`RecommendationHistory`] and
//!    requeue at [`Decision::requeue_at`].
//!
//! Steps 1–3 come before the pool plan, which then works to the new size; step 4 is the
//! Pool's one status write, shared with the pool plan's counts and conditions.

pub mod commit;
pub mod decide;
pub mod forecast;
pub mod snapshot;

use jiff::SignedDuration;

pub use decide::{
    Decision, EventType, PodMark, PodRef, PodUnmark, PoolEvent, UnmarkReason, decide, decision_id,
};
pub use snapshot::{
    Admission, Arrival, ForecastInput, InFlight, PodState, PoolPod, PoolView, QueueStats,
    Recommendation, RecommendationHistory, ScaleDownMark, SiblingPool, Snapshot,
};

/// How long a scale-down mark protects a Pod from binding. The pool controller deletes a
/// marked Pod within a reconcile (well under a second); a minute leaves room for retries
/// and a leader change, and bounds how long a crash can leave an idle Pod unclaimable.
pub const MARK_TTL: SignedDuration = SignedDuration::from_secs(60);

/// The shortest time a limited scale-up keeps the Pool `Saturated` before the next attempt
/// (`saturatedUntil = now + max(cooldownSeconds, this)`), so a zero cooldown cannot turn a
/// full quota into a hot loop of rejected attempts.
pub const SATURATION_BACKOFF_MIN: SignedDuration = SignedDuration::from_secs(10);

/// The slow safety resync: a Pool is decided again at least this often (and the sandbox
/// controllers look at every claim and Env at least this often too).
pub const RESYNC: SignedDuration = SignedDuration::from_mins(5);

/// Condition types the autoscaler owns on a `SandboxPool` (it is their only writer).
pub mod condition_types {
    /// True while the namespace accepted only part of (or none of) the last scale-up.
    pub const SATURATED: &str = "Saturated";
    /// True while the group's bounds stop the Pool from growing or shrinking as it would.
    pub const SCALING_LIMITED: &str = "ScalingLimited";
    /// Every one of them: a Pool the autoscaler no longer sizes keeps none.
    pub const ALL: [&str; 2] = [SATURATED, SCALING_LIMITED];
}

/// Condition and Event reasons.
pub mod reasons {
    /// Condition `Saturated=True`, Event (Warning): the scale-up was only partly accepted.
    pub const PARTIAL_SCALE_UP: &str = "PartialScaleUp";
    /// Condition `Saturated=True`, Event (Warning): no Pod of the scale-up was accepted.
    pub const SCALE_UP_REJECTED: &str = "ScaleUpRejected";
    /// Condition `Saturated=False`.
    pub const NOT_SATURATED: &str = "NotSaturated";
    /// Condition `ScalingLimited=True`: the group's `maxReplicas` caps a wanted scale-up.
    pub const GROUP_MAX_REACHED: &str = "GroupMaxReached";
    /// Condition `ScalingLimited=True`: the group's `minReplicas` keeps idle Pods that
    /// would otherwise be removed.
    pub const GROUP_MIN_REACHED: &str = "GroupMinReached";
    /// Condition `ScalingLimited=False`.
    pub const WITHIN_BOUNDS: &str = "WithinBounds";
    /// Condition `ScalingLimited=False`: no group, or the group is disabled.
    pub const AUTOSCALING_DISABLED: &str = "AutoscalingDisabled";
    /// Event (Normal): the Pool grew as wanted.
    pub const SCALED_UP: &str = "ScaledUp";
    /// Event (Normal): the Pool grew ahead of the claims its history predicts.
    pub const PREDICTED_SCALE_UP: &str = "PredictedScaleUp";
    /// Event (Warning): predictive warm-up cannot run (an unknown time zone).
    pub const PREDICTION_UNAVAILABLE: &str = "PredictionUnavailable";
    /// Event (Normal): a scale-down session marked its first Pods.
    pub const SCALE_DOWN_STARTED: &str = "ScaleDownStarted";
    /// Event (Normal): a scale-down session marked more Pods.
    pub const SCALE_DOWN_STEPPED: &str = "ScaleDownStepped";
    /// Event (Normal): every Pod a session marked is gone.
    pub const SCALE_DOWN_COMPLETED: &str = "ScaleDownCompleted";
    /// Event (Normal): claims arrived (or autoscaling was switched off) mid-session; the
    /// session's marks are removed.
    pub const SCALE_DOWN_ABORTED: &str = "ScaleDownAborted";
    /// Event (Warning): marks expired without their Pods being deleted; marks removed.
    pub const SCALE_DOWN_STUCK: &str = "ScaleDownStuck";
    /// Event (Warning): a claimed Pod carried a scale-down mark (a binding raced the mark
    /// elsewhere); the mark is removed so the Pod is never deleted, and its replica kept.
    pub const MARKED_POD_CLAIMED: &str = "MarkedPodClaimed";
}

/// Values of `status.autoScaling.scaleDownSession.state`.
pub mod session_states {
    /// The first Pods are marked.
    pub const STARTED: &str = "Started";
    /// More Pods were marked after the previous ones were deleted.
    pub const STEPPED: &str = "Stepped";
    /// Every marked Pod is gone (terminal).
    pub const COMPLETED: &str = "Completed";
    /// Claims arrived or autoscaling was switched off; marks removed (terminal).
    pub const ABORTED: &str = "Aborted";
    /// Marks expired with their Pods still there; marks removed (terminal).
    pub const STUCK: &str = "Stuck";
}

/// Values of `status.autoScaling.lastScaleUpAttempt.result`.
pub mod attempt_results {
    /// Every Pod asked for was accepted.
    pub const FULL: &str = "Full";
    /// Some, not all, were accepted.
    pub const PARTIAL: &str = "Partial";
    /// None was accepted.
    pub const REJECTED: &str = "Rejected";
}
