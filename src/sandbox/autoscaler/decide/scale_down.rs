//! Scale-down (phase 4 of the module docs of [`super`]): idle Pods past `idleTimeoutSeconds`
//! are removable, down to the group's minimum; the Pool goes down to the highest
//! recommendation of the stabilization window, by at most `maxStep`, one settled step at a
//! time. A Pool above the group's maximum sheds idle Pods down to it.

use jiff::Timestamp;

use super::{Cycle, Demand, Growth, Pods, Policy, PoolPod, Sweep, count, plus};

/// What the scale-down phase chose.
pub(super) struct ScaleDown<'a> {
    /// The phase ran: the Pool does not want to grow, no claim is queued, no session was
    /// aborted.
    pub evaluated: bool,
    /// The size this cycle recommends on its own (before stabilization).
    pub ideal: i64,
    /// The group's minimum keeps idle Pods that would otherwise be removed.
    pub limited_by_min: bool,
    /// The idle Pods to mark, oldest first.
    pub chosen: Vec<&'a PoolPod>,
}

impl<'a> Cycle<'a> {
    /// Phase 4: which idle Pods this cycle removes, if any.
    pub(super) fn scale_down(
        &mut self,
        pods: &Pods<'a>,
        d: &Demand,
        g: &Growth,
        p: &Policy,
        sweep: &Sweep<'_>,
    ) -> ScaleDown<'a> {
        let mut down = ScaleDown {
            evaluated: !g.wants_to_grow && d.pending == 0 && !d.abort,
            ideal: d.base,
            limited_by_min: false,
            chosen: Vec::new(),
        };
        if !down.evaluated {
            return down;
        }
        (down.ideal, down.limited_by_min) = recommend(pods, d, p, self.now);
        let stabilized = self.stabilize(d.base, down.ideal, p);
        let base = d.base;
        let mut lower_to = stabilized.max(base - p.down_step);
        if base > p.pool_max {
            lower_to = lower_to.min(p.pool_max.max(base - p.down_step));
        }
        let n = usize::try_from((base - lower_to).clamp(0, d.idle)).unwrap_or(0);
        // One step at a time: as many live Pods as `spec.replicas`, nothing in flight, no
        // unexpired mark, so a stale cache cannot mark twice.
        let settled =
            d.creates == 0 && pods.live == self.spec && !sweep.unexpired && base == self.spec;
        if n > 0 && settled {
            down.chosen = pods.idle[..n].to_vec();
        }
        down
    }

    /// The stabilization window: the highest recommendation within it, time the history
    /// does not cover counting as the base (so nothing is removed after a restart until a
    /// full window has been observed). Requeues when a held size is released.
    fn stabilize(&mut self, base: i64, ideal: i64, p: &Policy) -> i64 {
        let history = &self.snap.history;
        let window_start = self
            .now
            .checked_sub(p.stabilization)
            .unwrap_or(Timestamp::MIN);
        let in_window = || history.entries.iter().filter(move |r| r.at > window_start);
        let covered = history.covers(window_start);
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
                let since = history.since.unwrap_or(self.now);
                release = Some(release.map_or(since, |t| t.max(since)));
            }
            if let Some(t) = release {
                self.requeue.at(plus(t, p.stabilization));
            }
        }
        stabilized
    }
}

/// The recommendation of this cycle on its own: the base minus the idle Pods past the idle
/// timeout (keeping `idleThreshold + 1` idle while the Pool is in use, and the Pods the
/// prediction keeps ready), at least the group's
/// minimum, at most the group's maximum. Whether the minimum held Pods back.
fn recommend(pods: &Pods<'_>, d: &Demand, p: &Policy, now: Timestamp) -> (i64, bool) {
    let old_enough = count(
        pods.idle
            .iter()
            .filter(|pod| {
                pod.idle_since
                    .is_some_and(|t| plus(t, p.idle_timeout) <= now)
            })
            .count(),
    );
    let in_use = if d.in_use { p.threshold + 1 } else { 0 };
    let buffer = in_use.max(d.ready);
    let removable = old_enough.min((d.idle - buffer).max(0));
    let unfloored = d.base - removable;
    let limited_by_min = removable > 0 && unfloored < p.pool_min;
    let mut ideal = unfloored.max(p.pool_min).min(d.base);
    if d.base > p.pool_max {
        ideal = ideal.min(p.pool_max);
    }
    (ideal, limited_by_min)
}
