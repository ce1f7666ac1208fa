//! The JSON Patch operations an override is made of. Every patch starts with its
//! precondition: `test` ops on exactly what the write depends on (the spec fields it reads
//! or changes, and the annotations that record who holds the object and what to restore),
//! so a concurrent change to any of them makes the API server refuse the whole patch and
//! nothing is clobbered. The object's `resourceVersion` is not tested: it also moves with
//! every status write (the HPA controller's, the Deployment controller's), which an
//! override does not depend on.

use serde_json::{Value, json};

use super::snapshot::Marks;

pub(super) fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

pub(super) fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", esc(key))
}

/// The `test` ops of a write's precondition: each annotation of `keys` still has the raw
/// value it was read with, or is still absent, and each `(path, value)` of `fields` still
/// holds that value, or is still absent when read as `None`.
///
/// Absence is tested with a `null` value, which the API server's JSON Patch accepts for a
/// missing member of an existing object and refuses once the member is there. An object
/// read without any annotations gets one test that the whole map is still absent (the
/// write adds the map in one op).
pub(super) fn precondition(
    marks: &Marks,
    keys: &[&str],
    fields: &[(String, Option<i32>)],
) -> Vec<Value> {
    let mut ops: Vec<Value> = if marks.has_annotations {
        keys.iter()
            .map(|k| json!({"op": "test", "path": annotation_path(k), "value": marks.read.get(*k)}))
            .collect()
    } else {
        vec![json!({"op": "test", "path": "/metadata/annotations", "value": null})]
    };
    ops.extend(
        fields
            .iter()
            .map(|(path, v)| json!({"op": "test", "path": path, "value": v})),
    );
    ops
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
