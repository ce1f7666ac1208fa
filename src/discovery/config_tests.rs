use super::*;
use k8s_openapi::ByteString;
use serde_json::json;

fn cm(data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "shop", "managedFields": [
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-02T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}, "f:c": {}}}},
        ]},
        "data": data,
    }))
    .unwrap()
}

fn measured(view: &ConfigView) -> Vec<ConfigState> {
    vec![state("ConfigMap/app", Some(view))]
}

#[test]
fn a_config_map_is_kept_as_key_names_digests_and_a_data_hash_never_values() {
    let v = config_map(&cm(json!({"password": "hunter2", "mode": "fast"})));
    let names: Vec<&str> = v.keys.iter().map(|(k, _)| &**k).collect();
    assert_eq!(names, ["mode", "password"]);
    assert_eq!(
        v.changed_by.as_deref(),
        Some("kubectl-edit"),
        "the newest entry"
    );
    let hash = v.data_hash.as_deref().unwrap();
    assert_eq!(hash.len(), 16);
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(!format!("{v:?}").contains("hunter2"));
    // Equal data, equal hash and digests; any value changed, both differ.
    assert_eq!(
        v,
        config_map(&cm(json!({"mode": "fast", "password": "hunter2"})))
    );
    let other = config_map(&cm(json!({"password": "hunter3", "mode": "fast"})));
    assert_ne!(v.data_hash, other.data_hash);
    assert_ne!(v.keys[1].1, other.keys[1].1);
    assert_eq!(v.keys[0], other.keys[0]);
}

#[test]
fn a_key_and_its_value_cannot_be_shifted_into_the_next_to_keep_the_hash() {
    assert_ne!(
        data_hash([("a", b"bc".as_slice())]),
        data_hash([("ab", b"c".as_slice())])
    );
}

#[test]
fn binary_data_counts_like_data() {
    let mut c = cm(json!({"a": "1"}));
    c.binary_data = Some([("blob".to_string(), ByteString(vec![0, 1, 2]))].into());
    let v = config_map(&c);
    let names: Vec<&str> = v.keys.iter().map(|(k, _)| &**k).collect();
    assert_eq!(names, ["a", "blob"]);
}

#[test]
fn a_secret_has_key_names_and_digests_but_no_data_hash() {
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "shop"},
        "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
    }))
    .unwrap();
    let v = secret(&s);
    assert_eq!(v.data_hash, None);
    let names: Vec<&str> = v.keys.iter().map(|(k, _)| &**k).collect();
    assert_eq!(names, ["password", "user"]);
}

#[test]
fn the_keys_that_changed_are_named_from_the_digests() {
    let before = measured(&config_map(&cm(json!({"a": "1", "b": "2", "c": "3"}))));
    let after = measured(&config_map(&cm(json!({"a": "1", "b": "20", "d": "4"}))));
    let c = changes(&before, &after);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].source, "ConfigMap/app");
    assert_eq!(c[0].keys, ["b", "c", "d"], "changed, removed, added");
    assert!(!c[0].keys_unknown && !c[0].deleted);
    assert_eq!(c[0].data_hash, after[0].data_hash);
    assert_eq!(
        c[0].changed_by.as_deref(),
        Some("kubectl-edit"),
        "the owner of b, the first changed key still there"
    );
    assert_eq!(
        changes(
            &after,
            &measured(&config_map(&cm(json!({"a": "5", "b": "20", "d": "4"}))))
        )[0]
        .changed_by
        .as_deref(),
        Some("argocd-controller"),
        "the owner of a"
    );
    assert_eq!(
        describe(&c[0]),
        format!(
            "ConfigMap/app keys b, c, d changed (data {})",
            after[0].data_hash.as_deref().unwrap()
        )
    );
    assert!(changes(&after, &after).is_empty(), "no change, nothing");
}

#[test]
fn against_a_published_baseline_only_the_data_hash_says_values_changed() {
    let was = measured(&config_map(&cm(json!({"a": "1", "b": "2"}))));
    let published: Vec<ConfigState> = was.iter().map(|s| restored(&published(s))).collect();
    assert!(published[0].keys.iter().all(|(_, d)| d.is_none()));
    // The same data: nothing, although the digests are not known.
    assert!(changes(&published, &was).is_empty());
    let now = measured(&config_map(&cm(json!({"a": "10", "b": "2", "c": "3"}))));
    let c = changes(&published, &now);
    assert_eq!(c[0].keys, ["c"]);
    assert!(c[0].keys_unknown, "a's value changed, which is not known");
    assert!(describe(&c[0]).contains("keys c changed, other data changed while not watched"));
}

/// After a restart the baseline is the published one, without key digests: where nothing
/// says the data changed meanwhile, `fill` takes the digests of what is stored now, so that
/// the next edit names its keys (a Secret's would otherwise not be seen at all).
#[test]
fn a_published_baseline_takes_the_digests_of_unchanged_data() {
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "shop"},
        "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
    }))
    .unwrap();
    let now = vec![state("Secret/db", Some(&secret(&s)))];
    let from_inventory: Vec<ConfigState> = now.iter().map(|s| restored(&published(s))).collect();
    let rotated = {
        let mut r = s.clone();
        r.data
            .get_or_insert_default()
            .insert("password".into(), ByteString(b"hunter3".to_vec()));
        vec![state("Secret/db", Some(&secret(&r)))]
    };
    // Without the digests a Secret's rotation is not seen at all.
    assert!(changes(&from_inventory, &rotated).is_empty());
    let filled = fill(&from_inventory, &now).expect("digests taken");
    assert!(changes(&filled, &now).is_empty(), "nothing changed yet");
    assert_eq!(changes(&filled, &rotated)[0].keys, ["password"]);
    assert_eq!(fill(&filled, &now), None, "nothing more to take");

    // A ConfigMap: the same, and its next edit is no longer "changed while not watched".
    let was = measured(&config_map(&cm(json!({"a": "1", "b": "2"}))));
    let from_inventory: Vec<ConfigState> = was.iter().map(|s| restored(&published(s))).collect();
    let filled = fill(&from_inventory, &was).expect("digests taken");
    let edited = measured(&config_map(&cm(json!({"a": "10", "b": "2"}))));
    let c = changes(&filled, &edited);
    assert_eq!(
        (c[0].keys.as_slice(), c[0].keys_unknown),
        (["a".to_string()].as_slice(), false)
    );
    // Changed while no process watched: the digests are not taken, the change is reported.
    assert_eq!(fill(&from_inventory, &edited), None);
    assert!(changes(&from_inventory, &edited)[0].keys_unknown);
}

#[test]
fn a_deleted_config_map_is_a_change_and_an_unmeasured_one_is_none() {
    let was = measured(&config_map(&cm(json!({"a": "1"}))));
    let gone = vec![state("ConfigMap/app", None)];
    let c = changes(&was, &gone);
    assert!(c[0].deleted);
    assert_eq!(describe(&c[0]), "ConfigMap/app deleted");
    // Created again.
    let back = changes(&gone, &was);
    assert_eq!(back[0].keys, ["a"]);
    // A source the baseline holds nothing of is not measured; `fill` adds it.
    assert!(changes(&[], &was).is_empty());
    assert_eq!(fill(&[], &was), Some(was.clone()));
    assert_eq!(fill(&was, &was), None);
}

#[test]
fn a_published_state_holds_names_and_the_hash_only() {
    let s = &measured(&config_map(&cm(json!({"token": "s3cr3t-value"}))))[0];
    let text = serde_json::to_string(&published(s)).unwrap();
    assert!(text.contains("\"token\"") && !text.contains("s3cr3t"));
    let digest = s.keys[0].1.unwrap().to_string();
    assert!(
        !text.contains(&digest),
        "key digests never leave the process"
    );
}

#[test]
fn a_reference_names_its_kind() {
    assert_eq!(name_of("ConfigMap/app", CONFIG_MAP), Some("app"));
    assert_eq!(name_of("Secret/app", CONFIG_MAP), None);
    assert_eq!(name_of("ConfigMapx/app", CONFIG_MAP), None);
}
