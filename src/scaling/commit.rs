//! Commit: performs a [`Plan`]'s writes in order, then the status write, then the Events.
//!
//! Every write to someone else's object is a JSON Patch that starts with a `test` of the
//! `resourceVersion` it was decided on (or a delete with UID and resourceVersion
//! preconditions). When the object changed in between, the API server refuses the whole
//! patch, nothing is clobbered, and the template is reconciled again from fresh caches.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    core::object::HasStatus,
    runtime::events::{Event, EventType, Recorder},
};
use serde_json::{Value, json};

use super::decide::{self, EventNote, Finalizer, ObjectKind, Op, Plan, Write};
use super::keda::ScaledObject;
use super::load::Template;
use crate::api::{field_manager, scaling::keys};
use crate::manager::metrics::Metrics;

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

/// Whether an API error means "the object moved under us".
pub fn is_conflict(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 409
                || (s.code == 422
                    && (s.message.contains("test") || s.message.contains("precondition")))
                || s.message.contains("Precondition failed")
        }
        _ => false,
    }
}

fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// The writer: a client, a recorder and the leadership check.
#[derive(Clone)]
pub struct Writer {
    /// The API client.
    pub client: Client,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Counts writes.
    pub metrics: Metrics,
    /// Checked before every write.
    pub is_leader: std::sync::Arc<dyn Fn() -> bool + Send + Sync>,
}

impl Writer {
    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(field_manager::SCALING.to_string()),
            ..PatchParams::default()
        }
    }

    /// Performs one op. Conflicts come back as `Err(Ok(_))`-style [`CommitError`]s; other
    /// refusals as a message for the action.
    async fn write(&self, op: &Op) -> Result<Result<(), String>, CommitError> {
        if !(self.is_leader)() {
            return Err(CommitError::NotLeader);
        }
        let ns = op.namespace.as_str();
        let (kind, result) = match &op.write {
            Write::Patch { kind, ops } => {
                let patch: json_patch::Patch =
                    match serde_json::from_value(Value::Array(ops.clone())) {
                        Ok(p) => p,
                        Err(e) => return Ok(Err(format!("internal error building a patch: {e}"))),
                    };
                let patch = Patch::Json::<()>(patch);
                let p = Self::params();
                match kind {
                    ObjectKind::Hpa => (
                        "HorizontalPodAutoscaler",
                        Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns)
                            .patch(&op.name, &p, &patch)
                            .await
                            .map(|_| ()),
                    ),
                    ObjectKind::ScaledObject => (
                        "ScaledObject",
                        Api::<ScaledObject>::namespaced(self.client.clone(), ns)
                            .patch(&op.name, &p, &patch)
                            .await
                            .map(|_| ()),
                    ),
                    ObjectKind::Deployment => (
                        "Deployment",
                        Api::<Deployment>::namespaced(self.client.clone(), ns)
                            .patch(&op.name, &p, &patch)
                            .await
                            .map(|_| ()),
                    ),
                }
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
                (
                    "HorizontalPodAutoscaler",
                    Api::<HorizontalPodAutoscaler>::namespaced(self.client.clone(), ns)
                        .create(&pp, &hpa)
                        .await
                        .map(|_| ()),
                )
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
                (
                    "HorizontalPodAutoscaler",
                    match r {
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        other => other.map(|_| ()),
                    },
                )
            }
        };
        self.metrics.wrote(CONTROLLER, kind);
        match result {
            Ok(()) => Ok(Ok(())),
            Err(e) if is_conflict(&e) => {
                Err(CommitError::Conflict(format!("{kind} {ns}/{}", op.name)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                Err(CommitError::Conflict(format!("{kind} {ns}/{}", op.name)))
            }
            Err(e) => Ok(Err(format!(
                "writing {kind} {ns}/{}: {}",
                op.name,
                error_text(&e)
            ))),
        }
    }

    async fn publish(
        &self,
        note: &EventNote,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
    ) {
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.to_string(),
            note: Some(truncate(&note.note, 1000)),
            action: note.reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, reason = note.reason, "could not publish an Event");
        }
    }

    /// Runs a plan for `tpl`: finalizer first (so a deletion always reverts), the ops in
    /// order, the status if it changed, then the Events.
    pub async fn commit<T>(&self, tpl: &T, plan: &Plan, now: Timestamp) -> Result<(), CommitError>
    where
        T: Template + HasStatus<Status = crate::api::scaling::ScalingTemplateStatus>,
    {
        let api: Api<T> = tpl.api(self.client.clone());
        let regarding = tpl.object_ref(&());
        let name = tpl.name_any();
        if plan.finalizer == Finalizer::Add {
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
            self.patch_template(&api, &name, ops).await?;
        }

        let mut failed: BTreeMap<String, String> = BTreeMap::new();
        for op in &plan.ops {
            if failed.contains_key(&op.action) {
                continue;
            }
            match self.write(op).await? {
                Ok(()) => {
                    if let Some(note) = &op.event {
                        self.publish(note, &regarding).await;
                    }
                }
                Err(msg) => {
                    tracing::warn!(template = %name, action = %op.action, error = %msg, "write refused");
                    failed.insert(op.action.clone(), msg);
                }
            }
        }

        let mut status = plan.status.clone();
        decide::record_failures(&mut status, &failed, now);
        if tpl.status() != Some(&status) {
            if !(self.is_leader)() {
                return Err(CommitError::NotLeader);
            }
            let body = json!({
                "apiVersion": T::api_version(&()),
                "kind": T::kind(&()),
                "status": status,
            });
            let pp = PatchParams::apply(field_manager::MANAGER).force();
            api.patch_status(&name, &pp, &Patch::Apply(&body))
                .await
                .map_err(CommitError::Template)?;
            self.metrics
                .wrote(CONTROLLER, &format!("{}/status", T::kind(&())));
        }
        for note in &plan.events {
            self.publish(note, &regarding).await;
        }
        for (action, msg) in &failed {
            self.publish(
                &EventNote {
                    warning: true,
                    reason: crate::api::scaling::reasons::APPLY_FAILED,
                    note: format!("{action}: {msg}"),
                },
                &regarding,
            )
            .await;
        }

        if plan.finalizer == Finalizer::Remove && failed.is_empty() {
            if !(self.is_leader)() {
                return Err(CommitError::NotLeader);
            }
            if let Some(i) = tpl
                .meta()
                .finalizers
                .iter()
                .flatten()
                .position(|f| f == keys::FINALIZER)
            {
                let path = format!("/metadata/finalizers/{i}");
                let ops = json!([
                    {"op": "test", "path": path, "value": keys::FINALIZER},
                    {"op": "remove", "path": path},
                ]);
                self.patch_template(&api, &name, ops).await?;
            }
        }
        Ok(())
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

    /// Performs sweep ops (owner template gone); Events go to the object written.
    pub async fn sweep(&self, ops: &[Op]) -> Result<usize, CommitError> {
        let mut done = 0;
        for op in ops {
            match self.write(op).await? {
                Ok(()) => {
                    done += 1;
                    if let Some(note) = &op.event {
                        let (api_version, kind) = match &op.write {
                            Write::Patch {
                                kind: ObjectKind::Deployment,
                                ..
                            } => ("apps/v1", "Deployment"),
                            Write::Patch {
                                kind: ObjectKind::ScaledObject,
                                ..
                            } => ("keda.sh/v1alpha1", "ScaledObject"),
                            _ => ("autoscaling/v2", "HorizontalPodAutoscaler"),
                        };
                        let regarding = k8s_openapi::api::core::v1::ObjectReference {
                            api_version: Some(api_version.to_string()),
                            kind: Some(kind.to_string()),
                            namespace: Some(op.namespace.clone()),
                            name: Some(op.name.clone()),
                            ..Default::default()
                        };
                        let mut note = note.clone();
                        note.note = format!("{} (its template no longer exists)", note.note);
                        self.publish(&note, &regarding).await;
                    }
                }
                Err(msg) => tracing::warn!(object = %op.name, error = %msg, "sweep write refused"),
            }
        }
        Ok(done)
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
