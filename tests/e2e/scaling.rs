//! Scheduled scaling on the real control plane: the HPA and Deployment controllers of
//! kube-controller-manager are real, kwok runs the Pods, `moonin run` runs as its
//! ServiceAccount from `config/rbac`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use moonin::api::scaling::{ClusterScalingTemplate, ScalingTemplate, keys};
use serde_json::{Value, json};

use crate::harness::{
    self, Manager, Refusal, TestNamespace, install_crds, manual_template, wait_for, wait_gone,
    wait_showing,
};
use crate::require_cluster;

/// A running manager and the namespace it was granted RBAC in.
pub struct Rig {
    pub client: Client,
    pub ns: TestNamespace,
    pub kubeconfig: std::path::PathBuf,
    pub manager: Option<Manager>,
    identity: String,
    args: Vec<String>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Rig {
    pub async fn new(client: Client, prefix: &str) -> Self {
        Self::with_args(client, prefix, &[]).await
    }

    /// Like [`Rig::new`], with extra `moonin run` arguments (e.g. `--controllers`).
    pub async fn with_args(client: Client, prefix: &str, args: &[&str]) -> Self {
        let serial = harness::serial().await;
        install_crds(&client).await;
        let mut ns = TestNamespace::new(&client, prefix).await;
        let user = ns.grant_manager_rbac();
        let kubeconfig = harness::impersonating_kubeconfig(&user);
        let identity = format!("scaling-{}", ns.name);
        let mut rig = Rig {
            client,
            ns,
            kubeconfig,
            manager: None,
            identity,
            args: args.iter().map(|a| a.to_string()).collect(),
            _serial: serial,
        };
        rig.start().await;
        rig
    }

    /// Starts (or, after [`Rig::kill`], restarts) the manager. The identity stays the
    /// same, as for a container restarted in its Pod, so it leads again at once.
    pub async fn start(&mut self) {
        let mut args: Vec<&str> = vec!["--namespace", &self.ns.name];
        args.extend(self.args.iter().map(String::as_str));
        let m = Manager::start(&self.kubeconfig, &self.identity, &args).await;
        wait_for(
            "the manager to be ready",
            Duration::from_secs(30),
            || async { (m.get("/readyz")?.0 == 200).then_some(()) },
        )
        .await;
        wait_for("the manager to lead", Duration::from_secs(30), || async {
            m.get("/metrics")?
                .1
                .contains("moonin_leader 1")
                .then_some(())
        })
        .await;
        self.manager = Some(m);
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut m) = self.manager.take() {
            m.kill();
        }
    }

    /// The manager's `/metrics` samples of `name` with `labels` (see
    /// [`harness::metric_sum`]); `None` when it has none.
    pub fn metric(&self, name: &str, labels: &[&str]) -> Option<f64> {
        self.manager.as_ref()?.metric(name, labels)
    }

    /// Sum of the scaling controller's `moonin_api_writes_total` over every kind.
    pub fn writes(&self) -> f64 {
        self.metric("moonin_api_writes_total", &["controller=\"scaling\""])
            .unwrap_or_default()
    }

    pub fn ns(&self) -> &str {
        &self.ns.name
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub fn hpas(&self) -> Api<HorizontalPodAutoscaler> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub fn templates(&self) -> Api<ScalingTemplate> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    /// A Deployment whose Pods kwok runs.
    pub async fn deployment(&self, name: &str, replicas: i32) -> Deployment {
        self.deployments()
            .create(
                &PostParams::default(),
                &harness::kwok_deployment(name, replicas),
            )
            .await
            .expect("create deployment")
    }

    /// An HPA with `behavior` and two metrics, to prove the restore is exact.
    pub async fn hpa(
        &self,
        name: &str,
        target: &str,
        min: i32,
        max: i32,
    ) -> HorizontalPodAutoscaler {
        let h: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"team": "shop"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "minReplicas": min,
                "maxReplicas": max,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "200Mi"}}}
                ],
                "behavior": {
                    "scaleDown": {"stabilizationWindowSeconds": 120, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
                    "scaleUp": {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
                }
            }
        }))
        .expect("hpa");
        self.hpas()
            .create(&PostParams::default(), &h)
            .await
            .expect("create hpa")
    }

    pub async fn template(&self, body: Value) -> ScalingTemplate {
        let t: ScalingTemplate = serde_json::from_value(body).expect("template");
        self.templates()
            .create(&PostParams::default(), &t)
            .await
            .expect("create template")
    }

    pub async fn replicas(&self, name: &str) -> Option<i32> {
        self.deployments().get(name).await.ok()?.spec?.replicas
    }

    pub async fn template_status(&self, name: &str) -> Value {
        let t = self.templates().get(name).await.expect("template");
        serde_json::to_value(t.status).unwrap_or(Value::Null)
    }

    /// Waits for a condition on any Moonin object of kind `K` in the namespace.
    pub async fn condition_of<K>(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> Value
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.ns());
        wait_for(
            &format!("{name}: {type_}={status} ({reason})"),
            Duration::from_secs(30),
            || async {
                let v = serde_json::to_value(api.get(name).await.ok()?).ok()?;
                v["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == type_ && c["status"] == status && c["reason"] == reason)
                    .cloned()
            },
        )
        .await
    }

    /// Waits for a template condition with this status and reason.
    pub async fn condition(&self, name: &str, type_: &str, status: &str, reason: &str) -> Value {
        wait_for(
            &format!("{name}: {type_}={status} ({reason})"),
            Duration::from_secs(30),
            || async {
                let s = self.template_status(name).await;
                s["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == type_ && c["status"] == status && c["reason"] == reason)
                    .cloned()
            },
        )
        .await
    }

    /// Waits for an action's state in status.
    pub async fn action_state(&self, name: &str, action: &str, state: &str) {
        wait_for(
            &format!("{name}: action {action} {state}"),
            Duration::from_secs(30),
            || async {
                let s = self.template_status(name).await;
                s["actions"]
                    .as_array()?
                    .iter()
                    .any(|a| a["name"] == action && a["state"] == state)
                    .then_some(())
            },
        )
        .await;
    }

    /// Waits for `status.phase`.
    pub async fn phase(&self, name: &str, phase: &str) {
        wait_for(
            &format!("{name} in phase {phase}"),
            Duration::from_secs(30),
            || async { (self.template_status(name).await["phase"] == phase).then_some(()) },
        )
        .await;
    }

    /// Events about `regarding` with this reason.
    pub async fn events(&self, regarding: &str, reason: &str) -> Vec<String> {
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), self.ns());
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                    && e.reason.as_deref() == Some(reason)
            })
            .map(|e| e.note.unwrap_or_default())
            .collect()
    }

    /// Deletes a template and waits until it is gone (its finalizer reverted everything).
    pub async fn delete_template(&self, name: &str) {
        let _ = self
            .templates()
            .delete(name, &DeleteParams::default())
            .await;
        wait_gone(&self.templates(), name, Duration::from_secs(30)).await;
    }
}

/// An RFC 3339 instant `secs` from now, on a whole second (the API keeps seconds).
pub fn in_secs(secs: i64) -> String {
    let t = Timestamp::now() + SignedDuration::from_secs(secs);
    Timestamp::from_second(t.as_second() + 1)
        .expect("timestamp")
        .to_string()
}

fn annotations(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.annotations
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .filter(|k| k.starts_with("moonin.io/"))
        .collect()
}

#[tokio::test]
async fn hpa_override_and_byte_for_byte_restore() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-hpa").await;
    rig.deployment("web", 2).await;
    let before = rig.hpa("web", "web", 2, 5).await;
    let original_spec = serde_json::to_value(&before.spec).expect("spec");

    rig.template(manual_template(
        "peak",
        &in_secs(3),
        "25s",
        json!([{"name": "web", "target": {"name": "web"}, "minReplicas": 4, "maxReplicas": 8}]),
    ))
    .await;

    // The window opens: the HPA carries the override and its restore data.
    let hpa = wait_for("the HPA override", Duration::from_secs(20), || async {
        let h = rig.hpas().get("web").await.ok()?;
        (h.spec.min_replicas == Some(4)).then_some(h)
    })
    .await;
    assert_eq!(hpa.spec.max_replicas, 8);
    let a = hpa.annotations();
    let original: Value = serde_json::from_str(&a[keys::ORIGINAL]).expect("original json");
    assert_eq!(
        original["spec"],
        json!({"minReplicas": 2, "maxReplicas": 5})
    );
    assert_eq!(original["deploymentReplicas"], 2);
    assert_eq!(original["deployment"], "web", "whose replicas they are");
    let owner: Value = serde_json::from_str(&a[keys::OWNER]).expect("owner json");
    assert_eq!(owner["name"], "peak");
    assert_eq!(owner["action"], "web");
    assert!(a.contains_key(keys::APPLIED_HASH));
    let managers: Vec<String> = hpa
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "moonin-scaling"),
        "{managers:?}"
    );

    // The Deployment reaches the new minimum at once, and the HPA controller keeps it there.
    wait_for("replicas 4", Duration::from_secs(10), || async {
        (rig.replicas("web").await? == 4).then_some(())
    })
    .await;
    let d = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(
        d.annotations()
            .get(keys::ORIGINAL_REPLICAS)
            .map(String::as_str),
        Some("2")
    );
    rig.action_state("peak", "web", "Applied").await;
    let status = rig.template_status("peak").await;
    assert_eq!(status["phase"], "Active");
    assert_eq!(status["window"]["trigger"], "Manual");
    assert_eq!(status["actions"][0]["state"], "Applied");
    assert_eq!(status["actions"][0]["via"], "HPA");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        rig.replicas("web").await,
        Some(4),
        "the HPA keeps the new minimum"
    );

    // The window ends: the spec is restored exactly, the marks are gone.
    let after = wait_for("the HPA restore", Duration::from_secs(40), || async {
        let h = rig.hpas().get("web").await.ok()?;
        (h.spec.min_replicas == Some(2)).then_some(h)
    })
    .await;
    assert_eq!(
        serde_json::to_value(&after.spec).expect("spec"),
        original_spec
    );
    assert_eq!(annotations(&after.metadata), Vec::<String>::new());
    // The Deployment follows in the reconcile after the HPA's restore.
    wait_for(
        "replicas restored to 2",
        Duration::from_secs(40),
        || async { (rig.replicas("web").await? == 2).then_some(()) },
    )
    .await;
    let d = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(annotations(&d.metadata), Vec::<String>::new());
    // Nothing is left moonin-scaling's (a GitOps tool told to ignore its fields manages them
    // all again); the bounds the restore put back are moonin-restore's.
    let after = rig.hpas().get("web").await.expect("hpa");
    for meta in [&after.metadata, &d.metadata] {
        let left: Vec<_> = meta
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some("moonin-scaling"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    // (The API server also hands it `spec.metrics`, which it defaults on every write of an
    // HPA that has none.)
    let restorer = after
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some("moonin-restore"))
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| f.0["f:spec"].clone())
        .unwrap_or_default();
    assert!(
        ["f:minReplicas", "f:maxReplicas"]
            .iter()
            .all(|f| restorer.get(f).is_some()),
        "{:?}",
        after.managed_fields()
    );
    // The window's end was scheduled: its delay is counted once the reconcile that restored
    // it is done (its status written); a manual run's start is no scheduled edge.
    let delays = |edge: &str| {
        rig.metric(
            "moonin_scaling_edge_delay_seconds_count",
            &[&format!("edge=\"{edge}\"")],
        )
    };
    wait_for(
        "the close to be counted",
        Duration::from_secs(30),
        || async { delays("close").is_some().then_some(()) },
    )
    .await;

    // Back under the HPA's control: raising its minimum scales the Deployment.
    rig.hpas()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minReplicas": 3}})),
        )
        .await
        .expect("raise min");
    wait_for("the HPA to scale to 3", Duration::from_secs(40), || async {
        (rig.replicas("web").await? == 3).then_some(())
    })
    .await;

    rig.phase("peak", "Idle").await;
    assert_eq!((delays("close"), delays("open")), (Some(1.0), None));
    let status = rig.template_status("peak").await;
    let exec = &status["executions"][0];
    assert_eq!(exec["trigger"], "Manual");
    assert_eq!(exec["result"], "Applied");
    assert!(exec["end"].is_string(), "{status}");
    assert!(!rig.events("peak", "Applied").await.is_empty());
    assert!(!rig.events("peak", "Reverted").await.is_empty());
    rig.delete_template("peak").await;
}

/// A Deployment scaled to 0 under its HPA has the HPA switched off (its controller leaves
/// a Deployment at 0 alone): a window raises it, and its end puts it back at 0, not at the
/// HPA's minimum.
#[tokio::test]
async fn a_deployment_at_zero_under_its_hpa_comes_back_at_zero() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-zero").await;
    rig.deployment("off", 0).await;
    rig.hpa("off", "off", 2, 5).await;
    rig.template(manual_template(
        "wake",
        &in_secs(2),
        "15s",
        json!([{"name": "off", "target": {"name": "off"}, "minReplicas": 3, "maxReplicas": 6}]),
    ))
    .await;
    hpa_is(&rig, "off", 3, 6, true).await;
    replicas_are(&rig, "off", 3).await;
    rig.action_state("wake", "off", "Applied").await;
    hpa_is(&rig, "off", 2, 5, false).await;
    replicas_are(&rig, "off", 0).await;
    let d = rig.deployments().get("off").await.expect("deployment");
    assert_eq!(annotations(&d.metadata), Vec::<String>::new());
    // The HPA controller, switched off again, leaves it there.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(rig.replicas("off").await, Some(0));
    rig.delete_template("wake").await;
}

#[tokio::test]
async fn provisional_hpa_for_a_deployment_without_one() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-prov").await;
    rig.deployment("api", 1).await;
    rig.template(manual_template(
        "burst",
        &in_secs(2),
        "15s",
        json!([{"name": "api", "target": {"name": "api"}, "minReplicas": 3, "maxReplicas": 6}]),
    ))
    .await;
    let hpa = wait_for("the provisional HPA", Duration::from_secs(20), || async {
        rig.hpas().get_opt("moonin-api").await.ok()?
    })
    .await;
    assert_eq!(hpa.spec.min_replicas, Some(3));
    assert_eq!(hpa.spec.max_replicas, 6);
    assert_eq!(
        hpa.labels().get(keys::PROVISIONAL).map(String::as_str),
        Some("true")
    );
    assert_eq!(hpa.owner_references()[0].kind, "ScalingTemplate");
    wait_for("replicas 3", Duration::from_secs(10), || async {
        (rig.replicas("api").await? == 3).then_some(())
    })
    .await;
    rig.action_state("burst", "api", "Applied").await;
    assert_eq!(
        rig.template_status("burst").await["actions"][0]["via"],
        "ProvisionalHPA"
    );
    wait_gone(&rig.hpas(), "moonin-api", Duration::from_secs(40)).await;
    wait_for(
        "replicas restored to 1",
        Duration::from_secs(10),
        || async { (rig.replicas("api").await? == 1).then_some(()) },
    )
    .await;
    let d = rig.deployments().get("api").await.expect("deployment");
    assert_eq!(annotations(&d.metadata), Vec::<String>::new());
    rig.delete_template("burst").await;
}

#[tokio::test]
async fn bad_input_is_reported_and_touches_nothing() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-bad").await;
    rig.deployment("good", 1).await;
    rig.deployment("other", 1).await;
    let other_hpa = rig.hpa("other", "other", 1, 3).await;
    let actions =
        json!([{"name": "a", "target": {"name": "other"}, "minReplicas": 2, "maxReplicas": 4}]);
    let start = in_secs(2);

    let mut cron = manual_template("bad-cron", &start, "1m", actions.clone());
    cron["spec"]["schedule"] = json!("61 * * * *");
    rig.template(cron).await;
    let mut zone = manual_template("bad-zone", &start, "1m", actions.clone());
    zone["spec"]["timeZone"] = json!("Mars/Olympus_Mons");
    rig.template(zone).await;
    rig.template(manual_template(
        "missing",
        &start,
        "1m",
        json!([{"name": "ghost", "target": {"name": "ghost"}, "minReplicas": 2, "maxReplicas": 4}]),
    ))
    .await;
    // A template targeting another namespace is refused at admission.
    let mut cross = manual_template("cross", &start, "1m", actions.clone());
    cross["spec"]["actions"][0]["target"]["namespace"] = json!("kube-system");
    let refused = rig
        .templates()
        .create(
            &PostParams::default(),
            &serde_json::from_value(cross).expect("t"),
        )
        .await
        .expect_err("cross-namespace target is refused");
    assert!(refused.to_string().contains("own namespace"), "{refused}");
    // A Deployment without an autoscaler whose provisional HPA's name another HPA holds.
    rig.deployment("taken", 1).await;
    rig.deployment("bystander", 1).await;
    let holder = rig.hpa("moonin-taken", "bystander", 1, 3).await;
    rig.template(manual_template(
        "name-taken",
        &start,
        "1m",
        json!([{"name": "a", "target": {"name": "taken"}, "minReplicas": 2, "maxReplicas": 4}]),
    ))
    .await;
    // And a good one keeps working next to them.
    rig.template(manual_template(
        "fine",
        &start,
        "1m",
        json!([{"name": "good", "target": {"name": "good"}, "minReplicas": 2, "maxReplicas": 4}]),
    ))
    .await;

    let c = rig
        .condition("bad-cron", "Ready", "False", "InvalidSchedule")
        .await;
    assert!(
        c["message"].as_str().unwrap_or_default().contains("61"),
        "{c}"
    );
    rig.condition("bad-cron", "Stalled", "True", "InvalidSchedule")
        .await;
    rig.condition("bad-zone", "Ready", "False", "UnknownTimeZone")
        .await;
    let c = rig
        .condition("missing", "Ready", "False", "TargetNotFound")
        .await;
    assert!(
        c["message"].as_str().unwrap_or_default().contains("ghost"),
        "{c}"
    );
    // Refused, reported and backed off from: not retried at once for good.
    let c = rig
        .condition("name-taken", "Ready", "False", "ApplyFailed")
        .await;
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("moonin-taken exists and is not Moonin's provisional HPA"),
        "{c}"
    );
    let hpa_writes = || {
        rig.manager
            .as_ref()
            .and_then(|m| {
                m.metric(
                    "moonin_api_writes_total",
                    &["controller=\"scaling\"", "kind=\"HorizontalPodAutoscaler\""],
                )
            })
            .unwrap_or_default()
    };
    let before = hpa_writes();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let retried = hpa_writes() - before;
    assert!(
        retried <= 3.0,
        "{retried} HPA writes in 5 s: the refusal is retried at once"
    );
    let now = rig.hpas().get("moonin-taken").await.expect("hpa");
    assert_eq!(
        now.spec, holder.spec,
        "the HPA holding the name is untouched"
    );
    rig.phase("bad-cron", "Invalid").await;
    wait_for(
        "the good template to apply",
        Duration::from_secs(20),
        || async { (rig.replicas("good").await? == 2).then_some(()) },
    )
    .await;
    rig.condition("fine", "Ready", "True", "Reconciled").await;
    for (name, reason) in [
        ("bad-cron", "InvalidSchedule"),
        ("bad-zone", "UnknownTimeZone"),
        ("missing", "TargetNotFound"),
    ] {
        let found = wait_for(
            &format!("a Warning Event for {name}"),
            Duration::from_secs(10),
            || async {
                let e = rig.events(name, reason).await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert_eq!(
            found.len(),
            1,
            "one Event, not one per reconcile: {found:?}"
        );
    }
    // Nothing touched the target of the invalid templates.
    let now = rig.hpas().get("other").await.expect("hpa");
    assert_eq!(now.spec, other_hpa.spec);
    assert_eq!(annotations(&now.metadata), Vec::<String>::new());
    assert_eq!(rig.replicas("other").await, Some(1));
    for name in ["bad-cron", "bad-zone", "missing", "name-taken", "fine"] {
        rig.delete_template(name).await;
    }
    assert_eq!(rig.replicas("taken").await, Some(1));
    assert_eq!(
        rig.replicas("good").await,
        Some(1),
        "deleting mid-window reverts"
    );
}

#[tokio::test]
async fn cluster_template_overrides_across_namespaces() {
    let client = require_cluster!();
    let rig = Rig::new(client.clone(), "cstpl").await;
    rig.deployment("batch", 1).await;
    rig.hpa("batch", "batch", 1, 4).await;
    let name = format!("{}-night", rig.ns());
    let api: Api<ClusterScalingTemplate> = Api::all(client.clone());
    let t: ClusterScalingTemplate = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterScalingTemplate",
        "metadata": {"name": name},
        "spec": {
            "schedule": "0 0 1 1 *",
            "duration": "15s",
            "manualRun": {"startTime": in_secs(2)},
            "actions": [{"name": "batch", "target": {"namespace": rig.ns(), "name": "batch"}, "minReplicas": 3, "maxReplicas": 5}]
        }
    }))
    .expect("cluster template");
    api.create(&PostParams::default(), &t)
        .await
        .expect("create");
    wait_for("the override", Duration::from_secs(20), || async {
        let h = rig.hpas().get("batch").await.ok()?;
        (h.spec.min_replicas == Some(3) && h.spec.max_replicas == 5).then_some(())
    })
    .await;
    let owner: Value = serde_json::from_str(
        &rig.hpas().get("batch").await.expect("hpa").annotations()[keys::OWNER],
    )
    .expect("owner");
    assert_eq!(owner["kind"], "ClusterScalingTemplate");
    wait_for("replicas 3", Duration::from_secs(10), || async {
        (rig.replicas("batch").await? == 3).then_some(())
    })
    .await;
    wait_for("the restore", Duration::from_secs(40), || async {
        let h = rig.hpas().get("batch").await.ok()?;
        (h.spec.min_replicas == Some(1)
            && h.spec.max_replicas == 4
            && annotations(&h.metadata).is_empty())
        .then_some(())
    })
    .await;
    wait_for("replicas 1", Duration::from_secs(40), || async {
        (rig.replicas("batch").await? == 1).then_some(())
    })
    .await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    wait_gone(&api, &name, Duration::from_secs(30)).await;
}

/// Waits until the HPA `name` has exactly `min`/`max` and, when `marked`, Moonin's marks.
async fn hpa_is(
    rig: &Rig,
    name: &str,
    min: i32,
    max: i32,
    marked: bool,
) -> HorizontalPodAutoscaler {
    wait_showing(
        &format!("HPA {name} at min {min} max {max} (marked: {marked})"),
        Duration::from_secs(40),
        || async {
            let h = rig.hpas().get(name).await.map_err(|e| e.to_string())?;
            if h.spec.min_replicas == Some(min)
                && h.spec.max_replicas == max
                && annotations(&h.metadata).is_empty() != marked
            {
                Ok(h)
            } else {
                Err(format!(
                    "min {:?} max {} annotations {:?}; {}",
                    h.spec.min_replicas,
                    h.spec.max_replicas,
                    h.metadata.annotations,
                    template_states(rig).await
                ))
            }
        },
    )
    .await
}

async fn replicas_are(rig: &Rig, name: &str, n: i32) {
    wait_showing(
        &format!("{name} at {n} replicas"),
        Duration::from_secs(40),
        || async {
            let d = rig
                .deployments()
                .get(name)
                .await
                .map_err(|e| e.to_string())?;
            let replicas = d.spec.as_ref().and_then(|s| s.replicas);
            if replicas == Some(n) {
                Ok(())
            } else {
                let hpa = rig.hpas().get_opt(name).await.ok().flatten();
                Err(format!(
                    "{replicas:?} replicas, annotations {:?}, written by {:?}; its HPA {:?} written by {:?}; {}",
                    d.metadata.annotations,
                    harness::writes(&d.metadata),
                    hpa.as_ref().map(|h| (&h.spec, &h.metadata.annotations)),
                    hpa.as_ref().map(|h| harness::writes(&h.metadata)),
                    template_states(rig).await
                ))
            }
        },
    )
    .await;
}

/// Every template of the namespace with its actions' states and messages, for a failure
/// to say what the controller reported.
async fn template_states(rig: &Rig) -> String {
    let Ok(list) = rig.templates().list(&Default::default()).await else {
        return "templates not listed".to_string();
    };
    let states: Vec<String> = list
        .items
        .iter()
        .map(|t| {
            let actions: Vec<String> = t
                .status
                .iter()
                .flat_map(|s| &s.actions)
                .map(|a| {
                    format!(
                        "{}: {} ({})",
                        a.name,
                        a.state,
                        a.message.as_deref().unwrap_or("")
                    )
                })
                .collect();
            format!("{} [{}]", t.name_any(), actions.join("; "))
        })
        .collect();
    format!("templates: {}", states.join(", "))
}

#[tokio::test]
async fn manual_run_suspend_and_valid_until_revert_mid_window() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-life").await;
    for name in ["s", "v"] {
        rig.deployment(name, 1).await;
        rig.hpa(name, name, 1, 3).await;
    }
    let start = in_secs(2);
    rig.template(manual_template(
        "suspend-me",
        &start,
        "10m",
        json!([{"name": "s", "target": {"name": "s"}, "minReplicas": 2, "maxReplicas": 5}]),
    ))
    .await;
    let mut expiring = manual_template(
        "expires",
        &start,
        "10m",
        json!([{"name": "v", "target": {"name": "v"}, "minReplicas": 2, "maxReplicas": 5}]),
    );
    expiring["spec"]["validUntil"] = json!(in_secs(12));
    rig.template(expiring).await;

    hpa_is(&rig, "s", 2, 5, true).await;
    hpa_is(&rig, "v", 2, 5, true).await;
    replicas_are(&rig, "s", 2).await;
    // The HPA and Deployment writes land before the status that records them.
    rig.phase("suspend-me", "Active").await;
    assert_eq!(
        rig.template_status("suspend-me").await["window"]["trigger"],
        "Manual"
    );

    rig.templates()
        .patch(
            "suspend-me",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend");
    hpa_is(&rig, "s", 1, 3, false).await;
    replicas_are(&rig, "s", 1).await;
    rig.phase("suspend-me", "Suspended").await;
    rig.condition("suspend-me", "Active", "False", "Suspended")
        .await;

    // validUntil passes while the manual window is still open.
    hpa_is(&rig, "v", 1, 3, false).await;
    replicas_are(&rig, "v", 1).await;
    rig.phase("expires", "Expired").await;

    for name in ["suspend-me", "expires"] {
        rig.delete_template(name).await;
    }
}

/// `kubectl rollout undo` puts the annotations of the ReplicaSet it rolls back to on the
/// Deployment, Moonin's marks among them when that ReplicaSet lived through a window (the
/// Deployment controller copies a Deployment's annotations onto its ReplicaSet). Those
/// copies are not Moonin's record: with their template gone they change nothing, and the
/// next window removes them before its override, whose restore puts back what the
/// Deployment had then, not what the copies say.
#[tokio::test]
async fn marks_a_rollback_copies_back_change_nothing_and_the_next_window_restores_exactly() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-undo").await;
    rig.deployment("web", 1).await;
    rig.hpa("web", "web", 1, 3).await;
    let action = |min: i32| json!([{"name": "web", "target": {"name": "web"}, "minReplicas": min, "maxReplicas": 5}]);
    rig.template(manual_template("first", &in_secs(2), "10m", action(2)))
        .await;
    hpa_is(&rig, "web", 2, 5, true).await;
    replicas_are(&rig, "web", 2).await;
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(rig.client.clone(), rig.ns());
    wait_for(
        "the Deployment controller to copy the marks onto the ReplicaSet",
        Duration::from_secs(30),
        || async {
            let list = replica_sets.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|r| r.annotations().contains_key(keys::OWNER))
                .then_some(())
        },
    )
    .await;
    rig.delete_template("first").await;
    hpa_is(&rig, "web", 1, 3, false).await;
    replicas_are(&rig, "web", 1).await;

    // A new revision (its ReplicaSet has no marks), scaled to 3 as its HPA might; then
    // rolled back to the revision that lived through the window.
    rig.deployments()
        .patch(
            "web",
            &PatchParams {
                field_manager: Some(harness::TEST_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": 3, "template": {"metadata": {"annotations": {"rev": "2"}}}}})),
        )
        .await
        .expect("new revision");
    replicas_are(&rig, "web", 3).await;
    let out = std::process::Command::new("kubectl")
        .args(["rollout", "undo", "deployment/web", "-n", rig.ns()])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl rollout undo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copied = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(
        copied
            .annotations()
            .get(keys::ORIGINAL_REPLICAS)
            .map(String::as_str),
        Some("1"),
        "the rollback copies the first window's marks back"
    );
    let writes = rig.writes();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(
        after.spec.and_then(|s| s.replicas),
        Some(3),
        "{:?}",
        after.metadata.annotations
    );
    assert_eq!(rig.writes(), writes, "Moonin wrote after the rollback");

    // The next window raises 3 to 4: the copies go first, then its own marks record 3.
    rig.template(manual_template("second", &in_secs(2), "10m", action(4)))
        .await;
    hpa_is(&rig, "web", 4, 5, true).await;
    replicas_are(&rig, "web", 4).await;
    let raised = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(
        raised
            .annotations()
            .get(keys::ORIGINAL_REPLICAS)
            .map(String::as_str),
        Some("3")
    );
    rig.delete_template("second").await;
    hpa_is(&rig, "web", 1, 3, false).await;
    replicas_are(&rig, "web", 3).await;
    let d = rig.deployments().get("web").await.expect("deployment");
    assert_eq!(annotations(&d.metadata), Vec::<String>::new());
}

/// An action taken out of a template while its window is open: only the marks on its target
/// say the template wrote it, and its target is restored exactly while the other stays
/// overridden.
#[tokio::test]
async fn an_action_removed_mid_window_restores_its_target_and_no_other() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-edit").await;
    let mut originals = Vec::new();
    for name in ["kept", "dropped"] {
        rig.deployment(name, 1).await;
        let hpa = rig.hpa(name, name, 1, 3).await;
        originals.push(serde_json::to_value(&hpa.spec).expect("spec"));
    }
    let action = |name: &str| json!({"name": name, "target": {"name": name}, "minReplicas": 2, "maxReplicas": 5});
    rig.template(manual_template(
        "edited",
        &in_secs(2),
        "10m",
        json!([action("kept"), action("dropped")]),
    ))
    .await;
    for name in ["kept", "dropped"] {
        hpa_is(&rig, name, 2, 5, true).await;
        replicas_are(&rig, name, 2).await;
    }

    rig.templates()
        .patch(
            "edited",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"actions": [action("kept")]}})),
        )
        .await
        .expect("drop an action");
    let restored = hpa_is(&rig, "dropped", 1, 3, false).await;
    assert_eq!(
        serde_json::to_value(&restored.spec).expect("spec"),
        originals[1]
    );
    replicas_are(&rig, "dropped", 1).await;
    let d = rig.deployments().get("dropped").await.expect("deployment");
    assert_eq!(annotations(&d.metadata), Vec::<String>::new());
    hpa_is(&rig, "kept", 2, 5, true).await;
    replicas_are(&rig, "kept", 2).await;
    rig.phase("edited", "Active").await;

    rig.delete_template("edited").await;
    let restored = hpa_is(&rig, "kept", 1, 3, false).await;
    assert_eq!(
        serde_json::to_value(&restored.spec).expect("spec"),
        originals[0]
    );
    replicas_are(&rig, "kept", 1).await;
}

#[tokio::test]
async fn a_second_template_on_the_same_target_conflicts_without_flapping() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-conflict").await;
    rig.deployment("shop", 1).await;
    rig.hpa("shop", "shop", 1, 3).await;
    let start = in_secs(2);
    rig.template(manual_template(
        "first",
        &start,
        "10m",
        json!([{"name": "a", "target": {"name": "shop"}, "minReplicas": 2, "maxReplicas": 4}]),
    ))
    .await;
    let held = hpa_is(&rig, "shop", 2, 4, true).await;
    rig.template(manual_template(
        "second",
        &start,
        "10m",
        json!([{"name": "b", "target": {"name": "shop"}, "minReplicas": 3, "maxReplicas": 6}]),
    ))
    .await;
    let c = rig
        .condition("second", "Conflict", "True", "Conflict")
        .await;
    let msg = c["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains(&format!("{}/first", rig.ns())), "{msg}");
    rig.condition("second", "Ready", "False", "Conflict").await;
    assert_eq!(
        rig.template_status("second").await["actions"][0]["state"],
        "Conflict"
    );

    // Steady state: nobody writes, the holder keeps the target.
    let writes = rig.writes();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(rig.writes(), writes, "no write while nothing changes");
    let now = rig.hpas().get("shop").await.expect("hpa");
    assert_eq!(
        now.annotations().get(keys::OWNER),
        held.annotations().get(keys::OWNER)
    );
    assert_eq!(now.spec.min_replicas, Some(2));
    assert_eq!(
        rig.events("second", "Conflict").await.len(),
        1,
        "one Conflict Event"
    );

    // When the holder lets go, the second template takes over.
    rig.delete_template("first").await;
    hpa_is(&rig, "shop", 3, 6, true).await;
    rig.condition("second", "Conflict", "False", "NoConflict")
        .await;
    rig.delete_template("second").await;
    hpa_is(&rig, "shop", 1, 3, false).await;
    replicas_are(&rig, "shop", 1).await;
}

#[tokio::test]
async fn another_field_manager_undoing_the_override_is_named_and_not_fought_forever() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-drift").await;
    rig.deployment("app", 1).await;
    rig.hpa("app", "app", 1, 3).await;
    rig.template(manual_template(
        "peak",
        &in_secs(2),
        "10m",
        json!([{"name": "app", "target": {"name": "app"}, "minReplicas": 2, "maxReplicas": 5}]),
    ))
    .await;
    hpa_is(&rig, "app", 2, 5, true).await;
    // Argo CD's self-heal puts git's values back, again and again.
    let selfheal = PatchParams {
        field_manager: Some("argocd-controller".into()),
        ..PatchParams::default()
    };
    let git = Patch::Merge(json!({"spec": {"minReplicas": 1, "maxReplicas": 3}}));
    for round in 1..=moonin::scaling::decide::MAX_REAPPLIES {
        rig.hpas()
            .patch("app", &selfheal, &git)
            .await
            .expect("self-heal");
        hpa_is(&rig, "app", 2, 5, true).await;
        let nth = format!("re-applied ({round} of");
        let c = wait_for(
            &format!("round {round} reported"),
            Duration::from_secs(30),
            || async {
                let s = rig.template_status("peak").await;
                s["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| {
                        c["type"] == "Reverted"
                            && c["reason"] == "OverriddenByFieldManager"
                            && c["message"].as_str().is_some_and(|m| m.contains(&nth))
                    })
                    .cloned()
            },
        )
        .await;
        let msg = c["message"].as_str().unwrap_or_default();
        assert!(msg.contains("argocd-controller"), "round {round}: {msg}");
    }
    rig.hpas()
        .patch("app", &selfheal, &git)
        .await
        .expect("self-heal");
    let c = rig
        .condition("peak", "Reverted", "True", "ReapplyLimitReached")
        .await;
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("argocd-controller")
    );
    rig.condition("peak", "Ready", "False", "ReapplyLimitReached")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let h = rig.hpas().get("app").await.expect("hpa");
    assert_eq!(h.spec.min_replicas, Some(1), "Moonin stopped re-applying");
    assert!(!rig.events("peak", "ReapplyLimitReached").await.is_empty());

    // Deleting the template restores nothing the other manager now owns, and clears marks.
    rig.delete_template("peak").await;
    let h = hpa_is(&rig, "app", 1, 3, false).await;
    assert_eq!(annotations(&h.metadata), Vec::<String>::new());
}

/// The scaling controller's reconciles so far, once the count has stood still for 3 s.
async fn reconciles_settled(rig: &Rig) -> f64 {
    let count = || rig.metric("moonin_reconciliations_total", &["controller=\"scaling\""]);
    let mut last = (count(), std::time::Instant::now());
    wait_for(
        "the reconciles to stand still",
        Duration::from_secs(60),
        || {
            let now = count();
            if now != last.0 {
                last = (now, std::time::Instant::now());
            }
            let still = last.1.elapsed() >= Duration::from_secs(3);
            async move { still.then_some(now.unwrap_or_default()) }
        },
    )
    .await
}

/// Another tool's writes to a template's targets that change nothing a decision reads (its
/// annotations, on the HPA and on the Deployment) wake no reconcile; a write of a bound does.
#[tokio::test]
async fn another_tools_annotations_on_the_targets_wake_no_reconcile() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-quiet").await;
    rig.deployment("web", 1).await;
    rig.hpa("web", "web", 1, 3).await;
    rig.template(manual_template(
        "later",
        &in_secs(3600),
        "1m",
        json!([{"name": "web", "target": {"name": "web"}, "minReplicas": 2, "maxReplicas": 4}]),
    ))
    .await;
    // The HPA controller has written the HPA's status once (its later writes are alike).
    wait_for("the HPA's status", Duration::from_secs(60), || async {
        let h = rig.hpas().get("web").await.ok()?;
        (!h.status?.conditions?.is_empty()).then_some(())
    })
    .await;
    let before = reconciles_settled(&rig).await;
    let writes = rig.writes();
    let other = PatchParams {
        field_manager: Some("other-tool".into()),
        ..PatchParams::default()
    };
    for i in 0..10 {
        let touched = Patch::Merge(
            json!({"metadata": {"annotations": {"example.com/touched": i.to_string()}}}),
        );
        rig.hpas()
            .patch("web", &other, &touched)
            .await
            .expect("annotate HPA");
        rig.deployments()
            .patch("web", &other, &touched)
            .await
            .expect("annotate Deployment");
    }
    let after = reconciles_settled(&rig).await;
    assert!(
        after - before <= 1.0,
        "20 annotation writes woke {} reconciles",
        after - before
    );
    assert_eq!(rig.writes(), writes, "nothing written for them");
    // The same tool raising the HPA's maximum is a change a decision reads.
    let bound = Patch::Merge(json!({"spec": {"maxReplicas": 5}}));
    rig.hpas()
        .patch("web", &other, &bound)
        .await
        .expect("raise max");
    let woken = reconciles_settled(&rig).await;
    assert!(woken > after, "a write of a bound woke no reconcile");
}

#[tokio::test]
async fn sigkill_at_any_point_converges_to_the_exact_original_state() {
    let client = require_cluster!();
    let mut rig = Rig::new(client, "stpl-crash").await;
    // Six targets, some with an HPA and some without, all opening and closing together:
    // one kill catches each of them at a different point of its writes.
    let names: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    let mut originals = Vec::new();
    for (i, name) in names.iter().enumerate() {
        rig.deployment(name, 1 + (i as i32 % 2)).await;
        let spec = if i % 3 == 2 {
            None
        } else {
            Some(serde_json::to_value(rig.hpa(name, name, 1, 4).await.spec).expect("spec"))
        };
        originals.push(spec);
    }
    for (round, kill_after_ms) in [0u64, 40, 150].into_iter().enumerate() {
        let open = Timestamp::now() + SignedDuration::from_secs(4);
        let open = Timestamp::from_second(open.as_second()).expect("ts");
        let length = 10;
        for (i, name) in names.iter().enumerate() {
            rig.template(manual_template(
                &format!("r{round}-{name}"),
                &open.to_string(),
                &format!("{length}s"),
                json!([{"name": "a", "target": {"name": name}, "minReplicas": 3 + i as i32 % 2, "maxReplicas": 6}]),
            ))
            .await;
        }
        for edge in [open, open + SignedDuration::from_secs(length)] {
            let kill_at = edge + SignedDuration::from_millis(kill_after_ms as i64);
            let wait = kill_at.duration_since(Timestamp::now());
            tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
            rig.kill();
            let mut between = 0;
            for name in &names {
                let hpa_marked = rig
                    .hpas()
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|h| !annotations(&h.metadata).is_empty())
                    || rig
                        .hpas()
                        .get_opt(&format!("moonin-{name}"))
                        .await
                        .ok()
                        .flatten()
                        .is_some();
                let dep_marked = rig
                    .deployments()
                    .get(name)
                    .await
                    .is_ok_and(|d| !annotations(&d.metadata).is_empty());
                between += usize::from(hpa_marked != dep_marked);
            }
            eprintln!(
                "round {round}: killed {kill_after_ms} ms after the edge at {edge}; {between} of {} targets between their writes",
                names.len()
            );
            rig.start().await;
        }
        // After the window: every target is exactly as before.
        for (i, name) in names.iter().enumerate() {
            match &originals[i] {
                Some(spec) => {
                    let h = hpa_is(&rig, name, 1, 4, false).await;
                    assert_eq!(
                        &serde_json::to_value(&h.spec).expect("spec"),
                        spec,
                        "{name}"
                    );
                }
                None => {
                    wait_for(
                        &format!("no provisional HPA for {name}"),
                        Duration::from_secs(30),
                        || async {
                            rig.hpas()
                                .get_opt(&format!("moonin-{name}"))
                                .await
                                .ok()?
                                .is_none()
                                .then_some(())
                        },
                    )
                    .await;
                }
            }
            replicas_are(&rig, name, 1 + (i as i32 % 2)).await;
            let d = rig.deployments().get(name).await.expect("deployment");
            assert_eq!(annotations(&d.metadata), Vec::<String>::new(), "{name}");
        }
        for name in &names {
            rig.delete_template(&format!("r{round}-{name}")).await;
        }
    }
    // The restored replicas hold past one HPA sync period (15 s): an HPA controller that
    // scaled one back on the override's bounds after its restore has been undone by now.
    tokio::time::sleep(Duration::from_secs(20)).await;
    for (i, name) in names.iter().enumerate() {
        let d = rig.deployments().get(name).await.expect("deployment");
        assert_eq!(
            d.spec.and_then(|s| s.replicas),
            Some(1 + (i as i32 % 2)),
            "{name} after 20 s, written by {:?}",
            harness::writes(&d.metadata)
        );
    }
}

/// KEDA's HPA for the ScaledObject `queue` (KEDA copies the ScaledObject's annotations onto
/// it, so only the bounds are compared).
async fn keda_hpa_is(rig: &Rig, min: i32, max: i32) -> HorizontalPodAutoscaler {
    wait_for(
        &format!("keda-hpa-queue at {min}..{max}"),
        Duration::from_secs(40),
        || async {
            let h = rig.hpas().get("keda-hpa-queue").await.ok()?;
            (h.spec.min_replicas == Some(min) && h.spec.max_replicas == max).then_some(h)
        },
    )
    .await
}

/// KEDA's operator, built from its pinned module by `e2e/keda`, turns the ScaledObject into
/// the HPA `keda-hpa-<name>`; kube-controller-manager scales the Deployment. Moonin writes
/// only the ScaledObject.
#[tokio::test]
async fn keda_scaled_object_is_overridden_and_restored_and_its_hpa_never_touched() {
    let client = require_cluster!();
    let keda = crate::common::root().join("e2e/keda");
    let running = std::process::Command::new(&keda)
        .arg("status")
        .output()
        .is_ok_and(|o| o.status.success());
    if !running {
        assert!(
            std::env::var("MOONIN_E2E").as_deref() != Ok("required"),
            "the KEDA operator is not running: e2e/test starts it with `e2e/keda start`"
        );
        eprintln!("skipping: the KEDA operator is not running (e2e/keda start)");
        return;
    }
    let rig = Rig::new(client, "stpl-keda").await;
    rig.deployment("queue", 1).await;
    rig.deployment("frozen", 1).await;
    let so = |name: &str, paused: bool| {
        let mut v = json!({
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": name},
            "spec": {
                "scaleTargetRef": {"name": name},
                "minReplicaCount": 1,
                "maxReplicaCount": 4,
                "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}}}},
                "triggers": [{"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": "0 3 * * *", "end": "0 4 * * *", "desiredReplicas": "3"}}]
            }
        });
        if paused {
            v["metadata"]["annotations"] = json!({"autoscaling.keda.sh/paused": "true"});
        }
        serde_json::from_value::<kube::api::DynamicObject>(v).expect("scaled object")
    };
    let api = crate::harness::scaled_objects(&rig.client, rig.ns());
    let created = api
        .create(&PostParams::default(), &so("queue", false))
        .await
        .expect("create ScaledObject");
    api.create(&PostParams::default(), &so("frozen", true))
        .await
        .expect("create paused ScaledObject");
    keda_hpa_is(&rig, 1, 4).await;
    // As KEDA left it after its first reconcile (it fills in defaults such as
    // `advanced.scalingModifiers`).
    let original_spec = api.get("queue").await.expect("so").data["spec"].clone();
    assert_eq!(
        original_spec["minReplicaCount"],
        created.data["spec"]["minReplicaCount"]
    );

    rig.template(manual_template(
        "drain",
        &in_secs(2),
        "20s",
        json!([
            {"name": "queue", "target": {"name": "queue"}, "minReplicas": 3, "maxReplicas": 6},
            {"name": "frozen", "target": {"name": "frozen"}, "minReplicas": 3, "maxReplicas": 6}
        ]),
    ))
    .await;
    let overridden = wait_for(
        "the ScaledObject override",
        Duration::from_secs(20),
        || async {
            let o = api.get("queue").await.ok()?;
            (o.data["spec"]["minReplicaCount"] == 3 && o.data["spec"]["maxReplicaCount"] == 6)
                .then_some(o)
        },
    )
    .await;
    let original: Value =
        serde_json::from_str(&overridden.annotations()[keys::ORIGINAL]).expect("original");
    assert_eq!(
        original["spec"],
        json!({"minReplicaCount": 1, "maxReplicaCount": 4})
    );
    // KEDA carries the new bounds to its HPA; the HPA controller scales the Deployment.
    keda_hpa_is(&rig, 3, 6).await;
    replicas_are(&rig, "queue", 3).await;
    rig.action_state("drain", "queue", "Applied").await;
    rig.action_state("drain", "frozen", "Blocked").await;
    let status = rig.template_status("drain").await;
    let actions = status["actions"].as_array().cloned().unwrap_or_default();
    let state = |n: &str| {
        actions
            .iter()
            .find(|a| a["name"] == n)
            .map(|a| (a["state"].clone(), a["via"].clone(), a["message"].clone()))
    };
    assert_eq!(
        state("queue").map(|s| (s.0, s.1)),
        Some((json!("Applied"), json!("ScaledObject")))
    );
    let frozen = state("frozen").expect("frozen action");
    assert_eq!(frozen.0, "Blocked", "{frozen:?}");
    assert!(
        frozen.2.as_str().unwrap_or_default().contains("paused"),
        "{frozen:?}"
    );
    let paused = api.get("frozen").await.expect("paused SO");
    assert_eq!(
        paused.data["spec"]["minReplicaCount"], 1,
        "a paused ScaledObject is left alone"
    );

    // The window ends: the ScaledObject's spec is exactly as before, KEDA follows.
    let restored = wait_for(
        "the ScaledObject restore",
        Duration::from_secs(40),
        || async {
            let o = api.get("queue").await.ok()?;
            (o.data["spec"]["minReplicaCount"] == 1 && annotations(&o.metadata).is_empty())
                .then_some(o)
        },
    )
    .await;
    assert_eq!(restored.data["spec"], original_spec);
    let hpa = keda_hpa_is(&rig, 1, 4).await;
    replicas_are(&rig, "queue", 1).await;
    let managers: Vec<String> = hpa
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m.starts_with("moonin")),
        "Moonin never writes KEDA's HPA: {managers:?}"
    );
    rig.delete_template("drain").await;
}

/// Deployment `name` (1 replica) and its HPA (1..3), overridden (2..5) by template `gone`,
/// which is deleted while Moonin is down (someone strips its finalizer). Moonin stays down;
/// the HPA as it was before the window is returned.
async fn left_by_a_deleted_template(rig: &mut Rig, name: &str) -> HorizontalPodAutoscaler {
    rig.deployment(name, 1).await;
    let before = rig.hpa(name, name, 1, 3).await;
    rig.template(manual_template(
        "gone",
        &in_secs(2),
        "10m",
        json!([{"name": name, "target": {"name": name}, "minReplicas": 2, "maxReplicas": 5}]),
    ))
    .await;
    hpa_is(rig, name, 2, 5, true).await;
    replicas_are(rig, name, 2).await;
    rig.kill();
    rig.templates()
        .patch(
            "gone",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("strip finalizer");
    let _ = rig
        .templates()
        .delete("gone", &DeleteParams::default())
        .await;
    wait_gone(&rig.templates(), "gone", Duration::from_secs(20)).await;
    before
}

#[tokio::test]
async fn overrides_of_a_template_deleted_while_moonin_was_down_are_swept_at_startup() {
    let client = require_cluster!();
    let mut rig = Rig::new(client, "stpl-sweep").await;
    let before = left_by_a_deleted_template(&mut rig, "left").await;
    assert_eq!(
        rig.hpas().get("left").await.expect("hpa").spec.min_replicas,
        Some(2),
        "nothing restored it while Moonin was down"
    );

    rig.start().await;
    let after = hpa_is(&rig, "left", 1, 3, false).await;
    assert_eq!(after.spec, before.spec);
    replicas_are(&rig, "left", 1).await;
    let notes = wait_for(
        "a Reverted Event on the HPA",
        Duration::from_secs(10),
        || async {
            let e = rig.events("left", "Reverted").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(
        notes.iter().any(|n| n.contains("no longer exists")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn a_refused_sweep_write_waits_for_the_next_sweep_and_holds_its_targets_other_writes() {
    let client = require_cluster!();
    let mut rig = Rig::new(client.clone(), "stpl-sweep-refused").await;
    left_by_a_deleted_template(&mut rig, "held").await;
    // And an admission policy refuses HPA writes.
    let hpas = rig.hpas();
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let _refusal = Refusal::create(
        &client,
        rig.ns(),
        "autoscaling",
        "horizontalpodautoscalers",
        || {
            let (hpas, dry) = (hpas.clone(), dry.clone());
            async move {
                let probe = json!({"metadata": {"annotations": {"e2e-probe": "x"}}});
                hpas.patch("held", &dry, &Patch::Merge(probe))
                    .await
                    .map(|_| ())
            }
        },
    )
    .await;

    rig.start().await;
    let refused = |rig: &Rig| {
        rig.manager
            .as_ref()
            .map(|m| m.log_text().matches("sweep write refused").count())
            .unwrap_or_default()
    };
    wait_for(
        "the sweep's refused HPA restore in the log",
        Duration::from_secs(30),
        || async { (refused(&rig) > 0).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        refused(&rig) <= 2,
        "sent again at once: {} refusals logged",
        refused(&rig)
    );
    // The Deployment's restore waits behind its HPA's: nothing else of the target moved.
    assert_eq!(rig.replicas("held").await, Some(2));
    let hpa = rig.hpas().get("held").await.expect("hpa");
    assert_eq!(hpa.spec.min_replicas, Some(2), "the refused restore");
}

/// An HPA pointed at another Deployment during its window gives back its own bounds at once
/// (the template's action no longer reaches it) and never puts the replicas it recorded,
/// its first Deployment's, on the Deployment it scales now; the first Deployment, left with
/// no autoscaler, gets a provisional HPA for the rest of the window and its replicas back at
/// the close.
#[tokio::test]
async fn an_hpa_pointed_at_another_deployment_mid_window_leaves_that_deployment_alone() {
    let client = require_cluster!();
    let rig = Rig::new(client, "stpl-repointed").await;
    rig.deployment("web", 2).await;
    rig.deployment("other", 5).await;
    rig.hpa("web", "web", 2, 8).await;
    rig.template(manual_template(
        "repointed",
        &in_secs(2),
        "40s",
        json!([{"name": "web", "target": {"name": "web"}, "minReplicas": 4, "maxReplicas": 10}]),
    ))
    .await;
    hpa_is(&rig, "web", 4, 10, true).await;
    replicas_are(&rig, "web", 4).await;

    rig.hpas()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "other"}}})),
        )
        .await
        .expect("point the HPA at other");
    hpa_is(&rig, "web", 2, 8, false).await;
    let provisional = wait_for(
        "a provisional HPA for web",
        Duration::from_secs(30),
        || async { rig.hpas().get_opt("moonin-web").await.ok().flatten() },
    )
    .await;
    assert_eq!(provisional.spec.scale_target_ref.name, "web");
    assert_eq!(rig.replicas("web").await, Some(4), "web holds the window");

    // The close: the provisional HPA goes and web comes back; other was never written.
    wait_gone(&rig.hpas(), "moonin-web", Duration::from_secs(60)).await;
    replicas_are(&rig, "web", 2).await;
    rig.phase("repointed", "Idle").await;
    let other = rig.deployments().get("other").await.expect("other");
    assert_eq!(other.spec.as_ref().and_then(|s| s.replicas), Some(5));
    assert!(
        !harness::writes(&other.metadata)
            .iter()
            .any(|w| w.contains("moonin")),
        "Moonin wrote other: {:?}",
        harness::writes(&other.metadata)
    );
    rig.delete_template("repointed").await;
}

/// The Events of a window's writes go after the template's status that records them. When
/// that status write is refused, the writes are not made again (they hold), so their Events
/// wait for the status write that finally succeeds instead of being lost with the reconcile.
#[tokio::test]
async fn events_of_writes_whose_status_write_was_refused_go_with_the_status_written_later() {
    let client = require_cluster!();
    let mut rig = Rig::new(client.clone(), "stpl-status-refused").await;
    rig.kill();
    rig.deployment("web", 1).await;
    rig.hpa("web", "web", 1, 3).await;
    rig.template(manual_template(
        "refused-status",
        &in_secs(1),
        "10m",
        json!([{"name": "web", "target": {"name": "web"}, "minReplicas": 2, "maxReplicas": 5}]),
    ))
    .await;
    let templates = rig.templates();
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refusal = Refusal::create(
        &client,
        rig.ns(),
        "moonin.io",
        "scalingtemplates/status",
        || {
            let (templates, dry) = (templates.clone(), dry.clone());
            async move {
                let probe = json!({"status": {"observedGeneration": 0}});
                templates
                    .patch_status("refused-status", &dry, &Patch::Merge(probe))
                    .await
                    .map(|_| ())
            }
        },
    )
    .await;

    rig.start().await;
    hpa_is(&rig, "web", 2, 5, true).await;
    replicas_are(&rig, "web", 2).await;
    wait_for(
        "the status write refused in the log",
        Duration::from_secs(30),
        || async {
            let log = rig.manager.as_ref()?.log_text();
            log.contains("could not write the template").then_some(())
        },
    )
    .await;
    assert_eq!(
        rig.template_status("refused-status").await["phase"],
        Value::Null,
        "the status was written"
    );
    for reason in ["Applied", "ScaledUp"] {
        let early = rig.events("refused-status", reason).await;
        assert!(early.is_empty(), "{reason} before its status: {early:?}");
    }

    refusal.lift();
    rig.phase("refused-status", "Active").await;
    for (reason, says) in [
        ("Applied", "minReplicas 1 -> 2"),
        ("ScaledUp", "replicas 1 -> 2"),
    ] {
        let notes = wait_for(
            &format!("the {reason} Event"),
            Duration::from_secs(30),
            || async {
                let notes = rig.events("refused-status", reason).await;
                (!notes.is_empty()).then_some(notes)
            },
        )
        .await;
        assert_eq!(notes.len(), 1, "{reason}: {notes:?}");
        assert!(
            notes[0].starts_with("web: ") && notes[0].contains(says),
            "{reason}: {notes:?}"
        );
    }
    rig.delete_template("refused-status").await;
}

#[tokio::test]
async fn moonin_schedule_reads_a_live_template() {
    let client = require_cluster!();
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "stpl-schedule").await;
    let api: Api<ScalingTemplate> = Api::namespaced(client.clone(), &ns.name);
    let t: ScalingTemplate = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "30 2 * * *",
            "timeZone": "America/New_York",
            "duration": "1h",
            "actions": [{"name": "a", "target": {"name": "x"}, "minReplicas": 1, "maxReplicas": 2}]
        }
    }))
    .expect("template");
    api.create(&PostParams::default(), &t)
        .await
        .expect("create");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_moonin"))
        .args([
            "schedule",
            &format!("{}/nightly", ns.name),
            "--from",
            "2026-03-07T12:00:00Z",
            "--count",
            "2",
            "-o",
            "json",
        ])
        .output()
        .expect("moonin schedule runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let windows: Value = serde_json::from_slice(&out.stdout).expect("json");
    // 02:30 does not exist on 8 March 2026 in New York: the window opens at 03:00 EDT.
    assert_eq!(
        windows,
        json!([
            {"start": "2026-03-08T07:00:00Z", "end": "2026-03-08T08:00:00Z", "dstAdjusted": true},
            {"start": "2026-03-09T06:30:00Z", "end": "2026-03-09T07:30:00Z", "dstAdjusted": false}
        ])
    );
}
