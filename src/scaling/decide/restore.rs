//! Planning the restore: putting back exactly what an override replaced, carrier first,
//! Deployment second. Only fields Moonin still owns (per `managedFields`) are restored, so
//! a value someone else wrote in the meantime is never clobbered.
//!
//! The Deployment's replicas come back right after its HPA's restore, the same action's
//! next write in the same plan; they wait for a later plan only when the autoscaler's
//! controller must act first and will say so (a ScaledObject, whose HPA KEDA rewrites; bounds
//! that leave the Deployment outside, which the HPA controller must rescale). If the HPA
//! controller, its view still holding the override's minimum, scales the restored Deployment
//! back, the Deployment is restored again ([`undo_scale_back`]) from the record the template's
//! status has held since the window opened.

use std::collections::BTreeMap;

use serde_json::json;

use jiff::{SignedDuration, Timestamp};

use super::outcome::is_ours;
use super::patch::{precondition, remove_annotations, set_field, show};
use super::plan::{EventNote, ObjectKind, Op, Wave, Write};
use super::snapshot::{Autoscaler, AutoscalerKind, Marks, Snapshot, Target, TargetKey, Workload};
use super::{OBSERVATION_LIMIT, SCALE_BACK_SETTLE};
use crate::api::{
    field_manager,
    scaling::{ScalingAction, events, keys},
};

/// What restoring the carriers of a target found, for the Deployment's restore.
#[derive(Default)]
struct Carriers {
    ops: Vec<Op>,
    /// The autoscaler bounds after the restore: the Deployment is clamped into them.
    restored_bounds: Option<(Option<i32>, Option<i32>)>,
    /// The Deployment's replicas the carrier recorded when the override was applied.
    recorded_replicas: Option<i32>,
    /// Whether the override's minimum was above those replicas (it raised the Deployment),
    /// or the override was a provisional HPA (which moved it anywhere within its bounds).
    raised_by_override: bool,
    /// The action the carrier held.
    action: String,
    /// A restored carrier the Deployment's restore must see acted on first, so it goes in a
    /// later plan: a deleted provisional HPA, a ScaledObject (KEDA carries its bounds to its
    /// HPA), bounds that leave the Deployment's replicas outside (the HPA controller must
    /// rescale it), or restore data that cannot be read.
    hold: bool,
}

/// Whether the template's status records what a Deployment's restore puts back, so that
/// a scale-back after the restore can be undone ([`undo_scale_back`]).
type Recorded<'a> = &'a dyn Fn(&Workload) -> bool;

/// Reverts everything on `target` that `owned` says is to be released, in the order
/// carrier first, Deployment second (in the same plan when the HPA controller need not act
/// first, as one action's writes in order). Also says whether the Deployment, marked by an
/// override `owned` releases, waits for a later plan.
pub(super) fn revert_target(
    key: &TargetKey,
    target: &Target,
    owned: &dyn Fn(&Marks) -> bool,
    recorded: Recorded<'_>,
) -> (Vec<Op>, bool) {
    let mut carriers = Carriers::default();
    let replicas = target.deployment.as_ref().map(Workload::replicas);
    for a in restored_carriers(target, owned) {
        // Never drop restore data that cannot be read: decide reports it instead.
        if a.marks.unreadable.is_some() {
            carriers.hold = true;
            continue;
        }
        let action = a
            .marks
            .owner
            .as_ref()
            .map(|o| o.action.clone())
            .unwrap_or_default();
        carriers.action = action.clone();
        // A carrier pointed at another Deployment since its override restores its own bounds
        // only: the replicas it recorded are the other Deployment's.
        if let Some(orig) = &a.original
            && orig.deployment.as_ref().is_none_or(|d| *d == key.name)
        {
            carriers.recorded_replicas = orig.deployment_replicas;
            carriers.raised_by_override = orig
                .deployment_replicas
                .zip(a.min)
                .is_some_and(|(r, m)| m > r);
        }
        // Nothing scales the Deployment once the provisional HPA is gone (nor clamps it: it
        // is no carrier): its replicas go back as recorded, raised or not.
        if a.provisional {
            carriers.hold = true;
            carriers.raised_by_override = carriers.recorded_replicas.is_some();
            carriers.ops.push(delete_provisional(key, a, action));
            continue;
        }
        let (op, bounds) = restore_autoscaler(key, a, action);
        let inside =
            replicas.is_some_and(|r| r >= bounds.0.unwrap_or(1) && r <= bounds.1.unwrap_or(r));
        carriers.hold |= a.kind == AutoscalerKind::ScaledObject || !inside;
        carriers.restored_bounds = Some(bounds);
        carriers.ops.push(op);
    }
    let dep = target.deployment.as_ref();
    let other_action = dep
        .and_then(|d| d.marks.owner.as_ref())
        .is_some_and(|o| !carriers.ops.is_empty() && o.action != carriers.action);
    let waits = carriers.hold
        || other_action
        || target.autoscalers.iter().any(|a| a.unobserved)
        || dep.is_some_and(|d| !recorded(d));
    let mut ops = std::mem::take(&mut carriers.ops);
    // A Deployment without marks has its record on the provisional HPA alone: it is restored
    // before that HPA goes, so that a refused patch (the HPA scaled it meanwhile) is planned
    // again from the record, and a deletion never leaves it without one.
    let record_on_provisional = target
        .autoscalers
        .iter()
        .any(|a| a.provisional && owned(&a.marks))
        && dep.is_some_and(|d| !owned(&d.marks));
    let restored = restore_deployment(key, target, owned, carriers, waits);
    if record_on_provisional {
        ops.splice(0..0, restored);
    } else {
        ops.extend(restored);
    }
    (ops, waits && dep.is_some_and(|d| owned(&d.marks)))
}

/// The autoscalers of `target` whose override `owned` releases (KEDA copies a ScaledObject's
/// annotations onto its HPA: those copies are KEDA's, not a carrier).
fn restored_carriers<'a>(
    target: &'a Target,
    owned: &'a dyn Fn(&Marks) -> bool,
) -> impl Iterator<Item = &'a Autoscaler> + 'a {
    target
        .autoscalers
        .iter()
        .filter(move |a| owned(&a.marks) && a.keda_owner.is_none())
}

/// Deletes a provisional HPA (it carries nothing else), guarded by UID and resourceVersion.
fn delete_provisional(key: &TargetKey, a: &Autoscaler, action: String) -> Op {
    Op {
        namespace: key.namespace.clone(),
        name: a.name.clone(),
        write: Write::DeleteHpa {
            uid: a.uid.clone(),
            resource_version: a.resource_version.clone(),
        },
        event: Some(EventNote::normal(
            events::REVERTED,
            format!(
                "{action}: deleted provisional HorizontalPodAutoscaler {}/{}",
                key.namespace, a.name
            ),
        )),
        action,
        wave: Wave::default(),
        restores: true,
    }
}

/// Restores an HPA's or ScaledObject's bounds from its `moonin.io/original` record and
/// removes the marks; a field another manager has written since is left as it is. Also
/// returns the bounds after the restore.
fn restore_autoscaler(
    key: &TargetKey,
    a: &Autoscaler,
    action: String,
) -> (Op, (Option<i32>, Option<i32>)) {
    let (min_f, max_f) = (a.kind.min_field(), a.kind.max_field());
    let mut patch = precondition(
        &a.marks,
        &[keys::OWNER, keys::ORIGINAL, keys::APPLIED_HASH],
        &[
            (format!("/spec/{min_f}"), a.min),
            (format!("/spec/{max_f}"), a.max),
        ],
    );
    let mut restored = Vec::new();
    let mut kept = Vec::new();
    let original = a.original.clone().unwrap_or_default();
    let mut bounds = (a.min, a.max);
    for (field, value) in &original.spec {
        let current = if field == a.kind.min_field() {
            a.min
        } else if field == a.kind.max_field() {
            a.max
        } else {
            continue;
        };
        let manager = a.managers.get(field).map(String::as_str);
        // A bound Moonin wrote: this override's, or an earlier one's restore.
        if manager.is_some_and(|m| !field_manager::is_scaling(m)) {
            kept.push(format!(
                "{field} (now {} by {})",
                show(current),
                manager.unwrap_or("?")
            ));
            continue;
        }
        if let Some(op) = set_field(&format!("/spec/{field}"), current, *value) {
            patch.push(op);
        }
        if field == a.kind.min_field() {
            bounds.0 = *value;
        } else {
            bounds.1 = *value;
        }
        restored.push(format!("{field} {}", show(*value)));
    }
    patch.extend(remove_annotations(
        &[keys::OWNER, keys::ORIGINAL, keys::APPLIED_HASH]
            .into_iter()
            .filter(|k| {
                *k == keys::OWNER
                    || (*k == keys::ORIGINAL && a.original.is_some())
                    || (*k == keys::APPLIED_HASH && a.applied_hash.is_some())
            })
            .collect::<Vec<_>>(),
    ));
    let mut note = format!(
        "{action}: restored {} {}/{}: {}",
        a.kind.as_str(),
        key.namespace,
        a.name,
        if restored.is_empty() {
            "nothing to restore".to_string()
        } else {
            restored.join(", ")
        }
    );
    if !kept.is_empty() {
        note.push_str(&format!(
            "; left {} as another field manager set it",
            kept.join(", ")
        ));
    }
    let op = Op {
        action,
        namespace: key.namespace.clone(),
        name: a.name.clone(),
        write: Write::Patch {
            kind: a.kind.into(),
            ops: patch,
        },
        event: Some(EventNote::normal(events::REVERTED, note)),
        wave: Wave::default(),
        restores: true,
    };
    (op, bounds)
}

/// Restores the Deployment's replicas and removes its marks, if the override raised it.
fn restore_deployment(
    key: &TargetKey,
    target: &Target,
    owned: &dyn Fn(&Marks) -> bool,
    carriers: Carriers,
    waits: bool,
) -> Option<Op> {
    let d = target.deployment.as_ref()?;
    let annotated = owned(&d.marks);
    // Its own record stays on it until the autoscaler has acted on the restored bounds, and
    // for good while it cannot be read (decide reports it).
    if annotated && (waits || d.marks.unreadable.is_some()) {
        return None;
    }
    // The Deployment is restored from its own record; if a crash came between the
    // carrier's write and the Deployment's, from the carrier's record instead.
    let restore_to = if annotated {
        d.original_replicas
    } else if carriers.raised_by_override
        && d.marks.owner.is_none()
        && carriers
            .recorded_replicas
            .is_some_and(|r| r != d.replicas())
    {
        carriers.recorded_replicas
    } else {
        None
    };
    if !annotated && restore_to.is_none() {
        return None;
    }
    // Restored in an earlier plan, the carrier holds the restored bounds now.
    let bounds = carriers
        .restored_bounds
        .or_else(|| target.carrier().map(|a| (a.min, a.max)));
    // 0 replicas under an HPA is the HPA switched off (its controller leaves a Deployment at
    // 0 alone): put back as it was, not raised to the minimum.
    let switched_off = |r: i32| {
        r == 0
            && target
                .carrier()
                .is_some_and(|a| a.kind == AutoscalerKind::Hpa)
    };
    let clamp = |r: i32| match bounds {
        Some(_) if switched_off(r) => r,
        Some((lo, hi)) => r.max(lo.unwrap_or(r)).min(hi.unwrap_or(r)),
        None => r,
    };
    let mut patch = precondition(
        &d.marks,
        &[keys::OWNER, keys::ORIGINAL_REPLICAS],
        &[("/spec/replicas".to_string(), d.replicas)],
    );
    let target_replicas = restore_to.map(clamp);
    if let Some(r) = target_replicas
        && Some(r) != d.replicas
    {
        patch.push(json!({"op": "add", "path": "/spec/replicas", "value": r}));
    }
    if annotated {
        let mut present = vec![keys::OWNER];
        if d.original_replicas.is_some() {
            present.push(keys::ORIGINAL_REPLICAS);
        }
        patch.extend(remove_annotations(&present));
    }
    let action = d
        .marks
        .owner
        .as_ref()
        .map(|o| o.action.clone())
        .unwrap_or(carriers.action);
    let note = format!(
        "{action}: Deployment {key} replicas {} -> {}",
        d.replicas(),
        target_replicas.map_or_else(|| "unchanged".to_string(), |r| r.to_string())
    );
    Some(deployment_op(
        action,
        key,
        d,
        patch,
        EventNote::normal(events::REVERTED, note),
    ))
}

/// A patch of the Deployment `d` of `key` for `action`, reported by `event`, that puts
/// back or removes what an override wrote ([`Op::restores`]).
pub(super) fn deployment_op(
    action: String,
    key: &TargetKey,
    d: &Workload,
    ops: Vec<serde_json::Value>,
    event: EventNote,
) -> Op {
    Op {
        action,
        namespace: key.namespace.clone(),
        name: d.name.clone(),
        write: Write::Patch {
            kind: ObjectKind::Deployment,
            ops,
        },
        event: Some(event),
        wave: Wave::default(),
        restores: true,
    }
}

/// Reverts overrides whose owner template no longer exists (the startup sweep, and any
/// object found later whose owner is gone): the ops of each target, in order (a refused op
/// stops those after it: the next may delete the only record of what the first restores).
pub fn sweep(targets: &BTreeMap<TargetKey, Target>) -> Vec<Vec<Op>> {
    let orphan = |m: &Marks| m.owner.is_some() && !m.owner_live;
    // The template is gone: there is no status to record anything in.
    targets
        .iter()
        .map(|(key, target)| revert_target(key, target, &orphan, &|_| true).0)
        .filter(|ops| !ops.is_empty())
        .collect()
}

/// Whether a swept target's Deployment waits for its autoscaler (see [`sweep`]).
pub fn sweep_waits(targets: &BTreeMap<TargetKey, Target>) -> bool {
    let orphan = |m: &Marks| m.owner.is_some() && !m.owner_live;
    targets
        .iter()
        .any(|(key, t)| revert_target(key, t, &orphan, &|_| true).1)
}

/// The restores a template's plan starts with: every target carrying its marks that no
/// action of an open window holds (`kept` names the holder of each target), ordered by
/// `priorityDown`.
pub(super) fn plan_restores(
    snap: &Snapshot,
    window_open: bool,
    kept: &BTreeMap<TargetKey, &str>,
) -> Restores {
    let t = &snap.template;
    let mut waiting = Vec::new();
    let mut reverts: Vec<(i32, String, Vec<Op>)> = Vec::new();
    for (key, target) in &snap.targets {
        // An action that no longer holds this target (removed, renamed or retargeted during
        // the window) has no status entry to record the restore in: nothing to wait for.
        let recorded = |d: &Workload| {
            d.original_replicas.is_none()
                || d.marks.owner.as_ref().is_some_and(|o| {
                    let holds = t
                        .actions
                        .iter()
                        .any(|a| a.name == o.action && &t.target_key(a) == key);
                    !holds
                        || t.status.actions.iter().any(|s| {
                            s.name == o.action && s.original_replicas == d.original_replicas
                        })
                })
        };
        let keep = if window_open {
            kept.get(key).copied()
        } else {
            None
        };
        let releasable = |m: &Marks| {
            m.owner
                .as_ref()
                .is_some_and(|o| o.uid == t.uid && Some(o.action.as_str()) != keep)
        };
        let (ops, waits) = revert_target(key, target, &releasable, &recorded);
        if waits {
            waiting.extend(
                target
                    .deployment
                    .as_ref()
                    .and_then(|d| d.marks.owner.as_ref())
                    .map(|o| o.action.clone()),
            );
        }
        if let Some(first) = ops.first() {
            let action = first.action.clone();
            let prio = t
                .actions
                .iter()
                .find(|a| a.name == action)
                .map_or(0, |a| a.priority_down);
            reverts.push((prio, action, ops));
        }
    }
    reverts.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let reverted = reverts.iter().map(|r| r.1.clone()).collect();
    let ops = reverts
        .into_iter()
        .flat_map(|(priority, _, ops)| {
            ops.into_iter().map(move |o| Op {
                wave: Wave { phase: 0, priority },
                ..o
            })
        })
        .collect();
    Restores {
        ops,
        reverted,
        waiting,
    }
}

/// The restores of one plan.
pub(super) struct Restores {
    /// The writes, reverts by `priorityDown`.
    pub ops: Vec<Op>,
    /// The actions whose overrides are (being) reverted.
    pub reverted: Vec<String>,
    /// The actions whose Deployment waits for its autoscaler before its replicas come back.
    pub waiting: Vec<String>,
}

/// A provisional HPA of this template that a real autoscaler has since replaced: removed.
pub(super) fn replaced_provisional(
    key: &TargetKey,
    provisional: &Autoscaler,
    uid: &str,
) -> Vec<Op> {
    let only = Target {
        deployment: None,
        autoscalers: vec![provisional.clone()],
    };
    revert_target(key, &only, &|m| is_ours(m, uid), &|_| true).0
}

/// Until when a deleted template waits before its finalizer goes, if an action's Deployment
/// was restored (the status records its original replicas) less than [`SCALE_BACK_SETTLE`]
/// after its autoscaler's restore: until then the HPA controller may still scale it back.
pub(super) fn settling(snap: &Snapshot, now: Timestamp) -> Option<Timestamp> {
    let t = &snap.template;
    t.actions
        .iter()
        .filter(|a| {
            t.status
                .actions
                .iter()
                .any(|s| s.name == a.name && s.original_replicas.is_some())
        })
        .filter_map(|a| {
            let target = snap.targets.get(&t.target_key(a))?;
            target.deployment.as_ref()?;
            let carrier = target.carrier()?;
            carrier.bounds_written?.checked_add(SCALE_BACK_SETTLE).ok()
        })
        .filter(|until| *until > now)
        .max()
}

/// The field manager of kube-controller-manager, whose HPA controller scales Deployments.
pub const HPA_CONTROLLER: &str = "kube-controller-manager";

/// The Deployment of an idle action restored again, if the HPA controller scaled it back
/// after its restore: it carries no marks, the HPA controller set its replicas to the
/// override's minimum within [`OBSERVATION_LIMIT`] of the last write of the bounds, that
/// write is the restore (Moonin's restore field manager last wrote a bound, or it came
/// within [`OBSERVATION_LIMIT`] of the last window's close: a later write of the bounds, a
/// GitOps sync the next day, leaves the Deployment to its HPA), and `recorded` (what the
/// restore put back, from the status) differs. An HPA
/// controller acting on the restored bounds would not do that, save with metrics asking for
/// exactly that minimum; such a scale is undone for those two minutes at most.
pub(super) fn undo_scale_back(
    snap: &Snapshot,
    a: &ScalingAction,
    key: &TargetKey,
    recorded: Option<i32>,
) -> Option<Op> {
    let target = snap.targets.get(key)?;
    let d = target.deployment.as_ref()?;
    let carrier = target.carrier()?;
    let (manager, scaled) = d.replicas_set_by.as_ref()?;
    let written = carrier.bounds_written?;
    let closed = snap
        .template
        .status
        .executions
        .iter()
        .filter_map(|e| e.end.as_ref().map(|t| t.0))
        .max()?;
    // The last write of the bounds is the restore when Moonin's restore wrote them (however
    // long after the close: a manager down at the close restores when it is back), or, for
    // bounds the restore removed (no one owns them now), when it came right after the close.
    // `managedFields` keeps whole seconds.
    let by_restore = [carrier.kind.min_field(), carrier.kind.max_field()]
        .iter()
        .any(|f| carrier.managers.get(*f).map(String::as_str) == Some(field_manager::RESTORE));
    let since_close = written.duration_since(closed) + SignedDuration::from_secs(1);
    if !by_restore && (since_close.is_negative() || since_close > OBSERVATION_LIMIT) {
        return None;
    }
    let recent = scaled >= &written && scaled.duration_since(written) < OBSERVATION_LIMIT;
    let scaled_back = manager == HPA_CONTROLLER && d.replicas() == a.min_replicas;
    if !(recent && scaled_back) || d.marks.owner.is_some() || carrier.marks.owner.is_some() {
        return None;
    }
    let restore = recorded?
        .max(carrier.min.unwrap_or(1))
        .min(carrier.max.unwrap_or(i32::MAX));
    if restore == d.replicas() {
        return None;
    }
    let mut patch = precondition(
        &d.marks,
        &[keys::OWNER],
        &[("/spec/replicas".to_string(), d.replicas)],
    );
    patch.push(json!({"op": "add", "path": "/spec/replicas", "value": restore}));
    let note = format!(
        "{}: the HPA controller scaled Deployment {key} back to the override's minimum {} after its restore; replicas {} -> {restore}",
        a.name,
        a.min_replicas,
        d.replicas()
    );
    Some(deployment_op(
        a.name.clone(),
        key,
        d,
        patch,
        EventNote::normal(events::RESTORED_AGAIN, note),
    ))
}
