use super::*;
use std::collections::BTreeMap;

use serde_json::json;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let m: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Labels::from(&m)
}

fn deployment(name: &str, template: &[(&str, &str)]) -> DeploymentView {
    DeploymentView {
        namespace: "shop".into(),
        name: name.into(),
        template_labels: labels(template),
        ..Default::default()
    }
}

fn svc(name: &str, selector: Option<&[(&str, &str)]>) -> ServiceView {
    ServiceView {
        name: name.into(),
        type_: "ClusterIP".into(),
        selector: selector.map(labels),
        ports: "http 80/TCP→8080".into(),
    }
}

fn pod(name: &str, l: &[(&str, &str)]) -> PodView {
    PodView {
        name: name.into(),
        labels: labels(l),
        ..Default::default()
    }
}

#[test]
fn a_service_is_projected_with_its_type_selector_and_ports() {
    let s: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "web", "tier": "front"},
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080},
                {"port": 443, "targetPort": 443, "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "UDP"}
            ]
        }
    }))
    .unwrap();
    let v = service(&s);
    assert_eq!(&*v.type_, "NodePort");
    assert_eq!(
        v.selector.as_ref().map(Labels::as_str),
        Some("app=web,tier=front")
    );
    assert_eq!(
        &*v.ports,
        "http 80/TCP→8080,443/TCP,metrics 9090/UDP→metrics"
    );

    // No selector, or an empty one: not the Pods of a selector.
    let external: Service = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"type": "ExternalName", "externalName": "db.example", "selector": {"app": "db"}}
    }))
    .unwrap();
    let v = service(&external);
    assert_eq!(v.selector, None);
    assert_eq!(&*v.type_, "ExternalName");
    assert_eq!(&*v.ports, "");
    let empty: Service = serde_json::from_value(json!({
        "metadata": {"name": "manual"},
        "spec": {"selector": {}, "ports": [{"port": 5432}]}
    }))
    .unwrap();
    assert_eq!(service(&empty).selector, None);
}

#[test]
fn a_service_fronts_the_deployments_whose_template_carries_its_selector() {
    let web = deployment("web", &[("app", "web"), ("tier", "front")]);
    let web2 = deployment("web-canary", &[("app", "web"), ("track", "canary")]);
    let api = deployment("api", &[("app", "api")]);
    let ds = [&web, &web2, &api];
    let services = [
        svc("web", Some(&[("app", "web")])),
        svc("front", Some(&[("app", "web"), ("tier", "front")])),
        svc("nothing", Some(&[("app", "gone")])),
        svc("manual", None),
        svc("stateful", Some(&[("app", "db")])),
    ];
    let db_pod = pod("db-0", &[("app", "db"), ("statefulset", "db")]);
    let entries = service_entries(&services, &ds, &[&db_pod]);
    let by_name = |n: &str| entries.iter().find(|e| e.name == n).unwrap();
    assert_eq!(
        entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["front", "manual", "nothing", "stateful", "web"],
        "sorted by name"
    );
    assert_eq!(by_name("web").deployments, ["web", "web-canary"]);
    assert_eq!(by_name("front").deployments, ["web"]);
    assert_eq!(by_name("web").selector.as_deref(), Some("app=web"));
    assert_eq!(by_name("web").ports, ["http 80/TCP→8080"]);
    assert!(by_name("web").signals.is_empty());
    assert_eq!(by_name("nothing").signals, ["ServiceSelectsNothing"]);
    assert!(by_name("nothing").deployments.is_empty());
    // Without a selector: never judged.
    assert!(by_name("manual").signals.is_empty());
    assert_eq!(by_name("manual").selector, None);
    // A selector matching a Pod (of a StatefulSet, say) but no Deployment: not a signal.
    assert!(by_name("stateful").signals.is_empty());
    assert!(by_name("stateful").deployments.is_empty());
}

#[test]
fn an_ingress_lists_hosts_tls_and_backends_and_flags_missing_services() {
    let i: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "shop"},
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": ["shop.example"], "secretName": "shop-tls"}],
            "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
            "rules": [
                {"host": "shop.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                    {"path": "/api", "pathType": "Prefix",
                     "backend": {"service": {"name": "api", "port": {"number": 8080}}}},
                    {"path": "/static", "pathType": "Prefix",
                     "backend": {"resource": {"apiGroup": "k8s.example", "kind": "Bucket", "name": "assets"}}}
                ]}},
                {"http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"name": "http"}}}}
                ]}}
            ]
        }
    }))
    .unwrap();
    let v = ingress(&i);
    assert_eq!(v.class.as_deref(), Some("nginx"));
    assert_eq!(v.hosts, ["*", "shop.example"]);
    assert!(v.tls);
    assert_eq!(
        v.backends,
        [
            "Bucket/assets",
            "Service/api:8080",
            "Service/fallback:80",
            "Service/web:http"
        ]
    );
    let plain: Ingress =
        serde_json::from_value(json!({"metadata": {"name": "plain"}, "spec": {}})).unwrap();
    let plain = ingress(&plain);
    assert!(!plain.tls);
    assert!(plain.backends.is_empty());

    let entries = ingress_entries(&[v, plain], &["web", "other"]);
    assert_eq!(entries[0].name, "plain");
    assert!(entries[0].signals.is_empty());
    assert_eq!(
        entries[1].signals,
        [
            "BackendNotFound: Service/api",
            "BackendNotFound: Service/fallback"
        ],
        "one per missing Service; the resource backend is not judged"
    );
    assert!(entries[1].tls);
    assert_eq!(backend_service("Service/web:http"), Some("web"));
    assert_eq!(backend_service("Service/web"), Some("web"));
    assert_eq!(backend_service("Bucket/assets"), None);
}

fn policy(value: serde_json::Value) -> NetworkPolicyView {
    let mut obj = json!({"metadata": {"name": "p"}});
    obj["spec"] = value;
    network_policy(&serde_json::from_value(obj).unwrap())
}

#[test]
fn policy_types_default_to_ingress_and_egress_when_it_has_egress_rules() {
    let p = policy(json!({"podSelector": {}}));
    assert!((p.ingress, p.egress) == (true, false));
    let p = policy(json!({"podSelector": {}, "egress": [{}]}));
    assert!((p.ingress, p.egress) == (true, true));
    let p = policy(json!({"podSelector": {}, "policyTypes": ["Egress"]}));
    assert!((p.ingress, p.egress) == (false, true));
    assert_eq!(p.selector.text(), "*");
}

#[test]
fn selectors_read_labels_and_every_expression_operator() {
    let p = policy(json!({"podSelector": {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            {"key": "track", "operator": "NotIn", "values": ["canary"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"}
        ]
    }}));
    assert_eq!(
        p.selector.text(),
        "app=web,tier in (front,edge),track notin (canary),team,!legacy"
    );
    let ok = labels(&[("app", "web"), ("tier", "edge"), ("team", "a")]);
    assert!(p.selector.matches(&ok), "NotIn matches an absent key");
    for bad in [
        labels(&[("app", "api"), ("tier", "edge"), ("team", "a")]),
        labels(&[("app", "web"), ("tier", "back"), ("team", "a")]),
        labels(&[
            ("app", "web"),
            ("tier", "edge"),
            ("team", "a"),
            ("track", "canary"),
        ]),
        labels(&[("app", "web"), ("tier", "edge")]),
        labels(&[
            ("app", "web"),
            ("tier", "edge"),
            ("team", "a"),
            ("legacy", "1"),
        ]),
    ] {
        assert!(!p.selector.matches(&bad), "{bad:?}");
    }
    // An operator Moonin does not know selects nothing: no isolation is claimed.
    let odd = policy(json!({"podSelector": {
        "matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]
    }}));
    assert!(!odd.selector.matches(&ok));
    // The empty selector selects every Pod.
    assert!(
        policy(json!({"podSelector": {}}))
            .selector
            .matches(&Labels::default())
    );
}

#[test]
fn policies_select_deployments_and_isolate_them() {
    let web = deployment("web", &[("app", "web")]);
    let api = deployment("api", &[("app", "api")]);
    let batch = deployment("batch", &[("app", "batch")]);
    let ds = [&web, &api, &batch];
    let mut deny_all = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
    deny_all.name = "deny-all".into();
    let mut web_egress = policy(json!({
        "podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Egress"],
    }));
    web_egress.name = "web-egress".into();
    let policies = [web_egress, deny_all];
    let entries = network_policy_entries(&policies, &ds);
    assert_eq!(entries[0].name, "deny-all");
    assert_eq!(entries[0].deployments, ["api", "batch", "web"]);
    assert_eq!(entries[0].pod_selector, "*");
    assert_eq!(entries[0].policy_types, ["Ingress"]);
    assert_eq!(entries[1].deployments, ["web"]);
    assert_eq!(entries[1].policy_types, ["Egress"]);

    let services = service_entries(&[svc("web", Some(&[("app", "web")]))], &ds, &[]);
    let mut rows: Vec<DeploymentEntry> = ["api", "web"]
        .iter()
        .map(|n| DeploymentEntry {
            name: n.to_string(),
            ..Default::default()
        })
        .collect();
    annotate_deployments(&mut rows, &ds, &services, &policies);
    assert_eq!(rows[0].services, Vec::<String>::new());
    assert_eq!(rows[0].isolation, ["Ingress"]);
    assert_eq!(rows[1].services, ["web"]);
    assert_eq!(rows[1].isolation, ["Ingress", "Egress"]);
    // No policy: nothing isolated.
    annotate_deployments(&mut rows, &ds, &services, &[]);
    assert!(rows.iter().all(|r| r.isolation.is_empty()));
}

#[test]
fn a_namespace_of_thousands_matches_each_service_to_its_deployment() {
    let ds: Vec<DeploymentView> = (0..3000)
        .map(|i| {
            deployment(
                &format!("d-{i:04}"),
                &[("app", &format!("d-{i:04}")), ("tier", "web")],
            )
        })
        .collect();
    let refs: Vec<&DeploymentView> = ds.iter().collect();
    let services: Vec<ServiceView> = (0..3000)
        .map(|i| svc(&format!("d-{i:04}"), Some(&[("app", &format!("d-{i:04}"))])))
        .chain([svc("all-web", Some(&[("tier", "web")]))])
        .collect();
    let entries = service_entries(&services, &refs, &[]);
    assert_eq!(entries.len(), 3001);
    assert_eq!(entries[0].deployments.len(), 3000, "{}", entries[0].name);
    assert!(
        entries[1..]
            .iter()
            .all(|e| e.deployments == [e.name.clone()])
    );
    let mut rows: Vec<DeploymentEntry> = ds
        .iter()
        .map(|d| DeploymentEntry {
            name: d.name.clone(),
            ..Default::default()
        })
        .collect();
    annotate_deployments(&mut rows, &refs, &entries, &[]);
    assert_eq!(rows[7].services, ["all-web", "d-0007"]);
}
