use std::sync::Arc;

use super::*;
use crate::discovery::namespace::decide;
use crate::discovery::network::{IngressView, NetworkPolicyView, Selector, ServiceView};
use crate::discovery::rbac::SubjectView;
use crate::discovery::view::Labels;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let m: std::collections::BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Labels::from(&m)
}

fn account(ns: &str, name: &str) -> SubjectView {
    SubjectView {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: ns.into(),
    }
}

fn group(name: &str) -> SubjectView {
    SubjectView {
        kind: "Group".into(),
        name: name.into(),
        namespace: "".into(),
    }
}

/// A namespace with a Deployment `web`, a Service fronting it and one selecting nothing,
/// an Ingress to a missing Service, a NetworkPolicy isolating `web`, `cluster-admin` bound
/// to its ServiceAccounts `ci` and `builder` and to the group of all of them, and a
/// ClusterRoleBinding of `cluster-admin` to every ServiceAccount of the cluster.
fn snapshot() -> NamespaceSnapshot {
    let web = DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        available: 1,
        updated: 1,
        template_labels: labels(&[("app", "web")]),
        ..Default::default()
    };
    let service = |name: &str, app: &str| ServiceView {
        name: name.into(),
        type_: "ClusterIP".into(),
        selector: Some(labels(&[("app", app)])),
        ports: "80/TCP".into(),
    };
    NamespaceSnapshot {
        namespace: "shop".into(),
        deployments: vec![Arc::new(web)],
        services: vec![service("web", "web"), service("lost", "nobody")],
        ingresses: vec![IngressView {
            name: "shop".into(),
            hosts: vec!["shop.example".into()],
            tls: true,
            backends: vec!["Service/missing:80".into(), "Service/web:80".into()],
            ..Default::default()
        }],
        network_policies: vec![NetworkPolicyView {
            name: "web-only".into(),
            selector: Selector {
                labels: labels(&[("app", "web")]),
                expressions: vec![],
            },
            ingress: true,
            egress: false,
        }],
        role_bindings: vec![(
            "ci-admin".into(),
            BindingView {
                role_kind: "ClusterRole".into(),
                role: "cluster-admin".into(),
                subjects: vec![
                    account("shop", "ci"),
                    account("shop", "builder"),
                    group("system:serviceaccounts:shop"),
                ],
                bootstrap: false,
            },
        )],
        cluster_role_bindings: vec![(
            "permissive".into(),
            BindingView {
                role_kind: "ClusterRole".into(),
                role: "cluster-admin".into(),
                subjects: vec![group("system:serviceaccounts"), account("tools", "x")],
                bootstrap: false,
            },
        )],
        published_connections: [("Service/lost".to_string(), vec![])].into(),
        ..Default::default()
    }
}

#[test]
fn the_inventory_shows_each_connection_with_its_signals() {
    let plan = decide(&snapshot());
    let st = &plan.status;
    let web = &st.deployments[0];
    assert_eq!(web.services, ["web"]);
    assert_eq!(web.isolation, ["Ingress"]);
    assert_eq!(
        web.health, "Healthy",
        "a Service's signal is not the Deployment's"
    );
    assert_eq!(st.services.len(), 2);
    assert_eq!(st.services[0].name, "lost");
    assert_eq!(st.services[0].signals, ["ServiceSelectsNothing"]);
    assert_eq!(st.services[1].deployments, ["web"]);
    assert_eq!(
        st.ingresses[0].signals,
        ["BackendNotFound: Service/missing"]
    );
    assert_eq!(st.network_policies[0].deployments, ["web"]);
    assert_eq!(st.role_bindings[0].name, "RoleBinding/ci-admin");
    assert_eq!(st.role_bindings[0].signals.len(), 3);
    assert_eq!(
        st.role_bindings[1].subjects,
        ["Group/system:serviceaccounts"],
        "only the subjects that reach the namespace's accounts"
    );
    let summary = st.summary.clone().unwrap();
    assert_eq!(
        (
            summary.services,
            summary.ingresses,
            summary.network_policies,
            summary.role_bindings
        ),
        (2, 1, 1, 2)
    );
    // The Service's and the Ingress's failures count; the RBAC hazards do not.
    assert_eq!(summary.error_signals, 2);

    // Events: about the Service, the Ingress and each ServiceAccount.
    let about = |kind: &str, name: &str| {
        plan.signals
            .iter()
            .find(|o| {
                o.regarding.kind.as_deref() == Some(kind)
                    && o.regarding.name.as_deref() == Some(name)
            })
            .unwrap_or_else(|| panic!("no signals about {kind}/{name}"))
    };
    let lost = about("Service", "lost");
    assert_eq!(lost.signals, ["ServiceSelectsNothing"]);
    assert_eq!(lost.published, Some(vec![]), "as its published entry shows");
    assert_eq!(lost.regarding.api_version.as_deref(), Some("v1"));
    assert!(about("Service", "web").signals.is_empty());
    let ingress = about("Ingress", "shop");
    assert_eq!(
        ingress.regarding.api_version.as_deref(),
        Some("networking.k8s.io/v1")
    );
    assert_eq!(ingress.published, None);
    let ci = about("ServiceAccount", "ci");
    assert_eq!(ci.regarding.namespace.as_deref(), Some("shop"));
    assert_eq!(
        ci.signals,
        [
            "PrivilegedServiceAccount: ServiceAccount/ci has ClusterRole/cluster-admin (cluster-admin) through RoleBinding/ci-admin"
        ]
    );
    assert_eq!(about("ServiceAccount", "builder").signals.len(), 1);
    // A group of all the namespace's accounts: about the namespace, in the namespace.
    let shop = about("Namespace", "shop");
    assert_eq!(shop.regarding.namespace.as_deref(), Some("shop"));
    assert_eq!(
        shop.signals,
        [
            "PrivilegedServiceAccount: Group/system:serviceaccounts:shop (every ServiceAccount of the namespace is in it) has ClusterRole/cluster-admin (cluster-admin) through RoleBinding/ci-admin",
            "PrivilegedServiceAccount: Group/system:serviceaccounts (every ServiceAccount of the namespace is in it) has ClusterRole/cluster-admin (cluster-admin) through ClusterRoleBinding/permissive",
        ]
    );
}

#[test]
fn published_signals_are_keyed_by_the_object_each_event_is_about() {
    let plan = decide(&snapshot());
    let mut out = HashMap::new();
    published_signals("shop", &plan.status, &mut out);
    assert_eq!(out["Service/lost"], ["ServiceSelectsNothing"]);
    assert!(out["Service/web"].is_empty());
    assert_eq!(out["Ingress/shop"].len(), 1);
    assert_eq!(out["ServiceAccount/ci"].len(), 1);
    assert_eq!(out["ServiceAccount/builder"].len(), 1);
    assert_eq!(out["Namespace/shop"].len(), 2);
    // What a restart reads back is what it finds again: no Event is repeated.
    let mut again = snapshot();
    again.published_connections = out;
    let replanned = decide(&again);
    let mut reported = crate::discovery::namespace::ReportedSignals::default();
    for o in replanned
        .signals
        .iter()
        .filter(|o| o.regarding.kind.as_deref() != Some("Deployment"))
    {
        assert!(reported.appeared(o).is_empty(), "{o:?}");
    }
}
