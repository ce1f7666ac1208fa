//! One rebuild of what the dirty set names, in order: the revision records of changed
//! Deployments, then the inventory of each marked namespace, then the cluster status. And
//! what the rebuilds carry from one to the next ([`RebuildState`]).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, stream::FuturesUnordered};
use jiff::Timestamp;
use kube::ResourceExt;

use super::{
    config,
    dirty::Dirty,
    errors::namespace_being_deleted,
    history::Open,
    namespace::{self, ReportedSignals},
    parts::{self, WrittenDigests},
    progress::Progress,
    record,
    shared::Shared,
    status::{self, ApiProbe},
    view::DeploymentView,
};
use crate::api::discovery::{ClusterDiscovery, NamespaceInventoryStatus};
use crate::runtime::errors::brief;

/// What the rebuilds carry from one to the next.
#[derive(Debug, Default)]
pub struct RebuildState {
    /// Per namespace, what the totals count.
    pub progress: Progress,
    /// Namespaces whose inventory write was refused.
    pub refusals: Refusals,
    /// What was written to each inventory part.
    pub written: WrittenDigests,
    /// The signals reported per object.
    pub reported: ReportedSignals,
    /// The API server's version.
    pub probe: ApiProbe,
    /// Whether the Deployments that refer to Secrets were measured with the Secrets readable
    /// since they last were not (the Secrets watch lists after the other caches, and only
    /// while Secret changes are tracked).
    pub secrets_measured: bool,
}

/// Failures in a row, and the wait they call for: 1, 2, 4 … 64 s.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Streak(u32);

impl Streak {
    /// One more failure: how long to wait before trying again.
    pub fn failed(&mut self) -> Duration {
        let wait = Duration::from_secs(1 << self.0.min(6));
        self.0 += 1;
        wait
    }

    /// A success ends the streak.
    pub fn succeeded(&mut self) {
        self.0 = 0;
    }
}

/// Namespaces whose inventory write failed: each is retried by itself, on its own backoff,
/// while the loop goes on serving every other change.
#[derive(Debug, Default)]
pub struct Refusals(BTreeMap<String, Streak>);

impl Refusals {
    /// A namespace's write failed again: how long until it is retried.
    pub fn refused(&mut self, ns: &str) -> Duration {
        self.0.entry(ns.to_string()).or_default().failed()
    }

    /// A namespace written, or no longer inventoried: its next failure starts over.
    pub fn forget(&mut self, ns: &str) {
        self.0.remove(ns);
    }
}

/// Which ClusterDiscovery the rebuilds serve, and whether this process has led since the
/// last full rebuild.
#[derive(Debug, Default)]
pub struct Serving {
    leading: bool,
    /// The ClusterDiscovery the last rebuild served, and its spec's generation.
    discovery: Option<(Option<String>, Option<i64>)>,
}

impl Serving {
    /// Not the leader: the next leadership starts with a full rebuild.
    pub fn follow(&mut self) {
        self.leading = false;
    }

    /// No ClusterDiscovery: whichever comes next gets a full rebuild.
    pub fn idle(&mut self) {
        self.discovery = None;
    }

    /// A rebuild for `cd` starts: whether it is a full one (a new leadership, a new
    /// ClusterDiscovery, or a spec change: namespaces excluded or included, Helm switched).
    pub fn begin(&mut self, cd: &ClusterDiscovery) -> bool {
        let served = Some((cd.uid(), cd.metadata.generation));
        let full = !self.leading || self.discovery != served;
        if full {
            self.leading = true;
            self.discovery = served;
        }
        full
    }

    /// A full rebuild failed: the next one is full again.
    pub fn failed_full(&mut self) {
        self.leading = false;
    }
}

/// A rebuild that failed: its first error, and the changes it did not record, each
/// Deployment's in the order seen (only these go back; see [`record::Unrecorded`]). A
/// failed record stops nothing else: the inventories and the status are rebuilt all the
/// same.
#[derive(Debug)]
pub struct Failed {
    /// The first error.
    pub error: kube::Error,
    /// The views to record again.
    pub unrecorded: Vec<Arc<DeploymentView>>,
}

/// The namespaces a rebuild serves.
struct Scope {
    /// Those the ClusterDiscovery excludes.
    excluded: BTreeSet<String>,
    /// Those that exist and are not being deleted (which take no new objects).
    live: BTreeSet<String>,
}

/// Rebuilds what `dirty` names (everything when `full`). Returns the namespaces whose
/// inventory could not be written (the rest of the rebuild stands, and each is retried by
/// itself).
pub async fn rebuild(
    shared: &Shared,
    state: &mut RebuildState,
    cd: &ClusterDiscovery,
    dirty: Dirty,
    full: bool,
) -> Result<BTreeSet<String>, Failed> {
    let scope = Scope {
        excluded: cd.spec.exclude_namespaces.iter().cloned().collect(),
        live: shared
            .stores
            .namespaces
            .all()
            .into_iter()
            .filter(|(_, terminating)| !terminating)
            .map(|(n, _)| n)
            .collect(),
    };
    // Revision records first: they do not depend on the inventory.
    let mut dirty = dirty;
    let recorded = record_changes(shared, state, cd, &scope, &mut dirty, full).await;
    let rest = inventories_and_status(shared, state, cd, &scope, &dirty.namespaces).await;
    match (recorded, rest) {
        (Ok(()), Ok(unwritten)) => Ok(unwritten),
        (Err(u), Ok(_)) => Err(Failed {
            error: u.error,
            unrecorded: u.views,
        }),
        (recorded, Err(error)) => Err(Failed {
            error,
            unrecorded: recorded.err().map(|u| u.views).unwrap_or_default(),
        }),
    }
}

/// Records the changed Deployments `dirty` names (and, when `full`, every Deployment as it
/// is now; else those that refer to a changed ConfigMap or Secret it names, whose
/// namespaces join its own).
async fn record_changes(
    shared: &Shared,
    state: &mut RebuildState,
    cd: &ClusterDiscovery,
    scope: &Scope,
    dirty: &mut Dirty,
    full: bool,
) -> Result<(), record::Unrecorded> {
    let mut changes = std::mem::take(&mut dirty.deployments);
    if full {
        changes.extend(shared.stores.deployments.all());
    } else {
        for d in referring(shared, &dirty.configs) {
            dirty.namespaces.insert(d.namespace.clone());
            changes.push(d);
        }
    }
    let secrets_readable = cd.spec.secret_changes.enabled
        && shared.secret_access.denied().is_none()
        && shared.stores.secrets.synced();
    let remeasured = newly_readable_secrets(shared, state, secrets_readable);
    if !full {
        changes.extend(remeasured);
    }
    let excluded = scope.excluded.iter().map(String::as_str).collect();
    let workloads = record::by_workload(changes, &scope.live, &excluded);
    record::record_all(shared, workloads, cd.spec.helm.enabled, secrets_readable).await?;
    state.secrets_measured = secrets_readable;
    Ok(())
}

/// Builds and writes the inventory of each of `namespaces` (forgetting those excluded or
/// gone), then the cluster status.
async fn inventories_and_status(
    shared: &Shared,
    state: &mut RebuildState,
    cd: &ClusterDiscovery,
    scope: &Scope,
    namespaces: &BTreeSet<String>,
) -> Result<BTreeSet<String>, kube::Error> {
    let Scope { excluded, live } = scope;
    // Each namespace is planned in turn (the signals' Events and the totals are this loop's
    // alone), and up to `WRITERS` of the plans are written at once: a full rebuild writes
    // every inventory, and one request at a time leaves the API server idle between them.
    let RebuildState {
        progress,
        refusals,
        written,
        reported,
        probe,
        ..
    } = state;
    let written = &*written;
    let mut unwritten = BTreeSet::new();
    let mut writing = FuturesUnordered::new();
    for ns in namespaces {
        if !live.contains(ns) || excluded.contains(ns) {
            progress.forget(ns);
            refusals.forget(ns);
            reported.forget_namespace(ns);
            written.forget_namespace(ns);
            shared.helm.forget_namespace(ns);
            shared.open_slots.set(ns, std::collections::HashMap::new());
            // An excluded namespace keeps no inventory; a deleted one loses it with itself.
            if live.contains(ns)
                && let Err(e) = parts::delete_parts(shared, written, ns, 0).await
            {
                tracing::warn!(namespace = %ns, error = %brief(&e), "deleting the inventory of an excluded namespace failed");
            }
            continue;
        }
        let plan = plan_namespace(shared, reported, progress, cd, ns).await?;
        writing.push(async move {
            let result = parts::write(shared, written, cd, ns, plan.status, plan.now).await;
            if result.is_ok() {
                // The slots that closed are in the inventory now.
                shared.open_slots.set(ns, plan.open_slots);
            }
            (ns, result)
        });
        while writing.len() >= WRITERS
            && let Some((ns, result)) = writing.next().await
        {
            settle(progress, refusals, &mut unwritten, ns, result);
        }
    }
    while let Some((ns, result)) = writing.next().await {
        settle(progress, refusals, &mut unwritten, ns, result);
    }
    let excluded_names = excluded.iter().map(String::as_str).collect();
    let snapshot = status::load(shared, cd, live, &excluded_names, progress, probe).await;
    *shared.facts.lock().unwrap_or_else(|e| e.into_inner()) =
        status::facts(&snapshot.totals, progress);
    status::write(shared, cd, &snapshot.current, &status::decide(&snapshot)).await?;
    status::report_not_in_charge(shared, cd).await?;
    Ok(unwritten)
}

/// The Deployments that refer to a ConfigMap or Secret of `configs`
/// (`(namespace, "ConfigMap/<name>")`), as they are now: their configuration is measured
/// again.
/// When the Secrets have become readable since the last rebuild (see
/// [`RebuildState::secrets_measured`]): every Deployment that refers to a Secret, to be
/// measured now, so that its baseline takes what the Secrets hold (`config::fill`) and
/// their next change is seen.
fn newly_readable_secrets(
    shared: &Shared,
    state: &RebuildState,
    readable: bool,
) -> Vec<Arc<DeploymentView>> {
    if !readable || state.secrets_measured {
        return Vec::new();
    }
    let referring: Vec<_> = shared
        .stores
        .deployments
        .all()
        .into_iter()
        .filter(|d| {
            d.config_refs
                .iter()
                .any(|r| config::name_of(r, config::SECRET).is_some())
        })
        .collect();
    tracing::info!(
        deployments = referring.len(),
        "Secret changes tracked from now on"
    );
    referring
}

fn referring(shared: &Shared, configs: &BTreeSet<(String, String)>) -> Vec<Arc<DeploymentView>> {
    let mut by_namespace: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (ns, source) in configs {
        by_namespace.entry(ns).or_default().insert(source);
    }
    by_namespace
        .into_iter()
        .flat_map(|(ns, sources)| {
            shared
                .stores
                .deployments
                .in_namespace(ns)
                .into_iter()
                .filter(move |d| d.config_refs.iter().any(|r| sources.contains(r.as_str())))
        })
        .collect()
}

/// How many namespaces' inventories are written at once.
const WRITERS: usize = 4;

/// One namespace's inventory, ready to write.
struct Planned {
    status: NamespaceInventoryStatus,
    open_slots: HashMap<String, Open>,
    now: Timestamp,
}

/// Builds one namespace's inventory, and reports the signals that appeared in it.
async fn plan_namespace(
    shared: &Shared,
    reported: &mut ReportedSignals,
    progress: &mut Progress,
    cd: &ClusterDiscovery,
    ns: &str,
) -> Result<Planned, kube::Error> {
    record::report_foreign(shared, ns).await?;
    let snapshot = namespace::load(shared, ns, cd).await;
    let plan = namespace::decide(&snapshot);
    namespace::report_signals(shared, reported, &plan.signals).await;
    progress.built(ns, &plan.status);
    Ok(Planned {
        status: plan.status,
        open_slots: plan.open_slots,
        now: snapshot.now,
    })
}

/// Books one namespace's write. A failed one goes into `unwritten`: one namespace's failure
/// does not stop the others, and it is retried by itself.
fn settle(
    progress: &mut Progress,
    refusals: &mut Refusals,
    unwritten: &mut BTreeSet<String>,
    ns: &str,
    result: Result<usize, kube::Error>,
) {
    match result {
        Ok(parts) => {
            progress.written(ns, parts);
            refusals.forget(ns);
        }
        Err(e) if namespace_being_deleted(&e) => {
            tracing::debug!(namespace = %ns, "namespace being deleted; no inventory");
        }
        Err(e) => {
            tracing::warn!(namespace = %ns, error = %brief(&e), "writing the inventory failed");
            unwritten.insert(ns.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_double_the_wait_up_to_a_minute() {
        let mut s = Streak::default();
        let waits: Vec<u64> = (0..9).map(|_| s.failed().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        s.succeeded();
        assert_eq!(s.failed(), Duration::from_secs(1));
    }

    #[test]
    fn each_refused_namespace_backs_off_on_its_own() {
        let mut r = Refusals::default();
        assert_eq!(r.refused("a"), Duration::from_secs(1));
        assert_eq!(r.refused("a"), Duration::from_secs(2));
        assert_eq!(r.refused("b"), Duration::from_secs(1));
        r.forget("a");
        assert_eq!(r.refused("a"), Duration::from_secs(1));
        assert_eq!(r.refused("b"), Duration::from_secs(2));
    }

    fn cd(uid: &str, generation: i64) -> ClusterDiscovery {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "metadata": {"name": "cluster", "uid": uid, "generation": generation},
            "spec": {},
        }))
        .unwrap()
    }

    #[test]
    fn a_rebuild_is_full_on_a_new_leadership_discovery_or_spec() {
        let mut s = Serving::default();
        assert!(s.begin(&cd("u1", 1)), "the first one");
        assert!(!s.begin(&cd("u1", 1)));
        assert!(s.begin(&cd("u1", 2)), "a spec change");
        assert!(!s.begin(&cd("u1", 2)));
        assert!(s.begin(&cd("u2", 2)), "another ClusterDiscovery");
        s.follow();
        assert!(s.begin(&cd("u2", 2)), "a new leadership");
        s.failed_full();
        assert!(s.begin(&cd("u2", 2)), "after a failed full rebuild");
        s.idle();
        assert!(s.begin(&cd("u2", 2)), "after none was in charge");
        assert!(!s.begin(&cd("u2", 2)));
    }
}
