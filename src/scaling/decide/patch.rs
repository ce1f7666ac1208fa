//! The JSON Patch operations an override is made of. Every patch starts with a `test` of
//! the resourceVersion it was read at, so a concurrent change is never clobbered.

use serde_json::{Value, json};

pub(super) fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

pub(super) fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", esc(key))
}

pub(super) fn test_rv(rv: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
}

/// Ops that set annotations, creating the map when the object has none.
pub(super) fn set_annotations(has_annotations: bool, pairs: &[(&str, String)]) -> Vec<Value> {
    if !has_annotations {
        let map: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
            .collect();
        return vec![json!({"op": "add", "path": "/metadata/annotations", "value": map})];
    }
    pairs
        .iter()
        .map(|(k, v)| json!({"op": "add", "path": annotation_path(k), "value": v}))
        .collect()
}

pub(super) fn remove_annotations(keys_present: &[&str]) -> Vec<Value> {
    keys_present
        .iter()
        .map(|k| json!({"op": "remove", "path": annotation_path(k)}))
        .collect()
}

pub(super) fn set_field(path: &str, current: Option<i32>, value: Option<i32>) -> Option<Value> {
    match (current, value) {
        (a, b) if a == b => None,
        (_, Some(v)) => Some(json!({"op": "add", "path": path, "value": v})),
        (Some(_), None) => Some(json!({"op": "remove", "path": path})),
        (None, None) => None,
    }
}

pub(super) fn show(v: Option<i32>) -> String {
    v.map_or_else(|| "unset".to_string(), |v| v.to_string())
}
