//! The autoscaler's commit, in the order of the contract in [`super`]: steps 1–3 (marks and
//! unmarks, `spec.replicas`, deletes of the open session's marked Pods) come before the
//! pool's own plan, which works to the new size; steps 5–6 (Events, history) after the
//! Pool's status write (step 4), which carries the decision's `status.autoScaling`.

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{Decision, EventType, Snapshot, session_states};
use crate::api::field_manager;
use crate::api::sandbox::SandboxPool;
use crate::runtime::errors::{brief, is_conflict};
use crate::sandbox::load::{Now, pool_key};
use crate::sandbox::pool::PodView;
use crate::sandbox::shared::Shared;
use crate::sandbox::writer::{SandboxError, guarded_delete, json_patch, params};

/// The Pool after steps 1–3.
#[derive(Debug)]
pub struct Resized {
    /// `spec.replicas` after the size write (or as it was).
    pub replicas: i32,
    /// The Pool's resourceVersion after the size write: it guards the status write.
    pub resource_version: Option<String>,
    /// A delete of a marked Pod was refused: look again soon.
    pub retry: bool,
}

/// Steps 1–3 of a decision; `views` follow the writes. `Ok(None)`: a mark or the size
/// write lost a race, nothing else may be written, decide again at once; an error: one was
/// refused.
pub async fn resize(
    ctx: &Shared,
    pool: &SandboxPool,
    snap: &Snapshot,
    decision: &Decision,
    views: &mut [PodView],
    now: Now,
) -> Result<Option<Resized>, SandboxError> {
    let ns = pool.namespace().unwrap_or_default();
    let pods: Api<Pod> = ctx.writer.api(&ns);
    if !mark(ctx, &pods, decision, views).await? {
        return Ok(None);
    }
    unmark(ctx, &pods, decision, views).await;
    let enabled = snap.group.as_ref().is_some_and(|g| g.enabled);
    let (replicas, resource_version) = if enabled && decision.desired_replicas != pool.spec.replicas
    {
        match write_size(ctx, pool, decision.desired_replicas, now).await {
            Ok(written) => written,
            Err(e) => {
                // Without the size (and the status naming the session), the marks would
                // hold their Pods back from claims until they expire.
                let placed: Vec<&str> =
                    decision.marks.iter().map(|m| m.pod.name.as_str()).collect();
                take_back(ctx, &pods, &placed, views).await;
                return if is_conflict(&e) {
                    Ok(None)
                } else {
                    Err(e.into())
                };
            }
        }
    } else {
        (pool.spec.replicas, pool.resource_version())
    };
    let retry = !delete_marked(ctx, &pods, snap, decision, views, &pool_key(pool), now).await;
    Ok(Some(Resized {
        replicas,
        resource_version,
        retry,
    }))
}

/// Sets (`Some`) or removes (`None`) a Pod's scale-down mark, guarded by its
/// resourceVersion; the Pod's new resourceVersion on success.
async fn set_mark(
    ctx: &Shared,
    api: &Api<Pod>,
    pod: &str,
    resource_version: &str,
    mark: Option<String>,
) -> Result<String, kube::Error> {
    let path = "/metadata/annotations/moonin.io~1scale-down";
    let op = match mark {
        Some(v) => json!({"op": "add", "path": path, "value": v}),
        None => json!({"op": "remove", "path": path}),
    };
    let patch = json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        op,
    ]));
    ctx.writer.wrote("Pod");
    let p = api
        .patch(pod, &params(field_manager::SANDBOX_AUTOSCALER), &patch)
        .await?;
    Ok(p.resource_version().unwrap_or_default())
}

/// Step 1, the marks: all or none. When one is not placed, the marks this decision placed
/// are taken back. Whether all were placed: `false` when one lost a race (the Pod changed,
/// usually a claim won it, or went), an error when the API server refused it (an admission
/// policy or webhook on Pods), which the reconcile's backoff waits out.
async fn mark(
    ctx: &Shared,
    api: &Api<Pod>,
    decision: &Decision,
    views: &mut [PodView],
) -> Result<bool, kube::Error> {
    let mut placed: Vec<&str> = Vec::new();
    for m in &decision.marks {
        let value = Some(m.mark.to_annotation());
        match set_mark(ctx, api, &m.pod.name, &m.pod.resource_version, value).await {
            Ok(rv) => {
                if let Some(v) = views.iter_mut().find(|v| v.name == m.pod.name) {
                    v.marked = true;
                    v.resource_version = rv;
                }
                placed.push(&m.pod.name);
            }
            Err(e) => {
                tracing::debug!(pod = %m.pod.name, error = %brief(&e), "mark not placed; undoing this decision's marks");
                take_back(ctx, api, &placed, views).await;
                let lost_race =
                    is_conflict(&e) || matches!(&e, kube::Error::Api(s) if s.code == 404);
                return if lost_race { Ok(false) } else { Err(e) };
            }
        }
    }
    Ok(true)
}

/// Removes the marks of `placed` this decision wrote. Marks whose decision no status
/// names keep their Pods from claims until they expire, so a decision that cannot be
/// carried through takes its marks back (one that cannot be taken back still expires).
async fn take_back(ctx: &Shared, api: &Api<Pod>, placed: &[&str], views: &mut [PodView]) {
    for v in views
        .iter_mut()
        .filter(|v| placed.contains(&v.name.as_str()))
    {
        match set_mark(ctx, api, &v.name, &v.resource_version, None).await {
            Ok(rv) => {
                v.marked = false;
                v.resource_version = rv;
            }
            Err(e) => {
                tracing::debug!(pod = %v.name, error = %brief(&e), "mark not taken back; it expires");
            }
        }
    }
}

/// Step 1, the unmarks. A refused one is left (the Pod is gone, or the next decision sees
/// it again).
async fn unmark(ctx: &Shared, api: &Api<Pod>, decision: &Decision, views: &mut [PodView]) {
    for u in &decision.unmarks {
        if let Ok(rv) = set_mark(ctx, api, &u.pod.name, &u.pod.resource_version, None).await
            && let Some(v) = views.iter_mut().find(|v| v.name == u.pod.name)
        {
            v.marked = false;
            v.resource_version = rv;
        }
    }
}

/// Step 2, `spec.replicas` under the autoscaler's own field manager, guarded by the Pool's
/// resourceVersion; remembered until the Pool cache shows it (a sibling's decision counts
/// it). The size and resourceVersion written.
async fn write_size(
    ctx: &Shared,
    pool: &SandboxPool,
    replicas: i32,
    now: Now,
) -> Result<(i32, Option<String>), kube::Error> {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let body = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": pool.resource_version()},
        "spec": {"replicas": replicas},
    });
    ctx.writer.wrote("SandboxPool");
    let written = ctx
        .writer
        .api::<SandboxPool>(&ns)
        .patch(
            &name,
            &PatchParams::apply(field_manager::SANDBOX_AUTOSCALER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    let resource_version = written.resource_version();
    ctx.memory.sizes.wrote(
        &pool_key(pool),
        written.spec.replicas,
        resource_version.clone().unwrap_or_default(),
        now.mono,
    );
    Ok((written.spec.replicas, resource_version))
}

/// Step 3, the second phase of a scale-down: deletes the Pods the open session marked
/// (never a claimed one), each with UID and resourceVersion preconditions. A mark of
/// another decision is left to decide (it expires, or its session shows up). Each delete
/// is remembered until the cache shows it (see [`crate::sandbox::memory::InFlight`]).
/// Whether every delete went through.
async fn delete_marked(
    ctx: &Shared,
    api: &Api<Pod>,
    snap: &Snapshot,
    decision: &Decision,
    views: &mut [PodView],
    key: &str,
    now: Now,
) -> bool {
    let session = decision
        .status
        .scale_down_session
        .as_ref()
        .filter(|s| s.state == session_states::STARTED || s.state == session_states::STEPPED)
        .map(|s| s.id.as_str());
    let of_session: Vec<&str> = snap
        .pods
        .iter()
        .filter(|p| {
            p.mark
                .as_ref()
                .is_some_and(|m| Some(m.decision.as_str()) == session)
        })
        .map(|p| p.name.as_str())
        .chain(decision.marks.iter().map(|m| m.pod.name.as_str()))
        .collect();
    let mut all = true;
    for v in views.iter_mut() {
        if !v.marked
            || !of_session.contains(&v.name.as_str())
            || v.claim.is_some()
            || v.terminating
            || v.finished
        {
            continue;
        }
        ctx.writer.wrote("Pod");
        match api
            .delete(&v.name, &guarded_delete(&v.uid, &v.resource_version))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::debug!(pod = %v.name, error = %brief(&e), "delete of a marked Pod refused; retrying");
                all = false;
                continue;
            }
        }
        v.terminating = true;
        ctx.memory.in_flight.deleted(key, &v.name, &v.uid, now.mono);
    }
    all
}

/// Steps 5–6, once the status carrying the decision is written: the decision's Events, and
/// its recommendation in the Pool's history.
pub async fn published(ctx: &Shared, pool: &SandboxPool, snap: &Snapshot, decision: &Decision) {
    let regarding = pool.object_ref(&());
    for e in &decision.events {
        let warning = e.type_ == EventType::Warning;
        ctx.writer
            .event(&regarding, warning, e.reason, &e.note)
            .await;
    }
    let window = SignedDuration::from_secs(i64::from(snap.group.as_ref().map_or(0, |g| {
        g.scale_down_policy.stabilization_window_seconds.max(0)
    })));
    ctx.memory
        .history
        .record(&pool_key(pool), decision.recommendation, window);
}
