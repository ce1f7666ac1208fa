//! Decide: from a plain-data [`Snapshot`] of a template and its targets, and `now`, the
//! [`Plan`] of writes, the next status, the Events and when to look again. No client, no
//! clock, no I/O: every branch is a table test below.
//!
//! How an override lives on someone else's object:
//! - the HPA or ScaledObject that scales the Deployment (the *carrier*) gets the new
//!   min/max **and** `moonin.io/owner`, `moonin.io/original` and `moonin.io/applied-hash`
//!   in one JSON Patch whose first ops test what the override depends on (the bounds and
//!   the marks as they were read; see [`patch::precondition`]);
//! - with no autoscaler, a provisional HPA owned by the template carries it;
//! - the Deployment's replicas are raised to the new minimum at once (no waiting for the
//!   HPA's 15 s sync), recording `moonin.io/original-replicas` in the same patch.
//!
//! Reverting restores only fields Moonin still owns (per `managedFields`), so a value
//! someone else wrote in the meantime is never clobbered.
//!
//! [`decide`] is a pipeline of named phases: resolve the active window, rank the actions by
//! priority, plan the restores ([`restore`]), plan each action's override ([`apply`]) or idle
//! state, then the status ([`status`]): warnings, conditions, executions. The inputs are in
//! [`snapshot`], the answer's types in [`plan`].

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::window::{self, ActiveWindow, WindowError, WindowInputs, WindowState};
use crate::api::scaling::{
    ActionStatus, PlannedWindow, ScalingAction, ScalingTemplateStatus, WindowStatus, reasons,
};

mod apply;
mod outcome;
mod patch;
pub mod plan;
pub mod restore;
pub mod snapshot;
pub mod status;

pub use plan::{
    Edge, EventNote, Finalizer, ObjectKind, Op, Plan, Wave, Write, override_hash, provisional_name,
    state,
};
pub use restore::{sweep, sweep_waits};
pub use snapshot::{
    Autoscaler, AutoscalerKind, GUARDED_ANNOTATIONS, Marks, Original, OwnerRecord, Snapshot,
    Target, TargetKey, TemplateKind, TemplateView, Workload,
};
pub use status::record_failures;

use outcome::Outcome;

/// How often an override undone by another field manager is re-applied in one window.
pub const MAX_REAPPLIES: i32 = 3;
/// How many executions `status.executions` keeps.
pub const EXECUTIONS_KEPT: usize = 10;
/// The slow safety resync: a template is looked at again at least this often.
pub const RESYNC: SignedDuration = SignedDuration::from_mins(5);
/// How long after the last write of an autoscaler's bounds a restore of its Deployment
/// waits, at most, for a controller that is sure to act on them visibly (load sets
/// [`Autoscaler::unobserved`] for that long): long enough for a kube-controller-manager
/// whose watches backed off during an API server outage to catch up (seen here: 70–83 s
/// after a 60 s outage), short enough that a controller that is not running does not hold
/// the Deployment for good. Also how long after that write a scale-back of the restored
/// Deployment by the HPA controller, still acting on the override's bounds, is undone.
pub const OBSERVATION_LIMIT: SignedDuration = SignedDuration::from_mins(2);
/// How long after an autoscaler's restore the template, if deleted, keeps its finalizer (and
/// so the status's record of the original replicas): one HPA sync period
/// (kube-controller-manager's default), after which an HPA controller that read the
/// override's bounds before their restore has finished acting on them.
pub const SCALE_BACK_SETTLE: SignedDuration = SignedDuration::from_secs(15);
/// How soon a Deployment whose restore waits for its autoscaler is looked at again.
pub const WAITING_RECHECK: SignedDuration = SignedDuration::from_secs(2);
/// The message of an action whose autoscaler is restored and whose Deployment waits.
pub const WAITING_FOR_AUTOSCALER: &str = "override reverted on the autoscaler; the Deployment's replicas come back once its controller has acted on the restored bounds";

/// The template's window at `now`: valid or why not, evaluated, open or not.
pub(super) struct Resolved {
    inputs: Result<WindowInputs, (&'static str, String)>,
    evaluated: Option<WindowState>,
    /// The open window, unless the template is being deleted.
    active: Option<ActiveWindow>,
    /// The open window is the one the status already records.
    same_window: bool,
}

impl Resolved {
    fn new(t: &TemplateView, now: Timestamp) -> Self {
        let inputs = invalid(t);
        let evaluated = inputs.as_ref().ok().map(|i| window::evaluate(i, now));
        let active = match (&evaluated, t.deleting) {
            (Some(s), false) => s.active,
            _ => None,
        };
        let same_window = active.is_some_and(|w| {
            t.status
                .window
                .as_ref()
                .is_some_and(|p| p.start.0 == w.start && p.trigger == w.trigger.as_str())
        });
        Self {
            inputs,
            evaluated,
            active,
            same_window,
        }
    }
}

/// Why the template cannot run, if it cannot: `(reason, message)`.
fn invalid(t: &TemplateView) -> Result<WindowInputs, (&'static str, String)> {
    if t.kind == TemplateKind::Namespaced {
        let own = t.namespace.as_deref().unwrap_or_default();
        if let Some(a) = t
            .actions
            .iter()
            .find(|a| a.target.namespace.as_deref().is_some_and(|ns| ns != own))
        {
            return Err((
                reasons::CROSS_NAMESPACE_TARGET,
                format!(
                    "action {} targets namespace {}, but a ScalingTemplate may only scale workloads in its own namespace ({own}); use a ClusterScalingTemplate",
                    a.name,
                    a.target.namespace.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    WindowInputs::from_spec(&t.window).map_err(|e| {
        let reason = match e {
            WindowError::Schedule(_) => reasons::INVALID_SCHEDULE,
            WindowError::UnknownTimeZone(_) => reasons::UNKNOWN_TIME_ZONE,
            WindowError::InvalidDuration(_) | WindowError::InvalidManualDuration(_) => {
                reasons::INVALID_DURATION
            }
        };
        (reason, e.to_string())
    })
}

/// The heart of the scaling controller.
pub fn decide(snap: &Snapshot, now: Timestamp) -> Plan {
    let t = &snap.template;
    let window = Resolved::new(t, now);
    // Which action holds which target: the first by apply order; a second action of this
    // template on the same Deployment conflicts with it.
    let mut order: Vec<&ScalingAction> = t.actions.iter().collect();
    order.sort_by_key(|a| (a.priority_up, a.name.clone()));
    let mut holder_of: BTreeMap<TargetKey, &str> = BTreeMap::new();
    for a in &order {
        holder_of.entry(t.target_key(a)).or_insert(&a.name);
    }
    let restores = restore::plan_restores(snap, window.active.is_some(), &holder_of);
    let mut ops = restores.ops;
    let mut outcomes = Vec::new();
    for a in &order {
        let mut outcome = plan_action(snap, a, &window, &holder_of, &restores.reverted);
        if restores.waiting.contains(&a.name) && outcome.status.state != state::APPLIED {
            outcome.status.state = state::REVERTED.to_string();
            outcome.status.message = Some(WAITING_FOR_AUTOSCALER.to_string());
        }
        let wave = Wave {
            phase: 1,
            priority: a.priority_up,
        };
        ops.extend(outcome.ops.iter().map(|o| Op { wave, ..o.clone() }));
        outcomes.push(outcome);
    }
    let mut events = status::warnings(&t.status, &outcomes);
    let restoring = !restores.waiting.is_empty();
    let (phase, desired) = status::conditions(snap, &window, &outcomes, restoring, &mut events);
    let executions = status::executions(&t.status, &window, &outcomes, now);
    let active = window.active.map(|w| WindowStatus {
        trigger: w.trigger.as_str().to_string(),
        start: Time(w.start),
        end: Time(w.end),
    });
    let edges = status::scheduled_edges(&t.status, active.as_ref(), now);
    let status = ScalingTemplateStatus {
        observed_generation: t.generation,
        phase: Some(phase.to_string()),
        window: active,
        next_windows: window
            .evaluated
            .as_ref()
            .map(|s| {
                s.next_windows
                    .iter()
                    .map(|w| PlannedWindow {
                        start: Time(w.start),
                        end: Time(w.end),
                        dst_adjusted: w.dst_adjusted,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        actions: outcomes.into_iter().map(|o| o.status).collect(),
        executions,
        conditions: crate::api::conditions::merge(
            &t.status.conditions,
            &desired,
            t.generation,
            now,
        ),
    };
    // A template deleted right after a restore keeps its record (and its finalizer) while
    // the HPA controller might still scale a restored Deployment back.
    let settling = t.deleting.then(|| restore::settling(snap, now)).flatten();
    // Nor is it released while restore data it cannot read is left: its status is the only
    // place that reports it.
    let finalizer = match (t.deleting, t.has_finalizer) {
        (true, true)
            if ops.is_empty()
                && restores.waiting.is_empty()
                && settling.is_none()
                && status::unreadable_restore_data(snap).is_none() =>
        {
            Finalizer::Remove
        }
        (_, true) | (true, false) => Finalizer::Keep,
        (false, false) => Finalizer::Add,
    };
    let resync = now.saturating_add(RESYNC).unwrap_or(now);
    let resync = settling.map_or(resync, |s| s.min(resync));
    // A Deployment waiting for its autoscaler is looked at again soon even if no change of
    // the autoscaler wakes the template.
    let resync = if restores.waiting.is_empty() {
        resync
    } else {
        now.saturating_add(WAITING_RECHECK).unwrap_or(now)
    };
    let requeue_at = window
        .evaluated
        .as_ref()
        .and_then(|s| s.next_boundary)
        .map_or(resync, |b| b.min(resync));
    // Every edge that restores an autoscaler before its Deployment would otherwise write the
    // template's status twice: once "waiting" for a moment, once done.
    let defer_status = restoring && !ops.is_empty();
    Plan {
        ops,
        status,
        defer_status,
        events,
        requeue_at,
        finalizer,
        edges,
    }
}

/// One action's outcome: invalid template, override in an open window (unless another
/// action of this template holds the target), or idle.
fn plan_action(
    snap: &Snapshot,
    a: &ScalingAction,
    window: &Resolved,
    holder_of: &BTreeMap<TargetKey, &str>,
    reverted: &[String],
) -> Outcome {
    let t = &snap.template;
    let key = t.target_key(a);
    let prev = t.status.actions.iter().find(|p| p.name == a.name);
    let was_reverted = reverted.contains(&a.name)
        || matches!(
            prev.map(|p| p.state.as_str()),
            Some(state::APPLIED | state::REVERTED)
        );
    let idle_state = if was_reverted {
        state::REVERTED
    } else {
        state::PENDING
    };
    let idle = |msg: String| {
        let mut o = Outcome::new(&a.name, &key, idle_state, msg);
        o.status.original_replicas = restores_to(snap, a, &key, prev);
        o.ops.extend(restore::undo_scale_back(
            snap,
            a,
            &key,
            o.status.original_replicas,
        ));
        o
    };
    match (&window.inputs, window.active) {
        (Err((_, msg)), _) => idle(msg.clone()),
        (Ok(_), Some(w)) => match holder_of.get(&key) {
            Some(holder) if *holder != a.name.as_str() => {
                let msg = format!(
                    "Deployment {key} is already targeted by action {holder} of this template"
                );
                let mut o = Outcome::new(&a.name, &key, state::CONFLICT, msg.clone());
                o.conflict = Some(msg);
                o
            }
            _ => apply::apply_action(
                t,
                a,
                &key,
                snap.targets.get(&key),
                &w,
                prev,
                window.same_window,
            ),
        },
        // A target missing now is reported now, not only when a window would fail on it.
        (Ok(_), None)
            if !t.deleting
                && snap
                    .targets
                    .get(&key)
                    .is_none_or(|target| target.deployment.is_none()) =>
        {
            apply::not_found(a, &key)
        }
        (Ok(_), None) => {
            let next = window
                .evaluated
                .as_ref()
                .and_then(|s| s.next_windows.first())
                .map(|w| format!("the next window opens at {}", w.start));
            let msg = match (was_reverted, next) {
                (true, _) => "override reverted; original values restored".to_string(),
                (false, Some(n)) => format!("waiting: {n}"),
                (false, None) => "no window ahead".to_string(),
            };
            idle(msg)
        }
    }
}

/// What the action's restore puts back ([`ActionStatus::original_replicas`]): the record on
/// its Deployment while the action's override still marks it, else what the status holds.
fn restores_to(
    snap: &Snapshot,
    a: &ScalingAction,
    key: &TargetKey,
    prev: Option<&ActionStatus>,
) -> Option<i32> {
    snap.targets
        .get(key)
        .and_then(|t| t.deployment.as_ref())
        .filter(|d| outcome::is_ours_for(&d.marks, &snap.template.uid, &a.name))
        .and_then(|d| d.original_replicas)
        .or(prev.and_then(|p| p.original_replicas))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
