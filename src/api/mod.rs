//! The Moonin API: every custom resource kind of the `moonin.io/v1alpha1` group, plus the
//! names (condition types, reasons, annotations, labels, field managers) shared by the
//! controllers. Each name is defined once, here, and used everywhere else.

pub mod conditions;
pub mod forecast;
pub mod history;
pub mod keda;
pub mod network;
pub mod policy;
pub mod quantity;
// `#[kube(printcolumn(...))]` repeats `type_ = "string"` across columns, which clippy
// mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
pub mod discovery;
#[allow(clippy::duplicated_attributes)]
pub mod sandbox;
#[allow(clippy::duplicated_attributes)]
pub mod scaling;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every Moonin kind.
pub const GROUP: &str = "moonin.io";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
/// `kubectl get moonin` lists every Moonin object.
pub const CATEGORY: &str = "moonin";

/// Field managers: who wrote what, as `managedFields` shows it.
pub mod field_manager {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    /// The manager's own writes to Moonin objects (status, child objects).
    pub const MANAGER: &str = "moonin-manager";
    /// Fields the scaling controller takes over on a workload or autoscaler.
    pub const SCALING: &str = "moonin-scaling";
    /// What the scaling controller puts back when an override ends: the restored fields
    /// are owned by this manager, not [`SCALING`], so a GitOps tool told to leave
    /// `moonin-scaling`'s fields alone manages them again once the window is over.
    pub const RESTORE: &str = "moonin-restore";
    /// Fields the sandbox controllers own (pools, Pods, `SandboxPool.spec.replicas` unless
    /// the Pool autoscales).
    pub const SANDBOX: &str = "moonin-sandbox";
    /// `SandboxPool.spec.replicas` of a Pool whose scaling group is enabled: the pool
    /// autoscaler's, handed over by the Env controller (which owns it otherwise).
    pub const SANDBOX_AUTOSCALER: &str = "moonin-sandbox-autoscaler";
    /// Objects published by discovery.
    pub const DISCOVERY: &str = "moonin-discovery";

    /// Whether `manager` is the scaling controller's, overriding ([`SCALING`]) or restoring
    /// ([`RESTORE`]).
    pub fn is_scaling(manager: &str) -> bool {
        manager == SCALING || manager == RESTORE
    }

    /// Whether `entry` owns the field at `path`, given as FieldsV1 keys (e.g.
    /// `["f:metadata", "f:annotations", "f:example.com/team"]`).
    pub fn owns(entry: &ManagedFieldsEntry, path: &[&str]) -> bool {
        entry
            .fields_v1
            .as_ref()
            .and_then(|f| path.iter().try_fold(&f.0, |v, k| v.get(*k)))
            .is_some()
    }

    /// Whether `entry` owns the top-level spec field `field` (e.g. `replicas`, `template`):
    /// `f:spec` holds `f:<field>` in its FieldsV1.
    pub fn owns_spec(entry: &ManagedFieldsEntry, field: &str) -> bool {
        owns(entry, &["f:spec", &format!("f:{field}")])
    }

    /// The `managedFields` entries of `meta` that own the spec field `field`.
    pub fn spec_owners<'a>(
        meta: &'a ObjectMeta,
        field: &'a str,
    ) -> impl Iterator<Item = &'a ManagedFieldsEntry> + 'a {
        meta.managed_fields
            .iter()
            .flatten()
            .filter(move |m| owns_spec(m, field))
    }
}

/// Every CRD, in a stable order: the source of `moonin crds` and of `crds/`.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        scaling::ScalingTemplate::crd(),
        scaling::ClusterScalingTemplate::crd(),
        sandbox::SandboxEnv::crd(),
        sandbox::SandboxPool::crd(),
        sandbox::SandboxClaim::crd(),
        discovery::ClusterDiscovery::crd(),
        // A report only discovery writes: no status subresource, so that one write creates
        // or updates it whole (spec and status), and a first start writes each part once.
        without_status_subresource(discovery::NamespaceInventory::crd()),
        discovery::WorkloadRevision::crd(),
    ]
}

/// `crd` with its status written as part of the object instead of through `/status`.
fn without_status_subresource(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for v in &mut crd.spec.versions {
        if let Some(sub) = v.subresources.as_mut() {
            sub.status = None;
        }
        if v.subresources.as_ref().is_some_and(|s| s.scale.is_none()) {
            v.subresources = None;
        }
    }
    crd
}

/// The file name under `crds/` for a CRD: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Renders one CRD as the YAML document committed under `crds/`: a text with line breaks as a
/// literal block, every other string on one line (never folded at 80 columns, so a
/// description reads as `kubectl get crd -o yaml` shows it and `grep` finds it whole).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    Ok(format!(
        "# Generated by `moonin crds`; do not edit by hand.\n{}",
        serde_saphyr::to_string_with_options(crd, options)?
    ))
}

/// Schema helpers shared by the kinds.
pub(crate) mod schema {
    use schemars::{Schema, SchemaGenerator, json_schema};

    /// An embedded Pod template, with the full structural schema of Kubernetes'
    /// `PodTemplateSpec`: the API server refuses a wrong type anywhere in it (an image that
    /// is a number, a quantity that is a list) at `kubectl apply`, with its own message, and
    /// `kubectl explain` documents every field. Two changes keep the CRD small enough for a
    /// client-side `kubectl apply` (its last-applied annotation holds at most 256 KiB):
    /// `metadata` keeps only `labels` and `annotations` (what a sandbox Pod takes from its
    /// template), and each description is cut to its first sentence.
    pub fn pod_template(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = generator
            .subschema_for::<k8s_openapi::api::core::v1::PodTemplateSpec>()
            .to_value();
        if let Some(meta) = schema.pointer_mut("/properties/metadata/properties")
            && let Some(props) = meta.as_object_mut()
        {
            props.retain(|k, _| k == "labels" || k == "annotations");
        }
        if let Some(meta) = schema.pointer_mut("/properties/metadata") {
            meta["description"] = "Labels and annotations every sandbox Pod gets.".into();
        }
        first_sentences(&mut schema);
        schema["description"] =
            "A Pod template (metadata and spec), as in a Deployment's spec.template.".into();
        schema["required"] = serde_json::json!(["spec"]);
        schema["x-kubernetes-validations"] = serde_json::json!([{
            "rule": "self.spec.containers.size() > 0",
            "message": "the Pod template needs at least one container in spec.containers"
        }]);
        Schema::try_from(schema).unwrap_or_else(|_| json_schema!({"type": "object"}))
    }

    /// Cuts every description in `v` to its first sentence (the upstream ones run to pages).
    fn first_sentences(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, child) in o.iter_mut() {
                    match (k.as_str(), child) {
                        ("description", serde_json::Value::String(d)) => *d = first_sentence(d),
                        // A property called `description` is a schema, not a text.
                        (_, child) => first_sentences(child),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(first_sentences),
            _ => {}
        }
    }

    /// The first sentence of a description: up to the first `. ` or the end of the first
    /// paragraph.
    fn first_sentence(d: &str) -> String {
        let para = d.split("\n\n").next().unwrap_or(d).trim();
        match para.find(". ") {
            Some(i) => para[..=i].to_string(),
            None => para.to_string(),
        }
    }

    /// Standard conditions: a list-map keyed by `type`, as Kubernetes API conventions ask.
    pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = generator
            .subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
        schema.insert("x-kubernetes-list-type".into(), "map".into());
        schema.insert(
            "x-kubernetes-list-map-keys".into(),
            serde_json::json!(["type"]),
        );
        schema.insert(
            "description".into(),
            "Standard conditions (Ready, Reconciling, Stalled and kind-specific ones), one per type."
                .into(),
        );
        schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `crds/` is generated by `moonin crds --out-dir crds`; this fails when it drifts.
    #[test]
    fn committed_crds_match_the_rust_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        let mut expected: Vec<String> = Vec::new();
        for crd in all_crds() {
            let name = crd_file_name(&crd);
            expected.push(name.clone());
            let want = crd_yaml(&crd).expect("CRD renders");
            let have = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                have == want,
                "crds/{name} is stale: run `cargo run -- crds --out-dir crds` and commit it"
            );
        }
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .expect("crds/ exists")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        present.sort();
        expected.sort();
        assert_eq!(present, expected, "crds/ holds exactly one file per kind");
        // crds/Kustomization (what config/crd builds from) lists the same files.
        let kustomization =
            std::fs::read_to_string(dir.join("Kustomization")).expect("crds/Kustomization exists");
        let mut listed: Vec<String> = kustomization
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(str::to_string)
            .collect();
        listed.sort();
        assert_eq!(listed, expected, "crds/Kustomization lists every CRD");
    }

    /// What `crds/` holds reads back as exactly the CRD (quoting, escapes, block scalars).
    #[test]
    fn crd_yaml_reads_back_as_the_crd() {
        for crd in all_crds() {
            let yaml = crd_yaml(&crd).expect("CRD renders");
            let back: serde_json::Value = serde_saphyr::from_str(&yaml).expect("CRD YAML parses");
            let want = serde_json::to_value(&crd).expect("CRD as JSON");
            assert!(back == want, "{} does not read back", crd_file_name(&crd));
        }
    }

    #[test]
    fn every_kind_is_in_the_moonin_category_with_a_status_subresource_but_the_report() {
        for crd in all_crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&[CATEGORY.to_string()][..]),
                "{name}"
            );
            assert!(
                !crd.spec
                    .names
                    .short_names
                    .clone()
                    .unwrap_or_default()
                    .is_empty(),
                "{name}"
            );
            let v = &crd.spec.versions[0];
            // NamespaceInventory, a report only discovery writes, is written whole.
            let report = name == "namespaceinventories.moonin.io";
            assert_eq!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                !report,
                "{name}"
            );
            assert!(
                !v.additional_printer_columns
                    .clone()
                    .unwrap_or_default()
                    .is_empty(),
                "{name}"
            );
        }
    }

    /// Every property of every schema carries a description: it is what `kubectl explain` shows.
    #[test]
    fn every_field_is_documented() {
        fn walk(path: &str, v: &serde_json::Value, missing: &mut Vec<String>) {
            let Some(obj) = v.as_object() else { return };
            if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
                for (k, sub) in props {
                    let p = format!("{path}.{k}");
                    let top = matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                    if !top && sub.get("description").is_none() {
                        missing.push(p.clone());
                    }
                    walk(&p, sub, missing);
                }
            }
            if let Some(items) = obj.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
            if let Some(extra) = obj.get("additionalProperties") {
                walk(&format!("{path}{{}}"), extra, missing);
            }
        }
        let mut missing = Vec::new();
        for crd in all_crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("json");
            walk(
                crd.spec.names.kind.as_str(),
                &schema["openAPIV3Schema"],
                &mut missing,
            );
        }
        // Condition is an upstream type; its fields are documented upstream.
        missing.retain(|p| !p.contains(".conditions[]."));
        assert!(missing.is_empty(), "undocumented fields: {missing:#?}");
    }
}
