//! The objects the benchmark creates: a Deployment and its HPA per action, and the
//! templates whose windows open and close together.

use jiff::{Timestamp, tz::TimeZone};
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use moonin::api::scaling::ScalingTemplate;
use serde_json::{Value, json};

use crate::{
    ACTION_MAX, ACTION_MIN, HPA_MAX, HPA_MIN, REPLICAS, shared::harness, target_name, template_name,
};

/// Target `name`: a Deployment of [`REPLICAS`] Pods that kwok runs.
pub fn deployment(name: &str) -> Deployment {
    harness::kwok_deployment(name, REPLICAS)
}

/// The HPA of target `name`, with its own bounds.
pub fn hpa(name: &str) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": HPA_MIN,
            "maxReplicas": HPA_MAX,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
            ]
        }
    }))
    .expect("hpa")
}

/// The ScaledObject of target `name`, with the same bounds as [`hpa`]; its cron trigger
/// never fires, so only the bounds move the Deployment.
pub fn scaled_object(name: &str) -> kube::api::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": HPA_MIN,
            "maxReplicaCount": HPA_MAX,
            "triggers": [{"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": "0 3 * * *", "end": "0 4 * * *", "desiredReplicas": "3"}}]
        }
    }))
    .expect("scaled object")
}

/// Template `index` with `actions` actions, each on its own target, whose window opens at
/// `open` and lasts [`crate::WINDOW_MINUTES`].
pub fn template(index: usize, actions: usize, open: Timestamp) -> ScalingTemplate {
    let at = open.to_zoned(TimeZone::UTC);
    let actions: Vec<Value> = (0..actions)
        .map(|a| {
            json!({
                "name": format!("a{a}"),
                "target": {"name": target_name(index, a)},
                "minReplicas": ACTION_MIN,
                "maxReplicas": ACTION_MAX
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {"name": template_name(index)},
        "spec": {
            "schedule": format!("{} {} * * *", at.minute(), at.hour()),
            "timeZone": "UTC",
            "duration": format!("{}m", crate::WINDOW_MINUTES),
            "actions": actions
        }
    }))
    .expect("template")
}

/// Refused template `index`: an unknown time zone, a schedule the API server accepts and the
/// cron parser refuses, or a target that does not exist, in turn (the first two name a real
/// target, which they must leave alone); and the reason its `Ready` condition must give.
pub fn invalid_template(index: usize, open: Timestamp) -> (ScalingTemplate, &'static str) {
    let mut t = serde_json::to_value(template(0, 1, open)).expect("template");
    t["metadata"]["name"] = format!("invalid-{index:04}").into();
    let reason = invalid_reason(index);
    match reason {
        "UnknownTimeZone" => t["spec"]["timeZone"] = "Mars/Olympus_Mons".into(),
        "InvalidSchedule" => t["spec"]["schedule"] = "61 * * * *".into(),
        _ => t["spec"]["actions"][0]["target"]["name"] = format!("ghost-{index}").into(),
    }
    (serde_json::from_value(t).expect("template"), reason)
}

/// The reason refused template `index` must give ([`invalid_template`]).
pub fn invalid_reason(index: usize) -> &'static str {
    ["UnknownTimeZone", "InvalidSchedule", "TargetNotFound"][index % 3]
}
