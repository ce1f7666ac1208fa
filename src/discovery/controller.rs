//! The discovery controller's wiring: the watches ([`stores`](super::stores)), one loop
//! that rebuilds what changed ([`rebuild`](super::rebuild)) behind the leader gate, with its
//! error policy, and the heartbeat ([`heartbeat`](super::heartbeat)).
//!
//! Only the leader writes; followers keep their stores warm. Nothing is relisted
//! periodically: the watches resume from their last resourceVersion.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use futures::{StreamExt, future::BoxFuture};

use super::{
    baselines::Baselines,
    dirty::{Dirty, Mark, Pending},
    heartbeat::{self, Reachability},
    helm_secrets::{self, HelmState},
    history::{self, OpenSlots},
    opt_in::Access,
    rebuild::{RebuildState, Refusals, Serving, Streak, rebuild},
    signals, stores,
};
use crate::api::discovery::{ClusterDiscovery, WorkloadRevision};
use crate::runtime::{
    cache,
    context::{Context, Readiness, Registered},
    errors::brief,
    events::Publisher,
    invalid,
    metrics::{ControllerLabels, ErrorLabels, Metrics},
};

pub use super::heartbeat::HEARTBEAT_LEASE;

pub use super::{names::CONTROLLER, shared::Shared};

/// How long changes are gathered before a rebuild.
const DEBOUNCE: Duration = Duration::from_millis(500);

pub use super::names::{condition_reasons, condition_types};

/// Registers the controller.
pub fn registered() -> Registered {
    Registered {
        name: CONTROLLER,
        run: |ctx, readiness| -> BoxFuture<'static, anyhow::Result<()>> {
            Box::pin(run(ctx, readiness))
        },
    }
}

/// Runs the discovery controller until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let pending = Arc::new(Pending::default());
    let baselines = Arc::new(Baselines::default());
    let helm = Arc::new(HelmState::new(&ctx.namespace));
    let secret_access = Arc::new(Access::new(stores::SECRETS_DENIED));
    let (stores, drives) =
        stores::watch(&client, &pending, &baselines, &helm, &secret_access).await;
    let shared = Arc::new(Shared {
        client: client.clone(),
        ctx: ctx.clone(),
        stores,
        pending,
        baselines,
        helm,
        secret_access,
        reachability: Reachability::default(),
        events: Publisher::new(client.clone(), "moonin-discovery"),
        open_slots: OpenSlots::default(),
        facts: Arc::default(),
    });
    let facts = shared.facts.clone();
    ctx.metrics.facts.add(Box::new(move || {
        facts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }));
    // Discovery's own kinds that do not decode get `InvalidSpec`; not NamespaceInventory,
    // which has no status subresource (a report would move its generation, and be stale at
    // once) and is discovery's alone: it is rewritten when discovery next writes it.
    let reporters: [BoxFuture<'static, ()>; 2] = [
        Box::pin(invalid::report::<ClusterDiscovery>(
            client.clone(),
            ctx.leadership.clone(),
            shared.events.clone(),
            ctx.shutdown.clone(),
        )),
        Box::pin(invalid::report::<WorkloadRevision>(
            client.clone(),
            ctx.leadership.clone(),
            shared.events.clone(),
            ctx.shutdown.clone(),
        )),
    ];
    // Each watch on a task of its own: a big cluster's initial state is decoded on every core.
    let watches = cache::spawn_watches(CONTROLLER, drives.into_iter().chain(reporters).collect());
    tokio::select! {
        _ = watches.join_all() => {}
        _ = synced(&shared, readiness) => {}
        _ = rebuild_loop(&shared) => {}
        _ = history_ticks(&shared) => {}
        _ = new_terms(&shared) => {}
        _ = missed_schedule_ticks(&shared) => {}
        _ = helm_key_ticks(&shared) => {}
        _ = heartbeat::run(&shared.ctx, &shared.reachability, &shared.pending) => {}
        _ = ctx.shutdown.cancelled() => {}
    }
    Ok(())
}

/// Each term of leadership this process begins starts from the baselines and replica
/// histories the inventories publish, as a process that has just started does: while it
/// followed, another leader may have recorded changes (and slots) and published what they
/// left; going on from what this process held before would record the changes again,
/// merged into one, and write its old slot's count over the slots since. A renewal that
/// came after its deadline is no new term (the Lease stayed this process's): what it holds,
/// the open slots' counts among it, is kept, and the namespaces are looked at again.
async fn new_terms(shared: &Shared) {
    let leadership = &shared.ctx.leadership;
    let mut acquisitions = std::pin::pin!(leadership.acquisitions());
    let mut term = leadership.term();
    while acquisitions.next().await.is_some() {
        if leadership.term() != term {
            term = leadership.term();
            shared.baselines.clear();
            shared.open_slots.clear();
        }
        shared.pending.mark(Mark::cluster());
    }
    futures::future::pending::<()>().await;
}

/// Every `period`, marks the namespaces `due` names, given the previous tick's time and
/// this one's: for what changes no object, so that no watch event would mark them.
async fn mark_every(
    shared: &Shared,
    period: Duration,
    due: impl Fn(jiff::Timestamp, jiff::Timestamp) -> BTreeSet<String>,
) {
    let mut since = jiff::Timestamp::now();
    loop {
        tokio::time::sleep(period).await;
        let now = jiff::Timestamp::now();
        for ns in due(since, now) {
            shared.pending.mark(Mark::namespace(&ns));
        }
        since = now;
    }
}

/// Marks a namespace once one of its CronJobs misses a fire ([`signals::missed_at`]): a fire
/// that does not happen changes no object, and `MissedSchedule` would wait for an unrelated
/// change.
async fn missed_schedule_ticks(shared: &Shared) {
    mark_every(shared, Duration::from_secs(30), |since, now| {
        shared
            .stores
            .cron_jobs
            .namespaces_where(|c| signals::missed_at(c).is_some_and(|at| since < at && at <= now))
    })
    .await
}

/// While the key of the Helm hashes could not be had, marks the namespaces with Helm
/// releases every [`helm_secrets::KEY_RETRY`], so that their releases are decoded again, with
/// their hashes once the key can be had, even when nothing in them changes.
async fn helm_key_ticks(shared: &Shared) {
    mark_every(shared, helm_secrets::KEY_RETRY, |_, _| {
        if shared.helm.keyless() {
            shared.stores.helm_secrets.namespaces_where(|_| true)
        } else {
            BTreeSet::new()
        }
    })
    .await
}

/// Reports readiness once every store has listed, and asks for the first (full) rebuild;
/// then waits forever.
async fn synced(shared: &Shared, readiness: Readiness) {
    while !shared.stores.synced() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    readiness.report_synced();
    tracing::info!("discovery caches synced");
    shared.pending.mark(Mark::cluster());
    futures::future::pending::<()>().await;
}

/// Marks the namespaces with an autoscaler when a replica-history slot closes, so each slot
/// is recorded even when nothing else in them changes.
async fn history_ticks(shared: &Shared) {
    // The longest sleep: a policy changed meanwhile is followed within it.
    const AT_MOST: Duration = Duration::from_secs(60);
    // Past the slot's end, so that the next look falls in the next slot.
    const PAST: Duration = Duration::from_millis(200);
    loop {
        let keeping = shared
            .stores
            .in_charge()
            .and_then(|cd| history::Keeping::of(&cd.spec.replica_history).ok());
        let now = jiff::Timestamp::now();
        let open = keeping.as_ref().map(|k| k.geometry.slot_at(now));
        let wait = open.map_or(AT_MOST, |slot| {
            Duration::try_from(slot.end.duration_since(now)).unwrap_or_default() + PAST
        });
        tokio::time::sleep(wait.min(AT_MOST)).await;
        let Some((keeping, open)) = keeping.zip(open) else {
            continue;
        };
        if keeping.geometry.slot_at(jiff::Timestamp::now()).start != open.start {
            let namespaces = shared.stores.hpas.namespaces_where(|h| h.desired.is_some());
            for ns in namespaces {
                shared.pending.mark(Mark::namespace(&ns));
            }
        }
    }
}

/// Rebuilds what changed, a short while after it changed, while this process leads and a
/// ClusterDiscovery is in charge. What a failed rebuild did not do is retried, on a backoff
/// (see [`Failed`](super::rebuild::Failed)); a namespace whose inventory write failed is
/// retried by itself (see [`Refusals`]).
async fn rebuild_loop(shared: &Arc<Shared>) {
    let mut state = RebuildState::default();
    let mut serving = Serving::default();
    // Consecutive failed rebuilds.
    let mut failures = Streak::default();
    loop {
        shared.pending.marked().await;
        tokio::time::sleep(DEBOUNCE).await;
        if !shared.stores.synced() {
            continue;
        }
        if !shared.ctx.leadership.is_leader() {
            // Followers keep their stores; the next leader starts from a full rebuild.
            serving.follow();
            shared.pending.take();
            continue;
        }
        let Some(cd) = shared.stores.in_charge() else {
            shared.pending.take();
            serving.idle();
            continue;
        };
        let mut dirty = shared.pending.take();
        let marked = dirty.namespaces.clone();
        let full = serving.begin(&cd);
        if full {
            // As at a start: what was written meanwhile (by another replica, say) is not
            // known, and namespaces deleted meanwhile are forgotten by the rebuild.
            state.progress.restart();
            state.written.clear();
            let mut all = state.progress.known();
            all.extend(shared.stores.namespaces.all().into_iter().map(|(n, _)| n));
            dirty.everything(all);
        }
        let metrics = &shared.ctx.metrics;
        let labels = ControllerLabels {
            controller: CONTROLLER.to_string(),
        };
        metrics.reconciliations.get_or_create(&labels).inc();
        let started = std::time::Instant::now();
        let result = rebuild(shared, &mut state, &cd, dirty, full).await;
        let took = started.elapsed().as_secs_f64();
        metrics
            .reconcile_duration
            .get_or_create(&labels)
            .observe(took);
        if full && result.is_ok() {
            tracing::info!(took_secs = took, "full discovery rebuild done");
        }
        match result {
            Ok(unwritten) => {
                failures.succeeded();
                retry_refused(shared, &mut state.refusals, unwritten);
            }
            Err(failed) => {
                count_error(metrics);
                let wait = failures.failed();
                tracing::warn!(
                    error = %brief(&failed.error),
                    unrecorded = failed.unrecorded.len(),
                    retry_in_secs = wait.as_secs(),
                    "discovery rebuild failed; retrying"
                );
                tokio::time::sleep(wait).await;
                // What was not done goes back: the namespaces marked, and the changes not
                // recorded (one recorded already, measured again against the newer
                // baseline, would be recorded as a change back); a failed full rebuild is
                // done in full again.
                if full {
                    serving.failed_full();
                }
                shared.pending.put_back(Dirty {
                    namespaces: marked,
                    deployments: failed.unrecorded,
                    ..Dirty::default()
                });
            }
        }
    }
}

/// Marks each namespace whose inventory write failed again once its own backoff is over,
/// while the loop goes on serving every other change.
fn retry_refused(shared: &Arc<Shared>, refusals: &mut Refusals, unwritten: BTreeSet<String>) {
    if !unwritten.is_empty() {
        count_error(&shared.ctx.metrics);
    }
    for ns in unwritten {
        let wait = refusals.refused(&ns);
        tracing::debug!(namespace = %ns, retry_in_secs = wait.as_secs(), "inventory write to be retried");
        let pending = shared.pending.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            pending.mark(Mark::namespace_and_cluster(&ns));
        });
    }
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
