//! Table tests for [`decide`]: hand-built snapshots, a fixed `now`, exact plans.
//!
//! The fixture: `ScalingTemplate shop/business-hours` (uid `tpl-uid`), schedule
//! `0 8 * * 1-5` UTC, duration 10h. `now` is Monday 2026-11-30 10:00 UTC, inside the
//! window [08:00, 18:00).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use proptest::prelude::*;

use super::restore::HPA_CONTROLLER;
use super::*;
use crate::api::conditions;
use crate::api::field_manager;
use crate::api::scaling::{
    ActionStatus, Execution, ManualRun, TargetRef, WindowSpec, events, keys,
};
use serde_json::{Value, json};

const NS: &str = "shop";
const TPL: &str = "business-hours";
const UID: &str = "tpl-uid";
const START: &str = "2026-11-30T08:00:00Z";
const END: &str = "2026-11-30T18:00:00Z";
const ARGO: &str = "argocd-controller";

// ---------------------------------------------------------------------------------------
// Builders.

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn now() -> Timestamp {
    ts("2026-11-30T10:00:00Z")
}

fn mins(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

fn action(name: &str, dep: &str, min: i32, max: i32) -> ScalingAction {
    ScalingAction {
        name: name.to_string(),
        target: TargetRef {
            kind: "Deployment".to_string(),
            namespace: None,
            name: dep.to_string(),
        },
        min_replicas: min,
        max_replicas: max,
        priority_up: 0,
        priority_down: 0,
    }
}

fn prio(mut a: ScalingAction, up: i32, down: i32) -> ScalingAction {
    a.priority_up = up;
    a.priority_down = down;
    a
}

fn window_spec() -> WindowSpec {
    WindowSpec {
        suspend: false,
        schedule: "0 8 * * 1-5".to_string(),
        time_zone: None,
        duration: "10h".parse().unwrap_or_else(|e| panic!("{e:?}")),
        valid_until: None,
        manual_run: None,
    }
}

fn template(actions: Vec<ScalingAction>) -> TemplateView {
    TemplateView {
        kind: TemplateKind::Namespaced,
        namespace: Some(NS.to_string()),
        name: TPL.to_string(),
        uid: UID.to_string(),
        generation: Some(3),
        deleting: false,
        has_finalizer: true,
        window: window_spec(),
        actions,
        status: ScalingTemplateStatus::default(),
    }
}

fn key(dep: &str) -> TargetKey {
    TargetKey {
        namespace: NS.to_string(),
        name: dep.to_string(),
    }
}

fn hash(a: &ScalingAction) -> String {
    override_hash(UID, a, &key(&a.target.name))
}

fn owner_record(uid: &str, name: &str, action: &str) -> OwnerRecord {
    OwnerRecord {
        kind: "ScalingTemplate".to_string(),
        namespace: Some(NS.to_string()),
        name: name.to_string(),
        uid: uid.to_string(),
        action: action.to_string(),
    }
}

fn plain() -> Marks {
    Marks {
        has_annotations: true,
        ..Marks::default()
    }
}

/// Held by action `action` of our template.
fn ours(action: &str) -> Marks {
    Marks {
        owner: Some(owner_record(UID, TPL, action)),
        owner_live: true,
        has_annotations: true,
        ..Marks::default()
    }
}

/// Held by `ScalingTemplate shop/peak (action web)`, alive or gone.
fn foreign(live: bool) -> Marks {
    Marks {
        owner: Some(owner_record("other-uid", "peak", "web")),
        owner_live: live,
        has_annotations: true,
        ..Marks::default()
    }
}

fn deployment(name: &str, replicas: i32) -> Workload {
    Workload {
        name: name.to_string(),
        resource_version: "d1".to_string(),
        replicas: Some(replicas),
        marks: plain(),
        original_replicas: None,
        replicas_set_by: None,
    }
}

/// A Deployment our action raised from `original` to `now_at`.
fn raised_deployment(name: &str, action: &str, original: i32, now_at: i32) -> Workload {
    Workload {
        resource_version: "d2".to_string(),
        marks: ours(action),
        original_replicas: Some(original),
        ..deployment(name, now_at)
    }
}

fn hpa(name: &str, min: Option<i32>, max: Option<i32>) -> Autoscaler {
    Autoscaler {
        kind: AutoscalerKind::Hpa,
        name: name.to_string(),
        uid: format!("{name}-uid"),
        resource_version: "h1".to_string(),
        provisional: false,
        keda_owner: None,
        min,
        max,
        paused: None,
        marks: plain(),
        original: None,
        applied_hash: None,
        managers: BTreeMap::new(),
        unobserved: false,
        bounds_written: None,
    }
}

fn scaled_object(name: &str, min: Option<i32>, max: Option<i32>) -> Autoscaler {
    Autoscaler {
        kind: AutoscalerKind::ScaledObject,
        resource_version: "s1".to_string(),
        ..hpa(name, min, max)
    }
}

fn original(
    kind: AutoscalerKind,
    min: Option<i32>,
    max: Option<i32>,
    dep: Option<i32>,
) -> Original {
    Original {
        deployment: None,
        spec: BTreeMap::from([
            (kind.min_field().to_string(), min),
            (kind.max_field().to_string(), max),
        ]),
        deployment_replicas: dep,
    }
}

/// `a` as Moonin left it after applying `act` (with `min`/`max` written by moonin-scaling).
fn applied(a: Autoscaler, act: &ScalingAction, min: i32, max: i32, orig: Original) -> Autoscaler {
    let managers = BTreeMap::from([
        (
            a.kind.min_field().to_string(),
            field_manager::SCALING.to_string(),
        ),
        (
            a.kind.max_field().to_string(),
            field_manager::SCALING.to_string(),
        ),
    ]);
    Autoscaler {
        resource_version: "h2".to_string(),
        min: Some(min),
        max: Some(max),
        marks: ours(&act.name),
        original: Some(orig),
        applied_hash: Some(hash(act)),
        managers,
        ..a
    }
}

fn tgt(dep: Option<Workload>, autoscalers: Vec<Autoscaler>) -> Target {
    Target {
        deployment: dep,
        autoscalers,
    }
}

/// The snapshot of `t` and its targets. A Deployment one of `t`'s actions raised has its
/// original replicas in the status, as the commit of the plan that raised it wrote them
/// (see [`unrecorded`] for the crash that leaves them out).
fn snap(mut t: TemplateView, targets: Vec<(&str, Target)>) -> Snapshot {
    let targets: BTreeMap<TargetKey, Target> = targets
        .into_iter()
        .map(|(n, mut t)| {
            fill_read(&mut t);
            (key(n), t)
        })
        .collect();
    for (k, target) in &targets {
        let Some((owner, d)) = target
            .deployment
            .as_ref()
            .and_then(|d| Some((d.marks.owner.as_ref()?, d)))
        else {
            continue;
        };
        if owner.uid != t.uid || t.status.actions.iter().any(|a| a.name == owner.action) {
            continue;
        }
        t.status.actions.push(ActionStatus {
            name: owner.action.clone(),
            target: k.to_string(),
            state: state::APPLIED.to_string(),
            via: None,
            applied_hash: None,
            message: None,
            reapplies: None,
            original_replicas: d.original_replicas,
        });
    }
    Snapshot {
        template: t,
        targets,
    }
}

/// `s` as a crash leaves it before the status recorded the original replicas.
fn unrecorded(mut s: Snapshot) -> Snapshot {
    s.template
        .status
        .actions
        .iter_mut()
        .for_each(|a| a.original_replicas = None);
    s
}

/// Gives every object of `t` whose raw annotations are not set the raw values its parsed
/// marks stand for, as load would have read them.
fn fill_read(t: &mut Target) {
    if let Some(d) = t.deployment.as_mut()
        && d.marks.read.is_empty()
    {
        let read = &mut d.marks.read;
        read.extend(
            d.marks
                .owner
                .as_ref()
                .map(|o| (keys::OWNER.to_string(), json(o))),
        );
        read.extend(
            d.original_replicas
                .map(|r| (keys::ORIGINAL_REPLICAS.to_string(), r.to_string())),
        );
    }
    for a in t.autoscalers.iter_mut().filter(|a| a.marks.read.is_empty()) {
        let read = &mut a.marks.read;
        read.extend(
            a.marks
                .owner
                .as_ref()
                .map(|o| (keys::OWNER.to_string(), json(o))),
        );
        read.extend(
            a.original
                .as_ref()
                .map(|o| (keys::ORIGINAL.to_string(), json(o))),
        );
        read.extend(
            a.applied_hash
                .clone()
                .map(|h| (keys::APPLIED_HASH.to_string(), h)),
        );
        read.extend(a.paused.clone().map(|k| (k, "true".to_string())));
    }
}

/// A record as its annotation holds it.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| panic!("{e}"))
}

/// checkout: min 10, max 30.
fn checkout() -> ScalingAction {
    action("checkout", "checkout", 10, 30)
}

/// Untouched: Deployment at 3, HPA 2..20.
fn fresh_target() -> Target {
    tgt(
        Some(deployment("checkout", 3)),
        vec![hpa("checkout", Some(2), Some(20))],
    )
}

/// What case 1 leaves behind for `applied_as`: HPA 2..20 -> 10..30, Deployment 3 -> 10.
fn applied_target(applied_as: &ScalingAction) -> Target {
    tgt(
        Some(raised_deployment("checkout", &applied_as.name, 3, 10)),
        vec![applied(
            hpa("checkout", Some(2), Some(20)),
            applied_as,
            10,
            30,
            original(AutoscalerKind::Hpa, Some(2), Some(20), Some(3)),
        )],
    )
}

/// The status after the first apply (case 1).
fn applied_status() -> ScalingTemplateStatus {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", fresh_target())],
    );
    decide(&s, now()).status
}

// ---------------------------------------------------------------------------------------
// Expected writes.

/// One write, with the JSON annotations `moonin.io/owner` and `moonin.io/original`
/// parsed so that they compare as values.
#[derive(Debug, PartialEq)]
enum W {
    Patch(ObjectKind, Vec<Value>),
    Create(Value),
    Delete(String, String),
}

fn ann(k: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        k.replace('~', "~0").replace('/', "~1")
    )
}

fn parse_json(v: &Value) -> Value {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("annotation is not a string: {v}"));
    serde_json::from_str(s).unwrap_or_else(|e| panic!("annotation {s:?}: {e}"))
}

fn norm_map(map: &mut serde_json::Map<String, Value>) {
    for k in [keys::OWNER, keys::ORIGINAL] {
        if let Some(v) = map.get_mut(k) {
            *v = parse_json(v);
        }
    }
}

fn norm_ops(ops: &[Value]) -> Vec<Value> {
    ops.iter()
        .map(|op| {
            let mut op = op.clone();
            let path = op["path"].as_str().unwrap_or_default().to_string();
            if path == "/metadata/annotations" {
                if let Some(m) = op["value"].as_object_mut() {
                    norm_map(m);
                }
            } else if (path == ann(keys::OWNER) || path == ann(keys::ORIGINAL))
                && op.get("value").is_some()
            {
                op["value"] = parse_json(&op["value"]);
            }
            op
        })
        .collect()
}

/// `(namespace/name, write)` of every op, in order.
fn writes(ops: &[Op]) -> Vec<(String, W)> {
    ops.iter()
        .map(|o| {
            let w = match &o.write {
                Write::Patch { kind, ops } => W::Patch(*kind, norm_ops(body(ops))),
                Write::CreateHpa(v) => {
                    let mut v = v.clone();
                    if let Some(m) = v["metadata"]["annotations"].as_object_mut() {
                        norm_map(m);
                    }
                    W::Create(v)
                }
                Write::DeleteHpa {
                    uid,
                    resource_version,
                } => W::Delete(uid.clone(), resource_version.clone()),
            };
            (format!("{}/{}", o.namespace, o.name), w)
        })
        .collect()
}

fn at(name: &str, w: W) -> (String, W) {
    (format!("{NS}/{name}"), w)
}

/// The ops of a patch after its precondition (its leading `test` ops), which must be there
/// and must not test the resourceVersion.
#[track_caller]
fn body(ops: &[Value]) -> &[Value] {
    let n = ops.iter().take_while(|o| o["op"] == "test").count();
    assert!(n > 0, "a patch without a precondition: {ops:?}");
    assert!(
        ops.iter().all(|o| o["path"] != "/metadata/resourceVersion"),
        "a patch testing the resourceVersion: {ops:?}"
    );
    assert!(ops[n..].iter().all(|o| o["op"] != "test"), "{ops:?}");
    &ops[n..]
}

/// The precondition of a patch: its leading `test` ops.
fn guard_of(ops: &[Value]) -> &[Value] {
    let n = ops.iter().take_while(|o| o["op"] == "test").count();
    &ops[..n]
}

fn test_op(path: &str, v: impl Into<Value>) -> Value {
    json!({"op": "test", "path": path, "value": v.into()})
}

fn add(path: &str, v: impl Into<Value>) -> Value {
    json!({"op": "add", "path": path, "value": v.into()})
}

fn rm(path: &str) -> Value {
    json!({"op": "remove", "path": path})
}

fn our_owner(action: &str) -> Value {
    json!({"kind": "ScalingTemplate", "namespace": NS, "name": TPL, "uid": UID, "action": action})
}

fn hpa_patch(ops: Vec<Value>) -> W {
    W::Patch(ObjectKind::Hpa, ops)
}

fn dep_patch(ops: Vec<Value>) -> W {
    W::Patch(ObjectKind::Deployment, ops)
}

/// The ops that remove the three carrier annotations.
fn rm_carrier_marks() -> [Value; 3] {
    [
        rm(&ann(keys::OWNER)),
        rm(&ann(keys::ORIGINAL)),
        rm(&ann(keys::APPLIED_HASH)),
    ]
}

/// The revert of [`applied_target`]: HPA back to 2..20, Deployment back to 3.
fn revert_of_applied() -> Vec<(String, W)> {
    vec![
        at(
            "checkout",
            hpa_patch(
                [
                    vec![add("/spec/maxReplicas", 20), add("/spec/minReplicas", 2)],
                    rm_carrier_marks().to_vec(),
                ]
                .concat(),
            ),
        ),
        at(
            "checkout",
            dep_patch(vec![
                add("/spec/replicas", 3),
                rm(&ann(keys::OWNER)),
                rm(&ann(keys::ORIGINAL_REPLICAS)),
            ]),
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Status helpers.

fn cond<'a>(s: &'a ScalingTemplateStatus, type_: &str) -> &'a Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {:#?}", s.conditions))
}

#[track_caller]
fn assert_cond(s: &ScalingTemplateStatus, type_: &str, status: bool, reason: &str, contains: &str) {
    let c = cond(s, type_);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        (conditions::status_str(status), reason),
        "{type_}: {c:?}"
    );
    assert!(
        c.message.contains(contains),
        "{type_} message {:?} lacks {contains:?}",
        c.message
    );
}

fn act<'a>(s: &'a ScalingTemplateStatus, name: &str) -> &'a ActionStatus {
    s.actions
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("no action {name} in {:#?}", s.actions))
}

fn states(s: &ScalingTemplateStatus) -> Vec<(&str, &str)> {
    s.actions
        .iter()
        .map(|a| (a.name.as_str(), a.state.as_str()))
        .collect()
}

fn op_events(plan: &Plan) -> Vec<(bool, &'static str)> {
    plan.ops
        .iter()
        .filter_map(|o| o.event.as_ref().map(|e| (e.warning, e.reason)))
        .collect()
}

#[track_caller]
fn assert_one_warning(plan: &Plan, reason: &str, contains: &str) {
    assert_eq!(plan.events.len(), 1, "{:#?}", plan.events);
    let e = &plan.events[0];
    assert!(e.warning, "{e:?}");
    assert_eq!(e.reason, reason);
    assert!(e.note.contains(contains), "{:?} lacks {contains:?}", e.note);
}

fn resync(at: Timestamp) -> Timestamp {
    at.saturating_add(RESYNC).unwrap_or(at)
}

/// The fresh target, its Deployment carrying copies of this template's marks that another
/// field manager wrote (`kubectl rollout undo` brought them back from a ReplicaSet).
fn copied_marks_target() -> Target {
    let mut target = fresh_target();
    if let Some(d) = target.deployment.as_mut() {
        d.marks = Marks {
            copied: true,
            read: BTreeMap::from([
                (keys::OWNER.to_string(), our_owner("checkout").to_string()),
                (keys::ORIGINAL_REPLICAS.to_string(), "1".to_string()),
            ]),
            ..plain()
        };
    }
    target
}

#[test]
fn marks_copied_onto_the_deployment_are_removed_alone_before_the_override() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", copied_marks_target())],
    );
    let plan = decide(&s, now());
    assert_eq!(
        writes(&plan.ops),
        vec![at(
            "checkout",
            dep_patch(vec![
                rm(&ann(keys::OWNER)),
                rm(&ann(keys::ORIGINAL_REPLICAS))
            ])
        )]
    );
    let Write::Patch { ops, .. } = &plan.ops[0].write else {
        panic!("{:?}", plan.ops[0].write);
    };
    // Guarded by the copies' values: a change to them in between refuses the removal.
    assert!(ops.contains(&test_op(
        &ann(keys::OWNER),
        our_owner("checkout").to_string()
    )));
    assert!(ops.contains(&test_op(&ann(keys::ORIGINAL_REPLICAS), "1")));
    assert_eq!(op_events(&plan), vec![(false, "CopiedMarksRemoved")]);
    assert_eq!(plan.status.actions[0].state, "Pending");
    assert!(
        plan.status.actions[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("kubectl rollout undo")),
        "{:?}",
        plan.status.actions[0]
    );
}

#[test]
fn marks_copied_onto_the_deployment_outside_a_window_change_nothing() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", copied_marks_target())],
    );
    // After the window: read as an unmarked Deployment, nothing to restore.
    let after = resync(ts(END));
    let plan = decide(&s, after);
    assert!(plan.ops.is_empty(), "{:#?}", plan.ops);
    assert!(plan.status.actions.iter().all(|a| a.state != "Applied"));
}

// ---------------------------------------------------------------------------------------
// 1. First apply on an existing HPA.

#[test]
fn first_apply_on_an_existing_hpa() {
    let a = checkout();
    let s = snap(
        template(vec![a.clone()]),
        vec![("checkout", fresh_target())],
    );
    let plan = decide(&s, now());

    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 10),
                    add(&ann(keys::OWNER), our_owner("checkout")),
                    add(&ann(keys::ORIGINAL_REPLICAS), "3"),
                ])
            ),
            at(
                "checkout",
                hpa_patch(vec![
                    add("/spec/minReplicas", 10),
                    add("/spec/maxReplicas", 30),
                    add(&ann(keys::OWNER), our_owner("checkout")),
                    add(&ann(keys::APPLIED_HASH), hash(&a)),
                    add(
                        &ann(keys::ORIGINAL),
                        json!({"spec": {"minReplicas": 2, "maxReplicas": 20}, "deployment": "checkout", "deploymentReplicas": 3})
                    ),
                ])
            ),
        ]
    );
    assert!(plan.ops.iter().all(|o| o.action == "checkout"));
    assert_eq!(
        op_events(&plan),
        vec![(false, "ScaledUp"), (false, "Applied")]
    );
    assert!(plan.events.is_empty(), "{:?}", plan.events);

    let st = &plan.status;
    assert_eq!(st.phase.as_deref(), Some("Active"));
    assert_eq!(st.observed_generation, Some(3));
    assert_eq!(
        st.window,
        Some(WindowStatus {
            trigger: "Schedule".into(),
            start: Time(ts(START)),
            end: Time(ts(END)),
        })
    );
    assert_eq!(st.next_windows.len(), 3);
    assert_eq!(st.next_windows[0].start, Time(ts("2026-12-01T08:00:00Z")));
    assert_eq!(
        st.actions,
        vec![ActionStatus {
            name: "checkout".into(),
            target: "shop/checkout".into(),
            state: "Applied".into(),
            via: Some("HPA".into()),
            applied_hash: Some(hash(&a)),
            message: st.actions[0].message.clone(),
            reapplies: None,
            original_replicas: Some(3),
        }]
    );
    assert_cond(st, "Ready", true, "Reconciled", "");
    assert_cond(st, "Active", true, "Schedule", END);
    assert_cond(st, "Stalled", false, "Reconciled", "");
    assert_cond(st, "Reconciling", false, "Reconciled", "");
    assert_cond(st, "Conflict", false, "NoConflict", "");
    assert_cond(st, "Reverted", false, "NotReverted", "");
    assert_eq!(
        st.executions,
        vec![Execution {
            trigger: "Schedule".into(),
            start: Time(ts(START)),
            end: None,
            result: "Applied".into(),
        }]
    );
    assert_eq!(plan.requeue_at, resync(now()));
    assert_eq!(plan.finalizer, Finalizer::Keep);
}

#[test]
fn first_apply_creates_the_annotation_map_when_there_is_none() {
    let a = checkout();
    let mut t = fresh_target();
    t.autoscalers[0].marks.has_annotations = false;
    let plan = decide(
        &snap(template(vec![a.clone()]), vec![("checkout", t)]),
        now(),
    );
    let w = writes(&plan.ops);
    assert_eq!(
        w[1],
        at(
            "checkout",
            hpa_patch(vec![
                add("/spec/minReplicas", 10),
                add("/spec/maxReplicas", 30),
                add(
                    "/metadata/annotations",
                    json!({
                        keys::OWNER: our_owner("checkout"),
                        keys::APPLIED_HASH: hash(&a),
                        keys::ORIGINAL: {"spec": {"minReplicas": 2, "maxReplicas": 20}, "deployment": "checkout", "deploymentReplicas": 3},
                    })
                ),
            ])
        )
    );
}

/// A crash between the two writes of a first apply: the Deployment (written first) is
/// already raised and marked; the HPA's record takes the Deployment's original replicas,
/// not the raised count, and the Deployment is not written again.
#[test]
fn apply_after_a_crash_between_the_two_writes_records_the_original_replicas() {
    let a = checkout();
    let t = tgt(
        Some(raised_deployment("checkout", "checkout", 3, 10)),
        vec![hpa("checkout", Some(2), Some(20))],
    );
    let plan = decide(
        &snap(template(vec![a.clone()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![at(
            "checkout",
            hpa_patch(vec![
                add("/spec/minReplicas", 10),
                add("/spec/maxReplicas", 30),
                add(&ann(keys::OWNER), our_owner("checkout")),
                add(&ann(keys::APPLIED_HASH), hash(&a)),
                add(
                    &ann(keys::ORIGINAL),
                    json!({"spec": {"minReplicas": 2, "maxReplicas": 20}, "deployment": "checkout", "deploymentReplicas": 3})
                ),
            ])
        )]
    );
}

// ---------------------------------------------------------------------------------------
// 1b. Preconditions: each write tests what it depends on, not the resourceVersion.

/// A Deployment at 3 scaled by a ScaledObject (2..20) and KEDA's HPA.
fn scaled_object_target() -> Target {
    tgt(
        Some(deployment("checkout", 3)),
        vec![
            scaled_object("checkout", Some(2), Some(20)),
            keda_hpa("checkout"),
        ],
    )
}

/// A ScaledObject target as the override left it.
fn applied_scaled_object_target() -> Target {
    let a = checkout();
    tgt(
        Some(raised_deployment("checkout", &a.name, 3, 10)),
        vec![
            applied(
                scaled_object("checkout", Some(2), Some(20)),
                &a,
                10,
                30,
                original(AutoscalerKind::ScaledObject, Some(2), Some(20), Some(3)),
            ),
            keda_hpa("checkout"),
        ],
    )
}

/// The override and restore scenarios: (name, snapshot, when), each planning patches.
fn guarded_scenarios() -> Vec<(&'static str, Snapshot, Timestamp)> {
    let one = |t: Target| snap(template(vec![checkout()]), vec![("checkout", t)]);
    let mut bare = fresh_target();
    bare.autoscalers[0].marks.has_annotations = false;
    vec![
        ("HPA override", one(fresh_target()), now()),
        ("override of an HPA without annotations", one(bare), now()),
        ("ScaledObject override", one(scaled_object_target()), now()),
        (
            "HPA restore",
            one(applied_target(&checkout())),
            after_window(),
        ),
        (
            "ScaledObject restore",
            one(applied_scaled_object_target()),
            after_window(),
        ),
    ]
}

/// Every patch `s` plans at `at`: the op, the object as the API server holds it, the ops.
fn patches(s: &Snapshot, at: Timestamp) -> Vec<(Op, Value, Vec<Value>)> {
    let plan = decide(s, at);
    assert!(!plan.ops.is_empty(), "nothing planned");
    plan.ops
        .into_iter()
        .map(|op| {
            let Write::Patch { ops, .. } = &op.write else {
                panic!("not a patch: {op:?}");
            };
            let ops = ops.clone();
            let (_, doc) = object_of(s, &op).unwrap_or_else(|| panic!("unknown object: {op:?}"));
            (op, doc, ops)
        })
        .collect()
}

#[test]
fn first_apply_tests_the_bounds_and_marks_it_read_not_the_resource_version() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", fresh_target())],
    );
    let guards: Vec<Vec<Value>> = patches(&s, now())
        .into_iter()
        .map(|(_, _, ops)| guard_of(&ops).to_vec())
        .collect();
    assert_eq!(
        guards,
        vec![
            vec![
                test_op(&ann(keys::OWNER), Value::Null),
                test_op(&ann(keys::ORIGINAL_REPLICAS), Value::Null),
                test_op("/spec/replicas", 3),
            ],
            vec![
                test_op(&ann(keys::OWNER), Value::Null),
                test_op(&ann(keys::ORIGINAL), Value::Null),
                test_op(&ann(keys::APPLIED_HASH), Value::Null),
                test_op("/spec/minReplicas", 2),
                test_op("/spec/maxReplicas", 20),
                test_op("/spec/scaleTargetRef/name", "checkout"),
            ],
        ]
    );
}

#[test]
fn restore_tests_the_records_it_restores_from_and_the_bounds_it_read() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", applied_target(&checkout()))],
    );
    let hpa = &s.targets[&key("checkout")].autoscalers[0];
    let read = |k: &str| Value::String(hpa.marks.read[k].clone());
    let dep = s.targets[&key("checkout")]
        .deployment
        .as_ref()
        .expect("deployment");
    let read_dep = |k: &str| Value::String(dep.marks.read[k].clone());
    let guards: Vec<Vec<Value>> = patches(&s, after_window())
        .into_iter()
        .map(|(_, _, ops)| guard_of(&ops).to_vec())
        .collect();
    assert_eq!(
        guards,
        vec![
            vec![
                test_op(&ann(keys::OWNER), read(keys::OWNER)),
                test_op(&ann(keys::ORIGINAL), read(keys::ORIGINAL)),
                test_op(&ann(keys::APPLIED_HASH), read(keys::APPLIED_HASH)),
                test_op("/spec/minReplicas", 10),
                test_op("/spec/maxReplicas", 30),
            ],
            vec![
                test_op(&ann(keys::OWNER), read_dep(keys::OWNER)),
                test_op(
                    &ann(keys::ORIGINAL_REPLICAS),
                    read_dep(keys::ORIGINAL_REPLICAS)
                ),
                test_op("/spec/replicas", 10),
            ],
        ],
        "the HPA, then its Deployment"
    );
}

#[test]
fn a_scaled_object_override_also_tests_that_keda_is_not_paused() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", scaled_object_target())],
    );
    let so = patches(&s, now())
        .into_iter()
        .find(|(op, _, _)| {
            matches!(
                op.write,
                Write::Patch {
                    kind: ObjectKind::ScaledObject,
                    ..
                }
            )
        })
        .unwrap_or_else(|| panic!("no ScaledObject patch"));
    let guard = guard_of(&so.2);
    for k in keys::KEDA_PAUSED {
        assert!(
            guard.contains(&test_op(&ann(k), Value::Null)),
            "{k} not tested absent: {guard:?}"
        );
    }
}

/// What the autoscaler's controller, the Deployment controller and other tools write
/// without touching what an override depends on: a new resourceVersion, the status, an
/// unrelated annotation.
fn status_only_change(doc: &mut Value) {
    doc["metadata"]["resourceVersion"] = json!("changed-by-a-status-write");
    doc["status"] = json!({"currentReplicas": 7, "desiredReplicas": 9, "observedGeneration": 4});
    if let Some(a) = doc["metadata"]["annotations"].as_object_mut() {
        a.insert("example.com/last-seen".into(), json!("now"));
    }
}

#[test]
fn preconditions_pass_after_a_status_only_change() {
    for (name, s, at) in guarded_scenarios() {
        for (op, mut doc, ops) in patches(&s, at) {
            assert!(holds(&doc, &ops), "{name}: refused as read: {op:?}");
            status_only_change(&mut doc);
            assert!(
                holds(&doc, &ops),
                "{name}: a status-only change refused {op:?} on {doc}"
            );
        }
    }
}

#[test]
fn preconditions_fail_on_a_changed_bound_or_replicas() {
    for (name, s, at) in guarded_scenarios() {
        for (op, doc, ops) in patches(&s, at) {
            let fields: Vec<String> = match &op.write {
                Write::Patch {
                    kind: ObjectKind::Deployment,
                    ..
                } => vec!["replicas".into()],
                Write::Patch { kind, .. } => {
                    let k = if *kind == ObjectKind::Hpa {
                        AutoscalerKind::Hpa
                    } else {
                        AutoscalerKind::ScaledObject
                    };
                    vec![k.min_field().into(), k.max_field().into()]
                }
                w => panic!("{w:?}"),
            };
            for f in fields {
                let mut changed = doc.clone();
                let now_at = changed["spec"][&f].as_i64().unwrap_or(0);
                changed["spec"][&f] = json!(now_at + 1);
                assert!(!holds(&changed, &ops), "{name}: {f} changed, yet {op:?}");
                let mut gone = doc.clone();
                if let Some(spec) = gone["spec"].as_object_mut() {
                    spec.remove(&f);
                }
                if doc["spec"].get(&f).is_some() {
                    assert!(!holds(&gone, &ops), "{name}: {f} removed, yet {op:?}");
                }
            }
        }
    }
}

#[test]
fn preconditions_fail_on_a_changed_annotation() {
    let foreign_owner = json(&owner_record("other-uid", "peak", "web"));
    for (name, s, at) in guarded_scenarios() {
        for (op, doc, ops) in patches(&s, at) {
            let guarded: Vec<&str> = if matches!(
                op.write,
                Write::Patch {
                    kind: ObjectKind::Deployment,
                    ..
                }
            ) {
                vec![keys::OWNER, keys::ORIGINAL_REPLICAS]
            } else {
                vec![keys::OWNER, keys::ORIGINAL, keys::APPLIED_HASH]
            };
            for k in guarded {
                // Another template's record written over (or in place of) what was read.
                let mut changed = doc.clone();
                if changed["metadata"]["annotations"].is_null() {
                    changed["metadata"]["annotations"] = json!({});
                }
                changed["metadata"]["annotations"][k] = json!(foreign_owner);
                assert!(!holds(&changed, &ops), "{name}: {k} changed, yet {op:?}");
                // A record that was read, taken away.
                if let Some(a) = doc["metadata"]["annotations"].as_object()
                    && a.contains_key(k)
                {
                    let mut gone = doc.clone();
                    if let Some(a) = gone["metadata"]["annotations"].as_object_mut() {
                        a.remove(k);
                    }
                    assert!(!holds(&gone, &ops), "{name}: {k} removed, yet {op:?}");
                }
            }
            if doc["metadata"]["annotations"].is_null() {
                // An object read without annotations gets the whole map in one op: any
                // annotation added meanwhile refuses it.
                let mut added = doc.clone();
                added["metadata"]["annotations"] = json!({"example.com/team": "shop"});
                assert!(
                    !holds(&added, &ops),
                    "{name}: annotations added, yet {op:?}"
                );
            }
            if name == "ScaledObject override"
                && matches!(
                    op.write,
                    Write::Patch {
                        kind: ObjectKind::ScaledObject,
                        ..
                    }
                )
            {
                let mut paused = doc.clone();
                paused["metadata"]["annotations"]["autoscaling.keda.sh/paused"] = json!("true");
                assert!(!holds(&paused, &ops), "{name}: paused, yet {op:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Idempotent re-reconcile.

#[test]
fn re_reconcile_writes_nothing() {
    let a = checkout();
    let prev = applied_status();
    let mut t = template(vec![a.clone()]);
    t.status = prev.clone();
    let s = snap(t, vec![("checkout", applied_target(&a))]);
    let plan = decide(&s, now() + mins(1));
    assert_eq!(writes(&plan.ops), vec![]);
    assert!(plan.events.is_empty(), "{:?}", plan.events);
    assert_eq!(plan.status, prev);
}

/// A window the status announced is counted once as it opens and once as it closes, from
/// its scheduled instants; a window the template was created into, and a manual run, are
/// not scheduled edges.
#[test]
fn scheduled_edges_are_counted_once_from_the_instant_the_status_announced() {
    let monday = |t: &str| ts(&format!("2026-11-30T{t}Z"));
    let edge = |opens, at: &str| Edge {
        opens,
        at: monday(at),
    };
    // Reconciles until nothing is left to write, and records the last status.
    let settle = |s: &mut Snapshot, at: Timestamp| {
        let plan = converge(s, at, 4);
        s.template.status = plan.status.clone();
        plan
    };
    let mut s = snap(
        template(vec![checkout()]),
        vec![("checkout", fresh_target())],
    );
    assert_eq!(settle(&mut s, monday("07:00:00")).edges, vec![]);
    assert_eq!(
        s.template.status.next_windows[0].start.0,
        monday("08:00:00")
    );

    // Decided 2.5 s late, the edge is the scheduled instant, and only the first decision
    // after it (the one whose status records the window) counts it.
    let late = monday("08:00:02.5");
    assert_eq!(decide(&s, late).edges, vec![edge(true, "08:00:00")]);
    let plan = settle(&mut s, late);
    assert_eq!(
        s.template.status.window.as_ref().map(|w| w.start.0),
        Some(monday("08:00:00"))
    );
    assert_eq!((plan.ops.len(), plan.edges), (0, vec![]));
    assert_eq!(decide(&s, monday("12:00:00")).edges, vec![]);

    let closing = monday("18:00:01");
    assert_eq!(decide(&s, closing).edges, vec![edge(false, "18:00:00")]);
    let plan = settle(&mut s, closing);
    assert_eq!((plan.ops.len(), plan.edges), (0, vec![]));
    assert_eq!(s.template.status.window, None);

    // Created while its window is open: the window was never announced.
    let mut created = snap(
        template(vec![checkout()]),
        vec![("checkout", fresh_target())],
    );
    assert_eq!(decide(&created, monday("09:00:00")).edges, vec![]);
    // A manual run opens a window no status announced; its end is scheduled.
    let mut manual = window_spec();
    manual.manual_run = Some(ManualRun {
        start_time: Time(monday("20:00:00")),
        duration: Some("30m".parse().unwrap_or_else(|e| panic!("{e:?}"))),
    });
    created.template.window = manual;
    let plan = settle(&mut created, monday("20:00:00"));
    assert!(created.template.status.window.is_some(), "{plan:?}");
    assert_eq!(plan.edges, vec![]);
}

// ---------------------------------------------------------------------------------------
// 3. Spec change mid-window.

#[test]
fn spec_change_mid_window_reapplies_and_keeps_the_first_original() {
    let old = checkout();
    let new = action("checkout", "checkout", 12, 30);
    assert_ne!(hash(&old), hash(&new));
    let mut t = template(vec![new.clone()]);
    t.status = applied_status();
    let plan = decide(&snap(t, vec![("checkout", applied_target(&old))]), now());
    assert_eq!(
        writes(&plan.ops),
        vec![
            at("checkout", dep_patch(vec![add("/spec/replicas", 12)])),
            at(
                "checkout",
                hpa_patch(vec![
                    add("/spec/minReplicas", 12),
                    add(&ann(keys::OWNER), our_owner("checkout")),
                    add(&ann(keys::APPLIED_HASH), hash(&new)),
                ])
            ),
        ]
    );
    assert_eq!(
        op_events(&plan),
        vec![(false, "ScaledUp"), (false, "Updated")]
    );
    let st = act(&plan.status, "checkout");
    assert_eq!(st.state, "Applied");
    assert_eq!(st.applied_hash, Some(hash(&new)));
}

// ---------------------------------------------------------------------------------------
// 4. Conflict with another live template.

#[test]
fn hpa_held_by_another_live_template_conflicts() {
    let mut h = hpa("checkout", Some(10), Some(40));
    h.marks = foreign(true);
    let t = tgt(Some(deployment("checkout", 10)), vec![h]);
    let s = snap(template(vec![checkout()]), vec![("checkout", t.clone())]);
    let plan = decide(&s, now());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Conflict")]);
    assert!(
        act(&plan.status, "checkout")
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("shop/peak")
    );
    assert_cond(
        &plan.status,
        "Conflict",
        true,
        "Conflict",
        "ScalingTemplate shop/peak",
    );
    assert_cond(&plan.status, "Ready", false, "Conflict", "shop/peak");
    assert_cond(&plan.status, "Stalled", true, "Conflict", "shop/peak");
    assert_one_warning(&plan, "Conflict", "shop/peak");

    // Second reconcile, same conclusion: no second Event.
    let mut tv = template(vec![checkout()]);
    tv.status = plan.status.clone();
    let again = decide(&snap(tv, vec![("checkout", t)]), now() + mins(1));
    assert_eq!(writes(&again.ops), vec![]);
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert!(conditions::equal_ignoring_time(
        &again.status.conditions,
        &plan.status.conditions
    ));
}

#[test]
fn deployment_held_by_another_live_template_conflicts() {
    let mut d = deployment("checkout", 10);
    d.marks = foreign(true);
    let s = snap(
        template(vec![checkout()]),
        vec![(
            "checkout",
            tgt(Some(d), vec![hpa("checkout", Some(2), Some(20))]),
        )],
    );
    let plan = decide(&s, now());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Conflict")]);
    assert_cond(
        &plan.status,
        "Conflict",
        true,
        "Conflict",
        "Deployment shop/checkout is held by ScalingTemplate shop/peak",
    );
    assert_one_warning(&plan, "Conflict", "shop/peak");
}

// ---------------------------------------------------------------------------------------
// 5. Owner gone: wait for the sweep, which reverts.

fn orphaned_target() -> Target {
    let mut h = hpa("checkout", Some(10), Some(40));
    h.resource_version = "h2".into();
    h.marks = foreign(false);
    h.original = Some(original(AutoscalerKind::Hpa, Some(2), Some(20), Some(3)));
    h.applied_hash = Some("0123456789abcdef".into());
    let mut d = raised_deployment("checkout", "web", 3, 10);
    d.marks = foreign(false);
    tgt(Some(d), vec![h])
}

#[test]
fn override_of_a_deleted_template_waits_for_restore_and_sweep_reverts_it() {
    let s = snap(
        template(vec![checkout()]),
        vec![("checkout", orphaned_target())],
    );
    let plan = decide_through_restore(&s, now());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Pending")]);
    assert_cond(
        &plan.status,
        "Reconciling",
        true,
        "WaitingForRestore",
        "shop/peak",
    );
    assert_cond(&plan.status, "Conflict", false, "NoConflict", "");

    // The autoscaler first, then its Deployment.
    let mut after = s.clone();
    let swept = sweep(&after.targets).concat();
    assert!(!sweep_waits(&after.targets));
    play(&mut after, &swept);
    assert!(sweep(&after.targets).is_empty());
    let mut outside = s.clone();
    if let Some(t) = outside.targets.get_mut(&key("checkout")) {
        t.autoscalers[0].original = Some(original(AutoscalerKind::Hpa, Some(2), Some(5), Some(3)));
    }
    assert!(
        sweep_waits(&outside.targets),
        "restored bounds below the Deployment: the HPA controller rescales it first"
    );
    assert_eq!(sweep(&outside.targets).concat().len(), 1);
    assert_eq!(
        writes(&swept),
        vec![
            at(
                "checkout",
                hpa_patch(
                    [
                        vec![add("/spec/maxReplicas", 20), add("/spec/minReplicas", 2),],
                        rm_carrier_marks().to_vec(),
                    ]
                    .concat()
                )
            ),
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 3),
                    rm(&ann(keys::OWNER)),
                    rm(&ann(keys::ORIGINAL_REPLICAS)),
                ])
            ),
        ]
    );
    assert!(swept.iter().all(|o| o.action == "web"));
    // The sweep leaves live owners alone.
    assert_eq!(
        sweep(
            &snap(
                template(vec![]),
                vec![("checkout", applied_target(&checkout()))]
            )
            .targets
        ),
        Vec::<Vec<Op>>::new()
    );
}

// ---------------------------------------------------------------------------------------
// 6. KEDA.

fn keda_hpa(so: &str) -> Autoscaler {
    Autoscaler {
        keda_owner: Some(so.to_string()),
        ..hpa(&format!("keda-hpa-{so}"), Some(1), Some(10))
    }
}

#[test]
fn keda_scaled_object_carries_the_override_and_its_hpa_is_never_patched() {
    let a = checkout();
    let t = tgt(
        Some(deployment("checkout", 3)),
        vec![
            keda_hpa("checkout"),
            scaled_object("checkout", Some(1), Some(10)),
        ],
    );
    let plan = decide(
        &snap(template(vec![a.clone()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 10),
                    add(&ann(keys::OWNER), our_owner("checkout")),
                    add(&ann(keys::ORIGINAL_REPLICAS), "3"),
                ])
            ),
            at(
                "checkout",
                W::Patch(
                    ObjectKind::ScaledObject,
                    vec![
                        add("/spec/minReplicaCount", 10),
                        add("/spec/maxReplicaCount", 30),
                        add(&ann(keys::OWNER), our_owner("checkout")),
                        add(&ann(keys::APPLIED_HASH), hash(&a)),
                        add(
                            &ann(keys::ORIGINAL),
                            json!({"spec": {"minReplicaCount": 1, "maxReplicaCount": 10}, "deployment": "checkout", "deploymentReplicas": 3})
                        ),
                    ]
                )
            ),
        ]
    );
    assert!(plan.ops.iter().all(|o| o.name != "keda-hpa-checkout"));
    let st = act(&plan.status, "checkout");
    assert_eq!(
        (st.state.as_str(), st.via.as_deref()),
        ("Applied", Some("ScaledObject"))
    );
}

#[test]
fn paused_scaled_object_is_blocked() {
    let mut so = scaled_object("checkout", Some(1), Some(10));
    so.paused = Some("autoscaling.keda.sh/paused".into());
    let t = tgt(
        Some(deployment("checkout", 3)),
        vec![keda_hpa("checkout"), so],
    );
    let plan = decide(
        &snap(template(vec![checkout()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Blocked")]);
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "Blocked",
        "autoscaling.keda.sh/paused",
    );
    assert_one_warning(&plan, "Blocked", "paused");
}

#[test]
fn keda_hpa_without_its_scaled_object_is_blocked() {
    let t = tgt(Some(deployment("checkout", 3)), vec![keda_hpa("checkout")]);
    let plan = decide(
        &snap(template(vec![checkout()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Blocked")]);
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "Blocked",
        "ScaledObject checkout",
    );
    assert_one_warning(&plan, "Blocked", "ScaledObject checkout");
}

#[test]
fn two_real_autoscalers_are_blocked() {
    let t = tgt(
        Some(deployment("checkout", 3)),
        vec![
            hpa("checkout", Some(2), Some(20)),
            hpa("checkout-2", Some(2), Some(20)),
        ],
    );
    let plan = decide(
        &snap(template(vec![checkout()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Blocked")]);
    assert_cond(&plan.status, "Ready", false, "Blocked", "2 autoscalers");
    assert_cond(&plan.status, "Stalled", true, "Blocked", "2 autoscalers");
}

// ---------------------------------------------------------------------------------------
// 7. Drift.

fn drifted_target() -> Target {
    let mut t = applied_target(&checkout());
    let h = &mut t.autoscalers[0];
    h.min = Some(2);
    h.managers.insert("minReplicas".into(), ARGO.into());
    t
}

#[test]
fn drift_is_reapplied_and_named() {
    let a = checkout();
    let mut tv = template(vec![a.clone()]);
    tv.status = applied_status();
    let plan = decide(&snap(tv, vec![("checkout", drifted_target())]), now());
    assert_eq!(
        writes(&plan.ops),
        vec![at(
            "checkout",
            hpa_patch(vec![
                add("/spec/minReplicas", 10),
                add(&ann(keys::OWNER), our_owner("checkout")),
                add(&ann(keys::APPLIED_HASH), hash(&a)),
            ])
        )]
    );
    assert_eq!(op_events(&plan), vec![(true, "Reapplied")]);
    let st = act(&plan.status, "checkout");
    assert_eq!((st.state.as_str(), st.reapplies), ("Applied", Some(1)));
    assert_cond(
        &plan.status,
        "Reverted",
        true,
        "OverriddenByFieldManager",
        ARGO,
    );
    assert_cond(&plan.status, "Ready", true, "Reconciled", "");
    assert!(plan.events.is_empty(), "{:?}", plan.events);
}

#[test]
fn drift_stops_after_the_reapply_limit() {
    let mut prev = applied_status();
    prev.actions[0].reapplies = Some(MAX_REAPPLIES);
    let mut tv = template(vec![checkout()]);
    tv.status = prev;
    let plan = decide(&snap(tv, vec![("checkout", drifted_target())]), now());
    assert_eq!(writes(&plan.ops), vec![]);
    let st = act(&plan.status, "checkout");
    assert_eq!((st.state.as_str(), st.reapplies), ("Reverted", Some(3)));
    assert_cond(&plan.status, "Ready", false, "ReapplyLimitReached", ARGO);
    assert_cond(&plan.status, "Reverted", true, "ReapplyLimitReached", ARGO);
    assert_one_warning(&plan, "ReapplyLimitReached", ARGO);
}

#[test]
fn reapply_count_restarts_in_a_new_window() {
    let mut prev = applied_status();
    prev.actions[0].reapplies = Some(MAX_REAPPLIES);
    if let Some(w) = prev.window.as_mut() {
        w.start = Time(ts("2026-11-27T08:00:00Z"));
        w.end = Time(ts("2026-11-27T18:00:00Z"));
    }
    let mut tv = template(vec![checkout()]);
    tv.status = prev;
    let plan = decide(&snap(tv, vec![("checkout", drifted_target())]), now());
    assert_eq!(plan.ops.len(), 1);
    assert_eq!(act(&plan.status, "checkout").reapplies, Some(1));
}

// ---------------------------------------------------------------------------------------
// 8. Never lower maxReplicas below the current replicas.

#[test]
fn max_is_never_written_below_current_replicas() {
    let a = checkout();
    let t = tgt(
        Some(deployment("checkout", 40)),
        vec![hpa("checkout", Some(2), Some(20))],
    );
    let plan = decide(
        &snap(template(vec![a.clone()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![at(
            "checkout",
            hpa_patch(vec![
                add("/spec/minReplicas", 10),
                add("/spec/maxReplicas", 40),
                add(&ann(keys::OWNER), our_owner("checkout")),
                add(&ann(keys::APPLIED_HASH), hash(&a)),
                add(
                    &ann(keys::ORIGINAL),
                    json!({"spec": {"minReplicas": 2, "maxReplicas": 20}, "deployment": "checkout", "deploymentReplicas": 40})
                ),
            ])
        )]
    );
}

// ---------------------------------------------------------------------------------------
// 9. No autoscaler: a provisional HPA.

fn provisional_json(a: &ScalingAction, min: i32, max: i32, dep_replicas: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "moonin-checkout",
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "moonin", "moonin.io/provisional": "true"},
            "annotations": {
                keys::OWNER: our_owner("checkout"),
                keys::ORIGINAL: {"spec": {}, "deployment": "checkout", "deploymentReplicas": dep_replicas},
                keys::APPLIED_HASH: hash(a),
            },
            "ownerReferences": [{
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "ScalingTemplate",
                "name": TPL,
                "uid": UID,
            }],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "checkout"},
            "minReplicas": min,
            "maxReplicas": max,
        },
    })
}

#[test]
fn no_autoscaler_creates_a_provisional_hpa() {
    let a = checkout();
    let t = tgt(Some(deployment("checkout", 3)), vec![]);
    let plan = decide(
        &snap(template(vec![a.clone()]), vec![("checkout", t)]),
        now(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 10),
                    add(&ann(keys::OWNER), our_owner("checkout")),
                    add(&ann(keys::ORIGINAL_REPLICAS), "3"),
                ])
            ),
            at(
                "moonin-checkout",
                W::Create(provisional_json(&a, 10, 30, json!(3)))
            ),
        ]
    );
    let st = act(&plan.status, "checkout");
    assert_eq!(
        (st.state.as_str(), st.via.as_deref()),
        ("Applied", Some("ProvisionalHPA"))
    );
    assert_eq!(
        op_events(&plan),
        vec![(false, "ScaledUp"), (false, "Applied")]
    );
}

fn provisional_applied(a: &ScalingAction) -> Autoscaler {
    Autoscaler {
        provisional: true,
        original: Some(Original {
            deployment: None,
            spec: BTreeMap::new(),
            deployment_replicas: Some(3),
        }),
        ..applied(
            hpa("moonin-checkout", None, None),
            a,
            10,
            30,
            Original::default(),
        )
    }
}

#[test]
fn existing_provisional_hpa_is_not_recreated() {
    let a = checkout();
    let t = tgt(
        Some(raised_deployment("checkout", "checkout", 3, 10)),
        vec![provisional_applied(&a)],
    );
    let plan = decide(&snap(template(vec![a]), vec![("checkout", t)]), now());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(
        act(&plan.status, "checkout").via.as_deref(),
        Some("ProvisionalHPA")
    );
}

#[test]
fn provisional_hpa_replaced_by_a_real_one_is_deleted() {
    let a = checkout();
    let t = tgt(
        Some(raised_deployment("checkout", "checkout", 3, 10)),
        vec![provisional_applied(&a), hpa("checkout", Some(2), Some(20))],
    );
    let plan = decide(&snap(template(vec![a]), vec![("checkout", t)]), now());
    let w = writes(&plan.ops);
    assert_eq!(
        w[0],
        at(
            "moonin-checkout",
            W::Delete("moonin-checkout-uid".into(), "h2".into())
        )
    );
    assert!(matches!(&w[1], (n, W::Patch(ObjectKind::Hpa, _)) if n == "shop/checkout"));
    assert_eq!(w.len(), 2, "{w:#?}");
}

// ---------------------------------------------------------------------------------------
// 10. Window ended: revert.

fn after_window() -> Timestamp {
    ts("2026-11-30T19:00:00Z")
}

/// Restored bounds that leave the Deployment's replicas outside (HPA 2..5 before the window,
/// Deployment at 10) make the HPA controller rescale it: its restore waits for that.
#[test]
fn a_restore_waiting_for_the_autoscaler_leaves_the_status_to_the_deployments_restore() {
    let a = checkout();
    let mut tv = template(vec![a.clone()]);
    tv.status = applied_status();
    let mut target = applied_target(&a);
    target.autoscalers[0].original = Some(original(AutoscalerKind::Hpa, Some(2), Some(5), Some(3)));
    let s = snap(tv, vec![("checkout", target)]);
    let first = decide(&s, after_window());
    assert_eq!(first.ops.len(), 1, "the HPA alone: {:#?}", first.ops);
    assert!(
        first.defer_status,
        "its status would be overwritten at once"
    );

    // The HPA controller acted: the Deployment's restore writes the status.
    let mut acted = s.clone();
    play(&mut acted, &first.ops);
    let second = decide(&acted, after_window());
    assert_eq!(second.ops.len(), 1, "the Deployment: {:#?}", second.ops);
    assert!(!second.defer_status);
    assert_eq!(states(&second.status), vec![("checkout", "Reverted")]);
    assert_eq!(second.status.phase.as_deref(), Some("Idle"));
    assert_eq!(
        second.status.executions.len(),
        first.status.executions.len()
    );

    // It has not acted yet: nothing to write, so the wait is reported.
    let mut waiting = s.clone();
    play(&mut waiting, &first.ops);
    waiting
        .targets
        .values_mut()
        .for_each(|t| t.autoscalers.iter_mut().for_each(|h| h.unobserved = true));
    let third = decide(&waiting, after_window());
    assert!(third.ops.is_empty(), "{:#?}", third.ops);
    assert!(!third.defer_status);
    assert_eq!(
        act(&third.status, "checkout").message.as_deref(),
        Some(WAITING_FOR_AUTOSCALER)
    );
}

#[test]
fn window_end_restores_exact_originals_and_closes_the_execution() {
    let a = checkout();
    let mut target = applied_target(&a);
    // minReplicas was absent before the override.
    target.autoscalers[0].original = Some(original(AutoscalerKind::Hpa, None, Some(20), Some(3)));
    let mut tv = template(vec![a]);
    tv.status = applied_status();
    let plan = decide_through_restore(&snap(tv, vec![("checkout", target)]), after_window());
    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "checkout",
                hpa_patch(
                    [
                        vec![add("/spec/maxReplicas", 20), rm("/spec/minReplicas"),],
                        rm_carrier_marks().to_vec(),
                    ]
                    .concat()
                )
            ),
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 3),
                    rm(&ann(keys::OWNER)),
                    rm(&ann(keys::ORIGINAL_REPLICAS)),
                ])
            ),
        ]
    );
    assert_eq!(
        op_events(&plan),
        vec![(false, "Reverted"), (false, "Reverted")]
    );
    let st = &plan.status;
    assert_eq!(states(st), vec![("checkout", "Reverted")]);
    assert_eq!(st.phase.as_deref(), Some("Idle"));
    assert_eq!(st.window, None);
    assert_cond(st, "Active", false, "Idle", "");
    assert_cond(st, "Ready", true, "Reconciled", "2026-12-01T08:00:00Z");
    assert_eq!(
        st.executions,
        vec![Execution {
            trigger: "Schedule".into(),
            start: Time(ts(START)),
            end: Some(Time(ts(END))),
            result: "Applied".into(),
        }]
    );
    assert_eq!(plan.requeue_at, resync(after_window()));
    assert_eq!(plan.finalizer, Finalizer::Keep);
}

/// Restored bounds that leave the Deployment's replicas outside (HPA 2..5 before the window,
/// the Deployment at 10) make the HPA controller rescale it: the Deployment's replicas come
/// back only once the autoscaler is restored and its controller has acted on that.
#[test]
fn the_deployment_waits_for_its_autoscaler_before_its_replicas_come_back() {
    let mut target = applied_target(&checkout());
    target.autoscalers[0].original = Some(original(AutoscalerKind::Hpa, Some(2), Some(5), Some(3)));
    let mut s = snap(template(vec![checkout()]), vec![("checkout", target)]);
    s.template.status = applied_status();
    s.template.deleting = true;
    s.template.has_finalizer = true;
    let revert = revert_of_applied().into_iter().skip(1);
    let first = decide(&s, after_window());
    assert_eq!(first.ops.len(), 1, "{:#?}", first.ops);
    assert!(matches!(
        &first.ops[0].write,
        Write::Patch {
            kind: ObjectKind::Hpa,
            ..
        }
    ));
    assert_eq!(states(&first.status), vec![("checkout", "Reverted")]);
    assert_cond(
        &first.status,
        "Reconciling",
        true,
        "WaitingForRestore",
        "once its controller has acted",
    );
    assert_eq!(
        first.finalizer,
        Finalizer::Keep,
        "not while the Deployment waits"
    );
    assert!(first.requeue_at <= after_window() + SignedDuration::from_secs(2));

    // Restored, but the HPA controller has not acted on it yet: still waiting.
    play(&mut s, &first.ops);
    s.template.status = first.status.clone();
    s.targets
        .values_mut()
        .for_each(|t| t.autoscalers[0].unobserved = true);
    let waiting = decide(&s, after_window());
    assert_eq!(writes(&waiting.ops), vec![]);
    assert_eq!(waiting.finalizer, Finalizer::Keep);

    // Acted on: the Deployment comes back, and then the finalizer goes.
    s.targets
        .values_mut()
        .for_each(|t| t.autoscalers[0].unobserved = false);
    let second = decide(&s, after_window());
    assert_eq!(writes(&second.ops), revert.collect::<Vec<_>>());
    assert_cond(&second.status, "Reconciling", false, "Reconciled", "");
    play(&mut s, &second.ops);
    s.template.status = second.status.clone();
    assert_eq!(decide(&s, after_window()).finalizer, Finalizer::Remove);
}

/// The Deployment comes back clamped into the restored bounds, except at 0 under an HPA:
/// the HPA switched off, put back at 0, not raised to the HPA's minimum.
#[test]
fn window_end_clamps_the_deployment_into_the_restored_bounds() {
    for (recorded, restored) in [(3, 5), (0, 0)] {
        let a = checkout();
        let mut target = applied_target(&a);
        target.autoscalers[0].original = Some(original(
            AutoscalerKind::Hpa,
            Some(5),
            Some(20),
            Some(recorded),
        ));
        if let Some(d) = target.deployment.as_mut() {
            d.original_replicas = Some(recorded);
        }
        let plan = decide_through_restore(
            &snap(template(vec![a]), vec![("checkout", target)]),
            after_window(),
        );
        assert_eq!(
            writes(&plan.ops)[1],
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", restored),
                    rm(&ann(keys::OWNER)),
                    rm(&ann(keys::ORIGINAL_REPLICAS)),
                ])
            ),
            "recorded {recorded}"
        );
    }
}

/// An action removed from the template during its window leaves no status entry to record
/// its Deployment's restore in: the Deployment is restored all the same (before, it kept
/// its marks and the window's replicas for good, and the template never settled).
#[test]
fn an_action_removed_mid_window_has_its_deployment_restored_all_the_same() {
    let a = checkout();
    let mut target = applied_target(&a);
    // Load took the Deployment above the bounds its HPA goes back to: its restore waits
    // for a later plan.
    target.deployment = Some(raised_deployment("checkout", "checkout", 3, 25));
    let mut s = snap(
        template(vec![a]),
        vec![
            ("checkout", target),
            ("web", tgt(Some(deployment("web", 2)), vec![])),
        ],
    );
    s.template.actions = vec![action("web", "web", 4, 8)];
    s.template.status.actions.retain(|x| x.name != "checkout");
    let plan = converge(&mut s, now(), 6);
    assert!(plan.ops.is_empty(), "{:#?}", plan.ops);
    let t = &s.targets[&key("checkout")];
    let d = t.deployment.as_ref().expect("Deployment");
    assert_eq!(
        (d.replicas, d.marks.owner.is_some(), d.original_replicas),
        (Some(3), false, None)
    );
    let h = &t.autoscalers[0];
    assert_eq!(
        (h.min, h.max, h.marks.owner.is_some()),
        (Some(2), Some(20), false)
    );
}

#[test]
fn window_end_deletes_the_provisional_hpa() {
    let a = checkout();
    let t = tgt(
        Some(raised_deployment("checkout", "checkout", 3, 10)),
        vec![provisional_applied(&a)],
    );
    let plan = decide_through_restore(
        &snap(template(vec![a]), vec![("checkout", t)]),
        after_window(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "moonin-checkout",
                W::Delete("moonin-checkout-uid".into(), "h2".into())
            ),
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 3),
                    rm(&ann(keys::OWNER)),
                    rm(&ann(keys::ORIGINAL_REPLICAS)),
                ])
            ),
        ]
    );
    assert_eq!(states(&plan.status), vec![("checkout", "Reverted")]);
}

/// A Deployment the window did not raise (it was above the minimum) but whose provisional
/// HPA scaled it, goes back to its replicas from before the window: no autoscaler is left
/// to decide them, and the provisional HPA's bounds are no bounds any more.
#[test]
fn a_deployment_its_provisional_hpa_scaled_is_restored_when_it_goes() {
    for (before, scaled) in [(12, 30), (40, 30)] {
        let a = checkout();
        let mut provisional = provisional_applied(&a);
        if let Some(o) = provisional.original.as_mut() {
            o.deployment_replicas = Some(before);
        }
        let mut s = snap(
            template(vec![a]),
            vec![(
                "checkout",
                tgt(Some(deployment("checkout", scaled)), vec![provisional]),
            )],
        );
        // The Deployment first: its record is on the provisional HPA alone.
        let kinds: Vec<&str> = decide(&s, after_window())
            .ops
            .iter()
            .map(|o| match &o.write {
                Write::Patch { .. } => "patch",
                Write::DeleteHpa { .. } => "delete",
                Write::CreateHpa(_) => "create",
            })
            .collect();
        assert_eq!(kinds, ["patch", "delete"]);
        let plan = converge(&mut s, after_window(), 4);
        assert!(plan.ops.is_empty(), "{:#?}", plan.ops);
        let t = &s.targets[&key("checkout")];
        assert!(t.autoscalers.is_empty(), "deleted");
        let d = t.deployment.as_ref().expect("Deployment");
        assert_eq!(d.replicas, Some(before), "before the window {before}");
    }
}

// ---------------------------------------------------------------------------------------
// 11. Apply and revert order.

fn two_actions() -> (ScalingAction, ScalingAction) {
    // Name order, target order, priorityUp order and priorityDown order all disagree.
    (
        prio(action("alpha", "zeta", 10, 30), 2, 1),
        prio(action("beta", "alpha-dep", 10, 30), 1, 2),
    )
}

#[test]
fn reverts_follow_priority_down_and_applies_priority_up() {
    let (alpha, beta) = two_actions();
    let fresh = |n: &str| tgt(Some(deployment(n, 3)), vec![hpa(n, Some(2), Some(20))]);
    let s = snap(
        template(vec![alpha.clone(), beta.clone()]),
        vec![("zeta", fresh("zeta")), ("alpha-dep", fresh("alpha-dep"))],
    );
    let up = decide_through_restore(&s, now());
    let order: Vec<(&str, &str)> = up
        .ops
        .iter()
        .map(|o| (o.action.as_str(), o.name.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("beta", "alpha-dep"),
            ("beta", "alpha-dep"),
            ("alpha", "zeta"),
            ("alpha", "zeta"),
        ]
    );

    let applied_on = |n: &str, a: &ScalingAction| {
        tgt(
            Some(raised_deployment(n, &a.name, 3, 10)),
            vec![applied(
                hpa(n, Some(2), Some(20)),
                a,
                10,
                30,
                original(AutoscalerKind::Hpa, Some(2), Some(20), Some(3)),
            )],
        )
    };
    let s = snap(
        template(vec![alpha.clone(), beta.clone()]),
        vec![
            ("zeta", applied_on("zeta", &alpha)),
            ("alpha-dep", applied_on("alpha-dep", &beta)),
        ],
    );
    let down = decide_through_restore(&s, after_window());
    let order: Vec<(&str, &str)> = down
        .ops
        .iter()
        .map(|o| (o.action.as_str(), o.name.as_str()))
        .collect();
    // Reverts by priorityDown, each autoscaler then its Deployment.
    assert_eq!(
        order,
        vec![
            ("alpha", "zeta"),
            ("alpha", "zeta"),
            ("beta", "alpha-dep"),
            ("beta", "alpha-dep"),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 12. Revert does not clobber another manager's value.

#[test]
fn revert_leaves_a_field_another_manager_set() {
    let a = checkout();
    let mut target = applied_target(&a);
    let h = &mut target.autoscalers[0];
    h.min = Some(5);
    h.managers
        .insert("minReplicas".into(), "kubectl-edit".into());
    let plan = decide_through_restore(
        &snap(template(vec![a]), vec![("checkout", target)]),
        after_window(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![
            at(
                "checkout",
                hpa_patch(
                    [
                        vec![add("/spec/maxReplicas", 20)],
                        rm_carrier_marks().to_vec()
                    ]
                    .concat()
                )
            ),
            // 3 clamped into [5 (left as kubectl-edit set it), 20].
            at(
                "checkout",
                dep_patch(vec![
                    add("/spec/replicas", 5),
                    rm(&ann(keys::OWNER)),
                    rm(&ann(keys::ORIGINAL_REPLICAS)),
                ])
            ),
        ]
    );
    let note = &plan.ops[0]
        .event
        .as_ref()
        .map(|e| e.note.clone())
        .unwrap_or_default();
    assert!(note.contains("kubectl-edit"), "{note}");
}

// ---------------------------------------------------------------------------------------
// 13. Action removed mid-window.

#[test]
fn action_removed_mid_window_is_reverted() {
    let web = action("web", "web", 4, 8);
    let s = snap(
        template(vec![web.clone()]),
        vec![
            ("checkout", applied_target(&checkout())),
            (
                "web",
                tgt(
                    Some(deployment("web", 4)),
                    vec![hpa("web", Some(2), Some(8))],
                ),
            ),
        ],
    );
    let plan = decide_through_restore(&s, now());
    let w = writes(&plan.ops);
    // The old target's autoscaler and Deployment, then the new one's override.
    let revert = revert_of_applied();
    assert_eq!(w[..2], revert[..]);
    assert_eq!(plan.ops[0].action, "checkout");
    assert!(matches!(&w[2], (n, W::Patch(ObjectKind::Hpa, _)) if n == "shop/web"));
    assert_eq!(w.len(), 3, "{w:#?}");
    assert_eq!(states(&plan.status), vec![("web", "Applied")]);
}

#[test]
fn action_retargeted_mid_window_reverts_the_old_target() {
    let moved = action("checkout", "checkout-v2", 10, 30);
    let s = snap(
        template(vec![moved]),
        vec![
            ("checkout", applied_target(&checkout())),
            (
                "checkout-v2",
                tgt(
                    Some(deployment("checkout-v2", 3)),
                    vec![hpa("checkout-v2", Some(2), Some(20))],
                ),
            ),
        ],
    );
    let plan = decide_through_restore(&s, now());
    let w = writes(&plan.ops);
    let revert = revert_of_applied();
    assert_eq!(w[..2], revert[..]);
    assert_eq!(w.len(), 4, "{w:#?}");
    assert!(w[2..].iter().all(|(n, _)| n == "shop/checkout-v2"));
}

/// Renaming an action mid-window: the old action's override is reverted in this
/// reconcile, and the new action should simply wait for it, not report a Conflict with
/// its own template.
#[test]

fn action_renamed_mid_window_does_not_conflict_with_itself() {
    let renamed = action("checkout-2", "checkout", 10, 30);
    let s = snap(
        template(vec![renamed]),
        vec![("checkout", applied_target(&checkout()))],
    );
    let plan = decide_through_restore(&s, now());
    assert_eq!(writes(&plan.ops)[..2], revert_of_applied()[..]);
    assert_ne!(act(&plan.status, "checkout-2").state, "Conflict");
    assert_cond(&plan.status, "Conflict", false, "NoConflict", "");
    assert!(
        plan.events.iter().all(|e| e.reason != "Conflict"),
        "{:?}",
        plan.events
    );
}

// ---------------------------------------------------------------------------------------
// 14. Invalid templates.

/// A change to the fixture template.
type Edit = fn(&mut TemplateView);

#[test]
fn invalid_templates_stall_without_touching_targets() {
    let cases: [(&str, Edit); 3] = [
        ("InvalidSchedule", |t| {
            t.window.schedule = "0 25 * * *".into()
        }),
        ("UnknownTimeZone", |t| {
            t.window.time_zone = Some("Mars/Olympus_Mons".into())
        }),
        ("CrossNamespaceTarget", |t| {
            t.actions[0].target.namespace = Some("billing".into())
        }),
    ];
    for (reason, edit) in cases {
        let mut tv = template(vec![checkout()]);
        edit(&mut tv);
        let s = snap(tv.clone(), vec![("checkout", fresh_target())]);
        let plan = decide(&s, now());
        assert_eq!(writes(&plan.ops), vec![], "{reason}");
        assert_eq!(plan.status.phase.as_deref(), Some("Invalid"), "{reason}");
        assert_cond(&plan.status, "Ready", false, reason, "");
        assert_cond(&plan.status, "Stalled", true, reason, "");
        assert_one_warning(&plan, reason, "");
        assert_eq!(
            states(&plan.status),
            vec![("checkout", "Pending")],
            "{reason}"
        );
        assert_eq!(plan.status.window, None);
        assert_eq!(plan.requeue_at, resync(now()));

        // Once reported, not again.
        tv.status = plan.status.clone();
        let again = decide(
            &snap(tv, vec![("checkout", fresh_target())]),
            now() + mins(1),
        );
        assert!(again.events.is_empty(), "{reason}: {:?}", again.events);
    }
}

#[test]
fn invalid_template_messages_name_the_culprit() {
    let mut tv = template(vec![checkout()]);
    tv.window.time_zone = Some("Mars/Olympus_Mons".into());
    let plan = decide(&snap(tv, vec![]), now());
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "UnknownTimeZone",
        "Mars/Olympus_Mons",
    );
    let mut tv = template(vec![checkout()]);
    tv.actions[0].target.namespace = Some("billing".into());
    let plan = decide(&snap(tv, vec![]), now());
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "CrossNamespaceTarget",
        "billing",
    );
}

#[test]
fn invalid_template_still_reverts_what_it_owns() {
    let mut tv = template(vec![checkout()]);
    tv.window.schedule = "not a schedule".into();
    let plan = decide_through_restore(
        &snap(tv, vec![("checkout", applied_target(&checkout()))]),
        now(),
    );
    assert_eq!(writes(&plan.ops), revert_of_applied());
    assert_eq!(plan.status.phase.as_deref(), Some("Invalid"));
    assert_cond(&plan.status, "Ready", false, "InvalidSchedule", "");
}

#[test]
fn cluster_template_may_target_any_namespace() {
    let mut a = checkout();
    a.target.namespace = Some("billing".into());
    let mut tv = template(vec![a]);
    tv.kind = TemplateKind::Cluster;
    tv.namespace = None;
    let target = tgt(
        Some(deployment("checkout", 3)),
        vec![hpa("checkout", Some(2), Some(20))],
    );
    let s = Snapshot {
        template: tv,
        targets: BTreeMap::from([(
            TargetKey {
                namespace: "billing".into(),
                name: "checkout".into(),
            },
            target,
        )]),
    };
    let plan = decide(&s, now());
    assert_eq!(plan.ops.len(), 2);
    assert!(plan.ops.iter().all(|o| o.namespace == "billing"));
    let owner = match &plan.ops[1].write {
        Write::Patch { ops, .. } => norm_ops(body(ops))[2]["value"].clone(),
        w => panic!("{w:?}"),
    };
    assert_eq!(
        owner,
        json!({"kind": "ClusterScalingTemplate", "name": TPL, "uid": UID, "action": "checkout"})
    );
}

// ---------------------------------------------------------------------------------------
// 15. Missing Deployment.

#[test]
fn missing_deployment_fails_the_action() {
    for targets in [
        vec![],
        vec![(
            "checkout",
            tgt(None, vec![hpa("checkout", Some(2), Some(20))]),
        )],
    ] {
        let plan = decide(&snap(template(vec![checkout()]), targets), now());
        assert_eq!(writes(&plan.ops), vec![]);
        assert_eq!(states(&plan.status), vec![("checkout", "Failed")]);
        assert_cond(
            &plan.status,
            "Ready",
            false,
            "TargetNotFound",
            "shop/checkout",
        );
        assert_cond(
            &plan.status,
            "Stalled",
            true,
            "TargetNotFound",
            "shop/checkout",
        );
        assert_one_warning(&plan, "TargetNotFound", "shop/checkout");
        assert_eq!(plan.status.executions[0].result, "Failed");
    }
}

/// A target missing between windows is reported at once (the template's `Ready` is what
/// Argo CD and kstatus read), not at the window that would fail on it; it clears when the
/// Deployment appears.
#[test]
fn a_missing_deployment_is_reported_between_windows_too() {
    let mut s = snap(template(vec![checkout()]), vec![]);
    let plan = decide(&s, after_window());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(states(&plan.status), vec![("checkout", "Failed")]);
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "TargetNotFound",
        "shop/checkout",
    );
    assert_one_warning(&plan, "TargetNotFound", "shop/checkout");
    assert!(plan.status.executions.is_empty(), "no window ran");
    // Reported once: the next reconcile finds it said.
    s.template.status = plan.status.clone();
    let again = decide(&s, after_window() + mins(1));
    assert!(again.events.is_empty(), "{:#?}", again.events);
    // The Deployment appears: the action waits for its window again.
    s.targets = [(
        key("checkout"),
        tgt(Some(deployment("checkout", 3)), vec![]),
    )]
    .into();
    let found = decide(&s, after_window() + mins(2));
    assert_eq!(states(&found.status), vec![("checkout", "Pending")]);
    assert_cond(&found.status, "Ready", true, "Reconciled", "");
}

// ---------------------------------------------------------------------------------------
// 16. Suspend, validUntil, deletion, finalizer.

#[test]
fn suspend_mid_window_reverts() {
    let mut tv = template(vec![checkout()]);
    tv.window.suspend = true;
    tv.status = applied_status();
    let plan = decide_through_restore(
        &snap(tv, vec![("checkout", applied_target(&checkout()))]),
        now(),
    );
    assert_eq!(writes(&plan.ops), revert_of_applied());
    assert_eq!(plan.status.phase.as_deref(), Some("Suspended"));
    assert_cond(&plan.status, "Active", false, "Suspended", "");
    assert_eq!(states(&plan.status), vec![("checkout", "Reverted")]);
    assert_eq!(plan.status.executions[0].end, Some(Time(now())));
}

#[test]
fn expired_template_reverts() {
    let mut tv = template(vec![checkout()]);
    tv.window.valid_until = Some(Time(ts("2026-11-30T09:00:00Z")));
    let plan = decide_through_restore(
        &snap(tv, vec![("checkout", applied_target(&checkout()))]),
        now(),
    );
    assert_eq!(writes(&plan.ops), revert_of_applied());
    assert_eq!(plan.status.phase.as_deref(), Some("Expired"));
    assert_cond(&plan.status, "Active", false, "Expired", "");
}

#[test]
fn deletion_reverts_then_releases_the_finalizer() {
    let mut tv = template(vec![checkout()]);
    tv.deleting = true;
    tv.status = applied_status();
    let plan = decide_through_restore(
        &snap(tv.clone(), vec![("checkout", applied_target(&checkout()))]),
        now(),
    );
    assert_eq!(writes(&plan.ops), revert_of_applied());
    assert_eq!(plan.finalizer, Finalizer::Keep);
    assert_eq!(plan.status.window, None);

    tv.status = plan.status.clone();
    let done = decide_through_restore(&snap(tv, vec![("checkout", fresh_target())]), now());
    assert_eq!(writes(&done.ops), vec![]);
    assert_eq!(done.finalizer, Finalizer::Remove);
}

/// A deleted template whose autoscaler carries restore data Moonin cannot read keeps its
/// finalizer (and says why): releasing it would leave the override with no one to report it.
#[test]
fn deletion_keeps_the_finalizer_while_restore_data_is_unreadable() {
    let mut tv = template(vec![checkout()]);
    tv.deleting = true;
    tv.status = applied_status();
    let mut carrier = hpa("checkout", Some(10), Some(30));
    carrier.marks = ours("checkout");
    carrier.marks.unreadable = Some("annotation moonin.io/original is not readable".into());
    let target = tgt(Some(deployment("checkout", 12)), vec![carrier]);
    let plan = decide_through_restore(&snap(tv, vec![("checkout", target)]), now());
    assert_eq!(writes(&plan.ops), vec![]);
    assert_eq!(plan.finalizer, Finalizer::Keep);
    assert_cond(&plan.status, "Ready", false, "Blocked", "cannot restore");
}

/// A Deployment whose recorded replicas Moonin cannot read keeps them (and its marks) at
/// the close, and the template says so; its HPA is restored all the same.
#[test]
fn an_unreadable_deployment_record_is_held_and_reported() {
    let mut tv = template(vec![checkout()]);
    tv.status = applied_status();
    let mut target = applied_target(&checkout());
    if let Some(d) = target.deployment.as_mut() {
        d.original_replicas = None;
        d.marks.unreadable = Some("annotation moonin.io/original-replicas is not readable".into());
    }
    let plan = decide(&snap(tv, vec![("checkout", target)]), after_window());
    let written: Vec<String> = writes(&plan.ops).into_iter().map(|(n, _)| n).collect();
    assert_eq!(written, ["shop/checkout"], "the HPA's restore alone");
    assert!(
        plan.ops.iter().all(|o| !matches!(
            o.write,
            Write::Patch {
                kind: ObjectKind::Deployment,
                ..
            }
        )),
        "{:#?}",
        writes(&plan.ops)
    );
    assert_cond(
        &plan.status,
        "Ready",
        false,
        "Blocked",
        "cannot restore Deployment",
    );
}

#[test]
fn new_template_gets_the_finalizer() {
    let mut tv = template(vec![checkout()]);
    tv.has_finalizer = false;
    let plan = decide(&snap(tv, vec![("checkout", fresh_target())]), now());
    assert_eq!(plan.finalizer, Finalizer::Add);
}

// ---------------------------------------------------------------------------------------
// 17. Two actions on one Deployment.

#[test]
fn second_action_on_the_same_deployment_conflicts() {
    let a = action("a", "checkout", 10, 30);
    let b = action("b", "checkout", 12, 30);
    let plan = decide(
        &snap(template(vec![b, a]), vec![("checkout", fresh_target())]),
        now(),
    );
    assert_eq!(
        states(&plan.status),
        vec![("a", "Applied"), ("b", "Conflict")]
    );
    assert!(plan.ops.iter().all(|o| o.action == "a"));
    assert_eq!(plan.ops.len(), 2);
    assert_cond(
        &plan.status,
        "Conflict",
        true,
        "Conflict",
        "already targeted by action a",
    );
    assert_one_warning(&plan, "Conflict", "action a");
}

// ---------------------------------------------------------------------------------------
// 18. Manual run.

#[test]
fn manual_run_takes_priority_over_the_schedule() {
    let mut tv = template(vec![checkout()]);
    tv.window.manual_run = Some(ManualRun {
        start_time: Time(ts("2026-11-30T09:30:00Z")),
        duration: Some("2h".parse().unwrap_or_else(|e| panic!("{e:?}"))),
    });
    let plan = decide(&snap(tv, vec![("checkout", fresh_target())]), now());
    assert_eq!(
        plan.status.window,
        Some(WindowStatus {
            trigger: "Manual".into(),
            start: Time(ts("2026-11-30T09:30:00Z")),
            end: Time(ts("2026-11-30T11:30:00Z")),
        })
    );
    assert_cond(&plan.status, "Active", true, "Manual", "11:30");
    assert_eq!(plan.status.executions[0].trigger, "Manual");
    assert_eq!(plan.ops.len(), 2);
}

/// A manual run's start and a `validUntil` given with a fraction of a second: the status
/// keeps whole seconds, and the next reconcile takes the window it announced for the same
/// one (it was a new window each time: an execution and a status write per reconcile).
#[test]
fn a_spec_instant_with_a_fraction_of_a_second_opens_one_window() {
    let mut tv = template(vec![checkout()]);
    tv.window.manual_run = Some(ManualRun {
        start_time: Time(ts("2026-11-30T09:30:00.5Z")),
        duration: Some("2h".parse().unwrap_or_else(|e| panic!("{e:?}"))),
    });
    tv.window.valid_until = Some(Time(ts("2026-11-30T11:00:00.25Z")));
    let mut s = snap(tv, vec![("checkout", fresh_target())]);
    let plan = converge(&mut s, now(), 4);
    // Stored as the API server stores it.
    let json = serde_json::to_value(&plan.status).unwrap_or_default();
    s.template.status = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.template
            .status
            .window
            .as_ref()
            .map(|w| (w.start.0, w.end.0)),
        Some((ts("2026-11-30T09:30:00Z"), ts("2026-11-30T11:00:00Z")))
    );
    let again = decide(&s, now() + mins(1));
    assert_eq!(writes(&again.ops), vec![]);
    assert_eq!(again.status.executions.len(), 1);
    assert_eq!(again.status.window, s.template.status.window);
}

// ---------------------------------------------------------------------------------------
// 19. Requeue.

#[test]
fn requeue_at_the_next_boundary_capped_by_the_resync() {
    let cases = [
        // Active, the window closes within the resync: its end.
        ("2026-11-30T17:58:00Z", END),
        // Active, the end is far: the resync.
        ("2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z"),
        // Idle, the next fire is near.
        ("2026-11-30T07:57:00Z", START),
        // Idle on a weekend: the resync.
        ("2026-11-28T12:00:00Z", "2026-11-28T12:05:00Z"),
    ];
    for (at_, want) in cases {
        let plan = decide(
            &snap(
                template(vec![checkout()]),
                vec![("checkout", fresh_target())],
            ),
            ts(at_),
        );
        assert_eq!(plan.requeue_at, ts(want), "at {at_}");
        assert!(plan.requeue_at <= resync(ts(at_)));
    }
}

// ---------------------------------------------------------------------------------------
// 20. Executions are capped.

#[test]
fn executions_are_capped_at_ten() {
    let mut prev = ScalingTemplateStatus::default();
    for day in 1..=10 {
        prev.executions.push(Execution {
            trigger: "Schedule".into(),
            start: Time(ts(&format!("2026-11-{day:02}T08:00:00Z"))),
            end: Some(Time(ts(&format!("2026-11-{day:02}T18:00:00Z")))),
            result: "Applied".into(),
        });
    }
    let mut tv = template(vec![checkout()]);
    tv.status = prev.clone();
    let plan = decide(&snap(tv, vec![("checkout", fresh_target())]), now());
    let ex = &plan.status.executions;
    assert_eq!(ex.len(), EXECUTIONS_KEPT);
    assert_eq!(ex[..9], prev.executions[1..]);
    assert_eq!(ex[9].start, Time(ts(START)));
    assert_eq!(ex[9].end, None);
}

/// A window missed while the controller was down is closed at its own end, not at the
/// `now` at which the next window is first seen.
#[test]

fn execution_of_a_missed_close_ends_at_its_window_end() {
    let mut prev = applied_status();
    prev.window = Some(WindowStatus {
        trigger: "Schedule".into(),
        start: Time(ts("2026-11-27T08:00:00Z")),
        end: Time(ts("2026-11-27T18:00:00Z")),
    });
    prev.executions[0].start = Time(ts("2026-11-27T08:00:00Z"));
    let mut tv = template(vec![checkout()]);
    tv.status = prev;
    let plan = decide(
        &snap(tv, vec![("checkout", applied_target(&checkout()))]),
        now(),
    );
    let ex = &plan.status.executions;
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].end, Some(Time(ts("2026-11-27T18:00:00Z"))));
}

// ---------------------------------------------------------------------------------------
// 21. Crash between the carrier's write and the Deployment's.

/// The HPA carries our override (it recorded the Deployment at 3); the Deployment has no
/// marks but the HPA controller already raised it to 10.
fn crashed_target() -> Target {
    let mut t = applied_target(&checkout());
    t.deployment = Some(Workload {
        resource_version: "d2".into(),
        ..deployment("checkout", 10)
    });
    t
}

#[test]
fn crash_before_the_deployment_write_records_the_carriers_original() {
    let plan = decide(
        &snap(
            template(vec![checkout()]),
            vec![("checkout", crashed_target())],
        ),
        now(),
    );
    assert_eq!(
        writes(&plan.ops),
        vec![at(
            "checkout",
            dep_patch(vec![
                add(&ann(keys::OWNER), our_owner("checkout")),
                add(&ann(keys::ORIGINAL_REPLICAS), "3"),
            ])
        )]
    );
}

#[test]
fn crash_then_window_end_restores_the_deployment_from_the_carrier() {
    let plan = decide(
        &snap(
            template(vec![checkout()]),
            vec![("checkout", crashed_target())],
        ),
        after_window(),
    );
    let w = writes(&plan.ops);
    assert_eq!(w[0], revert_of_applied()[0]);
    assert_eq!(
        w[1],
        at("checkout", dep_patch(vec![add("/spec/replicas", 3)]))
    );
    assert_eq!(w.len(), 2);
}

#[test]

fn crash_restore_names_the_action() {
    let plan = decide(
        &snap(
            template(vec![checkout()]),
            vec![("checkout", crashed_target())],
        ),
        after_window(),
    );
    assert_eq!(plan.ops.len(), 2);
    assert_eq!(plan.ops[1].action, "checkout");
    let note = plan.ops[1]
        .event
        .as_ref()
        .map(|e| e.note.clone())
        .unwrap_or_default();
    assert!(note.starts_with("checkout: "), "{note:?}");
}

/// The crash-recovery restore (Deployment unmarked, restored from the carrier's record)
/// must not fire on a Deployment that another live template holds.
#[test]

fn crash_restore_never_writes_a_deployment_held_by_another_template() {
    let mut t = applied_target(&checkout());
    t.deployment = Some(Workload {
        marks: foreign(true),
        original_replicas: Some(10),
        ..deployment("checkout", 20)
    });
    let plan = decide(
        &snap(template(vec![checkout()]), vec![("checkout", t)]),
        after_window(),
    );
    let w = writes(&plan.ops);
    assert_eq!(w, revert_of_applied()[..1], "{w:#?}");

    // The same through the sweep of a deleted template's carrier.
    let mut t = orphaned_target();
    if let Some(d) = t.deployment.as_mut() {
        d.marks = foreign(true);
    }
    let swept = sweep(&snap(template(vec![]), vec![("checkout", t)]).targets).concat();
    assert!(
        swept.iter().all(|o| !matches!(
            o.write,
            Write::Patch {
                kind: ObjectKind::Deployment,
                ..
            }
        )),
        "{:#?}",
        writes(&swept)
    );
}

// ---------------------------------------------------------------------------------------
// Odds and ends.

#[test]

fn deployment_without_replicas_is_restored_to_one() {
    let a = checkout();
    let mut d = deployment("checkout", 3);
    d.replicas = None;
    let plan = decide_through_restore(
        &snap(
            template(vec![a.clone()]),
            vec![("checkout", tgt(Some(d), vec![]))],
        ),
        now(),
    );
    assert_eq!(plan.ops.len(), 2);
    let recorded = plan.ops.iter().any(|o| match &o.write {
        Write::Patch {
            kind: ObjectKind::Deployment,
            ops,
        } => ops.iter().any(|op| {
            (op["path"] == "/metadata/annotations" && op["value"][keys::ORIGINAL_REPLICAS] == "1")
                || (op["path"] == "/metadata/annotations/moonin.io~1original-replicas"
                    && op["value"] == "1")
        }),
        _ => false,
    });
    assert!(
        recorded,
        "absent replicas are recorded as 1: {:#?}",
        writes(&plan.ops)
    );

    // The state that apply leaves, at the window's end.
    let mut hpa = provisional_applied(&a);
    hpa.original = Some(Original {
        deployment: None,
        spec: BTreeMap::new(),
        deployment_replicas: None,
    });
    let raised = Workload {
        original_replicas: Some(1),
        ..raised_deployment("checkout", "checkout", 1, 10)
    };
    let plan = decide_through_restore(
        &snap(
            template(vec![a]),
            vec![("checkout", tgt(Some(raised), vec![hpa]))],
        ),
        after_window(),
    );
    let restores_one = plan.ops.iter().any(|o| match &o.write {
        Write::Patch {
            kind: ObjectKind::Deployment,
            ops,
        } => ops
            .iter()
            .any(|op| op["path"] == "/spec/replicas" && (op["op"] == "remove" || op["value"] == 1)),
        _ => false,
    });
    assert!(restores_one, "{:#?}", writes(&plan.ops));
}

#[test]
fn provisional_name_fits_the_name_limit() {
    assert_eq!(provisional_name("checkout"), "moonin-checkout");
    let long = "d".repeat(260);
    let n = provisional_name(&long);
    assert_eq!(n.len(), 253);
    assert_ne!(n, provisional_name(&"d".repeat(261)));
}

#[test]
fn record_failures_marks_the_failed_action() {
    let mut st = applied_status();
    let failed = BTreeMap::from([("checkout".to_string(), "409 Conflict".to_string())]);
    record_failures(&mut st, &failed, now());
    assert_eq!(states(&st), vec![("checkout", "Failed")]);
    assert_cond(&st, "Ready", false, "ApplyFailed", "409 Conflict");
    assert_eq!(st.executions[0].result, "Failed");
}

// ---------------------------------------------------------------------------------------
// Invariants over random small snapshots.

#[derive(Debug, Clone, Copy)]
enum Who {
    Nobody,
    Us,
    UsStale,
    UsOtherAction,
    Live,
    Dead,
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        Just(Who::Nobody),
        Just(Who::Us),
        Just(Who::UsStale),
        Just(Who::UsOtherAction),
        Just(Who::Live),
        Just(Who::Dead),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Moment {
    Active,
    Ended,
    Suspended,
    Deleting,
}

fn marks_of(w: Who) -> Marks {
    match w {
        Who::Nobody => plain(),
        Who::Us | Who::UsStale => ours("checkout"),
        Who::UsOtherAction => ours("old"),
        Who::Live => foreign(true),
        Who::Dead => foreign(false),
    }
}

#[allow(clippy::too_many_arguments)]
fn random_snapshot(
    min: i32,
    extra: i32,
    replicas: Option<i32>,
    carrier: u8,
    cmin: Option<i32>,
    cmax: Option<i32>,
    carrier_who: Who,
    dep_who: Who,
    orig: (Option<i32>, Option<i32>, Option<i32>),
    foreign_manager: bool,
    paused: Option<usize>,
    moment: Moment,
) -> Snapshot {
    let a = action("checkout", "checkout", min, min + extra);
    let mut tv = template(vec![a.clone()]);
    match moment {
        Moment::Suspended => tv.window.suspend = true,
        Moment::Deleting => tv.deleting = true,
        Moment::Active | Moment::Ended => {}
    }
    let kind = if carrier == 2 {
        AutoscalerKind::ScaledObject
    } else {
        AutoscalerKind::Hpa
    };
    let mut c = Autoscaler {
        kind,
        provisional: carrier == 3,
        ..hpa("checkout", cmin, cmax)
    };
    c.marks = marks_of(carrier_who);
    if !matches!(carrier_who, Who::Nobody) {
        let spec = if carrier == 3 {
            BTreeMap::new()
        } else {
            BTreeMap::from([
                (kind.min_field().to_string(), orig.0),
                (kind.max_field().to_string(), orig.1),
            ])
        };
        c.original = Some(Original {
            deployment: None,
            spec,
            deployment_replicas: orig.2,
        });
        c.applied_hash = Some(match carrier_who {
            Who::Us => hash(&a),
            _ => "stale".to_string(),
        });
    }
    for f in [kind.min_field(), kind.max_field()] {
        let m = if foreign_manager {
            ARGO
        } else {
            field_manager::SCALING
        };
        c.managers.insert(f.to_string(), m.to_string());
    }
    if let Some(i) = paused.filter(|_| kind == AutoscalerKind::ScaledObject) {
        c.paused = Some(keys::KEDA_PAUSED[i % keys::KEDA_PAUSED.len()].into());
    }
    let mut autoscalers = Vec::new();
    if carrier != 0 {
        autoscalers.push(c);
    }
    if carrier == 2 {
        autoscalers.push(keda_hpa("checkout"));
    }
    let d = Workload {
        replicas,
        marks: marks_of(dep_who),
        original_replicas: (!matches!(dep_who, Who::Nobody))
            .then_some(orig.2)
            .flatten(),
        ..deployment("checkout", 1)
    };
    snap(tv, vec![("checkout", tgt(Some(d), autoscalers))])
}

/// The object an op writes, found in `s`: its marks, and the object as the API server
/// holds it (see [`model`]).
fn object_of<'a>(s: &'a Snapshot, op: &Op) -> Option<(&'a Marks, Value)> {
    let is_dep = matches!(
        op.write,
        Write::Patch {
            kind: ObjectKind::Deployment,
            ..
        }
    );
    s.targets
        .iter()
        .filter(|(k, _)| k.namespace == op.namespace)
        .find_map(|(k, t)| {
            if is_dep {
                t.deployment
                    .as_ref()
                    .filter(|d| d.name == op.name)
                    .map(|d| (&d.marks, dep_model(d)))
            } else {
                t.autoscalers
                    .iter()
                    .find(|a| a.name == op.name)
                    .map(|a| (&a.marks, model(a, &k.name)))
            }
        })
}

/// The metadata of an object with `marks` at `rv`: its annotations are the raw values read.
fn meta_model(marks: &Marks, rv: &str) -> Value {
    let mut meta = json!({"resourceVersion": rv});
    if marks.has_annotations {
        meta["annotations"] = json!(marks.read);
    }
    meta
}

/// An autoscaler of the Deployment `dep` as the API server holds it: its marks, bounds
/// (absent when unset), target, and a status the autoscaler's controller writes.
fn model(a: &Autoscaler, dep: &str) -> Value {
    let mut spec = json!({"scaleTargetRef": {"kind": "Deployment", "name": dep}});
    for (f, v) in [(a.kind.min_field(), a.min), (a.kind.max_field(), a.max)] {
        if let Some(v) = v {
            spec[f] = json!(v);
        }
    }
    json!({
        "metadata": meta_model(&a.marks, &a.resource_version),
        "spec": spec,
        "status": {"currentReplicas": 3, "desiredReplicas": 3},
    })
}

/// A Deployment as the API server holds it.
fn dep_model(d: &Workload) -> Value {
    json!({
        "metadata": meta_model(&d.marks, &d.resource_version),
        "spec": d.replicas.map_or_else(|| json!({}), |r| json!({"replicas": r})),
        "status": {"replicas": d.replicas(), "readyReplicas": d.replicas()},
    })
}

/// Whether the API server would accept the `test` ops of `ops` on `doc`: a test of `null`
/// passes on a member that is absent from an existing parent (the API server's JSON Patch
/// semantics, which the precondition relies on to test absence).
fn holds(doc: &Value, ops: &[Value]) -> bool {
    ops.iter().filter(|o| o["op"] == "test").all(|o| {
        let path = o["path"].as_str().unwrap_or_default();
        let (parent, member) = path.rsplit_once('/').unwrap_or(("", path));
        let member = member.replace("~1", "/").replace("~0", "~");
        let Some(parent) = doc.pointer(parent).and_then(Value::as_object) else {
            return false;
        };
        match (parent.get(&member), &o["value"]) {
            (None | Some(Value::Null), Value::Null) => true,
            (Some(v), want) => v == want,
            (None, _) => false,
        }
    })
}

/// Whether every path `ops` changes is tested by its precondition (or lies under a tested
/// path, such as an annotation map tested absent).
fn covered(ops: &[Value]) -> bool {
    let tested: Vec<&str> = guard_of(ops)
        .iter()
        .filter_map(|o| o["path"].as_str())
        .collect();
    ops.iter().filter(|o| o["op"] != "test").all(|o| {
        let path = o["path"].as_str().unwrap_or_default();
        tested
            .iter()
            .any(|t| path == *t || path.starts_with(&format!("{t}/")))
    })
}

fn check_invariants(s: &Snapshot, ops: &[Op], active: bool) -> Result<(), TestCaseError> {
    let dep_replicas = s
        .targets
        .values()
        .find_map(|t| t.deployment.as_ref())
        .map_or(1, Workload::replicas);
    for op in ops {
        let object = object_of(s, op);
        if let Some((marks, _)) = object
            && let Some(o) = &marks.owner
        {
            prop_assert!(
                o.uid == s.template.uid || !marks.owner_live,
                "wrote {op:?} held by live {o:?}"
            );
        }
        match &op.write {
            Write::Patch { ops: patch, .. } => {
                let Some((_, doc)) = &object else {
                    return Err(TestCaseError::fail(format!(
                        "patch of an unknown object: {op:?}"
                    )));
                };
                body(patch);
                prop_assert!(
                    holds(doc, patch),
                    "precondition refused on what was read: {op:?} on {doc}"
                );
                prop_assert!(covered(patch), "a change outside the precondition: {op:?}");
                let is_override = patch.iter().any(|p| {
                    p["op"] == "add"
                        && p["path"]
                            .as_str()
                            .unwrap_or_default()
                            .starts_with("/metadata/annotations")
                });
                if is_override {
                    prop_assert!(active, "override written while inactive: {op:?}");
                    for p in body(patch) {
                        if matches!(
                            p["path"].as_str(),
                            Some("/spec/maxReplicas" | "/spec/maxReplicaCount")
                        ) {
                            let max = p["value"].as_i64().unwrap_or(0);
                            prop_assert!(
                                max >= i64::from(dep_replicas),
                                "max {max} below replicas {dep_replicas}: {op:?}"
                            );
                        }
                    }
                }
            }
            Write::CreateHpa(v) => {
                prop_assert!(active, "HPA created while inactive");
                let max = v["spec"]["maxReplicas"].as_i64().unwrap_or(0);
                prop_assert!(max >= i64::from(dep_replicas));
            }
            Write::DeleteHpa { .. } => {}
        }
    }
    Ok(())
}

/// Decides as the controller would over successive reconciles while a Deployment's restore
/// waits for its autoscaler: the plan's writes succeed ([`play`]), the HPA controller acts on
/// them, and the template is decided again. Returns the plans' ops and Events in order, and
/// the last plan's status, requeue and finalizer.
fn decide_through_restore(s: &Snapshot, now: Timestamp) -> Plan {
    let mut s = s.clone();
    let mut plan = decide(&s, now);
    for _ in 0..3 {
        let waits = plan
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Reconciling" && c.message == WAITING_FOR_AUTOSCALER);
        if !waits {
            break;
        }
        play(&mut s, &plan.ops);
        // A deferred status is not written: the next plan starts from the one before.
        if !plan.defer_status {
            s.template.status = plan.status.clone();
        }
        let next = decide(&s, now);
        plan.ops.extend(next.ops);
        plan.events.extend(next.events);
        plan.status = next.status;
        plan.requeue_at = next.requeue_at;
        plan.finalizer = next.finalizer;
    }
    plan
}

/// Plays `ops` on the snapshot, as the API server would (every write succeeds; the bounds
/// Moonin writes become owned by moonin-scaling, or moonin-restore for a restore).
// A table (or a generator) reads best whole.
#[allow(clippy::too_many_lines)]
fn play(s: &mut Snapshot, ops: &[Op]) {
    let owner_of = |v: &Value| -> OwnerRecord {
        serde_json::from_str(v.as_str().unwrap_or_default()).unwrap_or_else(|e| panic!("{v}: {e}"))
    };
    for op in ops {
        let Some(t) = s
            .targets
            .iter_mut()
            .find(|(k, t)| {
                k.namespace == op.namespace
                    && (t.deployment.as_ref().is_some_and(|d| d.name == op.name)
                        || t.autoscalers.iter().any(|a| a.name == op.name)
                        || matches!(op.write, Write::CreateHpa(_))
                            && k.name == op.name.trim_start_matches("moonin-"))
            })
            .map(|(_, t)| t)
        else {
            panic!("op on an unknown object: {op:?}");
        };
        match &op.write {
            Write::DeleteHpa { .. } => t.autoscalers.retain(|a| a.name != op.name),
            Write::CreateHpa(v) => {
                let ann = &v["metadata"]["annotations"];
                let spec = &v["spec"];
                let mut a = hpa(&op.name, None, None);
                a.provisional = true;
                a.resource_version = "created".into();
                a.min = spec["minReplicas"]
                    .as_i64()
                    .and_then(|v| i32::try_from(v).ok());
                a.max = spec["maxReplicas"]
                    .as_i64()
                    .and_then(|v| i32::try_from(v).ok());
                a.marks = Marks {
                    owner: Some(owner_of(&ann[keys::OWNER])),
                    owner_live: true,
                    has_annotations: true,
                    ..Marks::default()
                };
                a.original =
                    serde_json::from_str(ann[keys::ORIGINAL].as_str().unwrap_or_default()).ok();
                a.applied_hash = ann[keys::APPLIED_HASH].as_str().map(str::to_string);
                for f in ["minReplicas", "maxReplicas"] {
                    a.managers.insert(f.into(), field_manager::SCALING.into());
                }
                t.autoscalers.push(a);
            }
            Write::Patch { kind, ops: patch } => {
                // Flatten an annotation-map add into per-key adds.
                let mut flat: Vec<(String, Option<Value>)> = Vec::new();
                for p in body(patch) {
                    let path = p["path"].as_str().unwrap_or_default().to_string();
                    let value = (p["op"] == "add").then(|| p["value"].clone());
                    if path == "/metadata/annotations" {
                        for (k, v) in value
                            .as_ref()
                            .and_then(Value::as_object)
                            .into_iter()
                            .flatten()
                        {
                            flat.push((ann(k), Some(v.clone())));
                        }
                    } else {
                        flat.push((path, value));
                    }
                }
                let int = |v: &Option<Value>| {
                    v.as_ref()
                        .and_then(Value::as_i64)
                        .and_then(|v| i32::try_from(v).ok())
                };
                if *kind == ObjectKind::Deployment {
                    let Some(d) = t.deployment.as_mut() else {
                        panic!("no Deployment for {op:?}")
                    };
                    d.resource_version.push('+');
                    for (path, v) in &flat {
                        if path == "/spec/replicas" {
                            d.replicas = int(v);
                        } else if *path == ann(keys::OWNER) {
                            d.marks.owner = v.as_ref().map(owner_of);
                            d.marks.owner_live = true;
                        } else if *path == ann(keys::ORIGINAL_REPLICAS) {
                            d.original_replicas = v.as_ref().and_then(|v| v.as_str()?.parse().ok());
                        } else {
                            panic!("unexpected Deployment path {path}");
                        }
                    }
                } else {
                    let Some(a) = t.autoscalers.iter_mut().find(|a| a.name == op.name) else {
                        panic!("no autoscaler for {op:?}")
                    };
                    a.resource_version.push('+');
                    a.marks.has_annotations = true;
                    for (path, v) in &flat {
                        let field = path.strip_prefix("/spec/");
                        if field == Some(a.kind.min_field()) {
                            a.min = int(v);
                        } else if field == Some(a.kind.max_field()) {
                            a.max = int(v);
                        } else if *path == ann(keys::OWNER) {
                            a.marks.owner = v.as_ref().map(owner_of);
                            a.marks.owner_live = true;
                        } else if *path == ann(keys::ORIGINAL) {
                            a.original = v
                                .as_ref()
                                .and_then(|v| serde_json::from_str(v.as_str()?).ok());
                        } else if *path == ann(keys::APPLIED_HASH) {
                            a.applied_hash =
                                v.as_ref().and_then(|v| v.as_str().map(str::to_string));
                        } else {
                            panic!("unexpected {} path {path}", a.kind.as_str());
                        }
                        if let Some(f) = field {
                            let manager = if op.restores {
                                field_manager::RESTORE
                            } else {
                                field_manager::SCALING
                            };
                            a.managers.insert(f.to_string(), manager.into());
                        }
                    }
                }
            }
        }
    }
    // The raw annotations as the next read finds them.
    for t in s.targets.values_mut() {
        t.deployment.iter_mut().for_each(|d| d.marks.read.clear());
        t.autoscalers.iter_mut().for_each(|a| a.marks.read.clear());
        fill_read(t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn decide_keeps_its_invariants(
        min in 1..15i32,
        extra in 0..20i32,
        replicas in prop::option::of(1..50i32),
        carrier in 0..4u8,
        cmin in prop::option::of(1..20i32),
        cmax in prop::option::of(1..50i32),
        carrier_who in who(),
        dep_who in who(),
        orig in (prop::option::of(1..20i32), prop::option::of(1..50i32), prop::option::of(1..50i32)),
        foreign_manager in any::<bool>(),
        paused in prop::option::of(0..keys::KEDA_PAUSED.len()),
        moment in prop_oneof![Just(Moment::Active), Just(Moment::Ended), Just(Moment::Suspended), Just(Moment::Deleting)],
    ) {
        let s = random_snapshot(
            min, extra, replicas, carrier, cmin, cmax, carrier_who, dep_who, orig, foreign_manager, paused, moment,
        );
        let at_ = if moment == Moment::Ended { after_window() } else { now() };
        let plan = decide(&s, at_);
        let active = moment == Moment::Active;
        prop_assert_eq!(plan.status.window.is_some(), active);
        check_invariants(&s, &plan.ops, active)?;
        prop_assert!(plan.requeue_at > at_ && plan.requeue_at <= resync(at_));
        // The sweep only ever restores.
        check_invariants(&s, &sweep(&s.targets).concat(), false)?;

        // Level-triggered: once its writes are done, the next reconcile writes nothing.
        // (A carrier held by another action of this template takes one more reconcile:
        // see `action_renamed_mid_window_does_not_conflict_with_itself`.)
        // A Deployment's restore takes one more, after its autoscaler's.
        let steps = if matches!(carrier_who, Who::UsOtherAction) || matches!(dep_who, Who::UsOtherAction) { 3 } else { 2 };
        let mut s = s;
        let mut plan = plan;
        for _ in 0..steps {
            play(&mut s, &plan.ops);
            s.template.status = plan.status.clone();
            s.template.has_finalizer = true;
            plan = decide(&s, at_);
            if plan.ops.is_empty() {
                break;
            }
        }
        prop_assert!(plan.ops.is_empty(), "not converged after {steps} step(s): {:#?}", writes(&plan.ops));
        // ... and the status it concludes is stable.
        s.template.status = plan.status.clone();
        let again = decide(&s, at_);
        prop_assert_eq!(&again.status, &plan.status);
        prop_assert!(again.events.is_empty(), "{:?}", again.events);
    }
}

/// Reconciles until nothing is left to write (at most `limit` times); the last plan.
fn converge(s: &mut Snapshot, at_: Timestamp, limit: usize) -> Plan {
    let mut plan = decide(s, at_);
    for _ in 0..limit {
        if plan.ops.is_empty() {
            break;
        }
        play(s, &plan.ops);
        s.template.status = plan.status.clone();
        plan = decide(s, at_);
    }
    plan
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Apply, maybe change the spec mid-window, then close the window: every object is
    /// back to exactly what it was (the Deployment clamped into the restored bounds).
    #[test]
    fn a_window_round_trip_restores_everything(
        carrier in 0..3u8,
        cmin in prop::option::of(1..20i32),
        cmax in 1..50i32,
        replicas in 0..50i32,
        first in (1..15i32, 0..20i32),
        second in prop::option::of((1..15i32, 0..20i32)),
    ) {
        let kind = if carrier == 2 { AutoscalerKind::ScaledObject } else { AutoscalerKind::Hpa };
        let autoscalers = match carrier {
            0 => vec![],
            1 => vec![hpa("checkout", cmin, Some(cmax))],
            _ => vec![scaled_object("checkout", cmin, Some(cmax)), keda_hpa("checkout")],
        };
        let before = tgt(Some(deployment("checkout", replicas)), autoscalers);
        let mut s = snap(template(vec![action("checkout", "checkout", first.0, first.0 + first.1)]), vec![("checkout", before.clone())]);
        let plan = converge(&mut s, now(), 4);
        prop_assert!(plan.ops.is_empty());
        prop_assert_eq!(states(&plan.status), vec![("checkout", "Applied")]);
        let dep = s.targets[&key("checkout")].deployment.clone().unwrap_or_else(|| panic!("no Deployment"));
        prop_assert!(dep.replicas() >= first.0);
        if let Some((min, extra)) = second {
            s.template.actions[0].min_replicas = min;
            s.template.actions[0].max_replicas = min + extra;
            let plan = converge(&mut s, now() + mins(1), 4);
            prop_assert!(plan.ops.is_empty());
        }
        let plan = converge(&mut s, after_window(), 4);
        prop_assert!(plan.ops.is_empty());
        prop_assert_eq!(states(&plan.status), vec![("checkout", "Reverted")]);

        let after = &s.targets[&key("checkout")];
        // An HPA's Deployment at 0 is the HPA switched off: it stays at 0.
        let clamp = |r: i32| match carrier {
            0 => r,
            1 if r == 0 => r,
            _ => r.max(cmin.unwrap_or(r)).min(cmax),
        };
        let mut want = before.clone();
        let raised = first.0 > replicas || second.is_some_and(|(m, _)| m > replicas);
        if let Some(d) = want.deployment.as_mut()
            && raised
        {
            d.replicas = Some(clamp(replicas));
        }
        // Name, min, max, and whether any Moonin annotation is left.
        let strip = |t: &Target| -> Vec<(String, Option<i32>, Option<i32>, bool)> {
            t.autoscalers
                .iter()
                .map(|a| {
                    let marked = a.marks.owner.is_some() || a.original.is_some() || a.applied_hash.is_some();
                    (a.name.clone(), a.min, a.max, marked)
                })
                .collect()
        };
        prop_assert_eq!(strip(after), strip(&want), "{:?} {:?}", kind, after);
        // What the window wrote is not moonin-scaling's any more: a GitOps tool told to
        // leave that manager's fields alone manages the bounds again. (A change of the
        // template that set a bound back to its value before the window leaves it nothing
        // to restore: the API server moves a field's owner only when its value changes.)
        let overriding: Vec<_> = after.autoscalers.iter()
            .flat_map(|a| a.managers.iter().filter(|(_, m)| *m == field_manager::SCALING))
            .collect();
        prop_assert!(second.is_some() || overriding.is_empty(), "{:?}", overriding);
        let (d_after, d_want) = (after.deployment.as_ref(), want.deployment.as_ref());
        prop_assert_eq!(d_after.map(|d| (d.replicas, d.marks.owner.is_some(), d.original_replicas)), d_want.map(|d| (d.replicas, false, None)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random window specs, valid and not (schedules the API server accepts but the cron
    /// parser refuses, unknown zones, a date that never comes), on clocks around DST changes,
    /// over random targets: decide never panics, every write keeps the invariants (guarded by
    /// what was read, nothing outside the precondition, no override unless a window is open,
    /// never an object a live template holds), and it always asks to be woken later.
    #[test]
    fn decide_keeps_its_invariants_for_any_spec_at_any_clock(
        schedule in prop_oneof![
            Just("0 8 * * 1-5"), Just("30 2 * * *"), Just("0 2 * * 0"), Just("*/7 * * * *"),
            Just("59 23 31 12 *"), Just("0 0 31 2 *"), Just("61 * * * *"), Just("* * * *"),
            Just("0 8 * * MON-FRI"), Just("15 1-3 * * *"),
        ],
        zone in prop_oneof![
            Just(None), Just(Some("Europe/Berlin")), Just(Some("America/New_York")),
            Just(Some("Australia/Lord_Howe")), Just(Some("UTC")), Just(Some("Mars/Olympus")),
        ],
        duration in prop_oneof![Just("1m"), Just("59m"), Just("90m"), Just("10h"), Just("24h"), Just("169h")],
        manual in prop::option::of((-600i64..600, prop::option::of(Just("45m")))),
        suspend in any::<bool>(),
        edge in 0..crate::cron::DST_CHANGES_2026.len(),
        offset in -360i64..360,
        min in 1..15i32,
        extra in 0..20i32,
        replicas in prop::option::of(1..50i32),
        carrier in 0..4u8,
        cmin in prop::option::of(1..20i32),
        cmax in prop::option::of(1..50i32),
        carrier_who in who(),
    ) {
        let dep_who = Who::Nobody;
        let mut s = random_snapshot(
            min, extra, replicas, carrier, cmin, cmax, carrier_who, dep_who,
            (None, None, None), false, None, Moment::Active,
        );
        let at_ = ts(crate::cron::DST_CHANGES_2026[edge].1) + mins(offset);
        s.template.window = WindowSpec {
            suspend,
            schedule: schedule.to_string(),
            time_zone: zone.map(str::to_string),
            duration: duration.parse().unwrap_or_else(|e| panic!("{e:?}")),
            valid_until: None,
            manual_run: manual.map(|(from, length)| ManualRun {
                start_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at_ + mins(from)),
                duration: length.map(|l| l.parse().unwrap_or_else(|e| panic!("{e:?}"))),
            }),
        };
        let plan = decide(&s, at_);
        check_invariants(&s, &plan.ops, plan.status.window.is_some())?;
        prop_assert!(plan.requeue_at > at_ && plan.requeue_at <= resync(at_), "requeue {} at {at_}", plan.requeue_at);
        // A spec the controller cannot read opens nothing.
        let readable = crate::scaling::window::WindowInputs::from_spec(&s.template.window).is_ok();
        if !readable {
            prop_assert!(plan.status.window.is_none());
        }
    }
}

// ---------------------------------------------------------------------------------------
// After the restore: the record in the status, and a scale-back undone.

/// The close restores the Deployment right after its HPA, in the same plan (no wait for an
/// HPA controller that may never say it acted), and the status keeps what it put back.
#[test]
fn the_deployment_follows_its_hpa_and_the_status_keeps_its_original_replicas() {
    let a = checkout();
    let mut s = snap(
        template(vec![a.clone()]),
        vec![("checkout", applied_target(&a))],
    );
    let plan = decide(&s, after_window());
    assert_eq!(writes(&plan.ops), revert_of_applied());
    assert!(plan.ops.iter().all(|o| o.action == "checkout"), "in order");
    assert!(!plan.defer_status, "one status write per close");
    let st = act(&plan.status, "checkout");
    assert_eq!(
        (st.state.as_str(), st.original_replicas),
        ("Reverted", Some(3))
    );
    play(&mut s, &plan.ops);
    s.template.status = plan.status.clone();
    let idle = decide(&s, after_window());
    assert!(idle.ops.is_empty());
    assert_eq!(idle.status, plan.status, "nothing more to write");
}

/// A crash before the open's status write leaves the original replicas only on the
/// Deployment: its restore waits for a status write that records them.
#[test]
fn a_deployment_waits_until_the_status_records_its_original_replicas() {
    let a = checkout();
    let mut s = unrecorded(snap(
        template(vec![a.clone()]),
        vec![("checkout", applied_target(&a))],
    ));
    let first = decide(&s, after_window());
    assert_eq!(first.ops.len(), 1, "the HPA only");
    play(&mut s, &first.ops);
    let second = decide(&s, after_window());
    assert_eq!(writes(&second.ops), vec![]);
    assert!(!second.defer_status);
    assert_eq!(act(&second.status, "checkout").original_replicas, Some(3));
    assert!(second.requeue_at <= after_window() + WAITING_RECHECK);
    s.template.status = second.status.clone();
    let third = decide(&s, after_window());
    assert_eq!(writes(&third.ops), revert_of_applied().split_off(1));
}

/// The moment of the HPA's restore, and the restored target as the HPA controller left it
/// when it scaled the Deployment back to the override's minimum (10) `after` seconds later.
fn scaled_back(manager: &str, after: i64) -> (Snapshot, Timestamp) {
    let a = checkout();
    let restored = ts("2026-11-30T18:00:02Z");
    let mut t = template(vec![a.clone()]);
    t.status.actions = vec![ActionStatus {
        state: "Reverted".into(),
        original_replicas: Some(3),
        ..Outcome::new("checkout", &key("checkout"), "Reverted", "restored").status
    }];
    t.status.executions = vec![Execution {
        trigger: "Schedule".into(),
        start: Time(ts("2026-11-30T16:00:00Z")),
        end: Some(Time(ts("2026-11-30T18:00:00Z"))),
        result: "Reverted".into(),
    }];
    let mut dep = deployment("checkout", 10);
    dep.replicas_set_by = Some((
        manager.to_string(),
        restored + SignedDuration::from_secs(after),
    ));
    let mut h = hpa("checkout", Some(2), Some(20));
    h.bounds_written = Some(restored);
    (
        snap(t, vec![("checkout", tgt(Some(dep), vec![h]))]),
        restored,
    )
}

/// The HPA controller, acting on the override's minimum after the restore, scaled the
/// Deployment back: it is restored again from the status's record, once per scale-back.
#[test]
fn a_scale_back_by_the_hpa_controller_after_the_restore_is_undone() {
    let (mut s, restored) = scaled_back(HPA_CONTROLLER, 3);
    let plan = decide(&s, after_window());
    assert_eq!(
        writes(&plan.ops),
        vec![at("checkout", dep_patch(vec![add("/spec/replicas", 3)]))]
    );
    let Write::Patch { ops, .. } = &plan.ops[0].write else {
        panic!("{:?}", plan.ops[0]);
    };
    assert_eq!(
        guard_of(ops),
        [
            test_op(&ann(keys::OWNER), Value::Null),
            test_op("/spec/replicas", 10)
        ]
    );
    assert_eq!(op_events(&plan), vec![(false, events::RESTORED_AGAIN)]);
    assert_eq!(act(&plan.status, "checkout").original_replicas, Some(3));
    // Once Moonin has set the replicas again, nothing more is written.
    let d = s
        .targets
        .get_mut(&key("checkout"))
        .and_then(|t| t.deployment.as_mut());
    let d = d.expect("deployment");
    d.replicas = Some(3);
    d.replicas_set_by = Some((field_manager::SCALING.into(), restored));
    assert!(decide(&s, after_window()).ops.is_empty());
}

/// Anything else is left alone: another manager's scale, a scale long after the restore, a
/// scale to other replicas, a Deployment a window holds again, or no record.
#[test]
fn other_scales_after_a_restore_are_left_alone() {
    let no_write = |s: &Snapshot, why: &str| {
        assert_eq!(writes(&decide(s, after_window()).ops), vec![], "{why}");
    };
    no_write(&scaled_back("kubectl", 3).0, "a person's scale");
    no_write(
        &scaled_back(HPA_CONTROLLER, 120).0,
        "two minutes after the restore",
    );
    no_write(&scaled_back(HPA_CONTROLLER, -1).0, "before the restore");
    // The bounds written again the next day (a GitOps sync), the HPA controller scaling to
    // the override's minimum for load soon after: not a scale-back of the restore.
    let (mut s, restored) = scaled_back(HPA_CONTROLLER, 3);
    let next_day = restored + SignedDuration::from_hours(24);
    let t = s.targets.get_mut(&key("checkout")).expect("target");
    t.autoscalers[0].bounds_written = Some(next_day);
    t.deployment.as_mut().expect("deployment").replicas_set_by = Some((
        HPA_CONTROLLER.into(),
        next_day + SignedDuration::from_secs(3),
    ));
    no_write(&s, "a later write of the bounds");
    let (mut s, _) = scaled_back(HPA_CONTROLLER, 3);
    s.template.status.executions.clear();
    no_write(&s, "no window closed");
    let (mut s, _) = scaled_back(HPA_CONTROLLER, 3);
    let t = s.targets.get_mut(&key("checkout")).expect("target");
    t.deployment.as_mut().expect("deployment").replicas = Some(7);
    no_write(&s, "not the override's minimum");
    let (mut s, _) = scaled_back(HPA_CONTROLLER, 3);
    s.template.status.actions[0].original_replicas = None;
    no_write(&s, "no record");
    let (mut s, _) = scaled_back(HPA_CONTROLLER, 3);
    let t = s.targets.get_mut(&key("checkout")).expect("target");
    t.deployment.as_mut().expect("deployment").marks = foreign(true);
    no_write(&s, "held by another template");
    let (s, _) = scaled_back(HPA_CONTROLLER, 3);
    let open = decide(&s, now());
    assert!(
        open.ops.iter().all(|o| o
            .event
            .as_ref()
            .is_none_or(|e| e.reason != events::RESTORED_AGAIN)),
        "a window open again applies its override instead"
    );
}

/// A restore made long after the close (the manager was down then) is still the restore when
/// Moonin's restore wrote the bounds: a scale-back right after it is undone. Bounds written
/// as late by another manager are not.
#[test]
fn a_scale_back_after_a_late_restore_is_undone_when_moonins_restore_wrote_the_bounds() {
    let late = |manager: &str| {
        let (mut s, restored) = scaled_back(HPA_CONTROLLER, 3);
        let later = restored + SignedDuration::from_mins(10);
        let t = s.targets.get_mut(&key("checkout")).expect("target");
        let h = &mut t.autoscalers[0];
        h.bounds_written = Some(later);
        for f in ["minReplicas", "maxReplicas"] {
            h.managers.insert(f.into(), manager.into());
        }
        t.deployment.as_mut().expect("deployment").replicas_set_by =
            Some((HPA_CONTROLLER.into(), later + SignedDuration::from_secs(3)));
        s
    };
    let plan = decide(&late(field_manager::RESTORE), after_window());
    assert_eq!(
        writes(&plan.ops),
        vec![at("checkout", dep_patch(vec![add("/spec/replicas", 3)]))]
    );
    assert_eq!(op_events(&plan), vec![(false, events::RESTORED_AGAIN)]);
    let plan = decide(&late("argocd-controller"), after_window());
    assert_eq!(
        writes(&plan.ops),
        vec![],
        "another manager's write of the bounds"
    );
}

/// Deleted right after a restore, a template keeps its finalizer, and so the record a
/// scale-back would be undone from, for one HPA sync period after the autoscaler's restore.
#[test]
fn a_template_deleted_right_after_a_restore_keeps_its_finalizer_for_one_hpa_sync() {
    let (mut s, restored) = scaled_back(field_manager::SCALING, 0);
    let t = s.targets.get_mut(&key("checkout")).expect("target");
    t.deployment.as_mut().expect("deployment").replicas = Some(3);
    s.template.deleting = true;
    s.template.has_finalizer = true;
    let plan = decide(&s, restored + SignedDuration::from_secs(5));
    assert!(plan.ops.is_empty());
    assert_eq!(plan.finalizer, Finalizer::Keep);
    assert_eq!(plan.requeue_at, restored + SCALE_BACK_SETTLE);
    let later = decide(&s, restored + SCALE_BACK_SETTLE);
    assert_eq!(later.finalizer, Finalizer::Remove);
}

/// An HPA pointed at another Deployment during its window gives back its own bounds, and
/// never the replicas it recorded to the Deployment it scales now: they were the first one's.
#[test]
fn an_hpa_pointed_elsewhere_mid_window_restores_its_bounds_and_leaves_its_new_deployment() {
    let a = checkout();
    let mut target = applied_target(&a);
    let mut h = target.autoscalers.remove(0);
    h.original.as_mut().expect("record").deployment = Some("checkout".into());
    let mut t = template(vec![a.clone()]);
    t.status = applied_status();
    let s = snap(
        t,
        vec![
            ("checkout", target),
            ("other", tgt(Some(deployment("other", 5)), vec![h])),
        ],
    );
    for (when, at) in [("in the window", now()), ("after it", after_window())] {
        let w = writes(&decide(&s, at).ops);
        assert!(
            w.iter()
                .any(|(n, w)| n == "shop/checkout" && matches!(w, W::Patch(ObjectKind::Hpa, _))),
            "{when}, the HPA's bounds: {w:#?}"
        );
        assert!(!w.iter().any(|(n, _)| n == "shop/other"), "{when}: {w:#?}");
    }
}
