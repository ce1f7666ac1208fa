//! The discovery controller: projection stores for the watched kinds, one loop that
//! rebuilds what changed (the inventory of each namespace marked dirty, the cluster status,
//! the revision records of changed Deployments) and writes only what differs.
//!
//! Only the leader writes; followers keep their stores warm. Nothing is relisted
//! periodically: the watches resume from their last resourceVersion.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use jiff::Timestamp;
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    coordination::v1::Lease,
    core::v1::{Namespace, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, reflector::Store, watcher},
};
use serde_json::json;

use super::{
    cluster, helm,
    index::{Change, Projections},
    inventory, revision, signals,
    view::{
        self, CronJobView, DeploymentView, HpaView, JobView, NodeView, PodView, ScaledObjectView,
    },
    watch::{OnChange, all_valid, projections, projections_with},
};
use crate::api::keda::ScaledObject;
use crate::api::{
    conditions::{self, Desired, types},
    discovery::{
        ClusterDiscovery, ClusterDiscoveryStatus, CronJobEntry, HelmRelease, HelmRevision,
        NamespaceInventory, NamespaceInventoryStatus, Sourced, Totals, WorkloadRevision,
    },
    field_manager,
};
use crate::runtime::{
    access,
    context::{Context, Readiness, Registered},
    metrics::{ControllerLabels, ErrorLabels, Metrics},
};
use crate::runtime::{cache, decode::Decoded, errors::brief, events::Publisher, invalid};

/// The controller's name on the command line and in metrics.
pub const CONTROLLER: &str = "discovery";

/// How long changes are gathered before a rebuild.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// Deployments whose revisions are recorded at once (each one's changes in order).
const REVISION_WRITERS: usize = 16;
/// How often the leader renews the heartbeat Lease.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The heartbeat Lease, in the manager's namespace.
pub const HEARTBEAT_LEASE: &str = "moonin-discovery-heartbeat";

/// Condition types of `ClusterDiscovery`.
pub mod condition_types {
    /// The API server answers.
    pub const API_REACHABLE: &str = "ApiReachable";
    /// Every watched kind has listed and every namespace's inventory is written.
    pub const INVENTORY_COMPLETE: &str = "InventoryComplete";
    /// Helm release Secrets can be read (or Helm discovery is off).
    pub const HELM_ACCESS: &str = "HelmAccess";
    /// Some namespace's inventory was split into parts.
    pub const TRUNCATED: &str = "Truncated";
}

/// Condition reasons of discovery's kinds (and the reason of its reconcile errors).
pub mod condition_reasons {
    /// `Ready`: every namespace's inventory is written (on an inventory: it is current).
    pub const INVENTORIED: &str = "Inventoried";
    /// `Ready`: the first pass is still writing inventories.
    pub const INVENTORYING: &str = "Inventorying";
    /// `InventoryComplete` true; `Truncated` false (everything fits one object).
    pub const COMPLETE: &str = "Complete";
    /// `InventoryComplete`: not yet.
    pub const IN_PROGRESS: &str = "InProgress";
    /// `Truncated`: an inventory was split into parts.
    pub const SPLIT: &str = "Split";
    /// `HelmAccess`: `spec.helm.enabled` is false.
    pub const DISABLED: &str = "Disabled";
    /// `HelmAccess`: listing Helm release Secrets is refused.
    pub const FORBIDDEN: &str = "Forbidden";
    /// `HelmAccess`: release Secrets are read.
    pub const SECRETS_READABLE: &str = "SecretsReadable";
    /// `ApiReachable`.
    pub const REACHABLE: &str = "Reachable";
    /// `ApiReachable`: the heartbeat or `GET /version` failed.
    pub const UNREACHABLE: &str = "Unreachable";
    /// `Ready` of a WorkloadRevision.
    pub const RECORDED: &str = "Recorded";
    /// `Ready=False` of a WorkloadRevision that Moonin's discovery did not write: it is not
    /// part of the change log.
    pub const NOT_RECORDED: &str = "NotRecorded";
    /// `Ready=False`, `Stalled=True` of a ClusterDiscovery that is not the oldest: another
    /// one is in charge of the cluster.
    pub const NOT_IN_CHARGE: &str = "NotInCharge";
    /// `moonin_reconcile_errors_total`: a rebuild failed on an API error.
    pub const API_ERROR: &str = "ApiError";
}

/// Registers the controller.
pub fn registered() -> Registered {
    Registered {
        name: CONTROLLER,
        run: |ctx, readiness| -> BoxFuture<'static, anyhow::Result<()>> {
            Box::pin(run(ctx, readiness))
        },
    }
}

/// A ReplicaSet, reduced to its owning Deployment.
#[derive(Debug, Clone, PartialEq)]
struct RsView {
    deployment: Option<String>,
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

/// A WorkloadRevision, reduced to what pruning and restarts need.
#[derive(Debug, Clone, PartialEq)]
struct RevView {
    name: String,
    workload: String,
    revision: i64,
    observed_at: Timestamp,
    /// Its `Ready` condition's reason, if any (a process that died between the create and
    /// the status patch leaves a record without it).
    reason: Option<String>,
    /// Who created it, when not Moonin's discovery: such a record is not part of the
    /// change log (it is reported, and never counted, marked or pruned).
    foreign: Option<String>,
}

impl RevView {
    /// Recorded by this controller and marked so.
    fn ready(&self) -> bool {
        self.reason.as_deref() == Some(condition_reasons::RECORDED)
    }
}

fn rev_view(r: &WorkloadRevision) -> RevView {
    let managers: Vec<&str> = r
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    RevView {
        name: r.name_any(),
        workload: r.spec.workload.name.clone(),
        revision: r.spec.revision,
        observed_at: r.spec.observed_at.0,
        reason: r.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == types::READY)
                .map(|c| c.reason.clone())
        }),
        foreign: (!managers.contains(&field_manager::DISCOVERY))
            .then(|| managers.first().unwrap_or(&"unknown").to_string()),
    }
}

/// A Helm release Secret's metadata: release name and revision from its labels.
#[derive(Debug, Clone, PartialEq)]
struct HelmSecretView {
    name: String,
    release: String,
    version: i64,
    resource_version: String,
}

fn helm_secret_view(s: &PartialObjectMeta<Secret>) -> HelmSecretView {
    let labels = s.labels();
    HelmSecretView {
        name: s.name_any(),
        release: labels.get("name").cloned().unwrap_or_default(),
        version: labels
            .get("version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        resource_version: s.resource_version().unwrap_or_default(),
    }
}

/// What changed since the last rebuild.
#[derive(Default)]
struct Dirty {
    namespaces: BTreeSet<String>,
    cluster: bool,
    /// Deployments that changed (their revision baseline is kept in `Shared`).
    deployments: Vec<Arc<DeploymentView>>,
}

struct Stores {
    nodes: Projections<NodeView>,
    /// Namespace name → whether it is being deleted.
    namespaces: Projections<(String, bool)>,
    /// Shared with `Shared::baselines`: an unchanged Deployment is held once.
    deployments: Projections<Arc<DeploymentView>>,
    replica_sets: Projections<RsView>,
    pods: Projections<PodView>,
    jobs: Projections<JobView>,
    cron_jobs: Projections<CronJobView>,
    hpas: Projections<HpaView>,
    /// None when KEDA's CRD is not installed.
    scaled_objects: Option<Projections<ScaledObjectView>>,
    revisions: Projections<RevView>,
    helm_secrets: Projections<HelmSecretView>,
    inventories: Store<NamespaceInventory>,
    discoveries: Store<ClusterDiscovery>,
}

impl Stores {
    fn synced(&self) -> bool {
        self.nodes.synced()
            && self.namespaces.synced()
            && self.deployments.synced()
            && self.replica_sets.synced()
            && self.pods.synced()
            && self.jobs.synced()
            && self.cron_jobs.synced()
            && self.hpas.synced()
            && self.scaled_objects.as_ref().is_none_or(|s| s.synced())
            && self.revisions.synced()
    }
}

/// Helm state: decoded releases by Secret (name, resourceVersion), and whether reading
/// Secrets is allowed.
#[derive(Default)]
struct HelmState {
    decoded: HashMap<(String, String), (String, HelmRelease, HelmRevision)>,
    /// The last error reading a Secret, if any (a reason and a message).
    denied: Option<String>,
}

struct Shared {
    client: Client,
    ctx: Context,
    stores: Stores,
    dirty: Mutex<Dirty>,
    wake: tokio::sync::Notify,
    /// A digest of the inventory status last written per (namespace, part), to skip
    /// unchanged writes while the store has not caught up (a copy would double the memory
    /// the inventories take).
    written: Mutex<HashMap<(String, i32), u64>>,
    /// Signals last reported per object (`(namespace, "Kind/name")`), for Events on
    /// transitions.
    reported: Mutex<HashMap<(String, String), Vec<String>>>,
    helm: Mutex<HelmState>,
    events: Publisher,
    /// Per Deployment, the view its last revision record was derived from: a change is
    /// measured from there, not from the previous event (an edit is recorded once its
    /// ReplicaSet revision shows).
    baselines: Mutex<HashMap<(String, String), Arc<DeploymentView>>>,
    /// The last heartbeat's outcome (`ApiReachable`); None until the first one.
    reachable: Mutex<Option<Result<(), String>>>,
}

fn mark(shared: &Shared, f: impl FnOnce(&mut Dirty)) {
    f(&mut shared.dirty.lock().unwrap_or_else(|e| e.into_inner()));
    shared.wake.notify_one();
}

fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(500)
}

/// Runs the discovery controller until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let shutdown = ctx.shutdown.clone();

    // The stores call back into `Shared`, which holds them: the callbacks find it here
    // once it exists (changes before that are covered by the first full rebuild).
    let late: Arc<Mutex<Option<Arc<Shared>>>> = Arc::new(Mutex::new(None));
    fn via<V: 'static>(
        late: &Arc<Mutex<Option<Arc<Shared>>>>,
        f: fn(&Shared, Change<'_, V>),
    ) -> OnChange<V> {
        let late = late.clone();
        Box::new(move |c| {
            let s = late.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(s) = s {
                f(&s, c);
            }
        })
    }
    fn by_namespace<V>(s: &Shared, c: Change<'_, V>) {
        match c {
            Change::Object { key, .. } => mark(s, |d| {
                d.namespaces.insert(key.0.clone());
            }),
            Change::Synced => mark(s, |d| d.cluster = true),
        }
    }
    fn cluster_wide<V>(s: &Shared, _: Change<'_, V>) {
        mark(s, |d| d.cluster = true);
    }
    fn namespaces_changed(s: &Shared, c: Change<'_, (String, bool)>) {
        match c {
            Change::Object { key, .. } => mark(s, |d| {
                d.namespaces.insert(key.1.clone());
                d.cluster = true;
            }),
            Change::Synced => mark(s, |d| d.cluster = true),
        }
    }
    fn deployment_changed(s: &Shared, c: Change<'_, Arc<DeploymentView>>) {
        match c {
            Change::Object { key, after, .. } => {
                if after.is_none() {
                    s.baselines
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(key);
                }
                mark(s, |d| {
                    d.namespaces.insert(key.0.clone());
                    if let Some(a) = after {
                        d.deployments.push(a.clone());
                    }
                })
            }
            Change::Synced => mark(s, |d| d.cluster = true),
        }
    }

    // A WorkloadRevision Moonin did not write is reported when its namespace is rebuilt.
    fn revision_changed(s: &Shared, c: Change<'_, RevView>) {
        if let Change::Object {
            key,
            after: Some(r),
            ..
        } = c
            && r.foreign.is_some()
            && r.reason.as_deref() != Some(condition_reasons::NOT_RECORDED)
        {
            mark(s, |d| {
                d.namespaces.insert(key.0.clone());
            });
        }
    }

    let (nodes, nodes_drive) = projections(
        client.clone(),
        watch_config(),
        view::node,
        via(&late, cluster_wide::<NodeView>),
    );
    let (namespaces, ns_drive) = projections(
        client.clone(),
        watch_config(),
        |n: &Namespace| (n.name_any(), n.metadata.deletion_timestamp.is_some()),
        via(&late, namespaces_changed),
    );
    let (deployments, dep_drive) = projections(
        client.clone(),
        watch_config(),
        |d: &Deployment| Arc::new(view::deployment(d)),
        via(&late, deployment_changed),
    );
    let (replica_sets, rs_drive) = projections(
        client.clone(),
        watch_config(),
        rs_view,
        via(&late, by_namespace::<RsView>),
    );
    let (pods, pod_drive) = projections(
        client.clone(),
        watch_config(),
        view::pod,
        via(&late, by_namespace::<PodView>),
    );
    let (jobs, job_drive) = projections(
        client.clone(),
        watch_config(),
        view::job,
        via(&late, by_namespace::<JobView>),
    );
    let (cron_jobs, cj_drive) = projections(
        client.clone(),
        watch_config(),
        view::cron_job,
        via(&late, by_namespace::<CronJobView>),
    );
    let (hpas, hpa_drive) = projections(
        client.clone(),
        watch_config(),
        view::hpa,
        via(&late, by_namespace::<HpaView>),
    );
    let mut keda_drive = None;
    let scaled_objects = if cache::installed::<ScaledObject>(&client).await {
        let (store, drive) = projections(
            client.clone(),
            watch_config(),
            view::scaled_object,
            via(&late, by_namespace::<ScaledObjectView>),
        );
        keda_drive = Some(drive);
        Some(store)
    } else {
        tracing::info!(
            "KEDA's ScaledObject CRD is not installed: ScaledObjects are not inventoried (restart Moonin after installing KEDA)"
        );
        None
    };
    let (revisions, rev_drive) = projections(
        client.clone(),
        watch_config(),
        rev_view,
        via(&late, revision_changed),
    );
    let (helm_secrets, helm_writer) = projections_meta(client.clone(), &late);
    // An inventory someone else wrote is taken over or deleted by its namespace's rebuild.
    let (inventories, inv_drive) = cache::cache::<NamespaceInventory>(
        client.clone(),
        watch_config(),
        |i| cache::strip_last_applied(&mut i.metadata),
        vec![{
            let late = late.clone();
            Box::new(move |i: &NamespaceInventory| {
                let ours = i
                    .metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .any(|m| m.manager.as_deref() == Some(field_manager::DISCOVERY));
                if let (false, Some(ns), Some(s)) = (
                    ours,
                    i.namespace(),
                    late.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                ) {
                    mark(&s, |d| {
                        d.namespaces.insert(ns);
                    });
                }
            })
        }],
    );
    let (discoveries, disc_drive) = cache::cache::<ClusterDiscovery>(
        client.clone(),
        watch_config(),
        |d| cache::strip_last_applied(&mut d.metadata),
        vec![{
            let late = late.clone();
            Box::new(move |_: &ClusterDiscovery| {
                if let Some(s) = late.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                    mark(&s, |d| d.cluster = true);
                }
            })
        }],
    );

    let shared = Arc::new(Shared {
        client: client.clone(),
        ctx: ctx.clone(),
        stores: Stores {
            nodes,
            namespaces,
            deployments,
            replica_sets,
            pods,
            jobs,
            cron_jobs,
            hpas,
            scaled_objects,
            revisions,
            helm_secrets,
            inventories,
            discoveries,
        },
        dirty: Mutex::new(Dirty::default()),
        wake: tokio::sync::Notify::new(),
        written: Mutex::new(HashMap::new()),
        reported: Mutex::new(HashMap::new()),
        helm: Mutex::new(HelmState::default()),
        baselines: Mutex::new(HashMap::new()),
        reachable: Mutex::new(None),
        events: Publisher::new(client.clone(), "moonin-discovery"),
    });
    *late.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared.clone());

    // Discovery's own kinds that do not decode get `InvalidSpec`.
    let reporters: [BoxFuture<'static, ()>; 3] = [
        Box::pin(invalid::report::<ClusterDiscovery>(
            client.clone(),
            ctx.leadership.clone(),
            shared.events.clone(),
            shutdown.clone(),
        )),
        Box::pin(invalid::report::<NamespaceInventory>(
            client.clone(),
            ctx.leadership.clone(),
            shared.events.clone(),
            shutdown.clone(),
        )),
        Box::pin(invalid::report::<WorkloadRevision>(
            client.clone(),
            ctx.leadership.clone(),
            shared.events.clone(),
            shutdown.clone(),
        )),
    ];
    let drives = futures::future::join_all(keda_drive.into_iter().chain(reporters).chain([
        nodes_drive,
        ns_drive,
        dep_drive,
        rs_drive,
        pod_drive,
        job_drive,
        cj_drive,
        hpa_drive,
        rev_drive,
        helm_writer,
        inv_drive,
        disc_drive,
    ]));
    let ready = {
        let shared = shared.clone();
        async move {
            while !shared.stores.synced() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = shared.stores.inventories.wait_until_ready().await;
            let _ = shared.stores.discoveries.wait_until_ready().await;
            readiness.report_synced();
            tracing::info!("discovery caches synced");
            mark(&shared, |d| d.cluster = true);
            futures::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = drives => {}
        _ = ready => {}
        _ = rebuild_loop(shared.clone()) => {}
        _ = heartbeat_loop(shared.clone()) => {}
        _ = shutdown.cancelled() => {}
    }
    Ok(())
}

/// The metadata-only watch of Helm release Secrets (`owner=helm`): their data never
/// arrives here. It runs only while the ClusterDiscovery in charge has `spec.helm.enabled`
/// (Secrets are not even listed otherwise). Reading Secrets is opt-in (`config/rbac-helm`):
/// a refused watch is reported as `HelmAccess=False`, not as the manager's missing
/// permission, and is retried after [`HELM_DENIED_RETRY`] rather than at the watcher's pace.
fn projections_meta(
    client: Client,
    late: &Arc<Mutex<Option<Arc<Shared>>>>,
) -> (Projections<HelmSecretView>, BoxFuture<'static, ()>) {
    type Events = futures::stream::BoxStream<
        'static,
        Result<watcher::Event<PartialObjectMeta<Secret>>, watcher::Error>,
    >;
    let shared = {
        let late = late.clone();
        move || late.lock().unwrap_or_else(|e| e.into_inner()).clone()
    };
    let enabled = {
        let shared = shared.clone();
        move || {
            shared()
                .and_then(|s| active(&s.stores))
                .is_some_and(|cd| cd.spec.helm.enabled)
        }
    };
    // One round per period of Helm being enabled: a fresh watch (its first list replaces the
    // store), ended when Helm is disabled or the list is refused.
    // The state is the previous round's "refused" flag: `flat_map` drains a round before it
    // asks for the next, so the flag is final by then.
    let start = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = futures::stream::unfold(start, move |refused_before| {
        let (client, shared, enabled) = (client.clone(), shared.clone(), enabled.clone());
        async move {
            if refused_before.load(std::sync::atomic::Ordering::Acquire) {
                tokio::time::sleep(HELM_DENIED_RETRY).await;
            }
            while !enabled() {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let round: Events = {
                let refused = refused.clone();
                let still_enabled = enabled.clone();
                watcher(
                    Api::<PartialObjectMeta<Secret>>::all(client),
                    watcher::Config::default()
                        .labels("owner=helm")
                        .page_size(500),
                )
                .default_backoff()
                .inspect(move |event| {
                    let denied = match event {
                        Err(e) if access::forbidden(e).is_some() => Some(true),
                        Err(e) => {
                            tracing::warn!(error = %crate::runtime::errors::brief_watch(e), "Helm release Secrets: watch error; retrying");
                            None
                        }
                        // `Init` comes before the list: only data says the list was allowed.
                        Ok(watcher::Event::Init) => None,
                        Ok(_) => Some(false),
                    };
                    if let (Some(denied), Some(s)) = (denied, shared()) {
                        set_helm_denied(&s, denied);
                    }
                })
                .take_while(move |event| {
                    let stop = matches!(event, Err(e) if access::forbidden(e).is_some());
                    if stop {
                        refused.store(true, std::sync::atomic::Ordering::Release);
                    }
                    futures::future::ready(!stop && still_enabled())
                })
                .boxed()
            };
            Some((round, refused))
        }
    });
    let events = rounds
        .flat_map(|round| round)
        .map(|e| e.map(all_valid))
        .boxed();
    let late = late.clone();
    projections_with(
        events,
        helm_secret_view,
        Box::new(move |c| {
            if let Some(s) = late.lock().unwrap_or_else(|e| e.into_inner()).clone()
                && let Change::Object { key, .. } = c
            {
                mark(&s, |d| {
                    d.namespaces.insert(key.0.clone());
                });
            }
        }),
    )
}

/// How long a refused Helm Secret watch waits before it asks again.
const HELM_DENIED_RETRY: Duration = Duration::from_secs(60);

/// Records whether listing Helm release Secrets is refused; a change rewrites the cluster
/// status (`HelmAccess`).
fn set_helm_denied(shared: &Shared, denied: bool) {
    const DENIED: &str = "listing Helm release Secrets is forbidden";
    let changed = {
        let mut helm = shared.helm.lock().unwrap_or_else(|e| e.into_inner());
        let before = helm.denied.clone();
        if denied {
            helm.denied = Some(DENIED.to_string());
        } else if helm.denied.as_deref() == Some(DENIED) {
            helm.denied = None;
        }
        before != helm.denied
    };
    if changed {
        mark(shared, |d| d.cluster = true);
    }
}

/// The ClusterDiscovery in charge: the oldest one not being deleted.
fn active(stores: &Stores) -> Option<Arc<ClusterDiscovery>> {
    let mut all: Vec<Arc<ClusterDiscovery>> = stores
        .discoveries
        .state()
        .into_iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .collect();
    all.sort_by_key(|d| (d.creation_timestamp().map(|t| t.0), d.name_any()));
    all.into_iter().next()
}

/// Loop state of the rebuilds.
#[derive(Default)]
struct Progress {
    /// The ClusterDiscovery the last rebuild served, and its spec's generation: a new one,
    /// or a spec change (namespaces excluded or included, Helm switched), rebuilds everything.
    discovery: Option<(Option<String>, Option<i64>)>,
    /// Namespaces whose inventory was written at least once since this process led.
    written: BTreeSet<String>,
    /// Namespaces whose inventory write failed, with how many times in a row.
    refused: BTreeMap<String, u32>,
    /// Namespaces split into parts.
    split: BTreeSet<String>,
    /// Signals per namespace, for the totals.
    signals: BTreeMap<String, i32>,
    /// Images per namespace, for the totals.
    images: BTreeMap<String, BTreeSet<String>>,
    /// The API server's version and whether it answered last time.
    version: Option<String>,
    reachable: Option<Result<(), String>>,
}

async fn rebuild_loop(shared: Arc<Shared>) {
    let mut progress = Progress::default();
    let mut leading = false;
    // Consecutive failed rebuilds (see `backoff`).
    let mut failures: u32 = 0;
    loop {
        shared.wake.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
        if !shared.stores.synced() {
            continue;
        }
        let leader = shared.ctx.leadership.is_leader();
        if !leader {
            // Followers keep their stores; the next leader starts from a full rebuild.
            leading = false;
            *shared.dirty.lock().unwrap_or_else(|e| e.into_inner()) = Dirty::default();
            continue;
        }
        let Some(cd) = active(&shared.stores) else {
            *shared.dirty.lock().unwrap_or_else(|e| e.into_inner()) = Dirty::default();
            progress.discovery = None;
            continue;
        };
        let mut dirty =
            std::mem::take(&mut *shared.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        let retry = (dirty.namespaces.clone(), dirty.deployments.clone());
        let served = Some((cd.uid(), cd.metadata.generation));
        let full = !leading || progress.discovery != served;
        if full {
            leading = true;
            progress.discovery = served;
            progress.written.clear();
            dirty.namespaces = shared
                .stores
                .namespaces
                .all()
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            dirty.cluster = true;
        }
        let metrics = &shared.ctx.metrics;
        let labels = ControllerLabels {
            controller: CONTROLLER.to_string(),
        };
        metrics.reconciliations.get_or_create(&labels).inc();
        let started = std::time::Instant::now();
        let result = rebuild(&shared, &cd, dirty, full, &mut progress).await;
        metrics
            .reconcile_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        let error = match result {
            Ok(unwritten) => {
                failures = 0;
                if !unwritten.is_empty() {
                    count_error(metrics);
                }
                // Each refused namespace is retried by itself, on its own backoff, while the
                // loop goes on serving every other change.
                for ns in unwritten {
                    let refused = progress.refused.entry(ns.clone()).or_default();
                    let wait = backoff(*refused);
                    *refused += 1;
                    tracing::debug!(namespace = %ns, retry_in_secs = wait.as_secs(), "inventory write to be retried");
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        mark(&shared, |d| {
                            d.cluster = true;
                            d.namespaces.insert(ns);
                        });
                    });
                }
                continue;
            }
            Err(e) => e,
        };
        count_error(metrics);
        let wait = backoff(failures);
        failures += 1;
        tracing::warn!(error = %brief(&error), retry_in_secs = wait.as_secs(), "discovery rebuild failed; retrying");
        tokio::time::sleep(wait).await;
        // Nothing is dropped: the work goes back (what was written meanwhile is not
        // written again), and a failed full rebuild is done in full again.
        if full {
            leading = false;
        }
        let (namespaces, deployments) = retry;
        mark(&shared, |d| {
            d.cluster = true;
            d.namespaces.extend(namespaces);
            let newer = std::mem::take(&mut d.deployments);
            d.deployments = deployments;
            d.deployments.extend(newer);
        });
    }
}

/// The wait before retrying work that failed `n` times in a row: 1, 2, 4 … 64 s.
fn backoff(n: u32) -> Duration {
    Duration::from_secs(1 << n.min(6))
}

fn count_error(metrics: &Metrics) {
    metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: CONTROLLER.to_string(),
            reason: condition_reasons::API_ERROR.to_string(),
        })
        .inc();
}

/// The API server refused a create because the namespace is being deleted.
fn namespace_being_deleted(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(e) if e.code == 403 && e.message.contains("being terminated"))
}

/// Rebuilds what `dirty` names. Returns the namespaces whose inventory could not be written
/// (the rest of the rebuild stands); an error fails the rebuild as a whole.
async fn rebuild(
    shared: &Shared,
    cd: &ClusterDiscovery,
    dirty: Dirty,
    full: bool,
    progress: &mut Progress,
) -> Result<BTreeSet<String>, kube::Error> {
    let excluded: BTreeSet<&str> = cd
        .spec
        .exclude_namespaces
        .iter()
        .map(String::as_str)
        .collect();
    // Namespaces being deleted take no new objects.
    let live: BTreeSet<String> = shared
        .stores
        .namespaces
        .all()
        .into_iter()
        .filter(|(_, terminating)| !terminating)
        .map(|(n, _)| n)
        .collect();
    let helm_enabled = cd.spec.helm.enabled;

    // Revision records first: they do not depend on the inventory. Each Deployment's
    // changes in the order seen, Deployments side by side.
    let mut changes = dirty.deployments;
    if full {
        changes.extend(shared.stores.deployments.all());
    }
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
    let failed = futures::stream::iter(by_workload.into_values())
        .map(|views| async move {
            for after in views {
                match record_revision(shared, &after, helm_enabled).await {
                    Ok(()) => {}
                    // The namespace store lags its deletion: a namespace being deleted
                    // refuses new objects, and its Deployments go with it. That stops
                    // nothing else.
                    Err(e) if namespace_being_deleted(&e) => {
                        tracing::debug!(namespace = %after.namespace, "namespace being deleted; no revision");
                    }
                    Err(e) => return Some(e),
                }
            }
            None
        })
        .buffer_unordered(REVISION_WRITERS)
        .filter_map(futures::future::ready)
        // All of them run to the end: one failure cancels no other write half-way.
        .collect::<Vec<kube::Error>>()
        .await;
    if let Some(e) = failed.into_iter().next() {
        return Err(e);
    }

    let mut unwritten = BTreeSet::new();
    for ns in &dirty.namespaces {
        if !live.contains(ns) || excluded.contains(ns.as_str()) {
            progress.signals.remove(ns);
            progress.images.remove(ns);
            progress.split.remove(ns);
            progress.written.remove(ns);
            progress.refused.remove(ns);
            // An excluded namespace keeps no inventory; a deleted one loses it with itself.
            if live.contains(ns)
                && let Err(e) = delete_parts(shared, ns, 0).await
            {
                tracing::warn!(namespace = %ns, error = %brief(&e), "deleting the inventory of an excluded namespace failed");
            }
            continue;
        }
        report_foreign_revisions(shared, ns).await?;
        let status = namespace_inventory(shared, ns, helm_enabled).await;
        progress.signals.insert(
            ns.clone(),
            status.summary.as_ref().map_or(0, |s| s.error_signals),
        );
        progress
            .images
            .insert(ns.clone(), status.images.iter().cloned().collect());
        let parts = match write_inventory(shared, cd, ns, status).await {
            Ok(n) => n,
            // The namespace store lags its deletion (see the revisions above).
            Err(e) if namespace_being_deleted(&e) => {
                tracing::debug!(namespace = %ns, "namespace being deleted; no inventory");
                continue;
            }
            // One namespace's failure does not stop the others; it is retried by itself.
            Err(e) => {
                tracing::warn!(namespace = %ns, error = %brief(&e), "writing the inventory failed");
                unwritten.insert(ns.clone());
                continue;
            }
        };
        if parts > 1 {
            progress.split.insert(ns.clone());
        } else {
            progress.split.remove(ns);
        }
        progress.written.insert(ns.clone());
        progress.refused.remove(ns);
    }
    write_cluster_status(shared, cd, &live, &excluded, progress).await?;
    report_not_in_charge(shared, cd).await?;
    Ok(unwritten)
}

/// Gives each WorkloadRevision of `ns` that Moonin's discovery did not write
/// `Ready=False/NotRecorded`: it looks like a change record but is not one.
async fn report_foreign_revisions(shared: &Shared, ns: &str) -> Result<(), kube::Error> {
    let api: Api<Decoded<WorkloadRevision>> = Api::namespaced(shared.client.clone(), ns);
    for r in shared.stores.revisions.in_namespace(ns) {
        let Some(author) = &r.foreign else { continue };
        if r.reason.as_deref() == Some(condition_reasons::NOT_RECORDED) {
            continue;
        }
        let ready = Desired::new(
            types::READY,
            false,
            condition_reasons::NOT_RECORDED,
            format!(
                "created by {author}, not by Moonin's discovery: it is not part of the change log"
            ),
        );
        let body = json!({"status": {
            "observedGeneration": 1,
            "conditions": conditions::merge(&[], &[ready], Some(1), Timestamp::now()),
        }});
        shared
            .ctx
            .metrics
            .wrote(CONTROLLER, "WorkloadRevision/status");
        let pp = PatchParams {
            field_manager: Some(field_manager::DISCOVERY.to_string()),
            ..PatchParams::default()
        };
        match api.patch_status(&r.name, &pp, &Patch::Merge(&body)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Gives every ClusterDiscovery but the one in charge (the oldest) `Ready=False` and
/// `Stalled=True` with reason `NotInCharge`, so a second one does not look like it works.
async fn report_not_in_charge(shared: &Shared, cd: &ClusterDiscovery) -> Result<(), kube::Error> {
    let api: Api<ClusterDiscovery> = Api::all(shared.client.clone());
    for other in shared.stores.discoveries.state() {
        if other.uid() == cd.uid() || other.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let message = format!(
            "ClusterDiscovery {} is in charge of this cluster (the oldest); this one does nothing until it is the oldest",
            cd.name_any()
        );
        let current = other.status.clone().unwrap_or_default();
        let next = conditions::merge(
            &current.conditions,
            &[
                Desired::new(
                    types::READY,
                    false,
                    condition_reasons::NOT_IN_CHARGE,
                    message.clone(),
                ),
                Desired::new(
                    types::STALLED,
                    true,
                    condition_reasons::NOT_IN_CHARGE,
                    message,
                ),
            ],
            other.metadata.generation,
            Timestamp::now(),
        );
        if conditions::equal_ignoring_time(&current.conditions, &next)
            && current.observed_generation == other.metadata.generation
        {
            continue;
        }
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "status": {"observedGeneration": other.metadata.generation, "conditions": next},
        });
        shared
            .ctx
            .metrics
            .wrote(CONTROLLER, "ClusterDiscovery/status");
        match api
            .patch_status(
                &other.name_any(),
                &PatchParams::apply(field_manager::DISCOVERY).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One namespace's inventory, unsplit; reports new signals as Warning Events.
async fn namespace_inventory(
    shared: &Shared,
    ns: &str,
    helm_enabled: bool,
) -> NamespaceInventoryStatus {
    let s = &shared.stores;
    let now = Timestamp::now();
    let deployments = s.deployments.in_namespace(ns);
    let replica_sets: Vec<(String, RsView)> = s.replica_sets.in_namespace_keyed(ns);
    let pods = s.pods.in_namespace(ns);
    let jobs = s.jobs.in_namespace(ns);
    let hpas = s.hpas.in_namespace(ns);
    // What the published inventory (all its parts) holds: CronJob runs whose Jobs may be
    // gone, and the signals already reported.
    let mut previous: Vec<CronJobEntry> = Vec::new();
    let mut previous_signals: HashMap<String, Vec<String>> = HashMap::new();
    for part in s.inventories.state() {
        if part.namespace().as_deref() != Some(ns) {
            continue;
        }
        if let Some(st) = &part.status {
            previous.extend(st.cron_jobs.iter().cloned());
            previous_signals.extend(
                st.deployments
                    .iter()
                    .map(|d| (d.name.clone(), d.signals.clone())),
            );
        }
    }
    let scaled_objects: Vec<ScaledObjectView> = s
        .scaled_objects
        .as_ref()
        .map(|so| so.in_namespace(ns))
        .unwrap_or_default();
    let so_targets: Vec<(String, String)> = scaled_objects
        .iter()
        .filter(|so| so.target.0 == "Deployment")
        .map(|so| (so.name.clone(), so.target.1.clone()))
        .collect();

    let pod_refs: Vec<&PodView> = pods.iter().collect();
    let job_refs: Vec<&JobView> = jobs.iter().collect();
    let mut entries = Vec::new();
    for d in &deployments {
        let own_rs: Vec<String> = replica_sets
            .iter()
            .filter(|(_, r)| r.deployment.as_deref() == Some(d.name.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        let targeting: Vec<&HpaView> = hpas
            .iter()
            .filter(|h| h.target.0 == "Deployment" && h.target.1 == d.name)
            .collect();
        let found =
            signals::deployment_signals(d, &pod_refs, &job_refs, &targeting, &so_targets, &own_rs);
        // The ScaledObject is what people edit; its KEDA HPA only carries its bounds.
        let autoscaler = scaled_objects
            .iter()
            .find(|so| so.target.0 == "Deployment" && so.target.1 == d.name)
            .map(inventory::scaled_object_summary)
            .or_else(|| targeting.first().map(|h| inventory::autoscaler_summary(h)));
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            namespace: Some(d.namespace.clone()),
            name: Some(d.name.clone()),
            uid: Some(d.uid.clone()),
            ..Default::default()
        };
        report_signals(shared, regarding, &found, previous_signals.get(&d.name)).await;
        entries.push(inventory::deployment_entry(d, autoscaler, found));
    }
    // Autoscalers whose target is missing: a Warning Event on the autoscaler.
    let dep_refs: Vec<&DeploymentView> = deployments.iter().map(|d| &**d).collect();
    let hpa_refs: Vec<&HpaView> = hpas.iter().collect();
    let orphans = signals::orphan_autoscaler_signals(&hpa_refs, &dep_refs);
    let so_refs: Vec<&ScaledObjectView> = scaled_objects.iter().collect();
    let so_orphans = signals::orphan_autoscaler_signals(&so_refs, &dep_refs);
    let autoscalers = hpas
        .iter()
        .map(|h| {
            (
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                &h.name,
                &orphans,
            )
        })
        .chain(
            scaled_objects
                .iter()
                .map(|so| ("keda.sh/v1alpha1", "ScaledObject", &so.name, &so_orphans)),
        );
    for (api_version, kind, name, orphans) in autoscalers {
        let found: Vec<String> = orphans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, signal)| signal.clone())
            .collect();
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: Some(ns.to_string()),
            name: Some(name.clone()),
            ..Default::default()
        };
        report_signals(shared, regarding, &found, None).await;
    }

    let mut cron_entries = Vec::new();
    for c in s.cron_jobs.in_namespace(ns) {
        let runs_before = previous
            .iter()
            .find(|e| e.name == c.name)
            .map(|e| e.runs.clone())
            .unwrap_or_default();
        let own: Vec<&JobView> = jobs
            .iter()
            .filter(|j| j.cron_job.as_deref() == Some(c.name.as_str()))
            .collect();
        let runs = inventory::merge_runs(&runs_before, &own);
        let found = signals::cron_job_signals(&c, &runs, now);
        cron_entries.push(CronJobEntry {
            name: c.name.clone(),
            schedule: c.schedule.clone(),
            suspend: c.suspend,
            runs,
            signals: found,
        });
    }

    let releases = if helm_enabled {
        helm_releases(shared, ns)
            .await
            .into_iter()
            .map(|(_, r, _)| r)
            .collect()
    } else {
        Vec::new()
    };
    inventory::build(ns, entries, cron_entries, releases)
}

/// Warning Events on an object for signals it did not have before (`published`: what its
/// inventory entry already showed, so a restart does not repeat them).
async fn report_signals(
    shared: &Shared,
    regarding: k8s_openapi::api::core::v1::ObjectReference,
    now: &[String],
    published: Option<&Vec<String>>,
) {
    let key = (
        regarding.namespace.clone().unwrap_or_default(),
        format!(
            "{}/{}",
            regarding.kind.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default()
        ),
    );
    let before = {
        let mut g = shared.reported.lock().unwrap_or_else(|e| e.into_inner());
        let before = g
            .get(&key)
            .cloned()
            .or_else(|| published.cloned())
            .unwrap_or_default();
        g.insert(key, now.to_vec());
        before
    };
    for signal in now.iter().filter(|s| !before.contains(s)) {
        if !shared.ctx.leadership.is_leader() {
            return;
        }
        shared
            .events
            .publish(
                &regarding,
                true,
                signals::reason_of(signal),
                Some("Discovered"),
                signal,
            )
            .await;
    }
}

/// The latest release of each Helm release in `ns`, decoded (and cached by Secret
/// resourceVersion): `(release, published entry, revision for change records)`.
async fn helm_releases(shared: &Shared, ns: &str) -> Vec<(String, HelmRelease, HelmRevision)> {
    let mut latest: BTreeMap<String, HelmSecretView> = BTreeMap::new();
    for s in shared.stores.helm_secrets.in_namespace(ns) {
        if s.release.is_empty() {
            continue;
        }
        match latest.get(&s.release) {
            Some(l) if l.version >= s.version => {}
            _ => {
                latest.insert(s.release.clone(), s);
            }
        }
    }
    let api: Api<Secret> = Api::namespaced(shared.client.clone(), ns);
    let mut out = Vec::new();
    for (release, s) in latest {
        let key = (format!("{ns}/{}", s.name), s.resource_version.clone());
        let cached = shared
            .helm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .decoded
            .get(&key)
            .cloned();
        if let Some(c) = cached {
            out.push(c);
            continue;
        }
        // One Secret at a time, only when it changed; its data is dropped at the end of
        // this block and never logged.
        let decoded = match api.get(&s.name).await {
            Ok(secret) => {
                let payload = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get("release"))
                    .map(|b| b.0.clone())
                    .unwrap_or_default();
                helm::sanitise_release(&payload).map_err(|e| e.reason().to_string())
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                shared.helm.lock().unwrap_or_else(|e| e.into_inner()).denied =
                    Some(format!("reading Secret {ns}/{} is forbidden", s.name));
                continue;
            }
            Err(e) => {
                tracing::warn!(namespace = ns, secret = %s.name, error = %brief(&e), "reading a Helm release Secret failed");
                continue;
            }
        };
        match decoded {
            Ok(r) => {
                let rev = HelmRevision {
                    release: release.clone(),
                    revision: r.revision,
                    chart: r.chart.name.clone().unwrap_or_default(),
                    version: r.chart.version.clone().unwrap_or_default(),
                };
                let entry = (release.clone(), HelmRelease::from(r), rev);
                let mut g = shared.helm.lock().unwrap_or_else(|e| e.into_inner());
                g.denied = None;
                g.decoded.retain(|k, _| k.0 != key.0);
                g.decoded.insert(key, entry.clone());
                out.push(entry);
            }
            Err(reason) => {
                tracing::warn!(namespace = ns, secret = %s.name, %reason, "a Helm release Secret could not be decoded; skipped");
            }
        }
    }
    out
}

/// Writes a namespace's inventory, split into parts when it would be too large; removes
/// parts left from an earlier, larger split. Returns the number of parts.
async fn write_inventory(
    shared: &Shared,
    cd: &ClusterDiscovery,
    ns: &str,
    status: NamespaceInventoryStatus,
) -> Result<usize, kube::Error> {
    let parts = inventory::split(status, inventory::MAX_BYTES);
    let n = parts.len();
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    let pp = PatchParams::apply(field_manager::DISCOVERY).force();
    let now = Timestamp::now();
    for (i, mut part) in parts.into_iter().enumerate() {
        let name = if i == 0 {
            "inventory".to_string()
        } else {
            format!("inventory-{i}")
        };
        let existing = shared
            .stores
            .inventories
            .get(&kube::runtime::reflector::ObjectRef::new(&name).within(ns));
        let spec_ok = existing
            .as_ref()
            .is_some_and(|e| e.spec.part == i as i32 && e.spec.parts == n as i32);
        if !spec_ok {
            let body = json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "NamespaceInventory",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "ownerReferences": [{
                        "apiVersion": "moonin.io/v1alpha1",
                        "kind": "ClusterDiscovery",
                        "name": cd.name_any(),
                        "uid": cd.uid().unwrap_or_default(),
                    }],
                },
                "spec": {"part": i, "parts": n},
            });
            shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
            api.patch(&name, &pp, &Patch::Apply(&body)).await?;
        }
        let current = existing
            .as_ref()
            .and_then(|e| e.status.clone())
            .unwrap_or_default();
        let truncated = if n > 1 {
            Desired::new(
                condition_types::TRUNCATED,
                true,
                condition_reasons::SPLIT,
                format!(
                    "the inventory passes {} KiB; this is part {} of {n}",
                    inventory::MAX_BYTES / 1024,
                    i + 1
                ),
            )
        } else {
            Desired::new(
                condition_types::TRUNCATED,
                false,
                condition_reasons::COMPLETE,
                "the inventory fits one object",
            )
        };
        part.observed_generation = existing.as_ref().and_then(|e| e.metadata.generation);
        part.conditions = conditions::merge(
            &current.conditions,
            &[
                Desired::new(
                    types::READY,
                    true,
                    condition_reasons::INVENTORIED,
                    "the namespace's inventory is current",
                ),
                truncated,
            ],
            part.observed_generation,
            now,
        );
        let same = same_status(&current, &part, |st| &mut st.conditions);
        let key = (ns.to_string(), i as i32);
        let digest = digest(&part);
        let written_same = shared
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            == Some(&digest);
        if same || written_same {
            continue;
        }
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "NamespaceInventory",
            "status": part,
        });
        shared
            .ctx
            .metrics
            .wrote(CONTROLLER, "NamespaceInventory/status");
        api.patch_status(&name, &pp, &Patch::Apply(&body)).await?;
        shared
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, digest);
    }
    delete_parts(shared, ns, n).await?;
    Ok(n)
}

/// Deletes a namespace's inventory parts from the `n`th on (all of them for 0).
async fn delete_parts(shared: &Shared, ns: &str, n: usize) -> Result<(), kube::Error> {
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    for old in shared.stores.inventories.state() {
        // A part is known by its name (`inventory`, `inventory-<i>`; admission allows no
        // other), whatever its spec says: one someone else wrote goes as well.
        let index = inventory::part_of(&old.name_any());
        if old.namespace().as_deref() != Some(ns) || index.is_some_and(|i| i < n) {
            continue;
        }
        shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
        match api.delete(&old.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        shared
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(ns.to_string(), index.map_or(-1, |i| i as i32)));
    }
    Ok(())
}

/// Records a Deployment change as a WorkloadRevision (owned by the Deployment) and prunes
/// the oldest beyond [`revision::KEPT`]. Names are derived from the change, so a restart
/// that sees the same change again gets `AlreadyExists`, not a duplicate.
async fn record_revision(
    shared: &Shared,
    after: &Arc<DeploymentView>,
    helm_enabled: bool,
) -> Result<(), kube::Error> {
    let key = (after.namespace.clone(), after.name.clone());
    let before = shared
        .baselines
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let now = Timestamp::now();
    let helm = match (&after.helm_release, helm_enabled) {
        (Some(release), true) => helm_releases(shared, &after.namespace)
            .await
            .into_iter()
            .find(|(r, _, _)| r == release)
            .map(|(_, _, rev)| rev),
        _ => None,
    };
    let existing: Vec<RevView> = shared
        .stores
        .revisions
        .in_namespace(&after.namespace)
        .into_iter()
        .filter(|r| r.workload == after.name && r.foreign.is_none())
        .collect();
    let api: Api<WorkloadRevision> = Api::namespaced(shared.client.clone(), &after.namespace);
    // Records an earlier process created but did not get to mark: looked for when this
    // process first sees the Deployment (later, the store may simply not show our own
    // status patch yet).
    for r in existing.iter().filter(|r| before.is_none() && !r.ready()) {
        mark_recorded(shared, &api, &r.name, now).await?;
    }
    let spec = match &before {
        Some(b) => revision::change(Some(b.as_ref()), after, helm, now),
        // First sight (startup, leadership, a new Deployment): a record only when none
        // exists for its current revision.
        None => {
            let current = after.revision.unwrap_or(1);
            if existing.iter().any(|r| r.revision == current) {
                None
            } else {
                Some(revision::initial(after, helm, now))
            }
        }
    };
    let Some(spec) = spec else {
        if before.is_none() {
            // Already recorded at this revision (by an earlier process): start from here.
            shared
                .baselines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, after.clone());
        }
        return Ok(());
    };
    let name = revision::name(&after.name, &spec);
    let obj: WorkloadRevision = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "WorkloadRevision",
        "metadata": {
            "name": name,
            "namespace": after.namespace,
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": after.name,
                "uid": after.uid,
            }],
        },
        "spec": spec,
    }))
    .map_err(kube::Error::SerdeError)?;
    let pp = PostParams {
        field_manager: Some(field_manager::DISCOVERY.to_string()),
        ..PostParams::default()
    };
    shared.ctx.metrics.wrote(CONTROLLER, "WorkloadRevision");
    let created = match api.create(&pp, &obj).await {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 409 => false,
        Err(e) => return Err(e),
    };
    shared
        .baselines
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, after.clone());
    if !created {
        return Ok(());
    }
    mark_recorded(shared, &api, &name, now).await?;
    let mut all: Vec<(String, Timestamp)> = existing
        .iter()
        .map(|r| (r.name.clone(), r.observed_at))
        .collect();
    all.push((name, now));
    for old in revision::prune(&all) {
        shared.ctx.metrics.wrote(CONTROLLER, "WorkloadRevision");
        match api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    match api
        .patch_status(
            name,
            &PatchParams::apply(field_manager::DISCOVERY).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Pruned or deleted with its Deployment meanwhile.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The ClusterDiscovery status: metadata, node groups, totals, conditions; written only
/// when it changed.
async fn write_cluster_status(
    shared: &Shared,
    cd: &ClusterDiscovery,
    live: &BTreeSet<String>,
    excluded: &BTreeSet<&str>,
    progress: &mut Progress,
) -> Result<(), kube::Error> {
    let s = &shared.stores;
    let now = Timestamp::now();
    // The version once; reachability from the heartbeat (until its first beat, from this
    // read).
    if progress.version.is_none() {
        check_api(shared, progress).await;
    }
    let reachable = shared
        .reachable
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .or_else(|| progress.reachable.clone());
    let name = match &cd.spec.cluster_name {
        Some(n) => Sourced {
            value: n.clone(),
            source: "spec.clusterName".into(),
        },
        None => Sourced {
            value: shared.ctx.cluster_name.clone(),
            source: "--cluster-name".into(),
        },
    };
    let nodes = s.nodes.all();
    let inventoried: Vec<&String> = live
        .iter()
        .filter(|n| !excluded.contains(n.as_str()))
        .collect();
    let images: BTreeSet<&String> = progress.images.values().flatten().collect();
    let deployments = s
        .deployments
        .all()
        .iter()
        .filter(|d| !excluded.contains(d.namespace.as_str()))
        .count();
    let cron_jobs = s
        .cron_jobs
        .all()
        .iter()
        .filter(|c| !excluded.contains(c.namespace.as_str()))
        .count();
    let complete = inventoried.iter().all(|n| progress.written.contains(*n));
    let helm_condition = if !cd.spec.helm.enabled {
        Desired::new(
            condition_types::HELM_ACCESS,
            false,
            condition_reasons::DISABLED,
            "Helm discovery is off (spec.helm.enabled)",
        )
    } else {
        match &shared.helm.lock().unwrap_or_else(|e| e.into_inner()).denied {
            Some(why) => Desired::new(
                condition_types::HELM_ACCESS,
                false,
                condition_reasons::FORBIDDEN,
                format!("{why}; grant the opt-in Helm role (config/rbac-helm)"),
            ),
            None => Desired::new(
                condition_types::HELM_ACCESS,
                true,
                condition_reasons::SECRETS_READABLE,
                "Helm release Secrets are read and sanitised",
            ),
        }
    };
    let api_condition = match &reachable {
        Some(Err(e)) => Desired::new(
            condition_types::API_REACHABLE,
            false,
            condition_reasons::UNREACHABLE,
            e.clone(),
        ),
        _ => Desired::new(
            condition_types::API_REACHABLE,
            true,
            condition_reasons::REACHABLE,
            "the API server answers",
        ),
    };
    let split: Vec<&String> = progress.split.iter().collect();
    let desired = vec![
        Desired::new(
            types::READY,
            complete,
            if complete {
                condition_reasons::INVENTORIED
            } else {
                condition_reasons::INVENTORYING
            },
            format!(
                "{} of {} namespaces inventoried",
                inventoried
                    .iter()
                    .filter(|n| progress.written.contains(**n))
                    .count(),
                inventoried.len()
            ),
        ),
        api_condition,
        // In charge: whatever said otherwise while an older one was is over.
        Desired::new(types::STALLED, false, conditions::reasons::RECONCILED, ""),
        Desired::new(
            condition_types::INVENTORY_COMPLETE,
            complete,
            if complete {
                condition_reasons::COMPLETE
            } else {
                condition_reasons::IN_PROGRESS
            },
            "every watched kind has listed and every namespace's inventory is written",
        ),
        helm_condition,
        if split.is_empty() {
            Desired::new(
                condition_types::TRUNCATED,
                false,
                condition_reasons::COMPLETE,
                "every inventory fits one object",
            )
        } else {
            Desired::new(
                condition_types::TRUNCATED,
                true,
                condition_reasons::SPLIT,
                format!(
                    "split into parts: {}",
                    split
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        },
    ];
    let current = cd.status.clone().unwrap_or_default();
    let mut next = ClusterDiscoveryStatus {
        observed_generation: cd.metadata.generation,
        cluster: Some(cluster::metadata(&nodes, name, progress.version.clone())),
        node_groups: cluster::node_groups(&nodes),
        totals: Some(Totals {
            namespaces: inventoried.len() as i32,
            deployments: deployments as i32,
            images: images.len() as i32,
            cron_jobs: cron_jobs as i32,
            error_signals: progress.signals.values().sum(),
        }),
        conditions: Vec::new(),
    };
    next.conditions = conditions::merge(&current.conditions, &desired, cd.metadata.generation, now);
    let same = same_status(&current, &next, |st| &mut st.conditions);
    if same || !shared.ctx.leadership.is_leader() {
        return Ok(());
    }
    let api: Api<ClusterDiscovery> = Api::all(shared.client.clone());
    let body = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterDiscovery",
        "status": next,
    });
    shared
        .ctx
        .metrics
        .wrote(CONTROLLER, "ClusterDiscovery/status");
    api.patch_status(
        &cd.name_any(),
        &PatchParams::apply(field_manager::DISCOVERY).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Whether two statuses say the same thing, whatever their conditions' timestamps.
/// A digest of a status as it is serialised (the same value gives the same digest).
fn digest(status: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(status).unwrap_or_default().hash(&mut h);
    h.finish()
}

fn same_status<S: Clone + PartialEq>(
    a: &S,
    b: &S,
    conditions_of: fn(
        &mut S,
    ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    let ca = std::mem::take(conditions_of(&mut a));
    let cb = std::mem::take(conditions_of(&mut b));
    a == b && conditions::equal_ignoring_time(&ca, &cb)
}

/// Asks the API server for its version.
async fn check_api(shared: &Shared, progress: &mut Progress) {
    match shared.client.apiserver_version().await {
        Ok(v) => {
            progress.version = Some(v.git_version);
            progress.reachable = Some(Ok(()));
        }
        Err(e) => progress.reachable = Some(Err(format!("GET /version failed: {e}"))),
    }
}

/// The leader renews the heartbeat Lease; `ApiReachable` follows the outcome, and the
/// cluster status is rebuilt only when it flips.
async fn heartbeat_loop(shared: Arc<Shared>) {
    let mut reachable: Option<bool> = None;
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        if !shared.ctx.leadership.is_leader() {
            continue;
        }
        let api: Api<Lease> = Api::namespaced(shared.client.clone(), &shared.ctx.namespace);
        let body = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": HEARTBEAT_LEASE},
            "spec": {
                "holderIdentity": "moonin-discovery",
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()),
                "leaseDurationSeconds": (HEARTBEAT.as_secs() * 3) as i32,
            },
        });
        shared.ctx.metrics.wrote(CONTROLLER, "Lease");
        let outcome = api
            .patch(
                HEARTBEAT_LEASE,
                &PatchParams::apply(field_manager::DISCOVERY).force(),
                &Patch::Apply(&body),
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("renewing the heartbeat Lease failed: {e}"));
        let ok = outcome.is_ok();
        *shared.reachable.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        if reachable != Some(ok) {
            if reachable.is_some() {
                mark(&shared, |d| d.cluster = true);
            }
            reachable = Some(ok);
        }
    }
}
