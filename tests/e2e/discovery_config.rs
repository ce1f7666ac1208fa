//! Discovery on the real control plane: a change of a ConfigMap a Deployment refers to is a
//! revision of that Deployment naming the keys that changed, and no value goes anywhere.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret},
};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use moonin::api::discovery::{ClusterDiscovery, WorkloadRevision};
use serde_json::{Value, json};

use crate::discovery::{Discovery, entry, inventory_where, published, revisions};
use crate::harness::wait_for;
use crate::require_cluster;
use crate::scaling::Rig;

/// Values that must never leave the process: each is distinctive enough that finding it
/// anywhere is a leak.
const VALUES: [&str; 9] = [
    "e2e-log-level-quiet-4f1c",
    "e2e-Db-Passw0rd-first-9a7e",
    "e2e-log-level-loud-77d2",
    "e2e-Db-Passw0rd-second-c0b3",
    "e2e-feature-flag-on-51aa",
    "e2e-Api-T0ken-first-e5d0",
    "e2e-Api-T0ken-second-38bf",
    "e2e-Api-T0ken-third-a61d",
    "e2e-log-level-verbose-d9e4",
];

/// Applies Secret `api-token` (key `token`) as field manager `manager`.
async fn apply_secret(rig: &Rig, manager: &str, token: &str) {
    let secrets: Api<Secret> = Api::namespaced(rig.client.clone(), rig.ns());
    let body = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "api-token"},
        "stringData": {"token": token, "user": "e2e"},
    });
    secrets
        .patch(
            "api-token",
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await
        .expect("apply Secret");
}

/// Applies ConfigMap `app-config` as field manager `manager`.
async fn apply_config(rig: &Rig, manager: &str, data: Value) {
    let cms: Api<ConfigMap> = Api::namespaced(rig.client.clone(), rig.ns());
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-config"},
        "data": data,
    });
    cms.patch(
        "app-config",
        &PatchParams::apply(manager).force(),
        &Patch::Apply(body),
    )
    .await
    .expect("apply ConfigMap");
}

/// The revisions of `shop` for a change of the data of `source`, newest last.
async fn config_revisions(rig: &Rig, source: &str) -> Vec<WorkloadRevision> {
    let mut r: Vec<WorkloadRevision> = revisions(rig, "shop")
        .await
        .into_iter()
        .filter(|r| r.spec.config_changes.iter().any(|c| c.source == source))
        .collect();
    r.sort_by_key(|r| r.spec.observed_at.0);
    r
}

#[tokio::test]
async fn a_config_map_edit_is_a_revision_listing_the_keys_and_no_value_goes_anywhere() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(
        client.clone(),
        "disc-config",
        &["--controllers", "discovery"],
    )
    .await;
    // Secrets are read with the opt-in role, and tracked once switched on.
    rig.ns.grant_rbac("config/rbac-helm");
    let discovery = Discovery::create(&client, false).await;
    let cds: Api<ClusterDiscovery> = Api::all(client.clone());
    cds.patch(
        "cluster",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"secretChanges": {"enabled": true}}})),
    )
    .await
    .expect("switch Secret changes on");
    apply_secret(&rig, "e2e-platform", VALUES[5]).await;
    apply_config(
        &rig,
        "e2e-platform",
        json!({"LOG_LEVEL": VALUES[0], "DB_PASSWORD": VALUES[1]}),
    )
    .await;
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "shop"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "shop"}},
            "template": {
                "metadata": {"labels": {"app": "shop"}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "registry.example/shop:1.0",
                    "envFrom": [{"configMapRef": {"name": "app-config"}}],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api-token", "key": "token"}}}],
                }]}
            }
        }
    }))
    .expect("deployment");
    rig.deployments()
        .create(&PostParams::default(), &d)
        .await
        .expect("create deployment");

    // The baseline holds the ConfigMap's key names and data hash; no revision is written.
    let inv = inventory_where(&rig, "shop's baseline with its ConfigMap and Secret", |v| {
        entry(v, "deployments", "shop").is_some_and(|d| {
            d["baseline"]["configs"][0]["source"] == "ConfigMap/app-config"
                && d["baseline"]["configs"][1]["source"] == "Secret/api-token"
        })
    })
    .await;
    let configs = &entry(&inv, "deployments", "shop").expect("entry")["baseline"]["configs"];
    assert_eq!(
        configs[1],
        json!({"source": "Secret/api-token", "keys": ["token", "user"]}),
        "a Secret's key names, and no hash"
    );
    let baseline = &configs[0];
    assert_eq!(
        baseline["keys"],
        json!(["DB_PASSWORD", "LOG_LEVEL"]),
        "{baseline}"
    );
    let first_hash = baseline["dataHash"].as_str().expect("hash").to_string();
    assert_eq!(first_hash.len(), 16, "{baseline}");
    assert!(
        revisions(&rig, "shop").await.is_empty(),
        "a baseline is not a revision"
    );

    // An edit: one value changed, one key added, the password unchanged.
    apply_config(
        &rig,
        "e2e-config-editor",
        json!({"LOG_LEVEL": VALUES[2], "DB_PASSWORD": VALUES[1], "FEATURE": VALUES[4]}),
    )
    .await;
    let edit = wait_for(
        "a revision of shop for the ConfigMap edit",
        Duration::from_secs(40),
        || async { config_revisions(&rig, "ConfigMap/app-config").await.pop() },
    )
    .await;
    let c = &edit.spec.config_changes[0];
    assert_eq!(c.source, "ConfigMap/app-config");
    assert_eq!(c.keys, ["FEATURE", "LOG_LEVEL"], "{:?}", edit.spec);
    assert!(!c.keys_unknown && !c.deleted);
    let hash = c.data_hash.clone().expect("data hash");
    assert!(hash.len() == 16 && hash != first_hash, "{hash}");
    assert_eq!(edit.spec.changed_by.as_deref(), Some("e2e-config-editor"));
    assert!(!edit.spec.rollout, "a ConfigMap edit restarts no Pod");
    assert!(
        edit.spec
            .summary
            .contains("keys FEATURE, LOG_LEVEL changed"),
        "{}",
        edit.spec.summary
    );

    // A Secret edit: the key that changed, who changed it, no hash.
    apply_secret(&rig, "e2e-secret-rotator", VALUES[6]).await;
    let rotated = wait_for(
        "a revision of shop for the Secret edit",
        Duration::from_secs(40),
        || async { config_revisions(&rig, "Secret/api-token").await.pop() },
    )
    .await;
    let c = &rotated.spec.config_changes[0];
    assert_eq!(c.keys, ["token"], "{:?}", rotated.spec);
    assert_eq!(c.data_hash, None, "no hash of a Secret's data");
    assert_eq!(c.changed_by.as_deref(), Some("e2e-secret-rotator"));
    assert_eq!(rotated.spec.summary, "Secret/api-token keys token changed");
    discovery
        .wait_condition("SecretAccess", "True", Duration::from_secs(30))
        .await;

    // A change made while no manager runs is found at start, from the published baseline.
    let mut log = rig.manager.as_ref().expect("manager").log_text();
    rig.kill();
    apply_config(
        &rig,
        "e2e-config-editor",
        json!({"LOG_LEVEL": VALUES[2], "DB_PASSWORD": VALUES[3], "FEATURE": VALUES[4]}),
    )
    .await;
    rig.start().await;
    let offline = wait_for(
        "a revision of shop for the change made while the manager was down",
        Duration::from_secs(40),
        || async {
            let all = config_revisions(&rig, "ConfigMap/app-config").await;
            (all.len() >= 2).then(|| all.last().cloned()).flatten()
        },
    )
    .await;
    let c = &offline.spec.config_changes[0];
    assert!(c.keys.is_empty(), "no key came or went: {c:?}");
    assert!(c.keys_unknown, "which value changed is not known: {c:?}");
    assert!(
        offline
            .spec
            .summary
            .contains("data changed while not watched"),
        "{}",
        offline.spec.summary
    );

    // Watched again from the baseline found at start: the next edits name their keys, the
    // Secret's too (it has no data hash to tell a change by), and rotating its key a second
    // time at the same Deployment revision is a record of its own, not taken as the first.
    // The Secrets watch lists after the other caches; once it has, the Deployments that refer
    // to a Secret are measured (a value changed before that is not known: the published
    // baseline holds no digest of a Secret).
    wait_for(
        "the Secrets measured after the restart",
        Duration::from_secs(30),
        || async {
            let log = rig.manager.as_ref().expect("manager").log_text();
            log.contains("Secret changes tracked from now on")
                .then_some(())
        },
    )
    .await;
    apply_secret(&rig, "e2e-secret-rotator", VALUES[7]).await;
    let again = wait_for(
        "a second revision for the Secret, after the restart",
        Duration::from_secs(40),
        || async {
            let all = config_revisions(&rig, "Secret/api-token").await;
            (all.len() >= 2).then(|| all.last().cloned()).flatten()
        },
    )
    .await;
    assert_eq!(
        again.spec.config_changes[0].keys,
        ["token"],
        "{:?}",
        again.spec
    );
    assert_eq!(again.spec.summary, rotated.spec.summary);
    assert_ne!(again.metadata.name, rotated.metadata.name);
    apply_config(
        &rig,
        "e2e-config-editor",
        json!({"LOG_LEVEL": VALUES[8], "DB_PASSWORD": VALUES[3], "FEATURE": VALUES[4]}),
    )
    .await;
    let watched = wait_for(
        "a revision of shop for the ConfigMap edit after the restart",
        Duration::from_secs(40),
        || async {
            let all = config_revisions(&rig, "ConfigMap/app-config").await;
            (all.len() >= 3).then(|| all.last().cloned()).flatten()
        },
    )
    .await;
    let c = &watched.spec.config_changes[0];
    assert_eq!(c.keys, ["LOG_LEVEL"], "{:?}", watched.spec);
    assert!(
        !c.keys_unknown,
        "watched, not changed while not watched: {c:?}"
    );
    log.push_str(&rig.manager.as_ref().expect("manager").log_text());

    // No value is in any Moonin object, any Event or the manager's log.
    let text = published(&client, rig.ns()).await;
    assert!(text.contains("FEATURE"), "the key names are published");
    for v in VALUES {
        let encoded = base64::engine::general_purpose::STANDARD.encode(v);
        for (what, haystack) in [
            ("a published object or Event", &text),
            ("the manager's log", &log),
        ] {
            assert!(!haystack.contains(v), "{v} leaked into {what}");
            assert!(
                !haystack.contains(&encoded),
                "{v}, in base64, leaked into {what}"
            );
        }
    }
    drop(discovery);
}
