//! The content of the ConfigMaps and Secrets workloads refer to, as change tracking needs
//! it: key names and digests, never a value.
//!
//! - A **key digest** is a SipHash of one value under keys drawn at random when the process
//!   starts ([`key_digest`]). It never leaves the process: it only tells which keys changed
//!   between two observations by the same process, and cannot be recomputed elsewhere.
//! - A **data hash** (ConfigMaps only) is the SHA-256 of the whole data, published with a
//!   revision so that two observations can be compared across tools. Secrets get none: a
//!   published hash of a short secret value can be tested against guesses.
//!
//! A workload's view of its configuration ([`ConfigState`]) is part of its revision
//! baseline: a change of the data of a ConfigMap or Secret it refers to is recorded as a
//! revision of the workload, listing the keys that changed. Everything here is pure.

use std::{
    collections::BTreeMap,
    hash::{BuildHasher, Hasher, RandomState},
    sync::LazyLock,
};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use sha2::{Digest, Sha256};

use crate::api::discovery::{ConfigBaseline, ConfigChange};

/// The prefix of a ConfigMap reference (`ConfigMap/<name>`), as `view::config_refs` writes it.
pub const CONFIG_MAP: &str = "ConfigMap";
/// The prefix of a Secret reference (`Secret/<name>`).
pub const SECRET: &str = "Secret";

/// Hex digits of a published data hash (64 bits).
const DATA_HASH_DIGITS: usize = 16;

/// The random keys of this process's key digests.
static DIGEST_KEYS: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A ConfigMap or Secret, reduced to what change tracking compares. The store's key holds
/// its namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigView {
    /// Per key (of `data` and `binaryData` alike), sorted: the name and its key digest.
    pub keys: Vec<(Box<str>, u64)>,
    /// SHA-256 of the data, in hex, cut to 16 digits; `None` for a Secret.
    pub data_hash: Option<Box<str>>,
    /// The field manager of the newest managedFields entry: who changed it last.
    pub changed_by: Option<Box<str>>,
    /// `(key, manager)`: who owns each key's value, i.e. who set the value it has now
    /// (only keys whose owner is known; sorted).
    pub owners: Vec<(Box<str>, Box<str>)>,
    /// `metadata.resourceVersion`: which write a change was seen at (it tells a change
    /// repeated later from the same change seen again; see [`super::revision::name`]).
    pub resource_version: Option<Box<str>>,
}

/// The process-local digest of one value: equal values give equal digests in this process,
/// and nothing outside it can recompute one.
pub fn key_digest(value: &[u8]) -> u64 {
    let mut h = DIGEST_KEYS.build_hasher();
    h.write(value);
    h.finish()
}

/// The published hash of a ConfigMap's data: SHA-256 over each key and value,
/// length-prefixed, in key order, in hex cut to 16 digits.
pub fn data_hash<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut h = Sha256::new();
    for (k, v) in entries {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_le_bytes());
        h.update(v);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    hex[..DATA_HASH_DIGITS].to_string()
}

/// The newest managedFields entry's manager.
fn last_manager(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Box<str>> {
    meta.managed_fields
        .iter()
        .flatten()
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.as_deref())
        .map(Box::from)
}

/// Who owns each key of `f:data` and `f:binaryData` (`f:<key>` under them in managedFields).
fn key_owners(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<(Box<str>, Box<str>)> {
    let mut out = Vec::new();
    for m in meta.managed_fields.iter().flatten() {
        let (Some(manager), Some(fields)) = (&m.manager, &m.fields_v1) else {
            continue;
        };
        for list in ["f:data", "f:binaryData"] {
            let Some(keys) = fields.0.get(list).and_then(|d| d.as_object()) else {
                continue;
            };
            for key in keys.keys().filter_map(|k| k.strip_prefix("f:")) {
                out.push((Box::from(key), Box::from(manager.as_str())));
            }
        }
    }
    out.sort();
    out
}

/// Projects a ConfigMap: key names, key digests and the data hash.
pub fn config_map(c: &ConfigMap) -> ConfigView {
    let mut entries: BTreeMap<&str, &[u8]> = BTreeMap::new();
    for (k, v) in c.data.iter().flatten() {
        entries.insert(k, v.as_bytes());
    }
    for (k, v) in c.binary_data.iter().flatten() {
        entries.insert(k, &v.0);
    }
    ConfigView {
        keys: entries
            .iter()
            .map(|(k, v)| (Box::from(*k), key_digest(v)))
            .collect(),
        data_hash: Some(data_hash(entries).into_boxed_str()),
        changed_by: last_manager(&c.metadata),
        owners: key_owners(&c.metadata),
        resource_version: c.metadata.resource_version.as_deref().map(Box::from),
    }
}

/// Projects a Secret: key names and key digests; no hash of its data.
pub fn secret(s: &Secret) -> ConfigView {
    let mut keys: Vec<(Box<str>, u64)> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (Box::from(k.as_str()), key_digest(&v.0)))
        .collect();
    keys.sort();
    ConfigView {
        keys,
        data_hash: None,
        changed_by: last_manager(&s.metadata),
        owners: key_owners(&s.metadata),
        resource_version: s.metadata.resource_version.as_deref().map(Box::from),
    }
}

/// What a workload's baseline holds of one ConfigMap or Secret it refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigState {
    /// `ConfigMap/<name>` or `Secret/<name>`.
    pub source: String,
    /// Whether it exists.
    pub exists: bool,
    /// Key names, sorted, with their key digests: `None` for a baseline an earlier process
    /// published (digests never leave the process).
    pub keys: Vec<(String, Option<u64>)>,
    /// The data hash (ConfigMaps).
    pub data_hash: Option<String>,
    /// Who changed it last.
    pub changed_by: Option<String>,
    /// `(key, manager)`: who set each key's value (not published).
    pub owners: Vec<(String, String)>,
    /// `metadata.resourceVersion` (not published).
    pub resource_version: Option<String>,
}

/// The state of `source` as stored now (`None`: it does not exist).
pub fn state(source: &str, view: Option<&ConfigView>) -> ConfigState {
    ConfigState {
        source: source.to_string(),
        exists: view.is_some(),
        keys: view
            .into_iter()
            .flat_map(|v| &v.keys)
            .map(|(k, d)| (k.to_string(), Some(*d)))
            .collect(),
        data_hash: view.and_then(|v| v.data_hash.as_deref().map(str::to_string)),
        changed_by: view.and_then(|v| v.changed_by.as_deref().map(str::to_string)),
        owners: view
            .into_iter()
            .flat_map(|v| &v.owners)
            .map(|(k, m)| (k.to_string(), m.to_string()))
            .collect(),
        resource_version: view.and_then(|v| v.resource_version.as_deref().map(str::to_string)),
    }
}

/// What a baseline publishes of a state: names and the data hash, never a key digest.
pub fn published(s: &ConfigState) -> ConfigBaseline {
    ConfigBaseline {
        source: s.source.clone(),
        missing: !s.exists,
        keys: s.keys.iter().map(|(k, _)| k.clone()).collect(),
        data_hash: s.data_hash.clone(),
    }
}

/// A published state read back: its key digests unknown.
pub fn restored(b: &ConfigBaseline) -> ConfigState {
    ConfigState {
        source: b.source.clone(),
        exists: !b.missing,
        keys: b.keys.iter().map(|k| (k.clone(), None)).collect(),
        data_hash: b.data_hash.clone(),
        changed_by: None,
        owners: Vec::new(),
        resource_version: None,
    }
}

/// The content changes between two observations of the configuration a workload refers to,
/// in source order. Only sources present in both count (a reference added or removed is a
/// template change, recorded as such); a source with no state in `before` is not measured
/// (there was nothing to measure from).
///
/// The keys listed are those added, removed, or whose value changed. A value change is
/// known from the key digests; against a published baseline (digests unknown) it is known
/// for a ConfigMap only, from its data hash, without which key changed: such a change lists
/// the keys added or removed, and `keysUnknown` says the values of others changed too.
pub fn changes(before: &[ConfigState], after: &[ConfigState]) -> Vec<ConfigChange> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.source == a.source)?;
            change(b, a)
        })
        .collect()
}

/// `before` with what it cannot measure from taken from `after`, measured from now on: the
/// state of every source `after` has and it has not (a baseline an older version
/// published, or a Secret whose tracking was just switched on), and the key digests of a
/// published baseline (which holds none) where nothing says the data changed — the same
/// keys and, for a ConfigMap, the same data hash. Without the digests every later value
/// change would be unknown: a ConfigMap's told only as "changed while not watched", a
/// Secret's (which has no data hash) not at all. `None` when there is nothing to add.
pub fn fill(before: &[ConfigState], after: &[ConfigState]) -> Option<Vec<ConfigState>> {
    let names = |s: &ConfigState| s.keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let mut filled = false;
    let mut all: Vec<ConfigState> = before
        .iter()
        .map(|b| match after.iter().find(|a| a.source == b.source) {
            Some(a)
                if b.keys.iter().any(|(_, d)| d.is_none())
                    && a.keys.iter().all(|(_, d)| d.is_some())
                    && (b.exists, names(b), &b.data_hash) == (a.exists, names(a), &a.data_hash) =>
            {
                filled = true;
                ConfigState {
                    keys: a.keys.clone(),
                    ..b.clone()
                }
            }
            _ => b.clone(),
        })
        .collect();
    let new: Vec<&ConfigState> = after
        .iter()
        .filter(|a| !before.iter().any(|b| b.source == a.source))
        .collect();
    if new.is_empty() && !filled {
        return None;
    }
    all.extend(new.into_iter().cloned());
    all.sort_by(|a, b| a.source.cmp(&b.source));
    Some(all)
}

fn change(b: &ConfigState, a: &ConfigState) -> Option<ConfigChange> {
    if b.keys == a.keys && b.data_hash == a.data_hash && b.exists == a.exists {
        return None;
    }
    let find = |list: &[(String, Option<u64>)], k: &str| {
        list.iter().find(|(n, _)| n == k).map(|(_, d)| *d)
    };
    let mut keys: Vec<String> = Vec::new();
    let mut unknown = false;
    for (k, d) in &a.keys {
        match find(&b.keys, k) {
            None => keys.push(k.clone()),
            Some(old) => match (old, d) {
                (Some(old), Some(new)) if old != *new => keys.push(k.clone()),
                (None, _) | (_, None) => unknown = true,
                _ => {}
            },
        }
    }
    for (k, _) in &b.keys {
        if find(&a.keys, k).is_none() {
            keys.push(k.clone());
        }
    }
    keys.sort();
    let hash_moved = a.data_hash.is_some() && a.data_hash != b.data_hash;
    let keys_unknown = unknown && hash_moved;
    if keys.is_empty() && !keys_unknown && a.exists == b.exists {
        return None;
    }
    // Who set the first changed key still there, else whoever changed the object last.
    let changed_by = keys
        .iter()
        .find_map(|k| {
            a.owners
                .iter()
                .find(|(o, _)| o == k)
                .map(|(_, m)| m.clone())
        })
        .or_else(|| a.changed_by.clone());
    Some(ConfigChange {
        source: a.source.clone(),
        keys,
        keys_unknown,
        data_hash: a.data_hash.clone(),
        deleted: !a.exists,
        changed_by,
    })
}

/// One line for a content change: `ConfigMap/app keys a, b changed (data 0123…)`.
pub fn describe(c: &ConfigChange) -> String {
    if c.deleted {
        return format!("{} deleted", c.source);
    }
    let mut s = c.source.clone();
    if !c.keys.is_empty() {
        s.push_str(&format!(" keys {} changed", c.keys.join(", ")));
    }
    if c.keys_unknown {
        s.push_str(if c.keys.is_empty() {
            " data changed while not watched"
        } else {
            ", other data changed while not watched"
        });
    }
    if let Some(h) = &c.data_hash {
        s.push_str(&format!(" (data {h})"));
    }
    s
}

/// The name of a ConfigMap or Secret a reference names, if it is of `kind`.
pub fn name_of<'a>(reference: &'a str, kind: &str) -> Option<&'a str> {
    reference.strip_prefix(kind)?.strip_prefix('/')
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
