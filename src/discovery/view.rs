//! The small projections discovery keeps in memory instead of whole objects. The watches
//! turn each object into one of these as it arrives (`from_*`), so stores hold only what
//! the inventory, the cluster status and the revision log read. Everything here is pure.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::{CronJob, Job},
    core::v1::{Node, Pod, PodSpec},
};
use kube::ResourceExt;

use crate::api::field_manager;
use crate::api::keda::ScaledObject;

/// Labels that place a Node: region, zone, instance type (current and legacy keys).
pub mod node_labels {
    /// Region.
    pub const REGION: &str = "topology.kubernetes.io/region";
    /// Region, before Kubernetes 1.17.
    pub const REGION_LEGACY: &str = "failure-domain.beta.kubernetes.io/region";
    /// Zone.
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    /// Zone, before Kubernetes 1.17.
    pub const ZONE_LEGACY: &str = "failure-domain.beta.kubernetes.io/zone";
    /// Instance type.
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    /// Instance type, before Kubernetes 1.17.
    pub const INSTANCE_TYPE_LEGACY: &str = "beta.kubernetes.io/instance-type";
}

/// A Node, as the cluster status reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    /// Name.
    pub name: String,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// Region label (current key, else the legacy one).
    pub region: Option<String>,
    /// Zone label (current key, else the legacy one).
    pub zone: Option<String>,
    /// Instance type label (current key, else the legacy one).
    pub instance_type: Option<String>,
    /// `status.nodeInfo.containerRuntimeVersion`, e.g. `containerd://1.7.2`.
    pub runtime: Option<String>,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: Option<String>,
    /// Condition `Ready=True`.
    pub ready: bool,
    /// Pressure conditions that are `True` (`MemoryPressure`, `DiskPressure`, `PIDPressure`).
    pub pressure: Vec<String>,
    /// `status.capacity` for cpu, memory and pods, as Kubernetes quantities.
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable` for cpu, memory and pods.
    pub allocatable: BTreeMap<String, String>,
}

/// The resources a node group sums.
pub const SUMMED_RESOURCES: [&str; 3] = ["cpu", "memory", "pods"];

/// Projects a Node.
pub fn node(n: &Node) -> NodeView {
    let label = |a: &str, b: &str| n.labels().get(a).or_else(|| n.labels().get(b)).cloned();
    let status = n.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_ref());
    let is_true = |t: &str| {
        conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    let pick =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.into_iter()
                .flatten()
                .filter(|(k, _)| SUMMED_RESOURCES.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect()
        };
    let info = status.and_then(|s| s.node_info.as_ref());
    NodeView {
        name: n.name_any(),
        provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()),
        region: label(node_labels::REGION, node_labels::REGION_LEGACY),
        zone: label(node_labels::ZONE, node_labels::ZONE_LEGACY),
        instance_type: label(
            node_labels::INSTANCE_TYPE,
            node_labels::INSTANCE_TYPE_LEGACY,
        ),
        runtime: info.map(|i| i.container_runtime_version.clone()),
        kubelet_version: info.map(|i| i.kubelet_version.clone()),
        ready: is_true("Ready"),
        pressure: ["MemoryPressure", "DiskPressure", "PIDPressure"]
            .into_iter()
            .filter(|t| is_true(t))
            .map(str::to_string)
            .collect(),
        capacity: pick(status.and_then(|s| s.capacity.as_ref())),
        allocatable: pick(status.and_then(|s| s.allocatable.as_ref())),
    }
}

/// A condition, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cond {
    /// Type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: Option<String>,
    /// Message.
    pub message: Option<String>,
    /// When it last changed (`lastUpdateTime`, or else `lastTransitionTime`).
    pub updated: Option<Timestamp>,
}

/// A Deployment, as the inventory and the revision log read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (the owner of its WorkloadRevisions).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// `spec.replicas` (1 when absent).
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `(container, image)` of the Pod template, init containers first, in order.
    pub images: Vec<(String, String)>,
    /// ConfigMaps and Secrets the template refers to, as `ConfigMap/<name>` or
    /// `Secret/<name>`, sorted (names only: never data).
    pub config_refs: Vec<String>,
    /// What those ConfigMaps and Secrets hold: empty in the watch's projection, filled in
    /// by the revision recorder (a baseline measures their data too).
    pub configs: Vec<super::config::ConfigState>,
    /// `deployment.kubernetes.io/revision`.
    pub revision: Option<i64>,
    /// `spec.selector.matchLabels` (an expression selector is reduced to its labels).
    pub selector: BTreeMap<String, String>,
    /// The Pod template's labels (what Services and NetworkPolicies select).
    pub template_labels: Labels,
    /// Status conditions.
    pub conditions: Vec<Cond>,
    /// The Helm release managing it (`meta.helm.sh/release-name` when
    /// `app.kubernetes.io/managed-by=Helm`).
    pub helm_release: Option<String>,
    /// Field managers that own `spec.replicas` (read before managedFields is dropped).
    pub replicas_managers: Vec<String>,
    /// The field manager of the latest update that touched `spec.template` (the
    /// managedFields entry with the newest time among those owning a template field; on a
    /// tie, times having one-second resolution, an `Apply` over an `Update`).
    pub template_manager: Option<String>,
    /// The time of that update (the API server's clock, whole seconds).
    pub template_changed: Option<Timestamp>,
    /// `(container, manager)`: who owns each container's `image` field, i.e. who set the
    /// image it has now.
    pub image_managers: Vec<(String, String)>,
}

/// Projects a Deployment.
pub fn deployment(d: &Deployment) -> DeploymentView {
    let spec = d.spec.as_ref();
    let status = d.status.as_ref();
    let template = spec.and_then(|s| s.template.spec.as_ref());
    let mut replicas_managers: Vec<String> = field_manager::spec_owners(&d.metadata, "replicas")
        .filter_map(|m| m.manager.clone())
        .collect();
    replicas_managers.sort();
    replicas_managers.dedup();
    let (template_changed, template_manager) = field_manager::spec_owners(&d.metadata, "template")
        .filter_map(|m| {
            Some((
                m.time.as_ref().map(|t| t.0),
                m.operation.as_deref() == Some("Apply"),
                m.manager.clone()?,
            ))
        })
        .max_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)))
        .map_or((None, None), |(at, _, m)| (at, Some(m)));
    let image_managers = image_owners(d);
    let helm = d
        .labels()
        .get("app.kubernetes.io/managed-by")
        .map(String::as_str)
        == Some("Helm");
    DeploymentView {
        namespace: d.namespace().unwrap_or_default(),
        name: d.name_any(),
        uid: d.uid().unwrap_or_default(),
        generation: d.metadata.generation.unwrap_or(0),
        observed_generation: status.and_then(|s| s.observed_generation).unwrap_or(0),
        replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
        ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
        available: status.and_then(|s| s.available_replicas).unwrap_or(0),
        updated: status.and_then(|s| s.updated_replicas).unwrap_or(0),
        images: template.map(images).unwrap_or_default(),
        config_refs: template.map(config_refs).unwrap_or_default(),
        configs: Vec::new(),
        revision: d
            .annotations()
            .get("deployment.kubernetes.io/revision")
            .and_then(|r| r.parse().ok()),
        selector: spec
            .and_then(|s| s.selector.match_labels.clone())
            .unwrap_or_default(),
        template_labels: spec
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .map(Labels::from)
            .unwrap_or_default(),
        conditions: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| Cond {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                updated: c
                    .last_update_time
                    .as_ref()
                    .or(c.last_transition_time.as_ref())
                    .map(|t| t.0),
            })
            .collect(),
        helm_release: helm
            .then(|| d.annotations().get("meta.helm.sh/release-name").cloned())
            .flatten(),
        replicas_managers,
        template_manager,
        template_changed,
        image_managers,
    }
}

/// Who owns each container's `image` in the Pod template, from managedFields
/// (`f:spec.f:template.f:spec.f:containers.k:{"name":"…"}.f:image`).
fn image_owners(d: &Deployment) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in d.metadata.managed_fields.iter().flatten() {
        let (Some(manager), Some(fields)) = (&m.manager, &m.fields_v1) else {
            continue;
        };
        let pod = fields
            .0
            .get("f:spec")
            .and_then(|s| s.get("f:template"))
            .and_then(|t| t.get("f:spec"));
        for list in ["f:initContainers", "f:containers"] {
            let Some(containers) = pod.and_then(|p| p.get(list)).and_then(|c| c.as_object()) else {
                continue;
            };
            for (key, owned) in containers {
                if owned.get("f:image").is_none() {
                    continue;
                }
                let name = key
                    .strip_prefix("k:")
                    .and_then(|k| serde_json::from_str::<serde_json::Value>(k).ok())
                    .and_then(|v| v["name"].as_str().map(str::to_string));
                if let Some(name) = name {
                    out.push((name, manager.clone()));
                }
            }
        }
    }
    out.sort();
    out
}

/// `(container, image)`, init containers first.
pub fn images(p: &PodSpec) -> Vec<(String, String)> {
    p.init_containers
        .iter()
        .flatten()
        .chain(p.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

/// ConfigMaps and Secrets a Pod spec refers to, by name, sorted and unique.
pub fn config_refs(p: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    for c in p
        .init_containers
        .iter()
        .flatten()
        .chain(p.containers.iter())
    {
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.config_map_ref {
                out.push(format!("ConfigMap/{}", r.name));
            }
            if let Some(r) = &e.secret_ref {
                out.push(format!("Secret/{}", r.name));
            }
        }
        for e in c.env.iter().flatten() {
            if let Some(v) = &e.value_from {
                if let Some(r) = &v.config_map_key_ref {
                    out.push(format!("ConfigMap/{}", r.name));
                }
                if let Some(r) = &v.secret_key_ref {
                    out.push(format!("Secret/{}", r.name));
                }
            }
        }
    }
    for v in p.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            out.push(format!("ConfigMap/{}", c.name));
        }
        if let Some(s) = &v.secret
            && let Some(n) = &s.secret_name
        {
            out.push(format!("Secret/{n}"));
        }
        if let Some(p) = &v.projected {
            for s in p.sources.iter().flatten() {
                if let Some(c) = &s.config_map {
                    out.push(format!("ConfigMap/{}", c.name));
                }
                if let Some(c) = &s.secret {
                    out.push(format!("Secret/{}", c.name));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A label set in one allocation: `key=value` pairs in key order, joined by `,`. Neither
/// `=` nor `,` can occur in a label key or value, so the text is unambiguous. A Pod's
/// labels kept as a map cost about half a kilobyte; this costs their length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<str>);

impl Labels {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs().find_map(|(k, v)| (k == key).then_some(v))
    }

    /// The `(key, value)` pairs, in key order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.split(',').filter_map(|kv| kv.split_once('='))
    }

    /// Whether there is no label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as text: `key=value` pairs joined by `,`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether every label of `selector` is set here with an equal value. An empty selector
    /// matches nothing (the API server refuses one on a Deployment, and a hazard reported
    /// against everything would be noise).
    pub fn selected_by(&self, selector: &BTreeMap<String, String>) -> bool {
        !selector.is_empty() && selector.iter().all(|(k, v)| self.get(k) == Some(v))
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(m: &BTreeMap<String, String>) -> Self {
        let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Self(pairs.join(",").into_boxed_str())
    }
}

/// What a Pod contributes to its workload's health: never the Pod itself. The store's key
/// holds its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodView {
    /// Name.
    pub name: String,
    /// Labels (for the selector-overlap hazard).
    pub labels: Labels,
    /// The owning ReplicaSet's or Job's name, `ReplicaSet/<name>` or `Job/<name>`.
    pub owner: Option<String>,
    /// Waiting reasons of its containers (`CrashLoopBackOff`, `ImagePullBackOff`, …).
    pub waiting: Vec<String>,
}

/// Projects a Pod.
pub fn pod(p: &Pod) -> PodView {
    let status = p.status.as_ref();
    let mut waiting: Vec<String> = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .collect();
    waiting.sort();
    waiting.dedup();
    PodView {
        name: p.name_any(),
        labels: p.labels().into(),
        owner: p
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{}/{}", o.kind, o.name)),
        waiting,
    }
}

/// An HPA, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HpaView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `scaleTargetRef` kind and name.
    pub target: (String, String),
    /// Bounds.
    pub min: Option<i32>,
    /// Bounds.
    pub max: i32,
    /// The ScaledObject that owns it, if KEDA made it.
    pub scaled_object: Option<String>,
    /// `status.desiredReplicas`: what it asks for now (none before its first status).
    pub desired: Option<i32>,
    /// Its own `minReplicas` while a scaling template overrides it (from the
    /// `moonin.io/original` annotation): what the replica history compares with.
    pub overridden_min: Option<i32>,
}

/// Projects an HPA.
pub fn hpa(h: &HorizontalPodAutoscaler) -> HpaView {
    let spec = Some(&h.spec);
    HpaView {
        namespace: h.namespace().unwrap_or_default(),
        name: h.name_any(),
        target: spec
            .map(|s| {
                (
                    s.scale_target_ref.kind.clone(),
                    s.scale_target_ref.name.clone(),
                )
            })
            .unwrap_or_default(),
        min: spec.and_then(|s| s.min_replicas),
        max: spec.map_or(0, |s| s.max_replicas),
        scaled_object: h
            .owner_references()
            .iter()
            .find(|o| o.kind == "ScaledObject")
            .map(|o| o.name.clone()),
        desired: h.status.as_ref().map(|s| s.desired_replicas),
        overridden_min: original_min(h.annotations(), "minReplicas"),
    }
}

/// The minimum an override replaced, from its `moonin.io/original` annotation: `Some`
/// only when the override changed `field` and it was set before.
fn original_min(annotations: &BTreeMap<String, String>, field: &str) -> Option<i32> {
    let original: serde_json::Value =
        serde_json::from_str(annotations.get(crate::api::scaling::keys::ORIGINAL)?).ok()?;
    i32::try_from(original.get("spec")?.get(field)?.as_i64()?).ok()
}

/// A KEDA ScaledObject, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaledObjectView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `scaleTargetRef` kind (KEDA's default, `Deployment`, when unset) and name.
    pub target: (String, String),
    /// `minReplicaCount` (KEDA's default is 0).
    pub min: Option<i32>,
    /// `maxReplicaCount` (KEDA's default is 100).
    pub max: Option<i32>,
    /// Its triggers: type and `metricType`.
    pub triggers: Vec<(String, Option<String>)>,
    /// Which of the optional fields an autoscaling policy may forbid are set.
    pub set_fields: Vec<&'static str>,
    /// Its own `minReplicaCount` while a scaling template overrides it.
    pub overridden_min: Option<i32>,
}

/// Projects a ScaledObject.
pub fn scaled_object(so: &ScaledObject) -> ScaledObjectView {
    let target = &so.spec.scale_target_ref;
    ScaledObjectView {
        namespace: so.namespace().unwrap_or_default(),
        name: so.name_any(),
        target: (
            target.kind.clone().unwrap_or_else(|| "Deployment".into()),
            target.name.clone(),
        ),
        min: so.spec.min_replica_count,
        max: so.spec.max_replica_count,
        overridden_min: original_min(so.annotations(), "minReplicaCount"),
        triggers: so
            .spec
            .triggers
            .iter()
            .map(|t| (t.type_.clone(), t.metric_type.clone()))
            .collect(),
        set_fields: [
            ("idleReplicaCount", &so.spec.idle_replica_count),
            ("fallback", &so.spec.fallback),
            ("advanced", &so.spec.advanced),
            ("pollingInterval", &so.spec.polling_interval),
            ("cooldownPeriod", &so.spec.cooldown_period),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(name, _)| name)
        .collect(),
    }
}

/// An autoscaler of either kind, as the signals see it.
pub trait Autoscaler {
    /// Namespace.
    fn namespace(&self) -> &str;
    /// Name.
    fn name(&self) -> &str;
    /// `scaleTargetRef` kind and name.
    fn target(&self) -> &(String, String);
}

impl Autoscaler for HpaView {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn target(&self) -> &(String, String) {
        &self.target
    }
}

impl Autoscaler for ScaledObjectView {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn target(&self) -> &(String, String) {
        &self.target
    }
}

/// A Job, reduced: one CronJob run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The CronJob that created it.
    pub cron_job: Option<String>,
    /// Pod template labels (for the selector-overlap hazard).
    pub template_labels: Labels,
    /// `status.startTime`.
    pub start: Option<Timestamp>,
    /// `status.completionTime`, else the time of its `Failed` condition.
    pub end: Option<Timestamp>,
    /// `Running`, `Succeeded` or `Failed`.
    pub result: &'static str,
}

/// Projects a Job.
pub fn job(j: &Job) -> JobView {
    let status = j.status.as_ref();
    let cond = |t: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == t && c.status == "True")
    };
    let failed = cond("Failed");
    let complete = cond("Complete");
    JobView {
        namespace: j.namespace().unwrap_or_default(),
        name: j.name_any(),
        cron_job: j
            .owner_references()
            .iter()
            .find(|o| o.kind == "CronJob")
            .map(|o| o.name.clone()),
        template_labels: j
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .map(Labels::from)
            .unwrap_or_default(),
        start: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
        end: status
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0)
            .or_else(|| {
                failed
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0)
            }),
        result: if failed.is_some() {
            "Failed"
        } else if complete.is_some() {
            "Succeeded"
        } else {
            "Running"
        },
    }
}

/// A CronJob, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CronJobView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.schedule`.
    pub schedule: String,
    /// `spec.timeZone`.
    pub time_zone: Option<String>,
    /// `spec.suspend`.
    pub suspend: bool,
    /// `status.lastScheduleTime`.
    pub last_schedule: Option<Timestamp>,
    /// `status.lastSuccessfulTime`.
    pub last_successful: Option<Timestamp>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
}

/// Projects a CronJob.
pub fn cron_job(c: &CronJob) -> CronJobView {
    let spec = Some(&c.spec);
    let status = c.status.as_ref();
    CronJobView {
        namespace: c.namespace().unwrap_or_default(),
        name: c.name_any(),
        schedule: spec.map(|s| s.schedule.clone()).unwrap_or_default(),
        time_zone: spec.and_then(|s| s.time_zone.clone()),
        suspend: spec.and_then(|s| s.suspend).unwrap_or(false),
        last_schedule: status
            .and_then(|s| s.last_schedule_time.as_ref())
            .map(|t| t.0),
        last_successful: status
            .and_then(|s| s.last_successful_time.as_ref())
            .map(|t| t.0),
        created: c.creation_timestamp().map(|t| t.0),
    }
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
