//! Shared by the test binaries: the samples and the admission cases.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file in `samples/` (not its subdirectories, as `kubectl apply -f samples/`), sorted.
pub fn sample_files() -> Vec<PathBuf> {
    yaml_files(&root().join("samples"))
}

/// The examples of the kinds only Moonin writes (`docs/examples/`), sorted: kept out of
/// `samples/` so that applying the samples never creates one.
pub fn example_files() -> Vec<PathBuf> {
    yaml_files(&root().join("docs/examples"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// How the tests read YAML: as the API server stores it, in JSON terms, where only `true`
/// and `false` are booleans (YAML 1.2: a `yes` or `on` stays a string).
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! { strict_booleans: true }
}

/// One YAML document as `T` (JSON values included).
pub fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, yaml_options())
}

/// Every document of a YAML stream (`---`-separated), empty ones left out.
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, serde_saphyr::Error> {
    serde_saphyr::from_multiple_with_options(text, yaml_options())
}

/// A value as one YAML document: text with line breaks as a literal block, every other
/// string on one line (a long token such as a certificate is never folded).
pub fn to_yaml<T: serde::Serialize>(value: &T) -> String {
    let options = serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(value, options).expect("a JSON-like value renders")
}

/// A single-object YAML file as JSON.
pub fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("sample readable");
    from_yaml(&text).expect("sample is YAML")
}

/// Every object of a YAML file that may hold several (`---`).
pub fn load_all(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("sample readable");
    yaml_documents(&text)
        .expect("sample is YAML")
        .into_iter()
        .filter(|v| v.is_object())
        .collect()
}

/// Whether an object is of one of Moonin's kinds.
pub fn is_moonin(obj: &Value) -> bool {
    obj["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with(&format!("{}/", moonin::api::GROUP)))
}

/// Every Moonin object of the samples (with the KEDA variant in `samples/keda/`) and of the
/// examples, with its file.
pub fn moonin_objects() -> Vec<(PathBuf, Value)> {
    let mut files = sample_files();
    files.extend(yaml_files(&root().join("samples/keda")));
    files.extend(example_files());
    files
        .into_iter()
        .flat_map(|f| {
            load_all(&f)
                .into_iter()
                .filter(is_moonin)
                .map(move |o| (f.clone(), o))
        })
        .collect()
}

/// An invalid object and the message admission must answer with.
#[derive(Debug, Deserialize)]
pub struct AdmissionCase {
    /// The sample's file, from the repository root (`samples/…` or `docs/examples/…`).
    pub sample: String,
    /// JSON Patch that makes it invalid.
    pub patch: json_patch::Patch,
    /// Part of the expected message.
    pub message: String,
}

impl AdmissionCase {
    /// The invalid object.
    pub fn object(&self) -> Value {
        let mut obj = load(&root().join(&self.sample));
        json_patch::patch(&mut obj, &self.patch).expect("case patch applies to its sample");
        obj
    }
}

/// Every case of `e2e/admission-cases.yaml`.
pub fn admission_cases() -> Vec<AdmissionCase> {
    let text = std::fs::read_to_string(root().join("e2e/admission-cases.yaml")).expect("cases");
    from_yaml(&text).expect("cases parse")
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

/// A small deterministic generator (SplitMix64): the same seed gives the same sequence, so a
/// generated test replays from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
