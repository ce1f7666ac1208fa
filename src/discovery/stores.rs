//! What discovery watches: one projection index per kind (the two kinds it writes itself are
//! kept whole, trimmed), and what a change of each kind marks for the next rebuild.
//!
//! Nothing is relisted periodically: the watches resume from their last resourceVersion.

use std::sync::{Arc, OnceLock};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{Namespace, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use super::{
    baselines::Baselines,
    config::{self, ConfigView},
    dirty::{Mark, Pending},
    helm_secrets::{self, HelmSecretView, HelmState},
    index::{Change, Projections},
    network::{self, IngressView, NetworkPolicyView, ServiceView},
    opt_in::{self, Access},
    rbac::{self, BindingView, RoleView},
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
    /// Services.
    pub services: Projections<ServiceView>,
    /// Ingresses.
    pub ingresses: Projections<IngressView>,
    /// NetworkPolicies.
    pub network_policies: Projections<NetworkPolicyView>,
    /// Roles.
    pub roles: Projections<RoleView>,
    /// ClusterRoles.
    pub cluster_roles: Projections<RoleView>,
    /// RoleBindings.
    pub role_bindings: Projections<BindingView>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Projections<BindingView>,
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
            && self.services.synced()
            && self.ingresses.synced()
            && self.network_policies.synced()
            && self.roles.synced()
            && self.cluster_roles.synced()
            && self.role_bindings.synced()
            && self.cluster_role_bindings.synced()
    }

    /// The ClusterRoleBindings that reach the ServiceAccounts of namespace `ns` (see
    /// [`rbac`]), with their names.
    pub fn cluster_role_bindings_of(&self, ns: &str) -> Vec<(String, BindingView)> {
        self.cluster_role_bindings
            .read(|i| i.filtered(|b| b.binds_service_account_of(ns)))
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
    let inventories = w.keep(inventories(client.clone(), w.config.clone(), pending));
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
    let role_bindings = w.project(rbac::role_binding, by_namespace);
    let namespaces = w.project(namespace_view, namespace_changed);
    let cluster_role_bindings = w.keep(projections(
        client.clone(),
        w.config.clone(),
        rbac::cluster_role_binding,
        cluster_role_binding_marks(pending, &namespaces),
    ));
    let cluster_roles = {
        let on_change =
            cluster_role_marks(pending, &role_bindings, &cluster_role_bindings, &namespaces);
        w.keep(projections(
            client.clone(),
            w.config.clone(),
            rbac::cluster_role,
            on_change,
        ))
    };
    let stores = Stores {
        nodes: w.project(view::node, cluster_wide),
        namespaces,
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
        services: w.project(network::service, by_namespace),
        ingresses: w.project(network::ingress, by_namespace),
        network_policies: w.project(network::network_policy, by_namespace),
        roles: w.project(rbac::role, wildcard_changed),
        cluster_roles,
        role_bindings,
        cluster_role_bindings,
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

/// The inventories, each change marked as [`inventory_changed`] says: whether the store
/// still holds the object tells a deletion from a change.
fn inventories(
    client: Client,
    config: watcher::Config,
    pending: &Arc<Pending>,
) -> (Store<NamespaceInventory>, BoxFuture<'static, ()>) {
    let kept: Arc<OnceLock<Store<NamespaceInventory>>> = Arc::default();
    let trigger: cache::Trigger<NamespaceInventory> = {
        let (pending, kept) = (pending.clone(), kept.clone());
        Box::new(move |i| {
            let stored = kept
                .get()
                .is_some_and(|s| s.get(&ObjectRef::from_obj(i)).is_some());
            pending.mark(inventory_changed(i, stored));
        })
    };
    let (store, drive) = cache::cache(
        client,
        config,
        |i: &mut NamespaceInventory| cache::strip_last_applied(&mut i.metadata),
        vec![trigger],
    );
    let _ = kept.set(store.clone());
    (store, drive)
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
        Box::new(move |c| pending.mark(secret_changed(c))),
    )
}

/// A ConfigMap whose content changed: the Deployments that refer to it are measured again
/// (the rebuild finds them). Its first listing marks nothing: a full rebuild follows it.
fn config_map_changed(c: Change<'_, ConfigView>) -> Mark {
    config_changed(config::CONFIG_MAP, c)
}

/// A Secret whose content changed: as a ConfigMap. Its first listing comes after the other
/// caches' (the watch starts once Secret changes are tracked and may be read), so it asks
/// for a rebuild of its own, which measures every Deployment that refers to a Secret.
fn secret_changed(c: Change<'_, ConfigView>) -> Mark {
    match c {
        Change::Synced => Mark::cluster(),
        c => config_changed(config::SECRET, c),
    }
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

/// Whether a role's wildcard flag differs before and after a change (a role that is absent
/// has none): only that changes what the bindings' entries say.
fn wildcard_flipped(c: &Change<'_, RoleView>) -> bool {
    match c {
        Change::Object { before, after, .. } => {
            before.is_some_and(|r| r.wildcard) != after.is_some_and(|r| r.wildcard)
        }
        Change::Synced => false,
    }
}

/// A Role whose wildcard flag changed: its namespace.
fn wildcard_changed(c: Change<'_, RoleView>) -> Mark {
    match c {
        Change::Object { key, .. } if wildcard_flipped(&c) => Mark::namespace(&key.0),
        _ => Mark::none(),
    }
}

/// The namespaces whose inventories list the ClusterRoleBinding `b`: those whose
/// ServiceAccounts it names, or every namespace of `namespaces` when it names a group every
/// ServiceAccount is in.
fn reached_namespaces(b: &BindingView, namespaces: &Projections<(String, bool)>) -> Vec<String> {
    if b.reaches_every_namespace() {
        namespaces.all().into_iter().map(|(name, _)| name).collect()
    } else {
        b.service_account_namespaces().map(str::to_string).collect()
    }
}

/// A ClusterRoleBinding that changed: the namespaces that list it, before and after.
fn cluster_role_binding_namespaces(
    c: &Change<'_, BindingView>,
    namespaces: &Projections<(String, bool)>,
) -> Vec<String> {
    let Change::Object { before, after, .. } = c else {
        return Vec::new();
    };
    let mut out: Vec<String> = before
        .iter()
        .chain(after.iter())
        .flat_map(|b| reached_namespaces(b, namespaces))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Marks each namespace that lists a changed ClusterRoleBinding.
fn cluster_role_binding_marks(
    pending: &Arc<Pending>,
    namespaces: &Projections<(String, bool)>,
) -> OnChange<BindingView> {
    let (pending, namespaces) = (pending.clone(), namespaces.clone());
    Box::new(move |c| {
        for ns in cluster_role_binding_namespaces(&c, &namespaces) {
            pending.mark(Mark::namespace(&ns));
        }
    })
}

/// A ClusterRole whose wildcard flag changed marks the namespaces whose inventory shows a
/// binding of it: those of the RoleBindings that grant it, and those that list the
/// ClusterRoleBindings that grant it.
fn cluster_role_marks(
    pending: &Arc<Pending>,
    role_bindings: &Projections<BindingView>,
    cluster_role_bindings: &Projections<BindingView>,
    namespaces: &Projections<(String, bool)>,
) -> OnChange<RoleView> {
    let (pending, rbs, crbs, all) = (
        pending.clone(),
        role_bindings.clone(),
        cluster_role_bindings.clone(),
        namespaces.clone(),
    );
    Box::new(move |c| {
        if !wildcard_flipped(&c) {
            return;
        }
        let Change::Object { key, .. } = c else {
            return;
        };
        let grants = |b: &BindingView| &*b.role_kind == "ClusterRole" && *b.role == *key.1;
        let mut namespaces = rbs.read(|i| i.namespaces_where(grants));
        for (_, b) in crbs.read(|i| i.filtered(grants)) {
            namespaces.extend(reached_namespaces(&b, &all));
        }
        for ns in namespaces {
            pending.mark(Mark::namespace(&ns));
        }
    })
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
/// over or deletes it; so does one deleted (no longer `stored`), which the rebuild writes
/// again. The echoes of discovery's own writes mark nothing.
fn inventory_changed(i: &NamespaceInventory, stored: bool) -> Mark {
    let ours = i
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(field_manager::DISCOVERY));
    match i.namespace() {
        Some(ns) if !ours || !stored => Mark::namespace(&ns),
        _ => Mark::none(),
    }
}

#[cfg(test)]
#[path = "stores_tests.rs"]
mod tests;
