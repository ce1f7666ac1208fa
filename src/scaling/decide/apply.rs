//! Planning the override of one action in an open window: guard the target (missing,
//! contested, blocked), find what scales the Deployment (its HPA or ScaledObject, else a
//! provisional HPA), write the new bounds with the restore data in the same patch, notice
//! and bound another writer undoing it, and raise the Deployment to the new minimum.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::outcome::{Outcome, is_ours, is_ours_for};
use super::patch::{precondition, remove_annotations, set_annotations, set_field, show};
use super::plan::{EventNote, ObjectKind, Op, Wave, Write, override_hash, provisional_name, state};
use super::restore::{deployment_op, replaced_provisional};
use super::snapshot::{
    Autoscaler, AutoscalerKind, Original, OwnerRecord, Target, TargetKey, TemplateView, Workload,
};
use super::{MAX_REAPPLIES, window::ActiveWindow};
use crate::api::{
    field_manager,
    scaling::{ActionStatus, ScalingAction, events, keys, reasons},
};

/// What one action works with once its target passed the guards.
struct Context<'a> {
    t: &'a TemplateView,
    action: &'a ScalingAction,
    key: &'a TargetKey,
    window: &'a ActiveWindow,
    dep: &'a Workload,
    /// The `moonin.io/owner` record, as JSON.
    owner: String,
    /// The override's hash.
    hash: String,
    /// The Deployment's replicas before any override.
    base_replicas: Option<i32>,
}

/// What writing the override on the carrier (or creating a provisional HPA) amounts to.
struct Carried {
    op: Option<Op>,
    via: &'static str,
    message: String,
    /// The Deployment's replicas the carrier records (or recorded) as the original.
    recorded_replicas: Option<i32>,
    /// Someone undid the override: `(gave up, message)`.
    drift: Option<(bool, String)>,
    reapplies: i32,
}

/// Applies one action on its target.
pub(super) fn apply_action(
    t: &TemplateView,
    action: &ScalingAction,
    key: &TargetKey,
    target: Option<&Target>,
    window: &ActiveWindow,
    prev: Option<&ActionStatus>,
    same_window: bool,
) -> Outcome {
    let (dep, carrier, provisional) = match guard(t, action, key, target) {
        Ok(found) => found,
        Err(outcome) => return *outcome,
    };
    let dep_ours = is_ours_for(&dep.marks, &t.uid, &action.name);
    let cx = Context {
        t,
        action,
        key,
        window,
        dep,
        owner: serde_json::to_string(&t.owner(&action.name)).unwrap_or_default(),
        hash: override_hash(&t.uid, action, key),
        // The Deployment's replicas before any override: its own record when an earlier
        // commit already raised it (the Deployment is written first), else what it has now.
        base_replicas: if dep_ours {
            dep.original_replicas
        } else {
            dep.replicas
        },
    };
    let mut ops = Vec::new();
    // A provisional HPA of ours that a real autoscaler has since replaced goes away.
    if let Some(p) = provisional
        && carrier.is_some_and(|c| c.name != p.name)
        && is_ours(&p.marks, &t.uid)
    {
        ops.extend(replaced_provisional(key, p, &t.uid));
    }
    let reapplies = prev
        .filter(|_| same_window)
        .and_then(|p| p.reapplies)
        .unwrap_or(0);
    let mut carried = match carrier {
        None => create_provisional(&cx, reapplies),
        Some(c) => match override_carrier(&cx, c, reapplies) {
            Ok(carried) => carried,
            Err(outcome) => return *outcome,
        },
    };
    // The Deployment is written before the autoscaler: raised first, it already meets the
    // new minimum when the HPA controller reacts to the override, so that controller never
    // scales it between our two writes (which would refuse the second one's precondition).
    let original_replicas = if dep_ours {
        dep.original_replicas
    } else {
        carried.recorded_replicas
    };
    let raise = raise_deployment(&cx, dep_ours, original_replicas);
    // What the Deployment's restore will put back, recorded in the status as well.
    let restores_to = if dep_ours {
        dep.original_replicas
    } else {
        raise.as_ref().map(|_| original_replicas.unwrap_or(1))
    };
    ops.extend(raise);
    ops.extend(carried.op.take());
    let mut outcome = applied_outcome(&cx, carried, ops);
    outcome.status.original_replicas = restores_to;
    outcome
}

/// The Deployment, what carries the override (its autoscaler, else a provisional HPA of
/// Moonin's), and the provisional HPA if there is one.
type Found<'a> = (&'a Workload, Option<&'a Autoscaler>, Option<&'a Autoscaler>);

/// The Deployment and what scales it, or the outcome that stops the action: the target is
/// missing, held by someone else, or cannot be overridden as it is.
fn guard<'a>(
    t: &TemplateView,
    action: &ScalingAction,
    key: &TargetKey,
    target: Option<&'a Target>,
) -> Result<Found<'a>, Box<Outcome>> {
    let blocked = |msg: String| Box::new(blocked(action, key, msg));
    let Some(target) = target else {
        return Err(Box::new(not_found(action, key)));
    };
    let Some(dep) = &target.deployment else {
        return Err(Box::new(not_found(action, key)));
    };
    if let Some(why) = &dep.marks.unreadable {
        return Err(blocked(format!("Deployment {key}: {why}")));
    }
    if dep.marks.copied {
        return Err(Box::new(strip_copied_marks(action, key, dep)));
    }
    if let Some(h) = &dep.marks.owner
        && !(h.uid == t.uid && h.action == action.name)
    {
        let what = format!("Deployment {key}");
        let live = dep.marks.owner_live;
        return Err(Box::new(holder_outcome(t, action, key, h, live, &what)));
    }
    let scaled_objects: Vec<&Autoscaler> = target
        .autoscalers
        .iter()
        .filter(|a| a.kind == AutoscalerKind::ScaledObject)
        .collect();
    for a in &target.autoscalers {
        if let Some(so) = &a.keda_owner
            && !scaled_objects.iter().any(|s| &s.name == so)
        {
            return Err(blocked(format!(
                "HorizontalPodAutoscaler {}/{} belongs to ScaledObject {so}, which Moonin cannot see; install KEDA's ScaledObject CRD before starting Moonin",
                key.namespace, a.name
            )));
        }
    }
    let real: Vec<&Autoscaler> = target.own_autoscalers().collect();
    if real.len() > 1 {
        let names: Vec<String> = real
            .iter()
            .map(|a| format!("{} {}", a.kind.as_str(), a.name))
            .collect();
        return Err(blocked(format!(
            "Deployment {key} has {} autoscalers ({}); Moonin overrides only a workload with one",
            real.len(),
            names.join(", ")
        )));
    }
    let provisional = target
        .autoscalers
        .iter()
        .find(|a| a.provisional && a.keda_owner.is_none());
    Ok((dep, real.first().copied().or(provisional), provisional))
}

/// No autoscaler scales the Deployment: a provisional HPA, owned by the template, carries
/// the override (and the restore data).
fn create_provisional(cx: &Context<'_>, reapplies: i32) -> Carried {
    let (action, key) = (cx.action, cx.key);
    let name = provisional_name(&key.name);
    let eff_max = action.max_replicas.max(cx.dep.replicas());
    let original = Original {
        spec: BTreeMap::new(),
        deployment: Some(key.name.clone()),
        deployment_replicas: cx.base_replicas,
    };
    let hpa = provisional_hpa(
        cx.t,
        &name,
        key,
        action.min_replicas,
        eff_max,
        &[
            (keys::OWNER, cx.owner.clone()),
            (
                keys::ORIGINAL,
                serde_json::to_string(&original).unwrap_or_default(),
            ),
            (keys::APPLIED_HASH, cx.hash.clone()),
        ],
    );
    let op = Op {
        action: action.name.clone(),
        namespace: key.namespace.clone(),
        name: name.clone(),
        write: Write::CreateHpa(hpa),
        event: Some(EventNote::normal(
            events::APPLIED,
            format!(
                "{}: created provisional HorizontalPodAutoscaler {}/{name} (min {}, max {eff_max}) until {}",
                action.name, key.namespace, action.min_replicas, cx.window.end
            ),
        )),
        wave: Wave::default(),
        restores: false,
    };
    Carried {
        op: Some(op),
        via: "ProvisionalHPA",
        message: format!(
            "provisional HorizontalPodAutoscaler {name}: min {}, max {eff_max}",
            action.min_replicas
        ),
        recorded_replicas: cx.base_replicas,
        drift: None,
        reapplies,
    }
}

/// The override on the HPA or ScaledObject `c`: written when it is not there yet, changed,
/// or undone by another writer (at most [`MAX_REAPPLIES`] times in a window).
fn override_carrier(
    cx: &Context<'_>,
    c: &Autoscaler,
    mut reapplies: i32,
) -> Result<Carried, Box<Outcome>> {
    let (t, action, key) = (cx.t, cx.action, cx.key);
    let via = match (c.kind, c.provisional) {
        (AutoscalerKind::ScaledObject, _) => "ScaledObject",
        (AutoscalerKind::Hpa, true) => "ProvisionalHPA",
        (AutoscalerKind::Hpa, false) => "HPA",
    };
    let what = format!("{} {}/{}", c.kind.as_str(), key.namespace, c.name);
    if let Some(why) = &c.marks.unreadable {
        return Err(Box::new(blocked(action, key, format!("{what}: {why}"))));
    }
    if let Some(h) = &c.marks.owner
        && !(h.uid == t.uid && h.action == action.name)
    {
        return Err(Box::new(holder_outcome(
            t,
            action,
            key,
            h,
            c.marks.owner_live,
            &what,
        )));
    }
    if let Some(p) = &c.paused {
        return Err(Box::new(blocked(
            action,
            key,
            format!(
                "{what} is paused by KEDA's {p} annotation; Moonin leaves a paused ScaledObject alone"
            ),
        )));
    }
    let (min_f, max_f) = (c.kind.min_field(), c.kind.max_field());
    let ours = is_ours_for(&c.marks, &t.uid, &action.name);
    let eff_max = action.max_replicas.max(cx.dep.replicas());
    let mut drift = None;
    let write = if !ours {
        true
    } else if c.applied_hash.as_deref() != Some(cx.hash.as_str()) {
        reapplies = 0;
        true
    } else if c.min != Some(action.min_replicas) || c.max.unwrap_or(i32::MAX) < action.max_replicas
    {
        let (again, verdict) = undone(c, &what, &mut reapplies);
        drift = Some(verdict);
        again
    } else {
        false
    };
    let op = write.then(|| {
        let note = format!(
            "{}: {} {what}: {min_f} {} -> {}, {max_f} {} -> {eff_max} until {}",
            action.name,
            match (&drift, ours) {
                (Some(_), _) => "re-applied",
                (None, true) => "updated",
                (None, false) => "applied",
            },
            show(c.min),
            action.min_replicas,
            show(c.max),
            cx.window.end
        );
        override_op(cx, c, ours, eff_max, drift.is_some(), note)
    });
    Ok(Carried {
        op,
        via,
        message: format!("{what}: {min_f} {}, {max_f} {eff_max}", action.min_replicas),
        recorded_replicas: if ours {
            c.original
                .as_ref()
                .and_then(|o| o.deployment_replicas)
                .or(cx.dep.replicas)
        } else {
            cx.base_replicas
        },
        drift,
        reapplies,
    })
}

/// Someone undid our override on `c`: whether to write it again (counting `reapplies`),
/// and the drift it amounts to, `(gave up, message)`, naming who did it.
fn undone(c: &Autoscaler, what: &str, reapplies: &mut i32) -> (bool, (bool, String)) {
    let (min_f, max_f) = (c.kind.min_field(), c.kind.max_field());
    let mut who: Vec<String> = [min_f, max_f]
        .iter()
        .filter_map(|f| c.managers.get(*f))
        .filter(|m| !field_manager::is_scaling(m))
        .cloned()
        .collect();
    who.dedup();
    let who = if who.is_empty() {
        "another writer".to_string()
    } else {
        who.join(", ")
    };
    let changed = format!(
        "{who} changed {what} to {min_f} {}, {max_f} {}",
        show(c.min),
        show(c.max)
    );
    if *reapplies < MAX_REAPPLIES {
        *reapplies += 1;
        (
            true,
            (
                false,
                format!("{changed}; re-applied ({reapplies} of {MAX_REAPPLIES})"),
            ),
        )
    } else {
        (
            false,
            (
                true,
                format!(
                    "{changed}; stopped re-applying after {MAX_REAPPLIES} times in this window. Configure the GitOps tool to ignore these fields (see the README)"
                ),
            ),
        )
    }
}

/// The patch writing the override on `c`, with the ownership marks and (the first time)
/// the original values in the same write.
fn override_op(
    cx: &Context<'_>,
    c: &Autoscaler,
    ours: bool,
    eff_max: i32,
    reapplied: bool,
    note: String,
) -> Op {
    let (min_f, max_f) = (c.kind.min_field(), c.kind.max_field());
    // What the override depends on: the bounds it records as the originals, the marks that
    // say who holds the carrier (and, on a ScaledObject, that KEDA is not paused), and that
    // the carrier still scales this Deployment.
    let mut guarded = vec![keys::OWNER, keys::ORIGINAL, keys::APPLIED_HASH];
    if c.kind == AutoscalerKind::ScaledObject {
        guarded.extend(keys::KEDA_PAUSED);
    }
    let mut patch = precondition(
        &c.marks,
        &guarded,
        &[
            (format!("/spec/{min_f}"), c.min),
            (format!("/spec/{max_f}"), c.max),
        ],
    );
    patch.push(json!({"op": "test", "path": "/spec/scaleTargetRef/name", "value": cx.key.name}));
    patch.extend(set_field(
        &format!("/spec/{min_f}"),
        c.min,
        Some(cx.action.min_replicas),
    ));
    patch.extend(set_field(&format!("/spec/{max_f}"), c.max, Some(eff_max)));
    let mut marks = vec![
        (keys::OWNER, cx.owner.clone()),
        (keys::APPLIED_HASH, cx.hash.clone()),
    ];
    if !ours || c.original.is_none() {
        let original = Original {
            spec: BTreeMap::from([(min_f.to_string(), c.min), (max_f.to_string(), c.max)]),
            deployment: Some(cx.key.name.clone()),
            deployment_replicas: cx.base_replicas,
        };
        marks.push((
            keys::ORIGINAL,
            serde_json::to_string(&original).unwrap_or_default(),
        ));
    }
    patch.extend(set_annotations(c.marks.has_annotations, &marks));
    let reason = match (reapplied, ours) {
        (true, _) => events::REAPPLIED,
        (false, true) => events::UPDATED,
        (false, false) => events::APPLIED,
    };
    Op {
        action: cx.action.name.clone(),
        namespace: cx.key.namespace.clone(),
        name: c.name.clone(),
        write: Write::Patch {
            kind: c.kind.into(),
            ops: patch,
        },
        event: Some(EventNote {
            warning: reapplied,
            reason,
            note,
        }),
        wave: Wave::default(),
        restores: false,
    }
}

/// The Deployment carries copies of Moonin's marks that another field manager wrote (see
/// `load::copied_marks`): they go first, in a write of their own. Written again unchanged by
/// the override, they would stay that manager's (a field's owner changes only with its
/// value) and the override's own marks would read as copies. The next plan overrides.
fn strip_copied_marks(action: &ScalingAction, key: &TargetKey, dep: &Workload) -> Outcome {
    let marks = [keys::OWNER, keys::ORIGINAL_REPLICAS];
    let present: Vec<&str> = marks
        .into_iter()
        .filter(|k| dep.marks.read.contains_key(*k))
        .collect();
    let mut patch = precondition(&dep.marks, &marks, &[]);
    patch.extend(remove_annotations(&present));
    let msg = format!(
        "Deployment {key} carries copies of Moonin's marks that another field manager wrote \
         (kubectl rollout undo copies them back from a ReplicaSet); removing them first"
    );
    let mut o = Outcome::new(&action.name, key, state::PENDING, msg.clone());
    let event = EventNote::normal(
        events::COPIED_MARKS_REMOVED,
        format!("{}: {msg}", action.name),
    );
    // Part of an override, not a restore: written as moonin-scaling, on the override's backoff.
    o.ops.push(Op {
        restores: false,
        ..deployment_op(action.name.clone(), key, dep, patch, event)
    });
    o
}

/// The Deployment raised to the new minimum now, its original replicas recorded once.
fn raise_deployment(cx: &Context<'_>, dep_ours: bool, original: Option<i32>) -> Option<Op> {
    let (action, key, dep) = (cx.action, cx.key, cx.dep);
    let below = dep.replicas() < action.min_replicas;
    let raised = original.unwrap_or(1) < action.min_replicas;
    if !(below || (!dep_ours && raised)) {
        return None;
    }
    let mut patch = precondition(
        &dep.marks,
        &[keys::OWNER, keys::ORIGINAL_REPLICAS],
        &[("/spec/replicas".to_string(), dep.replicas)],
    );
    if below {
        patch.push(json!({"op": "add", "path": "/spec/replicas", "value": action.min_replicas}));
    }
    if !dep_ours {
        let marks = vec![
            (keys::OWNER, cx.owner.clone()),
            (keys::ORIGINAL_REPLICAS, original.unwrap_or(1).to_string()),
        ];
        patch.extend(set_annotations(dep.marks.has_annotations, &marks));
    }
    Some(Op {
        action: action.name.clone(),
        namespace: key.namespace.clone(),
        name: dep.name.clone(),
        write: Write::Patch {
            kind: ObjectKind::Deployment,
            ops: patch,
        },
        event: below.then(|| {
            EventNote::normal(
                events::SCALED_UP,
                format!(
                    "{}: Deployment {key} replicas {} -> {}",
                    action.name,
                    dep.replicas(),
                    action.min_replicas
                ),
            )
        }),
        wave: Wave::default(),
        restores: false,
    })
}

/// The outcome of an action whose override is planned (or was given up after drift).
fn applied_outcome(cx: &Context<'_>, carried: Carried, ops: Vec<Op>) -> Outcome {
    let gave_up = carried.drift.as_ref().is_some_and(|(stopped, _)| *stopped);
    let message = match &carried.drift {
        Some((_, m)) => m.clone(),
        None => carried.message,
    };
    let mut o = Outcome::new(
        &cx.action.name,
        cx.key,
        if gave_up {
            state::REVERTED
        } else {
            state::APPLIED
        },
        message,
    );
    o.status.via = Some(carried.via.to_string());
    o.status.applied_hash = Some(cx.hash.clone());
    o.status.reapplies = (carried.reapplies > 0).then_some(carried.reapplies);
    o.ops = ops;
    o.drift = carried.drift;
    o
}

fn blocked(action: &ScalingAction, key: &TargetKey, msg: String) -> Outcome {
    let mut o = Outcome::new(&action.name, key, state::BLOCKED, msg.clone());
    o.warning = Some((reasons::BLOCKED, msg));
    o
}

/// The target carries another owner's override (or one of this template's other actions'):
/// a conflict while that owner lives, a wait while its override is being restored.
pub(super) fn holder_outcome(
    t: &TemplateView,
    action: &ScalingAction,
    key: &TargetKey,
    holder: &OwnerRecord,
    live: bool,
    what: &str,
) -> Outcome {
    if holder.uid == t.uid {
        // An action renamed or retargeted mid-window: its old override is reverted in this
        // same plan, and the next reconcile applies the new one.
        Outcome::new(
            &action.name,
            key,
            state::PENDING,
            format!(
                "{what} is being released by action {} of this template",
                holder.action
            ),
        )
    } else if live {
        let msg = format!("{what} is held by {}", holder.describe());
        let mut o = Outcome::new(&action.name, key, state::CONFLICT, msg.clone());
        o.conflict = Some(msg);
        o
    } else {
        Outcome::new(
            &action.name,
            key,
            state::PENDING,
            format!(
                "{what} still carries an override of {}, which no longer exists; it is being restored",
                holder.describe()
            ),
        )
    }
}

/// The outcome of an action whose Deployment does not exist.
pub(super) fn not_found(action: &ScalingAction, key: &TargetKey) -> Outcome {
    let msg = format!("Deployment {key} not found");
    let mut o = Outcome::new(&action.name, key, state::FAILED, msg.clone());
    o.warning = Some((reasons::TARGET_NOT_FOUND, msg));
    o
}

fn provisional_hpa(
    t: &TemplateView,
    name: &str,
    key: &TargetKey,
    min: i32,
    max: i32,
    marks: &[(&str, String)],
) -> Value {
    let annotations: serde_json::Map<String, Value> = marks
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
        .collect();
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": key.namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "moonin",
                keys::PROVISIONAL: "true",
            },
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
                "kind": t.kind.as_str(),
                "name": t.name,
                "uid": t.uid,
            }],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": key.name},
            "minReplicas": min,
            "maxReplicas": max,
        },
    })
}
