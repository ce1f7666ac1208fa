use super::*;
use serde_json::json;

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

fn changed<'a, V>(key: &'a (String, String), after: Option<&'a V>) -> Change<'a, V> {
    Change::Object {
        key,
        before: None,
        after,
    }
}

#[test]
fn what_each_change_marks() {
    let pod = key("shop", "web-1");
    assert_eq!(
        by_namespace::<PodView>(changed(&pod, None)),
        Mark::namespace("shop")
    );
    assert_eq!(by_namespace::<PodView>(Change::Synced), Mark::cluster());
    let node = key("", "node-1");
    assert_eq!(
        cluster_wide::<NodeView>(changed(&node, None)),
        Mark::cluster()
    );
    // A Namespace's key is `("", name)`.
    let ns = key("", "shop");
    assert_eq!(
        namespace_changed(changed(&ns, Some(&("shop".to_string(), true)))),
        Mark::namespace_and_cluster("shop")
    );
    assert_eq!(namespace_changed(Change::Synced), Mark::cluster());
}

fn binding(role: &str, accounts: &[(&str, &str)]) -> BindingView {
    BindingView {
        role_kind: "ClusterRole".into(),
        role: role.into(),
        subjects: accounts
            .iter()
            .map(|(ns, name)| rbac::SubjectView {
                kind: "ServiceAccount".into(),
                name: (*name).into(),
                namespace: (*ns).into(),
            })
            .collect(),
        bootstrap: false,
    }
}

#[test]
fn a_cluster_role_binding_marks_the_namespaces_of_its_accounts_before_and_after() {
    let k = key("", "ci-admin");
    let before = binding("cluster-admin", &[("shop", "ci"), ("tools", "argo")]);
    let after = binding("cluster-admin", &[("shop", "ci"), ("web", "deployer")]);
    let c = Change::Object {
        key: &k,
        before: Some(&before),
        after: Some(&after),
    };
    let namespaces = namespaces(&["shop", "tools", "web", "other"]);
    assert_eq!(
        cluster_role_binding_namespaces(&c, &namespaces),
        ["shop", "tools", "web"]
    );
    assert!(cluster_role_binding_namespaces(&Change::Synced, &namespaces).is_empty());
    let pending = Arc::new(Pending::default());
    cluster_role_binding_marks(&pending, &namespaces)(c);
    assert_eq!(pending.take().namespaces.len(), 3);
}

/// A namespace projection holding `names`.
fn namespaces(names: &[&str]) -> Projections<(String, bool)> {
    use crate::runtime::decode::Decoded;
    use k8s_openapi::api::core::v1::Namespace;
    let p: Projections<(String, bool)> = Projections::default();
    let nothing = &mut |_: Change<'_, (String, bool)>| {};
    for name in names {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        p.write(|i| {
            i.apply(
                watcher::Event::Apply(Decoded::Valid(n)),
                namespace_view,
                nothing,
            )
        });
    }
    p
}

#[test]
fn a_cluster_role_binding_to_every_service_account_marks_every_namespace() {
    let group = |name: &str| rbac::SubjectView {
        kind: "Group".into(),
        name: name.into(),
        namespace: "".into(),
    };
    let namespaces = namespaces(&["shop", "tools", "web"]);
    let k = key("", "permissive");
    let marked = |b: &BindingView| {
        cluster_role_binding_namespaces(
            &Change::Object {
                key: &k,
                before: None,
                after: Some(b),
            },
            &namespaces,
        )
    };
    let mut b = binding("cluster-admin", &[]);
    for every in ["system:serviceaccounts", "system:authenticated"] {
        b.subjects = vec![group(every)];
        assert_eq!(marked(&b), ["shop", "tools", "web"], "{every}");
    }
    b.subjects = vec![group("system:serviceaccounts:tools"), group("devs")];
    assert_eq!(marked(&b), ["tools"]);
    // The API server's own bindings to those groups are listed nowhere.
    b.subjects = vec![
        group("system:serviceaccounts"),
        group("system:serviceaccounts:web"),
    ];
    b.bootstrap = true;
    assert!(marked(&b).is_empty());
}

fn flip(before: Option<&RoleView>, after: Option<&RoleView>) -> Mark {
    let k = key("shop", "ops");
    wildcard_changed(Change::Object {
        key: &k,
        before,
        after,
    })
}

#[test]
fn only_a_role_whose_wildcard_flips_marks_anything() {
    let (plain, star) = (&RoleView { wildcard: false }, &RoleView { wildcard: true });
    assert_eq!(flip(None, Some(plain)), Mark::none());
    assert_eq!(flip(Some(plain), Some(plain)), Mark::none());
    assert_eq!(flip(Some(plain), Some(star)), Mark::namespace("shop"));
    assert_eq!(flip(Some(star), None), Mark::namespace("shop"));
    assert_eq!(flip(None, Some(star)), Mark::namespace("shop"));
}

#[test]
fn a_cluster_role_marks_the_namespaces_that_bind_it() {
    use crate::runtime::decode::Decoded;
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    let rbs: Projections<BindingView> = Projections::default();
    let crbs: Projections<BindingView> = Projections::default();
    let rb = |ns: &str, role: &str| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": "b", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        }))
        .unwrap()
    };
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ops"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ops"},
        "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "tools"}],
    }))
    .unwrap();
    let nothing = &mut |_: Change<'_, BindingView>| {};
    for b in [rb("shop", "ops"), rb("web", "view")] {
        rbs.write(|i| {
            i.apply(
                watcher::Event::Apply(Decoded::Valid(b)),
                rbac::role_binding,
                nothing,
            )
        });
    }
    crbs.write(|i| {
        i.apply(
            watcher::Event::Apply(Decoded::Valid(crb)),
            rbac::cluster_role_binding,
            nothing,
        )
    });
    let pending = Arc::new(Pending::default());
    let on_change = cluster_role_marks(&pending, &rbs, &crbs, &namespaces(&["shop", "web"]));
    let k = key("", "ops");
    on_change(Change::Object {
        key: &k,
        before: None,
        after: Some(&RoleView { wildcard: false }),
    });
    assert!(pending.take().namespaces.is_empty(), "no wildcard: nothing");
    on_change(Change::Object {
        key: &k,
        before: Some(&RoleView { wildcard: false }),
        after: Some(&RoleView { wildcard: true }),
    });
    assert_eq!(
        pending.take().namespaces,
        ["shop", "tools"].map(String::from).into_iter().collect()
    );
}

#[test]
fn a_changed_deployment_is_queued_for_its_record_and_a_deleted_one_is_not() {
    let web = key("shop", "web");
    let view = Arc::new(DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        ..Default::default()
    });
    assert_eq!(
        deployment_changed(changed(&web, Some(&view))),
        Mark {
            deployment: Some(view.clone()),
            ..Mark::namespace("shop")
        }
    );
    assert_eq!(
        deployment_changed(changed(&web, None)),
        Mark::namespace("shop")
    );
    assert_eq!(deployment_changed(Change::Synced), Mark::cluster());
}

#[test]
fn a_deleted_deployment_is_forgotten_by_the_baselines() {
    let (pending, baselines) = (Arc::new(Pending::default()), Arc::new(Baselines::default()));
    let view = Arc::new(DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        ..Default::default()
    });
    baselines.set(&view);
    let on_change = deployment_marks(&pending, &baselines);
    let web = key("shop", "web");
    on_change(changed(&web, Some(&view)));
    assert!(baselines.get(&web).is_some(), "a change keeps the baseline");
    on_change(changed(&web, None));
    assert!(baselines.get(&web).is_none());
    assert_eq!(pending.take().namespaces.len(), 1);
}

#[test]
fn only_an_unreported_foreign_revision_marks_its_namespace() {
    let rev = |foreign: Option<&str>, reason: Option<&str>| RevView {
        name: "web-r1".into(),
        workload: "web".into(),
        revision: 1,
        observed_at: jiff::Timestamp::UNIX_EPOCH,
        reason: reason.map(String::from),
        foreign: foreign.map(String::from),
        rollout: true,
        images: Vec::new(),
        outcome: None,
        summary: String::new(),
        changed_by: None,
        autoscaler_move: false,
    };
    let k = key("shop", "web-r1");
    let ours = rev(None, None);
    let foreign = rev(Some("kubectl"), None);
    let reported = rev(
        Some("kubectl"),
        Some(crate::discovery::names::condition_reasons::NOT_RECORDED),
    );
    assert_eq!(revision_changed(changed(&k, Some(&ours))), Mark::none());
    assert_eq!(
        revision_changed(changed(&k, Some(&foreign))),
        Mark::namespace("shop")
    );
    assert_eq!(revision_changed(changed(&k, Some(&reported))), Mark::none());
    assert_eq!(revision_changed(changed::<RevView>(&k, None)), Mark::none());
    assert_eq!(revision_changed(Change::Synced), Mark::none());
}

#[test]
fn only_an_inventory_someone_else_wrote_marks_its_namespace() {
    let inventory = |manager: &str| -> NamespaceInventory {
        serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "NamespaceInventory",
            "metadata": {
                "name": "inventory",
                "namespace": "shop",
                "managedFields": [{"manager": manager, "operation": "Apply"}],
            },
            "spec": {"part": 0, "parts": 1},
        }))
        .unwrap()
    };
    assert_eq!(
        inventory_changed(&inventory(field_manager::DISCOVERY), true),
        Mark::none()
    );
    assert_eq!(
        inventory_changed(&inventory("kubectl"), true),
        Mark::namespace("shop")
    );
    // Deleted: written again, whoever wrote it last.
    assert_eq!(
        inventory_changed(&inventory(field_manager::DISCOVERY), false),
        Mark::namespace("shop")
    );
}

#[test]
fn the_oldest_discovery_not_being_deleted_is_in_charge() {
    let cd = |name: &str, created: &str, deleting: bool| -> Arc<ClusterDiscovery> {
        let mut meta = json!({"name": name, "creationTimestamp": created});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-05T00:00:00Z");
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "ClusterDiscovery",
                "metadata": meta,
                "spec": {},
            }))
            .unwrap(),
        )
    };
    let name = |c: Option<Arc<ClusterDiscovery>>| c.map(|c| c.name_any());
    assert_eq!(name(in_charge(&[])), None);
    assert_eq!(
        name(in_charge(&[
            cd("newer", "2026-01-02T00:00:00Z", false),
            cd("oldest", "2026-01-01T00:00:00Z", true),
            cd("b", "2026-01-01T12:00:00Z", false),
            cd("a", "2026-01-01T12:00:00Z", false),
        ])),
        Some("a".to_string()),
        "the oldest is being deleted; of two equally old, the first by name"
    );
}
