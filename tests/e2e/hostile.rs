//! Hostile input: several hundred generated objects of every kind, mutated at random paths
//! with wrong types, boundary numbers, unknown fields and odd strings, applied against a
//! running manager with every controller. Afterwards every object was refused at admission
//! with a message or carries a `Ready` condition with a reason, the manager is alive and its
//! log is quiet, a restarted manager reconciles new valid objects within seconds, and what
//! was valid before is unchanged.
//!
//! The generator is seeded: `MOONIN_HOSTILE_SEED=<n>` replays a run (the seed is printed).
//! Part of the run stores objects the way an older release allowed (the Pod templates of
//! SandboxPool and SandboxEnv without their schema), so objects the manager cannot decode
//! reach the watches, as they would after an upgrade tightened a schema.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::Pod},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::common::Rng;
use crate::harness::{self, TEST_MANAGER, TestNamespace, moonin_api, wait_for};
use crate::require_cluster;
use crate::scaling::Rig;

const BOUNDARY_NUMBERS: &[f64] = &[
    0.0,
    -1.0,
    1.0,
    2_147_483_647.0,
    2_147_483_648.0,
    -2_147_483_649.0,
    9_007_199_254_740_993.0,
    1e308,
    0.5,
    -0.0,
    10_000.0,
    10_001.0,
];

fn odd_strings() -> Vec<String> {
    vec![
        String::new(),
        " ".into(),
        "-5m".into(),
        "1.5h".into(),
        "∞".into(),
        "😀".into(),
        "a".repeat(300),
        "${HOME}".into(),
        "../..".into(),
        "null".into(),
        "0x10".into(),
        "\u{202e}evil".into(),
        "* * * * * *".into(),
        "@every 1s".into(),
        "Mars/Olympus_Mons".into(),
        "25:00".into(),
        "2026-13-45T25:61:61Z".into(),
        "2026-01-01T00:00:00".into(),
        "-1s".into(),
        "UPPER".into(),
        "0 0 31 2 *".into(),
    ]
}

/// One step of a path into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                prefix.push(Step::Key(k.clone()));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match s {
            Step::Key(k) => cur.get_mut(k)?,
            Step::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

fn random_value(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => json!(rng.pick(BOUNDARY_NUMBERS)),
        1 => json!(rng.pick(&odd_strings())),
        2 => json!(rng.chance(50)),
        3 => json!([1, "two", {"three": 3}]),
        4 => json!({"zzUnknown": rng.pick(&odd_strings())}),
        _ => Value::Null,
    }
}

/// Mutates `spec` at one random place.
fn mutate(rng: &mut Rng, spec: &mut Value) {
    let mut all = Vec::new();
    paths(spec, &mut Vec::new(), &mut all);
    let path = rng.pick(&all).clone();
    let Some(node) = at(spec, &path) else { return };
    match rng.below(6) {
        // A value of another type.
        0 => *node = random_value(rng),
        // A boundary number.
        1 => *node = json!(rng.pick(BOUNDARY_NUMBERS)),
        // An odd string.
        2 => *node = json!(rng.pick(&odd_strings())),
        // An unknown field.
        3 => {
            if let Some(o) = node.as_object_mut() {
                o.insert(format!("zz{}", rng.below(100)), random_value(rng));
            } else {
                *node = random_value(rng);
            }
        }
        // A field removed.
        4 => {
            if let Some(o) = node.as_object_mut()
                && !o.is_empty()
            {
                let keys: Vec<String> = o.keys().cloned().collect();
                let k = rng.pick(&keys).clone();
                o.remove(&k);
            } else {
                *node = Value::Null;
            }
        }
        // An array element repeated.
        _ => {
            if let Some(a) = node.as_array_mut()
                && let Some(first) = a.first().cloned()
            {
                a.push(first);
            } else {
                *node = json!(rng.pick(BOUNDARY_NUMBERS));
            }
        }
    }
}

fn pod_template(rng: &mut Rng) -> Value {
    let mut t = json!({
        "metadata": {"labels": {"app": "sandbox"}},
        "spec": {"containers": [{
            "name": "sandbox",
            "image": "registry.example/sandbox:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
        }]}
    });
    if rng.chance(30) {
        t["spec"]["containers"][0]["command"] = json!(["sleep", "infinity"]);
    }
    t
}

/// A valid spec of `kind`, before mutation.
fn base_spec(rng: &mut Rng, kind: &str, ns: &str) -> Value {
    let now = jiff::Timestamp::now();
    match kind {
        "ScalingTemplate" | "ClusterScalingTemplate" => {
            let mut target = json!({"kind": "Deployment", "name": "web"});
            if kind == "ClusterScalingTemplate" {
                target["namespace"] = json!(ns);
            }
            let mut spec = json!({
                "schedule": rng.pick(&["0 8 * * 1-5", "*/5 * * * *", "@daily", "30 2 * * 0"]),
                "timeZone": rng.pick(&["America/Santiago", "Europe/Berlin", "UTC"]),
                "duration": rng.pick(&["10h", "90m", "1m"]),
                "actions": [{
                    "name": "web",
                    "target": target,
                    "minReplicas": 2,
                    "maxReplicas": 4,
                    "priorityUp": 1,
                    "priorityDown": 1
                }]
            });
            if rng.chance(50) {
                spec["manualRun"] = json!({
                    "startTime": (now - jiff::SignedDuration::from_secs(60)).to_string(),
                    "duration": "1h"
                });
            }
            spec
        }
        "SandboxPool" => json!({
            "replicas": 1 + rng.below(2),
            "recyclePolicy": "Replace",
            "template": pod_template(rng),
        }),
        "SandboxEnv" => json!({
            "clusters": [
                {"name": "local", "members": [{
                    "name": "m",
                    "spec": {"replicas": 1, "template": pod_template(rng)},
                    "config": {"scalingGroup": "g"}
                }]},
                {"name": "elsewhere", "members": [{
                    "name": "m",
                    "spec": {"replicas": 1, "template": pod_template(rng)}
                }]}
            ],
            "autoscaling": {"groups": [{
                "name": "g",
                "enabled": rng.chance(50),
                "minReplicas": 1,
                "maxReplicas": 2,
                "scaleUpPolicy": {"cooldownSeconds": 10, "quietWindowSeconds": 30, "maxStep": 1},
                "scaleDownPolicy": {"stabilizationWindowSeconds": 30, "idleTimeoutSeconds": 60, "maxStep": 1}
            }]}
        }),
        "SandboxClaim" => {
            let mut spec = if rng.chance(50) {
                json!({"poolRef": {"name": format!("h-spool-{:03}", rng.below(40))}})
            } else {
                json!({"envRef": {"name": format!("h-senv-{:03}", rng.below(40)), "group": "g"}})
            };
            if rng.chance(40) {
                spec["lifetime"] = json!(rng.pick(&["30s", "10m"]));
            }
            spec
        }
        "ClusterDiscovery" => json!({
            "clusterName": "hostile",
            "helm": {"enabled": false},
            "excludeNamespaces": ["kube-node-lease"]
        }),
        "NamespaceInventory" => json!({"part": 0, "parts": 1}),
        "WorkloadRevision" => json!({
            "workload": {"kind": "Deployment", "name": "web"},
            "revision": 1 + rng.below(20),
            "observedAt": now.to_string(),
            "summary": "image web: a:1 -> a:2",
            "changedBy": "somebody",
            "images": [{"container": "app", "from": "a:1", "to": "a:2"}]
        }),
        other => panic!("no base spec for {other}"),
    }
}

fn short(kind: &str) -> &'static str {
    match kind {
        "ScalingTemplate" => "stpl",
        "ClusterScalingTemplate" => "cstpl",
        "SandboxEnv" => "senv",
        "SandboxPool" => "spool",
        "SandboxClaim" => "sclaim",
        "ClusterDiscovery" => "cdisc",
        "NamespaceInventory" => "nsinv",
        _ => "wrev",
    }
}

/// The name of the `i`th generated object of a kind (NamespaceInventory names are fixed by
/// its schema: `inventory` and `inventory-<n>`).
fn object_name(kind: &str, i: usize, suffix: &str) -> String {
    match kind {
        "NamespaceInventory" if i == 0 => "inventory".into(),
        "NamespaceInventory" => format!("inventory-{i}"),
        "ClusterScalingTemplate" | "ClusterDiscovery" => {
            format!("h-{}-{i:03}-{suffix}", short(kind))
        }
        _ => format!("h-{}-{i:03}", short(kind)),
    }
}

/// What happened to one generated object.
#[derive(Debug)]
struct Outcome {
    kind: String,
    name: String,
    /// The admission message, if the API server refused it.
    refused: Option<String>,
}

/// Generates `count` objects of `kind` and creates them; most are mutated 1–3 times, a
/// few are left valid.
async fn barrage(
    client: &Client,
    rng: &mut Rng,
    kind: &str,
    count: usize,
    offset: usize,
    ns: &str,
    suffix: &str,
) -> Vec<Outcome> {
    let api = moonin_api(client, kind, ns);
    let mut out = Vec::new();
    for i in offset..offset + count {
        let name = object_name(kind, i, suffix);
        let mut spec = base_spec(rng, kind, ns);
        if !rng.chance(15) {
            for _ in 0..1 + rng.below(3) {
                mutate(rng, &mut spec);
            }
        }
        let obj = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        });
        let dynamic: kube::api::DynamicObject = serde_json::from_value(obj).expect("a JSON object");
        let refused = match api.create(&PostParams::default(), &dynamic).await {
            Ok(_) => None,
            // Discovery wrote the namespace's `inventory` first: not ours to count.
            Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => continue,
            Err(kube::Error::Api(s)) => {
                assert!(
                    !s.message.trim().is_empty(),
                    "{kind} {name} was refused without a message: {s:?}"
                );
                Some(s.message)
            }
            Err(e) => panic!("creating {kind} {name}: {e}"),
        };
        out.push(Outcome {
            kind: kind.to_string(),
            name,
            refused,
        });
    }
    out
}

/// The Pod template schema of SandboxPool and SandboxEnv removed, as an older release
/// shipped it (`x-kubernetes-preserve-unknown-fields`), or put back (`strict`).
async fn pod_templates_schema(client: &Client, strict: bool) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for mut crd in moonin::api::all_crds() {
        let pointer = match crd.spec.names.kind.as_str() {
            "SandboxPool" => "/properties/spec/properties/template",
            "SandboxEnv" => {
                "/properties/spec/properties/clusters/items/properties/members/items/properties/spec/properties/template"
            }
            _ => continue,
        };
        if !strict {
            let mut schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("json");
            let template = schema["openAPIV3Schema"]
                .pointer_mut(pointer)
                .expect("the template's schema");
            *template = json!({
                "type": "object",
                "description": "A Pod template (as an older release declared it).",
                "x-kubernetes-preserve-unknown-fields": true
            });
            crd.spec.versions[0].schema = serde_json::from_value(schema).expect("schema");
        }
        let name = crd.name_any();
        let stored = api
            .patch(
                &name,
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        let generation = stored.metadata.generation;
        wait_for(
            &format!("CRD {name} served at generation {generation:?}"),
            Duration::from_secs(30),
            || async {
                let c = api.get(&name).await.ok()?;
                let s = c.status?;
                let established = s
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                (established && c.metadata.generation == generation).then_some(())
            },
        )
        .await;
    }
    // The API server swaps the validator a moment after the CRD is updated.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// The `Ready` condition's reason, if any.
fn ready_reason(obj: &Value) -> Option<String> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["reason"].as_str())
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

/// What the objects that existed before the barrage look like: compared afterwards.
async fn keep_state(client: &Client, ns: &str) -> Value {
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .expect("keep hpa");
    let mut pods: Vec<String> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("moonin.io/pool=keep-pool"))
        .await
        .expect("keep pods")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    pods.sort();
    let claim = moonin_api(client, "SandboxClaim", ns)
        .get("keep-claim")
        .await
        .expect("keep claim");
    let tpl = moonin_api(client, "ScalingTemplate", ns)
        .get("keep-tpl")
        .await
        .expect("keep template");
    json!({
        "hpa": {
            "spec": hpa.spec,
            "annotations": hpa.metadata.annotations,
        },
        "pods": pods,
        "claim": {"phase": claim.data["status"]["phase"], "pod": claim.data["status"]["podName"]},
        "template": tpl.data["status"]["actions"],
    })
}

/// A Deployment `name` and its HPA (1–3 replicas) in `ns`.
async fn create_target(client: &Client, ns: &str, name: &str) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "10m"}}}]}
            }
        }
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .expect("a target Deployment");
    let h: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]
        }
    }))
    .expect("hpa");
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &h)
        .await
        .expect("a target HPA");
}

async fn create_keep_objects(client: &Client, ns: &str) {
    create_target(client, ns, "web").await;
    for obj in [
        json!({
            "apiVersion": "moonin.io/v1alpha1", "kind": "ScalingTemplate",
            "metadata": {"name": "keep-tpl"},
            "spec": {
                "schedule": "0 3 * * *", "duration": "1h",
                "manualRun": {"startTime": (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30)).to_string(), "duration": "2h"},
                "actions": [{"name": "web", "target": {"kind": "Deployment", "name": "web"}, "minReplicas": 2, "maxReplicas": 3}]
            }
        }),
        json!({
            "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxPool",
            "metadata": {"name": "keep-pool"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "s", "image": "registry.example/s:1"}]}}}
        }),
    ] {
        harness::apply_moonin(client, ns, &obj)
            .await
            .expect("keep object");
    }
}

#[tokio::test]
async fn hostile_input_neither_blinds_spins_nor_crashes_a_controller() {
    let client = require_cluster!();
    let seed = std::env::var("MOONIN_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1e55_u64);
    eprintln!("hostile input seed: {seed} (MOONIN_HOSTILE_SEED={seed} replays this run)");
    let mut rng = Rng(seed);
    let mut rig = Rig::new(client.clone(), "hostile").await;
    let ns = rig.ns().to_string();
    let suffix = ns.rsplit('-').next().unwrap_or("x").to_string();
    let keep = TestNamespace::new(&client, "hostile-keep").await;

    // What exists before: a window applied to an HPA, a pool with a bound claim, and the
    // ClusterDiscovery in charge (the oldest), all valid.
    create_keep_objects(&client, &keep.name).await;
    let keeper = format!("h-keeper-{suffix}");
    rig.ns
        .cluster_objects
        .push(format!("clusterdiscovery/{keeper}"));
    harness::apply_moonin(
        &client,
        &ns,
        &json!({"apiVersion": "moonin.io/v1alpha1", "kind": "ClusterDiscovery",
            "metadata": {"name": keeper}, "spec": {"excludeNamespaces": ["kube-node-lease"]}}),
    )
    .await
    .expect("the ClusterDiscovery in charge");
    let pool_api = moonin_api(&client, "SandboxPool", &keep.name);
    wait_for("keep-pool: 2 idle", Duration::from_secs(60), || async {
        let p = pool_api.get("keep-pool").await.ok()?;
        (p.data["status"]["idleReplicas"] == 2).then_some(())
    })
    .await;
    harness::apply_moonin(
        &client,
        &keep.name,
        &json!({"apiVersion": "moonin.io/v1alpha1", "kind": "SandboxClaim",
            "metadata": {"name": "keep-claim"}, "spec": {"poolRef": {"name": "keep-pool"}}}),
    )
    .await
    .expect("keep claim");
    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &keep.name);
    wait_for(
        "keep: the window applied and the claim bound",
        Duration::from_secs(60),
        || async {
            let h = hpas.get("web").await.ok()?;
            let c = moonin_api(&client, "SandboxClaim", &keep.name)
                .get("keep-claim")
                .await
                .ok()?;
            (h.spec.min_replicas == Some(2) && c.data["status"]["phase"] == "Bound").then_some(())
        },
    )
    .await;
    let before = keep_state(&client, &keep.name).await;

    // Targets for the generated templates, and a quota that bounds the generated pools.
    rig.deployment("web", 1).await;
    rig.hpa("web", "web", 1, 3).await;
    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "40"}}}),
    )
    .expect("quota");
    Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &quota)
        .await
        .expect("quota");

    let started = Instant::now();
    let mut outcomes: Vec<Outcome> = Vec::new();
    // Phase 1: Pod templates stored without their schema, as an older release allowed.
    pod_templates_schema(&client, false).await;
    for kind in ["SandboxPool", "SandboxEnv"] {
        outcomes.extend(barrage(&client, &mut rng, kind, 40, 0, &ns, &suffix).await);
    }
    pod_templates_schema(&client, true).await;
    let loose = outcomes.len();
    // Phase 2: every kind, with today's schemas.
    for (kind, count) in [
        ("ScalingTemplate", 40),
        ("ClusterScalingTemplate", 30),
        ("SandboxEnv", 40),
        ("SandboxPool", 40),
        ("SandboxClaim", 40),
        ("ClusterDiscovery", 20),
        ("NamespaceInventory", 20),
        ("WorkloadRevision", 30),
    ] {
        let offset = if matches!(kind, "SandboxEnv" | "SandboxPool") {
            40
        } else {
            0
        };
        let made = barrage(&client, &mut rng, kind, count, offset, &ns, &suffix).await;
        for o in &made {
            if o.refused.is_none() && matches!(kind, "ClusterScalingTemplate" | "ClusterDiscovery")
            {
                rig.ns
                    .cluster_objects
                    .push(format!("{}/{}", kind.to_lowercase(), o.name));
            }
        }
        outcomes.extend(made);
    }

    // Every stored object gets a Ready condition with a reason. NamespaceInventory parts
    // beyond what discovery writes for the namespace are deleted by it (documented).
    let stored: Vec<&Outcome> = outcomes.iter().filter(|o| o.refused.is_none()).collect();
    let reasons: BTreeMap<(String, String), String> = wait_for(
        "every stored object to carry a Ready condition with a reason",
        Duration::from_secs(120),
        || async {
            let mut reasons = BTreeMap::new();
            let mut missing = Vec::new();
            for o in &stored {
                let api = moonin_api(&client, &o.kind, &ns);
                match api.get_opt(&o.name).await {
                    Ok(Some(obj)) => match ready_reason(&serde_json::to_value(&obj).ok()?) {
                        Some(r) => {
                            reasons.insert((o.kind.clone(), o.name.clone()), r);
                        }
                        None => missing.push(format!("{} {}", o.kind, o.name)),
                    },
                    Ok(None) if o.kind == "NamespaceInventory" => {
                        reasons.insert((o.kind.clone(), o.name.clone()), "(deleted)".into());
                    }
                    Ok(None) => missing.push(format!("{} {} (gone)", o.kind, o.name)),
                    Err(_) => return None,
                }
            }
            if missing.is_empty() {
                Some(reasons)
            } else {
                eprintln!("still without a Ready reason: {}", missing.join(", "));
                None
            }
        },
    )
    .await;
    let settled = started.elapsed();

    // The table: per kind, generated, refused at admission, stored, and the reasons.
    let mut table: BTreeMap<String, (usize, usize, BTreeMap<String, usize>)> = BTreeMap::new();
    for (i, o) in outcomes.iter().enumerate() {
        let kind = if i < loose {
            format!("{} (no template schema)", o.kind)
        } else {
            o.kind.clone()
        };
        let row = table.entry(kind).or_default();
        row.0 += 1;
        match &o.refused {
            Some(_) => row.1 += 1,
            None => {
                let r = reasons
                    .get(&(o.kind.clone(), o.name.clone()))
                    .cloned()
                    .unwrap_or_default();
                *row.2.entry(r).or_default() += 1;
            }
        }
    }
    eprintln!(
        "\n{:<42} {:>9} {:>8}  Ready reasons of the stored ones",
        "kind", "generated", "refused"
    );
    for (kind, (n, refused, rs)) in &table {
        let rs: Vec<String> = rs.iter().map(|(r, n)| format!("{r} {n}")).collect();
        eprintln!("{kind:<42} {n:>9} {refused:>8}  {}", rs.join(", "));
    }
    let invalid = reasons.values().filter(|r| *r == "InvalidSpec").count();
    eprintln!(
        "{} objects, {} refused at admission, {invalid} InvalidSpec; settled in {:.1} s",
        outcomes.len(),
        outcomes.iter().filter(|o| o.refused.is_some()).count(),
        settled.as_secs_f64()
    );
    assert!(
        invalid > 0,
        "objects stored without the template schema should include some that do not decode"
    );

    // The manager is alive, and its log is quiet: no response bodies, and no object's
    // failure logged more often than its backoff allows (steps at 0, 5, 15, 35, 75, 155 s).
    let manager = rig.manager.as_mut().expect("the manager");
    assert!(
        manager.alive(),
        "the manager exited:\n{}",
        manager.log_text()
    );
    let log = manager.log_text();
    for line in log.lines() {
        assert!(
            line.len() <= 4096,
            "a log line of {} bytes (a response body?): {}…",
            line.len(),
            &line[..200]
        );
        assert!(!line.contains("panicked"), "a panic: {line}");
    }
    let steps = 1
        + (0..)
            .take_while(|i| 5.0 * (2f64.powi(*i) - 1.0) < started.elapsed().as_secs_f64())
            .count();
    let mut loudest: Vec<(usize, String)> = outcomes
        .iter()
        .map(|o| {
            let n = log
                .lines()
                .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
                .filter(|l| mentions(l, &o.name))
                .count();
            (n, format!("{} {}", o.kind, o.name))
        })
        .collect();
    loudest.sort();
    let (most, who) = loudest.last().cloned().unwrap_or_default();
    eprintln!("most warnings about one object: {most} ({who}); backoff steps so far: {steps}");
    // Each object may fail in two independent ways (say, its Pod creates and its status).
    assert!(
        most <= 2 * steps,
        "{who} was logged {most} times in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // A restart lists every stored object again, undecodable ones included, and goes on:
    // a new valid Pool and template (in a namespace of their own: the generated pools used
    // up this one's quota) are reconciled within seconds.
    rig.kill();
    rig.start().await;
    let restarted = Instant::now();
    let after = TestNamespace::new(&client, "hostile-after").await;
    create_target(&client, &after.name, "after").await;
    harness::apply_moonin(
        &client,
        &after.name,
        &json!({"apiVersion": "moonin.io/v1alpha1", "kind": "SandboxPool",
            "metadata": {"name": "after-pool"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "s", "image": "registry.example/s:1"}]}}}}),
    )
    .await
    .expect("a valid pool");
    harness::apply_moonin(
        &client,
        &after.name,
        &json!({"apiVersion": "moonin.io/v1alpha1", "kind": "ScalingTemplate",
            "metadata": {"name": "after-tpl"},
            "spec": {"schedule": "0 3 * * *", "duration": "1h",
                "manualRun": {"startTime": (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10)).to_string(), "duration": "1h"},
                "actions": [{"name": "after", "target": {"kind": "Deployment", "name": "after"}, "minReplicas": 2, "maxReplicas": 3}]}}),
    )
    .await
    .expect("a valid template");
    let pools = moonin_api(&client, "SandboxPool", &after.name);
    let after_hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &after.name);
    wait_for(
        "after the restart: the new pool Ready and the new window applied",
        Duration::from_secs(30),
        || async {
            let p = pools.get("after-pool").await.ok()?;
            let h = after_hpas.get("after").await.ok()?;
            (ready_reason(&serde_json::to_value(&p).ok()?).as_deref() == Some("PoolReady")
                && h.spec.min_replicas == Some(2))
            .then_some(())
        },
    )
    .await;
    eprintln!(
        "after a restart, a new valid Pool and template were reconciled in {:.1} s",
        restarted.elapsed().as_secs_f64()
    );

    // Nothing valid that existed before was changed.
    assert_eq!(keep_state(&client, &keep.name).await, before);

    // Cluster-scoped objects go while the manager runs (it removes its finalizers).
    for obj in rig.ns.cluster_objects.clone() {
        if let Some((kind, name)) = obj.split_once('/')
            && matches!(kind, "clusterscalingtemplate" | "clusterdiscovery")
        {
            let kind = if kind == "clusterdiscovery" {
                "ClusterDiscovery"
            } else {
                "ClusterScalingTemplate"
            };
            let _ = moonin_api(&client, kind, &ns)
                .delete(name, &DeleteParams::default())
                .await;
        }
    }
    let templates = moonin_api(&client, "ClusterScalingTemplate", &ns);
    wait_for(
        "the generated ClusterScalingTemplates to be gone",
        Duration::from_secs(60),
        || async {
            let left = templates.list(&ListParams::default()).await.ok()?.items;
            (!left.iter().any(|t| t.name_any().ends_with(&suffix))).then_some(())
        },
    )
    .await;
}

/// Whether a log line names `name` as a whole word (`h-spool-001`, not `h-spool-0012`).
fn mentions(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(i, _)| {
        let after = line[i + name.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}
