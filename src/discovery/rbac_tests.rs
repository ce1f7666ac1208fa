use super::*;
use serde_json::json;

fn crole(rules: serde_json::Value) -> RoleView {
    cluster_role(
        &serde_json::from_value(json!({"metadata": {"name": "r"}, "rules": rules})).unwrap(),
    )
}

#[test]
fn a_role_has_a_wildcard_when_a_rule_has_a_star_verb_resource_or_group() {
    let star = |field: &str| {
        let mut rule = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        rule[field] = json!(["*"]);
        crole(json!([rule])).wildcard
    };
    assert!(star("verbs"));
    assert!(star("resources"));
    assert!(star("apiGroups"));
    assert!(
        !crole(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]))
            .wildcard
    );
    assert!(!crole(json!(null)).wildcard, "no rules");
    let r: Role = serde_json::from_value(json!({
        "metadata": {"name": "ops", "namespace": "shop"},
        "rules": [{"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}]
    }))
    .unwrap();
    assert!(role(&r).wildcard);
}

fn binding_of(kind: &str, role: &str, subjects: serde_json::Value) -> BindingView {
    let b: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "b", "namespace": "shop"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": subjects,
    }))
    .unwrap();
    role_binding(&b)
}

fn sa(ns: &str, name: &str) -> serde_json::Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
}

#[test]
fn a_namespace_lists_its_role_bindings_and_cluster_role_bindings_to_its_accounts() {
    let rbs = vec![
        (
            "deployers".to_string(),
            binding_of(
                "ClusterRole",
                "edit",
                json!([
                    sa("shop", "ci"),
                    sa("tools", "argo"),
                    {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                    {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}
                ]),
            ),
        ),
        (
            "ops".to_string(),
            binding_of("Role", "ops", json!([sa("shop", "operator")])),
        ),
    ];
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ci-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [sa("shop", "ci"), sa("other", "ci"), {"kind": "User", "name": "root"}],
    }))
    .unwrap();
    let unrelated: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "elsewhere"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [sa("other", "x")],
    }))
    .unwrap();
    let crbs = vec![
        ("ci-admin".to_string(), cluster_role_binding(&crb)),
        ("elsewhere".to_string(), cluster_role_binding(&unrelated)),
    ];
    assert!(crbs[0].1.binds_service_account_of("shop"));
    assert!(!crbs[1].1.binds_service_account_of("shop"));
    // `ops` has a wildcard rule; `edit` has none.
    let wildcard = |kind: &str, name: &str| match (kind, name) {
        ("Role", "ops") => Some(true),
        ("ClusterRole", "edit") => Some(false),
        _ => None,
    };
    let entries = binding_entries("shop", &rbs, &crbs, wildcard);
    assert_eq!(
        entries,
        vec![
            RoleBindingEntry {
                name: "RoleBinding/deployers".into(),
                role: "ClusterRole/edit".into(),
                subjects: vec![
                    "Group/devs".into(),
                    "ServiceAccount/ci".into(),
                    "ServiceAccount/tools/argo".into(),
                    "User/alice".into(),
                ],
                signals: vec![],
            },
            RoleBindingEntry {
                name: "RoleBinding/ops".into(),
                role: "Role/ops".into(),
                subjects: vec!["ServiceAccount/operator".into()],
                signals: vec![
                    "PrivilegedServiceAccount: ServiceAccount/operator has Role/ops (a wildcard rule) through RoleBinding/ops".into()
                ],
            },
            RoleBindingEntry {
                name: "ClusterRoleBinding/ci-admin".into(),
                role: "ClusterRole/cluster-admin".into(),
                subjects: vec!["ServiceAccount/ci".into()],
                signals: vec![
                    "PrivilegedServiceAccount: ServiceAccount/ci has ClusterRole/cluster-admin (cluster-admin) through ClusterRoleBinding/ci-admin".into()
                ],
            },
        ]
    );
    assert_eq!(signal_account(&entries[2].signals[0]), Some("ci"));
    assert_eq!(signal_account("ServiceSelectsNothing"), None);
    // The other namespace sees the same ClusterRoleBinding with its own account only.
    let other = binding_entries("other", &[], &crbs, wildcard);
    assert_eq!(other.len(), 2);
    assert_eq!(other[0].subjects, ["ServiceAccount/ci"]);
    assert_eq!(other[1].subjects, ["ServiceAccount/x"]);
    assert!(other[1].signals.is_empty());
}

#[test]
fn only_accounts_of_the_namespace_and_no_bootstrap_binding_are_hazards() {
    // cluster-admin to a User, and to another namespace's account: listed, no hazard here.
    let rb = binding_of(
        "ClusterRole",
        "cluster-admin",
        json!([{"kind": "User", "name": "alice"}, sa("tools", "argo")]),
    );
    let entries = binding_entries("shop", &[("admins".into(), rb)], &[], |_, _| None);
    assert!(entries[0].signals.is_empty(), "{entries:?}");

    // The API server's own bindings (kube-system's controllers hold wildcard roles).
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "system:controller:generic-garbage-collector",
                     "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:controller:generic-garbage-collector"},
        "subjects": [sa("kube-system", "generic-garbage-collector")],
    }))
    .unwrap();
    let view = cluster_role_binding(&crb);
    assert!(view.bootstrap);
    let entries = binding_entries("kube-system", &[], &[("gc".into(), view)], |_, _| {
        Some(true)
    });
    assert_eq!(entries.len(), 1);
    assert!(entries[0].signals.is_empty());

    // A role that does not exist (yet): no hazard.
    let rb = binding_of("Role", "missing", json!([sa("shop", "ci")]));
    let entries = binding_entries("shop", &[("b".into(), rb)], &[], |_, _| None);
    assert!(entries[0].signals.is_empty());
}

fn group(name: &str) -> serde_json::Value {
    json!({"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
}

fn crb_of(name: &str, role: &str, subjects: serde_json::Value, bootstrap: bool) -> BindingView {
    let labels = if bootstrap {
        json!({"kubernetes.io/bootstrapping": "rbac-defaults"})
    } else {
        json!({})
    };
    let b: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }))
    .unwrap();
    cluster_role_binding(&b)
}

#[test]
fn a_group_every_service_account_of_the_namespace_is_in_is_followed() {
    // In the namespace: its own accounts' group is a hazard; another namespace's and a
    // group of people are listed and are not.
    let rb = binding_of(
        "ClusterRole",
        "cluster-admin",
        json!([
            group("system:serviceaccounts:shop"),
            group("system:serviceaccounts:tools"),
            group("devs")
        ]),
    );
    let entries = binding_entries("shop", &[("admins".into(), rb)], &[], |_, _| None);
    assert_eq!(
        entries[0].subjects,
        [
            "Group/devs",
            "Group/system:serviceaccounts:shop",
            "Group/system:serviceaccounts:tools"
        ]
    );
    assert_eq!(
        entries[0].signals,
        [
            "PrivilegedServiceAccount: Group/system:serviceaccounts:shop (every ServiceAccount of the namespace is in it) has ClusterRole/cluster-admin (cluster-admin) through RoleBinding/admins"
        ]
    );
    assert_eq!(
        signal_account(&entries[0].signals[0]),
        None,
        "about the namespace"
    );
}

#[test]
fn a_cluster_role_binding_to_a_group_of_all_the_accounts_is_listed_and_flagged() {
    // Every ServiceAccount, every authenticated client, one namespace's accounts; the API
    // server's own binding to every authenticated client is not listed.
    let wildcard = |_: &str, name: &str| Some(name == "ops");
    let crbs = vec![
        (
            "permissive".to_string(),
            crb_of(
                "permissive",
                "cluster-admin",
                json!([group("system:serviceaccounts")]),
                false,
            ),
        ),
        (
            "everyone".to_string(),
            crb_of(
                "everyone",
                "ops",
                json!([group("system:authenticated"), group("devs")]),
                false,
            ),
        ),
        (
            "tools-only".to_string(),
            crb_of(
                "tools-only",
                "cluster-admin",
                json!([group("system:serviceaccounts:tools")]),
                false,
            ),
        ),
        (
            "system:basic-user".to_string(),
            crb_of(
                "system:basic-user",
                "system:basic-user",
                json!([group("system:authenticated")]),
                true,
            ),
        ),
    ];
    let reaching: Vec<&str> = crbs
        .iter()
        .filter(|(_, b)| b.binds_service_account_of("shop"))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(reaching, ["permissive", "everyone"]);
    let entries = binding_entries("shop", &[], &crbs, wildcard);
    let shown: Vec<(&str, &[String], usize)> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.subjects.as_slice(), e.signals.len()))
        .collect();
    assert_eq!(
        shown,
        [
            (
                "ClusterRoleBinding/everyone",
                &["Group/system:authenticated".to_string()][..],
                1
            ),
            (
                "ClusterRoleBinding/permissive",
                &["Group/system:serviceaccounts".to_string()][..],
                1
            ),
        ]
    );
    assert_eq!(
        entries[0].signals,
        [
            "PrivilegedServiceAccount: Group/system:authenticated (every ServiceAccount of the namespace is in it) has ClusterRole/ops (a wildcard rule) through ClusterRoleBinding/everyone"
        ]
    );
    let tools = binding_entries("tools", &[], &crbs, wildcard);
    assert_eq!(tools.len(), 3, "{tools:?}");
}
