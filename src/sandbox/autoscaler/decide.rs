//! Decide: from a plain-data [`Snapshot`] of one Pool and `now`, the [`Decision`]. No
//! client, no clock, no I/O: every branch is a table test in `decide_tests.rs`.
//!
//! One cycle, in order (the README's "Autoscaling"; the choices the design leaves open are
//! marked *policy*). [`decide()`] reads as this list: phases 1 and 6 are here, the mark sweep and
//! the session (2 and 5) in `session.rs`, scale-up (3) in `scale_up.rs`, scale-down (4) in
//! `scale_down.rs`:
//!
//! 1. **Idle-zero bookkeeping**, also while autoscaling is off: `idleZeroSince` is set
//!    when the Pool runs dry and cleared when it is not. *Policy*: "dry" means at most
//!    `idleThreshold` idle Pods (0 by default, and always 0 without a group), so the
//!    threshold is what makes the proactive trigger fire; "idle" always means claimable:
//!    idle, Ready, with an IP, unmarked ([`PoolPod::claimable`]).
//! 2. **Mark sweep**: a marked Pod that is claimed loses its mark at once (binding refuses
//!    marked Pods, so this only repairs a race elsewhere; no claimed Pod may be deleted);
//!    a mark past its expiry is removed and reported `Stuck`. *Policy*: a mark of an
//!    unknown decision is left to expire rather than removed early, because the Pod cache
//!    can show a new mark before the Pool cache shows the session that placed it.
//! 3. **Scale-up**, when the group is enabled:
//!    - *reactive*: `pending − idle − coming` Pods, where `coming` counts Pods starting,
//!      created but not yet cached, and still owed by the pool controller for the current
//!      `spec.replicas`. *Policy*: with no idle Pod this is exactly "queued claims minus
//!      starting Pods"; with a few idle Pods and a larger burst it reacts to the part the
//!      idle Pods cannot serve instead of waiting for them to be bound first.
//!    - *proactive*: the Pool has been dry for `quietWindowSeconds`, **and** a claim was
//!      bound within the last `idleTimeoutSeconds` (*policy*: growth needs evidence of use;
//!      without it, a scale-down that empties a Pool would be undone after the quiet window
//!      and redone after the idle timeout, forever), **and** the Pods on their way would
//!      not lift it out of dryness. It adds enough to have `idleThreshold + 1` idle Pods
//!      once queued claims are served (+1 with the defaults).
//!    - *floor*: a Pool below the group minimum (summed over siblings) is raised to it,
//!      regardless of cooldown and `maxStep` — the bound is configuration, not a signal.
//!    - Reactive and proactive growth honour `cooldownSeconds` since `lastScaleUpTime`,
//!      and `maxStep`. *Policy*: a reactive scale-up skips the cooldown when nothing at
//!      all is coming — claims are waiting that no Pod will ever serve, and since `coming`
//!      already counts every Pod asked for, nothing can be counted twice. The cooldown
//!      exists to rate-limit growth while earlier Pods are still starting.
//!    - The target never passes the group maximum (summed over siblings).
//!    - **Admission probe**: the target is cut to what the namespace accepts. A partial or
//!      rejected attempt sets `saturatedUntil = now + max(cooldown, 10 s)` and
//!      `scaleUpErrorMessage`, `Saturated=True`, a Warning Event; no attempt is made before
//!      `saturatedUntil`. A fully accepted attempt clears both fields; so does reaching
//!      `saturatedUntil` without a new limited attempt. *Policy*: a rejected attempt
//!      identical to the last one (same sizes, same message) changes nothing and publishes
//!      nothing, so a Pool parked at a full quota costs no writes.
//! 4. **Scale-down**, only when the Pool does not want to grow (even if it cannot), no
//!    claim is queued and no session was aborted this cycle:
//!    - candidates are claimable Pods idle for at least `idleTimeoutSeconds`, oldest
//!      first; *policy*: while the Pool is in use (a claim within `idleTimeoutSeconds`)
//!      `idleThreshold + 1` idle Pods are kept, the buffer the proactive trigger would
//!      restore;
//!    - the recommendation is `spec.replicas − candidates`, at least the group minimum;
//!      the Pool goes down to the **highest recommendation of the stabilization window**,
//!      by at most the scale-down `maxStep`. *Policy*: time the in-memory history does not
//!      cover (after a restart) counts as recommending the current size, so nothing is
//!      removed until a full window has been observed;
//!    - *policy*: a Pool above the group maximum (the maximum was lowered, or siblings
//!      grew) sheds idle Pods down to it, oldest first, regardless of idle age and
//!      stabilization (still `maxStep` per step, never a claimed Pod, never with claims
//!      queued);
//!    - a step is taken only when the Pool is settled: as many live Pods as
//!      `spec.replicas`, no create in flight, no unexpired mark. So there is one step at a
//!      time and a stale cache cannot mark twice.
//! 5. **Two-phase session**: the chosen Pods are marked with a decision id
//!    ([`decision_id`]: pool name + `now` in milliseconds) and an expiry (`now` +
//!    [`MARK_TTL`]); `spec.replicas` drops by their number; the pool controller deletes
//!    them. The session goes `Started` → `Stepped` (each further step) → `Completed`
//!    (no live Pod carries its mark any more), or `Aborted` (claims queued, or autoscaling
//!    off: its marks are removed and, while autoscaling is on, their Pods are given back
//!    to `spec.replicas`, as is a marked Pod found claimed), or `Stuck` (its marks
//!    expired: removed, and `spec.replicas` stays lowered — the pool controller still
//!    converges the Pod count to it with its own guarded deletes).
//! 6. **Requeue** at the earliest instant after `now` among: the cooldown's end,
//!    `saturatedUntil`, the quiet window's end, the end of "in use", the next idle Pod
//!    reaching its timeout, the stabilization window releasing a held size, a mark's
//!    expiry — and at most [`RESYNC`] away.
//!
//! Disabled (or no group): no scaling, `desiredReplicas = spec.replicas`, bookkeeping and
//! the mark sweep still run, an open session is `Aborted` (marks removed, nothing given
//! back: `spec.replicas` then belongs to the Env's baseline).
//!
//! Every timestamp written is truncated to the whole second, as the API server stores it,
//! so the next cycle reads back exactly what this one decided and a steady state compares
//! equal (no write, no Event).

mod predict;
mod scale_down;
mod scale_up;
mod session;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::snapshot::{PodState, PoolPod, Recommendation, ScaleDownMark, Snapshot};
use super::{
    MARK_TTL, RESYNC, SATURATION_BACKOFF_MIN, attempt_results, condition_types, reasons,
    session_states,
};
use crate::api::conditions::Desired;
use crate::api::sandbox::{
    ClaimHistory, PoolAutoScalingStatus, ScaleDownSession, ScaleUpAttempt, ScalingGroup,
};
use scale_down::ScaleDown;
use scale_up::{Demand, Growth};
use session::Sweep;

/// A Pod, with what a guarded patch or delete needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` the decision was made at: the patch tests it.
    pub resource_version: String,
}

impl PodRef {
    fn of(pod: &PoolPod) -> Self {
        Self {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            resource_version: pod.resource_version.clone(),
        }
    }
}

/// Set the `moonin.io/scale-down` annotation on a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodMark {
    /// The Pod.
    pub pod: PodRef,
    /// The annotation's value.
    pub mark: ScaleDownMark,
}

/// Why a mark is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnmarkReason {
    /// The mark expired with the Pod still there (`Stuck`).
    Expired,
    /// Its session was aborted.
    Aborted,
    /// The Pod is claimed: it must never be deleted by scale-down.
    Claimed,
}

/// Remove the `moonin.io/scale-down` annotation from a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodUnmark {
    /// The Pod.
    pub pod: PodRef,
    /// Why.
    pub reason: UnmarkReason,
}

/// Kubernetes Event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// `Normal` / `Warning` as Kubernetes spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An Event about the Pool, published once the writes succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason, from [`reasons`].
    pub reason: &'static str,
    /// Human note.
    pub note: String,
}

impl PoolEvent {
    fn normal(reason: &'static str, note: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            note,
        }
    }
    fn warning(reason: &'static str, note: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            note,
        }
    }
}

/// The answer of [`decide`]; the module docs of [`super`] give the commit contract.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The new `spec.replicas` (also `status.autoScaling.desiredReplicas`). It already
    /// counts every mark in [`marks`](Self::marks) as removed and every Pod given back by
    /// an abort as kept.
    pub desired_replicas: i32,
    /// The complete next `status.autoScaling`, written in the cycle's one status patch.
    pub status: PoolAutoScalingStatus,
    /// Pods to mark for removal (all with the same decision id and expiry).
    pub marks: Vec<PodMark>,
    /// Pods whose mark is to be removed.
    pub unmarks: Vec<PodUnmark>,
    /// What this cycle would choose on its own, for the stabilization history.
    pub recommendation: Recommendation,
    /// Events, to publish after the writes succeed.
    pub events: Vec<PoolEvent>,
    /// The autoscaler's conditions ([`condition_types`]), to merge into the Pool's.
    pub conditions: Vec<Desired>,
    /// When to decide again at the latest (always after `now`).
    pub requeue_at: Timestamp,
    /// The claim history to write as `status.claimHistory`, when it changed (a slot
    /// closed, or a new history started).
    pub claim_history: Option<ClaimHistory>,
}

impl Decision {
    /// True when committing this decision would write nothing to the Pool or its Pods and
    /// publish nothing (the conditions are compared by the commit, ignoring timestamps).
    pub fn changes_nothing(&self, snap: &Snapshot) -> bool {
        self.desired_replicas == snap.pool.replicas
            && self.status == snap.pool.auto_scaling
            && self.marks.is_empty()
            && self.unmarks.is_empty()
            && self.events.is_empty()
            && self.claim_history.is_none()
    }
}

/// The id of a scale-down decision: `<pool>-<now in Unix milliseconds>`. Deterministic
/// (no randomness), unique per Pool unless two sessions start in the same millisecond.
pub fn decision_id(pool: &str, now: Timestamp) -> String {
    format!("{pool}-{}", now.as_millisecond())
}

fn secs(s: i32) -> SignedDuration {
    SignedDuration::from_secs(i64::from(s.max(0)))
}

fn plus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.saturating_add(d).unwrap_or(t)
}

fn whole_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn to_i32(v: i64) -> i32 {
    i32::try_from(v.clamp(0, i64::from(i32::MAX))).unwrap_or(i32::MAX)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn is_open(s: &ScaleDownSession) -> bool {
    s.state == session_states::STARTED || s.state == session_states::STEPPED
}

fn names(pods: &[&PoolPod]) -> String {
    pods.iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The earliest of the instants after `now` that matter.
struct Requeue {
    now: Timestamp,
    at: Timestamp,
}

impl Requeue {
    fn new(now: Timestamp) -> Self {
        Self {
            now,
            at: plus(now, RESYNC),
        }
    }
    fn at(&mut self, t: Timestamp) {
        if t > self.now && t < self.at {
            self.at = t;
        }
    }
}

/// The Pool's Pods, counted.
struct Pods<'a> {
    /// Claimable Pods, oldest idle first (unknown idle time last, then by name).
    idle: Vec<&'a PoolPod>,
    /// Pods that are not terminating.
    live: i64,
    /// Live, unmarked Pods that are neither claimable nor claimed: they will be idle soon.
    starting: i64,
}

impl<'a> Pods<'a> {
    fn of(pods: &'a [PoolPod]) -> Self {
        let mut idle: Vec<&PoolPod> = pods.iter().filter(|p| p.claimable()).collect();
        idle.sort_by(|a, b| {
            (a.idle_since.is_none(), a.idle_since, &a.name).cmp(&(
                b.idle_since.is_none(),
                b.idle_since,
                &b.name,
            ))
        });
        let live = count(
            pods.iter()
                .filter(|p| p.state != PodState::Terminating)
                .count(),
        );
        let starting = count(
            pods.iter()
                .filter(|p| {
                    matches!(p.state, PodState::Starting | PodState::Idle)
                        && p.mark.is_none()
                        && !p.claimable()
                })
                .count(),
        );
        Self {
            idle,
            live,
            starting,
        }
    }

    /// How many Pods are idle.
    fn idle_count(&self) -> i64 {
        count(self.idle.len())
    }
}

/// The group's numbers, read once, negative values treated as 0 and steps as at least 1.
struct Policy {
    pool_min: i64,
    pool_max: i64,
    siblings: i64,
    cooldown: SignedDuration,
    quiet: SignedDuration,
    threshold: i64,
    up_step: i64,
    stabilization: SignedDuration,
    idle_timeout: SignedDuration,
    down_step: i64,
}

impl Policy {
    fn of(g: &ScalingGroup, snap: &Snapshot) -> Self {
        let siblings: i64 = snap
            .siblings
            .iter()
            .map(|s| i64::from(s.replicas.max(0)))
            .sum();
        let pool_max = (i64::from(g.max_replicas) - siblings).max(0);
        let pool_min = (i64::from(g.min_replicas) - siblings).clamp(0, pool_max);
        let up = &g.scale_up_policy;
        let down = &g.scale_down_policy;
        Self {
            pool_min,
            pool_max,
            siblings,
            cooldown: secs(up.cooldown_seconds),
            quiet: secs(up.quiet_window_seconds),
            threshold: i64::from(up.idle_threshold.max(0)),
            up_step: i64::from(up.max_step.max(1)),
            stabilization: secs(down.stabilization_window_seconds),
            idle_timeout: secs(down.idle_timeout_seconds),
            down_step: i64::from(down.max_step.max(1)),
        }
    }
}

/// One cycle's answer as it is built, phase by phase: the next status, the marks to
/// remove, the Events and the requeue instant (the seed's write accumulator, without I/O).
struct Cycle<'a> {
    snap: &'a Snapshot,
    now: Timestamp,
    /// `now` at whole seconds: every timestamp the cycle writes.
    stamp: Timestamp,
    /// `spec.replicas`, at least 0.
    spec: i64,
    status: PoolAutoScalingStatus,
    marks: Vec<PodMark>,
    unmarks: Vec<PodUnmark>,
    events: Vec<PoolEvent>,
    requeue: Requeue,
    /// The claim history to write, when it changed.
    history: Option<ClaimHistory>,
}

impl<'a> Cycle<'a> {
    fn new(snap: &'a Snapshot, now: Timestamp) -> Self {
        Self {
            snap,
            now,
            stamp: whole_second(now),
            spec: i64::from(snap.pool.replicas.max(0)),
            status: snap.pool.auto_scaling.clone(),
            marks: Vec::new(),
            unmarks: Vec::new(),
            events: Vec::new(),
            requeue: Requeue::new(now),
            history: None,
        }
    }

    /// The status as the last cycle wrote it.
    fn prev(&self) -> &'a PoolAutoScalingStatus {
        &self.snap.pool.auto_scaling
    }

    /// Phase 1, idle-zero bookkeeping (also while autoscaling is off): `idleZeroSince` is
    /// set when the Pool runs dry (at most `idleThreshold` idle Pods) and cleared when it
    /// is not. Whether the Pool is dry.
    fn idle_zero_bookkeeping(&mut self, pods: &Pods<'_>) -> bool {
        let threshold = self
            .snap
            .group
            .as_ref()
            .map_or(0, |g| i64::from(g.scale_up_policy.idle_threshold.max(0)));
        let dry = pods.idle_count() <= threshold;
        self.status.idle_zero_since = if dry {
            self.prev()
                .idle_zero_since
                .clone()
                .or(Some(Time(self.stamp)))
        } else {
            None
        };
        dry
    }

    /// Requeue at the boundaries the next cycles wait for: an idle Pod reaching its
    /// timeout, the end of "in use", the end of the quiet window.
    fn requeue_at_boundaries(&mut self, pods: &Pods<'_>, demand: &Demand, p: &Policy) {
        for pod in &pods.idle {
            if let Some(t) = pod.idle_since {
                self.requeue.at(plus(t, p.idle_timeout));
            }
        }
        if let Some(t) = self.snap.last_claim_at {
            self.requeue.at(plus(t, p.idle_timeout));
        }
        if let Some(t) = demand.dry_since {
            self.requeue.at(plus(t, p.quiet));
        }
    }

    /// The cycle of a Pool whose autoscaling is off (no group, or `enabled: false`): no
    /// scaling, `desiredReplicas = spec.replicas`; an open session is aborted, its marks
    /// removed and nothing given back (`spec.replicas` belongs to the Env's baseline).
    fn disabled(mut self, sweep: &Sweep<'_>) -> Decision {
        let why = match &self.snap.group {
            Some(g) => format!("autoscaling group {} is disabled", g.name),
            None => "the Pool has no autoscaling group".to_string(),
        };
        if sweep.still_open {
            self.abort_session(sweep, &format!("aborted: {why}; marks removed"));
        }
        scale_up::expire_saturation(&mut self.status, false, self.now);
        self.status.prediction = None;
        let replicas = self.snap.pool.replicas.max(0);
        self.status.desired_replicas = Some(replicas);
        self.requeue_at_expiries();
        Decision {
            desired_replicas: replicas,
            conditions: vec![
                scale_up::saturated_condition(&self.status),
                Desired::new(
                    condition_types::SCALING_LIMITED,
                    false,
                    reasons::AUTOSCALING_DISABLED,
                    why,
                ),
            ],
            status: self.status,
            marks: Vec::new(),
            unmarks: self.unmarks,
            recommendation: Recommendation {
                at: self.now,
                replicas,
            },
            events: self.events,
            requeue_at: self.requeue.at,
            claim_history: self.history,
        }
    }

    /// The Decision of an enabled cycle: the size, the recommendation this cycle would
    /// choose on its own, and `ScalingLimited` naming the group bound that held the Pool.
    fn finish(
        mut self,
        group: &ScalingGroup,
        p: &Policy,
        base: i64,
        growth: &Growth,
        down: &ScaleDown<'_>,
        desired: i64,
    ) -> Decision {
        self.status.desired_replicas = Some(to_i32(desired));
        let recommended = if desired > base {
            desired
        } else if down.evaluated {
            down.ideal
        } else {
            base
        };
        let limited = if growth.limited_by_max {
            Desired::new(
                condition_types::SCALING_LIMITED,
                true,
                reasons::GROUP_MAX_REACHED,
                format!(
                    "group {} allows {} Pod(s) over its Pools and the other Pools hold {}: this Pool stays at or below {}",
                    group.name, group.max_replicas, p.siblings, p.pool_max
                ),
            )
        } else if down.limited_by_min {
            Desired::new(
                condition_types::SCALING_LIMITED,
                true,
                reasons::GROUP_MIN_REACHED,
                format!(
                    "group {} keeps at least {} Pod(s) over its Pools and the other Pools hold {}: this Pool stays at or above {}",
                    group.name, group.min_replicas, p.siblings, p.pool_min
                ),
            )
        } else {
            Desired::new(
                condition_types::SCALING_LIMITED,
                false,
                reasons::WITHIN_BOUNDS,
                "",
            )
        };
        Decision {
            desired_replicas: to_i32(desired),
            conditions: vec![scale_up::saturated_condition(&self.status), limited],
            status: self.status,
            marks: self.marks,
            unmarks: self.unmarks,
            recommendation: Recommendation {
                at: self.now,
                replicas: to_i32(recommended),
            },
            events: self.events,
            requeue_at: self.requeue.at,
            claim_history: self.history,
        }
    }
}

/// Decides one cycle of the Pool autoscaler. Pure: the same snapshot and `now` give the
/// same decision. The phases, in the order of the module docs.
pub fn decide(snap: &Snapshot, now: Timestamp) -> Decision {
    let mut cycle = Cycle::new(snap, now);
    let pods = Pods::of(&snap.pods);
    let dry = cycle.idle_zero_bookkeeping(&pods);
    let sweep = cycle.sweep_marks();
    let Some(group) = snap.group.as_ref().filter(|g| g.enabled) else {
        return cycle.disabled(&sweep);
    };
    let policy = Policy::of(group, snap);
    let forecast = cycle.predict(&policy);
    let demand = Demand::of(&cycle, &pods, &sweep, &policy, dry, &forecast);
    let growth = Growth::limited(&demand, &policy, &cycle.status, now);
    let mut desired = cycle.probe_admission(&demand, &growth, &policy);
    let down = cycle.scale_down(&pods, &demand, &growth, &policy, &sweep);
    cycle.requeue_at_boundaries(&pods, &demand, &policy);
    cycle.scale_down_session(&demand, &down, &policy, &sweep, &mut desired);
    cycle.requeue_at_expiries();
    cycle.finish(group, &policy, demand.base, &growth, &down, desired)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
