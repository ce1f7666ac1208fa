//! Commit: performs a [`Plan`]'s writes in order, then the status write, then the Events.
//!
//! Every write to someone else's object is a JSON Patch that starts with `test` ops on the
//! fields and annotations it was decided on (or a delete with UID and resourceVersion
//! preconditions). When one of them changed in between, the API server refuses the whole
//! patch, nothing is clobbered, and the template is reconciled again from fresh caches.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    core::object::HasStatus,
};
use serde_json::{Value, json};

use super::decide::{self, EventNote, Finalizer, ObjectKind, Op, Plan, Write};
use super::load::Template;
use crate::api::keda::ScaledObject;
use crate::api::{field_manager, scaling::keys};
use crate::runtime::metrics::Metrics;
use crate::runtime::{
    backoff::Backoff,
    cache::{Echoes, OwnWrites},
    errors::is_conflict,
    events::Publisher,
};

mod permits;
mod sweep;

pub use permits::{MAX_IN_FLIGHT, Permits};
pub use sweep::Swept;

/// How long a template restoring its autoscalers holds back every report at most: until
/// its next plan, due within [`decide::WAITING_RECHECK`], writes its Deployments.
const HELD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(3);

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "scaling";

/// Why a commit stopped.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// An object changed after it was read; reconcile again from fresh caches.
    #[error("{0} changed while it was being written; retrying from fresh state")]
    Conflict(String),
    /// This process is not the leader.
    #[error("not the leader")]
    NotLeader,
    /// The API server refused a write of the template itself.
    #[error("writing the template: {0}")]
    Template(#[source] kube::Error),
}

/// The writer: a client, a recorder and the leadership check.
#[derive(Clone)]
pub struct Writer {
    /// The API client.
    pub client: Client,
    /// Publishes Events.
    pub events: Publisher,
    /// Counts writes.
    pub metrics: Metrics,
    /// Checked before every write.
    pub is_leader: std::sync::Arc<dyn Fn() -> bool + Send + Sync>,
    /// Bounds the requests in flight, shared by every reconcile: when 100 windows open
    /// at once, a few dozen kept-alive connections carry the writes instead of hundreds
    /// of new TLS connections competing for the API server.
    pub in_flight: std::sync::Arc<Permits>,
    /// Refused actions, per template and action: a refused write is retried on its
    /// backoff, not at every reconcile.
    pub backoff: std::sync::Arc<Backoff>,
    /// The template status writes this process made, so their echo does not wake the
    /// template again.
    pub echoes: Echoes,
    /// What this process wrote last to each object, so that a reconcile waits until its
    /// caches show it.
    pub own: OwnWrites,
}

/// What writing a plan's ops came to.
struct Written {
    /// Events of the writes that succeeded.
    notes: Vec<EventNote>,
    /// Refusals by action: this time's and those still being waited out.
    failures: BTreeMap<String, String>,
    /// This time's refusals that count as a backoff step (logged, and a Warning Event).
    counted: BTreeMap<String, String>,
    /// When the soonest refused action may be retried.
    retry_in: Option<std::time::Duration>,
}

impl Writer {
    /// A workload write's parameters: a restore ([`Op::restores`]) is written as
    /// `moonin-restore`, everything else as `moonin-scaling`.
    fn params(restores: bool) -> PatchParams {
        let manager = if restores {
            field_manager::RESTORE
        } else {
            field_manager::SCALING
        };
        PatchParams {
            field_manager: Some(manager.to_string()),
            ..PatchParams::default()
        }
    }

    /// Performs one op. Conflicts come back as `Err(Ok(_))`-style [`CommitError`]s; other
    /// refusals as a message for the action.
    async fn write(&self, op: &Op) -> Result<Result<(), String>, CommitError> {
        let _permit = self.in_flight.write().await;
        if !(self.is_leader)() {
            return Err(CommitError::NotLeader);
        }
        let ns = op.namespace.as_str();
        let kind = op.write.object_kind().as_str();
        let result = match &op.write {
            Write::Patch { kind, ops } => {
                let patch: json_patch::Patch =
                    match serde_json::from_value(Value::Array(ops.clone())) {
                        Ok(p) => p,
                        Err(e) => return Ok(Err(format!("internal error building a patch: {e}"))),
                    };
                let params = Self::params(op.restores);
                self.patch(*kind, ns, &op.name, patch, &params).await
            }
            Write::CreateHpa(obj) => {
                let hpa: HorizontalPodAutoscaler = match serde_json::from_value(obj.clone()) {
                    Ok(h) => h,
                    Err(e) => return Ok(Err(format!("internal error building an HPA: {e}"))),
                };
                let pp = PostParams {
                    field_manager: Some(field_manager::SCALING.to_string()),
                    ..PostParams::default()
                };
                let created = Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns)
                    .create(&pp, &hpa)
                    .await
                    .map(|_| ());
                if matches!(&created, Err(kube::Error::Api(s)) if s.reason == "AlreadyExists")
                    && let Some(why) = self.name_taken(ns, &hpa).await
                {
                    self.metrics.wrote(CONTROLLER, kind);
                    return Ok(Err(why));
                }
                created
            }
            Write::DeleteHpa {
                uid,
                resource_version,
            } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: Some(resource_version.clone()),
                    }),
                    ..DeleteParams::default()
                };
                let r = Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns)
                    .delete(&op.name, &dp)
                    .await;
                match r {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    other => other.map(|_| ()),
                }
            }
        };
        self.metrics.wrote(CONTROLLER, kind);
        tracing::debug!(
            object = %format_args!("{kind} {ns}/{}", op.name),
            action = %op.action,
            what = %describe(&op.write),
            ok = result.is_ok(),
            error = result.as_ref().err().map(crate::runtime::errors::brief).unwrap_or_default(),
            "scaling write"
        );
        match result {
            Ok(()) => Ok(Ok(())),
            // With a 409 for a provisional HPA this process created and its cache does not
            // show yet.
            Err(e) if is_conflict(&e) => {
                Err(CommitError::Conflict(format!("{kind} {ns}/{}", op.name)))
            }
            Err(e) => Ok(Err(format!(
                "writing {kind} {ns}/{}: {}",
                op.name,
                crate::runtime::errors::brief(&e)
            ))),
        }
    }

    /// Why the provisional HPA `hpa` cannot be created, its name being taken: `None` when
    /// the HPA of that name is this one (created by this process, not in its cache yet: a
    /// race, retried at once), else a refusal naming the HPA that holds the name, which no
    /// retry would change.
    async fn name_taken(&self, ns: &str, hpa: &HorizontalPodAutoscaler) -> Option<String> {
        let name = hpa.metadata.name.as_deref().unwrap_or_default();
        let target = &hpa.spec.scale_target_ref;
        let held = Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .ok()??;
        let provisional = held
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::PROVISIONAL))
            .is_some_and(|v| v == "true");
        let same_target = &held.spec.scale_target_ref == target;
        (!(provisional && same_target)).then(|| {
            format!(
                "HorizontalPodAutoscaler {ns}/{name} exists and is not Moonin's provisional HPA for {} {}: Moonin names the HPA that carries the override of a workload without an autoscaler so; rename that HPA",
                target.kind, target.name
            )
        })
    }

    /// Sends one JSON Patch and remembers the resourceVersion it returned. The API server
    /// answers with the object's metadata only: neither it nor this process spends a
    /// whole Deployment's encoding on an answer that is read for its resourceVersion.
    async fn patch(
        &self,
        kind: ObjectKind,
        ns: &str,
        name: &str,
        patch: json_patch::Patch,
        p: &PatchParams,
    ) -> Result<(), kube::Error> {
        let patch = Patch::Json::<()>(patch);
        let client = self.client.clone();
        let meta = match kind {
            ObjectKind::Hpa => {
                patch_meta::<HorizontalPodAutoscaler>(client, ns, name, p, &patch).await
            }
            ObjectKind::ScaledObject => {
                patch_meta::<ScaledObject>(client, ns, name, p, &patch).await
            }
            ObjectKind::Deployment => patch_meta::<Deployment>(client, ns, name, p, &patch).await,
        }?;
        let rv = meta.resource_version.as_deref();
        self.own.record(kind.as_str(), ns, name, rv);
        Ok(())
    }

    async fn publish(
        &self,
        note: &EventNote,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
    ) {
        let _permit = self.in_flight.report().await;
        self.events
            .publish(regarding, note.warning, note.reason, None, &note.note)
            .await;
    }

    /// Writes `ops` wave by wave. Within a wave the actions run concurrently and each
    /// action's ops run in order; an action stops at its first refused write. Returns the
    /// Events of the writes that succeeded (also when a conflict or the leadership stopped
    /// the plan) and the refusals by action (whether the refused write was a restore, and
    /// the API server's message).
    async fn write_ops(&self, ops: &[Op]) -> (Vec<EventNote>, Result<Refusals, CommitError>) {
        let mut waves: BTreeMap<decide::Wave, BTreeMap<&str, Vec<&Op>>> = BTreeMap::new();
        for op in ops {
            waves
                .entry(op.wave)
                .or_default()
                .entry(op.action.as_str())
                .or_default()
                .push(op);
        }
        let mut notes = Vec::new();
        let mut failed = BTreeMap::new();
        for actions in waves.into_values() {
            // An action refused in an earlier wave (its revert) is not applied.
            let runs = actions
                .into_iter()
                .filter(|(action, _)| !failed.contains_key(*action))
                .map(|(action, ops)| async move {
                    let mut notes = Vec::new();
                    for op in ops {
                        match self.write(op).await {
                            Ok(Ok(())) => notes.extend(op.event.clone()),
                            Ok(Err(msg)) => return (action, notes, Ok(Some((op.restores, msg)))),
                            Err(e) => return (action, notes, Err(e)),
                        }
                    }
                    (action, notes, Ok(None))
                });
            let mut stop = None;
            for (action, done, outcome) in futures::future::join_all(runs).await {
                notes.extend(done);
                match outcome {
                    Ok(None) => {}
                    Ok(Some(refusal)) => {
                        failed.insert(action.to_string(), refusal);
                    }
                    Err(e) => stop = stop.or(Some(e)),
                }
            }
            if let Some(e) = stop {
                return (notes, Err(e));
            }
        }
        (notes, Ok(failed))
    }

    /// Runs a plan for `tpl`: finalizer first (so a deletion always reverts), the ops in
    /// order, the status if it changed, then the Events.
    ///
    /// Returns how long until a refused action may be retried, if one was refused.
    pub async fn commit<T>(
        &self,
        tpl: &T,
        plan: &Plan,
        now: Timestamp,
    ) -> Result<Option<std::time::Duration>, CommitError>
    where
        T: Template + HasStatus<Status = crate::api::scaling::ScalingTemplateStatus>,
    {
        let api: Api<T> = tpl.api(self.client.clone());
        if plan.finalizer == Finalizer::Add {
            self.add_finalizer(&api, tpl).await?;
        }
        let written = self.write_with_backoff(tpl, &plan.ops).await?;
        let id = crate::runtime::reference(tpl);
        // The Events of writes: what an earlier plan of this edge wrote and held back, or
        // wrote before it stopped, is reported with what this one wrote. They are kept until
        // published; the plan's own Events come from the status, and a plan that does not
        // write it derives them again.
        let mut writes: Vec<EventNote> = self.in_flight.release(&id);
        writes.extend(written.notes);
        writes.extend(written.counted.iter().map(|(action, msg)| EventNote {
            warning: true,
            reason: crate::api::scaling::reasons::APPLY_FAILED,
            note: format!("{action}: {msg}"),
        }));
        let mut status = plan.status.clone();
        decide::record_failures(&mut status, &written.failures, now);
        if plan.defer_status && written.failures.is_empty() {
            // Its Deployments are written next, as soon as their autoscalers' controller
            // acts: the status and the Events wait for those writes, and every other report
            // waits with them instead of going between this edge's writes.
            let until = tokio::time::Instant::now() + HELD_AT_MOST;
            self.in_flight.hold(id, until, writes);
            return Ok(written.retry_in);
        }
        if tpl.status() != Some(&status)
            && let Err(e) = self.write_status(&api, tpl, &status).await
        {
            self.in_flight.keep(&id, writes);
            return Err(e);
        }
        // Events last, after every write they report on succeeded; one Event per reason
        // (its note lists the actions), so a boundary does not double the API traffic.
        let regarding = tpl.object_ref(&());
        writes.extend(plan.events.iter().cloned());
        futures::future::join_all(
            coalesce(writes)
                .iter()
                .map(|note| self.publish(note, &regarding)),
        )
        .await;
        if plan.finalizer == Finalizer::Remove && written.failures.is_empty() {
            self.remove_finalizer(&api, tpl).await?;
        }
        Ok(written.retry_in)
    }

    /// Writes `ops`, except those whose earlier refusal is still being waited out (their last
    /// refusal stands); refusals back off per template, action, and whether they restore: the
    /// wait an override's refusal earned never holds back the restore of what it replaced, and
    /// a restore's own refusal backs off like any other.
    async fn write_with_backoff<T: Template>(
        &self,
        tpl: &T,
        ops: &[Op],
    ) -> Result<Written, CommitError> {
        let id = crate::runtime::reference(tpl);
        let key = |action: &str, restores: bool| {
            format!("{id}/{action}{}", if restores { "/restore" } else { "" })
        };
        let generation = tpl.meta().generation;
        let clock = tokio::time::Instant::now();
        let mut failures: BTreeMap<String, String> = BTreeMap::new();
        let mut held = BTreeSet::new();
        let mut retry_in: Option<std::time::Duration> = None;
        for op in ops {
            let k = key(&op.action, op.restores);
            if let Some(w) = self.backoff.waiting(&k, generation, clock) {
                failures.insert(op.action.clone(), w.message);
                held.insert((op.action.clone(), op.restores));
                retry_in = Some(retry_in.map_or(w.remaining, |r| r.min(w.remaining)));
            }
        }
        let sent = sendable(ops, &held);
        let (notes, failed) = match self.write_ops(&sent).await {
            (notes, Ok(failed)) => (notes, failed),
            (notes, Err(e)) => {
                // The next plan does not make these writes again: it reports them.
                self.in_flight.keep(&id, notes);
                return Err(e);
            }
        };
        for op in &sent {
            if !failed.contains_key(&op.action) {
                self.backoff.succeeded(&key(&op.action, op.restores));
            }
        }
        let mut counted = BTreeMap::new();
        let mut refused = BTreeMap::new();
        for (action, (restores, msg)) in failed {
            let step = self
                .backoff
                .failed(&key(&action, restores), generation, clock, &msg);
            retry_in = Some(retry_in.map_or(step.wait, |r| r.min(step.wait)));
            if step.counted {
                tracing::warn!(
                    template = %id,
                    action = %action,
                    error = %msg,
                    retry_in_seconds = step.wait.as_secs(),
                    "write refused"
                );
                counted.insert(action.clone(), msg.clone());
            }
            refused.insert(action, msg);
        }
        failures.extend(refused);
        Ok(Written {
            notes,
            failures,
            counted,
            retry_in,
        })
    }

    /// The template's status, server-side applied by the manager; its echo on the watch
    /// does not wake the template.
    async fn write_status<T>(
        &self,
        api: &Api<T>,
        tpl: &T,
        status: &crate::api::scaling::ScalingTemplateStatus,
    ) -> Result<(), CommitError>
    where
        T: Template + HasStatus<Status = crate::api::scaling::ScalingTemplateStatus>,
    {
        if !(self.is_leader)() {
            return Err(CommitError::NotLeader);
        }
        let body = json!({
            "apiVersion": T::api_version(&()),
            "kind": T::kind(&()),
            "status": status,
        });
        let pp = PatchParams::apply(field_manager::MANAGER).force();
        let _permit = self.in_flight.report().await;
        let written = api
            .patch_status(&tpl.name_any(), &pp, &Patch::Apply(&body))
            .await
            .map_err(CommitError::Template)?;
        self.echoes.expect(&written);
        self.own.record(
            &T::kind(&()),
            &tpl.namespace().unwrap_or_default(),
            &tpl.name_any(),
            written.resource_version().as_deref(),
        );
        self.metrics
            .wrote(CONTROLLER, &format!("{}/status", T::kind(&())));
        Ok(())
    }

    async fn add_finalizer<T: Template>(&self, api: &Api<T>, tpl: &T) -> Result<(), CommitError> {
        if !(self.is_leader)() {
            return Err(CommitError::NotLeader);
        }
        let rv = tpl.resource_version().unwrap_or_default();
        let ops = match tpl.meta().finalizers.as_ref() {
            Some(_) => json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/metadata/finalizers/-", "value": keys::FINALIZER},
            ]),
            None => json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/metadata/finalizers", "value": [keys::FINALIZER]},
            ]),
        };
        self.patch_template(api, &tpl.name_any(), ops).await
    }

    async fn remove_finalizer<T: Template>(
        &self,
        api: &Api<T>,
        tpl: &T,
    ) -> Result<(), CommitError> {
        if !(self.is_leader)() {
            return Err(CommitError::NotLeader);
        }
        let Some(i) = tpl
            .meta()
            .finalizers
            .iter()
            .flatten()
            .position(|f| f == keys::FINALIZER)
        else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{i}");
        let ops = json!([
            {"op": "test", "path": path, "value": keys::FINALIZER},
            {"op": "remove", "path": path},
        ]);
        self.patch_template(api, &tpl.name_any(), ops).await
    }

    async fn patch_template<T: Template>(
        &self,
        api: &Api<T>,
        name: &str,
        ops: Value,
    ) -> Result<(), CommitError> {
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(|e| CommitError::Conflict(e.to_string()))?;
        let pp = PatchParams {
            field_manager: Some(field_manager::MANAGER.to_string()),
            ..PatchParams::default()
        };
        self.metrics.wrote(CONTROLLER, T::kind(&()).as_ref());
        match api.patch(name, &pp, &Patch::Json::<()>(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => {
                Err(CommitError::Conflict(format!("{} {name}", T::kind(&()))))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(CommitError::Template(e)),
        }
    }
}

/// The ops to send now: those not waiting out a refusal (`held`: by action and whether
/// the refused write restored). An action's restores and its other writes wait apart.
fn sendable(ops: &[Op], held: &BTreeSet<(String, bool)>) -> Vec<Op> {
    ops.iter()
        .filter(|op| !held.contains(&(op.action.clone(), op.restores)))
        .cloned()
        .collect()
}

/// Refused writes by action: whether the refused write was a restore, and the message.
type Refusals = BTreeMap<String, (bool, String)>;

/// Patches one namespaced object and returns its metadata, the only part of the answer read.
async fn patch_meta<K>(
    client: Client,
    ns: &str,
    name: &str,
    params: &PatchParams,
    patch: &Patch<()>,
) -> Result<ObjectMeta, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api = Api::<K>::namespaced(client, ns);
    Ok(api.patch_metadata(name, params, patch).await?.metadata)
}

/// A write in a few words for the debug log: the patch's paths and values (its tests
/// included), or what is created or deleted.
fn describe(write: &Write) -> String {
    match write {
        Write::Patch { ops, .. } => ops
            .iter()
            .map(|o| {
                let verb = o["op"].as_str().unwrap_or("?");
                let path = o["path"].as_str().unwrap_or("?");
                match o.get("value") {
                    Some(v) => format!("{verb} {path}={v}"),
                    None => format!("{verb} {path}"),
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
        Write::CreateHpa(_) => "create provisional HPA".to_string(),
        Write::DeleteHpa { .. } => "delete provisional HPA".to_string(),
    }
}

/// Longest Event note the API server keeps.
const NOTE_MAX: usize = 1000;

/// Merges notes of the same type and reason into as few Events as fit [`NOTE_MAX`],
/// keeping their order.
fn coalesce(notes: Vec<EventNote>) -> Vec<EventNote> {
    let mut out: Vec<EventNote> = Vec::new();
    for note in notes {
        let same = out.iter_mut().rev().find(|o| {
            o.warning == note.warning
                && o.reason == note.reason
                && o.note.len() + 2 + note.note.len() <= NOTE_MAX
        });
        match same {
            Some(o) => {
                o.note.push_str("; ");
                o.note.push_str(&note.note);
            }
            None => out.push(note),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An action waiting out its override's refusal (a provisional HPA refused by a quota,
    /// say) still has its restore sent at the window's end.
    #[test]
    fn a_refusal_holds_back_the_actions_override_but_never_its_restore() {
        let op = |action: &str, name: &str, restores: bool| Op {
            action: action.into(),
            namespace: "shop".into(),
            name: name.into(),
            write: Write::Patch {
                kind: ObjectKind::Deployment,
                ops: Vec::new(),
            },
            event: None,
            wave: decide::Wave::default(),
            restores,
        };
        let ops = [
            op("checkout", "checkout", true),
            op("checkout", "moonin-checkout", false),
            op("web", "web", false),
        ];
        let held = BTreeSet::from([("checkout".to_string(), false)]);
        let sent: Vec<(String, bool)> = sendable(&ops, &held)
            .into_iter()
            .map(|o| (o.name, o.restores))
            .collect();
        assert_eq!(
            sent,
            [("checkout".to_string(), true), ("web".to_string(), false)]
        );
        // A refused restore waits out its own backoff, and holds back nothing else.
        let held = BTreeSet::from([("checkout".to_string(), true)]);
        let sent: Vec<String> = sendable(&ops, &held).into_iter().map(|o| o.name).collect();
        assert_eq!(sent, ["moonin-checkout", "web"]);
    }

    fn note(warning: bool, reason: &'static str, text: &str) -> EventNote {
        EventNote {
            warning,
            reason,
            note: text.to_string(),
        }
    }

    #[test]
    fn coalesce_merges_by_type_and_reason_in_order() {
        let out = coalesce(vec![
            note(false, "Applied", "a"),
            note(false, "ScaledUp", "b"),
            note(false, "Applied", "c"),
            note(true, "Applied", "d"),
        ]);
        assert_eq!(
            out,
            vec![
                note(false, "Applied", "a; c"),
                note(false, "ScaledUp", "b"),
                note(true, "Applied", "d"),
            ]
        );
    }

    #[test]
    fn coalesce_never_builds_a_note_longer_than_the_limit() {
        let long = "x".repeat(400);
        let out = coalesce((0..5).map(|_| note(false, "Applied", &long)).collect());
        assert_eq!(out.len(), 3, "400+2+400 fits, a third does not");
        assert!(out.iter().all(|n| n.note.len() <= NOTE_MAX));
        let total: usize = out.iter().map(|n| n.note.matches('x').count()).sum();
        assert_eq!(total, 2000, "nothing is dropped");
    }
}
