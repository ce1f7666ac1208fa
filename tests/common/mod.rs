//! Shared by the test binaries: the samples and the admission cases.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file in `samples/`, sorted.
pub fn sample_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("samples"))
        .expect("samples/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// A sample as JSON.
pub fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("sample readable");
    serde_yaml::from_str(&text).expect("sample is YAML")
}

/// An invalid object and the message admission must answer with.
#[derive(Debug, Deserialize)]
pub struct AdmissionCase {
    /// File in `samples/`.
    pub sample: String,
    /// JSON Patch that makes it invalid.
    pub patch: json_patch::Patch,
    /// Part of the expected message.
    pub message: String,
}

impl AdmissionCase {
    /// The invalid object.
    pub fn object(&self) -> Value {
        let mut obj = load(&root().join("samples").join(&self.sample));
        json_patch::patch(&mut obj, &self.patch).expect("case patch applies to its sample");
        obj
    }
}

/// Every case of `e2e/admission-cases.yaml`.
pub fn admission_cases() -> Vec<AdmissionCase> {
    let text = std::fs::read_to_string(root().join("e2e/admission-cases.yaml")).expect("cases");
    serde_yaml::from_str(&text).expect("cases parse")
}

/// The generated CRD schema of a kind.
pub fn schema_of(kind: &str) -> Value {
    let crd = moonin::api::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind}"));
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("schema json")
}
