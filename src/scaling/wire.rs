//! A Deployment as the scaling cache reads it off the wire: its metadata and
//! `spec.replicas`, nothing else decoded.
//!
//! The cache keeps of a Deployment only what [`super::load`] reads: the metadata (identity,
//! the annotations a decision reads; not the generation, which the API server moves with
//! every annotation too), `spec.replicas`, and of `managedFields` the entry that last set
//! `spec.replicas` and those that own Moonin's marks
//! ([`super::owners::keep_deployment_owners`]). Every status write of the Deployment
//! controller (several per Deployment at each window edge, as its Pods come and go) sends
//! the whole object to the watch, Pod template, status and every field manager's field set
//! included. [`WireDeployment`] skips all of that unread instead of building it and
//! throwing it away: the Pod template, the status, the other spec fields, the other
//! annotations (`kubectl.kubernetes.io/last-applied-configuration` among them), and of each
//! `managedFields` entry's field set everything but whether it owns `spec.replicas` or one of
//! Moonin's marks.

use std::{borrow::Cow, collections::BTreeMap, fmt};

use k8s_openapi::{
    NamespaceResourceScope,
    api::apps::v1::{Deployment, DeploymentSpec},
    apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference, Time},
};
use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, Visitor},
};

use super::decide::GUARDED_ANNOTATIONS;
use super::owners;

/// A Deployment's metadata (its `managedFields` cut to the entry that owns `spec.replicas`,
/// its annotations to those a decision reads) and its `spec.replicas`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct WireDeployment {
    #[serde(deserialize_with = "metadata")]
    metadata: ObjectMeta,
    spec: Option<WireSpec>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
struct WireSpec {
    replicas: Option<i32>,
}

impl From<WireDeployment> for Deployment {
    fn from(w: WireDeployment) -> Self {
        Deployment {
            metadata: w.metadata,
            spec: w.spec.map(|s| DeploymentSpec {
                replicas: s.replicas,
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }
}

/// What the cache keeps of a Deployment decoded whole: what [`WireDeployment`] reads
/// without decoding the rest, and what its tests and `cargo bench --bench watch_decode`
/// hold it to.
pub fn cut(mut d: Deployment) -> Deployment {
    owners::keep_deployment_owners(&mut d.metadata);
    owners::keep_guarded_annotations(&mut d.metadata);
    d.metadata.generation = None;
    d.spec = d.spec.map(|s| DeploymentSpec {
        replicas: s.replicas,
        ..DeploymentSpec::default()
    });
    d.status = None;
    d
}

impl kube::Resource for WireDeployment {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <Deployment as kube::Resource>::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Deployment as kube::Resource>::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Deployment as kube::Resource>::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Deployment as kube::Resource>::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The fields of `ObjectMeta` the cache keeps (all but the generation), two of them read
/// their own way.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default, deserialize_with = "annotations")]
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    managed_fields: Option<Vec<WireEntry>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// A `managedFields` entry, its field set read only for which of [`owners::KEPT_OWNERS`] it
/// owns.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEntry {
    api_version: Option<String>,
    fields_type: Option<String>,
    #[serde(default, rename = "fieldsV1")]
    owns: Owns,
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<Time>,
}

fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let w = WireMeta::deserialize(d)?;
    // The owners of `spec.replicas` and of Moonin's marks, each with just what it owns of
    // them, then cut as `keep_deployment_owners` cuts a fully decoded one.
    let owners: Vec<ManagedFieldsEntry> = w
        .managed_fields
        .into_iter()
        .flatten()
        .filter(|e| e.owns.0 != 0)
        .map(|e| ManagedFieldsEntry {
            api_version: e.api_version,
            fields_type: e.fields_type,
            fields_v1: Some(owners::field_set(
                owners::KEPT_OWNERS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| e.owns.0 & (1 << i) != 0)
                    .map(|(_, p)| *p),
            )),
            manager: e.manager,
            operation: e.operation,
            subresource: e.subresource,
            time: e.time,
        })
        .collect();
    let mut meta = ObjectMeta {
        annotations: w.annotations,
        creation_timestamp: w.creation_timestamp,
        deletion_grace_period_seconds: w.deletion_grace_period_seconds,
        deletion_timestamp: w.deletion_timestamp,
        finalizers: w.finalizers,
        generate_name: w.generate_name,
        // A Deployment's generation moves with its annotations too; no decision reads it.
        generation: None,
        labels: w.labels,
        managed_fields: Some(owners),
        name: w.name,
        namespace: w.namespace,
        owner_references: w.owner_references,
        resource_version: w.resource_version,
        self_link: w.self_link,
        uid: w.uid,
    };
    owners::keep_deployment_owners(&mut meta);
    Ok(meta)
}

/// The annotations a decision reads ([`owners::keep_guarded_annotations`]), the others'
/// values (the last-applied configuration, a copy of the whole object that `kubectl apply`
/// leaves, among them) skipped unread.
fn annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if GUARDED_ANNOTATIONS.contains(&key.as_str()) {
                    out.insert(key, map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(Annotations)
}

/// Which of [`owners::KEPT_OWNERS`]'s paths a `fieldsV1` field set owns, one bit each (the
/// rest skipped unread).
#[derive(Default)]
struct Owns(u8);

impl<'de> Deserialize<'de> for Owns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The paths still looked for at this depth, each with its bit; a key that ends one
        /// sets its bit, a key that continues some is read further for the rest of them.
        struct Paths(Vec<(u8, &'static [&'static str])>);
        impl<'de> Visitor<'de> for Paths {
            type Value = u8;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field set")
            }
            // Anything but a map owns nothing (as the API server never sends).
            fn visit_unit<E>(self) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_bool<E>(self, _: bool) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_i64<E>(self, _: i64) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_u64<E>(self, _: u64) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_f64<E>(self, _: f64) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_str<E>(self, _: &str) -> Result<u8, E> {
                Ok(0)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<u8, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(0)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u8, A::Error> {
                let mut found = 0;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let mut deeper = Vec::new();
                    for (bit, path) in &self.0 {
                        match path.split_first() {
                            Some((first, [])) if key == *first => found |= bit,
                            Some((first, rest)) if key == *first => deeper.push((*bit, rest)),
                            _ => {}
                        }
                    }
                    if deeper.is_empty() {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        found |= map.next_value_seed(Paths(deeper))?;
                    }
                }
                Ok(found)
            }
        }
        impl<'de> serde::de::DeserializeSeed<'de> for Paths {
            type Value = u8;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u8, D::Error> {
                d.deserialize_any(self)
            }
        }
        let paths = owners::KEPT_OWNERS
            .iter()
            .enumerate()
            .map(|(i, p)| (1 << i, *p))
            .collect();
        d.deserialize_any(Paths(paths)).map(Owns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::decode::{Decoded, decode};
    use serde_json::{Value, json};

    /// A Deployment as the API server sends it: applied with kubectl (the last-applied
    /// annotation), scaled by an HPA controller, its status written, a Pod template.
    fn deployment(managed: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
                "generation": 7, "creationTimestamp": "2026-12-01T08:00:00Z",
                "labels": {"app": "web"},
                "annotations": {
                    "moonin.io/original-replicas": "2",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}",
                    "deployment.kubernetes.io/revision": "3"
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "o1"}],
                "finalizers": ["f"],
                "managedFields": managed,
            },
            "spec": {
                "replicas": 5,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}
                }
            },
            "status": {"replicas": 5, "readyReplicas": 5, "observedGeneration": 7,
                       "conditions": [{"type": "Available", "status": "True"}]}
        })
    }

    fn entry(manager: &str, time: &str, subresource: Option<&str>, fields: Value) -> Value {
        let mut e = json!({"manager": manager, "operation": "Update", "apiVersion": "apps/v1",
                           "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    /// What the cache keeps, by the long way: the whole object decoded, then cut down.
    fn decoded_then_cut(v: &Value) -> Deployment {
        let Decoded::Valid(d) = decode::<Deployment>(v.clone()) else {
            panic!("does not decode");
        };
        cut(d)
    }

    fn wire(v: &Value) -> Deployment {
        serde_json::from_str::<WireDeployment>(&v.to_string())
            .expect("decodes")
            .into()
    }

    /// Moonin's raise (the replicas and its owner mark), then a rollback that rewrote its
    /// other mark and the Pod template, and the Deployment controller's revision annotation.
    fn rolled_back() -> Value {
        json!([
            entry(
                "moonin-scaling",
                "2026-12-01T09:00:00Z",
                None,
                json!({"f:metadata": {"f:annotations": {"f:moonin.io/owner": {}}},
                       "f:spec": {"f:replicas": {}}})
            ),
            entry(
                "kubectl-rollout",
                "2026-12-01T20:00:00Z",
                None,
                json!({"f:metadata": {"f:annotations": {".": {}, "f:moonin.io/original-replicas": {}}},
                       "f:spec": {"f:template": {"f:metadata": {"f:labels": {}}}}})
            ),
            entry(
                "kube-controller-manager",
                "2026-12-01T20:00:01Z",
                None,
                json!({"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}})
            ),
        ])
    }

    #[test]
    fn the_wire_keeps_what_decoding_the_whole_object_and_cutting_it_keeps() {
        let spec_replicas = json!({"f:spec": {"f:replicas": {}}});
        let histories = [
            json!([]),
            Value::Null,
            json!([
                entry(
                    "kubectl-client-side-apply",
                    "2026-12-01T08:00:00Z",
                    None,
                    json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                             "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}})
                ),
                entry(
                    "kube-controller-manager",
                    "2026-12-01T08:00:05Z",
                    Some("status"),
                    json!({"f:status": {"f:replicas": {}, "f:conditions": {}}})
                ),
                entry(
                    "kube-controller-manager",
                    "2026-12-01T09:00:00Z",
                    Some("scale"),
                    spec_replicas.clone()
                ),
                entry(
                    "moonin-scaling",
                    "2026-12-01T09:00:01Z",
                    None,
                    json!({"f:metadata": {"f:annotations": {"f:moonin.io/original-replicas": {}}}})
                ),
            ]),
            // Two owners in the same second: the later in the list is kept, as before.
            json!([
                entry("a", "2026-12-01T09:00:00Z", None, spec_replicas.clone()),
                entry(
                    "b",
                    "2026-12-01T09:00:00Z",
                    None,
                    json!({"f:spec": {"f:paused": {}, "f:replicas": {}}})
                ),
                entry("c", "2026-12-01T08:00:00Z", None, spec_replicas.clone()),
            ]),
            rolled_back(),
            // No owner of spec.replicas at all; and field sets of odd shapes.
            json!([
                entry(
                    "a",
                    "2026-12-01T09:00:00Z",
                    None,
                    json!({"f:spec": {"f:template": {"f:replicas": {}}}})
                ),
                entry(
                    "b",
                    "2026-12-01T09:00:00Z",
                    None,
                    json!({"f:metadata": {"f:replicas": {}}})
                ),
                entry("c", "2026-12-01T09:00:00Z", None, Value::Null),
                entry("d", "2026-12-01T09:00:00Z", None, json!({"f:spec": null})),
                entry(
                    "e",
                    "2026-12-01T09:00:00Z",
                    None,
                    json!({"f:spec": ["f:replicas"]})
                ),
                entry(
                    "f",
                    "2026-12-01T09:00:00Z",
                    None,
                    json!({"f:spec": "f:replicas"})
                ),
            ]),
        ];
        for managed in histories {
            let v = deployment(managed.clone());
            assert_eq!(wire(&v), decoded_then_cut(&v), "managedFields {managed}");
        }
        // The rollback's copy of a mark is read as such off the wire too.
        let rolled_back = wire(&deployment(rolled_back()));
        assert!(owners::copied_marks(&rolled_back.metadata));
        assert_eq!(
            rolled_back
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.as_deref())
                .collect::<Vec<_>>(),
            ["moonin-scaling", "kubectl-rollout"]
        );
        // Of the annotations, only the one a decision reads: another tool's annotation
        // changing wakes no template.
        let kept = wire(&deployment(json!([]))).metadata.annotations;
        let guarded = [("moonin.io/original-replicas".to_string(), "2".to_string())];
        assert_eq!(kept, Some(guarded.into_iter().collect()));
    }

    #[test]
    fn the_wire_reads_what_is_missing_or_null_as_absent() {
        for v in [
            json!({"metadata": {"name": "d"}}),
            json!({"metadata": {"name": "d", "annotations": null, "managedFields": null}, "spec": null}),
            json!({"metadata": {"name": "d"}, "spec": {}}),
        ] {
            assert_eq!(wire(&v), decoded_then_cut_lax(&v), "{v}");
        }
    }

    /// As [`decoded_then_cut`], for objects too incomplete for `Deployment` (its spec
    /// requires a selector and a template, which the cache never reads).
    fn decoded_then_cut_lax(v: &Value) -> Deployment {
        let mut full = v.clone();
        if let Some(spec) = full.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("selector".into(), json!({}));
            spec.insert("template".into(), json!({}));
        }
        decoded_then_cut(&full)
    }

    #[test]
    fn a_deployment_the_wire_cannot_read_is_reported_where_it_fails() {
        let mut v = deployment(json!([]));
        v["spec"]["replicas"] = json!("five");
        let Decoded::Invalid(u) = decode::<WireDeployment>(v) else {
            panic!("decoded");
        };
        assert_eq!(u.field, "spec.replicas");
        assert_eq!(u.metadata.name.as_deref(), Some("web"));
    }
}
