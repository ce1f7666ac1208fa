//! What discovery watches: one projection index per kind (the two kinds it writes itself are
//! kept whole, trimmed), and what a change of each kind marks for the next rebuild.
//!
//! Nothing is relisted periodically: the watches resume from their last resourceVersion.

use std::sync::Arc;

use futures::{FutureExt, StreamExt, future::BoxFuture};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{Namespace, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    runtime::{reflector::Store, watcher},
};

use super::{
    baselines::Baselines,
    config::{self, ConfigView},
    dirty::{Mark, Pending},
    helm_secrets::{self, HelmSecretView, HelmState},
    index::{Change, Projections},
    opt_in::{self, Access},
    revision::{RevView, rev_view},
    view::{
        self, CronJobView, DeploymentView, HpaView, JobView, NodeView, PodView, ScaledObjectView,
    },
    watch::{OnChange, all_valid, projections, projections_with},
};
use crate::api::discovery::{ClusterDiscovery, NamespaceInventory};
use crate::api::{field_manager, keda::ScaledObject};
use crate::runtime::{cache, lists::InitialList};

/// A ReplicaSet, reduced to its owning Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct RsView {
    /// The Deployment that controls it.
    pub deployment: Option<String>,
}

fn rs_view(r: &ReplicaSet) -> RsView {
    RsView {
        deployment: r
            .owner_references()
            .iter()
            .find(|o| o.kind == "Deployment" && o.controller == Some(true))
            .map(|o| o.name.clone()),
    }
}

/// A Namespace: its name, and whether it is being deleted.
fn namespace_view(n: &Namespace) -> (String, bool) {
    (n.name_any(), n.metadata.deletion_timestamp.is_some())
}

/// Every store discovery reads.
pub struct Stores {
    /// Nodes.
    pub nodes: Projections<NodeView>,
    /// Namespace name → whether it is being deleted.
    pub namespaces: Projections<(String, bool)>,
    /// Shared with [`Baselines`]: an unchanged Deployment is held once.
    pub deployments: Projections<Arc<DeploymentView>>,
    /// ReplicaSets.
    pub replica_sets: Projections<RsView>,
    /// Pods.
    pub pods: Projections<PodView>,
    /// Jobs.
    pub jobs: Projections<JobView>,
    /// CronJobs.
    pub cron_jobs: Projections<CronJobView>,
    /// HPAs.
    pub hpas: Projections<HpaView>,
    /// ConfigMaps: key names and digests, never values.
    pub config_maps: Projections<ConfigView>,
    /// The Secrets workloads may refer to (Helm release Secrets aside), reduced at once to
    /// key names and digests; listed only while `spec.secretChanges.enabled`.
    pub secrets: Projections<ConfigView>,
    /// None when KEDA's CRD is not installed.
    pub scaled_objects: Option<Projections<ScaledObjectView>>,
    /// WorkloadRevisions.
    pub revisions: Projections<RevView>,
    /// Helm release Secrets' metadata.
    pub helm_secrets: Projections<HelmSecretView>,
    /// NamespaceInventories.
    pub inventories: Store<NamespaceInventory>,
    /// ClusterDiscoveries.
    pub discoveries: Store<ClusterDiscovery>,
}

impl Stores {
    /// Whether every projection has listed (the Helm Secrets' aside: they are listed only
    /// while Helm discovery is on), and the ClusterDiscoveries and the published
    /// inventories: a rebuild compares with them, and measures each Deployment from the
    /// baseline they hold.
    pub fn synced(&self) -> bool {
        listed(&self.inventories)
            && listed(&self.discoveries)
            && self.nodes.synced()
            && self.namespaces.synced()
            && self.deployments.synced()
            && self.replica_sets.synced()
            && self.pods.synced()
            && self.jobs.synced()
            && self.cron_jobs.synced()
            && self.hpas.synced()
            && self.config_maps.synced()
            && self.scaled_objects.as_ref().is_none_or(|s| s.synced())
            && self.revisions.synced()
    }

    /// The published inventory parts of namespace `ns`.
    pub fn inventory_parts(&self, ns: &str) -> Vec<Arc<NamespaceInventory>> {
        self.inventories
            .state_filter(|i| i.metadata.namespace.as_deref() == Some(ns))
    }

    /// The ClusterDiscovery in charge (see [`in_charge`]).
    pub fn in_charge(&self) -> Option<Arc<ClusterDiscovery>> {
        in_charge(&self.discoveries.state())
    }
}

/// Whether `store`'s watch has listed once.
fn listed<K: Clone + kube::Resource + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|ready| ready.is_ok())
}

/// The ClusterDiscovery in charge: the oldest one not being deleted (by name among equals).
pub fn in_charge(all: &[Arc<ClusterDiscovery>]) -> Option<Arc<ClusterDiscovery>> {
    all.iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .min_by_key(|d| (d.creation_timestamp().map(|t| t.0), d.name_any()))
        .cloned()
}

/// Starts the watch of every kind discovery reads: the stores, and the futures that drive
/// them (poll them as long as the stores are used). Changes go to `pending`; a deleted
/// Deployment's baseline is forgotten.
pub async fn watch(
    client: &Client,
    pending: &Arc<Pending>,
    baselines: &Arc<Baselines>,
    helm: &Arc<HelmState>,
    secret_access: &Arc<Access>,
) -> (Stores, Vec<BoxFuture<'static, ()>>) {
    let mut w = Watches {
        client,
        pending,
        config: InitialList::probe(client).await.config(),
        drives: Vec::new(),
    };
    let scaled_objects = if cache::installed::<ScaledObject>(client).await {
        Some(w.project(view::scaled_object, by_namespace))
    } else {
        tracing::info!(
            "KEDA's ScaledObject CRD is not installed: ScaledObjects are not inventoried (restart Moonin after installing KEDA)"
        );
        None
    };
    let deployments = w.keep(projections(
        client.clone(),
        w.config.clone(),
        |d: &Deployment| Arc::new(view::deployment(d)),
        deployment_marks(pending, baselines),
    ));
    let inventories = w.keep(cache::cache(
        client.clone(),
        w.config.clone(),
        |i: &mut NamespaceInventory| cache::strip_last_applied(&mut i.metadata),
        vec![trigger(pending, inventory_changed)],
    ));
    let discoveries = w.keep(cache::cache(
        client.clone(),
        w.config.clone(),
        |d: &mut ClusterDiscovery| cache::strip_last_applied(&mut d.metadata),
        vec![trigger(pending, |_| Mark::cluster())],
    ));
    let helm_enabled = {
        let discoveries = discoveries.clone();
        move || in_charge(&discoveries.state()).is_some_and(|cd| cd.spec.helm.enabled)
    };
    let helm_secrets = w.keep(helm_secrets::watch(
        client.clone(),
        helm_enabled,
        helm.clone(),
        pending.clone(),
    ));
    let secrets_enabled = {
        let discoveries = discoveries.clone();
        move || in_charge(&discoveries.state()).is_some_and(|cd| cd.spec.secret_changes.enabled)
    };
    let secrets = w.keep(secrets(
        client,
        w.config.clone(),
        secrets_enabled,
        secret_access,
        pending,
    ));
    let stores = Stores {
        nodes: w.project(view::node, cluster_wide),
        namespaces: w.project(namespace_view, namespace_changed),
        deployments,
        replica_sets: w.project(rs_view, by_namespace),
        pods: w.project(view::pod, by_namespace),
        jobs: w.project(view::job, by_namespace),
        cron_jobs: w.project(view::cron_job, by_namespace),
        hpas: w.project(view::hpa, by_namespace),
        config_maps: w.project(config::config_map, config_map_changed),
        secrets,
        scaled_objects,
        revisions: w.project(rev_view, revision_changed),
        helm_secrets,
        inventories,
        discoveries,
    };
    (stores, w.drives)
}

/// The watches being started, and their drives.
struct Watches<'a> {
    client: &'a Client,
    pending: &'a Arc<Pending>,
    /// How each watch starts ([`InitialList`]).
    config: watcher::Config,
    drives: Vec<BoxFuture<'static, ()>>,
}

impl Watches<'_> {
    /// Keeps a watch's drive; returns its store.
    fn keep<S>(&mut self, (store, drive): (S, BoxFuture<'static, ()>)) -> S {
        self.drives.push(drive);
        store
    }

    /// A projection of every `K`, each change marked as `mark` says.
    fn project<K, V>(
        &mut self,
        project: fn(&K) -> V,
        mark: fn(Change<'_, V>) -> Mark,
    ) -> Projections<V>
    where
        K: cache::Cached,
        V: Clone + PartialEq + Send + Sync + 'static,
    {
        let pending = self.pending.clone();
        let on_change: OnChange<V> = Box::new(move |c| pending.mark(mark(c)));
        self.keep(projections(
            self.client.clone(),
            self.config.clone(),
            project,
            on_change,
        ))
    }
}

/// A cache trigger marking what `mark` makes of each object applied or deleted.
fn trigger<K: 'static>(pending: &Arc<Pending>, mark: fn(&K) -> Mark) -> cache::Trigger<K> {
    let pending = pending.clone();
    Box::new(move |o| pending.mark(mark(o)))
}

/// A change to an object of a namespace rebuilds that namespace; a completed list, the
/// cluster status.
fn by_namespace<V>(c: Change<'_, V>) -> Mark {
    match c {
        Change::Object { key, .. } => Mark::namespace(&key.0),
        Change::Synced => Mark::cluster(),
    }
}

/// Any change rebuilds the cluster status.
fn cluster_wide<V>(_: Change<'_, V>) -> Mark {
    Mark::cluster()
}

/// A Namespace that comes, goes or starts terminating: its inventory and the totals.
fn namespace_changed(c: Change<'_, (String, bool)>) -> Mark {
    match c {
        Change::Object { key, .. } => Mark::namespace_and_cluster(&key.1),
        Change::Synced => Mark::cluster(),
    }
}

/// A Deployment that changed: its namespace, and the view for its revision record.
fn deployment_changed(c: Change<'_, Arc<DeploymentView>>) -> Mark {
    match c {
        Change::Object { key, after, .. } => Mark {
            deployment: after.cloned(),
            ..Mark::namespace(&key.0)
        },
        Change::Synced => Mark::cluster(),
    }
}

/// [`deployment_changed`], and a deleted Deployment's baseline forgotten.
fn deployment_marks(
    pending: &Arc<Pending>,
    baselines: &Arc<Baselines>,
) -> OnChange<Arc<DeploymentView>> {
    let (pending, baselines) = (pending.clone(), baselines.clone());
    Box::new(move |c| {
        if let Change::Object {
            key, after: None, ..
        } = c
        {
            baselines.forget(key);
        }
        pending.mark(deployment_changed(c));
    })
}

/// What `SecretAccess` says while listing Secrets is refused.
pub const SECRETS_DENIED: &str = "listing Secrets is forbidden";

/// The watch of the Secrets workloads may refer to, while `enabled()` (see
/// [`opt_in::watch`]): every Secret but Helm's release Secrets (large, and read on their
/// own), each reduced at once to key names and digests ([`config::secret`]). A change
/// marks the Deployments that refer to it; a refusal, the cluster status.
fn secrets(
    client: &Client,
    config: watcher::Config,
    enabled: impl Fn() -> bool + Clone + Send + Sync + 'static,
    access: &Arc<Access>,
    pending: &Arc<Pending>,
) -> (Projections<ConfigView>, BoxFuture<'static, ()>) {
    let on_refusal = {
        let (access, pending) = (access.clone(), pending.clone());
        move |refused: bool| {
            if access.watch_refused(refused) {
                pending.mark(Mark::cluster());
            }
        }
    };
    let events = opt_in::watch(
        Api::<Secret>::all(client.clone()),
        config.fields("type!=helm.sh/release.v1"),
        "Secrets",
        enabled,
        on_refusal,
    )
    .map(|e| e.map(all_valid))
    .boxed();
    let pending = pending.clone();
    projections_with(
        events,
        config::secret,
        Box::new(move |c| pending.mark(config_changed(config::SECRET, c))),
    )
}

/// A ConfigMap whose content changed: the Deployments that refer to it are measured again
/// (the rebuild finds them). Its first listing marks nothing: a full rebuild follows it.
fn config_map_changed(c: Change<'_, ConfigView>) -> Mark {
    config_changed(config::CONFIG_MAP, c)
}

/// A ConfigMap or Secret (`kind`) whose content changed.
fn config_changed(kind: &str, c: Change<'_, ConfigView>) -> Mark {
    match c {
        Change::Object { key, .. } => Mark {
            config: Some((key.0.clone(), format!("{kind}/{}", key.1))),
            ..Mark::none()
        },
        Change::Synced => Mark::none(),
    }
}

/// A WorkloadRevision Moonin did not write is reported when its namespace is rebuilt.
fn revision_changed(c: Change<'_, RevView>) -> Mark {
    match c {
        Change::Object {
            key,
            after: Some(r),
            ..
        } if r.foreign_unreported() => Mark::namespace(&key.0),
        _ => Mark::none(),
    }
}

/// An inventory someone else wrote (or changed) marks its namespace, whose rebuild takes it
/// over or deletes it; the echoes of discovery's own writes mark nothing.
fn inventory_changed(i: &NamespaceInventory) -> Mark {
    let ours = i
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(field_manager::DISCOVERY));
    match i.namespace() {
        Some(ns) if !ours => Mark::namespace(&ns),
        _ => Mark::none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(ns: &str, name: &str) -> (String, String) {
        (ns.to_string(), name.to_string())
    }

    fn changed<'a, V>(key: &'a (String, String), after: Option<&'a V>) -> Change<'a, V> {
        Change::Object {
            key,
            before: None,
            after,
        }
    }

    #[test]
    fn what_each_change_marks() {
        let pod = key("shop", "web-1");
        assert_eq!(
            by_namespace::<PodView>(changed(&pod, None)),
            Mark::namespace("shop")
        );
        assert_eq!(by_namespace::<PodView>(Change::Synced), Mark::cluster());
        let node = key("", "node-1");
        assert_eq!(
            cluster_wide::<NodeView>(changed(&node, None)),
            Mark::cluster()
        );
        // A Namespace's key is `("", name)`.
        let ns = key("", "shop");
        assert_eq!(
            namespace_changed(changed(&ns, Some(&("shop".to_string(), true)))),
            Mark::namespace_and_cluster("shop")
        );
        assert_eq!(namespace_changed(Change::Synced), Mark::cluster());
    }

    #[test]
    fn a_changed_deployment_is_queued_for_its_record_and_a_deleted_one_is_not() {
        let web = key("shop", "web");
        let view = Arc::new(DeploymentView {
            namespace: "shop".into(),
            name: "web".into(),
            ..Default::default()
        });
        assert_eq!(
            deployment_changed(changed(&web, Some(&view))),
            Mark {
                deployment: Some(view.clone()),
                ..Mark::namespace("shop")
            }
        );
        assert_eq!(
            deployment_changed(changed(&web, None)),
            Mark::namespace("shop")
        );
        assert_eq!(deployment_changed(Change::Synced), Mark::cluster());
    }

    #[test]
    fn a_deleted_deployment_is_forgotten_by_the_baselines() {
        let (pending, baselines) = (Arc::new(Pending::default()), Arc::new(Baselines::default()));
        let view = Arc::new(DeploymentView {
            namespace: "shop".into(),
            name: "web".into(),
            ..Default::default()
        });
        baselines.set(&view);
        let on_change = deployment_marks(&pending, &baselines);
        let web = key("shop", "web");
        on_change(changed(&web, Some(&view)));
        assert!(baselines.get(&web).is_some(), "a change keeps the baseline");
        on_change(changed(&web, None));
        assert!(baselines.get(&web).is_none());
        assert_eq!(pending.take().namespaces.len(), 1);
    }

    #[test]
    fn only_an_unreported_foreign_revision_marks_its_namespace() {
        let rev = |foreign: Option<&str>, reason: Option<&str>| RevView {
            name: "web-r1".into(),
            workload: "web".into(),
            revision: 1,
            observed_at: jiff::Timestamp::UNIX_EPOCH,
            reason: reason.map(String::from),
            foreign: foreign.map(String::from),
            rollout: true,
            images: Vec::new(),
            outcome: None,
            summary: String::new(),
            changed_by: None,
        };
        let k = key("shop", "web-r1");
        let ours = rev(None, None);
        let foreign = rev(Some("kubectl"), None);
        let reported = rev(
            Some("kubectl"),
            Some(crate::discovery::names::condition_reasons::NOT_RECORDED),
        );
        assert_eq!(revision_changed(changed(&k, Some(&ours))), Mark::none());
        assert_eq!(
            revision_changed(changed(&k, Some(&foreign))),
            Mark::namespace("shop")
        );
        assert_eq!(revision_changed(changed(&k, Some(&reported))), Mark::none());
        assert_eq!(revision_changed(changed::<RevView>(&k, None)), Mark::none());
        assert_eq!(revision_changed(Change::Synced), Mark::none());
    }

    #[test]
    fn only_an_inventory_someone_else_wrote_marks_its_namespace() {
        let inventory = |manager: &str| -> NamespaceInventory {
            serde_json::from_value(json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "NamespaceInventory",
                "metadata": {
                    "name": "inventory",
                    "namespace": "shop",
                    "managedFields": [{"manager": manager, "operation": "Apply"}],
                },
                "spec": {"part": 0, "parts": 1},
            }))
            .unwrap()
        };
        assert_eq!(
            inventory_changed(&inventory(field_manager::DISCOVERY)),
            Mark::none()
        );
        assert_eq!(
            inventory_changed(&inventory("kubectl")),
            Mark::namespace("shop")
        );
    }

    #[test]
    fn the_oldest_discovery_not_being_deleted_is_in_charge() {
        let cd = |name: &str, created: &str, deleting: bool| -> Arc<ClusterDiscovery> {
            let mut meta = json!({"name": name, "creationTimestamp": created});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-05T00:00:00Z");
            }
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "moonin.io/v1alpha1",
                    "kind": "ClusterDiscovery",
                    "metadata": meta,
                    "spec": {},
                }))
                .unwrap(),
            )
        };
        let name = |c: Option<Arc<ClusterDiscovery>>| c.map(|c| c.name_any());
        assert_eq!(name(in_charge(&[])), None);
        assert_eq!(
            name(in_charge(&[
                cd("newer", "2026-01-02T00:00:00Z", false),
                cd("oldest", "2026-01-01T00:00:00Z", true),
                cd("b", "2026-01-01T12:00:00Z", false),
                cd("a", "2026-01-01T12:00:00Z", false),
            ])),
            Some("a".to_string()),
            "the oldest is being deleted; of two equally old, the first by name"
        );
    }
}
