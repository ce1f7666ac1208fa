//! Discovery's replica history on a live HPA, and `moonin suggest` over it: the test gives
//! the HPA a rhythm (each minute it asks for 4 replicas from second 0 to second 30, then
//! for its minimum of 2), discovery records it slot by slot in 15-second slots of a
//! one-minute period — across a restart of the manager —, and `moonin suggest` proposes a
//! ScalingTemplate that the API server accepts and `moonin schedule` previews.
//!
//! With no metrics pipeline on the local plane, the HPA controller's `desiredReplicas` is
//! moved by its bounds: a minimum above the current replicas makes it ask for the minimum,
//! a maximum below them for the maximum; in between it keeps what it asked for last.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use moonin::api::discovery::ClusterDiscovery;
use moonin::api::scaling::ScalingTemplate;
use serde_json::{Value, json};

use crate::discovery::{Discovery, inventory_where};
use crate::harness::wait_for;
use crate::require_cluster;
use crate::scaling::Rig;

/// The slots of `HPA/web`'s history, newest period first, or nothing yet.
fn cells(inventory: &Value) -> Vec<Vec<i64>> {
    let Some(entries) = inventory["replicaHistory"].as_array() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e["autoscaler"] == "HPA/web")
        .flat_map(|e| e["periods"].as_array().cloned().unwrap_or_default())
        .map(|row| {
            row.as_array()
                .map(|r| r.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Waits until `HPA/web`'s history satisfies `check`; the inventory then. Fails with the
/// history last seen.
async fn history_where(rig: &Rig, what: &str, check: impl Fn(&[Vec<i64>]) -> bool) -> Value {
    let last = std::sync::Mutex::new(Vec::new());
    let found = tokio::time::timeout(
        Duration::from_secs(90),
        wait_for(what, Duration::from_secs(100), || async {
            let v = inventory_where(rig, "an inventory", |_| true).await;
            let rows = cells(&v);
            let ok = check(&rows);
            *last.lock().unwrap() = rows;
            ok.then_some(v)
        }),
    )
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", last.lock().unwrap()))
}

/// Sleeps until the next time the minute is at second `s`.
async fn at_second(s: u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_millis() % 60_000;
    let target = u128::from(s) * 1_000;
    let wait = (target + 60_000 - into) % 60_000;
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
}

async fn bounds(hpas: &Api<HorizontalPodAutoscaler>, min: i32, max: i32) {
    hpas.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minReplicas": min, "maxReplicas": max}})),
    )
    .await
    .expect("patch the HPA's bounds");
}

/// Waits until the HPA controller asks for `want` (it looks every 15 s).
async fn asks(hpas: &Api<HorizontalPodAutoscaler>, want: i32) {
    wait_for(
        &format!("HPA/web asking for {want}"),
        Duration::from_secs(40),
        || async {
            let h = hpas.get("web").await.ok()?;
            (h.status?.desired_replicas == want).then_some(())
        },
    )
    .await;
}

/// One minute of the rhythm: 4 from second 0, the minimum of 2 from second 30.
async fn rise_and_fall(hpas: &Api<HorizontalPodAutoscaler>) {
    at_second(0).await;
    bounds(hpas, 4, 10).await;
    asks(hpas, 4).await;
    at_second(30).await;
    bounds(hpas, 2, 2).await;
    asks(hpas, 2).await;
    bounds(hpas, 2, 10).await;
}

fn moonin(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_moonin"))
        .args(args)
        .output()
        .expect("moonin runs");
    assert!(
        out.status.success(),
        "moonin {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_hpa_s_rhythm_is_recorded_across_a_restart_and_suggested_as_a_template() {
    let client = require_cluster!();
    let mut rig =
        Rig::with_args(client.clone(), "disc-hist", &["--controllers", "discovery"]).await;
    let _discovery = Discovery::create(&client, false).await;
    Api::<ClusterDiscovery>::all(client.clone())
        .patch(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicaHistory": {
                "slotSeconds": 15, "periodSeconds": 60, "periods": 3
            }}})),
        )
        .await
        .expect("switch to 15 s slots");
    rig.deployment("web", 2).await;
    rig.hpa("web", "web", 2, 10).await;
    let hpas = rig.hpas();

    // A first minute of the rhythm; then the manager is killed and started again.
    rise_and_fall(&hpas).await;
    let first = history_where(&rig, "slot 1 recorded at 4", |rows| {
        rows.first().is_some_and(|r| r.get(1) == Some(&4))
    })
    .await;
    let entry = first["replicaHistory"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["autoscaler"] == "HPA/web"))
        .cloned()
        .expect("HPA/web's history");
    assert_eq!(entry["target"], "Deployment/web", "{entry}");
    assert_eq!(
        (
            entry["slotSeconds"].as_i64(),
            entry["periodSeconds"].as_i64()
        ),
        (Some(15), Some(60)),
        "{entry}"
    );
    rig.kill();
    rig.start().await;

    // Two more minutes: what was published before the restart is kept.
    rise_and_fall(&hpas).await;
    rise_and_fall(&hpas).await;
    let inv = history_where(&rig, "three periods, the newest up to slot 2", |rows| {
        rows.len() == 3 && rows[0].iter().take(3).all(|&c| c >= 0)
    })
    .await;
    let rows = cells(&inv);
    assert!(
        rows.iter().all(|r| r.len() == 4 && r[1] == 4),
        "15–30 s of every minute recorded at 4: {rows:?}"
    );
    assert_eq!(rows[1][3], 2, "45–60 s recorded at the minimum: {rows:?}");

    let yaml = moonin(&[
        "suggest",
        "-n",
        rig.ns(),
        "--lead",
        "0s",
        "--min-periods",
        "2",
        "-o",
        "yaml",
    ]);
    println!("moonin suggest -o yaml:\n{yaml}");
    let doc = yaml
        .split("---\n")
        .find(|d| d.contains("kind: ScalingTemplate"))
        .unwrap_or_else(|| panic!("a suggested template: {yaml}"));
    assert!(
        doc.contains("HPA/web asked for ≥ 4") && doc.contains("while its min is 2"),
        "the evidence: {doc}"
    );
    let mut suggested: ScalingTemplate = serde_saphyr::from_str(doc).expect("the YAML reads");
    assert_eq!(suggested.spec.window.schedule, "* * * * *", "{doc}");
    let action = &suggested.spec.actions[0];
    assert_eq!(
        (action.target.name.as_str(), action.min_replicas),
        ("web", 4),
        "{doc}"
    );
    let length = std::time::Duration::from(suggested.spec.window.duration).as_secs();
    assert!((30..=45).contains(&length), "windows of 30 to 45 s: {doc}");

    // The API server accepts it as it is, and `moonin schedule` previews it.
    suggested.metadata.namespace = None;
    let name = suggested.metadata.name.clone().expect("a name");
    Api::<ScalingTemplate>::namespaced(client.clone(), rig.ns())
        .create(&PostParams::default(), &suggested)
        .await
        .expect("the API server accepts the suggestion");
    let preview = moonin(&[
        "schedule",
        &format!("{}/{name}", rig.ns()),
        "--count",
        "2",
        "-o",
        "json",
    ]);
    let windows: Value = serde_json::from_str(&preview).expect("json");
    assert_eq!(windows.as_array().map(Vec::len), Some(2), "{preview}");
}
