//! Scale-up (phase 3 of the module docs of [`super`]): the demand (reactive and proactive),
//! the limits (cooldown, `maxStep`, the group's maximum and minimum), then the admission
//! probe and the saturation it records.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::predict::Forecast;
use super::{
    Cycle, Pods, Policy, PoolAutoScalingStatus, PoolEvent, SATURATION_BACKOFF_MIN, ScaleUpAttempt,
    Snapshot, Sweep, attempt_results, condition_types, count, plus, reasons, to_i32,
};
use crate::api::conditions::Desired;

/// What the Pool is asked for this cycle, and the size it starts from.
pub(super) struct Demand {
    /// Claims queued for a Pod of this Pool.
    pub pending: i64,
    /// Pods this process created that the cache does not show yet.
    pub creates: i64,
    /// Idle Pods.
    pub idle: i64,
    /// Pods on their way: starting, created but not yet cached, and still owed by the
    /// pool controller for the current `spec.replicas`.
    pub coming: i64,
    /// A claim was bound within the last `idleTimeoutSeconds`.
    pub in_use: bool,
    /// Since when the Pool has been dry (the new `idleZeroSince`).
    pub dry_since: Option<Timestamp>,
    /// Queued claims abort the open scale-down session (a proactive wish does not: the
    /// in-use buffer keeps a Pool from running dry through one, and a Pool shedding above
    /// the group max could not grow anyway).
    pub abort: bool,
    /// The aborted session's marked Pods, given back to serve the claims first.
    pub returned: i64,
    /// `returned` plus the claimed Pods that carried the open session's mark.
    pub given_back: i64,
    /// The size the cycle starts from: `spec.replicas` plus what is given back.
    pub base: i64,
    /// Reactive growth: queued claims that no idle or coming Pod will serve.
    pub reactive: i64,
    /// Proactive growth: Pods to add so a dry Pool in use has `idleThreshold + 1` idle.
    pub proactive: i64,
    /// Idle or coming Pods the prediction keeps beyond the queued claims (0 when off).
    pub ready: i64,
    /// Predictive growth: Pods to add to have `ready` Pods idle or coming once queued
    /// claims are served.
    pub predictive: i64,
}

impl Demand {
    /// The demand of this cycle, after the bookkeeping and the mark sweep.
    pub fn of(
        cycle: &Cycle<'_>,
        pods: &Pods<'_>,
        sweep: &Sweep<'_>,
        p: &Policy,
        dry: bool,
        forecast: &Forecast,
    ) -> Self {
        let snap = cycle.snap;
        let now = cycle.now;
        let pending = i64::from(snap.queue.pending.max(0));
        let creates = i64::from(snap.in_flight.creates.max(0));
        let owed = (cycle.spec - pods.live - creates).max(0);
        let coming = pods.starting + creates + owed;
        let abort = sweep.still_open && pending > 0;
        let returned = if abort {
            count(sweep.pending_ours.len())
        } else {
            0
        };
        let given_back = returned + sweep.claimed_ours;
        let dry_since = cycle.status.idle_zero_since.as_ref().map(|t| t.0);
        let mut demand = Self {
            pending,
            creates,
            idle: pods.idle_count(),
            coming,
            in_use: snap
                .last_claim_at
                .is_some_and(|t| now < plus(t, p.idle_timeout)),
            dry_since,
            abort,
            returned,
            given_back,
            base: cycle.spec + given_back,
            reactive: 0,
            proactive: 0,
            ready: forecast.ready,
            predictive: 0,
        };
        demand.reactive = demand.reactive_growth();
        demand.proactive = demand.proactive_growth(p, dry, now);
        demand.predictive = (demand.ready - demand.projected_idle()).max(0);
        demand
    }

    /// Reactive scale-up: `pending − idle − coming` Pods (the given-back Pods serve too).
    fn reactive_growth(&self) -> i64 {
        (self.pending - self.idle - self.coming - self.returned).max(0)
    }

    /// Idle Pods once the Pods on their way are Ready and the queued claims are served.
    fn projected_idle(&self) -> i64 {
        self.idle + self.coming + self.returned - self.pending
    }

    /// Whether the prediction, rather than claims or dryness, asks for the growth.
    pub fn predicted(&self) -> bool {
        self.predictive > self.reactive.max(self.proactive)
    }

    /// Proactive scale-up: the Pool has been dry for the quiet window, a claim was bound
    /// within the idle timeout, and the Pods on their way would not lift it out of
    /// dryness; enough to have `idleThreshold + 1` idle Pods once queued claims are served.
    fn proactive_growth(&self, p: &Policy, dry: bool, now: Timestamp) -> i64 {
        let quiet_over = self.dry_since.is_some_and(|t| plus(t, p.quiet) <= now);
        let projected_idle = self.projected_idle();
        if dry && self.in_use && quiet_over && projected_idle <= p.threshold {
            p.threshold + 1 - projected_idle
        } else {
            0
        }
    }
}

/// The growth the limits allow.
pub(super) struct Growth {
    /// The size to reach: the base grown by at most `maxStep` (when the cooldown allows),
    /// never past the group's maximum, at least its minimum.
    pub target: i64,
    /// The Pool wants to grow (even if it cannot): no scale-down this cycle.
    pub wants_to_grow: bool,
    /// The group's maximum cuts a wanted scale-up.
    pub limited_by_max: bool,
}

impl Growth {
    /// Applies the limits to the demand: `cooldownSeconds` since `lastScaleUpTime` (a
    /// reactive scale-up skips it when nothing at all is coming), `maxStep`, the group's
    /// maximum; a Pool below the group's minimum is raised to it regardless.
    pub fn limited(d: &Demand, p: &Policy, status: &PoolAutoScalingStatus, now: Timestamp) -> Self {
        let want = d.reactive.max(d.proactive).max(d.predictive);
        let cooldown_end = status
            .last_scale_up_time
            .as_ref()
            .map(|t| plus(t.0, p.cooldown));
        let in_cooldown = cooldown_end.is_some_and(|t| t > now);
        let bypass = d.reactive > 0 && d.coming + d.returned == 0;
        let step = if want > 0 && (!in_cooldown || bypass) {
            want.min(p.up_step)
        } else {
            0
        };
        let grown = if d.base >= p.pool_max {
            d.base
        } else {
            (d.base + step).min(p.pool_max)
        };
        Self {
            target: grown.max(p.pool_min),
            wants_to_grow: want > 0 || p.pool_min > d.base,
            limited_by_max: want > 0 && d.base + want.min(p.up_step) > p.pool_max,
        }
    }
}

impl Cycle<'_> {
    /// The admission probe: the target is cut to what the namespace accepts; no attempt
    /// is made before `saturatedUntil`. The new `spec.replicas` (the base when nothing
    /// grows). Ends with the saturation's expiry and the cooldown's requeue.
    pub(super) fn probe_admission(&mut self, d: &Demand, g: &Growth, p: &Policy) -> i64 {
        let mut desired = d.base;
        let mut attempted = false;
        if g.target > d.base {
            let gate = self
                .prev()
                .saturated_until
                .as_ref()
                .map(|t| t.0)
                .filter(|t| *t > self.now);
            if let Some(until) = gate {
                self.requeue.at(until);
            } else {
                attempted = true;
                desired = self.attempt_scale_up(d, g.target, p);
            }
        }
        expire_saturation(&mut self.status, attempted, self.now);
        if let Some(t) = &self.status.last_scale_up_time {
            self.requeue.at(plus(t.0, p.cooldown));
        }
        desired
    }

    /// One scale-up attempt from the base to `target`: what the namespace accepts of it,
    /// recorded in `lastScaleUpAttempt`; a partial or rejected attempt saturates the Pool.
    fn attempt_scale_up(&mut self, d: &Demand, target: i64, p: &Policy) -> i64 {
        let base = d.base;
        let admission = &self.snap.admission;
        let accepted = match admission.headroom {
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
        if accepted > base {
            self.status.last_scale_up_time = Some(Time(self.stamp));
        }
        let why = match &self.status.prediction {
            Some(prediction) if d.predicted() => prediction.message.clone(),
            _ => growth_reason(self.snap, p, self.now, d),
        };
        if result == attempt_results::FULL {
            self.status.saturated_until = None;
            self.status.scale_up_error_message = None;
            let reason = if d.predicted() {
                reasons::PREDICTED_SCALE_UP
            } else {
                reasons::SCALED_UP
            };
            self.events.push(PoolEvent::normal(
                reason,
                format!("scaled up from {base} to {target}: {why}"),
            ));
        } else {
            self.saturate(&attempt, p, &why);
        }
        self.status.last_scale_up_attempt = Some(attempt);
        accepted
    }

    /// A partial or rejected attempt: `saturatedUntil = now + max(cooldown, 10 s)`, the
    /// message, a Warning Event. A rejected attempt identical to the last one (same sizes,
    /// same message) changes nothing and publishes nothing.
    fn saturate(&mut self, attempt: &ScaleUpAttempt, p: &Policy, why: &str) {
        let admission = &self.snap.admission;
        let message = admission.message.clone().unwrap_or_else(|| {
            format!(
                "the namespace accepts {} more Pod(s)",
                admission.headroom.unwrap_or(0).max(0)
            )
        });
        let prev = self.prev();
        let repeat = attempt.result == attempt_results::REJECTED
            && prev.last_scale_up_attempt.as_ref() == Some(attempt)
            && prev.scale_up_error_message.as_ref() == Some(&message)
            && prev.saturated_until.is_some();
        if repeat {
            return;
        }
        let backoff = p.cooldown.max(SATURATION_BACKOFF_MIN);
        self.status.saturated_until = Some(Time(plus(self.stamp, backoff)));
        self.status.scale_up_error_message = Some(message.clone());
        let (base, accepted, target) = (attempt.from, attempt.accepted, attempt.target);
        self.events
            .push(if attempt.result == attempt_results::PARTIAL {
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

/// Clears the saturation fields once `saturatedUntil` has passed without a new attempt.
pub(super) fn expire_saturation(
    status: &mut PoolAutoScalingStatus,
    attempted: bool,
    now: Timestamp,
) {
    if !attempted && status.saturated_until.as_ref().is_some_and(|t| t.0 <= now) {
        status.saturated_until = None;
        status.scale_up_error_message = None;
    }
}

/// `Saturated`, from the next status: True while `saturatedUntil` is set.
pub(super) fn saturated_condition(status: &PoolAutoScalingStatus) -> Desired {
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
fn growth_reason(snap: &Snapshot, p: &Policy, now: Timestamp, d: &Demand) -> String {
    let (idle, coming) = (d.idle, d.coming);
    if d.reactive > 0 {
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
    } else if d.proactive > 0 {
        format!(
            "{idle} idle Pod(s) (threshold {}) for at least {}s",
            p.threshold,
            p.quiet.as_secs()
        )
    } else if p.pool_min > d.base {
        format!("below the group minimum ({} for this Pool)", p.pool_min)
    } else {
        "growth requested".to_string()
    }
}
