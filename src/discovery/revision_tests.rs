use super::*;
use proptest::prelude::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn now() -> Timestamp {
    ts("2026-05-01T12:00:00Z")
}

/// A settled Deployment `shop` at revision 3 with one container `app`.
fn shop() -> DeploymentView {
    DeploymentView {
        namespace: "web".into(),
        name: "shop".into(),
        uid: "uid-1".into(),
        generation: 4,
        observed_generation: 4,
        replicas: 3,
        ready: 3,
        available: 3,
        updated: 3,
        images: vec![("app".into(), "shop:1.2".into())],
        config_refs: vec!["ConfigMap/shop".into()],
        revision: Some(3),
        template_manager: Some("kubectl-client-side-apply".into()),
        replicas_managers: vec!["argocd-controller".into(), "kube-controller-manager".into()],
        ..DeploymentView::default()
    }
}

/// `shop` after a template edit that the Deployment controller has rolled out.
fn rolled(mut v: DeploymentView) -> DeploymentView {
    v.generation += 1;
    v.observed_generation = v.generation;
    v.revision = v.revision.map(|r| r + 1);
    v
}

fn spec(revision: i64, summary: &str) -> WorkloadRevisionSpec {
    WorkloadRevisionSpec {
        workload: WorkloadRef {
            kind: "Deployment".into(),
            name: "shop".into(),
        },
        revision,
        observed_at: Time(now()),
        summary: summary.into(),
        changed_by: Some("kubectl-client-side-apply".into()),
        template_hash: None,
        images: Vec::new(),
        replicas: None,
        config_refs: vec!["ConfigMap/shop".into()],
        config_changes: Vec::new(),
        helm: None,
        rollout: true,
    }
}

fn image(container: &str, from: Option<&str>, to: Option<&str>) -> ImageChange {
    ImageChange {
        container: container.into(),
        from: from.map(str::to_string),
        to: to.map(str::to_string),
    }
}

#[test]
fn an_image_change_is_attributed_to_the_owner_of_that_image() {
    let before = shop();
    let mut after = rolled(shop());
    after.images = vec![("app".into(), "shop:1.3".into())];
    after.image_managers = vec![("app".into(), "deploy-bot".into())];
    let spec = change(Some(&before), &after, None, now()).expect("a record");
    assert_eq!(spec.changed_by.as_deref(), Some("deploy-bot"));
}

#[test]
fn image_change_is_recorded_under_the_new_revision() {
    let before = shop();
    let mut after = rolled(shop());
    after.images = vec![("app".into(), "shop:1.3".into())];
    after.template_manager = Some("deploy-bot".into());
    let expected = WorkloadRevisionSpec {
        images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
        changed_by: Some("deploy-bot".into()),
        ..spec(4, "image app: shop:1.2 → shop:1.3")
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

#[test]
fn containers_added_and_removed_in_container_order() {
    let mut before = shop();
    before.images = vec![
        ("init".into(), "migrate:1".into()),
        ("app".into(), "shop:1.2".into()),
        ("proxy".into(), "envoy:1.29".into()),
    ];
    let mut after = rolled(before.clone());
    after.images = vec![
        ("app".into(), "shop:1.2".into()),
        ("sidecar".into(), "log:2".into()),
        ("proxy".into(), "envoy:1.30".into()),
    ];
    let expected = WorkloadRevisionSpec {
        images: vec![
            image("sidecar", None, Some("log:2")),
            image("proxy", Some("envoy:1.29"), Some("envoy:1.30")),
            image("init", Some("migrate:1"), None),
        ],
        ..spec(
            4,
            "container sidecar added: log:2; image proxy: envoy:1.29 → envoy:1.30; \
             container init removed: migrate:1",
        )
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

#[test]
fn config_reference_changes_list_added_then_removed() {
    let mut before = shop();
    before.config_refs = vec!["ConfigMap/shop".into(), "Secret/db-v1".into()];
    let mut after = rolled(before.clone());
    after.config_refs = vec![
        "ConfigMap/flags".into(),
        "ConfigMap/shop".into(),
        "Secret/db-v2".into(),
    ];
    let expected = WorkloadRevisionSpec {
        config_refs: after.config_refs.clone(),
        ..spec(4, "config +ConfigMap/flags +Secret/db-v2 -Secret/db-v1")
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

/// `shop` as the recorder sees it when its ConfigMap `shop` holds `data`.
fn with_config(mut v: DeploymentView, data: serde_json::Value) -> DeploymentView {
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shop", "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-05-01T11:00:00Z"},
        ]},
        "data": data,
    }))
    .unwrap();
    v.configs = vec![config::state(
        "ConfigMap/shop",
        Some(&config::config_map(&cm)),
    )];
    v
}

#[test]
fn a_config_map_data_change_is_a_revision_naming_the_keys_but_no_rollout() {
    let before = with_config(
        shop(),
        serde_json::json!({"LOG": "info", "DB_PASSWORD": "a"}),
    );
    let after = with_config(
        shop(),
        serde_json::json!({"LOG": "debug", "DB_PASSWORD": "a"}),
    );
    let c = change(Some(&before), &after, None, now()).expect("a change");
    assert!(!c.rollout, "no Pod restarts for it");
    assert_eq!(c.revision, 3, "under the current revision");
    assert_eq!(c.config_changes.len(), 1);
    assert_eq!(c.config_changes[0].keys, ["LOG"]);
    assert_eq!(c.changed_by.as_deref(), Some("argocd-controller"));
    assert!(
        c.summary
            .starts_with("ConfigMap/shop keys LOG changed (data ")
    );
    assert!(c.config_refs.is_empty(), "the references did not change");
    let text = serde_json::to_string(&c).unwrap();
    assert!(!text.contains("debug") && !text.contains("info"), "{text}");
    // Two different edits at one revision get different names.
    let again = with_config(
        shop(),
        serde_json::json!({"LOG": "warn", "DB_PASSWORD": "a"}),
    );
    let c2 = change(Some(&after), &again, None, now()).unwrap();
    assert_ne!(
        name("shop", &c, "generation 2"),
        name("shop", &c2, "generation 2")
    );
    // The same data: nothing.
    assert_eq!(change(Some(&after), &after.clone(), None, now()), None);
}

#[test]
fn replicas_only_change_names_a_replicas_manager() {
    let before = shop();
    let mut after = shop();
    after.generation += 1;
    after.replicas = 5;
    let expected = WorkloadRevisionSpec {
        replicas: Some(ReplicasChange { from: 3, to: 5 }),
        changed_by: Some("argocd-controller".into()),
        config_refs: Vec::new(),
        rollout: false,
        ..spec(3, "replicas 3 → 5")
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

/// Only a replica change by the HPA controller, KEDA or Moonin's scheduled scaling is an
/// autoscaler's move; one by anyone else, or with anything else changed, is a change.
#[test]
fn an_autoscaler_move_is_a_replicas_change_by_an_autoscaler_alone() {
    let scaled = |by: &str| {
        let mut after = shop();
        after.generation += 1;
        after.replicas = 5;
        after.replicas_managers = vec![by.to_string()];
        change(Some(&shop()), &after, None, now()).expect("a change")
    };
    for (by, moves) in [
        ("kube-controller-manager", true),
        ("keda-operator", true),
        ("moonin-scaling", true),
        ("moonin-restore", true),
        ("kubectl-scale", false),
        ("argocd-controller", false),
    ] {
        assert_eq!(autoscaler_move(&scaled(by)), moves, "{by}");
    }
    let mut with_image = rolled(shop());
    with_image.images = vec![("app".into(), "shop:1.3".into())];
    with_image.replicas = 5;
    with_image.replicas_managers = vec!["kube-controller-manager".into()];
    let c = change(Some(&shop()), &with_image, None, now()).expect("a change");
    assert!(!autoscaler_move(&c), "{c:?}");
    let config_edit = with_config(shop(), serde_json::json!({"LOG": "debug"}));
    let c = change(
        Some(&with_config(shop(), serde_json::json!({"LOG": "info"}))),
        &config_edit,
        None,
        now(),
    )
    .expect("a change");
    assert!(!autoscaler_move(&c));
}

#[test]
fn image_and_replicas_change_together() {
    let before = shop();
    let mut after = rolled(shop());
    after.images = vec![("app".into(), "shop:1.3".into())];
    after.replicas = 5;
    let expected = WorkloadRevisionSpec {
        images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
        replicas: Some(ReplicasChange { from: 3, to: 5 }),
        ..spec(4, "image app: shop:1.2 → shop:1.3; replicas 3 → 5")
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

#[test]
fn status_only_change_is_no_record() {
    let before = shop();
    let mut after = shop();
    after.ready = 1;
    after.available = 1;
    after.updated = 2;
    assert_eq!(change(Some(&before), &after, None, now()), None);
}

#[test]
fn revision_bump_with_the_same_images_is_a_template_change() {
    // An env change or `kubectl rollout restart`: nothing the view lists moved.
    let before = shop();
    let after = rolled(shop());
    assert_eq!(
        change(Some(&before), &after, None, now()),
        Some(spec(4, "template changed (revision 4)"))
    );
}

#[test]
fn template_edit_waits_for_the_revision_bump() {
    let before = shop();
    let mut edited = shop();
    edited.generation += 1;
    edited.images = vec![("app".into(), "shop:1.3".into())];
    assert_eq!(change(Some(&before), &edited, None, now()), None);

    // The caller keeps `before`; the bump brings one record under the new revision.
    let mut bumped = edited.clone();
    bumped.revision = Some(4);
    let expected = WorkloadRevisionSpec {
        images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
        ..spec(4, "image app: shop:1.2 → shop:1.3")
    };
    assert_eq!(change(Some(&before), &bumped, None, now()), Some(expected));
}

#[test]
fn observed_edit_without_bump_is_recorded_under_the_current_revision() {
    // A paused Deployment: the controller observes the edit but rolls nothing out.
    let before = shop();
    let mut after = shop();
    after.generation += 1;
    after.observed_generation += 1;
    after.images = vec![("app".into(), "shop:1.3".into())];
    let expected = WorkloadRevisionSpec {
        images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
        ..spec(3, "image app: shop:1.2 → shop:1.3")
    };
    assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
}

#[test]
fn helm_release_is_carried() {
    let helm = HelmRevision {
        release: "shop".into(),
        revision: 7,
        chart: "shop".into(),
        version: "0.4.1".into(),
    };
    let before = shop();
    let after = rolled(shop());
    let expected = WorkloadRevisionSpec {
        helm: Some(helm.clone()),
        ..spec(4, "template changed (revision 4)")
    };
    assert_eq!(
        change(Some(&before), &after, Some(helm.clone()), now()),
        Some(expected)
    );
}

#[test]
fn first_sight_is_no_revision() {
    assert_eq!(change(None, &shop(), None, now()), None);
}

#[test]
fn missing_revision_annotation_is_revision_one() {
    let mut created = shop();
    created.revision = None;
    // The controller's first sync then annotates revision 1: nothing new to record.
    let mut synced = created.clone();
    synced.revision = Some(1);
    assert_eq!(change(Some(&created), &synced, None, now()), None);
}

#[test]
fn a_recreated_deployment_is_first_sight_again() {
    let before = shop();
    let mut after = shop();
    after.uid = "uid-2".into();
    after.revision = Some(1);
    after.images = vec![("app".into(), "shop:2.0".into())];
    assert_eq!(change(Some(&before), &after, None, now()), None);
}

#[test]
fn long_summary_is_cut_on_a_char_boundary() {
    let before = shop();
    let mut after = rolled(shop());
    // 3-byte characters, so a cut at a fixed byte offset would land inside one.
    after.images = vec![("app".into(), "é".repeat(700))];
    let got = change(Some(&before), &after, None, now()).map(|s| s.summary);
    let summary = got.unwrap_or_else(|| panic!("expected a record"));
    assert!(summary.len() <= SUMMARY_MAX, "{} bytes", summary.len());
    assert!(summary.len() > SUMMARY_MAX - 8, "{} bytes", summary.len());
    assert!(summary.starts_with("image app: shop:1.2 → éé"));
    assert!(summary.ends_with("é…"));

    let exact = "x".repeat(SUMMARY_MAX);
    assert_eq!(truncate(exact.clone()), exact);
}

#[test]
fn name_is_deterministic_and_ignores_time_changer_and_helm() {
    let a = spec(4, "image app: shop:1.2 → shop:1.3");
    let mut b = a.clone();
    b.observed_at = Time(ts("2030-01-01T00:00:00Z"));
    b.changed_by = Some("someone-else".into());
    b.helm = Some(HelmRevision {
        release: "shop".into(),
        revision: 2,
        chart: "shop".into(),
        version: "1.0.0".into(),
    });
    let n = name("shop", &a, "generation 2");
    assert_eq!(n, name("shop", &b, "generation 2"));
    assert!(n.starts_with("shop-r4-"), "{n}");
    assert_eq!(n.len(), "shop-r4-".len() + NAME_HASH_DIGITS);

    let mut other = a.clone();
    other.replicas = Some(ReplicasChange { from: 3, to: 5 });
    assert_ne!(n, name("shop", &other, "generation 2"));
    assert_ne!(n, name("shop", &spec(5, &a.summary), "generation 2"));
}

/// A change seen again (a restarted manager re-deriving it) keeps its name; the same change
/// made again (a Secret's key rotated twice at one Deployment revision, replicas 3 → 5
/// twice) is another write, and gets a name of its own instead of being taken as recorded.
#[test]
fn the_same_change_made_again_gets_a_name_of_its_own() {
    let mut rotated = spec(4, "Secret/db keys password changed");
    rotated.config_changes = vec![crate::api::discovery::ConfigChange {
        source: "Secret/db".into(),
        keys: vec!["password".into()],
        ..Default::default()
    }];
    let at = |generation: i64, rv: &str| DeploymentView {
        generation,
        configs: vec![
            config::ConfigState {
                source: "Secret/db".into(),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            config::ConfigState {
                source: "ConfigMap/other".into(),
                resource_version: Some("900".into()),
                ..Default::default()
            },
        ],
        ..DeploymentView::default()
    };
    let first = occurrence(&at(7, "41"), &rotated);
    assert_eq!(
        first, "generation 7; Secret/db at 41",
        "only the sources it lists"
    );
    let n = name("shop", &rotated, &first);
    assert_eq!(
        n,
        name("shop", &rotated, &occurrence(&at(7, "41"), &rotated))
    );
    assert_ne!(
        n,
        name("shop", &rotated, &occurrence(&at(7, "58"), &rotated))
    );
    let scaled = spec(4, "replicas 3 → 5");
    assert_ne!(
        name("shop", &scaled, &occurrence(&at(7, "41"), &scaled)),
        name("shop", &scaled, &occurrence(&at(9, "41"), &scaled))
    );
}

#[test]
fn long_names_are_cut_and_kept_apart_by_the_hash() {
    let s = spec(12, "template changed (revision 12)");
    let long_a = format!("{}a", "x".repeat(252));
    let long_b = format!("{}b", "x".repeat(252));
    let (a, b) = (
        name(&long_a, &s, "generation 2"),
        name(&long_b, &s, "generation 2"),
    );
    assert_eq!(a.len(), NAME_MAX);
    assert!(is_valid(&a) && is_valid(&b), "{a} {b}");
    assert_ne!(a, b);

    // The suffix `-r12-<10 hex>` leaves 238 characters; a cut that would end on '-' or
    // '.' backs off to the letter before it.
    for sep in ['-', '.'] {
        let deployment = format!("{}{sep}{}", "a".repeat(237), "b".repeat(15));
        let n = name(&deployment, &s, "generation 2");
        assert!(n.starts_with(&format!("{}-r12-", "a".repeat(237))), "{n}");
        assert!(is_valid(&n), "{n}");
    }
}

#[test]
fn prune_keeps_exactly_the_newest_ten() {
    let base = ts("2026-05-01T00:00:00Z");
    let existing: Vec<(String, Timestamp)> = (0..14i64)
        .rev()
        .map(|i| {
            (
                format!("shop-r{i}"),
                base + jiff::SignedDuration::from_mins(i),
            )
        })
        .collect();
    assert_eq!(
        prune(&existing),
        vec!["shop-r0", "shop-r1", "shop-r2", "shop-r3"]
    );
    assert_eq!(prune(&existing[..KEPT]), Vec::<String>::new());
    assert_eq!(prune(&[]), Vec::<String>::new());
}

#[test]
fn prune_breaks_ties_by_name() {
    let t = ts("2026-05-01T00:00:00Z");
    let existing: Vec<(String, Timestamp)> =
        ["k", "b", "e", "a", "h", "c", "j", "d", "f", "i", "g", "l"]
            .into_iter()
            .map(|n| (n.to_string(), t))
            .collect();
    assert_eq!(prune(&existing), vec!["a", "b"]);
}

/// The pattern of the brief, checked character by character:
/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`, plus the length.
fn is_valid(n: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut prev: Option<char> = None;
    for c in n.chars() {
        let ok = match prev {
            None | Some('.') => alnum(c),
            Some('-') => alnum(c) || c == '-',
            Some(_) => alnum(c) || c == '-' || c == '.',
        };
        if !ok {
            return false;
        }
        prev = Some(c);
    }
    n.len() <= NAME_MAX && prev.is_some_and(alnum)
}

fn subdomain() -> impl Strategy<Value = String> {
    "[a-z0-9]([-a-z0-9]{0,70}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,70}[a-z0-9])?){0,4}"
        .prop_filter("at most 253 characters", |s| s.len() <= NAME_MAX)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn names_are_valid_and_deterministic(
        deployment in subdomain(),
        revision in 1i64..=i64::MAX,
        from in "[a-z0-9:./-]{0,40}",
        to in "[a-z0-9:./-]{0,40}",
    ) {
        let mut s = spec(revision, "x");
        s.workload.name = deployment.clone();
        s.images = vec![image("app", Some(&from), Some(&to))];
        let n = name(&deployment, &s, "generation 2");
        prop_assert!(is_valid(&n), "{n}");
        prop_assert_eq!(n.clone(), name(&deployment, &s.clone(), "generation 2"));
        if deployment.len() + 2 + 19 + 1 + NAME_HASH_DIGITS <= NAME_MAX {
            prop_assert!(n.starts_with(&format!("{deployment}-r{revision}-")), "{n}");
        }
    }

    #[test]
    fn names_are_valid_for_any_input(deployment in ".{0,300}", revision in any::<i64>()) {
        let n = name(&deployment, &spec(revision, "x"), "generation 2");
        prop_assert!(is_valid(&n), "{n}");
    }
}

/// A revision someone else created stays foreign once discovery has reported it: the report
/// writes its status only, and a status writer is not who recorded it.
#[test]
fn a_reported_foreign_revision_stays_foreign() {
    let revision = |fields: serde_json::Value| -> WorkloadRevision {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "WorkloadRevision",
            "metadata": {"name": "checkout-7", "namespace": "shop", "managedFields": fields},
            "spec": {
                "workload": {"kind": "Deployment", "name": "checkout"},
                "revision": 7,
                "observedAt": "2026-11-30T12:00:00Z",
                "summary": "copied"
            }
        }))
        .unwrap()
    };
    let reported = revision(serde_json::json!([
        {"manager": "argocd-controller", "operation": "Apply"},
        {"manager": "moonin-discovery", "operation": "Apply", "subresource": "status"},
    ]));
    assert_eq!(
        rev_view(&reported).foreign.as_deref(),
        Some("argocd-controller")
    );
    let recorded = revision(serde_json::json!([
        {"manager": "moonin-discovery", "operation": "Update"},
        {"manager": "moonin-discovery", "operation": "Apply", "subresource": "status"},
    ]));
    assert_eq!(rev_view(&recorded).foreign, None);
}
