//! Decide: from a plain-data [`Snapshot`] of one Pool and `now`, the [`Decision`]. No
//! client, no clock, no I/O: every branch is a table test in `decide_tests.rs`.
//!
//! One cycle, in order (DESIGN.md §2.2; the choices DESIGN.md leaves open are marked
//! *policy*):
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
//!      `spec.replicas`, nothing in flight, no unexpired mark. So there is one step at a
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

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::snapshot::{PodState, PoolPod, Recommendation, ScaleDownMark, Snapshot};
use super::{
    MARK_TTL, RESYNC, SATURATION_BACKOFF_MIN, attempt_results, condition_types, reasons,
    session_states,
};
use crate::api::conditions::Desired;
use crate::api::sandbox::{PoolAutoScalingStatus, ScaleDownSession, ScaleUpAttempt, ScalingGroup};

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
}

/// What the mark sweep found.
#[derive(Default)]
struct Sweep<'a> {
    /// Claimed Pods that carry a mark.
    claimed: Vec<&'a PoolPod>,
    /// How many of those carry the open session's mark.
    claimed_ours: i64,
    /// Live, unclaimed Pods whose open-session mark expired.
    expired_ours: Vec<&'a PoolPod>,
    /// Live, unclaimed Pods whose expired mark belongs to another decision.
    expired_other: Vec<&'a PoolPod>,
    /// Live, unclaimed Pods with the open session's unexpired mark (awaiting deletion).
    pending_ours: Vec<&'a PoolPod>,
    /// Some live Pod carries an unexpired mark.
    unexpired: bool,
}

impl<'a> Sweep<'a> {
    fn of(pods: &'a [PoolPod], open: Option<&str>, now: Timestamp) -> Self {
        let mut s = Sweep::default();
        for pod in pods.iter().filter(|p| p.state != PodState::Terminating) {
            let Some(mark) = &pod.mark else { continue };
            let ours = open == Some(mark.decision.as_str());
            let expired = mark.expires_at <= now;
            s.unexpired |= !expired;
            if pod.state == PodState::Claimed {
                s.claimed.push(pod);
                s.claimed_ours += i64::from(ours);
            } else if expired && ours {
                s.expired_ours.push(pod);
            } else if expired {
                s.expired_other.push(pod);
            } else if ours {
                s.pending_ours.push(pod);
            }
        }
        s
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

/// Decides one cycle of the Pool autoscaler. Pure: the same snapshot and `now` give the
/// same decision. See the module docs for the rules.
pub fn decide(snap: &Snapshot, now: Timestamp) -> Decision {
    let stamp = whole_second(now);
    let prev = &snap.pool.auto_scaling;
    let spec = i64::from(snap.pool.replicas.max(0));
    let pods = Pods::of(&snap.pods);
    let idle = count(pods.idle.len());
    let mut status = prev.clone();
    let mut events = Vec::new();
    let mut unmarks = Vec::new();
    let mut requeue = Requeue::new(now);

    // 1. Idle-zero bookkeeping.
    let threshold = snap
        .group
        .as_ref()
        .map_or(0, |g| i64::from(g.scale_up_policy.idle_threshold.max(0)));
    let dry = idle <= threshold;
    status.idle_zero_since = if dry {
        prev.idle_zero_since.clone().or(Some(Time(stamp)))
    } else {
        None
    };

    // 2. Mark sweep.
    let open_id = prev
        .scale_down_session
        .as_ref()
        .filter(|s| is_open(s))
        .map(|s| s.id.clone());
    let sweep = Sweep::of(&snap.pods, open_id.as_deref(), now);
    for pod in &sweep.claimed {
        unmarks.push(PodUnmark {
            pod: PodRef::of(pod),
            reason: UnmarkReason::Claimed,
        });
    }
    for pod in sweep.expired_ours.iter().chain(&sweep.expired_other) {
        unmarks.push(PodUnmark {
            pod: PodRef::of(pod),
            reason: UnmarkReason::Expired,
        });
    }
    if !sweep.claimed.is_empty() {
        events.push(PoolEvent::warning(
            reasons::MARKED_POD_CLAIMED,
            format!(
                "claimed Pod(s) {} carried a scale-down mark; mark removed, the Pod is kept",
                names(&sweep.claimed)
            ),
        ));
    }
    if let Some(s) = status.scale_down_session.as_mut()
        && is_open(s)
        && !sweep.expired_ours.is_empty()
    {
        s.state = session_states::STUCK.to_string();
        s.updated_at = Time(stamp);
        let msg = format!(
            "mark(s) on {} expired before the Pod(s) were deleted; marks removed",
            names(&sweep.expired_ours)
        );
        events.push(PoolEvent::warning(
            reasons::SCALE_DOWN_STUCK,
            format!("scale-down {}: {msg}", s.id),
        ));
        s.message = Some(msg);
    }
    if !sweep.expired_other.is_empty() {
        let mut decisions: Vec<&str> = sweep
            .expired_other
            .iter()
            .filter_map(|p| p.mark.as_ref().map(|m| m.decision.as_str()))
            .collect();
        decisions.sort_unstable();
        decisions.dedup();
        events.push(PoolEvent::warning(
            reasons::SCALE_DOWN_STUCK,
            format!(
                "expired scale-down mark(s) of decision(s) {} removed from {}",
                decisions.join(", "),
                names(&sweep.expired_other)
            ),
        ));
    }
    let still_open = status.scale_down_session.as_ref().is_some_and(is_open);

    let enabled = snap.group.as_ref().filter(|g| g.enabled);
    let Some(group) = enabled else {
        return disabled(
            snap, now, stamp, status, events, unmarks, &sweep, still_open,
        );
    };
    let p = Policy::of(group, snap);

    // 3. Scale-up.
    let pending = i64::from(snap.queue.pending.max(0));
    let creates = i64::from(snap.in_flight.creates.max(0));
    let deletes = i64::from(snap.in_flight.deletes.max(0));
    let owed = (spec - (pods.live - deletes) - creates).max(0);
    let coming = pods.starting + creates + owed;
    let in_use = snap
        .last_claim_at
        .is_some_and(|t| now < plus(t, p.idle_timeout));
    let dry_since = status.idle_zero_since.as_ref().map(|t| t.0);
    let quiet_over = dry_since.is_some_and(|t| plus(t, p.quiet) <= now);
    // Only queued claims abort a session: a proactive wish does not undo a scale-down
    // (the in-use buffer keeps a Pool from running dry through one, and a Pool shedding
    // above the group max could not grow anyway). The session's marked Pods then return
    // to the Pool and serve the claims first.
    let abort = still_open && pending > 0;
    let returned = if abort {
        count(sweep.pending_ours.len())
    } else {
        0
    };
    let given_back = returned + sweep.claimed_ours;
    let base = spec + given_back;
    let reactive = (pending - idle - coming - returned).max(0);
    let projected_idle = idle + coming + returned - pending;
    let proactive = if dry && in_use && quiet_over && projected_idle <= p.threshold {
        p.threshold + 1 - projected_idle
    } else {
        0
    };
    let want = reactive.max(proactive);

    let cooldown_end = status
        .last_scale_up_time
        .as_ref()
        .map(|t| plus(t.0, p.cooldown));
    let in_cooldown = cooldown_end.is_some_and(|t| t > now);
    let bypass = reactive > 0 && coming + returned == 0;
    let step = if want > 0 && (!in_cooldown || bypass) {
        want.min(p.up_step)
    } else {
        0
    };
    let limited_by_max = want > 0 && base + want.min(p.up_step) > p.pool_max;
    let grown = if base >= p.pool_max {
        base
    } else {
        (base + step).min(p.pool_max)
    };
    let target = grown.max(p.pool_min);
    let wants_to_grow = want > 0 || p.pool_min > base;

    let mut desired = base;
    let mut attempted = false;
    if target > base {
        let gate = prev
            .saturated_until
            .as_ref()
            .map(|t| t.0)
            .filter(|t| *t > now);
        if let Some(until) = gate {
            requeue.at(until);
        } else {
            attempted = true;
            let accepted = match snap.admission.headroom {
                None => target,
                Some(h) => target.min(base + i64::from(h.max(0))),
            };
            let result = if accepted == target {
                attempt_results::FULL
            } else if accepted > base {
                attempt_results::PARTIAL
            } else {
                attempt_results::REJECTED
            };
            let attempt = ScaleUpAttempt {
                from: to_i32(base),
                target: to_i32(target),
                accepted: to_i32(accepted),
                result: result.to_string(),
            };
            desired = accepted;
            if accepted > base {
                status.last_scale_up_time = Some(Time(stamp));
            }
            let why = growth_reason(snap, &p, now, reactive, proactive, idle, coming, base);
            if result == attempt_results::FULL {
                status.saturated_until = None;
                status.scale_up_error_message = None;
                events.push(PoolEvent::normal(
                    reasons::SCALED_UP,
                    format!("scaled up from {base} to {target}: {why}"),
                ));
            } else {
                let message = snap.admission.message.clone().unwrap_or_else(|| {
                    format!(
                        "the namespace accepts {} more Pod(s)",
                        snap.admission.headroom.unwrap_or(0).max(0)
                    )
                });
                let repeat = result == attempt_results::REJECTED
                    && prev.last_scale_up_attempt.as_ref() == Some(&attempt)
                    && prev.scale_up_error_message.as_ref() == Some(&message)
                    && prev.saturated_until.is_some();
                if !repeat {
                    let backoff = p.cooldown.max(SATURATION_BACKOFF_MIN);
                    status.saturated_until = Some(Time(plus(stamp, backoff)));
                    status.scale_up_error_message = Some(message.clone());
                    events.push(if result == attempt_results::PARTIAL {
                        PoolEvent::warning(
                            reasons::PARTIAL_SCALE_UP,
                            format!(
                                "scaled up from {base} to {accepted} of {target} wanted ({why}): {message}"
                            ),
                        )
                    } else {
                        PoolEvent::warning(
                            reasons::SCALE_UP_REJECTED,
                            format!("cannot scale up from {base} to {target} ({why}): {message}"),
                        )
                    });
                }
            }
            status.last_scale_up_attempt = Some(attempt);
        }
    }
    expire_saturation(&mut status, attempted, now);
    if let Some(t) = &status.last_scale_up_time {
        requeue.at(plus(t.0, p.cooldown));
    }

    // 4. Scale-down.
    let mut ideal = base;
    let mut limited_by_min = false;
    let mut chosen: Vec<&PoolPod> = Vec::new();
    let evaluate_down = !wants_to_grow && pending == 0 && !abort;
    if evaluate_down {
        let old_enough = count(
            pods.idle
                .iter()
                .filter(|pod| {
                    pod.idle_since
                        .is_some_and(|t| plus(t, p.idle_timeout) <= now)
                })
                .count(),
        );
        let buffer = if in_use { p.threshold + 1 } else { 0 };
        let removable = old_enough.min((idle - buffer).max(0));
        let unfloored = base - removable;
        limited_by_min = removable > 0 && unfloored < p.pool_min;
        ideal = unfloored.max(p.pool_min).min(base);
        if base > p.pool_max {
            ideal = ideal.min(p.pool_max);
        }
        let window_start = now.checked_sub(p.stabilization).unwrap_or(Timestamp::MIN);
        let in_window = || {
            snap.history
                .entries
                .iter()
                .filter(move |r| r.at > window_start)
        };
        let covered = snap.history.covers(window_start);
        let mut stabilized = ideal;
        for r in in_window() {
            stabilized = stabilized.max(i64::from(r.replicas));
        }
        if !covered {
            stabilized = stabilized.max(base);
        }
        if stabilized > ideal && base > ideal {
            // The stabilized size drops once every recommendation holding it has left
            // the window (and, when the history is short, once it covers the window).
            let mut release = in_window()
                .filter(|r| i64::from(r.replicas) >= stabilized)
                .map(|r| r.at)
                .max();
            if !covered && base >= stabilized {
                let since = snap.history.since.unwrap_or(now);
                release = Some(release.map_or(since, |t| t.max(since)));
            }
            if let Some(t) = release {
                requeue.at(plus(t, p.stabilization));
            }
        }
        let mut lower_to = stabilized.max(base - p.down_step);
        if base > p.pool_max {
            lower_to = lower_to.min(p.pool_max.max(base - p.down_step));
        }
        let n = usize::try_from((base - lower_to).clamp(0, idle)).unwrap_or(0);
        let settled =
            creates == 0 && deletes == 0 && pods.live == spec && !sweep.unexpired && base == spec;
        if n > 0 && settled {
            chosen = pods.idle[..n].to_vec();
        }
    }
    for pod in &pods.idle {
        if let Some(t) = pod.idle_since {
            requeue.at(plus(t, p.idle_timeout));
        }
    }
    if let Some(t) = snap.last_claim_at {
        requeue.at(plus(t, p.idle_timeout));
    }
    if let Some(t) = dry_since {
        requeue.at(plus(t, p.quiet));
    }

    // 5. The session.
    let mut marks = Vec::new();
    if abort && let Some(s) = status.scale_down_session.as_mut() {
        for pod in &sweep.pending_ours {
            unmarks.push(PodUnmark {
                pod: PodRef::of(pod),
                reason: UnmarkReason::Aborted,
            });
        }
        let msg = format!(
            "aborted: {pending} claim(s) queued; {returned} marked Pod(s) returned to the Pool ({spec} → {base})"
        );
        s.state = session_states::ABORTED.to_string();
        s.updated_at = Time(stamp);
        s.removed = to_i32(i64::from(s.removed) - given_back);
        events.push(PoolEvent::normal(
            reasons::SCALE_DOWN_ABORTED,
            format!("scale-down {}: {msg}", s.id),
        ));
        s.message = Some(msg);
    } else if sweep.claimed_ours > 0
        && let Some(s) = status.scale_down_session.as_mut()
    {
        s.removed = to_i32(i64::from(s.removed) - sweep.claimed_ours);
        s.updated_at = Time(stamp);
    }
    if !chosen.is_empty() {
        let n = count(chosen.len());
        desired = base - n;
        status.last_scale_down_time = Some(Time(stamp));
        let why = if base > p.pool_max {
            format!("above the group maximum of {}", p.pool_max)
        } else {
            format!("idle for at least {}s", p.idle_timeout.as_secs())
        };
        let open = status.scale_down_session.as_mut().filter(|s| is_open(s));
        let (id, reason) = match open {
            Some(s) => {
                s.state = session_states::STEPPED.to_string();
                s.target = to_i32(desired);
                s.removed = to_i32(i64::from(s.removed) + n);
                s.updated_at = Time(stamp);
                s.message = Some(format!("marked {} ({why})", names(&chosen)));
                (s.id.clone(), reasons::SCALE_DOWN_STEPPED)
            }
            None => {
                let id = decision_id(&snap.pool.name, now);
                status.scale_down_session = Some(ScaleDownSession {
                    id: id.clone(),
                    state: session_states::STARTED.to_string(),
                    from: to_i32(base),
                    target: to_i32(desired),
                    started_at: Time(stamp),
                    updated_at: Time(stamp),
                    removed: to_i32(n),
                    message: Some(format!("marked {} ({why})", names(&chosen))),
                });
                (id, reasons::SCALE_DOWN_STARTED)
            }
        };
        events.push(PoolEvent::normal(
            reason,
            format!(
                "scale-down {id}: marked {} ({why}); {base} → {desired}",
                names(&chosen)
            ),
        ));
        let mark = ScaleDownMark {
            decision: id,
            expires_at: plus(stamp, MARK_TTL),
        };
        requeue.at(mark.expires_at);
        marks = chosen
            .iter()
            .map(|pod| PodMark {
                pod: PodRef::of(pod),
                mark: mark.clone(),
            })
            .collect();
    } else if !abort
        && let Some(s) = status.scale_down_session.as_mut()
        && is_open(s)
        && sweep.pending_ours.is_empty()
        && deletes == 0
    {
        let msg = format!(
            "completed: {} → {desired}, {} Pod(s) removed",
            s.from, s.removed
        );
        s.state = session_states::COMPLETED.to_string();
        s.updated_at = Time(stamp);
        events.push(PoolEvent::normal(
            reasons::SCALE_DOWN_COMPLETED,
            format!("scale-down {}: {msg}", s.id),
        ));
        s.message = Some(msg);
    }
    mark_requeue(&mut requeue, &snap.pods, &unmarks);
    if let Some(t) = &status.saturated_until {
        requeue.at(t.0);
    }

    status.desired_replicas = Some(to_i32(desired));
    let recommendation = Recommendation {
        at: now,
        replicas: to_i32(if desired > base {
            desired
        } else if evaluate_down {
            ideal
        } else {
            base
        }),
    };
    let limited = if limited_by_max {
        Desired::new(
            condition_types::SCALING_LIMITED,
            true,
            reasons::GROUP_MAX_REACHED,
            format!(
                "group {} allows {} Pod(s) over its Pools and the other Pools hold {}: this Pool stays at or below {}",
                group.name, group.max_replicas, p.siblings, p.pool_max
            ),
        )
    } else if limited_by_min {
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
        conditions: vec![saturated_condition(&status), limited],
        status,
        marks,
        unmarks,
        recommendation,
        events,
        requeue_at: requeue.at,
    }
}

/// The cycle of a Pool whose autoscaling is off (no group, or `enabled: false`).
#[allow(clippy::too_many_arguments)]
fn disabled(
    snap: &Snapshot,
    now: Timestamp,
    stamp: Timestamp,
    mut status: PoolAutoScalingStatus,
    mut events: Vec<PoolEvent>,
    mut unmarks: Vec<PodUnmark>,
    sweep: &Sweep<'_>,
    still_open: bool,
) -> Decision {
    let why = match &snap.group {
        Some(g) => format!("autoscaling group {} is disabled", g.name),
        None => "the Pool has no autoscaling group".to_string(),
    };
    if still_open && let Some(s) = status.scale_down_session.as_mut() {
        for pod in &sweep.pending_ours {
            unmarks.push(PodUnmark {
                pod: PodRef::of(pod),
                reason: UnmarkReason::Aborted,
            });
        }
        let msg = format!("aborted: {why}; marks removed");
        s.state = session_states::ABORTED.to_string();
        s.updated_at = Time(stamp);
        events.push(PoolEvent::normal(
            reasons::SCALE_DOWN_ABORTED,
            format!("scale-down {}: {msg}", s.id),
        ));
        s.message = Some(msg);
    }
    expire_saturation(&mut status, false, now);
    status.desired_replicas = Some(snap.pool.replicas.max(0));
    let mut requeue = Requeue::new(now);
    mark_requeue(&mut requeue, &snap.pods, &unmarks);
    if let Some(t) = &status.saturated_until {
        requeue.at(t.0);
    }
    Decision {
        desired_replicas: snap.pool.replicas.max(0),
        conditions: vec![
            saturated_condition(&status),
            Desired::new(
                condition_types::SCALING_LIMITED,
                false,
                reasons::AUTOSCALING_DISABLED,
                why,
            ),
        ],
        status,
        marks: Vec::new(),
        unmarks,
        recommendation: Recommendation {
            at: now,
            replicas: snap.pool.replicas.max(0),
        },
        events,
        requeue_at: requeue.at,
    }
}

/// Clears the saturation fields once `saturatedUntil` has passed without a new attempt.
fn expire_saturation(status: &mut PoolAutoScalingStatus, attempted: bool, now: Timestamp) {
    if !attempted && status.saturated_until.as_ref().is_some_and(|t| t.0 <= now) {
        status.saturated_until = None;
        status.scale_up_error_message = None;
    }
}

/// Requeue at the expiry of every mark left in place.
fn mark_requeue(requeue: &mut Requeue, pods: &[PoolPod], unmarks: &[PodUnmark]) {
    for pod in pods.iter().filter(|p| p.state != PodState::Terminating) {
        if let Some(m) = &pod.mark
            && !unmarks.iter().any(|u| u.pod.name == pod.name)
        {
            requeue.at(m.expires_at);
        }
    }
}

/// `Saturated`, from the next status: True while `saturatedUntil` is set.
fn saturated_condition(status: &PoolAutoScalingStatus) -> Desired {
    if status.saturated_until.is_none() {
        return Desired::new(
            condition_types::SATURATED,
            false,
            reasons::NOT_SATURATED,
            "",
        );
    }
    let attempt = status.last_scale_up_attempt.as_ref();
    let reason = match attempt.map(|a| a.result.as_str()) {
        Some(attempt_results::PARTIAL) => reasons::PARTIAL_SCALE_UP,
        _ => reasons::SCALE_UP_REJECTED,
    };
    let sizes = attempt.map_or(String::new(), |a| {
        format!(
            "; the last scale-up from {} to {} was accepted up to {}",
            a.from, a.target, a.accepted
        )
    });
    Desired::new(
        condition_types::SATURATED,
        true,
        reason,
        format!(
            "{}{sizes}",
            status.scale_up_error_message.clone().unwrap_or_default()
        ),
    )
}

/// Why the Pool grows, for the Event.
#[allow(clippy::too_many_arguments)]
fn growth_reason(
    snap: &Snapshot,
    p: &Policy,
    now: Timestamp,
    reactive: i64,
    proactive: i64,
    idle: i64,
    coming: i64,
    base: i64,
) -> String {
    if reactive > 0 {
        let oldest = snap.queue.oldest_pending_since.map_or(String::new(), |t| {
            format!(
                ", the oldest waiting {}s",
                now.duration_since(t).as_secs().max(0)
            )
        });
        format!(
            "{} claim(s) queued{oldest}, {idle} idle, {coming} Pod(s) on the way",
            snap.queue.pending
        )
    } else if proactive > 0 {
        format!(
            "{idle} idle Pod(s) (threshold {}) for at least {}s",
            p.threshold,
            p.quiet.as_secs()
        )
    } else if p.pool_min > base {
        format!("below the group minimum ({} for this Pool)", p.pool_min)
    } else {
        "growth requested".to_string()
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
