//! The views of `moonin fleet`: each turns what every cluster answered into rows with a
//! `cluster` field. Pure.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use kube::ResourceExt as _;
use serde_json::{Value, json};

use super::{Cluster, Objects, Report, reaches};
use crate::api::conditions;

/// The clusters that answered, with their objects.
fn answered(clusters: &[Cluster]) -> impl Iterator<Item = (&str, &Objects)> {
    clusters
        .iter()
        .filter_map(|c| c.objects.as_ref().ok().map(|o| (c.context.as_str(), o)))
}

fn report(
    clusters: &[Cluster],
    columns: Vec<(&'static str, &'static str)>,
    items: Vec<Value>,
) -> Report {
    Report {
        columns,
        clusters: reaches(clusters),
        items,
    }
}

/// `fleet clusters`: each cluster's metadata and totals, from its ClusterDiscovery.
pub fn clusters(clusters: &[Cluster]) -> Report {
    let mut items = Vec::new();
    for (cluster, o) in answered(clusters) {
        if o.discoveries.is_empty() {
            items.push(json!({
                "cluster": cluster,
                "ready": "no ClusterDiscovery: apply one to inventory this cluster",
            }));
        }
        for cd in &o.discoveries {
            let status = cd.status.clone().unwrap_or_default();
            let meta = status.cluster.unwrap_or_default();
            let value = |s: Option<crate::api::discovery::Sourced>| s.map(|s| s.value);
            let totals = status.totals.unwrap_or_default();
            let nodes: i32 = status.node_groups.iter().map(|g| g.count).sum();
            let ready_nodes: i32 = status.node_groups.iter().map(|g| g.ready).sum();
            let ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == conditions::types::READY)
                .map_or_else(
                    || "Unknown".to_string(),
                    |c| format!("{} {}", c.status, c.reason),
                );
            items.push(json!({
                "cluster": cluster,
                "name": value(meta.name),
                "provider": value(meta.provider),
                "region": value(meta.region),
                "version": value(meta.kubernetes_version),
                "nodes": format!("{ready_nodes}/{nodes}"),
                "namespaces": totals.namespaces,
                "deployments": totals.deployments,
                "images": totals.images,
                "errorSignals": totals.error_signals,
                "ready": ready,
            }));
        }
    }
    report(
        clusters,
        vec![
            ("CLUSTER", "cluster"),
            ("NAME", "name"),
            ("PROVIDER", "provider"),
            ("REGION", "region"),
            ("VERSION", "version"),
            ("NODES", "nodes"),
            ("NAMESPACES", "namespaces"),
            ("DEPLOYMENTS", "deployments"),
            ("IMAGES", "images"),
            ("ERROR SIGNALS", "errorSignals"),
            ("READY", "ready"),
        ],
        items,
    )
}

/// `fleet images`: where each image runs (cluster, namespace, Deployments); only images
/// containing `filter` when given.
pub fn images(clusters: &[Cluster], filter: Option<&str>) -> Report {
    // (image, cluster, namespace) → Deployments.
    let mut at: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for (cluster, o) in answered(clusters) {
        for inv in &o.inventories {
            let ns = inv.namespace().unwrap_or_default();
            for d in inv.status.iter().flat_map(|s| &s.deployments) {
                for image in d
                    .images
                    .iter()
                    .filter(|i| filter.is_none_or(|f| i.contains(f)))
                {
                    at.entry((image.clone(), cluster.to_string(), ns.clone()))
                        .or_default()
                        .insert(d.name.clone());
                }
            }
        }
    }
    let items = at
        .into_iter()
        .map(|((image, cluster, namespace), deployments)| {
            json!({
                "cluster": cluster,
                "image": image,
                "namespace": namespace,
                "deployments": deployments,
            })
        })
        .collect();
    report(
        clusters,
        vec![
            ("IMAGE", "image"),
            ("CLUSTER", "cluster"),
            ("NAMESPACE", "namespace"),
            ("DEPLOYMENTS", "deployments"),
        ],
        items,
    )
}

/// `fleet signals`: the Deployments and CronJobs with error signals now.
pub fn signals(clusters: &[Cluster]) -> Report {
    let mut items = Vec::new();
    for (cluster, o) in answered(clusters) {
        for inv in &o.inventories {
            let ns = inv.namespace().unwrap_or_default();
            let Some(s) = &inv.status else { continue };
            for d in s.deployments.iter().filter(|d| !d.signals.is_empty()) {
                items.push(json!({
                    "cluster": cluster, "namespace": ns, "kind": "Deployment",
                    "name": d.name, "health": d.health, "signals": d.signals,
                }));
            }
            for c in s.cron_jobs.iter().filter(|c| !c.signals.is_empty()) {
                items.push(json!({
                    "cluster": cluster, "namespace": ns, "kind": "CronJob",
                    "name": c.name, "health": Value::Null, "signals": c.signals,
                }));
            }
        }
    }
    report(
        clusters,
        vec![
            ("CLUSTER", "cluster"),
            ("NAMESPACE", "namespace"),
            ("KIND", "kind"),
            ("NAME", "name"),
            ("HEALTH", "health"),
            ("SIGNALS", "signals"),
        ],
        items,
    )
}

/// `fleet changes`: the revisions recorded since `since`, newest first.
pub fn changes(clusters: &[Cluster], since: Timestamp) -> Report {
    let mut rows: Vec<(Timestamp, Value)> = Vec::new();
    for (cluster, o) in answered(clusters) {
        for r in o.revisions.iter().filter(|r| r.spec.observed_at.0 >= since) {
            let s = &r.spec;
            rows.push((
                s.observed_at.0,
                json!({
                    "cluster": cluster,
                    "namespace": r.namespace().unwrap_or_default(),
                    "workload": format!("{}/{}", s.workload.kind, s.workload.name),
                    "revision": s.revision,
                    "observedAt": s.observed_at.0.to_string(),
                    "changedBy": s.changed_by,
                    "summary": s.summary,
                }),
            ));
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    report(
        clusters,
        vec![
            ("CLUSTER", "cluster"),
            ("WHEN", "observedAt"),
            ("NAMESPACE", "namespace"),
            ("WORKLOAD", "workload"),
            ("REVISION", "revision"),
            ("BY", "changedBy"),
            ("SUMMARY", "summary"),
        ],
        rows.into_iter().map(|(_, v)| v).collect(),
    )
}

/// `fleet windows`: the scaling windows open now (every template with `all`), with the
/// actions applied and the next window.
pub fn windows(clusters: &[Cluster], all: bool) -> Report {
    let mut items = Vec::new();
    for (cluster, o) in answered(clusters) {
        let namespaced = o.templates.iter().map(|t| {
            let name = format!("{}/{}", t.namespace().unwrap_or_default(), t.name_any());
            (
                "ScalingTemplate",
                name,
                t.status.clone(),
                t.spec.actions.len(),
            )
        });
        let cluster_scoped = o.cluster_templates.iter().map(|t| {
            let kind = "ClusterScalingTemplate";
            (kind, t.name_any(), t.status.clone(), t.spec.actions.len())
        });
        for (kind, name, status, actions) in namespaced.chain(cluster_scoped) {
            let status = status.unwrap_or_default();
            if status.window.is_none() && !all {
                continue;
            }
            let applied = status
                .actions
                .iter()
                .filter(|a| a.state == "Applied")
                .count();
            let window = status.window.as_ref();
            items.push(json!({
                "cluster": cluster,
                "kind": kind,
                "template": name,
                "phase": status.phase,
                "trigger": window.map(|w| w.trigger.clone()),
                "opened": window.map(|w| w.start.0.to_string()),
                "closes": window.map(|w| w.end.0.to_string()),
                "next": status.next_windows.first().map(|w| w.start.0.to_string()),
                "applied": format!("{applied}/{actions}"),
            }));
        }
    }
    report(
        clusters,
        vec![
            ("CLUSTER", "cluster"),
            ("KIND", "kind"),
            ("TEMPLATE", "template"),
            ("PHASE", "phase"),
            ("TRIGGER", "trigger"),
            ("OPENED", "opened"),
            ("CLOSES", "closes"),
            ("NEXT", "next"),
            ("APPLIED", "applied"),
        ],
        items,
    )
}

/// `fleet envs`: each SandboxEnv's pools in every cluster that materialises a member (its
/// size wanted, ready, idle, claimed, saturated), and the members declared for a cluster
/// that no answering cluster runs.
pub fn envs(clusters: &[Cluster], now: Timestamp) -> Report {
    let mut items = Vec::new();
    // Env → the clusters it declares, and those found materialising a member.
    let mut declared: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (cluster, o) in answered(clusters) {
        for env in &o.envs {
            let ns = env.namespace().unwrap_or_default();
            let key = format!("{ns}/{}", env.name_any());
            let wants = declared.entry(key.clone()).or_default();
            wants.extend(env.spec.clusters.iter().map(|c| c.name.clone()));
            let members = env.status.iter().flat_map(|s| &s.members);
            for m in members.filter(|m| m.local) {
                found
                    .entry(key.clone())
                    .or_default()
                    .insert(m.cluster.clone());
                let pool = m.pool.as_deref().and_then(|p| {
                    o.pools
                        .iter()
                        .find(|x| x.name_any() == p && x.namespace().as_deref() == Some(&ns))
                });
                let status = pool.and_then(|p| p.status.clone()).unwrap_or_default();
                let scaling = status.auto_scaling.unwrap_or_default();
                let saturated = scaling.saturated_until.is_some_and(|t| t.0 > now);
                let desired = scaling.desired_replicas.or(pool.map(|p| p.spec.replicas));
                let note = if pool.is_none() {
                    "its SandboxPool is not created yet".to_string()
                } else if m.cluster == cluster {
                    String::new()
                } else {
                    format!("runs as cluster {}", m.cluster)
                };
                items.push(json!({
                    "env": key, "cluster": cluster, "member": m.name, "pool": m.pool,
                    "desired": desired, "ready": status.ready_replicas,
                    "idle": status.idle_replicas, "claimed": status.claimed_replicas,
                    "saturated": saturated, "note": note,
                }));
            }
        }
    }
    let silent = clusters.iter().filter(|c| c.objects.is_err()).count();
    for (env, names) in &declared {
        let seen = found.get(env);
        for name in names
            .iter()
            .filter(|n| seen.is_none_or(|s| !s.contains(*n)))
        {
            let mut note = format!("declared for {name}, not found there");
            if silent > 0 {
                note.push_str(&format!(" ({silent} cluster(s) did not answer)"));
            }
            items.push(json!({"env": env, "cluster": name, "note": note}));
        }
    }
    report(
        clusters,
        vec![
            ("ENV", "env"),
            ("CLUSTER", "cluster"),
            ("MEMBER", "member"),
            ("POOL", "pool"),
            ("DESIRED", "desired"),
            ("READY", "ready"),
            ("IDLE", "idle"),
            ("CLAIMED", "claimed"),
            ("SATURATED", "saturated"),
            ("NOTE", "note"),
        ],
        items,
    )
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
