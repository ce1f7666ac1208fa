//! Sandbox pools on the real control plane: kwok runs the Pods, `moonin run` runs as its
//! ServiceAccount from `config/rbac`.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use moonin::api::sandbox::{SandboxClaim, SandboxEnv, SandboxPool};
use serde_json::{Value, json};

use crate::harness::{Refusal, wait_for};
use crate::require_cluster;
use crate::scaling::Rig;

fn env(name: &str, replicas: i32, recycle: &str) -> SandboxEnv {
    serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxEnv",
        "metadata": {"name": name},
        "spec": {
            "clusters": [
                {"name": "local", "members": [{
                    "name": "a",
                    "spec": {
                        "replicas": replicas,
                        "recyclePolicy": recycle,
                        "template": {
                            "metadata": {"labels": {"app": "sandbox"}},
                            "spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}
                        }
                    }
                }]},
                {"name": "elsewhere", "members": [{
                    "name": "b",
                    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}}}
                }]}
            ]
        }
    }))
    .expect("env")
}

pub(crate) fn claim(name: &str, pool: &str, lifetime: Option<&str>) -> SandboxClaim {
    let mut v = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"poolRef": {"name": pool}}
    });
    if let Some(l) = lifetime {
        v["spec"]["lifetime"] = json!(l);
    }
    serde_json::from_value(v).expect("claim")
}

pub(crate) async fn pool_status(rig: &Rig, name: &str) -> Value {
    let api: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    api.get(name)
        .await
        .ok()
        .and_then(|p| serde_json::to_value(p.status).ok())
        .unwrap_or(Value::Null)
}

pub(crate) async fn idle_is(rig: &Rig, pool: &str, idle: i64) {
    wait_for(
        &format!("{pool}: {idle} idle"),
        Duration::from_secs(60),
        || async { (pool_status(rig, pool).await["idleReplicas"] == idle).then_some(()) },
    )
    .await;
}

async fn bound(rig: &Rig, name: &str) -> Value {
    let api: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    wait_for(
        &format!("claim {name} Bound"),
        Duration::from_secs(30),
        || async {
            let c = api.get(name).await.ok()?;
            let s = serde_json::to_value(c.status?).ok()?;
            (s["phase"] == "Bound").then_some(s)
        },
    )
    .await
}

pub(crate) async fn pods(rig: &Rig) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    api.list(&ListParams::default().labels("moonin.io/pool"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
async fn the_pool_fills_claims_bind_fifo_and_released_sandboxes_are_replaced() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("py", 3, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "py-a", 3).await;

    // The remote member is listed, not materialised.
    let e = wait_for("env status", Duration::from_secs(20), || async {
        let s = serde_json::to_value(envs.get("py").await.ok()?.status?).ok()?;
        (s["localMembers"] == 1).then_some(s)
    })
    .await;
    let members = e["members"].as_array().cloned().unwrap_or_default();
    assert!(
        members
            .iter()
            .any(|m| m["name"] == "b" && m["local"] == false && m["cluster"] == "elsewhere"),
        "{e}"
    );
    let pools: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    assert!(pools.get_opt("py-b").await.expect("get").is_none());

    // Two claims bind, oldest first, each to its own Ready Pod with an IP.
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("first", "py-a", None))
        .await
        .expect("claim");
    claims
        .create(&PostParams::default(), &claim("second", "py-a", None))
        .await
        .expect("claim");
    let a = bound(&rig, "first").await;
    let b = bound(&rig, "second").await;
    assert_ne!(a["podName"], b["podName"], "one Pod per claim");
    assert!(
        a["podIP"].is_string() && a["waitMilliseconds"].is_number(),
        "{a}"
    );
    let all = pods(&rig).await;
    let claimed: Vec<&Pod> = all
        .iter()
        .filter(|p| p.labels().get("moonin.io/state").map(String::as_str) == Some("claimed"))
        .collect();
    assert_eq!(claimed.len(), 2);
    idle_is(&rig, "py-a", 1).await;
    assert_eq!(pool_status(&rig, "py-a").await["claimedReplicas"], 2);

    // Deleting a claim releases it: Replace deletes the Pod and a fresh one takes its place.
    let released = a["podName"].as_str().unwrap_or_default().to_string();
    claims
        .delete("first", &DeleteParams::default())
        .await
        .expect("delete claim");
    wait_for(
        "the released Pod to go",
        Duration::from_secs(30),
        || async { (!pods(&rig).await.iter().any(|p| p.name_any() == released)).then_some(()) },
    )
    .await;
    idle_is(&rig, "py-a", 2).await;
    assert_eq!(pods(&rig).await.len(), 3, "no over-creation");

    // A claim for a pool that does not exist says so.
    claims
        .create(&PostParams::default(), &claim("lost", "nope", None))
        .await
        .expect("claim");
    rig.condition_of::<SandboxClaim>("lost", "Ready", "False", "PoolNotFound")
        .await;
    // The pool appears, empty: the claim no longer says it is missing, it is queued.
    let pools: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    let found: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "nope"},
        "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}}}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &found)
        .await
        .expect("pool");
    rig.condition_of::<SandboxClaim>("lost", "Ready", "False", "Queued")
        .await;
    // It grows: the claim binds.
    pools
        .patch(
            "nope",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("grow");
    bound(&rig, "lost").await;
    rig.condition_of::<SandboxClaim>("lost", "Ready", "True", "Bound")
        .await;

    // A lifetime ends the claim.
    claims
        .create(&PostParams::default(), &claim("brief", "py-a", Some("3s")))
        .await
        .expect("claim");
    let s = bound(&rig, "brief").await;
    let pod = s["podName"].as_str().unwrap_or_default().to_string();
    wait_for("brief to be Released", Duration::from_secs(30), || async {
        let c = claims.get("brief").await.ok()?;
        (c.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    wait_for(
        "its Pod to be replaced",
        Duration::from_secs(30),
        || async { (!pods(&rig).await.iter().any(|p| p.name_any() == pod)).then_some(()) },
    )
    .await;
    idle_is(&rig, "py-a", 2).await;
    envs.delete("py", &DeleteParams::default())
        .await
        .expect("delete env");
}

#[tokio::test]
async fn reuse_returns_a_released_sandbox_to_the_idle_set() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-reuse", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("re", 1, "Reuse"))
        .await
        .expect("env");
    idle_is(&rig, "re-a", 1).await;
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("c", "re-a", None))
        .await
        .expect("claim");
    let s = bound(&rig, "c").await;
    let pod = s["podName"].as_str().unwrap_or_default().to_string();
    idle_is(&rig, "re-a", 0).await;
    claims
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete");
    idle_is(&rig, "re-a", 1).await;
    let now = pods(&rig).await;
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].name_any(), pod, "the same Pod is idle again");
    assert!(!now[0].annotations().contains_key("moonin.io/claim"));
}

#[tokio::test]
async fn a_claim_made_while_the_manager_is_down_counts_its_whole_wait() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-wait", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("w", 1, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "w-a", 1).await;
    rig.kill();
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("c", "w-a", None))
        .await
        .expect("claim");
    let down = Duration::from_secs(3);
    tokio::time::sleep(down).await;
    rig.start().await;
    // The new process first sees the claim seconds after its creation: the wait is counted
    // from the creation time, not from that sighting.
    let s = bound(&rig, "c").await;
    let wait = s["waitMilliseconds"].as_i64().unwrap_or_default();
    assert!(
        wait >= down.as_millis() as i64,
        "waitMilliseconds {wait}: {s}"
    );
    // The claim's reconcile waited for the Pool cache: a start never reports a Pool that
    // exists as missing.
    let missing = rig.events("c", "PoolNotFound").await;
    assert!(missing.is_empty(), "reported missing at start: {missing:?}");
}

/// An Env with one local member `a` in the autoscaling group `g`.
pub(crate) fn autoscaled_env(name: &str, replicas: i32, group: Value) -> SandboxEnv {
    let mut g = group;
    g["name"] = json!("g");
    serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxEnv",
        "metadata": {"name": name},
        "spec": {
            "autoscaling": {"groups": [g]},
            "clusters": [{"name": "local", "members": [{
                "name": "a",
                "config": {"scalingGroup": "g"},
                "spec": {
                    "replicas": replicas,
                    "template": {
                        "metadata": {"labels": {"app": "sandbox"}},
                        "spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}
                    }
                }
            }]}]
        }
    }))
    .expect("env")
}

pub(crate) async fn pool_spec_replicas(rig: &Rig, name: &str) -> Option<i32> {
    let api: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    Some(api.get(name).await.ok()?.spec.replicas)
}

/// The field managers that own `spec.replicas` of a Pool.
async fn replicas_owners(rig: &Rig, name: &str) -> Vec<String> {
    let api: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    let Ok(p) = api.get(name).await else {
        return Vec::new();
    };
    p.metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.get("f:spec")
                    .and_then(|s| s.get("f:replicas"))
                    .is_some()
            })
        })
        .filter_map(|m| m.manager)
        .collect()
}

async fn create_claims(rig: &Rig, prefix: &str, n: usize) {
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    for i in 0..n {
        claims
            .create(
                &PostParams::default(),
                &claim(&format!("{prefix}-{i}"), "as-a", None),
            )
            .await
            .expect("claim");
    }
}

async fn bound_count(rig: &Rig) -> usize {
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count()
}

/// A Pod that carries a Pool's label but another controller (here a ConfigMap; in life the
/// Pods of a Pool deleted and created again under its name, until the garbage collector
/// deletes them) is not the Pool's: it neither counts as one of its replicas nor goes to
/// a claim.
#[tokio::test]
async fn a_pod_with_the_pools_label_and_another_owner_is_not_the_pools() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-stray", &["--controllers", "sandbox"]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(rig.client.clone(), rig.ns());
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner"}})).expect("configmap");
    let owner = config_maps
        .create(&PostParams::default(), &owner)
        .await
        .expect("configmap");
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let stray: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "stray",
            "labels": {"moonin.io/pool": "st-a", "app": "sandbox"},
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.uid().expect("uid"), "controller": true,
            }],
        },
        "spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]},
    }))
    .expect("pod");
    pod_api
        .create(&PostParams::default(), &stray)
        .await
        .expect("stray pod");
    wait_for("the stray Pod Ready", Duration::from_secs(30), || async {
        let p = pod_api.get("stray").await.ok()?;
        p.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("st", 1, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "st-a", 1).await;
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("c", "st-a", None))
        .await
        .expect("claim");
    let s = bound(&rig, "c").await;
    assert_ne!(s["podName"], "stray", "{s}");
    let stray = pod_api.get("stray").await.expect("the stray Pod stays");
    assert!(!stray.annotations().contains_key("moonin.io/claim"));
    let own: Vec<String> = pods(&rig)
        .await
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.kind == "SandboxPool"))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(own.len(), 1, "the Pool made its own replica: {own:?}");
    assert_eq!(s["podName"], own[0], "{s}");
}

#[tokio::test]
async fn a_bound_claim_whose_pod_is_deleted_fails_at_once_not_at_its_lifetimes_end() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-lost", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("lo", 2, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "lo-a", 2).await;
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("held", "lo-a", Some("1h")))
        .await
        .expect("claim");
    let s = bound(&rig, "held").await;
    let pod = s["podName"].as_str().expect("podName").to_string();
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    pod_api
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the bound Pod");
    // Its lifetime has an hour left and nothing else changes the claim: only the Pod's
    // deletion can tell the claim.
    let c = rig
        .condition_of::<SandboxClaim>("held", "Ready", "False", "PodLost")
        .await;
    assert!(
        c["message"].as_str().is_some_and(|m| m.contains(&pod)),
        "{c}"
    );
    let status = claims
        .get("held")
        .await
        .expect("claim")
        .status
        .expect("status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    // The Event follows the status write: wait for it, then make sure it came once.
    wait_for("the PodLost Event", Duration::from_secs(10), || async {
        (!rig.events("held", "PodLost").await.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rig.events("held", "PodLost").await.len(), 1);
}

/// An Env of two local members, `a` and `b`, each of `replicas` Pods, no autoscaling.
fn two_member_env(name: &str, replicas: i32) -> SandboxEnv {
    let member = |m: &str| {
        json!({"name": m, "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}}
        }})
    };
    serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxEnv",
        "metadata": {"name": name},
        "spec": {"clusters": [{"name": "local", "members": [member("a"), member("b")]}]}
    }))
    .expect("env")
}

#[tokio::test]
async fn claims_both_pools_of_an_env_race_for_bind_once_and_never_move() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-two", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    const CLAIMS: usize = 12;
    envs.create(&PostParams::default(), &two_member_env("tw", CLAIMS as i32))
        .await
        .expect("env");
    idle_is(&rig, "tw-a", CLAIMS as i64).await;
    idle_is(&rig, "tw-b", CLAIMS as i64).await;
    // Every Pod each claim's status ever names, as the watch sees it.
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    let named: Arc<Mutex<std::collections::BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let watch = {
        let (claims, named) = (claims.clone(), named.clone());
        tokio::spawn(async move {
            let mut events = watcher(claims, watcher::Config::default()).boxed();
            while let Some(e) = events.next().await {
                if let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = e
                    && let Some(pod) = c.status.and_then(|s| s.pod_name)
                {
                    let mut named = named.lock().expect("lock");
                    named
                        .entry(c.metadata.name.unwrap_or_default())
                        .or_default()
                        .insert(pod);
                }
            }
        })
    };
    // The claims arrive while the manager is down: both Pools see every one of them at once.
    rig.kill();
    for i in 0..CLAIMS {
        let c: SandboxClaim = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxClaim",
            "metadata": {"name": format!("c{i}")},
            "spec": {"envRef": {"name": "tw"}}
        }))
        .expect("claim");
        claims
            .create(&PostParams::default(), &c)
            .await
            .expect("claim");
    }
    rig.start().await;
    wait_for("every claim Bound", Duration::from_secs(60), || async {
        (bound_count(&rig).await == CLAIMS).then_some(())
    })
    .await;
    // The Pods of the binds that lost are freed: exactly one claimed Pod per claim.
    wait_for(
        "one claimed Pod per claim",
        Duration::from_secs(30),
        || async {
            let claimed = pods(&rig)
                .await
                .iter()
                .filter(|p| p.annotations().contains_key("moonin.io/claim"))
                .count();
            (claimed == CLAIMS).then_some(())
        },
    )
    .await;
    // Let any late write of a losing bind land before judging.
    tokio::time::sleep(Duration::from_secs(3)).await;
    watch.abort();
    let named = named.lock().expect("lock").clone();
    assert_eq!(named.len(), CLAIMS, "{named:?}");
    let moved: Vec<_> = named.iter().filter(|(_, pods)| pods.len() > 1).collect();
    assert!(
        moved.is_empty(),
        "claims that moved to another Pod: {moved:?}"
    );
    let distinct: BTreeSet<&String> = named.values().flatten().collect();
    assert_eq!(distinct.len(), CLAIMS, "one Pod per claim: {named:?}");
    let all = pods(&rig).await;
    for (claim, pods_named) in &named {
        let pod = pods_named.first().expect("named");
        let p = all
            .iter()
            .find(|p| &p.name_any() == pod)
            .expect("the bound Pod exists");
        assert!(
            p.annotations()
                .get("moonin.io/claim")
                .is_some_and(|v| v.starts_with(&format!("{claim}/"))),
            "{pod} does not name {claim}: {:?}",
            p.annotations()
        );
        assert_eq!(
            rig.events(claim, "Bound").await.len(),
            1,
            "{claim}: one Bound Event"
        );
    }
}

#[tokio::test]
async fn a_burst_of_claims_scales_the_pool_up_and_every_claim_binds() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-up", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = json!({
        "minReplicas": 1, "maxReplicas": 10,
        "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 60, "maxStep": 10},
        "scaleDownPolicy": {"stabilizationWindowSeconds": 60, "idleTimeoutSeconds": 300}
    });
    envs.create(&PostParams::default(), &autoscaled_env("as", 2, group))
        .await
        .expect("env");
    idle_is(&rig, "as-a", 2).await;
    // The Env hands spec.replicas over: exactly one manager, the autoscaler's.
    wait_for(
        "the autoscaler to own spec.replicas",
        Duration::from_secs(20),
        || async {
            (replicas_owners(&rig, "as-a").await == ["moonin-sandbox-autoscaler"]).then_some(())
        },
    )
    .await;

    // Six claims arrive at once (the manager is down, so one decision sees them all).
    rig.kill();
    create_claims(&rig, "burst", 6).await;
    rig.start().await;
    wait_for("every claim Bound", Duration::from_secs(40), || async {
        (bound_count(&rig).await == 6).then_some(())
    })
    .await;
    // The autoscaler records the attempt once its outcome shows, which can be after the
    // claims it made room for are bound.
    let s = wait_for(
        "the scale-up attempt in the status",
        Duration::from_secs(20),
        || async {
            let s = pool_status(&rig, "as-a").await;
            s["autoScaling"]["lastScaleUpAttempt"]
                .is_object()
                .then_some(s)
        },
    )
    .await;
    let a = &s["autoScaling"];
    assert_eq!(a["lastScaleUpAttempt"]["from"], 2, "{s}");
    assert_eq!(a["lastScaleUpAttempt"]["target"], 6, "{s}");
    assert_eq!(a["lastScaleUpAttempt"]["accepted"], 6, "{s}");
    assert_eq!(a["lastScaleUpAttempt"]["result"], "Full", "{s}");
    assert_eq!(a["desiredReplicas"], 6, "{s}");
    assert_eq!(pool_spec_replicas(&rig, "as-a").await, Some(6));
    assert_eq!(pods(&rig).await.len(), 6, "no over-creation");
    assert!(!rig.events("as-a", "ScaledUp").await.is_empty());
    assert_eq!(
        replicas_owners(&rig, "as-a").await,
        ["moonin-sandbox-autoscaler"]
    );
}

#[tokio::test]
async fn idle_pods_are_removed_by_a_scale_down_session_down_to_the_group_minimum() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-down", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = json!({
        "minReplicas": 1, "maxReplicas": 10,
        "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 60},
        "scaleDownPolicy": {"stabilizationWindowSeconds": 2, "idleTimeoutSeconds": 3, "maxStep": 5}
    });
    envs.create(&PostParams::default(), &autoscaled_env("as", 4, group))
        .await
        .expect("env");
    idle_is(&rig, "as-a", 4).await;
    // The Pods reach their idle timeout a moment apart: one session or several, the
    // last one ends at the group minimum.
    let s = wait_for(
        "a scale-down session to complete at the minimum",
        Duration::from_secs(40),
        || async {
            let s = pool_status(&rig, "as-a").await;
            let session = &s["autoScaling"]["scaleDownSession"];
            (session["state"] == "Completed" && session["target"] == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(s["autoScaling"]["desiredReplicas"], 1, "{s}");
    assert_eq!(pool_spec_replicas(&rig, "as-a").await, Some(1));
    idle_is(&rig, "as-a", 1).await;
    wait_for("three Pods to be gone", Duration::from_secs(20), || async {
        (pods(&rig).await.len() == 1).then_some(())
    })
    .await;
    assert!(!rig.events("as-a", "ScaleDownStarted").await.is_empty());
    wait_for(
        "a ScaleDownCompleted Event",
        Duration::from_secs(10),
        || async { (!rig.events("as-a", "ScaleDownCompleted").await.is_empty()).then_some(()) },
    )
    .await;
    // The minimum holds: nothing more is removed.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(pods(&rig).await.len(), 1);
    assert_eq!(pool_spec_replicas(&rig, "as-a").await, Some(1));
}

#[tokio::test]
async fn a_quota_that_admits_part_of_a_scale_up_saturates_the_pool() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-quota", &["--controllers", "sandbox"]).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(rig.client.clone(), rig.ns());
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": "4"}}
    }))
    .expect("quota");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("quota");
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = json!({
        "minReplicas": 1, "maxReplicas": 10,
        "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 60, "maxStep": 10},
        "scaleDownPolicy": {"stabilizationWindowSeconds": 60, "idleTimeoutSeconds": 300}
    });
    envs.create(&PostParams::default(), &autoscaled_env("as", 2, group))
        .await
        .expect("env");
    idle_is(&rig, "as-a", 2).await;
    wait_for(
        "the quota to count two Pods",
        Duration::from_secs(30),
        || async {
            let q = quotas.get("pods").await.ok()?;
            let used = q.status?.used?.get("pods")?.0.clone();
            (used == "2").then_some(())
        },
    )
    .await;

    rig.kill();
    create_claims(&rig, "burst", 6).await;
    rig.start().await;
    let s = wait_for("a partial scale-up", Duration::from_secs(20), || async {
        let s = pool_status(&rig, "as-a").await;
        (s["autoScaling"]["lastScaleUpAttempt"]["result"] == "Partial").then_some(s)
    })
    .await;
    let a = &s["autoScaling"];
    assert_eq!(a["lastScaleUpAttempt"]["from"], 2, "{s}");
    assert_eq!(a["lastScaleUpAttempt"]["target"], 6, "{s}");
    assert_eq!(a["lastScaleUpAttempt"]["accepted"], 4, "{s}");
    assert_eq!(a["desiredReplicas"], 4, "{s}");
    assert!(a["saturatedUntil"].is_string(), "{s}");
    assert!(a["scaleUpErrorMessage"].is_string(), "{s}");
    rig.condition_of::<SandboxPool>("as-a", "Saturated", "True", "PartialScaleUp")
        .await;
    wait_for("four claims Bound", Duration::from_secs(30), || async {
        (bound_count(&rig).await == 4).then_some(())
    })
    .await;
    assert_eq!(pods(&rig).await.len(), 4, "the quota's four Pods, no more");
    assert!(!rig.events("as-a", "PartialScaleUp").await.is_empty());
}

/// Watches the namespace's sandbox Pods and records every breach of the scale-down
/// invariants: a Pod holding a claim and a scale-down mark at once, and a Pod deleted while
/// it holds a claim the test has not released.
struct PodAudit {
    marks_seen: Arc<AtomicUsize>,
    violations: Arc<Mutex<Vec<String>>>,
    released: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodAudit {
    fn start(rig: &Rig) -> Self {
        let api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
        let marks_seen = Arc::new(AtomicUsize::new(0));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let released: Arc<Mutex<BTreeSet<String>>> = Arc::new(Mutex::new(BTreeSet::new()));
        let (m, v, r) = (marks_seen.clone(), violations.clone(), released.clone());
        let task = tokio::spawn(async move {
            let mut events =
                watcher(api, watcher::Config::default().labels("moonin.io/pool")).boxed();
            while let Some(e) = events.next().await {
                let (pod, deleted) = match e {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                let name = pod.name_any();
                let claim = pod.annotations().get("moonin.io/claim").cloned();
                let marked = pod.annotations().contains_key("moonin.io/scale-down");
                if marked {
                    m.fetch_add(1, Ordering::SeqCst);
                }
                let mut out = v.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = &claim {
                    if marked {
                        out.push(format!("{name} is claimed by {c} and marked for removal"));
                    }
                    let claim_name = c.split('/').next().unwrap_or_default().to_string();
                    let gone = deleted || pod.metadata.deletion_timestamp.is_some();
                    if gone
                        && !r
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .contains(&claim_name)
                    {
                        out.push(format!("{name} was deleted while claim {c} holds it"));
                    }
                }
            }
        });
        Self {
            marks_seen,
            violations,
            released,
            task,
        }
    }

    fn marks_seen(&self) -> usize {
        self.marks_seen.load(Ordering::SeqCst)
    }

    fn release(&self, claim: &str) {
        self.released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(claim.to_string());
    }

    fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for PodAudit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Pods of the namespace that carry a scale-down mark.
async fn marked_pods(rig: &Rig) -> Vec<String> {
    pods(rig)
        .await
        .into_iter()
        .filter(|p| p.annotations().contains_key("moonin.io/scale-down"))
        .map(|p| p.name_any())
        .collect()
}

#[tokio::test]
async fn claims_arriving_during_a_scale_down_never_get_a_pod_being_removed() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-race", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    // Idle Pods time out after a second, so every round ends in a scale-down; the next
    // round's claims are created the moment its first mark is seen.
    let group = json!({
        "minReplicas": 1, "maxReplicas": 12,
        "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 60, "maxStep": 12},
        "scaleDownPolicy": {"stabilizationWindowSeconds": 1, "idleTimeoutSeconds": 1, "maxStep": 12}
    });
    let audit = PodAudit::start(&rig);
    envs.create(&PostParams::default(), &autoscaled_env("as", 6, group))
        .await
        .expect("env");
    const ROUNDS: usize = 20;
    const CLAIMS: usize = 3;
    for round in 0..ROUNDS {
        let before = audit.marks_seen();
        wait_for(
            &format!("round {round}: a scale-down mark"),
            Duration::from_secs(60),
            || async { (audit.marks_seen() > before).then_some(()) },
        )
        .await;
        let names: Vec<String> = (0..CLAIMS).map(|i| format!("r{round}-{i}")).collect();
        for n in &names {
            claims
                .create(&PostParams::default(), &claim(n, "as-a", None))
                .await
                .expect("claim");
        }
        for n in &names {
            let s = bound(&rig, n).await;
            let pod_name = s["podName"].as_str().expect("podName").to_string();
            let pod = pod_api.get(&pod_name).await.expect("the bound Pod exists");
            assert!(
                pod.metadata.deletion_timestamp.is_none(),
                "round {round}: {n} is bound to {pod_name}, which is being deleted"
            );
            assert!(
                !pod.annotations().contains_key("moonin.io/scale-down"),
                "round {round}: {n} is bound to {pod_name}, which is marked for removal"
            );
        }
        let v = audit.violations();
        assert!(v.is_empty(), "round {round}: {v:#?}");
        for n in &names {
            audit.release(n);
            claims
                .delete(n, &DeleteParams::default())
                .await
                .expect("delete claim");
        }
    }
    // The scale-downs finish: no mark left behind, the pool at its minimum.
    wait_for(
        "the pool back at its minimum without marks",
        Duration::from_secs(60),
        || async {
            (pods(&rig).await.len() == 1 && marked_pods(&rig).await.is_empty()).then_some(())
        },
    )
    .await;
    let v = audit.violations();
    assert!(v.is_empty(), "{v:#?}");
    assert!(
        audit.marks_seen() >= ROUNDS,
        "every round raced a scale-down"
    );
}

/// Waits until the pool settles at its group minimum of 1: one idle Pod, no mark, the
/// counts and `spec.replicas` agreeing.
async fn settles_at_the_minimum(rig: &Rig, within: Duration) -> Value {
    let s = wait_for(
        "the scale-down to finish at the minimum with no mark left",
        within,
        || async {
            let s = pool_status(rig, "as-a").await;
            let live = pods(rig).await.len();
            (live == 1
                && marked_pods(rig).await.is_empty()
                && s["replicas"] == 1
                && s["idleReplicas"] == 1)
                .then_some(s)
        },
    )
    .await;
    assert_eq!(pool_spec_replicas(rig, "as-a").await, Some(1), "{s}");
    assert_eq!(s["autoScaling"]["desiredReplicas"], 1, "{s}");
    s
}

#[tokio::test]
async fn sigkill_in_the_middle_of_a_scale_down_leaves_no_mark_and_right_counts() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-kill", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = |idle_timeout: u32| {
        json!({
            "minReplicas": 1, "maxReplicas": 10,
            "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 600},
            "scaleDownPolicy": {"stabilizationWindowSeconds": 1, "idleTimeoutSeconds": idle_timeout, "maxStep": 10}
        })
    };
    let audit = PodAudit::start(&rig);

    // 1. A live SIGKILL the moment the first mark is seen. How far the decision got (some
    //    marks, the replicas write, some deletes) depends on timing; any point must heal.
    envs.create(&PostParams::default(), &autoscaled_env("as", 8, group(2)))
        .await
        .expect("env");
    // Not `idle_is`: with a 2 s idle timeout the scale-down can start before the Pool's
    // counts, written at most every `STATUS_INTERVAL`, ever show all 8 idle.
    wait_for("8 sandbox Pods", Duration::from_secs(60), || async {
        (pods(&rig).await.len() == 8).then_some(())
    })
    .await;
    wait_for("a scale-down mark", Duration::from_secs(30), || async {
        (audit.marks_seen() > 0).then_some(())
    })
    .await;
    rig.kill();
    eprintln!(
        "live SIGKILL: marks left {:?}, {} Pods left",
        marked_pods(&rig).await,
        pods(&rig).await.len()
    );
    rig.start().await;
    settles_at_the_minimum(&rig, Duration::from_secs(150)).await;

    // 2. The worst point, made exact: the manager dies right after marking, before the
    //    replicas write and the status (so no status names the decision). Grow the pool
    //    back with the idle timeout out of reach, stop the manager, and leave behind what
    //    it would have: five idle Pods marked by a decision nobody knows.
    envs.patch(
        "as",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/autoscaling/groups/0", "value": group(600)},
                {"op": "replace", "path": "/spec/clusters/0/members/0/spec/replicas", "value": 6},
                {"op": "add", "path": "/spec/autoscaling/groups/0/name", "value": "g"},
                {"op": "add", "path": "/spec/autoscaling/groups/0/minReplicas", "value": 6}
            ]))
            .expect("patch"),
        ),
    )
    .await
    .expect("grow the group");
    idle_is(&rig, "as-a", 6).await;
    rig.kill();
    envs.patch(
        "as",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/autoscaling/groups/0", "value": group(2)},
                {"op": "add", "path": "/spec/autoscaling/groups/0/name", "value": "g"}
            ]))
            .expect("patch"),
        ),
    )
    .await
    .expect("idle timeout back to 2 s");
    let mark = moonin::sandbox::autoscaler::ScaleDownMark {
        decision: "crashed-before-its-status".into(),
        expires_at: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60),
    }
    .to_annotation();
    let victims: Vec<String> = pods(&rig)
        .await
        .iter()
        .take(5)
        .map(ResourceExt::name_any)
        .collect();
    for name in &victims {
        pod_api
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    json!({"metadata": {"annotations": {"moonin.io/scale-down": mark}}}),
                ),
            )
            .await
            .expect("mark");
    }
    rig.start().await;
    // The marks of an unknown decision are honoured (never bound) until they expire,
    // then swept and reported; the next decision scales down to the minimum.
    let s = settles_at_the_minimum(&rig, Duration::from_secs(150)).await;
    let stuck = rig.events("as-a", "ScaleDownStuck").await;
    assert!(!stuck.is_empty(), "the expired marks are reported: {s}");
    let v = audit.violations();
    assert!(v.is_empty(), "{v:#?}");
    // Nothing moves afterwards.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pods(&rig).await.len(), 1);
    assert!(marked_pods(&rig).await.is_empty());
}

#[tokio::test]
async fn a_template_the_api_server_refuses_is_reported_on_the_pool() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-bad", &["--controllers", "sandbox"]).await;
    let pools: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    // Passes the CRD's schema; the API server's Pod validation refuses the container name.
    let pool: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "bad"},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "Not_A_DNS_Label", "image": "registry.example/sandbox:1"}]}}
        }
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("the schema admits it");
    let c = rig
        .condition_of::<SandboxPool>("bad", "Ready", "False", "PodCreateFailed")
        .await;
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(msg.contains("Not_A_DNS_Label"), "{c}");
    rig.condition_of::<SandboxPool>("bad", "Stalled", "True", "PodCreateFailed")
        .await;
    let events = rig.events("bad", "PodCreateFailed").await;
    assert_eq!(
        events.len(),
        1,
        "one Warning, not one per retry: {events:?}"
    );
    assert!(pods(&rig).await.is_empty());
    // Fixing the template clears it.
    let fix = json!({"spec": {"template": {"spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}}}});
    pools
        .patch(
            "bad",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&fix),
        )
        .await
        .expect("fix");
    rig.condition_of::<SandboxPool>("bad", "Ready", "True", "PoolReady")
        .await;
    rig.condition_of::<SandboxPool>("bad", "Stalled", "False", "Reconciled")
        .await;
    assert_eq!(pods(&rig).await.len(), 2);
}

/// `moonin_api_writes_total{controller="sandbox",kind}` as the manager reports it.
fn sandbox_writes(rig: &Rig, kind: &str) -> f64 {
    let kind = format!("kind=\"{kind}\"");
    rig.manager
        .as_ref()
        .and_then(|m| {
            m.metric(
                "moonin_api_writes_total",
                &["controller=\"sandbox\"", &kind],
            )
        })
        .unwrap_or_default()
}

/// Waits until the Pools of earlier tests went with their namespaces.
async fn no_other_pools(rig: &Rig) {
    let all: Api<SandboxPool> = Api::all(rig.client.clone());
    wait_for(
        "the Pools of earlier tests to be gone",
        Duration::from_secs(120),
        || async {
            all.list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_refused_template_costs_one_create_per_backoff_step() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-refused", &["--controllers", "sandbox"]).await;
    // The manager's write counters are per kind: count only this Pool's creates.
    no_other_pools(&rig).await;
    let pools: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    let (creates_before, status_before) = (
        sandbox_writes(&rig, "Pod"),
        sandbox_writes(&rig, "SandboxPool/status"),
    );
    // The CRD's schema accepts any container name; the API server refuses this one when
    // the Pod is created (422: not a DNS label).
    let pool: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "refused"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "-5m", "image": "registry.example/s:1"}]}}}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let started = std::time::Instant::now();
    let condition = wait_for("PodCreateFailed", Duration::from_secs(30), || async {
        let s = serde_json::to_value(pools.get("refused").await.ok()?.status?).ok()?;
        s["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready" && c["reason"] == "PodCreateFailed")
            .cloned()
    })
    .await;
    let message = condition["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("-5m"), "{message}");
    tokio::time::sleep(Duration::from_secs(90).saturating_sub(started.elapsed())).await;
    let creates = sandbox_writes(&rig, "Pod") - creates_before;
    let status_writes = sandbox_writes(&rig, "SandboxPool/status") - status_before;
    eprintln!(
        "a refused template over 90 s: {creates} creates ({:.1} per minute), {status_writes} status writes",
        creates * 60.0 / 90.0
    );
    // Backoff steps at 0, 5, 15, 35 and 75 s: one create each.
    assert!((4.0..=5.0).contains(&creates), "{creates} creates in 90 s");
    // The refusal reads the same every time (no generated name in it): the status was
    // written once for it, not once per attempt.
    assert!(status_writes <= 2.0, "{status_writes} status writes");
    let s = serde_json::to_value(pools.get("refused").await.expect("pool").status).expect("json");
    let now = s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(now["message"], condition["message"]);
    assert_eq!(now["lastTransitionTime"], condition["lastTransitionTime"]);
    let events = rig.events("refused", "PodCreateFailed").await;
    assert_eq!(events.len(), 1, "{events:?}");
}

/// A bind the API server refuses (an admission policy on Pods) is not sent again every
/// 200 ms: it backs off per Pool, as a refused create does, and each step is a Warning
/// Event on the Pool quoting the API server. Once the policy goes, the claim binds.
#[tokio::test]
async fn a_refused_bind_backs_off_and_says_so_on_the_pool() {
    let client = require_cluster!();
    let rig = Rig::with_args(client.clone(), "sbx-bindref", &["--controllers", "sandbox"]).await;
    // The write counters are per kind: count only this Pool's Pod writes.
    no_other_pools(&rig).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("br", 1, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "br-a", 1).await;
    let idle = pods(&rig).await[0].name_any();
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refusal = Refusal::create(&client, rig.ns(), "", "pods", || {
        let (pod_api, dry, idle) = (pod_api.clone(), dry.clone(), idle.clone());
        async move {
            let probe = json!({"metadata": {"annotations": {"e2e-probe": "x"}}});
            pod_api
                .patch(&idle, &dry, &Patch::Merge(probe))
                .await
                .map(|_| ())
        }
    })
    .await;
    let before = sandbox_writes(&rig, "Pod");
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("c", "br-a", None))
        .await
        .expect("claim");
    let started = std::time::Instant::now();
    let notes = wait_for(
        "a PodWriteRefused Event",
        Duration::from_secs(30),
        || async {
            let e = rig.events("br-a", "PodWriteRefused").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(
        notes[0].contains(&format!("binding Pod {idle} to claim c"))
            && notes[0].contains(Refusal::MESSAGE),
        "{notes:?}"
    );
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(started.elapsed())).await;
    let writes = sandbox_writes(&rig, "Pod") - before;
    eprintln!("a refused bind over 20 s: {writes} Pod writes");
    // Backoff steps at 0, 5 and 15 s: a bind each (at 200 ms a bind, 100).
    assert!((2.0..=4.0).contains(&writes), "{writes} Pod writes in 20 s");
    let phase = claims
        .get("c")
        .await
        .expect("claim")
        .status
        .and_then(|s| s.phase);
    assert_ne!(phase.as_deref(), Some("Bound"));
    // One Event per step, in one series (the publisher counts the repeats of a reason).
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(rig.client.clone(), rig.ns());
    let steps: i32 = api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("br-a")
                && e.reason.as_deref() == Some("PodWriteRefused")
        })
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    assert!((2..=3).contains(&steps), "one Event per step: {steps}");
    refusal.lift();
    // The next step is 35 s after the first refusal.
    let s = bound(&rig, "c").await;
    assert_eq!(s["podName"], idle.as_str(), "{s}");
}

#[tokio::test]
async fn a_bound_claim_that_stops_decoding_keeps_its_sandbox() {
    let client = require_cluster!();
    let rig = Rig::with_args(
        client.clone(),
        "sbx-undecodable",
        &["--controllers", "sandbox"],
    )
    .await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("ud", 1, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "ud-a", 1).await;
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .create(&PostParams::default(), &claim("c", "ud-a", None))
        .await
        .expect("claim");
    let held = bound(&rig, "c").await["podName"]
        .as_str()
        .expect("podName")
        .to_string();
    rig.condition_of::<SandboxClaim>("c", "Ready", "True", "Bound")
        .await;
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let uid = pod_api.get(&held).await.expect("the bound Pod").uid();

    // A spec this release cannot read (a lifetime that is a number), stored while the CRD
    // takes any spec, as an older release's might have.
    let loose = LooseClaimSpec::new(&client).await;
    let raw = crate::harness::moonin_api(&client, "SandboxClaim", rig.ns());
    wait_for(
        "the unreadable spec stored",
        Duration::from_secs(30),
        || async {
            let unreadable = json!({"spec": {"lifetime": 5}});
            raw.patch("c", &PatchParams::default(), &Patch::Merge(&unreadable))
                .await
                .ok()
        },
    )
    .await;
    wait_for(
        "the claim reported InvalidSpec",
        Duration::from_secs(30),
        || async {
            let c = raw.get("c").await.ok()?;
            c.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["reason"] == "InvalidSpec")
                .then_some(())
        },
    )
    .await;

    // The Pool reconciles meanwhile (one more idle Pod asked for): the claim is not gone,
    // so its sandbox stays, still claimed.
    envs.patch(
        "ud",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&env("ud", 2, "Replace")),
    )
    .await
    .expect("two replicas");
    wait_for("ud-a: two Pods ready", Duration::from_secs(60), || async {
        let s = pool_status(&rig, "ud-a").await;
        (s["observedGeneration"] == 2 && s["replicas"] == 2 && s["readyReplicas"] == 2)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = pod_api.get(&held).await.expect("the claimed Pod is kept");
    assert_eq!(pod.uid(), uid);
    assert!(pod.metadata.deletion_timestamp.is_none());
    let claim_uid = raw.get("c").await.expect("claim").uid().expect("uid");
    assert_eq!(
        pod.annotations().get("moonin.io/claim"),
        Some(&format!("c/{claim_uid}")),
        "{:?}",
        pod.annotations()
    );

    // Readable again (the spec put back, then the CRD): still bound to the same Pod.
    raw.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"lifetime": null}})),
    )
    .await
    .expect("a readable spec");
    drop(loose);
    let s = bound(&rig, "c").await;
    assert_eq!(s["podName"], held.as_str(), "{s}");
    rig.condition_of::<SandboxClaim>("c", "Ready", "True", "Bound")
        .await;
}

/// The SandboxClaim CRD's spec schema replaced by one that takes anything, as an older
/// release's might have; put back on drop.
struct LooseClaimSpec {
    /// The JSON patch that puts it back.
    restore: String,
}

impl LooseClaimSpec {
    const CRD: &str = "sandboxclaims.moonin.io";
    const PATH: &str = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";

    async fn new(client: &kube::Client) -> Self {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let crd = crds.get(Self::CRD).await.expect("the CRD");
        let strict = serde_json::to_value(crd)
            .expect("json")
            .pointer(Self::PATH)
            .cloned()
            .expect("the spec schema");
        let replace = |value: Value| json!([{"op": "replace", "path": Self::PATH, "value": value}]);
        let loose = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let patch: json_patch::Patch = serde_json::from_value(replace(loose)).expect("patch");
        crds.patch(
            Self::CRD,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .expect("the spec schema replaced");
        Self {
            restore: replace(strict).to_string(),
        }
    }
}

impl Drop for LooseClaimSpec {
    fn drop(&mut self) {
        let status = std::process::Command::new("kubectl")
            .args([
                "patch",
                "crd",
                Self::CRD,
                "--type=json",
                "-p",
                &self.restore,
            ])
            .status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("putting back the SandboxClaim spec schema failed");
        }
    }
}

#[tokio::test]
async fn a_queued_claim_says_at_once_that_its_pool_went() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "sbx-gone", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    envs.create(&PostParams::default(), &env("gn", 1, "Replace"))
        .await
        .expect("env");
    idle_is(&rig, "gn-a", 1).await;
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    for name in ["first", "second"] {
        claims
            .create(&PostParams::default(), &claim(name, "gn-a", None))
            .await
            .expect("claim");
    }
    bound(&rig, "first").await;
    rig.condition_of::<SandboxClaim>("second", "Ready", "False", "Queued")
        .await;
    // Its next look at its Pool is minutes away once the looks its wait asked for are over.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The Env goes, and the garbage collector takes its Pool: nothing else changes the
    // claim.
    envs.delete("gn", &DeleteParams::default())
        .await
        .expect("delete the env");
    let c = rig
        .condition_of::<SandboxClaim>("second", "Ready", "False", "PoolNotFound")
        .await;
    assert!(
        c["message"].as_str().is_some_and(|m| m.contains("gn-a")),
        "{c}"
    );
}

#[tokio::test]
async fn a_refused_scale_down_mark_backs_off() {
    let client = require_cluster!();
    let rig = Rig::with_args(client.clone(), "sbx-markref", &["--controllers", "sandbox"]).await;
    // The Pod writes counted below are this test's alone.
    no_other_pools(&rig).await;
    // Pods are admitted, but not once they carry a scale-down mark.
    let marked =
        "has(object.metadata.annotations) && 'moonin.io/scale-down' in object.metadata.annotations";
    let pod_api: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "annotations": {"moonin.io/scale-down": "x"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example/sandbox:1"}]},
    }))
    .expect("pod");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = Refusal::create_where(&client, rig.ns(), "", "pods", marked, || {
        let (pod_api, probe, dry) = (pod_api.clone(), probe.clone(), dry.clone());
        async move { pod_api.create(&dry, &probe).await.map(|_| ()) }
    })
    .await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = json!({
        "minReplicas": 1, "maxReplicas": 10,
        "scaleUpPolicy": {"cooldownSeconds": 0, "quietWindowSeconds": 60},
        "scaleDownPolicy": {"stabilizationWindowSeconds": 2, "idleTimeoutSeconds": 3, "maxStep": 5}
    });
    envs.create(&PostParams::default(), &autoscaled_env("mr", 4, group))
        .await
        .expect("env");
    idle_is(&rig, "mr-a", 4).await;
    let created = sandbox_writes(&rig, "Pod");
    wait_for("a first mark sent", Duration::from_secs(30), || async {
        (sandbox_writes(&rig, "Pod") > created).then_some(())
    })
    .await;
    // Waited out: 5 s, then 10 s, so two more in 20 s (a change of the Pool or its Pods
    // may wake the reconcile early once or twice); it was sent again at once, for good:
    // thousands.
    let before = sandbox_writes(&rig, "Pod");
    tokio::time::sleep(Duration::from_secs(20)).await;
    let writes = sandbox_writes(&rig, "Pod") - before;
    assert!(writes <= 6.0, "{writes} Pod writes in 20 s");
    let log = rig
        .manager
        .as_ref()
        .map(|m| m.log_text())
        .unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("reconcile failed") && l.contains(Refusal::MESSAGE)),
        "the refusal is logged"
    );
    assert_eq!(pods(&rig).await.len(), 4);

    // Lifted: the scale-down goes through.
    refusal.lift();
    wait_for(
        "the Pool down to its minimum",
        Duration::from_secs(90),
        || async { (pods(&rig).await.len() == 1).then_some(()) },
    )
    .await;
}
