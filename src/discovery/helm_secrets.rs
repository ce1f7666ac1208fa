//! The Helm release Secrets: a metadata-only watch (`owner=helm`: their data never arrives
//! through it), and the latest revision of each release read and decoded one Secret at a
//! time, when it changed, by the sanitiser ([`helm`]).
//!
//! Reading Secrets is opt-in (`config/rbac-helm`): a refusal is reported as
//! `HelmAccess=False` (see [`HelmState`]), not as the manager's missing permission.
//!
//! The key of the published hashes ([`helm::HashKey`]) is kept in the Secret
//! [`HASH_KEY_SECRET`] in the manager's namespace: created (immutable, 32 random bytes) by
//! the first manager that decodes a release, read by every one after it. Without it (its
//! creation refused) releases are published without their hashes, and decoded again once it
//! can be had (tried every [`KEY_RETRY`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt, core::PartialObjectMeta, runtime::watcher};

use super::{
    dirty::{Mark, Pending},
    helm,
    index::{Change, Projections},
    opt_in::{self, Access},
    watch::{all_valid, projections_with},
};
use crate::api::discovery::{HelmRelease, HelmRevision};
use crate::runtime::errors::brief;

/// `HelmAccess` while the watch's list is refused.
const DENIED: &str = "listing Helm release Secrets is forbidden";

/// The Secret, in the manager's namespace, that holds the key of the published hashes.
pub const HASH_KEY_SECRET: &str = "moonin-helm-hash-key";

/// The key's entry in that Secret's data.
const HASH_KEY_ENTRY: &str = "key";

/// A Helm release Secret's metadata: release name and revision from its labels.
#[derive(Debug, Clone, PartialEq)]
pub struct HelmSecretView {
    /// The Secret's name.
    pub name: String,
    /// The release (label `name`).
    pub release: String,
    /// The release revision (label `version`).
    pub version: i64,
    /// The Secret's resourceVersion: a decoded release is kept until it moves.
    pub resource_version: String,
}

fn helm_secret_view(s: &PartialObjectMeta<Secret>) -> HelmSecretView {
    let labels = s.labels();
    HelmSecretView {
        name: s.name_any(),
        release: labels.get("name").cloned().unwrap_or_default(),
        version: labels
            .get("version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        resource_version: s.resource_version().unwrap_or_default(),
    }
}

/// A decoded release: `(release, published entry, revision for change records)`.
pub type Release = (String, HelmRelease, HelmRevision);

/// Decoded releases by Secret (`namespace/name`, resourceVersion), and whether reading
/// Secrets is refused. Shared by the watch and the rebuilds.
pub struct HelmState {
    decoded: Mutex<HashMap<(String, String), Release>>,
    /// Whether Helm release Secrets may be read.
    pub access: Access,
    /// The manager's namespace, where [`HASH_KEY_SECRET`] is kept.
    key_namespace: String,
    /// The key of the published hashes, once read or created; or when the last try failed.
    key: tokio::sync::Mutex<Result<helm::HashKey, Option<std::time::Instant>>>,
}

/// How long after a failed try the key is tried again (meanwhile releases are published
/// without their hashes).
pub const KEY_RETRY: std::time::Duration = std::time::Duration::from_secs(300);

impl HelmState {
    /// No release decoded yet; the hash key kept in `key_namespace`.
    pub fn new(key_namespace: &str) -> Self {
        Self {
            decoded: Mutex::default(),
            access: Access::new(DENIED),
            key_namespace: key_namespace.to_string(),
            key: tokio::sync::Mutex::new(Err(None)),
        }
    }

    /// Whether the last try for the key failed (releases are published without hashes).
    pub fn keyless(&self) -> bool {
        self.key
            .try_lock()
            .is_ok_and(|k| matches!(*k, Err(Some(_))))
    }

    /// The key of the published hashes, read from [`HASH_KEY_SECRET`] or, when there is
    /// none, created there. `None` (logged) when neither works; tried again [`KEY_RETRY`]
    /// later.
    async fn hash_key(&self, client: &Client) -> Option<helm::HashKey> {
        let mut key = self.key.lock().await;
        match &*key {
            Ok(k) => return Some(k.clone()),
            Err(Some(failed)) if failed.elapsed() < KEY_RETRY => return None,
            Err(_) => {}
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), &self.key_namespace);
        let found = match read_key(&api).await {
            Ok(Some(k)) => Ok(k),
            Ok(None) => create_key(&api).await,
            Err(e) => Err(e),
        };
        *key = found.map_err(|e| {
            tracing::warn!(namespace = %self.key_namespace, secret = HASH_KEY_SECRET, error = %e,
                retry_in_secs = KEY_RETRY.as_secs(),
                "no key for the hashes of Helm values and manifests; releases are published without them");
            Some(std::time::Instant::now())
        });
        key.as_ref().ok().cloned()
    }

    fn cached(&self, key: &(String, String)) -> Option<Release> {
        self.locked().get(key).cloned()
    }

    /// A Secret read and decoded: reading works, and earlier versions of it go.
    fn decoded(&self, key: (String, String), release: Release) {
        self.access.read_ok();
        let mut g = self.locked();
        g.retain(|k, _| k.0 != key.0);
        g.insert(key, release);
    }

    /// Keeps of `ns` only the Secrets named in `latest` (each release's latest revision):
    /// Helm writes every revision to a Secret of its own, so the earlier ones go here.
    fn keep_latest(&self, ns: &str, latest: &[impl AsRef<str>]) {
        let prefix = format!("{ns}/");
        self.locked().retain(|(secret, _), _| {
            secret
                .strip_prefix(&prefix)
                .is_none_or(|name| latest.iter().any(|l| l.as_ref() == name))
        });
    }

    /// Forgets every release of `ns` (a namespace deleted or excluded).
    pub fn forget_namespace(&self, ns: &str) {
        self.keep_latest(ns, &[] as &[&str]);
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Release>> {
        self.decoded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The key [`HASH_KEY_SECRET`] holds, if it exists.
async fn read_key(api: &Api<Secret>) -> anyhow::Result<Option<helm::HashKey>> {
    let Some(secret) = api.get_opt(HASH_KEY_SECRET).await? else {
        return Ok(None);
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(HASH_KEY_ENTRY))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    helm::HashKey::new(bytes).map(Some).ok_or_else(|| {
        anyhow::anyhow!(
            "data.{HASH_KEY_ENTRY} is not {} bytes long",
            helm::HashKey::LEN
        )
    })
}

/// Creates [`HASH_KEY_SECRET`] with a new random key; if another manager created it first,
/// its key.
async fn create_key(api: &Api<Secret>) -> anyhow::Result<helm::HashKey> {
    let mut bytes = [0u8; helm::HashKey::LEN];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": HASH_KEY_SECRET,
            "labels": {"app.kubernetes.io/managed-by": "moonin"}
        },
        "type": "Opaque",
        "immutable": true,
        "data": {HASH_KEY_ENTRY: k8s_openapi::ByteString(bytes.to_vec())}
    }))?;
    let pp = kube::api::PostParams {
        field_manager: Some(crate::api::field_manager::DISCOVERY.to_string()),
        ..kube::api::PostParams::default()
    };
    match api.create(&pp, &secret).await {
        Ok(_) => Ok(helm::HashKey::new(&bytes).expect("32 bytes")),
        Err(kube::Error::Api(e)) if e.code == 409 => read_key(api)
            .await?
            .ok_or_else(|| anyhow::anyhow!("created by another manager, then gone")),
        Err(e) => Err(e.into()),
    }
}

/// The Secret of the latest revision of each release, by release name.
pub fn latest(secrets: Vec<HelmSecretView>) -> BTreeMap<String, HelmSecretView> {
    let mut latest: BTreeMap<String, HelmSecretView> = BTreeMap::new();
    for s in secrets {
        if s.release.is_empty() {
            continue;
        }
        match latest.get(&s.release) {
            Some(l) if l.version >= s.version => {}
            _ => {
                latest.insert(s.release.clone(), s);
            }
        }
    }
    latest
}

/// The metadata-only watch of Helm release Secrets, and the future that drives it. It runs
/// only while the ClusterDiscovery in charge has `spec.helm.enabled` (Secrets are not even
/// listed otherwise; see [`opt_in::watch`]). A change marks its namespace.
pub fn watch(
    client: Client,
    enabled: impl Fn() -> bool + Clone + Send + Sync + 'static,
    helm: Arc<HelmState>,
    pending: Arc<Pending>,
) -> (Projections<HelmSecretView>, BoxFuture<'static, ()>) {
    let on_refusal = {
        let pending = pending.clone();
        move |refused: bool| {
            if helm.access.watch_refused(refused) {
                pending.mark(Mark::cluster());
            }
        }
    };
    let events = opt_in::watch(
        Api::<PartialObjectMeta<Secret>>::all(client),
        watcher::Config::default()
            .labels("owner=helm")
            .page_size(500),
        "Helm release Secrets",
        enabled,
        on_refusal,
    )
    .map(|e| e.map(all_valid))
    .boxed();
    projections_with(
        events,
        helm_secret_view,
        Box::new(move |c| {
            if let Change::Object { key, .. } = c {
                pending.mark(Mark::namespace(&key.0));
            }
        }),
    )
}

/// The latest release of each Helm release in `ns`, decoded (and cached by Secret
/// resourceVersion).
pub async fn releases(
    client: &Client,
    secrets: &Projections<HelmSecretView>,
    helm: &HelmState,
    ns: &str,
) -> Vec<Release> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    // Asked for at most once per call, and only when a release is to be decoded.
    let key = tokio::sync::OnceCell::new();
    let latest = latest(secrets.in_namespace(ns));
    let names: Vec<String> = latest.values().map(|s| s.name.clone()).collect();
    helm.keep_latest(ns, &names);
    for (release, s) in latest {
        let cache_key = (format!("{ns}/{}", s.name), s.resource_version.clone());
        let cached = helm.cached(&cache_key);
        if let Some(c) = cached.clone().filter(|c| c.1.values_hash.is_some()) {
            out.push(c);
            continue;
        }
        let key = key.get_or_init(|| helm.hash_key(client)).await.clone();
        // Decoded without the key: again only once there is one.
        if let Some(c) = cached.filter(|_| key.is_none()) {
            out.push(c);
            continue;
        }
        // One Secret at a time, only when it changed; its data is dropped at the end of
        // this block and never logged.
        let decoded = match api.get(&s.name).await {
            Ok(secret) => {
                let payload = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get("release"))
                    .map(|b| b.0.clone())
                    .unwrap_or_default();
                helm::sanitise_release(&payload, key.as_ref()).map_err(|e| e.reason().to_string())
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                helm.access
                    .read_refused(format!("reading Secret {ns}/{} is forbidden", s.name));
                continue;
            }
            Err(e) => {
                tracing::warn!(namespace = ns, secret = %s.name, error = %brief(&e), "reading a Helm release Secret failed");
                continue;
            }
        };
        match decoded {
            Ok(r) => {
                let rev = HelmRevision {
                    release: release.clone(),
                    revision: r.revision,
                    chart: r.chart.name.clone().unwrap_or_default(),
                    version: r.chart.version.clone().unwrap_or_default(),
                };
                let entry = (release, HelmRelease::from(r), rev);
                helm.decoded(cache_key, entry.clone());
                out.push(entry);
            }
            Err(reason) => {
                tracing::warn!(namespace = ns, secret = %s.name, %reason, "a Helm release Secret could not be decoded; skipped");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, release: &str, version: i64) -> HelmSecretView {
        HelmSecretView {
            name: name.into(),
            release: release.into(),
            version,
            resource_version: "1".into(),
        }
    }

    #[test]
    fn only_the_latest_revision_of_each_release_is_read() {
        let latest = latest(vec![
            secret("sh.helm.release.v1.shop.v1", "shop", 1),
            secret("sh.helm.release.v1.shop.v3", "shop", 3),
            secret("sh.helm.release.v1.shop.v2", "shop", 2),
            secret("sh.helm.release.v1.db.v1", "db", 1),
            secret("unlabelled", "", 9),
        ]);
        let picked: Vec<(&str, &str)> = latest
            .iter()
            .map(|(r, s)| (r.as_str(), s.name.as_str()))
            .collect();
        assert_eq!(
            picked,
            [
                ("db", "sh.helm.release.v1.db.v1"),
                ("shop", "sh.helm.release.v1.shop.v3")
            ]
        );
    }

    #[test]
    fn a_decoded_release_lifts_a_refused_read_and_replaces_earlier_versions() {
        let helm = HelmState::new("moonin-system");
        helm.access
            .read_refused("reading Secret shop/x is forbidden".into());
        assert!(helm.access.denied().is_some());
        let release = |revision| {
            (
                "shop".to_string(),
                HelmRelease::default(),
                HelmRevision {
                    release: "shop".into(),
                    revision,
                    chart: "shop".into(),
                    version: "1.0.0".into(),
                },
            )
        };
        let key = |rv: &str| {
            (
                "shop/sh.helm.release.v1.shop.v1".to_string(),
                rv.to_string(),
            )
        };
        helm.decoded(key("1"), release(1));
        assert_eq!(helm.access.denied(), None);
        helm.decoded(key("2"), release(2));
        assert_eq!(
            helm.cached(&key("1")),
            None,
            "an earlier version of a Secret goes"
        );
        assert_eq!(helm.cached(&key("2")), Some(release(2)));
    }

    #[test]
    fn only_the_latest_revisions_and_live_namespaces_stay_cached() {
        let helm = HelmState::new("moonin-system");
        let release = |ns: &str, revision| {
            (
                ns.to_string(),
                HelmRelease::default(),
                HelmRevision {
                    release: "web".into(),
                    revision,
                    chart: "web".into(),
                    version: "1.0.0".into(),
                },
            )
        };
        let key = |ns: &str, v: i64| (format!("{ns}/sh.helm.release.v1.web.v{v}"), "1".into());
        helm.decoded(key("shop", 1), release("shop", 1));
        helm.decoded(key("shop", 2), release("shop", 2));
        helm.decoded(key("shopfront", 1), release("shopfront", 1));
        helm.keep_latest("shop", &["sh.helm.release.v1.web.v2"]);
        assert_eq!(
            helm.cached(&key("shop", 1)),
            None,
            "an upgrade's earlier Secret goes"
        );
        assert_eq!(helm.cached(&key("shop", 2)), Some(release("shop", 2)));
        assert_eq!(
            helm.cached(&key("shopfront", 1)),
            Some(release("shopfront", 1)),
            "another namespace, even one whose name starts alike, stays"
        );
        helm.forget_namespace("shopfront");
        assert_eq!(helm.cached(&key("shopfront", 1)), None);
        assert_eq!(helm.locked().len(), 1);
    }
}
