//! Decoding watched objects one at a time, so that one object nobody can decode never
//! blinds a watch.
//!
//! A typed watch decodes a whole list response at once: a single object that does not fit
//! the Rust type (stored before the CRD's schema tightened, written for a later version, or
//! carrying a value the schema allows and the type does not) fails the list, and the watch
//! retries the same list forever — every other object of the kind goes unreconciled. This
//! is kube-rs issue 774, and controller-runtime's issues 1032 and 2591.
//!
//! [`Decoded<K>`] decodes each item of a list or watch on its own: an object that decodes is
//! [`Decoded::Valid`]; one that does not is [`Decoded::Invalid`], which keeps only its
//! identity, the path of the first field that failed and the decoder's message. The type
//! implements [`kube::Resource`] like `K`, so `Api<Decoded<K>>` and `watcher` take it where
//! they take `K`, and a write whose response may be such an object cannot fail on it.

use std::{fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{
    Deserialize, Deserializer,
    de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, Visitor},
};
use serde_json::Value;

/// An object as a list or watch delivered it: typed, or what is left of it.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    /// The object decodes as `K`.
    Valid(K),
    /// The object does not decode as `K`.
    Invalid(Box<Undecodable>),
}

/// An object that does not decode: who it is and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Undecodable {
    /// Name, namespace, UID, generation and resourceVersion (nothing else is kept).
    pub metadata: ObjectMeta,
    /// The first field that failed, as a path (`spec.template.spec.containers[0].image`);
    /// empty when the object as a whole is not an object.
    pub field: String,
    /// The decoder's message for that field.
    pub error: String,
    /// What the object's status says now, read without its type (for the `InvalidSpec`
    /// report: a report that already stands is not written again).
    pub status: ReportedStatus,
}

/// The part of a status that says whether an object is reported invalid, read from raw
/// JSON: `status.observedGeneration` and the `Ready` condition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReportedStatus {
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// The `Ready` condition's reason.
    pub ready_reason: Option<String>,
    /// The `Ready` condition's message.
    pub ready_message: Option<String>,
}

impl Undecodable {
    /// `field: error`, or the error alone when no field is known.
    pub fn message(&self) -> String {
        if self.field.is_empty() || self.field == "." {
            self.error.clone()
        } else {
            format!("{}: {}", self.field, self.error)
        }
    }

    fn from_value(value: &Value, field: String, error: String) -> Self {
        let meta = value.get("metadata").cloned().unwrap_or(Value::Null);
        let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
        let metadata = ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            uid: text("uid"),
            resource_version: text("resourceVersion"),
            generation: meta.get("generation").and_then(Value::as_i64),
            ..ObjectMeta::default()
        };
        let status = value.get("status");
        let ready = status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
            });
        let ready_text = |k: &str| {
            ready
                .and_then(|c| c.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Self {
            metadata,
            field,
            error,
            status: ReportedStatus {
                observed_generation: status
                    .and_then(|s| s.get("observedGeneration"))
                    .and_then(Value::as_i64),
                ready_reason: ready_text("reason"),
                ready_message: ready_text("message"),
            },
        }
    }
}

impl<K> Decoded<K> {
    /// The typed object, if it decoded.
    pub fn valid(self) -> Option<K> {
        match self {
            Self::Valid(k) => Some(k),
            Self::Invalid(_) => None,
        }
    }
}

/// Decodes `value` as `K`. A status that does not decode is dropped rather than the whole
/// object: the controller rewrites its own status, and the spec is what it acts on.
pub fn decode<K: DeserializeOwned>(mut value: Value) -> Decoded<K> {
    let first = match serde_path_to_error::deserialize::<_, K>(&value) {
        Ok(k) => return Decoded::Valid(k),
        Err(e) => e,
    };
    let field = first.path().to_string();
    if field == "status" || field.starts_with("status.") || field.starts_with("status[") {
        let status = value.as_object_mut().and_then(|o| o.remove("status"));
        if let Ok(k) = serde_json::from_value::<K>(value.clone()) {
            return Decoded::Valid(k);
        }
        if let (Some(o), Some(s)) = (value.as_object_mut(), status) {
            o.insert("status".into(), s);
        }
    }
    let error = first.into_inner().to_string();
    Decoded::Invalid(Box::new(Undecodable::from_value(&value, field, error)))
}

/// serde_json's name for its raw value (`serde_json::value::RawValue`, the `raw_value`
/// feature): a serde_json deserializer asked for a newtype struct of this name hands over
/// the value's text as it is, as the one entry of a map keyed by the name.
const RAW_VALUE: &str = "$serde_json::private::RawValue";

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    /// From serde_json (text or a `Value`), the object's text is decoded straight into `K`,
    /// and only an object that does not decode pays for [`decode`], which says where:
    /// building a tree of values first took two to three times as long per Pod. Any other
    /// deserializer (content serde buffered, as for a list's items) goes through the tree.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct(RAW_VALUE, DecodedVisitor(PhantomData))
    }
}

struct DecodedVisitor<K>(PhantomData<fn() -> K>);

impl<'de, K: DeserializeOwned> Visitor<'de> for DecodedVisitor<K> {
    type Value = Decoded<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    /// serde_json's raw value: the text, keyed by [`RAW_VALUE`].
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        match map.next_key::<String>()? {
            Some(key) if key == RAW_VALUE => map.next_value_seed(FromText(PhantomData)),
            _ => Err(A::Error::custom("expected serde_json's raw value")),
        }
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Ok(decode(Value::deserialize(d)?))
    }
}

/// An object's JSON text, decoded.
struct FromText<K>(PhantomData<fn() -> K>);

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for FromText<K> {
    type Value = Decoded<K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<K: DeserializeOwned> Visitor<'_> for FromText<K> {
    type Value = Decoded<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object's JSON text")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        if let Ok(k) = serde_json::from_str::<K>(text) {
            return Ok(Decoded::Valid(k));
        }
        serde_json::from_str::<Value>(text)
            .map(decode)
            .map_err(E::custom)
    }
}

impl<K: Resource> Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Valid(k) => k.meta(),
            Self::Invalid(u) => &u.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Valid(k) => k.meta_mut(),
            Self::Invalid(u) => &mut u.metadata,
        }
    }
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sandbox::SandboxPool;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    fn pool(template_spec: Value) -> Value {
        json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxPool",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 3, "resourceVersion": "7"},
            "spec": {"replicas": 2, "template": {"spec": template_spec}},
        })
    }

    #[test]
    fn a_valid_object_decodes_as_its_type() {
        let v = pool(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        assert!(matches!(decode::<SandboxPool>(v), Decoded::Valid(_)));
    }

    #[test]
    fn an_invalid_object_names_its_field_and_keeps_its_identity() {
        let v = pool(json!({"containers": [{"name": "c", "image": 2147483648u64}]}));
        let Decoded::Invalid(u) = decode::<SandboxPool>(v) else {
            panic!("decoded");
        };
        assert_eq!(u.field, "spec.template.spec.containers[0].image");
        assert!(u.error.contains("invalid type: integer"), "{}", u.error);
        assert_eq!(u.metadata.name.as_deref(), Some("p"));
        assert_eq!(u.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(u.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(u.metadata.generation, Some(3));
        assert!(
            u.message()
                .starts_with("spec.template.spec.containers[0].image: invalid type")
        );
    }

    #[test]
    fn a_quantity_of_the_wrong_shape_is_named() {
        let v = pool(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": [1, 2, 3]}}}]}),
        );
        let Decoded::Invalid(u) = decode::<SandboxPool>(v) else {
            panic!("decoded");
        };
        assert_eq!(
            u.field,
            "spec.template.spec.containers[0].resources.requests.cpu"
        );
    }

    #[test]
    fn a_status_that_does_not_decode_is_dropped_not_the_object() {
        let mut v = pool(json!({"containers": [{"name": "c"}]}));
        v["status"] = json!({"replicas": "many"});
        let Decoded::Valid(p) = decode::<SandboxPool>(v) else {
            panic!("invalid");
        };
        assert_eq!(p.spec.replicas, 2);
        assert!(p.status.is_none());
    }

    #[test]
    fn the_current_report_is_read_from_the_raw_status() {
        let mut v = pool(json!({"containers": "none"}));
        v["status"] = json!({"observedGeneration": 3, "conditions": [
            {"type": "Stalled", "reason": "InvalidSpec"},
            {"type": "Ready", "reason": "InvalidSpec", "message": "m"},
        ]});
        let Decoded::Invalid(u) = decode::<SandboxPool>(v) else {
            panic!("decoded");
        };
        assert_eq!(
            u.status,
            ReportedStatus {
                observed_generation: Some(3),
                ready_reason: Some("InvalidSpec".into()),
                ready_message: Some("m".into()),
            }
        );
    }

    #[test]
    fn unknown_fields_of_a_newer_api_server_are_ignored() {
        let v = json!({
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"selector": {}, "template": {}, "fieldFromTheFuture": {"x": 1}},
            "status": {"replicas": 1, "somethingNew": true},
        });
        assert!(matches!(decode::<Deployment>(v), Decoded::Valid(_)));
    }

    #[test]
    fn a_list_with_one_bad_item_decodes_the_others() {
        let list = json!([
            pool(json!({"containers": [{"name": "a"}]})),
            pool(json!({"containers": [{"name": 5}]})),
            pool(json!({"containers": [{"name": "c"}]})),
        ]);
        let items: Vec<Decoded<SandboxPool>> = serde_json::from_value(list).expect("list");
        let valid = items
            .iter()
            .filter(|d| matches!(d, Decoded::Valid(_)))
            .count();
        assert_eq!((items.len(), valid), (3, 2));
    }

    /// What each item decoded to: its name, or the field that failed.
    fn outcomes(items: &[Decoded<SandboxPool>]) -> Vec<String> {
        items
            .iter()
            .map(|d| match d {
                Decoded::Valid(p) => format!("valid {}", p.spec.replicas),
                Decoded::Invalid(u) => format!("invalid {}", u.message()),
            })
            .collect()
    }

    #[test]
    fn text_values_lists_and_watch_events_decode_alike() {
        let mut dropped_status = pool(json!({"containers": [{"name": "d"}]}));
        dropped_status["status"] = json!({"replicas": "many"});
        let items = vec![
            pool(json!({"containers": [{"name": "a"}]})),
            pool(json!({"containers": [{"name": 5}]})),
            dropped_status,
        ];
        let expected = vec![
            "valid 2".to_string(),
            "invalid spec.template.spec.containers[0].name: invalid type: integer `5`, expected a string".into(),
            "valid 2".into(),
        ];
        let text = serde_json::to_string(&items).unwrap();
        // serde_json's text: the straight decoding, and the tree only for the bad item.
        let from_text: Vec<Decoded<SandboxPool>> = serde_json::from_str(&text).unwrap();
        assert_eq!(outcomes(&from_text), expected);
        let from_value: Vec<Decoded<SandboxPool>> =
            serde_json::from_value(json!(items.clone())).unwrap();
        assert_eq!(outcomes(&from_value), expected);
        // A list response: kube's list type buffers its fields (a flattened one among them),
        // so its items come through serde's buffered content.
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"}, "items": items.clone()});
        let listed: kube::core::ObjectList<Decoded<SandboxPool>> =
            serde_json::from_str(&list.to_string()).unwrap();
        assert_eq!(outcomes(&listed.items), expected);
        // A watch stream's events, one line each.
        let watched: Vec<Decoded<SandboxPool>> = items
            .iter()
            .map(|o| {
                let line = json!({"type": "ADDED", "object": o}).to_string();
                match serde_json::from_str(&line).unwrap() {
                    kube::core::WatchEvent::Added(d) => d,
                    _ => panic!("not an ADDED event"),
                }
            })
            .collect();
        assert_eq!(outcomes(&watched), expected);
    }
}
