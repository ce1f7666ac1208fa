//! Wiring: shared reflectors for Deployments, HPAs and ScaledObjects, one controller per
//! template kind, and the sweep of overrides whose template is gone.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{
    ResourceExt,
    core::object::HasStatus,
    runtime::{
        Controller,
        controller::Action,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::Notify;

use super::commit::{CONTROLLER, CommitError, Writer};
use super::decide::{self, AutoscalerKind, TargetKey};
use super::index::{Index, hpa_target, owner_uid, scaled_object_target};
use super::load::{self, Stores, Template};
use super::owners;
use super::wire::WireDeployment;
use crate::api::keda::ScaledObject;
use crate::api::scaling::{ClusterScalingTemplate, ScalingTemplate, ScalingTemplateStatus};
use crate::runtime::{
    backoff::Backoff, cache, cache::OwnWrites, events::Publisher, facts, invalid,
};
use crate::runtime::{
    context::{Context, Readiness, Registered},
    metrics::{ControllerLabels, EdgeLabels, ErrorLabels},
};

/// How long the sweep waits between passes when nothing wakes it.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// … and while a swept Deployment waits for its autoscaler.
const WAITING_SWEEP: Duration = Duration::from_secs(2);

/// The scaling controller, as the manager registers it.
pub fn registered() -> Registered {
    Registered {
        name: CONTROLLER,
        run: |ctx, readiness| -> BoxFuture<'static, anyhow::Result<()>> {
            Box::pin(run(ctx, readiness))
        },
    }
}

fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(500)
}

fn trim_hpa(h: &mut HorizontalPodAutoscaler) {
    owners::keep_autoscaler_reads(&mut h.metadata, AutoscalerKind::Hpa);
    // Only whether the HPA controller has seen the current spec is read.
    let observed = h.status.as_ref().and_then(|s| s.observed_generation);
    h.status = observed.map(
        |g| k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerStatus {
            observed_generation: Some(g),
            ..Default::default()
        },
    );
}

fn trim_template<T: kube::Resource>(t: &mut T) {
    cache::strip_last_applied(t.meta_mut());
}

fn trim_scaled_object(s: &mut ScaledObject) {
    owners::keep_autoscaler_reads(&mut s.metadata, AutoscalerKind::ScaledObject);
}

/// Templates interested in a change to an object scaling (or being) `key` and carrying
/// the owner `uid`.
fn interested<T: Template>(
    store: &Store<T>,
    key: Option<&TargetKey>,
    uid: Option<&str>,
) -> Vec<ObjectRef<T>> {
    store
        .state()
        .iter()
        .filter(|t| {
            uid.is_some_and(|u| t.meta().uid.as_deref() == Some(u))
                || key.is_some_and(|k| {
                    t.actions().iter().any(|a| {
                        a.target.name == k.name
                            && a.target
                                .namespace
                                .as_deref()
                                .or(t.meta().namespace.as_deref())
                                == Some(k.namespace.as_str())
                    })
                })
        })
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

struct Shared {
    stores: Stores,
    writer: Writer,
    metrics: crate::runtime::metrics::Metrics,
    leader: crate::runtime::leader::Leadership,
    sweep: Arc<Notify>,
    /// Every cache has listed once: until then no template is decided.
    synced: AtomicBool,
}

async fn reconcile<T>(tpl: Arc<T>, shared: Arc<Shared>) -> Result<Action, CommitError>
where
    T: Template + HasStatus<Status = ScalingTemplateStatus>,
{
    let labels = ControllerLabels {
        controller: CONTROLLER.to_string(),
    };
    shared.metrics.reconciliations.get_or_create(&labels).inc();
    // A process that leads at once (a restart under the same identity) is asked to
    // reconcile every template before its Deployment and HPA caches have listed: decided
    // then, a target would look unscaled, and a Deployment whose HPA was just restored
    // would be restored at once, for the HPA controller to scale straight back. Every
    // template is asked again once they have.
    if !shared.leader.is_leader() || !shared.synced.load(Ordering::Acquire) {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let snapshot = load::snapshot(tpl.as_ref(), &shared.stores);
    if behind_own_writes(tpl.as_ref(), &snapshot, &shared.writer.own) {
        // Decided now, the plan would repeat writes the caches do not show yet.
        return Ok(Action::requeue(OWN_WRITE_RECHECK));
    }
    let now = Timestamp::now();
    let plan = decide::decide(&snapshot, now);
    if snapshot
        .targets
        .values()
        .flat_map(|t| {
            t.autoscalers
                .iter()
                .map(|a| &a.marks)
                .chain(t.deployment.as_ref().map(|d| &d.marks))
        })
        .any(|m| m.owner.is_some() && !m.owner_live)
    {
        shared.sweep.notify_one();
    }
    let result = shared.writer.commit(tpl.as_ref(), &plan, now).await;
    shared
        .metrics
        .reconcile_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    let retry = result?;
    if !plan.defer_status {
        // The status written names the edges: no later decision counts them again.
        let done = Timestamp::now();
        for e in &plan.edges {
            let labels = EdgeLabels {
                edge: if e.opens { "open" } else { "close" },
            };
            let delay = done.duration_since(e.at).as_secs_f64().max(0.0);
            shared
                .metrics
                .scaling_edge_delay
                .get_or_create(&labels)
                .observe(delay);
        }
    }
    let wait = plan.requeue_at.duration_since(Timestamp::now());
    let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
    Ok(Action::requeue(retry.map_or(wait, |r| r.min(wait))))
}

/// How soon a template whose caches miss its own last writes is looked at again.
const OWN_WRITE_RECHECK: Duration = Duration::from_millis(50);

/// Whether the template or one of its targets, as cached, predates this process's last write
/// of it.
fn behind_own_writes<T: Template>(tpl: &T, snap: &decide::Snapshot, own: &OwnWrites) -> bool {
    let ns = tpl.namespace().unwrap_or_default();
    let rv = tpl.resource_version().unwrap_or_default();
    if own.behind(&T::kind(&()), &ns, &tpl.name_any(), &rv) {
        return true;
    }
    snap.targets.iter().any(|(key, t)| {
        let ns = key.namespace.as_str();
        t.deployment
            .iter()
            .any(|d| own.behind("Deployment", ns, &d.name, &d.resource_version))
            || t.autoscalers.iter().any(|a| {
                let kind = decide::ObjectKind::from(a.kind).as_str();
                own.behind(kind, ns, &a.name, &a.resource_version)
            })
    })
}

fn error_policy<T>(tpl: Arc<T>, err: &CommitError, shared: Arc<Shared>) -> Action
where
    T: Template,
{
    let reason = match err {
        CommitError::Conflict(_) => "Conflict",
        CommitError::NotLeader => "NotLeader",
        CommitError::Template(_) => "TemplateWriteFailed",
    };
    shared
        .metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: CONTROLLER.to_string(),
            reason: reason.to_string(),
        })
        .inc();
    match err {
        CommitError::Conflict(what) => {
            tracing::debug!(template = %tpl.name_any(), %what, "conflict; retrying");
            Action::requeue(Duration::from_millis(200))
        }
        CommitError::NotLeader => Action::await_change(),
        CommitError::Template(e) => {
            let key = crate::runtime::reference(tpl.as_ref());
            let message = crate::runtime::errors::brief(e);
            let step = shared.writer.backoff.failed(
                &key,
                tpl.meta().generation,
                tokio::time::Instant::now(),
                &message,
            );
            if step.counted {
                tracing::warn!(
                    template = %key,
                    error = %message,
                    retry_in_seconds = step.wait.as_secs(),
                    "could not write the template"
                );
            }
            Action::requeue(step.wait)
        }
    }
}

/// The sweep: reverts overrides whose template is gone. Runs once the caches are warm,
/// whenever a reconcile sees such an override, and every minute.
async fn sweep_loop(shared: Arc<Shared>, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        // A Deployment waiting for its autoscaler to act on restored bounds is looked at
        // again soon.
        let mut next = SWEEP_INTERVAL;
        if shared.leader.is_leader() {
            let live: HashSet<String> = load::live_uids(&shared.stores);
            let targets = load::orphaned_targets(&shared.stores, &live);
            if decide::sweep_waits(&targets) {
                next = WAITING_SWEEP;
            }
            let ops = decide::sweep(&targets);
            if !ops.is_empty() {
                match shared.writer.sweep(&ops).await {
                    // A refusal is not sent again at once: it waits for the next sweep.
                    Ok(s) if s.refused > 0 => {
                        tracing::info!(
                            writes = s.written,
                            refused = s.refused,
                            "swept overrides of deleted templates; refused writes wait for the next sweep"
                        );
                    }
                    Ok(s) => {
                        tracing::info!(writes = s.written, "swept overrides of deleted templates");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "sweep interrupted; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = shared.sweep.notified() => {}
            _ = tokio::time::sleep(next) => {}
        }
    }
}

/// Runs the scaling controller until shutdown.
pub async fn run(ctx: Context, readiness: Readiness) -> anyhow::Result<()> {
    let client = ctx.client.clone();
    let (ns_tx, ns_rx) = cache::requests::<ScalingTemplate>();
    let (cl_tx, cl_rx) = cache::requests::<ClusterScalingTemplate>();
    let echoes = cache::Echoes::default();
    let (stores, mut drives) = caches(&client, ns_tx.clone(), cl_tx.clone(), &echoes).await;
    let (ns_store, cl_store) = (stores.templates.clone(), stores.cluster_templates.clone());
    ctx.metrics.facts.add(Box::new(move || {
        let (ns, cl) = (ns_store.state(), cl_store.state());
        let statuses = ns.iter().map(|t| t.status.as_ref());
        facts::template_facts(statuses.chain(cl.iter().map(|t| t.status.as_ref())))
    }));
    let events = Publisher::new(client.clone(), "moonin-scaling");
    drives.push(Box::pin(invalid::report::<ScalingTemplate>(
        client.clone(),
        ctx.leadership.clone(),
        events.clone(),
        ctx.shutdown.clone(),
    )));
    drives.push(Box::pin(invalid::report::<ClusterScalingTemplate>(
        client.clone(),
        ctx.leadership.clone(),
        events.clone(),
        ctx.shutdown.clone(),
    )));
    let leader = ctx.leadership.clone();
    let is_leader = {
        let l = leader.clone();
        Arc::new(move || l.is_leader()) as Arc<dyn Fn() -> bool + Send + Sync>
    };
    let shared = Arc::new(Shared {
        stores: stores.clone(),
        writer: Writer {
            client,
            events,
            metrics: ctx.metrics.clone(),
            is_leader,
            in_flight: Arc::new(super::commit::Permits::new(super::commit::MAX_IN_FLIGHT)),
            backoff: Arc::new(Backoff::default()),
            echoes,
            own: crate::runtime::cache::OwnWrites::default(),
        },
        metrics: ctx.metrics.clone(),
        leader,
        sweep: Arc::new(Notify::new()),
        synced: AtomicBool::new(false),
    });
    let ns_ctl = controller(&ctx, stores.templates.clone(), ns_rx, shared.clone());
    let cl_ctl = controller(
        &ctx,
        stores.cluster_templates.clone(),
        cl_rx,
        shared.clone(),
    );
    let sweeper = {
        let shared = shared.clone();
        let shutdown = ctx.shutdown.clone();
        async move {
            // The only waiter on the caches' readiness: kube's `Store::wait_until_ready`
            // wakes one of several concurrent waiters.
            stores.wait_until_ready().await;
            shared.synced.store(true, Ordering::Release);
            for t in stores.templates.state() {
                let _ = ns_tx.unbounded_send(ObjectRef::from_obj(t.as_ref()));
            }
            for t in stores.cluster_templates.state() {
                let _ = cl_tx.unbounded_send(ObjectRef::from_obj(t.as_ref()));
            }
            readiness.report_synced();
            tracing::info!("scaling caches synced");
            // A new leader sweeps at once: the previous one may have died mid-revert.
            let notify = shared.sweep.clone();
            let wake = shared.leader.acquisitions().for_each(move |()| {
                notify.notify_one();
                futures::future::ready(())
            });
            futures::future::join(sweep_loop(shared, shutdown), wake).await;
        }
    };
    let watches = cache::spawn_watches(CONTROLLER, drives);
    tokio::select! {
        _ = watches.join_all() => {}
        _ = futures::future::join3(ns_ctl, cl_ctl, sweeper) => {}
        _ = ctx.shutdown.cancelled() => {}
    }
    Ok(())
}

/// The caches the scaling controller reads, and the futures that drive them. Each template
/// kind is watched once: its cache feeds its controller; a change to a Deployment, HPA or
/// ScaledObject reconciles the templates interested in it.
async fn caches(
    client: &kube::Client,
    ns_tx: futures::channel::mpsc::UnboundedSender<ObjectRef<ScalingTemplate>>,
    cl_tx: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterScalingTemplate>>,
    echoes: &cache::Echoes,
) -> (Stores, Vec<BoxFuture<'static, ()>>) {
    let (ns_store, ns_drive) = cache::cache::<ScalingTemplate>(
        client.clone(),
        watch_config(),
        trim_template,
        vec![cache::reconcile_itself(ns_tx.clone(), echoes.clone())],
    );
    let (cl_store, cl_drive) = cache::cache::<ClusterScalingTemplate>(
        client.clone(),
        watch_config(),
        trim_template,
        vec![cache::reconcile_itself(cl_tx.clone(), echoes.clone())],
    );
    // The index's trigger first: the reconciles the others ask for read it.
    let index = Index::default();
    macro_rules! triggers {
        ($index:expr, $target:expr) => {
            vec![
                $index,
                trigger(ns_store.clone(), ns_tx.clone(), $target),
                trigger(cl_store.clone(), cl_tx.clone(), $target),
            ]
        };
    }
    // Deployments are read off the wire as no more than the cache keeps of them.
    let (deployments, dep_drive) = cache::cache_from::<WireDeployment, Deployment>(
        client.clone(),
        watch_config(),
        Deployment::from,
        triggers!(index.deployments(), deployment_target),
    );
    let (hpas, hpa_drive) = cache::cache::<HorizontalPodAutoscaler>(
        client.clone(),
        watch_config(),
        trim_hpa,
        triggers!(index.hpas(), hpa_target),
    );
    let mut drives = vec![ns_drive, cl_drive, dep_drive, hpa_drive];
    let scaled_objects = if cache::installed::<ScaledObject>(client).await {
        let (s, drive) = cache::cache::<ScaledObject>(
            client.clone(),
            watch_config(),
            trim_scaled_object,
            triggers!(index.scaled_objects(), scaled_object_target),
        );
        drives.push(drive);
        Some(s)
    } else {
        tracing::info!(
            "KEDA's ScaledObject CRD is not installed: ScaledObjects are ignored (restart Moonin after installing KEDA)"
        );
        None
    };
    let stores = Stores {
        templates: ns_store,
        cluster_templates: cl_store,
        deployments,
        hpas,
        scaled_objects,
        index,
    };
    (stores, drives)
}

/// The controller of template kind `T`, on its cache, reconciled on `requests` and on
/// every leadership acquisition.
fn controller<T>(
    ctx: &Context,
    store: Store<T>,
    requests: futures::channel::mpsc::UnboundedReceiver<ObjectRef<T>>,
    shared: Arc<Shared>,
) -> impl std::future::Future<Output = ()>
where
    T: Template + HasStatus<Status = ScalingTemplateStatus>,
{
    Controller::for_stream(futures::stream::pending(), store)
        .reconcile_on(requests)
        .reconcile_all_on(ctx.leadership.acquisitions())
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile::<T>, error_policy::<T>, shared)
        .for_each(cache::controller_result(T::KIND.as_str()))
}

/// A trigger for templates of kind `T`: a change to an object scaling (or being) a target
/// an action names, or carrying the template's marks, reconciles the template.
fn trigger<T, K>(
    store: Store<T>,
    tx: futures::channel::mpsc::UnboundedSender<ObjectRef<T>>,
    target: fn(&K) -> Option<TargetKey>,
) -> cache::Trigger<K>
where
    T: Template,
    K: kube::Resource + 'static,
{
    Box::new(move |o: &K| {
        for r in interested(&store, target(o).as_ref(), owner_uid(o.meta()).as_deref()) {
            let _ = tx.unbounded_send(r);
        }
    })
}

fn deployment_target(d: &Deployment) -> Option<TargetKey> {
    Some(TargetKey {
        namespace: d.namespace().unwrap_or_default(),
        name: d.name_any(),
    })
}
