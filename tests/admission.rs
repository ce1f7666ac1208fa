//! The CEL rules of every CRD, evaluated client-side (no cluster): every sample passes, and
//! every case of `e2e/admission-cases.yaml` fails with its message. The end-to-end suite
//! sends the same objects to a real API server.

mod common;

use kube::core::cel::Validator;

fn kind(obj: &serde_json::Value) -> String {
    obj["kind"].as_str().expect("kind").to_string()
}

#[test]
fn every_sample_passes_its_rules() {
    let objects = common::moonin_objects();
    let mut kinds: Vec<String> = objects.iter().map(|(_, o)| kind(o)).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        moonin::api::all_crds().len(),
        "an example of every kind in samples/ or docs/examples: {kinds:?}"
    );
    for (file, obj) in objects {
        let result = Validator::new().validate(&common::schema_of(&kind(&obj)), &obj, None);
        assert!(result.is_ok(), "{}: {result:?}", file.display());
    }
}

#[test]
fn samples_create_none_of_the_kinds_only_moonin_writes() {
    // `kubectl apply -f samples/` must not make up an inventory or a revision Moonin did not
    // record: those examples live in docs/examples.
    for file in common::sample_files() {
        for obj in common::load_all(&file) {
            assert!(
                !matches!(
                    obj["kind"].as_str(),
                    Some("NamespaceInventory") | Some("WorkloadRevision")
                ),
                "{} holds a {}",
                file.display(),
                obj["kind"]
            );
        }
    }
    let examples: Vec<String> = common::example_files()
        .iter()
        .map(|f| kind(&common::load(f)))
        .collect();
    assert_eq!(examples, ["NamespaceInventory", "WorkloadRevision"]);
}

#[test]
fn every_invalid_case_is_rejected_with_its_message() {
    let cases = common::admission_cases();
    let mut kinds: Vec<String> = cases.iter().map(|c| kind(&c.object())).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        moonin::api::all_crds().len(),
        "a case for every kind"
    );
    for case in cases {
        let obj = case.object();
        let errors = Validator::new()
            .validate(&common::schema_of(&kind(&obj)), &obj, None)
            .err()
            .map(|e| format!("{e:?}"))
            .unwrap_or_default();
        assert!(
            errors.contains(&case.message),
            "{} {:?}: expected {:?}, got {errors:?}",
            case.sample,
            case.patch,
            case.message
        );
    }
}

#[test]
fn a_claim_spec_cannot_change() {
    let sample = common::load(&common::root().join("samples/sandboxclaim.yaml"));
    let mut changed = sample.clone();
    changed["spec"]["lifetime"] = "1h".into();
    let errors = Validator::new()
        .validate(&common::schema_of("SandboxClaim"), &changed, Some(&sample))
        .err()
        .map(|e| format!("{e:?}"))
        .unwrap_or_default();
    assert!(errors.contains("a claim's spec is immutable"), "{errors}");
}
