//! The template's status from the actions' outcomes: the warnings worth an Event, the
//! conditions (`Ready`, `Stalled`, `Reconciling`, `Active`, `Conflict`, `Reverted`), and the
//! execution history.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::outcome::{Outcome, is_ours};
use super::plan::{Edge, EventNote, state};
use super::snapshot::Snapshot;
use super::{EXECUTIONS_KEPT, Resolved};
use crate::api::conditions::{self, Desired, reasons as common, types};
use crate::api::scaling::{Execution, ScalingTemplateStatus, WindowStatus, reasons};

/// Warnings once, on the transition into the state that warrants them.
pub(super) fn warnings(prev: &ScalingTemplateStatus, outcomes: &[Outcome]) -> Vec<EventNote> {
    let mut events = Vec::new();
    for o in outcomes {
        let before = prev.actions.iter().find(|a| a.name == o.status.name);
        let changed =
            before.is_none_or(|b| b.state != o.status.state || b.message != o.status.message);
        if !changed {
            continue;
        }
        let name = &o.status.name;
        if let Some((reason, msg)) = &o.warning {
            events.push(EventNote::warning(reason, format!("{name}: {msg}")));
        }
        if let Some(msg) = &o.conflict {
            events.push(EventNote::warning(
                reasons::CONFLICT,
                format!("{name}: {msg}"),
            ));
        }
        if let Some((true, msg)) = &o.drift {
            events.push(EventNote::warning(
                reasons::REAPPLY_LIMIT,
                format!("{name}: {msg}"),
            ));
        }
    }
    events
}

/// The phase and the conditions; warnings about the template as a whole go to `events`.
pub(super) fn conditions(
    snap: &Snapshot,
    window: &Resolved,
    outcomes: &[Outcome],
    restoring: bool,
    events: &mut Vec<EventNote>,
) -> (&'static str, Vec<Desired>) {
    let t = &snap.template;
    let prev = &t.status;
    let mut desired: Vec<Desired> = Vec::new();
    let phase = match &window.inputs {
        Err((reason, msg)) => {
            desired.push(Desired::new(types::READY, false, *reason, msg.clone()));
            desired.push(Desired::new(types::STALLED, true, *reason, msg.clone()));
            if prev.phase.as_deref() != Some("Invalid")
                || !conditions::has_reason(&prev.conditions, types::READY, reason)
            {
                events.push(EventNote::warning(reason, msg.clone()));
            }
            "Invalid"
        }
        Ok(_) => {
            desired.extend(ready(snap, window, outcomes, events));
            let state = window
                .evaluated
                .as_ref()
                .map(|s| s.reason.as_str())
                .unwrap_or("Idle");
            if t.deleting { "Idle" } else { state }
        }
    };
    desired.push(reconciling(window, outcomes, restoring));
    desired.push(active(t.deleting, window));
    desired.push(conflict(outcomes));
    desired.push(reverted(prev, window, outcomes));
    (phase, desired)
}

/// `Ready` and `Stalled` of a valid template. A target that is missing, contested or
/// blocked needs someone to act: `Ready=False` and `Stalled=True` with the same reason
/// (kstatus reads Stalled as Failed, as Argo CD's check reads `Ready=False` as Degraded);
/// the template still retries.
fn ready(
    snap: &Snapshot,
    window: &Resolved,
    outcomes: &[Outcome],
    events: &mut Vec<EventNote>,
) -> [Desired; 2] {
    let prev = &snap.template.status;
    let worst = outcomes.iter().find_map(|o| match o.status.state.as_str() {
        state::FAILED => Some((reasons::TARGET_NOT_FOUND, o)),
        state::CONFLICT => Some((reasons::CONFLICT, o)),
        state::BLOCKED => Some((reasons::BLOCKED, o)),
        state::REVERTED if o.drift.is_some() => Some((reasons::REAPPLY_LIMIT, o)),
        _ => None,
    });
    let unreadable = unreadable_restore_data(snap);
    if let Some(msg) = &unreadable
        && !conditions::has_reason(&prev.conditions, types::READY, reasons::BLOCKED)
    {
        events.push(EventNote::warning(reasons::BLOCKED, msg.clone()));
    }
    let stuck = match (unreadable, worst) {
        (Some(msg), _) => Some((reasons::BLOCKED, msg)),
        (None, Some((reason, o))) => Some((
            reason,
            format!(
                "action {}: {}",
                o.status.name,
                o.status.message.clone().unwrap_or_default()
            ),
        )),
        (None, None) => None,
    };
    match stuck {
        Some((reason, msg)) => [
            Desired::new(types::READY, false, reason, msg.clone()),
            Desired::new(types::STALLED, true, reason, msg),
        ],
        None => [
            Desired::new(
                types::READY,
                true,
                common::RECONCILED,
                progress(window, outcomes),
            ),
            Desired::new(types::STALLED, false, common::RECONCILED, ""),
        ],
    }
}

/// Restore data Moonin cannot read is never dropped: it is reported instead.
pub(super) fn unreadable_restore_data(snap: &Snapshot) -> Option<String> {
    let uid = &snap.template.uid;
    snap.targets.iter().find_map(|(key, target)| {
        let deployment = target
            .deployment
            .as_ref()
            .map(|d| ("Deployment", &d.name, &d.marks));
        let autoscalers = target
            .autoscalers
            .iter()
            .map(|a| (a.kind.as_str(), &a.name, &a.marks));
        deployment.into_iter().chain(autoscalers).find_map(|(kind, name, marks)| {
            let why = marks.unreadable.as_ref()?;
            is_ours(marks, uid).then(|| {
                format!(
                    "cannot restore {kind} {}/{name}: {why}; fix or remove its moonin.io annotations by hand",
                    key.namespace
                )
            })
        })
    })
}

/// The `Ready=True` message: the open window and how many actions it applied, or when the
/// next one opens.
fn progress(window: &Resolved, outcomes: &[Outcome]) -> String {
    match (window.active, window.evaluated.as_ref()) {
        (Some(w), _) => format!(
            "{} window open until {}; {} of {} action(s) applied",
            w.trigger.as_str(),
            w.end,
            outcomes
                .iter()
                .filter(|o| o.status.state == state::APPLIED)
                .count(),
            outcomes.len()
        ),
        (None, Some(s)) => match s.next_windows.first() {
            Some(n) => format!(
                "{}; the next window opens at {}",
                s.reason.as_str(),
                n.start
            ),
            None => format!("{}; no window ahead", s.reason.as_str()),
        },
        (None, None) => "idle".to_string(),
    }
}

fn reconciling(window: &Resolved, outcomes: &[Outcome], restoring: bool) -> Desired {
    if restoring {
        return Desired::new(
            types::RECONCILING,
            true,
            reasons::WAITING,
            super::WAITING_FOR_AUTOSCALER,
        );
    }
    let waiting = outcomes
        .iter()
        .find(|o| o.status.state == state::PENDING && window.active.is_some());
    match waiting {
        Some(o) => Desired::new(
            types::RECONCILING,
            true,
            reasons::WAITING,
            o.status.message.clone().unwrap_or_default(),
        ),
        None => Desired::new(types::RECONCILING, false, common::RECONCILED, ""),
    }
}

fn active(deleting: bool, window: &Resolved) -> Desired {
    match (window.active, window.evaluated.as_ref()) {
        (Some(w), _) => Desired::new(
            reasons::ACTIVE,
            true,
            w.trigger.as_str(),
            format!("window open from {} until {}", w.start, w.end),
        ),
        (None, Some(_)) if deleting => Desired::new(reasons::ACTIVE, false, "Deleting", ""),
        (None, Some(s)) => Desired::new(reasons::ACTIVE, false, s.reason.as_str(), ""),
        (None, None) => Desired::new(reasons::ACTIVE, false, "Invalid", ""),
    }
}

fn conflict(outcomes: &[Outcome]) -> Desired {
    let conflicts: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.conflict
                .as_ref()
                .map(|c| format!("{}: {c}", o.status.name))
        })
        .collect();
    if conflicts.is_empty() {
        Desired::new(reasons::CONFLICT, false, reasons::NO_CONFLICT, "")
    } else {
        Desired::new(
            reasons::CONFLICT,
            true,
            reasons::CONFLICT,
            conflicts.join("; "),
        )
    }
}

/// `Reverted`: another field manager undid an override. Remembered for the rest of the
/// window, with a stable reason, even after a successful re-apply.
fn reverted(prev: &ScalingTemplateStatus, window: &Resolved, outcomes: &[Outcome]) -> Desired {
    let drifts: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.drift
                .as_ref()
                .map(|(_, m)| format!("{}: {m}", o.status.name))
        })
        .collect();
    let remembered = prev
        .conditions
        .iter()
        .find(|c| c.type_ == reasons::REVERTED && c.status == "True")
        .filter(|_| window.same_window && window.active.is_some());
    if !drifts.is_empty() {
        let stopped = outcomes.iter().any(|o| matches!(o.drift, Some((true, _))));
        Desired::new(
            reasons::REVERTED,
            true,
            if stopped {
                reasons::REAPPLY_LIMIT
            } else {
                reasons::OVERRIDDEN
            },
            drifts.join("; "),
        )
    } else if let Some(c) = remembered {
        Desired::new(reasons::REVERTED, true, c.reason.clone(), c.message.clone())
    } else {
        Desired::new(reasons::REVERTED, false, reasons::NOT_REVERTED, "")
    }
}

/// The execution history: a window that opens starts an execution, the open one carries
/// the current result, and one that closes gets its end (the last [`EXECUTIONS_KEPT`]).
pub(super) fn executions(
    prev: &ScalingTemplateStatus,
    window: &Resolved,
    outcomes: &[Outcome],
    now: Timestamp,
) -> Vec<Execution> {
    let mut executions = prev.executions.clone();
    let result = if outcomes.iter().all(|o| o.status.state == state::APPLIED) {
        "Applied"
    } else if outcomes.iter().any(|o| o.status.state == state::APPLIED) {
        "PartiallyApplied"
    } else if outcomes.iter().any(|o| o.drift.is_some()) {
        "Reverted"
    } else {
        "Failed"
    };
    match (window.active, prev.window.as_ref()) {
        (Some(w), _) => {
            if !window.same_window {
                let closed_at = prev.window.as_ref().map_or(now, |pw| now.min(pw.end.0));
                close_open(&mut executions, closed_at);
                executions.push(Execution {
                    trigger: w.trigger.as_str().to_string(),
                    start: Time(w.start),
                    end: None,
                    result: result.to_string(),
                });
            } else if let Some(last) = executions.last_mut()
                && last.end.is_none()
            {
                last.result = result.to_string();
            }
        }
        (None, Some(pw)) => close_open(&mut executions, now.min(pw.end.0)),
        (None, None) => {}
    }
    if executions.len() > EXECUTIONS_KEPT {
        executions.drain(..executions.len() - EXECUTIONS_KEPT);
    }
    executions
}

/// The scheduled edges a decision at `now` acts on for the first time: a window that is
/// open now and that the previous status announced among its next windows, and the open
/// window the previous status recorded once its end has passed. A manual run's start, a
/// window the template was created or changed into, and a window ended early (suspended,
/// changed) are no scheduled edge; nor is anything a previous decision already recorded.
pub(super) fn scheduled_edges(
    prev: &ScalingTemplateStatus,
    active: Option<&WindowStatus>,
    now: Timestamp,
) -> Vec<Edge> {
    let mut edges = Vec::new();
    let start = |w: &WindowStatus| w.start.0;
    if let Some(p) = &prev.window
        && active.map(start) != Some(p.start.0)
        && p.end.0 <= now
    {
        edges.push(Edge {
            opens: false,
            at: p.end.0,
        });
    }
    if let Some(w) = active
        && prev.window.as_ref().map(start) != Some(w.start.0)
        && prev.next_windows.iter().any(|n| n.start.0 == w.start.0)
    {
        edges.push(Edge {
            opens: true,
            at: w.start.0,
        });
    }
    edges
}

fn close_open(executions: &mut [Execution], at: Timestamp) {
    if let Some(last) = executions.last_mut()
        && last.end.is_none()
    {
        last.end = Some(Time(at));
    }
}

/// Marks actions whose writes failed: the status written after a partial commit.
pub fn record_failures(
    status: &mut ScalingTemplateStatus,
    failed: &BTreeMap<String, String>,
    now: Timestamp,
) {
    if failed.is_empty() {
        return;
    }
    for a in &mut status.actions {
        if let Some(err) = failed.get(&a.name) {
            a.state = state::FAILED.to_string();
            a.message = Some(err.clone());
        }
    }
    let msg = failed
        .iter()
        .map(|(a, e)| format!("action {a}: {e}"))
        .collect::<Vec<_>>()
        .join("; ");
    status.conditions = conditions::merge(
        &status.conditions,
        &[Desired::new(
            types::READY,
            false,
            reasons::APPLY_FAILED,
            msg,
        )],
        status.observed_generation,
        now,
    );
    if let Some(last) = status.executions.last_mut()
        && last.end.is_none()
    {
        let any_applied = status.actions.iter().any(|a| a.state == state::APPLIED);
        last.result = if any_applied {
            "PartiallyApplied"
        } else {
            "Failed"
        }
        .to_string();
    }
}
