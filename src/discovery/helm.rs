//! The Helm release sanitiser: turns the payload of a Helm 3 release Secret into a small,
//! publishable summary.
//!
//! A release Secret (type `helm.sh/release.v1`, label `owner=helm`) carries the whole
//! release in `data.release`. Once Kubernetes' own base64 is removed, that value is Helm's
//! payload: base64 text of a gzip stream of the release as JSON. Helm reads a payload whose
//! decoded bytes do not start with the gzip magic as plain JSON, and so does this module.
//!
//! Only allowlisted fields survive: name, namespace, revision, status, the deployed and
//! deleted times, the chart's name, version, appVersion and dependencies, and a description
//! cut to [`MAX_DESCRIPTION_BYTES`]. The user-supplied values (`config`) and the rendered
//! `manifest` are published only as keyed hashes (HMAC-SHA256 under the cluster's
//! [`HashKey`]): they tell one release's values from another's, but cannot be tested against
//! guesses by someone without the key (a plain hash of values that hold a password would
//! let anyone who reads the inventory try passwords offline). The notes, the hooks and the chart's
//! files, templates, default values and schema are not even deserialised: the structs
//! below name only what is read, so serde skips the rest.
//!
//! The payload can come from anyone allowed to write a Secret, so every step is bounded
//! ([`MAX_RELEASE_BYTES`]), nothing panics, and no error message or `Debug` output quotes
//! the payload: a value that fails to parse may be a password.

use std::io::{self, Read};

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};
use flate2::read::MultiGzDecoder;
use hmac::{Hmac, KeyInit, Mac};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;
use sha2::digest::Update;

use crate::api::discovery::HelmRelease;

/// The most bytes handled at any stage: the base64 text as given, and the JSON after
/// decompression. Helm's own payload must fit in a 1 MiB Secret, so this leaves ample room
/// while bounding what a gzip bomb can make the decoder allocate.
pub const MAX_RELEASE_BYTES: usize = 32 * 1024 * 1024;

/// The longest description kept, in bytes of UTF-8; longer ones are cut on a char boundary.
pub const MAX_DESCRIPTION_BYTES: usize = 256;

/// The three bytes Helm checks to tell a gzip stream from plain JSON (magic + deflate).
const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

/// Go's zero `time.Time` (`0001-01-01T00:00:00Z`), which Helm writes for a time never set
/// (`info.deleted` of a live release), as seconds from the Unix epoch.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// Go's `base64.StdEncoding`: standard alphabet, padding required, and (unlike the base64
/// crate's default) non-zero trailing bits tolerated.
const HELM_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// A Helm release reduced to the fields that may be published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SanitisedRelease {
    /// The release name.
    pub name: String,
    /// The release namespace, as recorded by Helm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The release revision (Helm's `version`), starting at 1.
    pub revision: i64,
    /// Helm's status string: `deployed`, `superseded`, `failed`, `uninstalling`,
    /// `pending-install`, `pending-upgrade`, `pending-rollback`, `uninstalled` or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// When the first revision of the release was deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<Time>,
    /// When this revision was deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<Time>,
    /// When the release was uninstalled (kept with `--keep-history`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Time>,
    /// The chart this revision was installed from.
    pub chart: ChartSummary,
    /// Helm's one-line description of the revision, at most [`MAX_DESCRIPTION_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether `description` was cut, so a shortened text is never mistaken for the whole.
    #[serde(default, skip_serializing_if = "is_false")]
    pub description_truncated: bool,
    /// HMAC-SHA256 (lowercase hex) under the [`HashKey`] of the canonical JSON of the
    /// user-supplied values: object keys sorted, no whitespace. Absent or `null` values hash
    /// as `{}`. `None` without a key.
    pub values_hash: Option<String>,
    /// HMAC-SHA256 (lowercase hex) under the [`HashKey`] of the rendered manifest text; an
    /// absent manifest hashes as the empty string. `None` without a key.
    pub manifest_hash: Option<String>,
}

/// The key of the published hashes of a release's values and manifest: 32 random bytes,
/// the same for every replica of the manager and across restarts (kept in a Secret, see
/// `helm_secrets::hash_key`), so that a hash changes only when what it covers does. Never
/// printed.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey([u8; HashKey::LEN]);

impl HashKey {
    /// Its length in bytes.
    pub const LEN: usize = 32;

    /// The key made of `bytes`, if there are [`HashKey::LEN`] of them.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        Some(Self(bytes.try_into().ok()?))
    }

    /// Its bytes, to store it.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

/// The chart metadata of a release.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartSummary {
    /// The chart name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The chart version (SemVer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The version of the application the chart packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// The chart's declared dependencies (subcharts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<ChartDependency>,
}

/// One dependency (subchart) declared by a chart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartDependency {
    /// The dependency's chart name.
    pub name: String,
    /// The version or version range required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The repository it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The values path that switches it on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Whether Helm enabled it for this release, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Why a release payload could not be sanitised. No variant carries payload content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelmReleaseError {
    /// The payload is not standard, padded base64 text.
    #[error("Helm release payload is not valid base64")]
    InvalidBase64,
    /// The payload, or what it decompresses to, passes the size cap.
    #[error("Helm release payload exceeds the {limit}-byte limit")]
    TooLarge {
        /// The cap that was reached, in bytes.
        limit: usize,
    },
    /// The payload starts like gzip but the stream is corrupt or truncated.
    #[error("Helm release payload is a corrupt or truncated gzip stream")]
    CorruptGzip,
    /// The decoded payload is neither gzip nor JSON.
    #[error(
        "Helm release payload is neither gzip nor JSON (syntax error at line {line}, column {column})"
    )]
    NotJson {
        /// 1-based line of the first syntax error.
        line: usize,
        /// 1-based column of the first syntax error.
        column: usize,
    },
    /// The payload is JSON, but not shaped like a Helm release (a field of the wrong type).
    #[error(
        "Helm release payload is JSON but not a Helm release (at line {line}, column {column})"
    )]
    NotARelease {
        /// 1-based line where the mismatch was found.
        line: usize,
        /// 1-based column where the mismatch was found.
        column: usize,
    },
    /// A field every release has is absent, `null` or empty.
    #[error("Helm release payload has no `{field}`")]
    MissingField {
        /// The field's path in Helm's release JSON.
        field: &'static str,
    },
    /// A field has the right JSON type but an impossible value.
    #[error("Helm release field `{field}` has an invalid value")]
    InvalidField {
        /// The field's path in Helm's release JSON.
        field: &'static str,
    },
}

impl HelmReleaseError {
    /// A stable CamelCase name for the failure, for condition reasons, Event reasons and
    /// metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            HelmReleaseError::InvalidBase64 => "InvalidBase64",
            HelmReleaseError::TooLarge { .. } => "TooLarge",
            HelmReleaseError::CorruptGzip => "CorruptGzip",
            HelmReleaseError::NotJson { .. } => "NotJson",
            HelmReleaseError::NotARelease { .. } => "NotARelease",
            HelmReleaseError::MissingField { .. } => "MissingField",
            HelmReleaseError::InvalidField { .. } => "InvalidField",
        }
    }
}

/// Sanitises the `data.release` value of a Helm 3 release Secret, given as the bytes
/// Kubernetes returns (Helm's base64 text).
///
/// Decodes base64, decompresses gzip when the decoded bytes start with the gzip magic (and
/// otherwise reads them as plain JSON, as Helm does), and keeps only the allowlisted fields
/// of [`SanitisedRelease`]. Line breaks in the base64 text are ignored, as Go's decoder does.
/// The values and the manifest are hashed under `key`; without one, not at all.
pub fn sanitise_release(
    payload: &[u8],
    key: Option<&HashKey>,
) -> Result<SanitisedRelease, HelmReleaseError> {
    sanitise_release_with_limit(payload, key, MAX_RELEASE_BYTES)
}

/// [`sanitise_release`] with the size cap as a parameter, so tests can exercise it cheaply.
fn sanitise_release_with_limit(
    payload: &[u8],
    key: Option<&HashKey>,
    limit: usize,
) -> Result<SanitisedRelease, HelmReleaseError> {
    if payload.len() > limit {
        return Err(HelmReleaseError::TooLarge { limit });
    }
    let decoded = decode_base64(payload)?;
    let json = if decoded.starts_with(&GZIP_MAGIC) {
        gunzip_capped(&decoded, limit)?
    } else {
        decoded
    };
    let raw: RawRelease = serde_json::from_slice(&json).map_err(json_error)?;
    drop(json);
    sanitise(raw, key)
}

/// Base64 per Go's `StdEncoding.DecodeString`, which skips `\r` and `\n`.
fn decode_base64(payload: &[u8]) -> Result<Vec<u8>, HelmReleaseError> {
    let result = if payload.iter().any(|b| matches!(b, b'\r' | b'\n')) {
        let compact: Vec<u8> = payload
            .iter()
            .copied()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect();
        HELM_BASE64.decode(compact)
    } else {
        HELM_BASE64.decode(payload)
    };
    // The decode error names the offending byte, which is payload content: drop it.
    result.map_err(|_| HelmReleaseError::InvalidBase64)
}

/// Decompresses a (possibly multi-member, like Go's reader) gzip stream, reading through
/// `take(limit + 1)` so no more than `limit` bytes are ever buffered.
fn gunzip_capped(compressed: &[u8], limit: usize) -> Result<Vec<u8>, HelmReleaseError> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut reader = MultiGzDecoder::new(compressed).take(cap);
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HelmReleaseError::CorruptGzip),
        };
        let needed = out.len().saturating_add(n);
        if needed > limit {
            return Err(HelmReleaseError::TooLarge { limit });
        }
        if out.capacity() < needed {
            // Grow geometrically, but never reserve past the cap.
            let target = out.capacity().saturating_mul(2).clamp(needed, limit);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(out)
}

/// Maps a serde_json error to a variant by category only: its message can quote the value
/// that failed (`invalid type: string "…"`), which may be a secret.
fn json_error(err: serde_json::Error) -> HelmReleaseError {
    let (line, column) = (err.line(), err.column());
    match err.classify() {
        serde_json::error::Category::Data => HelmReleaseError::NotARelease { line, column },
        serde_json::error::Category::Syntax
        | serde_json::error::Category::Eof
        | serde_json::error::Category::Io => HelmReleaseError::NotJson { line, column },
    }
}

/// Keeps the allowlisted fields of a parsed release and hashes values and manifest.
fn sanitise(raw: RawRelease, key: Option<&HashKey>) -> Result<SanitisedRelease, HelmReleaseError> {
    let name = raw
        .name
        .filter(|n| !n.is_empty())
        .ok_or(HelmReleaseError::MissingField { field: "name" })?;
    let revision = raw
        .version
        .ok_or(HelmReleaseError::MissingField { field: "version" })?;
    if revision < 1 {
        return Err(HelmReleaseError::InvalidField { field: "version" });
    }

    let info = raw.info.unwrap_or_default();
    let first_deployed = helm_time(info.first_deployed, "info.first_deployed")?;
    let last_deployed = helm_time(info.last_deployed, "info.last_deployed")?;
    let deleted = helm_time(info.deleted, "info.deleted")?;
    let (description, description_truncated) = match info.description.filter(|d| !d.is_empty()) {
        Some(mut text) => {
            let cut = truncate_on_char_boundary(&mut text, MAX_DESCRIPTION_BYTES);
            (Some(text), cut)
        }
        None => (None, false),
    };

    let metadata = raw.chart.and_then(|c| c.metadata).unwrap_or_default();
    let chart = ChartSummary {
        name: non_empty(metadata.name),
        version: non_empty(metadata.version),
        app_version: non_empty(metadata.app_version),
        dependencies: metadata
            .dependencies
            .unwrap_or_default()
            .into_iter()
            .map(|d| ChartDependency {
                name: d.name.unwrap_or_default(),
                version: non_empty(d.version),
                repository: non_empty(d.repository),
                condition: non_empty(d.condition),
                enabled: d.enabled,
            })
            .collect(),
    };

    Ok(SanitisedRelease {
        name,
        namespace: non_empty(raw.namespace),
        revision,
        status: non_empty(info.status),
        first_deployed,
        last_deployed,
        deleted,
        chart,
        description,
        description_truncated,
        values_hash: key.map(|k| values_hash(k, raw.config.as_ref())),
        manifest_hash: key.map(|k| manifest_hash(k, raw.manifest.as_deref().unwrap_or_default())),
    })
}

/// Parses a Go `time.Time` as Helm marshals it (RFC 3339, any offset), to whole seconds;
/// empty and Go's zero time mean "never". A bad value is reported by field name only.
fn helm_time(value: Option<String>, field: &'static str) -> Result<Option<Time>, HelmReleaseError> {
    let Some(text) = value.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let ts: Timestamp = text
        .parse()
        .map_err(|_| HelmReleaseError::InvalidField { field })?;
    if ts.as_second() == GO_ZERO_TIME_SECONDS && ts.subsec_nanosecond() == 0 {
        return Ok(None);
    }
    // A published `Time` has whole seconds (as `metav1.Time`); drop the fraction here so the
    // struct equals what it serialises to.
    let whole_seconds = Timestamp::from_second(ts.as_second())
        .map_err(|_| HelmReleaseError::InvalidField { field })?;
    Ok(Some(Time(whole_seconds)))
}

/// Cuts `text` to at most `max` bytes without splitting a character; true if it was cut.
fn truncate_on_char_boundary(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    true
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// The keyed hash of the canonical JSON of the values; absent values hash like `{}`, which
/// is what Helm means by them.
fn values_hash(key: &HashKey, config: Option<&Value>) -> String {
    let mut mac = key.mac();
    match config {
        Some(value) => write_canonical(value, &mut mac),
        None => Mac::update(&mut mac, b"{}"),
    }
    hex(&mac.finalize().into_bytes())
}

/// The keyed hash of the manifest text.
fn manifest_hash(key: &HashKey, manifest: &str) -> String {
    let mut mac = key.mac();
    Mac::update(&mut mac, manifest.as_bytes());
    hex(&mac.finalize().into_bytes())
}

/// Feeds `value` to the hasher as compact JSON with object keys in byte order. Sorting here
/// rather than relying on `serde_json::Map` keeps the hash stable whether or not some crate
/// in the build turns on serde_json's `preserve_order`. Recursion is bounded by serde_json's
/// parse depth limit (128).
fn write_canonical(value: &Value, hasher: &mut impl Update) {
    match value {
        Value::Null => hasher.update(b"null"),
        Value::Bool(true) => hasher.update(b"true"),
        Value::Bool(false) => hasher.update(b"false"),
        Value::Number(n) => hasher.update(n.to_string().as_bytes()),
        Value::String(s) => write_json_string(s, hasher),
        Value::Array(items) => {
            hasher.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_canonical(item, hasher);
            }
            hasher.update(b"]");
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            hasher.update(b"{");
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_json_string(key, hasher);
                hasher.update(b":");
                write_canonical(item, hasher);
            }
            hasher.update(b"}");
        }
    }
}

fn write_json_string(text: &str, hasher: &mut impl Update) {
    // Serialising a `str` cannot fail; should it ever, the raw text still identifies it.
    match serde_json::to_string(text) {
        Ok(quoted) => hasher.update(quoted.as_bytes()),
        Err(_) => hasher.update(text.as_bytes()),
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

impl From<SanitisedRelease> for HelmRelease {
    /// The inventory entry published in `NamespaceInventory.status.helmReleases`.
    fn from(release: SanitisedRelease) -> Self {
        HelmRelease {
            name: release.name,
            revision: release.revision,
            status: release.status.unwrap_or_default(),
            chart: release.chart.name.unwrap_or_default(),
            chart_version: release.chart.version.unwrap_or_default(),
            app_version: release.chart.app_version,
            last_deployed: release.last_deployed,
            values_hash: release.values_hash,
            manifest_hash: release.manifest_hash,
        }
    }
}

// The parts of Helm's release JSON (Go `release.Release`) that are read. Everything else —
// `info.notes`, `hooks`, `chart.templates`, `chart.values`, `chart.schema`, `chart.files`,
// `labels` — is skipped by serde without being kept. These structs deliberately have no
// `Debug`: `config` and `manifest` hold secrets until they are hashed.

/// A release as Helm stores it, reduced to the fields read.
#[derive(Deserialize)]
struct RawRelease {
    name: Option<String>,
    namespace: Option<String>,
    /// The revision.
    version: Option<i64>,
    info: Option<RawInfo>,
    chart: Option<RawChart>,
    /// The user-supplied values; only hashed.
    config: Option<Value>,
    /// The rendered templates; only hashed.
    manifest: Option<String>,
}

/// Helm's `release.Info`, without `notes`.
#[derive(Deserialize, Default)]
struct RawInfo {
    first_deployed: Option<String>,
    last_deployed: Option<String>,
    deleted: Option<String>,
    description: Option<String>,
    status: Option<String>,
}

/// Helm's `chart.Chart`, without templates, values, schema and files.
#[derive(Deserialize)]
struct RawChart {
    metadata: Option<RawMetadata>,
}

/// Helm's `chart.Metadata`, reduced to what is published.
#[derive(Deserialize, Default)]
struct RawMetadata {
    name: Option<String>,
    version: Option<String>,
    #[serde(rename = "appVersion")]
    app_version: Option<String>,
    dependencies: Option<Vec<RawDependency>>,
}

/// Helm's `chart.Dependency`, reduced to what is published.
#[derive(Deserialize)]
struct RawDependency {
    name: Option<String>,
    version: Option<String>,
    repository: Option<String>,
    condition: Option<String>,
    enabled: Option<bool>,
}

#[cfg(test)]
#[path = "helm_tests.rs"]
mod tests;
