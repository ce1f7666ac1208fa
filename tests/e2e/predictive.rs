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

use crate::harness::{wait_for, wait_showing};
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

/// Waits until the Pool's status satisfies `ok`; a timeout shows the last status.
async fn pool_becomes(rig: &Rig, what: &str, timeout: Duration, ok: impl Fn(&Value) -> bool) {
    wait_showing(what, timeout, || async {
        let s = pool_status(rig, POOL).await;
        if ok(&s) {
            return Ok(());
        }
        // Each Pod's Moonin labels and annotations: what the counts are made of.
        let moonin = |m: Option<&std::collections::BTreeMap<String, String>>| {
            m.into_iter()
                .flatten()
                .filter(|(k, _)| k.starts_with("moonin.io/"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let pods: Vec<String> = pods(rig)
            .await
            .iter()
            .map(|p| {
                format!(
                    "{} [{}] [{}]",
                    p.metadata.name.as_deref().unwrap_or_default(),
                    moonin(p.metadata.labels.as_ref()),
                    moonin(p.metadata.annotations.as_ref()),
                )
            })
            .collect();
        Err(format!(
            "the Pool's status {s:#}\nits Pods:\n{}",
            pods.join("\n")
        ))
    })
    .await;
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
    eprintln!("{:.1} s after the burst: bound", unix_secs() - first);
    release_all(&rig).await;
    // Slot 1 closes: its count is the history's expectation for it.
    pool_becomes(&rig, "slot 1 learnt", Duration::from_secs(30), |s| {
        s["claimHistory"]["expected"][1] == json!(BURST * 100)
    })
    .await;
    eprintln!(
        "{:.1} s after the burst: slot 1 learnt",
        unix_secs() - first
    );
    // The idle Pods time out and the Pool goes back to its minimum before period 2.
    let second = first + PERIOD as f64;
    pool_becomes(
        &rig,
        "the pool back at its minimum",
        Duration::from_secs_f64((second - SLOT as f64 - unix_secs()).max(1.0)),
        |s| s["replicas"] == json!(1) && s["idleReplicas"] == json!(1),
    )
    .await;
    wait_for("one Pod", Duration::from_secs(20), || async {
        (pods(&rig).await.len() == 1).then_some(())
    })
    .await;
    // A new process predicts from the history in the status, not from memory. (Killed
    // only now: killed between the marks of a scale-down and the status naming them, the
    // next process would rightly keep those Pods for the marks' minute.)
    rig.kill();
    rig.start().await;
    eprintln!(
        "{:.1} s after the burst: at the minimum, restarted",
        unix_secs() - first
    );
    assert!(
        unix_secs() < second - SLOT as f64 / 2.0,
        "the scale-down took too long to leave room for the prediction"
    );

    // Period 2: the Pool grows before the burst is sent.
    // The decision is the autoscaler's: taken one Pod start time (the lead) ahead of the
    // burst, as its status records (whole seconds, so earlier than the burst exactly when
    // the decision was). When those Pods are Ready is the cluster's, waited for after it.
    let (events, s) = wait_for(
        "a predictive scale-up",
        Duration::from_secs_f64((second + 10.0 - unix_secs()).max(1.0)),
        || async {
            let events = rig.events(POOL, "PredictedScaleUp").await;
            let s = pool_status(&rig, POOL).await;
            let asked = pool_spec_replicas(&rig, POOL).await.unwrap_or(0);
            (!events.is_empty() && asked >= 4).then_some((events, s))
        },
    )
    .await;
    let decided_at = s["autoScaling"]["lastScaleUpTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(f64::INFINITY, |t| t.as_second() as f64);
    assert!(
        decided_at < second,
        "decided at {decided_at}, not before the burst due at {second}: {s}"
    );
    pool_becomes(&rig, "4 idle Pods", Duration::from_secs(30), |s| {
        s["idleReplicas"].as_i64().unwrap_or(0) >= 4
    })
    .await;
    eprintln!(
        "grown at {:+.0} s (whole seconds) of the burst, 4 idle {:.1} s before it",
        decided_at - second,
        second - unix_secs()
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
