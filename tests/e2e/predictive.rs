//! Predictive warm-up on the real control plane: a Pool whose group has
//! `scaleUpPolicy.predictive` with 10-second slots of a 60-second period learns a scripted
//! burst in one period and, after a restart of the manager, is grown before the same burst
//! in the next.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use moonin::api::sandbox::{SandboxClaim, SandboxEnv};
use serde_json::{Value, json};

use crate::harness::wait_for;
use crate::require_cluster;
use crate::sandbox::{autoscaled_env, claim, idle_is, pods, pool_spec_replicas, pool_status};
use crate::scaling::Rig;

const POOL: &str = "pr-a";
const PERIOD: u64 = 60;
const SLOT: u64 = 10;
const BURST: usize = 8;

fn unix_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until the next instant that is `offset` seconds into a period (periods start at
/// 1970-01-05 00:00 UTC, a multiple of 60 s), and returns that instant (Unix seconds).
async fn until_offset(offset: u64) -> f64 {
    let now = unix_secs();
    let period = PERIOD as f64;
    let start = (now / period).floor() * period + offset as f64;
    let at = if start >= now { start } else { start + period };
    tokio::time::sleep(Duration::from_secs_f64(at - now)).await;
    at
}

async fn burst(rig: &Rig, prefix: &str) {
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    for i in 0..BURST {
        claims
            .create(
                &PostParams::default(),
                &claim(&format!("{prefix}-{i}"), POOL, None),
            )
            .await
            .expect("claim");
    }
}

async fn bound(rig: &Rig) -> usize {
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    let list = claims.list(&ListParams::default()).await;
    list.map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count()
}

async fn release_all(rig: &Rig) {
    let claims: Api<SandboxClaim> = Api::namespaced(rig.client.clone(), rig.ns());
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("claims deleted");
}

#[tokio::test]
async fn a_pool_grows_ahead_of_a_burst_its_history_predicts() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client, "sbx-predict", &["--controllers", "sandbox"]).await;
    let envs: Api<SandboxEnv> = Api::namespaced(rig.client.clone(), rig.ns());
    let group = json!({
        "minReplicas": 1, "maxReplicas": 20,
        "scaleUpPolicy": {
            "cooldownSeconds": 2, "quietWindowSeconds": 600, "maxStep": 20,
            "predictive": {"slotSeconds": SLOT, "periodSeconds": PERIOD}
        },
        "scaleDownPolicy": {"stabilizationWindowSeconds": 0, "idleTimeoutSeconds": 3, "maxStep": 20}
    });
    // The history starts in the slot the Pool is created in, and a slot is learnt once:
    // created in slot 1, the Pool would learn an empty slot 1 before the burst. It is
    // created at the start of slot 2, so slot 1 is first seen with the burst.
    until_offset(2 * SLOT).await;
    envs.create(&PostParams::default(), &autoscaled_env("pr", 1, group))
        .await
        .expect("env");
    idle_is(&rig, POOL, 1).await;
    wait_for("a claim history", Duration::from_secs(20), || async {
        pool_status(&rig, POOL).await["claimHistory"]
            .is_object()
            .then_some(())
    })
    .await;

    // Period 1: a burst at the start of slot 1; the claims are released once bound.
    let first = until_offset(SLOT).await;
    burst(&rig, "one").await;
    wait_for("the first burst bound", Duration::from_secs(40), || async {
        (bound(&rig).await == BURST).then_some(())
    })
    .await;
    release_all(&rig).await;
    // Slot 1 closes: its count is the history's expectation for it.
    wait_for("slot 1 learnt", Duration::from_secs(30), || async {
        let s = pool_status(&rig, POOL).await;
        (s["claimHistory"]["expected"][1] == json!(BURST * 100)).then_some(())
    })
    .await;
    // A new process predicts from the history in the status, not from memory.
    rig.kill();
    rig.start().await;
    // The idle Pods time out and the Pool goes back to its minimum before period 2.
    wait_for(
        "the pool back at its minimum",
        Duration::from_secs(40),
        || async {
            (pool_spec_replicas(&rig, POOL).await == Some(1) && pods(&rig).await.len() == 1)
                .then_some(())
        },
    )
    .await;
    let second = first + PERIOD as f64;
    assert!(
        unix_secs() < second - SLOT as f64 / 2.0,
        "the scale-down took too long to leave room for the prediction"
    );

    // Period 2: the Pool grows before the burst is sent.
    let grown = wait_for(
        "a predictive scale-up",
        Duration::from_secs_f64((second - unix_secs()).max(1.0)),
        || async {
            let events = rig.events(POOL, "PredictedScaleUp").await;
            let s = pool_status(&rig, POOL).await;
            (!events.is_empty() && s["idleReplicas"].as_i64().unwrap_or(0) >= 4).then_some((
                events,
                s,
                unix_secs(),
            ))
        },
    )
    .await;
    let (events, s, seen_at) = grown;
    assert!(
        seen_at < second,
        "grown {:.1} s before the burst",
        second - seen_at
    );
    let prediction: &Value = &s["autoScaling"]["prediction"];
    assert_eq!(prediction["expectedClaims"], json!(BURST), "{s}");
    // The lead is the Pod start time measured when the last slot closed.
    assert_eq!(
        prediction["leadSeconds"].as_i64(),
        Some(s["claimHistory"]["podStartSeconds"].as_i64().unwrap_or(0)),
        "{s}"
    );
    let message = prediction["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "Predicted: {BURST} claims expected in the next 10s"
        )),
        "{message}"
    );
    assert!(events[0].contains(message), "{events:?}");
    assert!(pool_spec_replicas(&rig, POOL).await.unwrap_or(0) <= 20);

    until_offset(SLOT).await;
    burst(&rig, "two").await;
    wait_for(
        "the second burst bound",
        Duration::from_secs(40),
        || async { (bound(&rig).await == BURST).then_some(()) },
    )
    .await;
}
