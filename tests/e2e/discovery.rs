//! Discovery on the real control plane: the controller-manager runs Deployments and Jobs,
//! kwok runs the Pods, `moonin run --controllers discovery` runs as its ServiceAccount from
//! `config/rbac` (plus `config/rbac-helm` where Helm releases are read).

use std::{io::Write, time::Duration};

use futures::StreamExt;

use base64::Engine;
use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::{CronJob, Job},
    core::v1::{Namespace, Pod, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use moonin::api::discovery::{ClusterDiscovery, ImageChange, NamespaceInventory, WorkloadRevision};
use serde_json::{Value, json};

use crate::common;
use crate::harness::{Refusal, metric_sum, wait_for, wait_gone};
use crate::require_cluster;
use crate::scaling::Rig;

/// The cluster's one ClusterDiscovery, removed (with every inventory it owns) on drop.
pub(crate) struct Discovery {
    client: Client,
}

impl Discovery {
    pub(crate) async fn create(client: &Client, helm: bool) -> Self {
        let api: Api<ClusterDiscovery> = Api::all(client.clone());
        let _ = api.delete("cluster", &DeleteParams::default()).await;
        wait_gone(&api, "cluster", Duration::from_secs(30)).await;
        let cd: ClusterDiscovery = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "metadata": {"name": "cluster"},
            "spec": {"clusterName": "e2e", "helm": {"enabled": helm}}
        }))
        .expect("cd");
        api.create(&PostParams::default(), &cd)
            .await
            .expect("create ClusterDiscovery");
        Self {
            client: client.clone(),
        }
    }

    async fn status(&self) -> Value {
        let api: Api<ClusterDiscovery> = Api::all(self.client.clone());
        api.get("cluster")
            .await
            .ok()
            .and_then(|c| serde_json::to_value(c.status).ok())
            .unwrap_or(Value::Null)
    }
}

impl Discovery {
    /// Waits until the status has condition `type_` with `status`, returning the status.
    pub(crate) async fn wait_condition(
        &self,
        type_: &str,
        status: &str,
        within: Duration,
    ) -> Value {
        wait_for(&format!("{type_}={status}"), within, || async {
            let s = self.status().await;
            s["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == status)
                .then_some(s)
        })
        .await
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "clusterdiscovery",
                "cluster",
                "--ignore-not-found",
                "--wait=false",
            ])
            .status();
    }
}

/// Waits until the inventory satisfies `check`, returning it.
pub(crate) async fn inventory_where(
    rig: &Rig,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let api: Api<NamespaceInventory> = Api::namespaced(rig.client.clone(), rig.ns());
    wait_for(what, Duration::from_secs(40), || async {
        let i = api.get_opt("inventory").await.ok()??;
        let v = serde_json::to_value(i.status?).ok()?;
        check(&v).then_some(v)
    })
    .await
}

/// Everything Moonin publishes in namespace `ns` and cluster-wide (inventories, revisions,
/// the ClusterDiscovery, every Event), as JSON text: what a leak test searches.
pub(crate) async fn published(client: &Client, ns: &str) -> String {
    let mut text = String::new();
    for kind in ["NamespaceInventory", "WorkloadRevision"] {
        let api = crate::harness::moonin_api(client, kind, ns);
        for o in api.list(&ListParams::default()).await.expect("list").items {
            text.push_str(&serde_json::to_string(&o).expect("json"));
        }
    }
    let cds: Api<ClusterDiscovery> = Api::all(client.clone());
    text.push_str(&serde_json::to_string(&cds.get("cluster").await.expect("cd")).expect("json"));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        text.push_str(&serde_json::to_string(&e).expect("json"));
    }
    text
}

pub(crate) fn entry<'a>(inv: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    inv[list].as_array()?.iter().find(|d| d["name"] == name)
}

pub(crate) async fn deployment(rig: &Rig, name: &str, image: &str, labels: Value) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.clone()},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }
        }
    }))
    .expect("deployment");
    rig.deployments()
        .create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
}

/// Applies, as field manager `manager`, Deployment `name` with the selector `app=<name>`
/// and one container `app` running `image`; `spec` and `pod` add fields to the
/// Deployment's spec and to its Pod template's spec.
async fn apply_image(rig: &Rig, manager: &str, name: &str, image: &str, spec: Value, pod: Value) {
    let mut body = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }
        }
    });
    let add = |into: &mut Value, fields: Value| {
        if let (Some(into), Value::Object(fields)) = (into.as_object_mut(), fields) {
            into.extend(fields);
        }
    };
    add(&mut body["spec"], spec);
    add(&mut body["spec"]["template"]["spec"], pod);
    rig.deployments()
        .patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {name} with {image}: {e}"));
}

pub(crate) async fn revisions(rig: &Rig, workload: &str) -> Vec<WorkloadRevision> {
    let api: Api<WorkloadRevision> = Api::namespaced(rig.client.clone(), rig.ns());
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.spec.workload.name == workload)
        .collect()
}

#[tokio::test]
async fn inventory_revisions_cron_runs_and_hazards() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client.clone(), "disc", &["--controllers", "discovery"]).await;
    let discovery = Discovery::create(&client, false).await;

    deployment(&rig, "web", "registry.example/web:1.0", json!({})).await;
    deployment(&rig, "api", "registry.example/api:3.1", json!({})).await;

    // The inventory matches what the API server reports.
    let inv = inventory_where(&rig, "both Deployments inventoried", |v| {
        entry(v, "deployments", "web").is_some() && entry(v, "deployments", "api").is_some()
    })
    .await;
    // One write made it, spec and status together (no status subresource), and its status
    // claims no generation: a restart has nothing to correct.
    let created = Api::<NamespaceInventory>::namespaced(client.clone(), rig.ns())
        .get("inventory")
        .await
        .expect("inventory");
    assert_eq!(
        created.status.as_ref().and_then(|s| s.observed_generation),
        None
    );
    let managers: Vec<(Option<String>, Option<String>)> = created
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone(), m.subresource.clone()))
        .collect();
    assert_eq!(
        managers,
        [(Some("moonin-discovery".to_string()), None)],
        "one manager, no /status writes"
    );
    for d in rig
        .deployments()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
    {
        let e = entry(&inv, "deployments", &d.name_any()).expect("entry");
        let spec = d.spec.as_ref().expect("spec");
        assert_eq!(e["desired"], spec.replicas.unwrap_or(1), "{e}");
        let image = spec.template.spec.as_ref().expect("pod spec").containers[0]
            .image
            .clone()
            .unwrap_or_default();
        assert_eq!(e["images"], json!([image]), "{e}");
    }
    assert!(
        inv["images"]
            .as_array()
            .is_some_and(|i| i.contains(&json!("registry.example/web:1.0"))),
        "{inv}"
    );

    // Every namespace gets an inventory, and the cluster status counts them.
    let s = discovery
        .wait_condition("Ready", "True", Duration::from_secs(40))
        .await;
    // Without the opt-in Helm role the refused Secret watch is HelmAccess's business, not a
    // missing permission of the manager: it stays Ready.
    assert_eq!(
        rig.manager.as_ref().and_then(|m| m.get("/readyz")),
        Some((200, "ok".to_string()))
    );
    // Settled, discovery lists nothing more: no relist on a timer, and no Secret list while
    // Helm is off (without the opt-in role it would be refused and retried).
    let lists = || {
        let m = rig.manager.as_ref().expect("manager");
        m.metric("moonin_api_requests_total", &["verb=\"list\""])
            .expect("a list counter")
    };
    let before = lists();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(lists(), before, "no list requests once settled");
    // Rebuilds count as the controller's reconciles.
    let m = rig.manager.as_ref().expect("manager");
    let (_, body) = m.get("/metrics").expect("metrics");
    let discovery_label = ["controller=\"discovery\""];
    let rebuilds = metric_sum(&body, "moonin_reconciliations_total", &discovery_label);
    assert!(rebuilds.is_some_and(|n| n >= 1.0), "{rebuilds:?}");
    assert!(
        metric_sum(
            &body,
            "moonin_reconcile_duration_seconds_count",
            &discovery_label
        )
        .is_some(),
        "a rebuild duration histogram"
    );
    assert_eq!(s["cluster"]["name"]["value"], "e2e", "{s}");
    assert_eq!(s["cluster"]["name"]["source"], "spec.clusterName", "{s}");
    assert!(
        s["cluster"]["kubernetesVersion"]["value"].is_string(),
        "{s}"
    );
    assert!(
        s["nodeGroups"].as_array().is_some_and(|g| !g.is_empty()),
        "{s}"
    );
    let default_inv: Api<NamespaceInventory> = Api::namespaced(client.clone(), "default");
    assert!(
        default_inv
            .get_opt("inventory")
            .await
            .expect("get")
            .is_some()
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let active = namespaces
        .list(&ListParams::default())
        .await
        .expect("namespaces")
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .count() as i64;
    let counted = s["totals"]["namespaces"].as_i64().unwrap_or(0);
    assert!(
        (counted - active).abs() <= 2,
        "totals.namespaces {counted} vs {active} active namespaces (other tests create and delete theirs)"
    );

    // A baseline is not a revision: new Deployments get theirs in the inventory, and no
    // WorkloadRevision.
    let inv = inventory_where(&rig, "web's baseline in the inventory", |v| {
        entry(v, "deployments", "web").is_some_and(|e| e["baseline"].is_object())
    })
    .await;
    let baseline = &entry(&inv, "deployments", "web").expect("web")["baseline"];
    assert_eq!(
        baseline["containers"],
        json!([{"name": "app", "image": "registry.example/web:1.0"}]),
        "{baseline}"
    );
    assert!(revisions(&rig, "web").await.is_empty());
    assert!(revisions(&rig, "api").await.is_empty());

    // An image change is a revision that names who made it.
    apply_image(
        &rig,
        "e2e-deployer",
        "web",
        "registry.example/web:1.1",
        json!({}),
        json!({}),
    )
    .await;
    let change = wait_for(
        "a revision for the image change",
        Duration::from_secs(30),
        || async {
            revisions(&rig, "web").await.into_iter().find(|r| {
                r.spec
                    .images
                    .iter()
                    .any(|i| i.to.as_deref() == Some("registry.example/web:1.1"))
            })
        },
    )
    .await;
    assert_eq!(
        change.spec.changed_by.as_deref(),
        Some("e2e-deployer"),
        "{:?}",
        change.spec
    );
    assert_eq!(
        change.spec.images[0].from.as_deref(),
        Some("registry.example/web:1.0"),
        "{:?}",
        change.spec
    );
    assert!(
        change
            .owner_references()
            .iter()
            .any(|o| o.kind == "Deployment" && o.name == "web")
    );
    assert!(change.spec.rollout, "{:?}", change.spec);

    // The revision follows its rollout: Complete once every replica is available.
    let done = wait_for(
        "the image change's rollout Complete",
        Duration::from_secs(60),
        || async {
            let r = revisions(&rig, "web")
                .await
                .into_iter()
                .find(|r| r.name_any() == change.name_any())?;
            let s = r.status?;
            (s.outcome.as_deref() == Some("Complete")).then_some(s)
        },
    )
    .await;
    assert!(
        done.took.as_deref().is_some_and(|t| t.ends_with('s')),
        "{done:?}"
    );
    assert!(done.finished_at.is_some(), "{done:?}");
    // `kubectl get wrev` shows the outcome and how long it took.
    let table = std::process::Command::new("kubectl")
        .args(["get", "wrev", &change.name_any(), "-n", rig.ns()])
        .output()
        .expect("kubectl get wrev");
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains("OUTCOME") && table.contains("TOOK"),
        "{table}"
    );
    assert!(table.contains("Complete"), "{table}");

    // A rollout that cannot progress (its new Pods fit no Node) Fails at its deadline.
    apply_image(
        &rig,
        "e2e-deployer",
        "api",
        "registry.example/api:3.1-broken",
        json!({"progressDeadlineSeconds": 5}),
        json!({"nodeSelector": {"moonin.io/e2e-no-such-node": "x"}}),
    )
    .await;
    let failed = wait_for(
        "the stuck rollout Failed",
        Duration::from_secs(90),
        || async {
            revisions(&rig, "api")
                .await
                .into_iter()
                .find(|r| r.status.as_ref().and_then(|s| s.outcome.as_deref()) == Some("Failed"))
        },
    )
    .await;
    let message = failed
        .status
        .as_ref()
        .and_then(|s| s.outcome_message.clone())
        .unwrap_or_default();
    assert!(message.starts_with("ProgressDeadlineExceeded"), "{message}");
    // The failure signal names the suspect change and its author, in the inventory and in
    // the Warning Event on the Deployment.
    let suspect = format!("after {} (", failed.name_any());
    let inv = inventory_where(&rig, "api's failure naming its suspect change", |v| {
        entry(v, "deployments", "api").is_some_and(|e| {
            e["signals"].as_array().is_some_and(|s| {
                s.iter().any(|s| {
                    s.as_str().is_some_and(|s| {
                        s.starts_with("ProgressDeadlineExceeded")
                            && s.contains(&suspect)
                            && s.ends_with("by e2e-deployer)")
                    })
                })
            })
        })
    })
    .await;
    let signal = entry(&inv, "deployments", "api").expect("api")["signals"]
        .as_array()
        .expect("signals")
        .iter()
        .filter_map(Value::as_str)
        .find(|s| s.starts_with("ProgressDeadlineExceeded"))
        .expect("the signal")
        .to_string();
    assert!(
        signal.contains("image app: registry.example/api:3.1 → registry.example/api:3.1-broken"),
        "{signal}"
    );
    let notes = wait_for(
        "the Warning naming the suspect",
        Duration::from_secs(20),
        || async {
            let e = rig.events("api", "ProgressDeadlineExceeded").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(notes.iter().any(|n| n.contains(&suspect)), "{notes:?}");
    // Put api back (a rollback of the stuck change, to the ReplicaSet of 3.1). The Deployment
    // controller writes the rollback's revision before its conditions, which still say the
    // stuck rollout timed out: the rollback's record is judged on its own rollout.
    apply_image(
        &rig,
        "e2e-deployer",
        "api",
        "registry.example/api:3.1",
        json!({}),
        json!({}),
    )
    .await;
    let rollback = wait_for(
        "the rollback's record judged",
        Duration::from_secs(90),
        || async {
            revisions(&rig, "api").await.into_iter().find(|r| {
                r.spec.images.iter().any(|i| {
                    i.from.as_deref() == Some("registry.example/api:3.1-broken")
                        && i.to.as_deref() == Some("registry.example/api:3.1")
                }) && r.status.as_ref().is_some_and(|s| s.outcome.is_some())
            })
        },
    )
    .await;
    let status = rollback.status.clone().unwrap_or_default();
    assert_eq!(
        status.outcome.as_deref(),
        Some("Complete"),
        "{:?}: {:?}",
        rollback.name_any(),
        status.outcome_message
    );

    // A CronJob's runs are recorded and outlive their Jobs.
    let cron_jobs: Api<CronJob> = Api::namespaced(client.clone(), rig.ns());
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "suspend": true,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "job", "image": "registry.example/job:1"}]
            }}}}
        }
    }))
    .expect("cronjob");
    let cj = cron_jobs
        .create(&PostParams::default(), &cj)
        .await
        .expect("create cronjob");
    let jobs: Api<Job> = Api::namespaced(client.clone(), rig.ns());
    let run: Job = serde_json::from_value(json!({
        "metadata": {"name": "nightly-manual", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
            "uid": cj.uid().unwrap_or_default()
        }]},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "job", "image": "registry.example/job:1"}]
        }}}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &run)
        .await
        .expect("create job");
    inventory_where(&rig, "the CronJob's run recorded", |v| {
        entry(v, "cronJobs", "nightly").is_some_and(|c| {
            c["runs"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["job"] == "nightly-manual"))
        })
    })
    .await;
    jobs.delete(
        "nightly-manual",
        &DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete job");
    wait_gone(&jobs, "nightly-manual", Duration::from_secs(30)).await;
    // A later change in the namespace rebuilds its inventory; the run stays.
    deployment(&rig, "later", "registry.example/later:1", json!({})).await;
    let inv = inventory_where(&rig, "the later Deployment inventoried", |v| {
        entry(v, "deployments", "later").is_some()
    })
    .await;
    let runs = &entry(&inv, "cronJobs", "nightly").expect("nightly")["runs"];
    assert!(
        runs.as_array()
            .is_some_and(|r| r.iter().any(|r| r["job"] == "nightly-manual")),
        "the run outlives its Job: {runs}"
    );

    // A migration Job carrying a Deployment's labels is a hazard (its HPA would count it).
    let migrate: Job = serde_json::from_value(json!({
        "metadata": {"name": "migrate"},
        "spec": {"template": {
            "metadata": {"labels": {"app": "api"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "registry.example/api:3.1"}]}
        }}
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &migrate)
        .await
        .expect("create migrate");
    let inv = inventory_where(&rig, "the selector-overlap hazard", |v| {
        entry(v, "deployments", "api").is_some_and(|d| {
            d["signals"].as_array().is_some_and(|s| {
                s.iter().any(|s| {
                    s.as_str()
                        .is_some_and(|s| s.starts_with("SelectorOverlap") && s.contains("migrate"))
                })
            })
        })
    })
    .await;
    assert!(
        entry(&inv, "deployments", "web")
            .is_some_and(|d| d["signals"].as_array().is_none_or(|s| s.is_empty())),
        "{inv}"
    );
    wait_for(
        "a SelectorOverlap Warning on the Deployment",
        Duration::from_secs(20),
        || async { (!rig.events("api", "SelectorOverlap").await.is_empty()).then_some(()) },
    )
    .await;

    // An autoscaler whose target does not exist is reported on the autoscaler.
    let hpa: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler =
        serde_json::from_value(json!({
            "metadata": {"name": "ghost"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"},
                "minReplicas": 1,
                "maxReplicas": 3
            }
        }))
        .expect("hpa");
    rig.hpas()
        .create(&PostParams::default(), &hpa)
        .await
        .expect("create hpa");
    let e = wait_for(
        "a TargetNotFound Warning on the HPA",
        Duration::from_secs(20),
        || async {
            let e = rig.events("ghost", "TargetNotFound").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(e.iter().any(|n| n.contains("Deployment/ghost")), "{e:?}");

    // Excluding the namespace removes its inventory; including it again brings it back.
    let discoveries: Api<ClusterDiscovery> = Api::all(client.clone());
    let exclude = |list: Vec<&str>| {
        let discoveries = discoveries.clone();
        let body = json!({"spec": {"excludeNamespaces": list}});
        async move {
            discoveries
                .patch("cluster", &PatchParams::default(), &Patch::Merge(&body))
                .await
                .expect("patch excludeNamespaces");
        }
    };
    let inventories: Api<NamespaceInventory> = Api::namespaced(client.clone(), rig.ns());
    exclude(vec![rig.ns()]).await;
    wait_gone(&inventories, "inventory", Duration::from_secs(30)).await;
    exclude(vec![]).await;
    inventory_where(&rig, "the inventory back once included", |v| {
        entry(v, "deployments", "web").is_some()
    })
    .await;
    // An inventory deleted by hand is written again, though nothing in its namespace changed.
    inventories
        .delete("inventory", &DeleteParams::default())
        .await
        .expect("delete the inventory");
    inventory_where(&rig, "the inventory back once deleted", |v| {
        entry(v, "deployments", "web").is_some()
    })
    .await;

    // A restart does not duplicate revisions, marks a record that a process killed
    // between the create and the status patch left without its Ready condition, and
    // records a change made while no manager ran, measured from the published baseline.
    let before = revisions(&rig, "web").await;
    let api_before = revisions(&rig, "api").await.len();
    let unmarked = before[0].name_any();
    rig.kill();
    apply_image(
        &rig,
        "e2e-offline",
        "api",
        "registry.example/api:3.2",
        json!({}),
        json!({}),
    )
    .await;
    let wrevs: Api<WorkloadRevision> = Api::namespaced(client.clone(), rig.ns());
    wrevs
        .patch_status(
            &unmarked,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .expect("clear a revision's status");
    rig.start().await;
    wait_for(
        "the unmarked revision to be Ready again",
        Duration::from_secs(30),
        || async {
            let r = wrevs.get(&unmarked).await.ok()?;
            r.status?
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        },
    )
    .await;
    let offline = wait_for(
        "the change made while down recorded",
        Duration::from_secs(30),
        || async {
            revisions(&rig, "api").await.into_iter().find(|r| {
                r.spec
                    .images
                    .iter()
                    .any(|i| i.to.as_deref() == Some("registry.example/api:3.2"))
            })
        },
    )
    .await;
    assert_eq!(
        offline.spec.images,
        [ImageChange {
            container: "app".into(),
            from: Some("registry.example/api:3.1".into()),
            to: Some("registry.example/api:3.2".into()),
        }],
        "{:?}",
        offline.spec
    );
    assert_eq!(offline.spec.changed_by.as_deref(), Some("e2e-offline"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        revisions(&rig, "web").await.len(),
        before.len(),
        "no duplicate revision after a restart"
    );
    assert_eq!(revisions(&rig, "api").await.len(), api_before + 1);

    // Nothing changed: a restart writes neither a revision nor this namespace's inventory.
    let inventories: Api<NamespaceInventory> = Api::namespaced(client.clone(), rig.ns());
    let settled = inventory_where(&rig, "api's new baseline published, all healthy", |v| {
        entry(v, "deployments", "api").is_some_and(|e| {
            e["baseline"]["containers"][0]["image"] == "registry.example/api:3.2"
                && e["health"] == "Healthy"
        }) && entry(v, "deployments", "web").is_some_and(|e| e["health"] == "Healthy")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let version = inventories
        .get("inventory")
        .await
        .expect("inventory")
        .resource_version();
    rig.kill();
    rig.start().await;
    wait_for(
        "a full rebuild by the restarted manager",
        Duration::from_secs(30),
        || async { (finished_rebuilds(&rig)? >= 1.0).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = inventories.get("inventory").await.expect("inventory");
    assert_eq!(
        after.resource_version(),
        version,
        "the inventory was not rewritten"
    );
    assert_eq!(
        serde_json::to_value(after.status).expect("status")["deployments"],
        settled["deployments"]
    );
    assert_eq!(revisions(&rig, "web").await.len(), before.len());
    assert_eq!(revisions(&rig, "api").await.len(), api_before + 1);

    // A WorkloadRevision applied from elsewhere (the docs' example, say, from git) is no
    // record: Ready=False and Stalled=True, so that a GitOps tool waiting on it fails.
    let mut copied = common::load(&common::root().join("docs/examples/workloadrevision.yaml"));
    copied["metadata"]["namespace"] = rig.ns().into();
    let copied: WorkloadRevision = serde_json::from_value(copied).expect("the example");
    wrevs
        .create(&PostParams::default(), &copied)
        .await
        .expect("create the copied revision");
    wait_for(
        "the copied revision reported NotRecorded and Stalled",
        Duration::from_secs(30),
        || async {
            let r = wrevs.get(&copied.name_any()).await.ok()?;
            let conditions = r.status?.conditions;
            let reported = |type_: &str, status: &str| {
                conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == status && c.reason == "NotRecorded")
            };
            (reported("Ready", "False") && reported("Stalled", "True")).then_some(())
        },
    )
    .await;
    drop(discovery);
}

/// The discovery rebuilds the running manager has finished (its duration is observed at
/// the end; the reconcile counter counts one when it starts).
fn finished_rebuilds(rig: &Rig) -> Option<f64> {
    rig.manager.as_ref()?.metric(
        "moonin_reconcile_duration_seconds_count",
        &["controller=\"discovery\""],
    )
}

/// The manifest of the release [`helm_payload`] builds.
fn helm_manifest(secret: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {secret}\n"
    )
}

/// A Helm release payload as Helm stores it: JSON, gzip, base64.
fn helm_payload(ns: &str, secret: &str, version: i64) -> String {
    let release = json!({
        "name": "shop",
        "namespace": ns,
        "version": version,
        "info": {
            "first_deployed": "2026-11-01T10:00:00Z",
            "last_deployed": "2026-11-30T09:00:00Z",
            "deleted": "",
            "description": "Upgrade complete",
            "status": "deployed",
            "notes": format!("Log in with the password {secret}")
        },
        "chart": {
            "metadata": {"name": "shop", "version": "1.2.3", "appVersion": "2.0.0"},
            "templates": [{"name": "templates/secret.yaml", "data": base64::engine::general_purpose::STANDARD.encode(format!("password: {secret}"))}],
            "values": {"db": {"password": secret}}
        },
        "config": {"db": {"password": secret}},
        "manifest": helm_manifest(secret),
        "hooks": [{"name": "pre-install", "manifest": format!("password: {secret}")}]
    });
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(release.to_string().as_bytes()).expect("gzip");
    base64::engine::general_purpose::STANDARD.encode(gz.finish().expect("gzip"))
}

#[tokio::test]
async fn helm_releases_are_published_sanitised_and_the_password_goes_nowhere() {
    const PASSWORD: &str = "e2e-Hunter2-Sup3rSecret";
    let client = require_cluster!();
    let mut rig =
        Rig::with_args(client.clone(), "disc-helm", &["--controllers", "discovery"]).await;
    rig.ns.grant_rbac("config/rbac-helm");
    let discovery = Discovery::create(&client, true).await;
    deployment(
        &rig,
        "shop",
        "registry.example/shop:2.0.0",
        json!({"app.kubernetes.io/managed-by": "Helm"}),
    )
    .await;
    rig.deployments()
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"meta.helm.sh/release-name": "shop"}}}),
            ),
        )
        .await
        .expect("helm annotation");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), rig.ns());
    let ns = rig.ns().to_string();
    let release_secret = |version: i64| -> Secret {
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("sh.helm.release.v1.shop.v{version}"),
                "labels": {"owner": "helm", "name": "shop", "status": "deployed", "version": version.to_string()}
            },
            "type": "helm.sh/release.v1",
            "stringData": {"release": helm_payload(&ns, PASSWORD, version)}
        }))
        .expect("secret")
    };
    secrets
        .create(&PostParams::default(), &release_secret(3))
        .await
        .expect("create release secret");

    let inv = inventory_where(&rig, "the Helm release in the inventory", |v| {
        entry(v, "helmReleases", "shop").is_some()
    })
    .await;
    let r = entry(&inv, "helmReleases", "shop").expect("release");
    assert_eq!(r["revision"], 3, "{r}");
    assert_eq!(r["chart"], "shop", "{r}");
    assert_eq!(r["chartVersion"], "1.2.3", "{r}");
    assert_eq!(r["status"], "deployed", "{r}");
    assert!(
        r["valuesHash"].as_str().is_some_and(|h| h.len() == 64),
        "{r}"
    );
    // The hashes are keyed: whoever reads the inventory cannot test a guessed password
    // against them (the plain SHA-256 of the values or the manifest with it is not there).
    let sha256 = |text: &str| -> String {
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let guessed_values = sha256(&format!(r#"{{"db":{{"password":"{PASSWORD}"}}}}"#));
    assert_ne!(r["valuesHash"], json!(guessed_values), "{r}");
    assert_ne!(
        r["manifestHash"],
        json!(sha256(&helm_manifest(PASSWORD))),
        "{r}"
    );
    // Their key: 32 random bytes in an immutable Secret in the manager's namespace.
    let key = secrets.get("moonin-helm-hash-key").await.expect("the key");
    assert_eq!(key.immutable, Some(true));
    let key_bytes = key
        .data
        .as_ref()
        .and_then(|d| d.get("key"))
        .map(|b| b.0.clone());
    assert_eq!(key_bytes.as_ref().map(Vec::len), Some(32));
    assert_eq!(
        entry(&inv, "deployments", "shop").map(|d| d["helmRelease"].clone()),
        Some(json!("shop")),
        "{inv}"
    );
    // A rebuild writes the ClusterDiscovery status after the namespaces' inventories.
    discovery
        .wait_condition("HelmAccess", "True", Duration::from_secs(30))
        .await;

    // The password is in no Moonin object, no Event and no log line.
    let published = published(&client, rig.ns()).await;
    let log = std::fs::read_to_string(&rig.manager.as_ref().expect("manager").log).expect("log");
    assert!(!log.is_empty());
    for (what, text) in [
        ("published objects and Events", &published),
        ("the manager's log", &log),
    ] {
        assert!(!text.contains(PASSWORD), "the password leaked into {what}");
        assert!(
            !text.contains(&base64::engine::general_purpose::STANDARD.encode(PASSWORD)),
            "the base64 password leaked into {what}"
        );
        let key =
            base64::engine::general_purpose::STANDARD.encode(key_bytes.clone().unwrap_or_default());
        assert!(!text.contains(&key), "the hash key leaked into {what}");
    }

    // A restarted manager reads the same key: the next revision, with the same values,
    // publishes the same values hash.
    let values_hash = r["valuesHash"].clone();
    rig.kill();
    rig.start().await;
    secrets
        .create(&PostParams::default(), &release_secret(4))
        .await
        .expect("create the next release secret");
    let inv = inventory_where(&rig, "revision 4 of the release", |v| {
        entry(v, "helmReleases", "shop").is_some_and(|r| r["revision"] == 4)
    })
    .await;
    let r = entry(&inv, "helmReleases", "shop").expect("release");
    assert_eq!(r["valuesHash"], values_hash, "{r}");
    drop(discovery);
}

/// Puts every Running Pod of `app` into a waiting state, as a kubelet reports a container it
/// cannot start: kwok's stages move a Pod only out of `Pending`, so they leave this alone.
async fn wait_pods(rig: &Rig, app: &str, replicas: usize, reason: &str) {
    let pods: Api<Pod> = Api::namespaced(rig.client.clone(), rig.ns());
    let running = wait_for(
        &format!("{replicas} Running Pods of {app}"),
        Duration::from_secs(60),
        || async {
            let l = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .ok()?;
            let running: Vec<Pod> = l
                .items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            (running.len() >= replicas).then_some(running)
        },
    )
    .await;
    for p in running {
        let image = p.spec.as_ref().expect("spec").containers[0]
            .image
            .clone()
            .unwrap_or_default();
        let status = json!({"status": {
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"}
            ],
            "containerStatuses": [{
                "name": "app",
                "image": image,
                "imageID": "",
                "ready": false,
                "started": false,
                "restartCount": 3,
                "state": {"waiting": {"reason": reason, "message": "set by the e2e test"}}
            }]
        }});
        pods.patch_status(
            &p.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("pod status");
    }
}

fn has_signal(inv: &Value, deployment: &str, signal: &str) -> bool {
    entry(inv, "deployments", deployment).is_some_and(|d| {
        d["signals"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s == signal))
    })
}

#[tokio::test]
async fn failing_pods_scaled_objects_and_a_split_inventory() {
    let client = require_cluster!();
    let mut rig = Rig::with_args(client.clone(), "disc-sig", &["--controllers", "discovery"]).await;
    let discovery = Discovery::create(&client, false).await;

    // Pods in waiting states raise the matching signal, and a Warning Event on the Deployment.
    rig.deployment("crashy", 2).await;
    rig.deployment("puller", 1).await;
    wait_pods(&rig, "crashy", 2, "CrashLoopBackOff").await;
    wait_pods(&rig, "puller", 1, "ImagePullBackOff").await;
    let inv = inventory_where(&rig, "the waiting-state signals", |v| {
        has_signal(v, "crashy", "CrashLoopBackOff: 2 Pods")
            && has_signal(v, "puller", "ImagePullBackOff: 1 Pod")
    })
    .await;
    assert_eq!(
        entry(&inv, "deployments", "crashy").expect("crashy")["health"],
        "Degraded",
        "{inv}"
    );
    // One Event when the signal appears; its note has the count of that moment (the second
    // crashing Pod may be seen a rebuild later).
    for (workload, reason, note) in [
        ("crashy", "CrashLoopBackOff", "CrashLoopBackOff: "),
        ("puller", "ImagePullBackOff", "ImagePullBackOff: 1 Pod"),
    ] {
        let notes = wait_for(
            &format!("a {reason} Warning on {workload}"),
            Duration::from_secs(20),
            || async {
                let e = rig.events(workload, reason).await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert!(notes.iter().any(|n| n.starts_with(note)), "{notes:?}");
    }

    // ScaledObjects: one whose target does not exist, and one beside an HPA on the same
    // Deployment (two autoscalers). Needs KEDA's CRD (`e2e/keda start`, run by e2e/test).
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    if crds
        .get_opt("scaledobjects.keda.sh")
        .await
        .expect("crd")
        .is_some()
    {
        // Discovery looks for KEDA's CRD when it starts.
        rig.kill();
        rig.start().await;
        rig.deployment("worker", 1).await;
        let sos = crate::harness::scaled_objects(&client, rig.ns());
        for (name, target) in [("orphan", "missing"), ("worker", "worker")] {
            let so: kube::api::DynamicObject = serde_json::from_value(json!({
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": name},
                "spec": {
                    "scaleTargetRef": {"name": target},
                    "minReplicaCount": 1,
                    "maxReplicaCount": 6,
                    "triggers": [{"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": "0 3 * * *", "end": "0 4 * * *", "desiredReplicas": "2"}}]
                }
            }))
            .expect("scaled object");
            sos.create(&PostParams::default(), &so)
                .await
                .expect("create ScaledObject");
        }
        rig.hpa("worker", "worker", 1, 3).await;
        let inv = inventory_where(&rig, "the ScaledObject in the inventory", |v| {
            entry(v, "deployments", "worker").is_some_and(|d| {
                d["autoscaler"] == "ScaledObject/worker 1-6"
                    && d["signals"].as_array().is_some_and(|s| {
                        s.iter().any(|s| {
                            s.as_str().is_some_and(|s| {
                                s.starts_with("TwoAutoscalers: ")
                                    && s.contains("HPA/worker")
                                    && s.contains("ScaledObject/worker")
                            })
                        })
                    })
            })
        })
        .await;
        assert!(
            !entry(&inv, "deployments", "worker").expect("worker")["signals"]
                .as_array()
                .expect("signals")
                .iter()
                .any(|s| s.as_str().is_some_and(|s| s.contains("keda-hpa-"))),
            "KEDA's own HPA is the ScaledObject, not a third autoscaler: {inv}"
        );
        let notes = wait_for(
            "a TargetNotFound Warning on the ScaledObject",
            Duration::from_secs(20),
            || async {
                let e = rig.events("orphan", "TargetNotFound").await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert!(
            notes
                .iter()
                .any(|n| n == "TargetNotFound: Deployment/missing"),
            "{notes:?}"
        );

        // The platform's autoscaling rules: the cron trigger, KEDA's default minimum (none
        // written) is fine here, the HPA beside it is not.
        Api::<ClusterDiscovery>::all(client.clone())
            .patch(
                "cluster",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"autoscalingPolicy": {
                    "allowedTriggerTypes": ["cpu", "memory"],
                    "requiredMetricType": "Utilization",
                    "forbidHpaBesideScaledObject": true
                }}})),
            )
            .await
            .expect("an autoscaling policy");
        let expected = "AutoscalingPolicy: trigger cron is not allowed (allowed: cpu, memory); \
                        trigger cron does not set metricType Utilization; \
                        HorizontalPodAutoscaler worker beside it";
        inventory_where(&rig, "the policy signal on worker", |v| {
            has_signal(v, "worker", expected)
        })
        .await;
        let notes = wait_for(
            "an AutoscalingPolicy Warning on the ScaledObject",
            Duration::from_secs(20),
            || async {
                let e = rig.events("worker", "AutoscalingPolicy").await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert!(notes.iter().any(|n| n == expected), "{notes:?}");
    } else {
        assert!(
            std::env::var("MOONIN_E2E").as_deref() != Ok("required"),
            "KEDA's CRDs are not installed: e2e/test installs them with `e2e/keda start`"
        );
        eprintln!("skipping the ScaledObject part: KEDA's CRDs are not installed");
    }

    // A namespace whose inventory passes 512 KiB is split into parts, nothing dropped, and
    // `Truncated` says so. Four long, distinct images per Deployment (they are listed in the
    // entry and in the namespace's image list) take about 2 KiB each; no Pods are needed.
    const MANY: usize = 400;
    let long = "x".repeat(200);
    futures::stream::iter(0..MANY)
        .for_each_concurrent(32, |i| {
            let rig = &rig;
            let long = &long;
            async move {
                let name = format!("bulk-{i:04}");
                let containers: Vec<Value> = (0..4)
                    .map(|c| json!({"name": format!("c{c}"), "image": format!("registry.example/{long}/{name}-{c}:1")}))
                    .collect();
                let d: Deployment = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "replicas": 0,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": {"app": name}},
                            "spec": {"containers": containers}
                        }
                    }
                }))
                .expect("deployment");
                rig.deployments()
                    .create(&PostParams::default(), &d)
                    .await
                    .expect("create deployment");
            }
        })
        .await;
    let parts_api: Api<NamespaceInventory> = Api::namespaced(client.clone(), rig.ns());
    let expected: std::collections::BTreeSet<String> = rig
        .deployments()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    let parts = wait_for(
        "the inventory split into parts holding every Deployment",
        Duration::from_secs(90),
        || async {
            let parts = parts_api.list(&ListParams::default()).await.ok()?.items;
            let held: std::collections::BTreeSet<String> = parts
                .iter()
                .filter_map(|p| p.status.as_ref())
                .flat_map(|s| s.deployments.iter().map(|d| d.name.clone()))
                .collect();
            (parts.len() > 1 && held == expected).then_some(parts)
        },
    )
    .await;
    let mut counted = 0;
    for p in &parts {
        let bytes = serde_json::to_vec(p).expect("json").len();
        assert!(
            bytes <= moonin::discovery::inventory::MAX_BYTES + 16 * 1024,
            "{} is {bytes} bytes",
            p.name_any()
        );
        let status = p.status.as_ref().expect("status");
        counted += status.deployments.len();
        let truncated = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Truncated")
            .expect("Truncated condition");
        assert_eq!(truncated.status, "True", "{}: {truncated:?}", p.name_any());
    }
    assert_eq!(
        counted,
        expected.len(),
        "each Deployment is in exactly one part"
    );
    let s = discovery
        .wait_condition("Truncated", "True", Duration::from_secs(30))
        .await;
    let truncated = s["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Truncated")
        .expect("Truncated");
    assert!(
        truncated["message"]
            .as_str()
            .is_some_and(|m| m.contains(rig.ns())),
        "{truncated}"
    );
    drop(discovery);
}

#[tokio::test]
async fn a_refused_inventory_write_is_retried_without_a_change_in_the_namespace() {
    let client = require_cluster!();
    let rig = Rig::with_args(
        client.clone(),
        "disc-retry",
        &["--controllers", "discovery"],
    )
    .await;
    let inventories: Api<NamespaceInventory> = Api::namespaced(client.clone(), rig.ns());
    let probe: NamespaceInventory = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "NamespaceInventory",
        "metadata": {"name": "inventory"},
        "spec": {"part": 0, "parts": 1}
    }))
    .expect("probe");
    // A dry-run write refused by the policy, not by the schema: the name must be valid.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = Refusal::create(
        &client,
        rig.ns(),
        "moonin.io",
        "namespaceinventories",
        || {
            let (inventories, probe, dry) = (inventories.clone(), probe.clone(), dry.clone());
            async move { inventories.create(&dry, &probe).await.map(|_| ()) }
        },
    )
    .await;
    let discovery = Discovery::create(&client, false).await;
    let api: Api<NamespaceInventory> = Api::namespaced(rig.client.clone(), rig.ns());

    // The first rebuild reaches this namespace and is refused; the others are written.
    wait_for(
        "the refused write in the manager's log",
        Duration::from_secs(40),
        || async {
            let log = rig.manager.as_ref()?.log_text();
            log.lines()
                .any(|l| l.contains("writing the inventory failed") && l.contains(rig.ns()))
                .then_some(())
        },
    )
    .await;
    assert!(api.get_opt("inventory").await.expect("get").is_none());
    discovery
        .wait_condition("InventoryComplete", "False", Duration::from_secs(20))
        .await;

    // Lifted, with nothing changed in the namespace: the retry writes it.
    refusal.lift();
    inventory_where(&rig, "the inventory, written on retry", |_| true).await;
    discovery
        .wait_condition("InventoryComplete", "True", Duration::from_secs(40))
        .await;
}

/// Whether a revision record is marked `Ready=True/Recorded`.
fn marked_recorded(r: &WorkloadRevision) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "Recorded")
    })
}

/// The `(from, to)` image of each of `workload`'s records, sorted.
async fn image_changes(rig: &Rig, workload: &str) -> Vec<(String, String)> {
    let mut changes: Vec<(String, String)> = revisions(rig, workload)
        .await
        .iter()
        .flat_map(|r| &r.spec.images)
        .map(|i| {
            (
                i.from.clone().unwrap_or_default(),
                i.to.clone().unwrap_or_default(),
            )
        })
        .collect();
    changes.sort();
    changes
}

fn failed_rebuilds(rig: &Rig) -> usize {
    rig.manager.as_ref().map_or(0, |m| {
        m.log_text()
            .lines()
            .filter(|l| l.contains("discovery rebuild failed"))
            .count()
    })
}

#[tokio::test]
async fn a_change_not_recorded_is_retried_alone_and_none_is_recorded_twice() {
    let client = require_cluster!();
    let rig = Rig::with_args(
        client.clone(),
        "disc-replay",
        &["--controllers", "discovery"],
    )
    .await;
    for name in ["x", "y", "z"] {
        deployment(&rig, name, &format!("registry.example/{name}:1"), json!({})).await;
    }
    let records: Api<WorkloadRevision> = Api::namespaced(client.clone(), rig.ns());
    let record_of = |name: &str, workload: &str| -> WorkloadRevision {
        serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "WorkloadRevision",
            "metadata": {"name": name},
            "spec": {
                "workload": {"kind": "Deployment", "name": workload},
                "revision": 1,
                "observedAt": "2026-01-01T00:00:00Z",
                "summary": "probe"
            }
        }))
        .expect("record")
    };
    // y's records are refused; z's are created but cannot be marked (their status is
    // refused). The status probe needs a record to exist: one made before discovery runs.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe_y = record_of("probe-y", "y");
    let refused_create = Refusal::create_where(
        &client,
        rig.ns(),
        "moonin.io",
        "workloadrevisions",
        "object.spec.workload.name == 'y'",
        || {
            let (records, dry, probe_y) = (records.clone(), dry.clone(), probe_y.clone());
            async move { records.create(&dry, &probe_y).await.map(|_| ()) }
        },
    )
    .await;
    records
        .create(&PostParams::default(), &record_of("probe-z", "z"))
        .await
        .expect("probe record");
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refused_status = Refusal::create_where(
        &client,
        rig.ns(),
        "moonin.io",
        "workloadrevisions/status",
        "object.spec.workload.name == 'z'",
        || {
            let (records, dry_patch) = (records.clone(), dry_patch.clone());
            async move {
                let body = json!({"status": {"outcome": "Complete"}});
                records
                    .patch_status("probe-z", &dry_patch, &Patch::Merge(body))
                    .await
                    .map(|_| ())
            }
        },
    )
    .await;
    records
        .delete("probe-z", &DeleteParams::default())
        .await
        .expect("delete the probe record");
    let discovery = Discovery::create(&client, false).await;
    inventory_where(&rig, "x, y and z in the inventory", |inv| {
        ["x", "y", "z"]
            .iter()
            .all(|n| entry(inv, "deployments", n).is_some())
    })
    .await;

    // y's change fails every rebuild from now on; x changes twice meanwhile, z once.
    apply_image(
        &rig,
        "e2e-deployer",
        "y",
        "registry.example/y:2",
        json!({}),
        json!({}),
    )
    .await;
    let x = |tag: u8| format!("registry.example/x:{tag}");
    for (from, to) in [(1, 2), (2, 3)] {
        apply_image(&rig, "e2e-deployer", "x", &x(to), json!({}), json!({})).await;
        wait_for(
            &format!("x's change to {}", x(to)),
            Duration::from_secs(60),
            || async {
                image_changes(&rig, "x")
                    .await
                    .contains(&(x(from), x(to)))
                    .then_some(())
            },
        )
        .await;
    }
    apply_image(
        &rig,
        "e2e-deployer",
        "z",
        "registry.example/z:2",
        json!({}),
        json!({}),
    )
    .await;
    wait_for("z's record", Duration::from_secs(60), || async {
        (!revisions(&rig, "z").await.is_empty()).then_some(())
    })
    .await;
    // Another failed rebuild after both of x's changes were recorded: one that measured
    // them again would record a change back from x:3 to x:2.
    let failed = failed_rebuilds(&rig);
    wait_for(
        "another failed rebuild",
        Duration::from_secs(60),
        || async { (failed_rebuilds(&rig) > failed).then_some(()) },
    )
    .await;
    assert_eq!(
        image_changes(&rig, "x").await,
        [(x(1), x(2)), (x(2), x(3))],
        "x's changes, each once"
    );
    assert!(revisions(&rig, "y").await.is_empty());
    let z = revisions(&rig, "z").await;
    assert!(z.len() == 1 && !marked_recorded(&z[0]), "{z:?}");
    // The rest of each rebuild is done: the inventory shows x's latest image.
    inventory_where(&rig, "x:3 in the inventory", |inv| {
        entry(inv, "deployments", "x").is_some_and(|e| e["images"] == json!([x(3)]))
    })
    .await;

    // Lifted: y's change is recorded and z's record marked, with nothing else changed.
    refused_create.lift();
    refused_status.lift();
    let y = wait_for("y's change, recorded", Duration::from_secs(90), || async {
        let y = revisions(&rig, "y").await;
        y.iter()
            .all(marked_recorded)
            .then_some(y)
            .filter(|y| !y.is_empty())
    })
    .await;
    assert_eq!(
        image_changes(&rig, "y").await,
        [(
            "registry.example/y:1".to_string(),
            "registry.example/y:2".to_string()
        )],
        "{y:?}"
    );
    wait_for("z's record, marked", Duration::from_secs(90), || async {
        let z = revisions(&rig, "z").await;
        (z.len() == 1 && marked_recorded(&z[0])).then_some(())
    })
    .await;
    assert_eq!(image_changes(&rig, "x").await, [(x(1), x(2)), (x(2), x(3))]);
    drop(discovery);
}
