//! Requests the benchmark sends itself: the write floors and one request's round trip on
//! this control plane, the manager's Events, and the cleanup.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use jiff::Timestamp;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use moonin::{
    api::scaling::ScalingTemplate,
    scaling::{load::observation_wait, owners::last_writes},
};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::{
    Carrier, POLL,
    shared::{
        report::progress,
        stats::{Stats, stats},
        wait,
    },
    targets::Targets,
};

/// Sends a merge patch of one annotation (to `value`, a new one each time) to every
/// target's Deployment and then its autoscaler (HPA or ScaledObject): writes no controller
/// reacts to. See [`send`].
pub async fn write_floor(t: &Targets, names: &[String], value: &str) -> Option<Stats> {
    let patch = json!({"metadata": {"annotations": {(crate::watch::FLOOR_KEY): value}}});
    send(t, names, &patch, &patch).await
}

/// The window's own spec writes, sent by the benchmark: at `open` each Deployment's replicas
/// and then its autoscaler's bounds as the actions set them; at close the autoscaler's
/// bounds back first and, once the HPA controller has acted on them (as Moonin waits, so
/// that the old bounds do not scale the Deployment right back), the Deployment's replicas.
/// HPAs only (see `measure`). The Deployment, HPA and
/// KEDA controllers react to these as to Moonin's. See [`send`].
pub async fn spec_floor(t: &Targets, names: &[String], open: bool) -> Option<Stats> {
    let (replicas, min, max) = if open {
        (crate::ACTION_MIN, crate::ACTION_MIN, crate::ACTION_MAX)
    } else {
        (crate::REPLICAS, crate::HPA_MIN, crate::HPA_MAX)
    };
    let deployment = json!({"spec": {"replicas": replicas}});
    let carrier = match t.carrier {
        Carrier::Hpa => json!({"spec": {"minReplicas": min, "maxReplicas": max}}),
        Carrier::ScaledObject => json!({"spec": {"minReplicaCount": min, "maxReplicaCount": max}}),
    };
    if open {
        send(t, names, &deployment, &carrier).await
    } else {
        send_close(t, names, &carrier, &deployment).await
    }
}

/// [`spec_floor`] at close: the autoscaler, its controller's observation, the Deployment.
async fn send_close(
    t: &Targets,
    names: &[String],
    carrier: &serde_json::Value,
    deployment: &serde_json::Value,
) -> Option<Stats> {
    let (carrier, deployment) = (Patch::Merge(carrier), Patch::Merge(deployment));
    let pp = PatchParams::default();
    let (carrier, deployment, pp) = (&carrier, &deployment, &pp);
    timed(names, |name, start, permits| async move {
        let mut out = Vec::new();
        let written = match t.carrier {
            Carrier::Hpa => permitted(&permits, t.hpas.patch(name, pp, carrier))
                .await
                .ok()
                .map(|h| {
                    // The Deployment is at the window's minimum as the restore begins.
                    let wait = observation_wait(&h, Some(crate::ACTION_MIN));
                    last_writes(&h.metadata).0.zip(Some(wait))
                }),
            Carrier::ScaledObject => permitted(&permits, t.scaled_objects.patch(name, pp, carrier))
                .await
                .ok()
                .map(|_| None),
        };
        let Some(written) = written else {
            return out;
        };
        out.push(ms_since(start));
        if let Some((w, cap)) = written {
            // Moonin's wait: a status write after the bounds, or the cap from the write
            // (`managedFields` times are whole seconds).
            let left = (w + cap).duration_since(Timestamp::now());
            let _ = wait::until(
                "the HPA controller to act on the restored bounds",
                Instant::now() + Duration::try_from(left).unwrap_or_default(),
                Duration::from_millis(20),
                || async {
                    let s = t.seen.lock().expect("seen");
                    s.observed
                        .get(name)
                        .is_some_and(|(spec, after)| *after && spec.is_some_and(|s| s >= w))
                        .then_some(())
                },
            )
            .await;
        }
        if permitted(&permits, t.deployments.patch(name, pp, deployment))
            .await
            .is_ok()
        {
            out.push(ms_since(start));
        }
        out
    })
    .await
}

/// Sends `deployment` to every target's Deployment and then `carrier` to its autoscaler,
/// as merge patches. See [`timed`].
async fn send(
    t: &Targets,
    names: &[String],
    deployment: &serde_json::Value,
    carrier: &serde_json::Value,
) -> Option<Stats> {
    let (deployment, carrier) = (Patch::Merge(deployment), Patch::Merge(carrier));
    let pp = PatchParams::default();
    let (deployment, carrier, pp) = (&deployment, &carrier, &pp);
    timed(names, |name, start, permits| async move {
        let mut out = Vec::new();
        if permitted(&permits, t.deployments.patch(name, pp, deployment))
            .await
            .is_ok()
        {
            out.push(ms_since(start));
        }
        let written = match t.carrier {
            Carrier::Hpa => permitted(&permits, t.hpas.patch(name, pp, carrier))
                .await
                .map(|_| ()),
            Carrier::ScaledObject => permitted(&permits, t.scaled_objects.patch(name, pp, carrier))
                .await
                .map(|_| ()),
        };
        if written.is_ok() {
            out.push(ms_since(start));
        }
        out
    })
    .await
}

/// Runs `step` for every target, all started at one instant, each request holding one of
/// [`moonin::scaling::commit::MAX_IN_FLIGHT`] permits as Moonin's writes do (a step waiting
/// between its writes holds none); each step returns the times (ms from that instant) of the
/// writes it got a response to.
async fn timed<'a, F, Fut>(names: &'a [String], step: F) -> Option<Stats>
where
    F: Fn(&'a str, Instant, Arc<Semaphore>) -> Fut,
    Fut: Future<Output = Vec<f64>>,
{
    let start = Instant::now();
    let permits = Arc::new(Semaphore::new(moonin::scaling::commit::MAX_IN_FLIGHT));
    let times: Vec<f64> = stream::iter(names)
        .map(|name| step(name, start, permits.clone()))
        .buffer_unordered(names.len().max(1))
        .flat_map(stream::iter)
        .collect()
        .await;
    stats(times)
}

/// One request, holding one of [`timed`]'s permits while it is in flight.
async fn permitted<T>(permits: &Semaphore, request: impl Future<Output = T>) -> T {
    let _permit = permits.acquire().await;
    request.await
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// p50 of 20 sequential PATCHes of a ConfigMap of our own, before the boundary: what one
/// request costs on this control plane when nothing else is going on.
pub async fn patch_round_trip(client: &Client, ns: &str) -> Option<f64> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = serde_json::from_value(json!({"metadata": {"name": "bench-probe"}})).ok()?;
    api.create(&PostParams::default(), &cm).await.ok()?;
    let mut times = Vec::new();
    for i in 0..20 {
        let started = Instant::now();
        api.patch(
            "bench-probe",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .ok()?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    stats(times).map(|s| s.p50)
}

/// Events from moonin-scaling: (objects, occurrences counting series, occurrences by
/// type and reason).
pub async fn moonin_events(client: &Client, ns: &str) -> (usize, i64, BTreeMap<String, i64>) {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let ours: Vec<_> = list
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("moonin-scaling"))
        .collect();
    let times = |e: &k8s_openapi::api::events::v1::Event| {
        e.series.as_ref().map_or(1, |s| i64::from(s.count))
    };
    let mut by_reason = BTreeMap::new();
    for e in &ours {
        let key = format!(
            "{} {}",
            e.type_.as_deref().unwrap_or("?"),
            e.reason.as_deref().unwrap_or("?")
        );
        *by_reason.entry(key).or_default() += times(e);
    }
    (ours.len(), ours.iter().map(times).sum(), by_reason)
}

/// Deletes the templates while the manager runs (their finalizers revert the targets),
/// then lets the namespace go. Without a manager, or if it does not finish, the
/// finalizers are removed so the namespace is not stuck.
pub async fn cleanup(client: &Client, ns: &str, manager_running: bool) {
    let templates: Api<ScalingTemplate> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    // One deletecollection may stop part way (the API server gives it a minute): asked
    // again until every template is being deleted.
    for _ in 0..10 {
        let _ = templates
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        let list = templates.list(&ListParams::default()).await;
        if list.is_ok_and(|l| {
            l.items
                .iter()
                .all(|t| t.metadata.deletion_timestamp.is_some())
        }) {
            break;
        }
    }
    let gone = if manager_running {
        wait::until_none_left(
            "the templates to be deleted",
            &templates,
            &ListParams::default(),
            Instant::now() + Duration::from_secs(120),
            POLL,
        )
        .await
    } else {
        Err("no manager".into())
    };
    match gone {
        Ok(()) => progress(&format!(
            "cleanup: templates deleted (finalizers ran) in {:.1} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => {
            progress(&format!("cleanup: {e}; removing the finalizers"));
            if let Ok(list) = templates.list(&ListParams::default()).await {
                for t in list.items {
                    let _ = templates
                        .patch(
                            &t.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                    let _ = templates
                        .delete(&t.name_any(), &DeleteParams::default())
                        .await;
                }
            }
        }
    }
}
