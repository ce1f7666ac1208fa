use super::*;
use serde_json::json;

/// Created by one manager and re-imaged by another within the same second (managedFields
/// times have one-second resolution), the Update entry listed last.
fn reimaged() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "managedFields": [
                {"manager": "deployer", "operation": "Apply", "apiVersion": "apps/v1",
                 "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}},
                {"manager": "unknown", "operation": "Update", "apiVersion": "apps/v1",
                 "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:metadata": {"f:labels": {}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"sidecar\"}": {"f:image": {}}}}}}}}
            ]
        },
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [
                {"name": "app", "image": "web:2"},
                {"name": "sidecar", "image": "proxy:1"}
            ]}}
        }
    }))
    .expect("deployment")
}

#[test]
fn a_tie_on_time_goes_to_the_apply() {
    assert_eq!(
        deployment(&reimaged()).template_manager.as_deref(),
        Some("deployer")
    );
}

#[test]
fn each_image_is_owned_by_whoever_set_it() {
    assert_eq!(
        deployment(&reimaged()).image_managers,
        vec![
            ("app".to_string(), "deployer".to_string()),
            ("sidecar".to_string(), "unknown".to_string())
        ]
    );
}

#[test]
fn labels_are_looked_up_by_whole_key_and_value() {
    let m: BTreeMap<String, String> = [
        ("app", "web"),
        ("app.kubernetes.io/name", "web-x"),
        ("tier", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let l = Labels::from(&m);
    assert_eq!(l.get("app"), Some("web"));
    assert_eq!(l.get("app.kubernetes.io/name"), Some("web-x"));
    assert_eq!(l.get("tier"), Some(""));
    assert_eq!(l.get("ap"), None);
    assert_eq!(Labels::default().get("app"), None);
    let sel = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(l.selected_by(&sel(&[("app", "web"), ("tier", "")])));
    assert!(!l.selected_by(&sel(&[("app", "we")])));
    assert!(!l.selected_by(&sel(&[("app", "web"), ("zone", "a")])));
    assert!(!l.selected_by(&sel(&[])));
    assert_eq!(
        l.pairs().collect::<Vec<_>>(),
        [
            ("app", "web"),
            ("app.kubernetes.io/name", "web-x"),
            ("tier", "")
        ]
    );
    assert!(Labels::default().is_empty() && Labels::default().pairs().next().is_none());
}

#[test]
fn a_deployment_keeps_its_pod_template_labels() {
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "app", "image": "web:1"}]}
            }
        }
    }))
    .unwrap();
    assert_eq!(
        deployment(&d).template_labels.as_str(),
        "app=web,tier=front"
    );
}

#[test]
fn config_references_are_names_only_sorted_and_unique() {
    let spec: PodSpec = serde_json::from_value(json!({
        "containers": [{"name": "a", "envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "cfg"}}],
                        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}],
        "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]
    }))
    .expect("pod spec");
    assert_eq!(config_refs(&spec), vec!["ConfigMap/cfg", "Secret/db"]);
}

#[test]
fn an_overridden_hpa_keeps_its_own_minimum_from_the_original_annotation() {
    let hpa_with = |annotations: serde_json::Value| -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                     "minReplicas": 10, "maxReplicas": 30},
            "status": {"currentReplicas": 10, "desiredReplicas": 12}
        }))
        .unwrap()
    };
    let overridden = hpa(&hpa_with(json!({
        "moonin.io/original": "{\"spec\":{\"minReplicas\":2,\"maxReplicas\":20}}"
    })));
    assert_eq!(
        (
            overridden.min,
            overridden.overridden_min,
            overridden.desired
        ),
        (Some(10), Some(2), Some(12))
    );
    // An override of the maximum only, an unset minimum before it, or no override at all.
    for annotations in [
        json!({"moonin.io/original": "{\"spec\":{\"maxReplicas\":20}}"}),
        json!({"moonin.io/original": "{\"spec\":{\"minReplicas\":null}}"}),
        json!({"moonin.io/original": "not json"}),
        json!({}),
    ] {
        assert_eq!(hpa(&hpa_with(annotations)).overridden_min, None);
    }
}
