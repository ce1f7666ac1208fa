//! The two-phase scale-down (phases 2 and 5 of the module docs of [`super`]): the mark
//! sweep (a claimed Pod loses its mark; an expired mark is removed and its session is
//! `Stuck`), then the session itself: `Aborted` when claims arrive, `Started` or `Stepped`
//! when this cycle marks Pods, `Completed` when no live Pod carries its mark. The deletes of
//! the marked Pods are the commit's.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    Cycle, Demand, MARK_TTL, PodMark, PodRef, PodState, PodUnmark, Policy, PoolEvent, PoolPod,
    ScaleDown, ScaleDownMark, ScaleDownSession, UnmarkReason, count, decision_id, is_open, names,
    plus, reasons, session_states, to_i32,
};

/// What the mark sweep found.
#[derive(Default)]
pub(super) struct Sweep<'a> {
    /// Claimed Pods that carry a mark.
    pub claimed: Vec<&'a PoolPod>,
    /// How many of those carry the open session's mark.
    pub claimed_ours: i64,
    /// Live, unclaimed Pods whose open-session mark expired.
    pub expired_ours: Vec<&'a PoolPod>,
    /// Live, unclaimed Pods whose expired mark belongs to another decision.
    pub expired_other: Vec<&'a PoolPod>,
    /// Live, unclaimed Pods with the open session's unexpired mark (awaiting deletion).
    pub pending_ours: Vec<&'a PoolPod>,
    /// Some live Pod carries an unexpired mark.
    pub unexpired: bool,
    /// A session is still open after the sweep (it did not turn `Stuck`).
    pub still_open: bool,
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

impl<'a> Cycle<'a> {
    fn unmark(&mut self, pods: &[&PoolPod], reason: UnmarkReason) {
        self.unmarks.extend(pods.iter().map(|pod| PodUnmark {
            pod: PodRef::of(pod),
            reason,
        }));
    }

    /// Phase 2, the mark sweep (also while autoscaling is off): a marked Pod that is
    /// claimed loses its mark at once; an expired mark is removed and reported `Stuck`. A
    /// mark of an unknown decision is left to expire, because the Pod cache can show a new
    /// mark before the Pool cache shows the session that placed it.
    pub(super) fn sweep_marks(&mut self) -> Sweep<'a> {
        let open_id = self
            .prev()
            .scale_down_session
            .as_ref()
            .filter(|s| is_open(s))
            .map(|s| s.id.as_str());
        let mut sweep = Sweep::of(&self.snap.pods, open_id, self.now);
        self.unmark(&sweep.claimed, UnmarkReason::Claimed);
        self.unmark(&sweep.expired_ours, UnmarkReason::Expired);
        self.unmark(&sweep.expired_other, UnmarkReason::Expired);
        if !sweep.claimed.is_empty() {
            self.events.push(PoolEvent::warning(
                reasons::MARKED_POD_CLAIMED,
                format!(
                    "claimed Pod(s) {} carried a scale-down mark; mark removed, the Pod is kept",
                    names(&sweep.claimed)
                ),
            ));
        }
        if let Some(s) = self.status.scale_down_session.as_mut()
            && is_open(s)
            && !sweep.expired_ours.is_empty()
        {
            s.state = session_states::STUCK.to_string();
            s.updated_at = Time(self.stamp);
            let msg = format!(
                "mark(s) on {} expired before the Pod(s) were deleted; marks removed",
                names(&sweep.expired_ours)
            );
            self.events.push(PoolEvent::warning(
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
            self.events.push(PoolEvent::warning(
                reasons::SCALE_DOWN_STUCK,
                format!(
                    "expired scale-down mark(s) of decision(s) {} removed from {}",
                    decisions.join(", "),
                    names(&sweep.expired_other)
                ),
            ));
        }
        sweep.still_open = self.status.scale_down_session.as_ref().is_some_and(is_open);
        sweep
    }

    /// Aborts the open session: its marks are removed (the Pods it marked stay).
    pub(super) fn abort_session(&mut self, sweep: &Sweep<'_>, msg: &str) {
        self.unmark(&sweep.pending_ours, UnmarkReason::Aborted);
        if let Some(s) = self.status.scale_down_session.as_mut() {
            s.state = session_states::ABORTED.to_string();
            s.updated_at = Time(self.stamp);
            self.events.push(PoolEvent::normal(
                reasons::SCALE_DOWN_ABORTED,
                format!("scale-down {}: {msg}", s.id),
            ));
            s.message = Some(msg.to_string());
        }
    }

    /// Phase 5, the session: aborted by queued claims (its marked Pods given back to
    /// `spec.replicas`, as is a marked Pod found claimed), started or stepped by the Pods
    /// this cycle marks (`desired` drops by their number), completed when none of its marks
    /// is left.
    pub(super) fn scale_down_session(
        &mut self,
        d: &Demand,
        down: &ScaleDown<'_>,
        p: &Policy,
        sweep: &Sweep<'_>,
        desired: &mut i64,
    ) {
        if d.abort {
            let msg = format!(
                "aborted: {} claim(s) queued; {} marked Pod(s) returned to the Pool ({} → {})",
                d.pending, d.returned, self.spec, d.base
            );
            self.abort_session(sweep, &msg);
            if let Some(s) = self.status.scale_down_session.as_mut() {
                s.removed = to_i32(i64::from(s.removed) - d.given_back);
            }
        } else if sweep.claimed_ours > 0
            && let Some(s) = self.status.scale_down_session.as_mut()
        {
            s.removed = to_i32(i64::from(s.removed) - sweep.claimed_ours);
            s.updated_at = Time(self.stamp);
        }
        if !down.chosen.is_empty() {
            *desired = d.base - count(down.chosen.len());
            self.mark(&down.chosen, d.base, *desired, p);
        } else if !d.abort
            && let Some(s) = self.status.scale_down_session.as_mut()
            && is_open(s)
            && sweep.pending_ours.is_empty()
        {
            let msg = format!(
                "completed: {} → {}, {} Pod(s) removed",
                s.from, *desired, s.removed
            );
            s.state = session_states::COMPLETED.to_string();
            s.updated_at = Time(self.stamp);
            self.events.push(PoolEvent::normal(
                reasons::SCALE_DOWN_COMPLETED,
                format!("scale-down {}: {msg}", s.id),
            ));
            s.message = Some(msg);
        }
    }

    /// The first phase of a scale-down step: marks `chosen` with the open session's id (a
    /// `Stepped` session) or a new one (`Started`), expiring [`MARK_TTL`] from now.
    fn mark(&mut self, chosen: &[&PoolPod], base: i64, desired: i64, p: &Policy) {
        let n = count(chosen.len());
        let stamp = self.stamp;
        self.status.last_scale_down_time = Some(Time(stamp));
        let why = if base > p.pool_max {
            format!("above the group maximum of {}", p.pool_max)
        } else {
            format!("idle for at least {}s", p.idle_timeout.as_secs())
        };
        let message = format!("marked {} ({why})", names(chosen));
        let open = self
            .status
            .scale_down_session
            .as_mut()
            .filter(|s| is_open(s));
        let (id, reason) = match open {
            Some(s) => {
                s.state = session_states::STEPPED.to_string();
                s.target = to_i32(desired);
                s.removed = to_i32(i64::from(s.removed) + n);
                s.updated_at = Time(stamp);
                s.message = Some(message);
                (s.id.clone(), reasons::SCALE_DOWN_STEPPED)
            }
            None => {
                let id = decision_id(&self.snap.pool.name, self.now);
                self.status.scale_down_session = Some(ScaleDownSession {
                    id: id.clone(),
                    state: session_states::STARTED.to_string(),
                    from: to_i32(base),
                    target: to_i32(desired),
                    started_at: Time(stamp),
                    updated_at: Time(stamp),
                    removed: to_i32(n),
                    message: Some(message),
                });
                (id, reasons::SCALE_DOWN_STARTED)
            }
        };
        self.events.push(PoolEvent::normal(
            reason,
            format!(
                "scale-down {id}: marked {} ({why}); {base} → {desired}",
                names(chosen)
            ),
        ));
        let mark = ScaleDownMark {
            decision: id,
            expires_at: plus(stamp, MARK_TTL),
        };
        self.requeue.at(mark.expires_at);
        self.marks = chosen
            .iter()
            .map(|pod| PodMark {
                pod: PodRef::of(pod),
                mark: mark.clone(),
            })
            .collect();
    }

    /// Requeue at the expiry of every mark left in place, and at `saturatedUntil`.
    pub(super) fn requeue_at_expiries(&mut self) {
        for pod in self
            .snap
            .pods
            .iter()
            .filter(|p| p.state != PodState::Terminating)
        {
            if let Some(m) = &pod.mark
                && !self.unmarks.iter().any(|u| u.pod.name == pod.name)
            {
                self.requeue.at(m.expires_at);
            }
        }
        if let Some(t) = &self.status.saturated_until {
            self.requeue.at(t.0);
        }
    }
}
