//! The Helm release Secrets: a metadata-only watch (`owner=helm`: their data never arrives
//! through it), and the latest revision of each release read and decoded one Secret at a
//! time, when it changed, by the sanitiser ([`helm`]).
//!
//! Reading Secrets is opt-in (`config/rbac-helm`): a refusal is reported as
//! `HelmAccess=False` (see [`HelmState`]), not as the manager's missing permission.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture, stream::BoxStream};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};

use super::{
    dirty::{Mark, Pending},
    helm,
    index::{Change, Projections},
    watch::{all_valid, projections_with},
};
use crate::api::discovery::{HelmRelease, HelmRevision};
use crate::runtime::{access, errors::brief};

/// How long a refused Helm Secret watch waits before it asks again.
const HELM_DENIED_RETRY: Duration = Duration::from_secs(60);
/// How often a watch waiting for Helm discovery to be switched on looks again.
const ENABLED_POLL: Duration = Duration::from_secs(2);
/// `HelmAccess` while the watch's list is refused.
const DENIED: &str = "listing Helm release Secrets is forbidden";

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
#[derive(Default)]
pub struct HelmState(Mutex<HelmInner>);

#[derive(Default)]
struct HelmInner {
    decoded: HashMap<(String, String), Release>,
    /// The last refusal reading Secrets, if any (a message).
    denied: Option<String>,
}

impl HelmState {
    /// Records whether the watch's list is refused; true when that changes what
    /// `HelmAccess` says. Only the watch lifts its own refusal: a refused read of one
    /// Secret stands until a read succeeds.
    pub fn watch_refused(&self, refused: bool) -> bool {
        let mut g = self.locked();
        let before = g.denied.clone();
        if refused {
            g.denied = Some(DENIED.to_string());
        } else if g.denied.as_deref() == Some(DENIED) {
            g.denied = None;
        }
        before != g.denied
    }

    /// Why reading Secrets is refused, if it is.
    pub fn denied(&self) -> Option<String> {
        self.locked().denied.clone()
    }

    fn cached(&self, key: &(String, String)) -> Option<Release> {
        self.locked().decoded.get(key).cloned()
    }

    fn read_refused(&self, why: String) {
        self.locked().denied = Some(why);
    }

    /// A Secret read and decoded: reading works, and earlier versions of it go.
    fn decoded(&self, key: (String, String), release: Release) {
        let mut g = self.locked();
        g.denied = None;
        g.decoded.retain(|k, _| k.0 != key.0);
        g.decoded.insert(key, release);
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HelmInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
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
/// listed otherwise); a refused list is retried after [`HELM_DENIED_RETRY`] rather than at
/// the watcher's pace. A change marks its namespace.
pub fn watch(
    client: Client,
    enabled: impl Fn() -> bool + Clone + Send + Sync + 'static,
    helm: Arc<HelmState>,
    pending: Arc<Pending>,
) -> (Projections<HelmSecretView>, BoxFuture<'static, ()>) {
    let on_refusal = {
        let pending = pending.clone();
        move |refused: bool| {
            if helm.watch_refused(refused) {
                pending.mark(Mark::cluster());
            }
        }
    };
    // One round per period of Helm being enabled: a fresh watch (its first list replaces the
    // index), ended when Helm is disabled or the list is refused.
    // The state is the previous round's "refused" flag: `flat_map` drains a round before it
    // asks for the next, so the flag is final by then.
    let rounds = futures::stream::unfold(Arc::new(AtomicBool::new(false)), move |refused_before| {
        let (client, enabled, on_refusal) = (client.clone(), enabled.clone(), on_refusal.clone());
        async move {
            if refused_before.load(Ordering::Acquire) {
                tokio::time::sleep(HELM_DENIED_RETRY).await;
            }
            while !enabled() {
                tokio::time::sleep(ENABLED_POLL).await;
            }
            let refused = Arc::new(AtomicBool::new(false));
            Some((round(client, enabled, on_refusal, refused.clone()), refused))
        }
    });
    let events = rounds
        .flat_map(|round| round)
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

type SecretEvents =
    BoxStream<'static, Result<watcher::Event<PartialObjectMeta<Secret>>, watcher::Error>>;

/// One round of the watch: until Helm is disabled, or the list is refused (then `refused`
/// is set). Whether listing is allowed goes to `on_refusal` as the events say.
fn round(
    client: Client,
    enabled: impl Fn() -> bool + Send + 'static,
    on_refusal: impl Fn(bool) + Send + 'static,
    refused: Arc<AtomicBool>,
) -> SecretEvents {
    watcher(
        Api::<PartialObjectMeta<Secret>>::all(client),
        watcher::Config::default()
            .labels("owner=helm")
            .page_size(500),
    )
    .default_backoff()
    .inspect(move |event| {
        let denied = match event {
            Err(e) if access::forbidden(e).is_some() => Some(true),
            Err(e) => {
                tracing::warn!(error = %crate::runtime::errors::brief_watch(e), "Helm release Secrets: watch error; retrying");
                None
            }
            // `Init` comes before the list: only data says the list was allowed.
            Ok(watcher::Event::Init) => None,
            Ok(_) => Some(false),
        };
        if let Some(denied) = denied {
            on_refusal(denied);
        }
    })
    .take_while(move |event| {
        let stop = matches!(event, Err(e) if access::forbidden(e).is_some());
        if stop {
            refused.store(true, Ordering::Release);
        }
        futures::future::ready(!stop && enabled())
    })
    .boxed()
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
    for (release, s) in latest(secrets.in_namespace(ns)) {
        let key = (format!("{ns}/{}", s.name), s.resource_version.clone());
        if let Some(c) = helm.cached(&key) {
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
                helm::sanitise_release(&payload).map_err(|e| e.reason().to_string())
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                helm.read_refused(format!("reading Secret {ns}/{} is forbidden", s.name));
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
                helm.decoded(key, entry.clone());
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
    fn a_refused_watch_is_reported_once_and_lifted_by_its_own_success() {
        let helm = HelmState::default();
        assert!(
            !helm.watch_refused(false),
            "allowed from the start: no change"
        );
        assert!(helm.watch_refused(true));
        assert!(!helm.watch_refused(true), "still refused: no change");
        assert_eq!(helm.denied().as_deref(), Some(DENIED));
        assert!(helm.watch_refused(false));
        assert_eq!(helm.denied(), None);
    }

    #[test]
    fn a_refused_read_stands_until_a_read_succeeds() {
        let helm = HelmState::default();
        helm.read_refused("reading Secret shop/x is forbidden".into());
        assert!(
            !helm.watch_refused(false),
            "the watch does not lift a refused read"
        );
        assert!(helm.denied().is_some());
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
        assert_eq!(helm.denied(), None);
        helm.decoded(key("2"), release(2));
        assert_eq!(
            helm.cached(&key("1")),
            None,
            "an earlier version of a Secret goes"
        );
        assert_eq!(helm.cached(&key("2")), Some(release(2)));
    }
}
