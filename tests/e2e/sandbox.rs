//! Sandbox pools on the real control plane: kwok runs the Pods, `moonin run` runs as its
//! ServiceAccount from `config/rbac`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use moonin::api::sandbox::{SandboxClaim, SandboxEnv, SandboxPool};
use serde_json::{Value, json};

use crate::harness::wait_for;
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

fn claim(name: &str, pool: &str, lifetime: Option<&str>) -> SandboxClaim {
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

async fn pool_status(rig: &Rig, name: &str) -> Value {
    let api: Api<SandboxPool> = Api::namespaced(rig.client.clone(), rig.ns());
    api.get(name)
        .await
        .ok()
        .and_then(|p| serde_json::to_value(p.status).ok())
        .unwrap_or(Value::Null)
}

async fn idle_is(rig: &Rig, pool: &str, idle: i64) {
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

async fn pods(rig: &Rig) -> Vec<Pod> {
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

/// An Env with one local member `a` in the autoscaling group `g`.
fn autoscaled_env(name: &str, replicas: i32, group: Value) -> SandboxEnv {
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

async fn pool_spec_replicas(rig: &Rig, name: &str) -> Option<i32> {
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
    let s = pool_status(&rig, "as-a").await;
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
