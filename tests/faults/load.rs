//! The load a fault meets: a window about to open and one about to close, claims not yet
//! bound, a Deployment just changed. [`Load::check`] says whether the end state is exactly the
//! one a fault-free run reaches.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{
    apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler, core::v1::Pod,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use moonin::api::{
    discovery::{NamespaceInventory, WorkloadRevision},
    sandbox::{SandboxClaim, SandboxPool},
    scaling::ScalingTemplate,
};
use serde_json::{Value, json};

use crate::harness::{self, kwok_deployment, wait_for};

/// Claims created just before the fault.
pub const CLAIMS: usize = 4;
/// The pool's size until then: fewer idle Pods than claims. With the claims the pool grows
/// to one Pod per claim, so some claims wait for Pods that do not exist yet when the fault
/// hits.
const POOL: i32 = 2;

/// What was set up, and the originals the end state is held against.
pub struct Load {
    client: Client,
    ns: String,
    /// The HPA `closes` as it was before any window: restored byte for byte.
    closes_original: Value,
}

/// An instant `secs` from now, whole seconds, as RFC 3339.
fn at(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .expect("timestamp")
        .to_string()
}

impl Load {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Everything the fault will meet that can be prepared ahead: Deployments with HPAs, a
    /// ClusterDiscovery and a Deployment it has a baseline of, a pool of warm Pods, and a
    /// window that is open now. Needs a manager leading.
    pub async fn prepare(client: &Client, ns: &str) -> Self {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
        let pp = PostParams::default();
        for name in ["opens", "closes", "web"] {
            deployments
                .create(&pp, &kwok_deployment(name, 1))
                .await
                .expect("deployment");
        }
        let mut closes_original = Value::Null;
        for name in ["opens", "closes"] {
            let h: HorizontalPodAutoscaler = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": 1,
                    "maxReplicas": 3,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}}
                }
            }))
            .expect("hpa");
            let created = hpas.create(&pp, &h).await.expect("hpa");
            if name == "closes" {
                closes_original = serde_json::to_value(&created.spec).expect("spec");
            }
        }
        let cds = crate::harness::moonin_api(client, "ClusterDiscovery", "");
        let cd = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "metadata": {"name": "cluster"},
            "spec": {"clusterName": "faults"}
        }))
        .expect("cd");
        cds.create(&pp, &cd).await.expect("ClusterDiscovery");
        let pools: Api<SandboxPool> = Api::namespaced(client.clone(), ns);
        let pool: SandboxPool = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxPool",
            "metadata": {"name": "pool"},
            "spec": {
                "replicas": POOL,
                "template": {"spec": {
                    "containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }}
            }
        }))
        .expect("pool");
        pools.create(&pp, &pool).await.expect("pool");
        let load = Self {
            client: client.clone(),
            ns: ns.to_string(),
            closes_original,
        };

        let inventories: Api<NamespaceInventory> = load.api();
        wait_for(
            "web's baseline in the inventory",
            Duration::from_secs(60),
            || async {
                let i = inventories.get_opt("inventory").await.ok()??;
                let v = serde_json::to_value(i.status?).ok()?;
                v["deployments"]
                    .as_array()?
                    .iter()
                    .any(|d| d["name"] == "web" && d["baseline"].is_object())
                    .then_some(())
            },
        )
        .await;
        wait_for(
            "2 idle Pods in the pool",
            Duration::from_secs(60),
            || async {
                let p = pools.get("pool").await.ok()?;
                (serde_json::to_value(p.status?).ok()?["idleReplicas"] == POOL).then_some(())
            },
        )
        .await;
        load
    }

    /// The window of `closes`, open from now until `closes_at`; returns once it is applied.
    pub async fn open_window_closing_at(&self, closes_at: Timestamp) {
        let start = Timestamp::now() + SignedDuration::from_secs(2);
        let secs = closes_at.duration_since(start).as_secs().max(1);
        self.template("closing", "closes", start, &format!("{secs}s"))
            .await;
        let hpas: Api<HorizontalPodAutoscaler> = self.api();
        wait_for(
            "the closing window applied",
            Duration::from_secs(30),
            || async {
                (hpas.get("closes").await.ok()?.spec.min_replicas == Some(4)).then_some(())
            },
        )
        .await;
    }

    /// The window of `opens`, from `opens_at` for ten minutes.
    pub async fn window_opening_at(&self, opens_at: Timestamp) {
        self.template("opening", "opens", opens_at, "10m").await;
    }

    async fn template(&self, name: &str, target: &str, start: Timestamp, duration: &str) {
        let actions = json!([{"name": target, "target": {"name": target}, "minReplicas": 4, "maxReplicas": 6}]);
        let t: ScalingTemplate = serde_json::from_value(harness::manual_template(
            name,
            &at(start),
            duration,
            actions,
        ))
        .expect("template");
        self.api::<ScalingTemplate>()
            .create(&PostParams::default(), &t)
            .await
            .expect("template");
    }

    /// The last moments before the fault: `web`'s image changes, the pool grows and the
    /// claims arrive.
    pub async fn change_and_claim(&self) {
        self.deploy("registry.example/app:2").await;
        self.api::<SandboxPool>()
            .patch(
                "pool",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": CLAIMS}})),
            )
            .await
            .expect("pool grows");
        let claims: Api<SandboxClaim> = self.api();
        for i in 0..CLAIMS {
            let c: SandboxClaim = serde_json::from_value(json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "SandboxClaim",
                "metadata": {"name": format!("claim-{i}")},
                "spec": {"poolRef": {"name": "pool"}}
            }))
            .expect("claim");
            claims
                .create(&PostParams::default(), &c)
                .await
                .expect("claim");
        }
    }

    /// `web` deployed with `image`.
    pub async fn deploy(&self, image: &str) {
        let body = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
        });
        self.api::<Deployment>()
            .patch(
                "web",
                &PatchParams::apply("faults-deployer").force(),
                &Patch::Apply(body),
            )
            .await
            .expect("image change");
    }

    /// `web`'s revision records, oldest first, each as its image changes (`from → to`).
    pub async fn web_changes(&self) -> Vec<String> {
        let revisions: Api<WorkloadRevision> = self.api();
        let mut web: Vec<(Timestamp, String, String)> = revisions
            .list(&ListParams::default())
            .await
            .expect("revisions")
            .into_iter()
            .filter(|r| r.spec.workload.name == "web")
            .map(|r| {
                let images: Vec<String> = r
                    .spec
                    .images
                    .iter()
                    .map(|c| {
                        let tag = |i: &Option<String>| i.clone().unwrap_or_default();
                        format!("{} → {}", tag(&c.from), tag(&c.to))
                    })
                    .collect();
                (r.spec.observed_at.0, r.name_any(), images.join(", "))
            })
            .collect();
        web.sort();
        web.into_iter().map(|(_, _, images)| images).collect()
    }

    /// The image of `web` in the baseline its inventory publishes.
    pub async fn published_web_image(&self) -> Option<String> {
        let inventories: Api<NamespaceInventory> = self.api();
        let i = inventories.get_opt("inventory").await.ok()??;
        let v = serde_json::to_value(i.status?).ok()?;
        v["deployments"]
            .as_array()?
            .iter()
            .find(|d| d["name"] == "web")?["baseline"]["containers"][0]["image"]
            .as_str()
            .map(str::to_string)
    }

    /// `Ok` when the end state is exactly right; otherwise the first thing that is not.
    pub async fn check(&self) -> Result<(), String> {
        self.check_windows().await?;
        self.check_claims().await?;
        self.check_revision().await
    }

    async fn check_windows(&self) -> Result<(), String> {
        let hpas: Api<HorizontalPodAutoscaler> = self.api();
        let deployments: Api<Deployment> = self.api();
        let get = |e: kube::Error| e.to_string();
        let opens = hpas.get("opens").await.map_err(get)?;
        let spec = opens.spec.clone();
        if (spec.min_replicas, spec.max_replicas) != (Some(4), 6) {
            return Err(format!(
                "opens: HPA bounds {:?}/{} (want 4/6)",
                spec.min_replicas, spec.max_replicas
            ));
        }
        let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
        let d = deployments.get("opens").await.map_err(get)?;
        if replicas(&d) != Some(4) {
            return Err(format!("opens: {:?} replicas (want 4)", replicas(&d)));
        }
        let closes = hpas.get("closes").await.map_err(get)?;
        let spec = serde_json::to_value(&closes.spec).map_err(|e| e.to_string())?;
        if spec != self.closes_original {
            return Err(format!(
                "closes: HPA spec {spec} (want {})",
                self.closes_original
            ));
        }
        let d = deployments.get("closes").await.map_err(get)?;
        if replicas(&d) != Some(1) {
            // What the restore waits on, for a failure to say.
            let template = Api::<ScalingTemplate>::namespaced(self.client.clone(), &self.ns)
                .get("closing")
                .await
                .map_err(get)?;
            let actions = template.status.map(|s| s.actions).unwrap_or_default();
            return Err(format!(
                "closes: {:?} replicas (want 1); its marks {:?}; HPA writes {:?}; Deployment writes {:?}; template closing: {:?}",
                replicas(&d),
                moonin_marks(d.annotations()),
                harness::writes(&closes.metadata),
                harness::writes(&d.metadata),
                actions
                    .iter()
                    .map(|a| (&a.state, &a.message))
                    .collect::<Vec<_>>(),
            ));
        }
        for (what, marks) in [
            ("HPA closes", moonin_marks(closes.annotations())),
            ("Deployment closes", moonin_marks(d.annotations())),
        ] {
            if !marks.is_empty() {
                return Err(format!("{what} still carries {marks:?}"));
            }
        }
        let templates: Api<ScalingTemplate> = self.api();
        for name in ["opening", "closing"] {
            let t = templates.get(name).await.map_err(get)?;
            let s = serde_json::to_value(&t.status).map_err(|e| e.to_string())?;
            let runs = s["executions"].as_array().map_or(0, Vec::len);
            if runs != 1 {
                return Err(format!("{name}: {runs} executions (want 1): {s}"));
            }
        }
        Ok(())
    }

    async fn check_claims(&self) -> Result<(), String> {
        let claims: Api<SandboxClaim> = self.api();
        let mut bound = BTreeMap::new();
        for c in claims
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
        {
            let s = serde_json::to_value(&c.status).map_err(|e| e.to_string())?;
            if s["phase"] != "Bound" {
                return Err(format!("claim {} is {}", c.name_any(), s["phase"]));
            }
            let pod = s["podName"].as_str().unwrap_or_default().to_string();
            if let Some(other) = bound.insert(pod.clone(), c.name_any()) {
                return Err(format!("Pod {pod} bound to {other} and {}", c.name_any()));
            }
        }
        if bound.len() != CLAIMS {
            return Err(format!("{} claims bound (want {CLAIMS})", bound.len()));
        }
        // Every Pod that names a claim is the one that claim names, and no other does.
        let pods: Api<Pod> = self.api();
        let mut named = BTreeSet::new();
        for p in pods
            .list(&ListParams::default().labels("moonin.io/pool"))
            .await
            .map_err(|e| e.to_string())?
        {
            let claim = p
                .annotations()
                .get("moonin.io/claim")
                .or_else(|| p.labels().get("moonin.io/claim"))
                // `<name>/<uid>`
                .map(|c| {
                    c.split_once('/')
                        .map_or(c.as_str(), |(name, _)| name)
                        .to_string()
                });
            if let Some(claim) = claim {
                if bound.get(&p.name_any()) != Some(&claim) {
                    return Err(format!("Pod {} names claim {claim}", p.name_any()));
                }
                named.insert(p.name_any());
            }
        }
        if named.len() != CLAIMS {
            return Err(format!("{} Pods name a claim (want {CLAIMS})", named.len()));
        }
        Ok(())
    }

    async fn check_revision(&self) -> Result<(), String> {
        let revisions: Api<WorkloadRevision> = self.api();
        let web: Vec<Value> = revisions
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|r| r.spec.workload.name == "web")
            .map(|r| serde_json::to_value(r.spec).unwrap_or_default())
            .collect();
        match web.as_slice() {
            [r] if r["images"].to_string().contains("registry.example/app:2") => Ok(()),
            _ => Err(format!("web's revisions: {web:?} (want one, to app:2)")),
        }
    }
}

fn moonin_marks(map: &BTreeMap<String, String>) -> Vec<&String> {
    map.keys().filter(|k| k.starts_with("moonin.io/")).collect()
}
