//! `config/policies/`: the platform's autoscaling rules for KEDA ScaledObjects as a
//! ValidatingAdmissionPolicy, enforced by the API server itself in namespaces labelled
//! `moonin.io/autoscaling-policy: enforce`, against KEDA's real CRDs.

use std::{process::Command, time::Duration};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::{
    common,
    harness::{TestNamespace, scaled_objects, wait_for},
    require_cluster,
};

/// A ScaledObject that keeps every rule, with `spec` merged over it.
fn scaled_object(name: &str, spec: Value) -> DynamicObject {
    let mut v = json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": 1,
            "maxReplicaCount": 5,
            "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}]
        }
    });
    if let (Some(base), Some(over)) = (v["spec"].as_object_mut(), spec.as_object()) {
        for (k, val) in over {
            if val.is_null() {
                base.remove(k);
            } else {
                base.insert(k.clone(), val.clone());
            }
        }
    }
    serde_json::from_value(v).expect("ScaledObject")
}

/// The API server's message when it refuses `so`, `None` when it would store it. A dry
/// run: admission runs in full, nothing is stored, so a probe repeated while the policy
/// loads never meets its own earlier object.
async fn refusal(api: &Api<DynamicObject>, so: &DynamicObject) -> Option<String> {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&dry_run, so).await {
        Ok(_) => None,
        Err(kube::Error::Api(e)) => Some(format!("{} {}", e.code, e.message)),
        Err(e) => panic!("creating a ScaledObject: {e}"),
    }
}

#[tokio::test]
async fn the_autoscaling_policy_refuses_scaled_objects_that_break_the_platform_rules() {
    let client = require_cluster!();
    // KEDA's CRDs, as `e2e/keda start` installs them (idempotent).
    let out = Command::new(common::root().join("e2e/keda"))
        .arg("install-crds")
        .output()
        .expect("e2e/keda install-crds");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("kubectl")
        .args(["apply", "-k"])
        .arg(common::root().join("config/policies"))
        .output()
        .expect("kubectl apply -k config/policies");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let enforced = TestNamespace::new(&client, "policy").await;
    Api::<Namespace>::all(client.clone())
        .patch(
            &enforced.name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"moonin.io/autoscaling-policy": "enforce"}}}),
            ),
        )
        .await
        .expect("label the namespace");
    let api = scaled_objects(&client, &enforced.name);

    // The policy takes effect once the API server has loaded it.
    let prometheus = scaled_object(
        "web",
        json!({
            "minReplicaCount": 0,
            "triggers": [{"type": "prometheus", "metadata": {"serverAddress": "http://prometheus:9090", "query": "up", "threshold": "1"}}]
        }),
    );
    let message = wait_for("the policy to refuse", Duration::from_secs(30), || async {
        refusal(&api, &prometheus).await
    })
    .await;
    assert!(message.starts_with("422"), "{message}");
    assert!(message.contains("moonin-keda-autoscaling"), "{message}");
    assert!(
        message.contains("spec.minReplicaCount must be set and at least 1"),
        "{message}"
    );

    // Each rule on its own, with its own message.
    let cases = [
        (
            json!({"triggers": [{"type": "prometheus", "metadata": {"serverAddress": "http://p:9090", "query": "up", "threshold": "1"}}]}),
            "only cpu and memory triggers are allowed; found: prometheus",
        ),
        (
            json!({"triggers": [{"type": "memory", "metadata": {"value": "70"}}]}),
            "every trigger sets metricType: Utilization",
        ),
        (
            json!({"maxReplicaCount": null}),
            "spec.maxReplicaCount must be set explicitly",
        ),
        (
            json!({"cooldownPeriod": 30}),
            "spec.cooldownPeriod is not allowed",
        ),
        (
            json!({"pollingInterval": 5}),
            "spec.pollingInterval is not allowed",
        ),
        (
            json!({"idleReplicaCount": 0}),
            "spec.idleReplicaCount is not allowed",
        ),
        (
            json!({"fallback": {"failureThreshold": 3, "replicas": 2}}),
            "spec.fallback is not allowed",
        ),
        (
            json!({"advanced": {"restoreToOriginalReplicaCount": true}}),
            "spec.advanced is not allowed",
        ),
        (
            json!({"scaleTargetRef": {"name": "api"}}),
            "a ScaledObject is named after the Deployment it scales: name it api",
        ),
        (
            json!({"scaleTargetRef": {"name": "web", "kind": "StatefulSet", "apiVersion": "apps/v1"}}),
            "spec.scaleTargetRef must be a Deployment",
        ),
    ];
    for (spec, expected) in cases {
        let message = refusal(&api, &scaled_object("web", spec.clone()))
            .await
            .unwrap_or_else(|| panic!("{spec} was accepted"));
        assert!(message.contains(expected), "{spec}: {message}");
    }

    // A ScaledObject that keeps the rules is stored; so is a refused one elsewhere.
    api.create(&PostParams::default(), &scaled_object("web", json!({})))
        .await
        .expect("a ScaledObject that keeps the rules");
    let elsewhere = TestNamespace::new(&client, "policy-off").await;
    scaled_objects(&client, &elsewhere.name)
        .create(&PostParams::default(), &prometheus)
        .await
        .expect("the binding applies to labelled namespaces only");
}
