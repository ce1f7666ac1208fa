//! Revision recording: each observed change of a Deployment becomes a `WorkloadRevision`
//! (owned by the Deployment), measured from the view the last record was derived from;
//! the oldest records beyond [`revision::KEPT`] go. What a change is worth is decided by
//! [`revision`]; this module decides what to write ([`plan`]) and writes it.
//!
//! Names are derived from the change, so a restart that sees the same change again gets
//! `AlreadyExists`, not a duplicate.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{
    baselines, config,
    errors::{gone_is_done, namespace_being_deleted},
    helm_secrets,
    names::CONTROLLER,
    names::condition_reasons,
    revision::{self, RevView},
    rollout,
    shared::Shared,
    view::DeploymentView,
};
use crate::api::{
    conditions::{self, Desired, types},
    discovery::{HelmRevision, WorkloadRevision, WorkloadRevisionSpec},
    field_manager,
};
use crate::runtime::decode::Decoded;

/// Deployments whose revisions are recorded at once (each one's changes in order).
const REVISION_WRITERS: usize = 16;

/// What recording one observed view of a Deployment comes to.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordPlan {
    /// Records an earlier process created but did not get to mark `Recorded`: marked
    /// first. Looked for when this process first sees the Deployment (later, the store may
    /// simply not show our own status patch yet).
    pub unmarked: Vec<String>,
    /// The record to create, if the change is worth one.
    pub record: Option<NewRecord>,
    /// Whether the view becomes the baseline although nothing is created: there was none
    /// to measure from (a new Deployment, or one no inventory holds a baseline for).
    pub adopt: bool,
}

/// A revision record to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    /// Its name ([`revision::name`]).
    pub name: String,
    /// What it says.
    pub spec: WorkloadRevisionSpec,
    /// Once it is created, the workload's records to delete (beyond [`revision::KEPT`]).
    pub prune: Vec<String>,
}

/// What to write for `after`, measured from its baseline `before` (this process's, or the
/// one an earlier process published; `None`: there is none), given the WorkloadRevisions
/// of its namespace. `first_sight`: this process has not seen the Deployment before. Only
/// records Moonin's discovery wrote for this workload count.
pub fn plan(
    before: Option<&DeploymentView>,
    first_sight: bool,
    after: &DeploymentView,
    revisions: &[RevView],
    helm: Option<HelmRevision>,
    now: Timestamp,
) -> RecordPlan {
    let existing: Vec<&RevView> = revisions
        .iter()
        .filter(|r| r.workload == after.name && r.foreign.is_none())
        .collect();
    let unmarked = existing
        .iter()
        .filter(|r| first_sight && !r.ready())
        .map(|r| r.name.clone())
        .collect();
    let record = revision::change(before, after, helm, now).map(|spec| {
        let name = revision::name(&after.name, &spec, &revision::occurrence(after, &spec));
        // Autoscaler moves are pruned among themselves, every other change among the rest.
        let moves = revision::autoscaler_move(&spec);
        let mut all: Vec<(String, Timestamp)> = existing
            .iter()
            .filter(|r| r.autoscaler_move == moves)
            .map(|r| (r.name.clone(), r.observed_at))
            .collect();
        all.push((name.clone(), now));
        NewRecord {
            prune: revision::prune(&all),
            name,
            spec,
        }
    });
    RecordPlan {
        unmarked,
        adopt: !before.is_some_and(|b| revision::same_object(b, after)),
        record,
    }
}

/// The changed Deployments to record, grouped per Deployment (each one's changes in the
/// order seen), leaving out those of namespaces excluded or gone (not `live`).
pub fn by_workload(
    changes: Vec<Arc<DeploymentView>>,
    live: &BTreeSet<String>,
    excluded: &BTreeSet<&str>,
) -> Vec<Vec<Arc<DeploymentView>>> {
    let mut by_workload: BTreeMap<(String, String), Vec<Arc<DeploymentView>>> = BTreeMap::new();
    for after in changes {
        if excluded.contains(after.namespace.as_str()) || !live.contains(&after.namespace) {
            continue;
        }
        by_workload
            .entry((after.namespace.clone(), after.name.clone()))
            .or_default()
            .push(after);
    }
    by_workload.into_values().collect()
}

/// Changes a rebuild could not record: the first error, and each failed Deployment's views
/// from the one that failed on, in the order seen. Only these go back (a view recorded
/// already, measured again against the newer baseline, would be recorded as a change back).
#[derive(Debug)]
pub struct Unrecorded {
    /// The first error.
    pub error: kube::Error,
    /// The views to record again.
    pub views: Vec<Arc<DeploymentView>>,
}

/// Records the changes of each Deployment in order, Deployments side by side. All of them
/// run to the end (one failure cancels no other write half-way); a Deployment stops at its
/// first failure.
pub async fn record_all(
    shared: &Shared,
    workloads: Vec<Vec<Arc<DeploymentView>>>,
    helm_enabled: bool,
    secrets_readable: bool,
) -> Result<(), Unrecorded> {
    let failed = futures::stream::iter(workloads)
        .map(|views| async move {
            for (done, after) in views.iter().enumerate() {
                match record(shared, after, helm_enabled, secrets_readable).await {
                    Ok(()) => {}
                    Err(e) if namespace_being_deleted(&e) => {
                        tracing::debug!(namespace = %after.namespace, "namespace being deleted; no revision");
                    }
                    Err(e) => return Some((e, views[done..].to_vec())),
                }
            }
            None
        })
        .buffer_unordered(REVISION_WRITERS)
        .filter_map(futures::future::ready)
        .collect::<Vec<_>>()
        .await;
    let mut failed = failed.into_iter();
    let Some((error, mut views)) = failed.next() else {
        return Ok(());
    };
    views.extend(failed.flat_map(|(_, rest)| rest));
    Err(Unrecorded { error, views })
}

/// Records one observed view of a Deployment: loads its baseline, Helm release, records and
/// the content of the ConfigMaps (and, when `secrets_readable`, Secrets) it refers to, then
/// writes what [`plan`] says.
async fn record(
    shared: &Shared,
    after: &Arc<DeploymentView>,
    helm_enabled: bool,
    secrets_readable: bool,
) -> Result<(), kube::Error> {
    let after = &with_configs(shared, after, secrets_readable);
    let key = (after.namespace.clone(), after.name.clone());
    let remembered = shared.baselines.get(&key);
    let first_sight = remembered.is_none();
    // First sight: measure from what the inventory published, which an edit still waiting
    // for its ReplicaSet revision must keep being measured from.
    let before = remembered
        .or_else(|| {
            Some(Arc::new(published_baseline(
                shared,
                &after.namespace,
                &after.name,
            )?))
        })
        .map(|b| {
            // A ConfigMap the baseline holds nothing of is measured from now on.
            let b = match config::fill(&b.configs, &after.configs) {
                Some(configs) if revision::same_object(&b, after) => Arc::new(DeploymentView {
                    configs,
                    ..(*b).clone()
                }),
                _ => b,
            };
            shared.baselines.set(&b);
            b
        });
    // Secrets not readable (yet): what the baseline holds of those still referred to stays
    // in the next baseline, to be measured from once they are.
    let after = &match &before {
        Some(b) if !secrets_readable => with_unread_secrets(b, after),
        _ => after.clone(),
    };
    let now = Timestamp::now();
    let helm = match (&after.helm_release, helm_enabled) {
        (Some(release), true) => helm_secrets::releases(
            &shared.client,
            &shared.stores.helm_secrets,
            &shared.helm,
            &after.namespace,
        )
        .await
        .into_iter()
        .find(|(r, _, _)| r == release)
        .map(|(_, _, rev)| rev),
        _ => None,
    };
    let revisions = shared.stores.revisions.in_namespace(&after.namespace);
    let plan = plan(before.as_deref(), first_sight, after, &revisions, helm, now);
    commit(shared, after, plan, revisions, now).await
}

/// Writes what [`plan`] decided, then the outcome of every rollout of the workload that
/// ended ([`rollout::settle`], over `revisions` and the record just created). The view
/// becomes the baseline only once all of it is written: a view whose commit failed half-way
/// is measured again on the retry, and its record, found to exist, is marked then.
async fn commit(
    shared: &Shared,
    after: &Arc<DeploymentView>,
    plan: RecordPlan,
    mut revisions: Vec<RevView>,
    now: Timestamp,
) -> Result<(), kube::Error> {
    let api: Api<WorkloadRevision> = Api::namespaced(shared.client.clone(), &after.namespace);
    for name in &plan.unmarked {
        mark_recorded(shared, &api, name, now).await?;
    }
    let becomes_baseline = plan.record.is_some() || plan.adopt;
    if let Some(new) = plan.record {
        let created = create(shared, &api, after, &new).await?;
        // One that exists already is the change seen again (a retry, a restart): marked
        // unless it shows marked or was just marked above.
        let marked = plan.unmarked.contains(&new.name)
            || revisions.iter().any(|r| r.name == new.name && r.ready());
        if created || !marked {
            mark_recorded(shared, &api, &new.name, now).await?;
        }
        if created {
            for old in &new.prune {
                shared.ctx.metrics.wrote(CONTROLLER, "WorkloadRevision");
                gone_is_done(api.delete(old, &DeleteParams::default()).await)?;
            }
        }
        revisions.retain(|r| !new.prune.contains(&r.name));
        if !revisions.iter().any(|r| r.name == new.name) {
            revisions.push(revision::new_view(&new.name, &new.spec));
        }
    }
    for (name, outcome) in rollout::settle(&revisions, after, now) {
        write_outcome(shared, &api, &name, &outcome, now).await?;
    }
    if becomes_baseline {
        shared.baselines.set(after);
    }
    Ok(())
}

/// Records how a rollout ended in its record's status.
async fn write_outcome(
    shared: &Shared,
    api: &Api<WorkloadRevision>,
    name: &str,
    o: &rollout::Outcome,
    now: Timestamp,
) -> Result<(), kube::Error> {
    let body = json!({"status": {
        "outcome": o.outcome,
        "outcomeMessage": o.message,
        "finishedAt": Time(now),
        "took": o.took,
    }});
    merge_status(shared, api, name, &body).await
}

/// Merges `body` into a WorkloadRevision's status as discovery; one pruned or deleted with
/// its Deployment meanwhile is nothing to write.
async fn merge_status<K>(
    shared: &Shared,
    api: &Api<K>,
    name: &str,
    body: &serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    shared
        .ctx
        .metrics
        .wrote(CONTROLLER, "WorkloadRevision/status");
    let pp = PatchParams {
        field_manager: Some(field_manager::DISCOVERY.to_string()),
        ..PatchParams::default()
    };
    gone_is_done(api.patch_status(name, &pp, &Patch::Merge(body)).await)
}

/// `after` with the state of the ConfigMaps it refers to, and of the Secrets when
/// `secrets_readable`, as stored now (the same view when there is none). A Secret not
/// measured now is left out, not taken as missing.
fn with_configs(
    shared: &Shared,
    after: &Arc<DeploymentView>,
    secrets_readable: bool,
) -> Arc<DeploymentView> {
    let s = &shared.stores;
    let configs: Vec<config::ConfigState> = after
        .config_refs
        .iter()
        .filter_map(|r| {
            let view = match (
                config::name_of(r, config::CONFIG_MAP),
                config::name_of(r, config::SECRET),
            ) {
                (Some(name), _) => s.config_maps.get(&after.namespace, name),
                (_, Some(name)) if secrets_readable => s.secrets.get(&after.namespace, name),
                _ => return None,
            };
            Some(config::state(r, view.as_ref()))
        })
        .collect();
    if configs.is_empty() {
        return after.clone();
    }
    Arc::new(DeploymentView {
        configs,
        ..(**after).clone()
    })
}

/// `after` with the state `before` holds of each Secret `after` still refers to but holds
/// nothing of (its Secrets could not be read).
fn with_unread_secrets(
    before: &DeploymentView,
    after: &Arc<DeploymentView>,
) -> Arc<DeploymentView> {
    let unread: Vec<&config::ConfigState> = before
        .configs
        .iter()
        .filter(|s| config::name_of(&s.source, config::SECRET).is_some())
        .filter(|s| after.config_refs.contains(&s.source))
        .filter(|s| !after.configs.iter().any(|a| a.source == s.source))
        .collect();
    if unread.is_empty() {
        return after.clone();
    }
    let mut configs: Vec<config::ConfigState> =
        after.configs.iter().chain(unread).cloned().collect();
    configs.sort_by(|a, b| a.source.cmp(&b.source));
    Arc::new(DeploymentView {
        configs,
        ..(**after).clone()
    })
}

/// The baseline of `namespace`/`name` in the published inventory (any of its parts).
fn published_baseline(shared: &Shared, namespace: &str, name: &str) -> Option<DeploymentView> {
    shared
        .stores
        .inventory_parts(namespace)
        .into_iter()
        .find_map(|p| {
            let entry = p
                .status
                .as_ref()?
                .deployments
                .iter()
                .find(|d| d.name == name)?;
            Some(baselines::restored(
                namespace,
                name,
                entry.baseline.as_ref()?,
            ))
        })
}

/// Creates a record owned by its Deployment; `false` when it exists already.
async fn create(
    shared: &Shared,
    api: &Api<WorkloadRevision>,
    after: &DeploymentView,
    new: &NewRecord,
) -> Result<bool, kube::Error> {
    let obj: WorkloadRevision = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "WorkloadRevision",
        "metadata": {
            "name": new.name,
            "namespace": after.namespace,
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": after.name,
                "uid": after.uid,
            }],
        },
        "spec": new.spec,
    }))
    .map_err(kube::Error::SerdeError)?;
    let pp = PostParams {
        field_manager: Some(field_manager::DISCOVERY.to_string()),
        ..PostParams::default()
    };
    shared.ctx.metrics.wrote(CONTROLLER, "WorkloadRevision");
    match api.create(&pp, &obj).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets a WorkloadRevision's status: `Ready=True/Recorded`.
async fn mark_recorded(
    shared: &Shared,
    api: &Api<WorkloadRevision>,
    name: &str,
    now: Timestamp,
) -> Result<(), kube::Error> {
    let ready = Desired::new(
        types::READY,
        true,
        condition_reasons::RECORDED,
        "the change is recorded",
    );
    let body = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "WorkloadRevision",
        "status": {
            "observedGeneration": 1,
            "conditions": conditions::merge(&[], &[ready], Some(1), now),
        },
    });
    shared
        .ctx
        .metrics
        .wrote(CONTROLLER, "WorkloadRevision/status");
    // Pruned or deleted with its Deployment meanwhile: nothing to mark.
    gone_is_done(
        api.patch_status(
            name,
            &PatchParams::apply(field_manager::DISCOVERY).force(),
            &Patch::Apply(&body),
        )
        .await,
    )
}

/// Gives each WorkloadRevision of `ns` that Moonin's discovery did not write
/// `Ready=False/NotRecorded`: it looks like a change record but is not one.
pub async fn report_foreign(shared: &Shared, ns: &str) -> Result<(), kube::Error> {
    let now = Timestamp::now();
    let api: Api<Decoded<WorkloadRevision>> = Api::namespaced(shared.client.clone(), ns);
    for r in shared.stores.revisions.in_namespace(ns) {
        if !r.foreign_unreported() {
            continue;
        }
        let author = r.foreign.as_deref().unwrap_or_default();
        let message = format!(
            "created by {author}, not by Moonin's discovery: it is not part of the change log"
        );
        // Stalled too: nothing Moonin does changes it, so a GitOps tool that waits on it
        // (kstatus, Argo CD) reads it as failed instead of in progress for good.
        let stalled = [
            Desired::new(
                types::READY,
                false,
                condition_reasons::NOT_RECORDED,
                message.clone(),
            ),
            Desired::new(
                types::STALLED,
                true,
                condition_reasons::NOT_RECORDED,
                message,
            ),
        ];
        let body = json!({"status": {
            "observedGeneration": 1,
            "conditions": conditions::merge(&[], &stalled, Some(1), now),
        }});
        merge_status(shared, &api, &r.name, &body).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn web(revision: i64, image: &str) -> DeploymentView {
        DeploymentView {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u1".into(),
            generation: revision,
            observed_generation: revision,
            replicas: 2,
            revision: Some(revision),
            images: vec![("app".into(), image.into())],
            ..Default::default()
        }
    }

    /// While Secrets cannot be read, a record's new baseline keeps what the old one held of
    /// the Secrets still referred to (the published state after a restart), so that they are
    /// measured from it once they can be read; a Secret no longer referred to is dropped.
    #[test]
    fn a_baseline_keeps_the_secrets_it_could_not_read() {
        let state = |source: &str, key: &str| config::ConfigState {
            source: source.into(),
            exists: true,
            keys: vec![(key.into(), None)],
            ..Default::default()
        };
        let before = DeploymentView {
            config_refs: vec![
                "ConfigMap/app".into(),
                "Secret/db".into(),
                "Secret/old".into(),
            ],
            configs: vec![
                state("ConfigMap/app", "a"),
                state("Secret/db", "password"),
                state("Secret/old", "token"),
            ],
            ..web(3, "app:3")
        };
        let after = Arc::new(DeploymentView {
            config_refs: vec!["ConfigMap/app".into(), "Secret/db".into()],
            configs: vec![state("ConfigMap/app", "b")],
            ..web(3, "app:3")
        });
        let kept = with_unread_secrets(&before, &after);
        assert_eq!(
            kept.configs,
            vec![state("ConfigMap/app", "b"), state("Secret/db", "password")]
        );
        // Read: nothing to keep.
        let read = Arc::new(DeploymentView {
            configs: vec![state("ConfigMap/app", "b"), state("Secret/db", "user")],
            ..(*after).clone()
        });
        assert_eq!(with_unread_secrets(&before, &read), read);
    }

    fn rec(name: &str, workload: &str, revision: i64, reason: Option<&str>) -> RevView {
        RevView {
            name: name.into(),
            workload: workload.into(),
            revision,
            observed_at: ts("2026-01-01T00:00:00Z"),
            reason: reason.map(String::from),
            foreign: None,
            rollout: true,
            images: Vec::new(),
            outcome: None,
            summary: String::new(),
            changed_by: None,
            autoscaler_move: false,
        }
    }

    #[test]
    fn first_sight_without_a_baseline_adopts_it_and_marks_what_an_earlier_process_left() {
        let now = ts("2026-02-01T00:00:00Z");
        let revisions = [
            rec("web-r3-a", "web", 3, None),
            rec("web-r2-b", "web", 2, Some(condition_reasons::RECORDED)),
            rec("api-r3-c", "api", 3, None),
            RevView {
                foreign: Some("kubectl".into()),
                ..rec("web-r9-d", "web", 9, None)
            },
        ];
        assert_eq!(
            plan(None, true, &web(3, "app:3"), &revisions, None, now),
            RecordPlan {
                unmarked: vec!["web-r3-a".into()],
                record: None,
                adopt: true,
            }
        );
        // A new Deployment: a baseline, not a revision.
        assert_eq!(
            plan(None, true, &web(1, "app:1"), &[], None, now),
            RecordPlan {
                unmarked: vec![],
                record: None,
                adopt: true,
            }
        );
    }

    #[test]
    fn a_change_made_while_no_process_watched_is_measured_from_the_published_baseline() {
        let now = ts("2026-02-01T00:00:00Z");
        let published = crate::discovery::baselines::restored(
            "shop",
            "web",
            &crate::discovery::baselines::published(&web(4, "app:4")),
        );
        let after = web(5, "app:5");
        let spec = revision::change(Some(&published), &after, None, now).expect("a change");
        assert_eq!(spec.images[0].from.as_deref(), Some("app:4"));
        assert_eq!(
            plan(Some(&published), true, &after, &[], None, now),
            RecordPlan {
                unmarked: vec![],
                record: Some(NewRecord {
                    name: revision::name("web", &spec, &revision::occurrence(&after, &spec)),
                    spec,
                    prune: vec![],
                }),
                adopt: false,
            }
        );
        // Nothing changed meanwhile: nothing to write, and the baseline stays.
        let same = plan(Some(&published), true, &web(4, "app:4"), &[], None, now);
        assert_eq!((same.record, same.adopt), (None, false));
        // Deleted and created again meanwhile: a new baseline, no revision.
        let recreated = DeploymentView {
            uid: "u2".into(),
            ..web(1, "app:9")
        };
        let again = plan(Some(&published), true, &recreated, &[], None, now);
        assert_eq!((again.record, again.adopt), (None, true));
    }

    #[test]
    fn a_change_is_measured_from_the_baseline_and_prunes_beyond_the_kept_ones() {
        let now = ts("2026-02-01T00:00:00Z");
        let (before, after) = (web(10, "app:10"), web(11, "app:11"));
        let revisions: Vec<RevView> = (1..=10)
            .map(|i| RevView {
                observed_at: ts(&format!("2026-01-{i:02}T00:00:00Z")),
                ..rec(
                    &format!("web-r{i}"),
                    "web",
                    i,
                    Some(condition_reasons::RECORDED),
                )
            })
            .collect();
        let spec = revision::change(Some(&before), &after, None, now).unwrap();
        assert_eq!(
            plan(Some(&before), false, &after, &revisions, None, now),
            RecordPlan {
                unmarked: vec![],
                record: Some(NewRecord {
                    name: revision::name("web", &spec, &revision::occurrence(&after, &spec)),
                    spec,
                    prune: vec!["web-r1".into()],
                }),
                adopt: false,
            }
        );
    }

    /// An autoscaled Deployment's moves never push its other changes out of the log: each
    /// kind keeps its newest [`revision::KEPT`].
    #[test]
    fn autoscaler_moves_are_pruned_among_themselves() {
        let now = ts("2026-02-01T00:00:00Z");
        let day = |d: i64| ts(&format!("2026-01-{d:02}T00:00:00Z"));
        let recorded = Some(condition_reasons::RECORDED);
        let mut revisions: Vec<RevView> = (1..=10)
            .map(|i| RevView {
                observed_at: day(i),
                ..rec(&format!("web-r{i}"), "web", i, recorded)
            })
            .collect();
        revisions.extend((11..=20).map(|i| RevView {
            observed_at: day(i),
            rollout: false,
            autoscaler_move: true,
            ..rec(&format!("web-m{i}"), "web", 10, recorded)
        }));
        let before = web(10, "app:10");
        let scaled = DeploymentView {
            replicas: 5,
            replicas_managers: vec!["kube-controller-manager".into()],
            ..before.clone()
        };
        let moved = plan(Some(&before), false, &scaled, &revisions, None, now);
        let record = moved.record.expect("a record");
        assert!(revision::autoscaler_move(&record.spec));
        assert_eq!(record.prune, vec!["web-m11".to_string()]);
        // A scale by hand is a change like any other.
        let by_hand = DeploymentView {
            replicas_managers: vec!["kubectl-scale".into()],
            ..scaled.clone()
        };
        let manual = plan(Some(&before), false, &by_hand, &revisions, None, now);
        assert_eq!(
            manual.record.expect("a record").prune,
            vec!["web-r1".to_string()]
        );
        let deployed = plan(
            Some(&before),
            false,
            &web(11, "app:11"),
            &revisions,
            None,
            now,
        );
        assert_eq!(
            deployed.record.expect("a record").prune,
            vec!["web-r1".to_string()]
        );
    }

    #[test]
    fn no_change_is_no_record_and_keeps_the_baseline() {
        let now = ts("2026-02-01T00:00:00Z");
        let v = web(3, "app:3");
        assert_eq!(
            plan(Some(&v), false, &v, &[], None, now),
            RecordPlan {
                unmarked: vec![],
                record: None,
                adopt: false,
            }
        );
    }

    #[test]
    fn changes_are_grouped_per_deployment_in_order_without_excluded_or_gone_namespaces() {
        let view = |ns: &str, name: &str, revision: i64| {
            Arc::new(DeploymentView {
                namespace: ns.into(),
                name: name.into(),
                revision: Some(revision),
                ..Default::default()
            })
        };
        let live: BTreeSet<String> = ["shop", "skip"].map(String::from).into();
        let excluded: BTreeSet<&str> = ["skip"].into();
        let groups = by_workload(
            vec![
                view("shop", "web", 1),
                view("shop", "api", 1),
                view("gone", "web", 1),
                view("skip", "web", 1),
                view("shop", "web", 2),
            ],
            &live,
            &excluded,
        );
        let seen: Vec<Vec<String>> = groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|d| format!("{}/{}@{}", d.namespace, d.name, d.revision.unwrap_or(0)))
                    .collect()
            })
            .collect();
        assert_eq!(seen, [vec!["shop/api@1"], vec!["shop/web@1", "shop/web@2"]]);
    }
}
