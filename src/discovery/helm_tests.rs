//! Tests for the Helm release sanitiser, with payloads built the way Helm stores a release:
//! release JSON → gzip → base64.

use std::io::Write;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The cluster's key of the published hashes, in these tests.
fn key() -> HashKey {
    HashKey::new(&[7; HashKey::LEN]).expect("32 bytes")
}

/// The release sanitised with [`key`].
fn sanitise(payload: &[u8]) -> Result<SanitisedRelease, HelmReleaseError> {
    sanitise_release(payload, Some(&key()))
}

/// HMAC-SHA256 of `message` under `key`, in hex, computed here on its own.
fn hmac_hex(key: &HashKey, message: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.bytes()).expect("any length");
    Mac::update(&mut mac, message);
    hex(&mac.finalize().into_bytes())
}

/// Plain SHA-256 in hex: what anyone can compute from a guess.
fn sha256_hex(message: &[u8]) -> String {
    use sha2::Digest;
    hex(&Sha256::digest(message))
}

const VALUES_SECRET: &str = "hunter2-SECRET";
const MANIFEST_SECRET_B64: &str = "c3VwZXItc2VjcmV0LXBhc3N3b3Jk";
const NOTES_TEXT: &str = "NOTES-login-with-admin-password-xyzzy";
const HOOK_TEXT: &str = "HOOK-db-migrate-with-token-plugh";
const TEMPLATE_TEXT: &str = "TEMPLATE-body-marker";
const CHART_VALUES_SECRET: &str = "CHART-DEFAULT-PASSWORD-quux";
const SCHEMA_TEXT: &str = "SCHEMA-marker";
const FILE_TEXT: &str = "FILE-marker-frobnicate";

const MANIFEST: &str = "---\n# Source: shop/templates/secret.yaml\napiVersion: v1\nkind: Secret\nmetadata:\n  name: shop-db\ntype: Opaque\ndata:\n  password: c3VwZXItc2VjcmV0LXBhc3N3b3Jk\n---\n# Source: shop/templates/deployment.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\n";

/// A release as Helm 3 marshals `release.Release`, with secrets in every field that must
/// not survive.
fn helm_release(config: Value) -> Value {
    let b64 = |s: &str| STANDARD.encode(s);
    json!({
        "name": "shop",
        "info": {
            "first_deployed": "2026-03-01T10:00:00.123456789+01:00",
            "last_deployed": "2026-03-02T09:30:00Z",
            "deleted": "0001-01-01T00:00:00Z",
            "description": "Upgrade complete",
            "status": "deployed",
            "notes": NOTES_TEXT
        },
        "chart": {
            "metadata": {
                "name": "shop",
                "home": "https://example.invalid/shop",
                "version": "1.4.2",
                "description": "The shop",
                "apiVersion": "v2",
                "appVersion": "3.1.0",
                "dependencies": [
                    {
                        "name": "postgresql",
                        "version": "12.x.x",
                        "repository": "oci://registry.example.invalid/charts",
                        "condition": "postgresql.enabled",
                        "enabled": true,
                        "import-values": ["secret-import"],
                        "alias": "db"
                    },
                    {"name": "redis", "version": "17.0.0", "repository": ""}
                ],
                "type": "application"
            },
            "lock": null,
            "templates": [
                {"name": "templates/secret.yaml", "data": b64(TEMPLATE_TEXT)}
            ],
            "values": {"db": {"password": CHART_VALUES_SECRET}},
            "schema": b64(SCHEMA_TEXT),
            "files": [{"name": "files/init.sql", "data": b64(FILE_TEXT)}]
        },
        "config": config,
        "manifest": MANIFEST,
        "hooks": [
            {
                "name": "shop-migrate",
                "kind": "Job",
                "path": "shop/templates/migrate.yaml",
                "manifest": HOOK_TEXT,
                "events": ["pre-upgrade"],
                "last_run": {"started_at": "", "completed_at": "", "phase": ""},
                "weight": 0,
                "delete_policies": ["before-hook-creation"]
            }
        ],
        "version": 7,
        "namespace": "shop"
    })
}

fn default_config() -> Value {
    json!({
        "replicaCount": 3,
        "db": {"password": VALUES_SECRET, "host": "db.shop.svc"},
        "tags": ["a", "b"]
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).expect("write to a Vec");
    encoder.finish().expect("finish gzip into a Vec")
}

/// Helm's encoding of a release: JSON, gzip, base64.
fn helm_payload(release: &Value) -> Vec<u8> {
    let json = serde_json::to_vec(release).expect("serialise test release");
    STANDARD.encode(gzip(&json)).into_bytes()
}

fn ts(text: &str) -> Time {
    Time(text.parse().expect("test timestamp"))
}

fn expected_shop(values_hash: Option<String>, manifest_hash: Option<String>) -> SanitisedRelease {
    SanitisedRelease {
        name: "shop".into(),
        namespace: Some("shop".into()),
        revision: 7,
        status: Some("deployed".into()),
        first_deployed: Some(ts("2026-03-01T09:00:00Z")),
        last_deployed: Some(ts("2026-03-02T09:30:00Z")),
        deleted: None,
        chart: ChartSummary {
            name: Some("shop".into()),
            version: Some("1.4.2".into()),
            app_version: Some("3.1.0".into()),
            dependencies: vec![
                ChartDependency {
                    name: "postgresql".into(),
                    version: Some("12.x.x".into()),
                    repository: Some("oci://registry.example.invalid/charts".into()),
                    condition: Some("postgresql.enabled".into()),
                    enabled: Some(true),
                },
                ChartDependency {
                    name: "redis".into(),
                    version: Some("17.0.0".into()),
                    repository: None,
                    condition: None,
                    enabled: None,
                },
            ],
        },
        description: Some("Upgrade complete".into()),
        description_truncated: false,
        values_hash,
        manifest_hash,
    }
}

/// Everything that must never leave the decoder.
const FORBIDDEN: &[&str] = &[
    VALUES_SECRET,
    MANIFEST_SECRET_B64,
    "super-secret-password",
    "kind: Secret",
    "shop-db",
    NOTES_TEXT,
    HOOK_TEXT,
    "shop-migrate",
    TEMPLATE_TEXT,
    "templates/secret.yaml",
    CHART_VALUES_SECRET,
    SCHEMA_TEXT,
    FILE_TEXT,
    "files/init.sql",
    "db.shop.svc",
    "replicaCount",
];

fn assert_nothing_leaks(release: &SanitisedRelease) {
    let published = serde_json::to_string(release).expect("serialise sanitised release");
    let debug = format!("{release:?}");
    let pretty = format!("{release:#?}");
    for secret in FORBIDDEN {
        assert!(!published.contains(secret), "JSON leaks {secret:?}");
        assert!(!debug.contains(secret), "Debug leaks {secret:?}");
        assert!(!pretty.contains(secret), "pretty Debug leaks {secret:?}");
    }
}

#[test]
fn keeps_only_allowlisted_fields_of_a_normal_release() {
    let release = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    let expected = expected_shop(
        release.values_hash.clone(),
        Some(hmac_hex(&key(), MANIFEST.as_bytes())),
    );
    assert_eq!(release, expected);
    assert_eq!(release.values_hash.as_ref().map(String::len), Some(64));
}

#[test]
fn serialises_in_camel_case_with_only_allowlisted_keys() {
    let release = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    let published = serde_json::to_value(&release).unwrap();
    let mut keys: Vec<&str> = published
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "chart",
            "description",
            "firstDeployed",
            "lastDeployed",
            "manifestHash",
            "name",
            "namespace",
            "revision",
            "status",
            "valuesHash"
        ]
    );
    assert_eq!(published["chart"]["appVersion"], "3.1.0");
    let roundtrip: SanitisedRelease = serde_json::from_value(published).unwrap();
    assert_eq!(roundtrip, release);
}

#[test]
fn secrets_notes_manifest_and_hooks_never_reach_output_or_debug() {
    let release = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    assert_nothing_leaks(&release);
    let entry = HelmRelease::from(release);
    let published = serde_json::to_string(&entry).unwrap();
    let debug = format!("{entry:?}");
    for secret in FORBIDDEN {
        assert!(
            !published.contains(secret),
            "inventory entry leaks {secret:?}"
        );
        assert!(
            !debug.contains(secret),
            "inventory entry Debug leaks {secret:?}"
        );
    }
}

#[test]
fn values_hash_is_canonical_and_stable() {
    let a = sanitise(&helm_payload(&helm_release(
        json!({"b": 1, "a": {"y": [1, "x"], "x": null}}),
    )))
    .unwrap();
    let b = sanitise(&helm_payload(&helm_release(
        json!({"a": {"x": null, "y": [1, "x"]}, "b": 1}),
    )))
    .unwrap();
    assert_eq!(a.values_hash, b.values_hash);
    assert_eq!(
        a.values_hash,
        Some(hmac_hex(&key(), br#"{"a":{"x":null,"y":[1,"x"]},"b":1}"#))
    );
    let again = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    let first = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    assert_eq!(again.values_hash, first.values_hash);
}

#[test]
fn values_hash_changes_when_values_change() {
    let before = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    let mut changed = default_config();
    changed["db"]["password"] = json!("hunter3-SECRET");
    let after = sanitise(&helm_payload(&helm_release(changed))).unwrap();
    assert_ne!(before.values_hash, after.values_hash);
    assert_eq!(before.manifest_hash, after.manifest_hash);
}

#[test]
fn manifest_hash_is_keyed_and_tracks_the_manifest() {
    let mut release = helm_release(default_config());
    release["manifest"] = json!("abc");
    let abc = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(abc.manifest_hash, Some(hmac_hex(&key(), b"abc")));
    release["manifest"] = json!("abd");
    let abd = sanitise(&helm_payload(&release)).unwrap();
    assert_ne!(abc.manifest_hash, abd.manifest_hash);
}

#[test]
fn absent_or_null_values_hash_as_empty_object() {
    let empty_object = Some(hmac_hex(&key(), b"{}"));
    let mut release = helm_release(json!({}));
    assert_eq!(
        sanitise(&helm_payload(&release)).unwrap().values_hash,
        empty_object
    );
    release["config"] = Value::Null;
    assert_eq!(
        sanitise(&helm_payload(&release)).unwrap().values_hash,
        empty_object
    );
    release.as_object_mut().unwrap().remove("config");
    release.as_object_mut().unwrap().remove("manifest");
    let bare = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(bare.values_hash, empty_object);
    assert_eq!(bare.manifest_hash, Some(hmac_hex(&key(), b"")));
}

/// A password in the values cannot be tested against the published hashes without the
/// key: they are not the plain SHA-256 anyone can compute from a guess, another cluster's
/// key gives other hashes, and without a key there are none.
#[test]
fn the_hashes_cannot_be_recomputed_from_a_guess() {
    let config = json!({"db": {"password": "hunter2"}});
    let mut release = helm_release(config);
    release["manifest"] = json!("password: hunter2\n");
    let payload = helm_payload(&release);
    let ours = sanitise(&payload).unwrap();
    let guessed = sha256_hex(br#"{"db":{"password":"hunter2"}}"#);
    assert_eq!(
        ours.values_hash,
        Some(hmac_hex(&key(), br#"{"db":{"password":"hunter2"}}"#))
    );
    assert_ne!(ours.values_hash, Some(guessed));
    assert_ne!(ours.manifest_hash, Some(sha256_hex(b"password: hunter2\n")));
    let other = HashKey::new(&[8; HashKey::LEN]).expect("32 bytes");
    let theirs = sanitise_release(&payload, Some(&other)).unwrap();
    assert_ne!(ours.values_hash, theirs.values_hash);
    assert_ne!(ours.manifest_hash, theirs.manifest_hash);
    let keyless = sanitise_release(&payload, None).unwrap();
    assert_eq!((keyless.values_hash, keyless.manifest_hash), (None, None));
    assert!(
        !format!("{:?}", key()).contains('7'),
        "the key is never printed"
    );
}

#[test]
fn accepts_an_uncompressed_json_payload() {
    let release = helm_release(default_config());
    let gzipped = sanitise(&helm_payload(&release)).unwrap();
    let plain_payload = STANDARD.encode(serde_json::to_vec(&release).unwrap());
    let plain = sanitise(plain_payload.as_bytes()).unwrap();
    assert_eq!(plain, gzipped);
    assert_nothing_leaks(&plain);
}

#[test]
fn accepts_base64_with_line_breaks() {
    let payload = helm_payload(&helm_release(default_config()));
    let wrapped: Vec<u8> = payload
        .chunks(76)
        .flat_map(|line| line.iter().copied().chain(*b"\r\n"))
        .collect();
    assert_eq!(sanitise(&wrapped).unwrap(), sanitise(&payload).unwrap());
}

#[test]
fn accepts_a_multi_member_gzip_stream() {
    let json = serde_json::to_vec(&helm_release(default_config())).unwrap();
    let (head, tail) = json.split_at(json.len() / 2);
    let mut stream = gzip(head);
    stream.extend(gzip(tail));
    let payload = STANDARD.encode(stream);
    assert_eq!(
        sanitise(payload.as_bytes()).unwrap(),
        sanitise(&helm_payload(&helm_release(default_config()))).unwrap()
    );
}

#[test]
fn go_zero_time_and_empty_fields_mean_absent() {
    let release = json!({
        "name": "bare",
        "version": 1,
        "info": {"first_deployed": "", "last_deployed": "0001-01-01T00:00:00Z", "deleted": "0001-01-01T00:00:00Z", "description": "", "status": ""},
        "chart": null
    });
    let bare = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(
        bare,
        SanitisedRelease {
            name: "bare".into(),
            namespace: None,
            revision: 1,
            status: None,
            first_deployed: None,
            last_deployed: None,
            deleted: None,
            chart: ChartSummary::default(),
            description: None,
            description_truncated: false,
            values_hash: Some(hmac_hex(&key(), b"{}")),
            manifest_hash: Some(hmac_hex(&key(), b"")),
        }
    );
}

#[test]
fn keeps_the_deleted_time_of_an_uninstalled_release() {
    let mut release = helm_release(default_config());
    release["info"]["status"] = json!("uninstalled");
    release["info"]["deleted"] = json!("2026-03-03T12:00:00Z");
    let uninstalled = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(uninstalled.deleted, Some(ts("2026-03-03T12:00:00Z")));
    assert_eq!(uninstalled.status.as_deref(), Some("uninstalled"));
}

#[test]
fn truncates_the_description_on_a_char_boundary() {
    // 255 ASCII bytes then a 3-byte '€': byte 256 falls inside the '€'.
    let long = format!("{}€ and more", "a".repeat(255));
    let mut release = helm_release(default_config());
    release["info"]["description"] = json!(long);
    let cut = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(cut.description, Some("a".repeat(255)));
    assert!(cut.description_truncated);

    // All 2-byte chars: 128 of them fill exactly 256 bytes.
    let accents = "é".repeat(200);
    release["info"]["description"] = json!(accents);
    let cut = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(cut.description, Some("é".repeat(128)));
    assert!(cut.description_truncated);

    let exact = "b".repeat(MAX_DESCRIPTION_BYTES);
    release["info"]["description"] = json!(exact);
    let kept = sanitise(&helm_payload(&release)).unwrap();
    assert_eq!(kept.description, Some(exact));
    assert!(!kept.description_truncated);
}

#[test]
fn rejects_invalid_base64() {
    for payload in [&b"not base64!"[..], b"abc", b"YWJj=", b"\xff\xfe\x00"] {
        assert_eq!(
            sanitise(payload),
            Err(HelmReleaseError::InvalidBase64),
            "{payload:?}"
        );
    }
}

#[test]
fn rejects_corrupt_gzip() {
    let mut stream = gzip(&serde_json::to_vec(&helm_release(default_config())).unwrap());
    // Keep the magic, smash the deflate data.
    for b in stream.iter_mut().skip(10).take(40) {
        *b ^= 0x5a;
    }
    let payload = STANDARD.encode(&stream);
    assert_eq!(
        sanitise(payload.as_bytes()),
        Err(HelmReleaseError::CorruptGzip)
    );

    let header_only = STANDARD.encode([0x1f, 0x8b, 0x08, 0xff, 0x00]);
    assert_eq!(
        sanitise(header_only.as_bytes()),
        Err(HelmReleaseError::CorruptGzip)
    );
}

#[test]
fn rejects_truncated_gzip() {
    let stream = gzip(&serde_json::to_vec(&helm_release(default_config())).unwrap());
    for keep in [stream.len() - 1, stream.len() - 8, stream.len() / 2, 3] {
        let payload = STANDARD.encode(&stream[..keep]);
        assert_eq!(
            sanitise(payload.as_bytes()),
            Err(HelmReleaseError::CorruptGzip),
            "truncated to {keep} of {} bytes",
            stream.len()
        );
    }
}

#[test]
fn rejects_payloads_that_are_neither_gzip_nor_json() {
    for decoded in [&b""[..], b"hello", b"{\"name\": \"shop\"", b"\x00\x01\x02"] {
        let payload = STANDARD.encode(decoded);
        let err = sanitise(payload.as_bytes()).unwrap_err();
        assert!(
            matches!(err, HelmReleaseError::NotJson { .. }),
            "{decoded:?} gave {err:?}"
        );
    }
    // Gzip of something that is not JSON.
    let payload = STANDARD.encode(gzip(b"apiVersion: v1\nkind: Secret\n"));
    let err = sanitise(payload.as_bytes()).unwrap_err();
    assert!(matches!(err, HelmReleaseError::NotJson { .. }), "{err:?}");
}

#[test]
fn rejects_json_that_is_not_a_release() {
    for shape in [
        json!([1, 2, 3]),
        json!("shop"),
        json!(null),
        json!({"name": 42, "version": 1}),
        json!({"name": "shop", "version": "seven"}),
        json!({"name": "shop", "version": 1, "info": "deployed"}),
        json!({"name": "shop", "version": 1, "chart": {"metadata": {"dependencies": {"a": 1}}}}),
        json!({"name": "shop", "version": 1, "manifest": {"kind": "Secret"}}),
    ] {
        let err = sanitise(&helm_payload(&shape)).unwrap_err();
        assert!(
            matches!(err, HelmReleaseError::NotARelease { .. }),
            "{shape} gave {err:?}"
        );
    }
}

#[test]
fn rejects_a_release_without_name_or_version() {
    let cases = [
        (json!({}), "name"),
        (json!({"version": 3}), "name"),
        (json!({"name": "", "version": 3}), "name"),
        (json!({"name": null, "version": 3}), "name"),
        (json!({"name": "shop"}), "version"),
        (json!({"name": "shop", "version": null}), "version"),
    ];
    for (shape, field) in cases {
        assert_eq!(
            sanitise(&helm_payload(&shape)),
            Err(HelmReleaseError::MissingField { field }),
            "{shape}"
        );
    }
    assert_eq!(
        sanitise(&helm_payload(&json!({"name": "shop", "version": 0}))),
        Err(HelmReleaseError::InvalidField { field: "version" })
    );
}

#[test]
fn rejects_an_unparseable_timestamp_without_quoting_it() {
    let mut release = helm_release(default_config());
    release["info"]["last_deployed"] = json!(VALUES_SECRET);
    let err = sanitise(&helm_payload(&release)).unwrap_err();
    assert_eq!(
        err,
        HelmReleaseError::InvalidField {
            field: "info.last_deployed"
        }
    );
    assert!(!err.to_string().contains(VALUES_SECRET));
}

#[test]
fn error_messages_never_quote_the_payload() {
    let wrong_type = json!({"name": "shop", "version": VALUES_SECRET});
    let wrong_shape = json!({"name": ["hunter2-SECRET"], "version": 1});
    let not_json = format!("{{\"name\": {VALUES_SECRET}");
    let bad_base64 = format!("{VALUES_SECRET}!!");
    let payloads = [
        helm_payload(&wrong_type),
        helm_payload(&wrong_shape),
        STANDARD.encode(not_json).into_bytes(),
        STANDARD
            .encode(gzip(b"password: hunter2-SECRET"))
            .into_bytes(),
        bad_base64.into_bytes(),
    ];
    for payload in payloads {
        let err = sanitise(&payload).unwrap_err();
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}

#[test]
fn rejects_a_gzip_bomb_past_the_cap() {
    // 33 MiB of zeros compresses to about 33 KiB; decompressing must stop at the cap.
    let zeros = vec![0u8; MAX_RELEASE_BYTES + 1024 * 1024];
    let payload = STANDARD.encode(gzip(&zeros));
    drop(zeros);
    assert!(payload.len() < 1024 * 1024);
    assert_eq!(
        sanitise(payload.as_bytes()),
        Err(HelmReleaseError::TooLarge {
            limit: MAX_RELEASE_BYTES
        })
    );
}

#[test]
fn rejects_an_encoded_payload_past_the_cap_before_decoding() {
    let payload = vec![b'A'; MAX_RELEASE_BYTES + 4];
    assert_eq!(
        sanitise(&payload),
        Err(HelmReleaseError::TooLarge {
            limit: MAX_RELEASE_BYTES
        })
    );
}

#[test]
fn the_cap_is_inclusive() {
    // Compressible, so the base64 text stays under the cap and only the JSON meets it.
    let manifest = "a".repeat(1000);
    let json =
        serde_json::to_vec(&json!({"name": "shop", "version": 1, "manifest": manifest})).unwrap();
    let stream = gzip(&json);
    assert_eq!(gunzip_capped(&stream, json.len()), Ok(json.clone()));
    assert_eq!(
        gunzip_capped(&stream, json.len() - 1),
        Err(HelmReleaseError::TooLarge {
            limit: json.len() - 1
        })
    );
    let payload = STANDARD.encode(&stream);
    assert!(payload.len() < json.len() - 1);
    assert!(sanitise_release_with_limit(payload.as_bytes(), Some(&key()), json.len()).is_ok());
    assert_eq!(
        sanitise_release_with_limit(payload.as_bytes(), Some(&key()), json.len() - 1),
        Err(HelmReleaseError::TooLarge {
            limit: json.len() - 1
        })
    );
}

#[test]
fn every_error_has_a_stable_reason() {
    let errors = [
        (HelmReleaseError::InvalidBase64, "InvalidBase64"),
        (HelmReleaseError::TooLarge { limit: 1 }, "TooLarge"),
        (HelmReleaseError::CorruptGzip, "CorruptGzip"),
        (HelmReleaseError::NotJson { line: 1, column: 1 }, "NotJson"),
        (
            HelmReleaseError::NotARelease { line: 1, column: 1 },
            "NotARelease",
        ),
        (
            HelmReleaseError::MissingField { field: "name" },
            "MissingField",
        ),
        (
            HelmReleaseError::InvalidField { field: "version" },
            "InvalidField",
        ),
    ];
    for (err, reason) in errors {
        assert_eq!(err.reason(), reason);
    }
}

#[test]
fn converts_into_the_inventory_entry() {
    let release = sanitise(&helm_payload(&helm_release(default_config()))).unwrap();
    let entry = HelmRelease::from(release.clone());
    assert_eq!(
        entry,
        HelmRelease {
            name: "shop".into(),
            revision: 7,
            status: "deployed".into(),
            chart: "shop".into(),
            chart_version: "1.4.2".into(),
            app_version: Some("3.1.0".into()),
            last_deployed: Some(ts("2026-03-02T09:30:00Z")),
            values_hash: release.values_hash,
            manifest_hash: release.manifest_hash,
        }
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = sanitise(&bytes);
    }

    #[test]
    fn arbitrary_decoded_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = sanitise(STANDARD.encode(&bytes).as_bytes());
        let mut gzip_like = GZIP_MAGIC.to_vec();
        gzip_like.extend_from_slice(&bytes);
        let _ = sanitise(STANDARD.encode(&gzip_like).as_bytes());
        let _ = sanitise(STANDARD.encode(gzip(&bytes)).as_bytes());
    }

    #[test]
    fn mangled_releases_never_panic(
        cut in 0usize..4096,
        flip_at in 0usize..4096,
        flip in any::<u8>(),
    ) {
        let mut stream = gzip(&serde_json::to_vec(&helm_release(default_config())).unwrap());
        if let Some(b) = stream.get_mut(flip_at) {
            *b ^= flip;
        }
        stream.truncate(cut);
        let _ = sanitise(STANDARD.encode(&stream).as_bytes());
    }

    #[test]
    fn secrets_in_values_notes_and_manifest_never_leak(secret in "SECRET-[A-Za-z0-9]{8,24}") {
        let mut release = helm_release(json!({"auth": {"password": secret, "nested": [secret]}}));
        release["info"]["notes"] = json!(secret);
        release["manifest"] = json!(format!("kind: Secret\nstringData:\n  password: {secret}\n"));
        release["hooks"][0]["manifest"] = json!(secret);
        let sanitised = sanitise(&helm_payload(&release)).unwrap();
        prop_assert!(!serde_json::to_string(&sanitised).unwrap().contains(&secret));
        let debug = format!("{sanitised:?}");
        prop_assert!(!debug.contains(&secret));
    }
}
