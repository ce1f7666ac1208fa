//! Services, Ingresses, NetworkPolicies and RBAC in the inventory, on the real control plane:
//! `moonin run --controllers discovery` as its ServiceAccount from `config/rbac` (so the
//! `list`/`watch` it was given on exactly these kinds is what it runs with).

use std::time::Duration;

use k8s_openapi::api::{
    core::v1::{Service, ServiceAccount},
    networking::v1::{Ingress, NetworkPolicy},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::discovery::{Discovery, deployment, entry, inventory_where};
use crate::harness::wait_for;
use crate::require_cluster;
use crate::scaling::Rig;

/// Creates `body` with `api`.
async fn create<K>(api: &Api<K>, body: Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + DeserializeOwned,
{
    let obj: K = serde_json::from_value(body).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", K::kind(&())));
}

/// Cluster-scoped objects of the test, deleted on drop.
struct ClusterObjects(Vec<(&'static str, String)>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = std::process::Command::new("kubectl")
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .status();
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn signals_of(inv: &Value, list: &str, name: &str) -> Vec<String> {
    entry(inv, list, name).map_or_else(Vec::new, |e| strings(&e["signals"]))
}

fn ref_to(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

#[tokio::test]
async fn services_ingresses_network_policies_and_rbac_in_the_inventory() {
    let client = require_cluster!();
    let rig = Rig::with_args(client.clone(), "disc-net", &["--controllers", "discovery"]).await;
    let ns = rig.ns().to_string();
    let star_role = format!("moonin-e2e-{ns}-star");
    let crb_name = format!("moonin-e2e-{ns}-ops");
    let group_crb = format!("moonin-e2e-{ns}-accounts");
    let _cluster = ClusterObjects(vec![
        ("clusterrolebinding", crb_name.clone()),
        ("clusterrolebinding", group_crb.clone()),
        ("clusterrole", star_role.clone()),
    ]);
    let _discovery = Discovery::create(&client, false).await;

    deployment(&rig, "web", "registry.example/web:1.0", json!({})).await;
    create(
        &Api::<Service>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
        }),
    )
    .await;
    create(
        &Api::<Service>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "lost"},
            "spec": {"selector": {"app": "nobody"}, "ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await;
    create(
        &Api::<Ingress>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "shop"},
            "spec": {
                "tls": [{"hosts": ["shop.example"], "secretName": "shop-tls"}],
                "rules": [{"host": "shop.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"path": "/api", "pathType": "Prefix",
                     "backend": {"service": {"name": "missing", "port": {"number": 80}}}}
                ]}}]
            }
        }),
    )
    .await;
    create(&Api::<NetworkPolicy>::namespaced(client.clone(), &ns), json!({
        "metadata": {"name": "web-lockdown"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"]}
    }))
    .await;
    for sa in ["ci", "ops"] {
        create(
            &Api::<ServiceAccount>::namespaced(client.clone(), &ns),
            json!({"metadata": {"name": sa}}),
        )
        .await;
    }
    create(
        &Api::<RoleBinding>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "ci-admin"},
            "roleRef": ref_to("ClusterRole", "cluster-admin"),
            "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": ns}]
        }),
    )
    .await;
    create(
        &Api::<Role>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
        }),
    )
    .await;
    create(
        &Api::<RoleBinding>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "ops-reader"},
            "roleRef": ref_to("Role", "reader"),
            "subjects": [
                {"kind": "ServiceAccount", "name": "ops", "namespace": ns},
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ]
        }),
    )
    .await;

    // Every kind in the inventory, with its signals.
    let inv = inventory_where(&rig, "Services, Ingress, policy and bindings", |v| {
        entry(v, "services", "lost").is_some()
            && entry(v, "ingresses", "shop").is_some()
            && entry(v, "networkPolicies", "web-lockdown").is_some()
            && entry(v, "roleBindings", "RoleBinding/ops-reader").is_some()
            && entry(v, "deployments", "web").is_some_and(|d| d["isolation"].is_array())
    })
    .await;
    let web = entry(&inv, "deployments", "web").expect("web");
    assert_eq!(strings(&web["services"]), ["web"], "{web}");
    assert_eq!(strings(&web["isolation"]), ["Ingress", "Egress"], "{web}");
    assert_eq!(web["health"], "Healthy", "{web}");
    let svc = entry(&inv, "services", "web").expect("service web");
    assert_eq!(svc["type"], "ClusterIP", "{svc}");
    assert_eq!(svc["selector"], "app=web", "{svc}");
    assert_eq!(strings(&svc["ports"]), ["80/TCP→8080"], "{svc}");
    assert_eq!(strings(&svc["deployments"]), ["web"], "{svc}");
    assert!(signals_of(&inv, "services", "web").is_empty(), "{svc}");
    assert_eq!(
        signals_of(&inv, "services", "lost"),
        ["ServiceSelectsNothing"]
    );
    let ing = entry(&inv, "ingresses", "shop").expect("ingress");
    assert_eq!(ing["tls"], true, "{ing}");
    assert_eq!(strings(&ing["hosts"]), ["shop.example"], "{ing}");
    assert_eq!(
        strings(&ing["backends"]),
        ["Service/missing:80", "Service/web:80"],
        "{ing}"
    );
    assert_eq!(
        signals_of(&inv, "ingresses", "shop"),
        ["BackendNotFound: Service/missing"]
    );
    let np = entry(&inv, "networkPolicies", "web-lockdown").expect("policy");
    assert_eq!(strings(&np["deployments"]), ["web"], "{np}");
    assert_eq!(strings(&np["policyTypes"]), ["Ingress", "Egress"], "{np}");
    assert_eq!(np["podSelector"], "app=web", "{np}");
    let admin = entry(&inv, "roleBindings", "RoleBinding/ci-admin").expect("ci-admin");
    assert_eq!(admin["role"], "ClusterRole/cluster-admin", "{admin}");
    assert_eq!(
        strings(&admin["subjects"]),
        ["ServiceAccount/ci"],
        "{admin}"
    );
    assert_eq!(
        signals_of(&inv, "roleBindings", "RoleBinding/ci-admin"),
        [
            "PrivilegedServiceAccount: ServiceAccount/ci has ClusterRole/cluster-admin (cluster-admin) through RoleBinding/ci-admin"
        ]
    );
    let reader = entry(&inv, "roleBindings", "RoleBinding/ops-reader").expect("ops-reader");
    assert_eq!(
        strings(&reader["subjects"]),
        ["ServiceAccount/ops", "User/alice"],
        "{reader}"
    );
    assert!(signals_of(&inv, "roleBindings", "RoleBinding/ops-reader").is_empty());
    let summary = &inv["summary"];
    assert_eq!(summary["services"], 2, "{summary}");
    assert_eq!(summary["ingresses"], 1, "{summary}");
    assert_eq!(summary["networkPolicies"], 1, "{summary}");
    // The harness binds the manager's own ServiceAccount `moonin` of this namespace through
    // ClusterRoleBindings (config/rbac): they count for this namespace, with that account.
    let own = format!("ClusterRoleBinding/{ns}-moonin-discovery");
    let discovery_binding = entry(&inv, "roleBindings", &own).expect("the manager's binding");
    assert_eq!(
        strings(&discovery_binding["subjects"]),
        ["ServiceAccount/moonin"],
        "{discovery_binding}"
    );
    assert_eq!(discovery_binding["role"], "ClusterRole/moonin-discovery");
    assert!(signals_of(&inv, "roleBindings", &own).is_empty());
    let bindings = inv["roleBindings"].as_array().map_or(0, Vec::len);
    assert!(bindings > 2, "{}", inv["roleBindings"]);
    assert_eq!(summary["roleBindings"], bindings, "{summary}");
    assert_eq!(
        summary["errorSignals"], 2,
        "the Service and the Ingress count, the RBAC hazard does not: {summary}"
    );

    // A Warning Event for each signal, about the object it is about.
    for (regarding, reason) in [
        ("lost", "ServiceSelectsNothing"),
        ("shop", "BackendNotFound"),
        ("ci", "PrivilegedServiceAccount"),
    ] {
        let notes = wait_for(
            &format!("a {reason} Event about {regarding}"),
            Duration::from_secs(30),
            || async {
                let e = rig.events(regarding, reason).await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await;
        assert!(notes.iter().all(|n| n.starts_with(reason)), "{notes:?}");
    }

    // A Role gaining a wildcard makes its binding a hazard.
    Api::<Role>::namespaced(client.clone(), &ns)
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}]}),
            ),
        )
        .await
        .expect("patch role");
    inventory_where(&rig, "the wildcard Role flagged", |v| {
        signals_of(v, "roleBindings", "RoleBinding/ops-reader")
            == ["PrivilegedServiceAccount: ServiceAccount/ops has Role/reader (a wildcard rule) through RoleBinding/ops-reader"]
    })
    .await;

    // A ClusterRoleBinding to a ServiceAccount of the namespace marks it; its ClusterRole
    // gaining a wildcard marks it again.
    create(
        &Api::<ClusterRole>::all(client.clone()),
        json!({
            "metadata": {"name": star_role},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        }),
    )
    .await;
    create(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        json!({
            "metadata": {"name": crb_name},
            "roleRef": ref_to("ClusterRole", &star_role),
            "subjects": [
                {"kind": "ServiceAccount", "name": "ops", "namespace": ns},
                {"kind": "ServiceAccount", "name": "someone", "namespace": "default"}
            ]
        }),
    )
    .await;
    let crb_entry = format!("ClusterRoleBinding/{crb_name}");
    let inv = inventory_where(&rig, "the ClusterRoleBinding listed", |v| {
        entry(v, "roleBindings", &crb_entry).is_some()
    })
    .await;
    let crb = entry(&inv, "roleBindings", &crb_entry).expect("crb");
    assert_eq!(
        strings(&crb["subjects"]),
        ["ServiceAccount/ops"],
        "only this namespace's accounts: {crb}"
    );
    assert!(signals_of(&inv, "roleBindings", &crb_entry).is_empty());
    Api::<ClusterRole>::all(client.clone())
        .patch(
            &star_role,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"rules": [{"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
        )
        .await
        .expect("patch cluster role");
    inventory_where(&rig, "the ClusterRole's wildcard flagged", |v| {
        signals_of(v, "roleBindings", &crb_entry).len() == 1
    })
    .await;

    // The same role to the group of all the namespace's ServiceAccounts: a hazard of the
    // namespace, its Event about the Namespace, in the namespace.
    let group = format!("system:serviceaccounts:{ns}");
    create(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        json!({
            "metadata": {"name": group_crb},
            "roleRef": ref_to("ClusterRole", &star_role),
            "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]
        }),
    )
    .await;
    let group_entry = format!("ClusterRoleBinding/{group_crb}");
    let inv = inventory_where(&rig, "the group's ClusterRoleBinding flagged", |v| {
        !signals_of(v, "roleBindings", &group_entry).is_empty()
    })
    .await;
    let listed = entry(&inv, "roleBindings", &group_entry).expect("group binding");
    assert_eq!(
        strings(&listed["subjects"]),
        [format!("Group/{group}")],
        "{listed}"
    );
    assert_eq!(
        signals_of(&inv, "roleBindings", &group_entry),
        [format!(
            "PrivilegedServiceAccount: Group/{group} (every ServiceAccount of the namespace is in it) has ClusterRole/{star_role} (a wildcard rule) through {group_entry}"
        )]
    );
    wait_for(
        "a PrivilegedServiceAccount Event about the namespace",
        Duration::from_secs(30),
        || async {
            let e = rig.events(&ns, "PrivilegedServiceAccount").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;

    // Fixing what was wrong ends the signals.
    create(
        &Api::<Service>::namespaced(client.clone(), &ns),
        json!({
            "metadata": {"name": "missing"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
        }),
    )
    .await;
    Api::<Service>::namespaced(client.clone(), &ns)
        .patch(
            "lost",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"app": "web"}}})),
        )
        .await
        .expect("patch service");
    let inv = inventory_where(&rig, "the network signals ended", |v| {
        signals_of(v, "ingresses", "shop").is_empty()
            && signals_of(v, "services", "lost").is_empty()
    })
    .await;
    let web = entry(&inv, "deployments", "web").expect("web");
    assert_eq!(
        strings(&web["services"]),
        ["lost", "missing", "web"],
        "{web}"
    );
    assert_eq!(inv["summary"]["errorSignals"], 0, "{}", inv["summary"]);
}
