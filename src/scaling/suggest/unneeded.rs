//! Existing templates whose windows changed nothing: in every window the history saw, the
//! autoscaler already asked for at least the override's minimum in the whole slot before
//! the window opened, so raising the minimum moved nothing.

use jiff::{SignedDuration, Timestamp};

use super::{Existing, Observed, Unneeded, geometry};
use crate::api::scaling::WindowSpec;
use crate::scaling::schedule::plan;

/// At most this many windows of one template are looked at.
const MAX_WINDOWS: usize = 2_000;

/// The scheduled windows of `spec` that open in `[from, to)`, `[start, end)` each.
pub(super) fn windows(
    spec: &WindowSpec,
    from: Timestamp,
    to: Timestamp,
) -> Vec<(Timestamp, Timestamp)> {
    let Ok(p) = plan(spec, from, MAX_WINDOWS) else {
        return Vec::new();
    };
    let open = p.active.map(|w| (w.start, w.end));
    open.into_iter()
        .chain(p.windows.iter().map(|w| (w.start, w.end)))
        .filter(|&(start, _)| start < to)
        .collect()
}

/// The actions of `existing` on `o`'s workload whose windows changed nothing, seen in at
/// least `min_periods` (and two) windows that closed by `now`.
pub(super) fn unneeded(
    o: &Observed,
    existing: &[Existing],
    min_periods: usize,
    now: Timestamp,
) -> Vec<Unneeded> {
    let h = &o.history;
    let Ok((g, newest)) = geometry(h) else {
        return Vec::new();
    };
    let Some(("Deployment", deployment)) = h.target.split_once('/') else {
        return Vec::new();
    };
    let kept = i64::try_from(h.periods.len()).unwrap_or(0);
    let from = g.period_start(newest - kept + 1);
    let to = g.period_start(newest + 1).min(now);
    let second = SignedDuration::from_secs(1);
    let mut out = Vec::new();
    for t in existing {
        for a in t
            .actions
            .iter()
            .filter(|a| a.namespace == o.namespace && a.deployment == deployment)
        {
            // The count asked for in the last whole slot before each window.
            let before: Vec<i32> = windows(&t.window, from, to)
                .into_iter()
                .filter(|&(_, end)| end <= now)
                .filter_map(|(start, _)| {
                    let mut slot = g.slot_at(start.checked_sub(second).ok()?);
                    if slot.end > start {
                        slot = g.slot_at(slot.start.checked_sub(second).ok()?);
                    }
                    let row = usize::try_from(newest - slot.period).ok()?;
                    let v = *h.periods.get(row)?.get(slot.index)?;
                    (v >= 0).then_some(v)
                })
                .collect();
            let Some(&low) = before.iter().min() else {
                continue;
            };
            if before.len() >= min_periods.max(2) && low >= a.min_replicas {
                out.push(Unneeded {
                    template: t.label.clone(),
                    action: a.name.clone(),
                    evidence: format!(
                        "before each of the {} windows observed, {} already asked for ≥ {low} \
                         (the action's minReplicas is {}): the windows changed nothing",
                        before.len(),
                        h.autoscaler,
                        a.min_replicas
                    ),
                });
            }
        }
    }
    out
}
