//! A thousand templates the controller must refuse (an unknown time zone, a schedule the API
//! server accepts and the cron parser does not, a target that does not exist) beside a
//! hundred valid ones: each refused one says why, touches nothing, and the valid windows open
//! and close exactly as they would alone.

use std::{collections::BTreeMap, time::Duration};

use futures::{StreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

use crate::harness::manual_template;
use crate::harness::wait_for;
use crate::require_cluster;
use crate::scaling::Rig;

const VALID: usize = 100;
const INVALID: usize = 1000;

/// The refusal a template gets: (name, how it is spoilt, the reason it must carry).
fn spoilt(i: usize) -> (String, &'static str) {
    match i % 3 {
        0 => (format!("zone-{i:04}"), "UnknownTimeZone"),
        1 => (format!("cron-{i:04}"), "InvalidSchedule"),
        _ => (format!("ghost-{i:04}"), "TargetNotFound"),
    }
}

#[tokio::test]
async fn a_thousand_invalid_templates_beside_a_hundred_valid_ones() {
    let client = require_cluster!();
    let rig = Rig::with_args(client, "stpl-crowd", &["--controllers", "scaling"]).await;
    // The valid templates' Deployments and HPAs, and a bystander the invalid ones name.
    let names: Vec<String> = (0..VALID)
        .map(|i| format!("d{i:03}"))
        .chain(["bystander".into()])
        .collect();
    stream::iter(&names)
        .for_each_concurrent(16, |n| {
            let rig = &rig;
            async move {
                rig.deployment(n, 1).await;
                rig.hpa(n, n, 1, 3).await;
            }
        })
        .await;
    let bystander = rig.hpas().get("bystander").await.expect("hpa");

    // First the refused ones, all at once, against a window a minute ahead.
    let create = |bodies: Vec<serde_json::Value>| {
        let rig = &rig;
        stream::iter(bodies).for_each_concurrent(32, move |b| async move {
            rig.template(b).await;
        })
    };
    let at = |secs: i64| {
        let t = Timestamp::now() + SignedDuration::from_secs(secs);
        Timestamp::from_second(t.as_second())
            .expect("ts")
            .to_string()
    };
    let created = std::time::Instant::now();
    let start = at(60);
    create(
        (0..INVALID)
            .map(|i| {
                let (name, _) = spoilt(i);
                let target = if i % 3 == 2 { format!("ghost-{i}") } else { "bystander".into() };
                let mut t = manual_template(
                    &name,
                    &start,
                    "30s",
                    json!([{"name": "a", "target": {"name": target}, "minReplicas": 2, "maxReplicas": 4}]),
                );
                match i % 3 {
                    0 => t["spec"]["timeZone"] = json!("Mars/Olympus_Mons"),
                    1 => t["spec"]["schedule"] = json!("61 * * * *"),
                    _ => {}
                }
                t
            })
            .collect(),
    )
    .await;

    // Each refused template says why.
    let want: BTreeMap<String, &str> = (0..INVALID).map(spoilt).collect();
    wait_for(
        "every invalid template's reason",
        Duration::from_secs(300),
        || {
            let (rig, want) = (&rig, &want);
            async move {
                let list = rig.templates().list(&ListParams::default()).await.ok()?;
                let refused = list
                    .items
                    .iter()
                    .filter(|t| {
                        let name = t.metadata.name.clone().unwrap_or_default();
                        let ready = t.status.as_ref().and_then(|s| {
                            s.conditions.iter().find(|c| c.type_ == "Ready").cloned()
                        });
                        want.get(&name).is_some_and(|reason| {
                            ready.is_some_and(|c| c.status == "False" && c.reason == *reason)
                        })
                    })
                    .count();
                (refused == INVALID).then_some(())
            }
        },
    )
    .await;
    eprintln!(
        "{INVALID} refused templates, each with its reason, {:.1}s after the first was created",
        created.elapsed().as_secs_f64()
    );

    // Then the valid ones, beside them.
    let start = at(20);
    create(
        (0..VALID)
            .map(|i| {
                manual_template(
                    &format!("valid-{i:03}"),
                    &start,
                    "30s",
                    json!([{"name": "a", "target": {"name": format!("d{i:03}")}, "minReplicas": 2, "maxReplicas": 4}]),
                )
            })
            .collect(),
    )
    .await;

    // The valid windows open: every HPA carries the override, every Deployment the minimum.
    let hpas = rig.hpas();
    let overridden = |want: i32| {
        let hpas = hpas.clone();
        async move {
            let list = hpas.list(&ListParams::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|h| h.metadata.name.as_deref() != Some("bystander"))
                .filter(|h| h.spec.min_replicas == Some(want))
                .count();
            (n == VALID).then_some(())
        }
    };
    wait_for(
        "every valid window applied",
        Duration::from_secs(150),
        || overridden(2),
    )
    .await;
    wait_for(
        "every valid window reverted",
        Duration::from_secs(120),
        || overridden(1),
    )
    .await;
    // The bystander that 667 refused templates named was never touched.
    let after: HorizontalPodAutoscaler = hpas.get("bystander").await.expect("hpa");
    assert_eq!(after.spec, bystander.spec);
    assert!(
        after
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("moonin.io/")),
        "a refused template marked the bystander"
    );
    assert_eq!(rig.replicas("bystander").await, Some(1));

    // Gone while the manager runs, which takes its finalizer off each: left behind, 1,100
    // templates would weigh on every later test's manager.
    rig.templates()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete the templates");
    wait_for("every template gone", Duration::from_secs(300), || async {
        let left = rig.templates().list(&ListParams::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}
