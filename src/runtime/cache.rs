//! Typed caches the controllers read from, and the reconcile requests they raise.
//!
//! A cache is a reflector store fed by a watch that decodes each object on its own
//! ([`super::decode`]): an object that does not decode is recorded in [`super::invalid`] and
//! kept out of the store (a version of it that decoded before is evicted, so nothing acts on
//! a stale spec), and the watch goes on with every other object.
//!
//! The store's own event stream triggers reconciles (through `Controller::reconcile_on`),
//! so a reconcile never reads a store older than its trigger. Each kind is watched once:
//! a controller of that kind is built on the same store (`Controller::for_stream`), and
//! other kinds' caches raise its requests through triggers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use futures::{FutureExt, StreamExt, future::BoxFuture};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};

use super::access;
use super::{decode::Decoded, errors, invalid};

/// Called with every object the cache applies or deletes, after the store has it: a
/// reconcile triggered from here always reads at least what triggered it. An object applied
/// again unchanged but for its resourceVersion, as trimmed (a Deployment's status, which its
/// cache does not keep), triggers nothing: no reconcile could read a difference. After a
/// relist (a watch that expired, 410 Gone), with every object listed and every object the
/// relist no longer lists, once the store shows the relist.
pub type Trigger<K> = Box<dyn Fn(&K) + Send + Sync>;

/// The bound every cached kind meets.
pub trait Cached:
    Resource<DynamicType = ()>
    + Clone
    + PartialEq
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<
    K: Resource<DynamicType = ()>
        + Clone
        + PartialEq
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
> Cached for K
{
}

/// A store of every `K` in the cluster kept in sync by one watch, trimmed by `trim` before
/// anything is stored, calling each of `triggers` after each change, and the future that
/// drives it (poll it for as long as the store is used).
pub fn cache<K: Cached>(
    client: Client,
    config: watcher::Config,
    trim: fn(&mut K),
    triggers: Vec<Trigger<K>>,
) -> (Store<K>, BoxFuture<'static, ()>) {
    cache_from::<K, K>(
        client,
        config,
        move |mut k| {
            trim(&mut k);
            k
        },
        triggers,
    )
}

/// A store of every `K` like [`cache`]'s, its objects decoded from the wire as `W` (a
/// type that reads only the fields a controller keeps, skipping the rest unread) and
/// turned into what is stored by `keep`.
pub fn cache_from<W: Cached, K: Cached>(
    client: Client,
    config: watcher::Config,
    keep: impl Fn(W) -> K + Send + 'static,
    triggers: Vec<Trigger<K>>,
) -> (Store<K>, BoxFuture<'static, ()>) {
    let (store, mut writer) = reflector::store::<K>();
    let kind = K::kind(&()).to_string();
    let events = typed_events(Api::<Decoded<W>>::all(client), config, keep, store.clone());
    let reader = store.clone();
    let mut relist: Option<Relist<K>> = None;
    let drive = events
        .for_each(move |event| {
            let fire = |o: &K| {
                for t in &triggers {
                    t(o);
                }
            };
            let mut event = event;
            let changed = match &mut event {
                Ok(watcher::Event::Apply(o)) => {
                    changed(reader.get(&ObjectRef::from_obj(o)).as_deref(), o)
                }
                _ => true,
            };
            if let Ok(e) = &event {
                writer.apply_watcher_event(e);
            }
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                    access::watch_ok(&kind);
                    if changed {
                        fire(&o);
                    }
                }
                // A (re)list shows in the store only once it is complete: its objects trigger
                // then, with those it no longer lists. `Init` comes before the list is asked
                // for (and again before each retry of a refused one): it proves no access.
                Ok(watcher::Event::Init) => {
                    relist = Some(Relist::start(reader.state()));
                }
                Ok(watcher::Event::InitApply(o)) => {
                    access::watch_ok(&kind);
                    if let Some(r) = relist.as_mut() {
                        r.listed(&o);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    access::watch_ok(&kind);
                    for o in relist.take().map(|r| r.done(&reader)).unwrap_or_default() {
                        fire(&o);
                    }
                }
                Err(e) => access::watch_failed(&kind, &e),
            }
            futures::future::ready(())
        })
        .boxed();
    (store, drive)
}

/// Whether `new` differs from the `stored` version of it in more than its resourceVersion.
/// `new` is compared under the stored resourceVersion and given its own back: no copy of
/// either object is made.
fn changed<K: Cached>(stored: Option<&K>, new: &mut K) -> bool {
    let Some(stored) = stored else {
        return true;
    };
    let own = std::mem::replace(
        &mut new.meta_mut().resource_version,
        stored.meta().resource_version.clone(),
    );
    let changed = stored != new;
    new.meta_mut().resource_version = own;
    changed
}

/// A relist in progress: what the store held when it began, and what it has listed so far.
/// The store shows a relist only once it is complete, so its triggers wait until then
/// ([`Relist::done`]); a trigger fired earlier would reconcile on the store from before.
struct Relist<K: Cached> {
    before: Vec<Arc<K>>,
    listed: std::collections::HashSet<ObjectRef<K>>,
}

impl<K: Cached> Relist<K> {
    fn start(before: Vec<Arc<K>>) -> Self {
        Self {
            before,
            listed: std::collections::HashSet::new(),
        }
    }

    fn listed(&mut self, o: &K) {
        self.listed.insert(ObjectRef::from_obj(o));
    }

    /// Once the store shows the relist: every object listed, as stored now, and every object
    /// stored before that it no longer lists (deleted while the watch was away, which no
    /// event will say), as it was.
    fn done(self, store: &Store<K>) -> Vec<Arc<K>> {
        let Self { before, listed } = self;
        let gone = before
            .into_iter()
            .filter(|o| !listed.contains(&ObjectRef::from_obj(o.as_ref())));
        listed
            .iter()
            .filter_map(|r| store.get(r))
            .chain(gone)
            .collect()
    }
}

/// The watch of `api` as typed events for a store of `K` (read through `store`): objects
/// that do not decode are recorded in [`invalid`] and left out, and a stored version of such
/// an object is deleted from the store.
fn typed_events<W: Cached, K: Cached>(
    api: Api<Decoded<W>>,
    config: watcher::Config,
    keep: impl Fn(W) -> K + Send + 'static,
    store: Store<K>,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let typed = match event {
                Ok(e) => {
                    invalid::observe(&e);
                    typed_event(map_event(e, &keep), |meta| {
                        let mut r = ObjectRef::<K>::new(meta.name.as_deref().unwrap_or_default());
                        if let Some(ns) = &meta.namespace {
                            r = r.within(ns);
                        }
                        store.get(&r).map(|k| (*k).clone())
                    })
                    .map(Ok)
                }
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(typed)
        })
}

/// `event` with each object that decoded turned into `K` by `keep`.
fn map_event<W, K>(
    event: watcher::Event<Decoded<W>>,
    keep: impl Fn(W) -> K,
) -> watcher::Event<Decoded<K>> {
    use watcher::Event::*;
    let map = |d: Decoded<W>| match d {
        Decoded::Valid(w) => Decoded::Valid(keep(w)),
        Decoded::Invalid(u) => Decoded::Invalid(u),
    };
    match event {
        Init => Init,
        InitDone => InitDone,
        InitApply(d) => InitApply(map(d)),
        Apply(d) => Apply(map(d)),
        Delete(d) => Delete(map(d)),
    }
}

/// One event of a decoding watch as an event of the typed store: an object that does not
/// decode is dropped, and if `stored` finds an earlier version of it, that is deleted.
pub fn typed_event<K>(
    event: watcher::Event<Decoded<K>>,
    stored: impl Fn(&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<K>,
) -> Option<watcher::Event<K>>
where
    K: Resource,
{
    use watcher::Event::*;
    match event {
        Init => Some(Init),
        InitDone => Some(InitDone),
        InitApply(Decoded::Valid(k)) => Some(InitApply(k)),
        // Left out of the relist: the store drops whatever it held under that name.
        InitApply(Decoded::Invalid(_)) => None,
        Apply(Decoded::Valid(k)) => Some(Apply(k)),
        Delete(Decoded::Valid(k)) => Some(Delete(k)),
        Apply(Decoded::Invalid(u)) | Delete(Decoded::Invalid(u)) => stored(&u.metadata).map(Delete),
    }
}

/// Runs each of a controller's watches (the drives [`cache`] returns, and any other) on a
/// task of its own: a burst of one kind's events is decoded on whichever core is free and
/// never holds back the reading of another kind's watch. A watch whose events are not read
/// in time costs everyone: the API server holds back that resource's events from every
/// watcher (up to 100 ms), then closes it. The tasks carry `controller`'s name for
/// [`access`]'s reports and end, aborted, when the set is dropped.
pub fn spawn_watches(
    controller: &'static str,
    drives: Vec<BoxFuture<'static, ()>>,
) -> tokio::task::JoinSet<()> {
    let mut watches = tokio::task::JoinSet::new();
    for drive in drives {
        watches.spawn(access::CONTROLLER.scope(controller, drive));
    }
    watches
}

/// Whether the API server serves `K` (its CRD is installed): a one-item list answers; a
/// 404 says it is not. An error that may pass (no answer, a 5xx while the API server starts)
/// is asked again, 5 times over about 30 s: the answer holds for the life of the process.
/// A refusal, or an error that outlasts the retries, is logged and read as "not installed",
/// so a controller runs without the kind.
pub async fn installed<K: Cached>(client: &Client) -> bool {
    let api: Api<K> = Api::all(client.clone());
    let mut pause = std::time::Duration::from_secs(2);
    let one = kube::api::ListParams::default().limit(1);
    for tries_left in (0..5).rev() {
        let asked = tokio::time::timeout(std::time::Duration::from_secs(10), api.list(&one));
        let e = match asked.await {
            Ok(Ok(_)) => return true,
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => return false,
            Ok(Err(e)) => e,
            Err(_) => kube::Error::Service("no answer in 10s".into()),
        };
        if !errors::may_pass(&e) || tries_left == 0 {
            tracing::warn!(
                kind = %K::kind(&()),
                error = %super::errors::brief(&e),
                "could not tell whether the kind is served; running without it"
            );
            return false;
        }
        tracing::info!(
            kind = %K::kind(&()),
            error = %super::errors::brief(&e),
            "could not tell yet whether the kind is served; asking again"
        );
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
    false
}

/// Writes whose echo on the watch should not wake the object they were written to: a
/// reconcile's own status write tells it nothing new. Cheap to clone.
#[derive(Clone, Default)]
pub struct Echoes {
    /// `(namespace, name)` → the resourceVersion the write returned.
    expected: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl Echoes {
    /// Remembers that `written` (as the API server returned it) is this process's own write.
    pub fn expect<K: Resource>(&self, written: &K) {
        if let Some(rv) = written.resource_version() {
            self.expected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key_of(written), rv);
        }
    }

    /// Whether `seen` is the echo of a write remembered by [`Echoes::expect`]. Any version of
    /// the object seen ends the expectation.
    pub fn is_echo<K: Resource>(&self, seen: &K) -> bool {
        let mut g = self.expected.lock().unwrap_or_else(|e| e.into_inner());
        match g.remove(&key_of(seen)) {
            Some(rv) => seen.resource_version().as_ref() == Some(&rv),
            None => false,
        }
    }
}

/// How long a write of this process is waited for in the caches, at most.
pub const OWN_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The resourceVersions this process's writes returned, by `(kind, namespace, name)`, so that
/// a reconcile can tell whether its caches show its own last writes yet ("read your
/// writes"). A reconcile decided from a cache that misses them would plan those writes again
/// (refused by their preconditions) or write a status that the next one overwrites.
#[derive(Clone, Default)]
pub struct OwnWrites {
    written: Arc<Mutex<WrittenVersions>>,
}

/// `(kind, namespace, name)` → the resourceVersion a write returned, and when.
type WrittenVersions = HashMap<(String, String, String), (u64, std::time::Instant)>;

impl OwnWrites {
    /// Remembers that this process wrote `kind` `namespace/name`, which is now at `rv`.
    /// A resourceVersion that is not a number (the API server does not promise one) is not
    /// remembered: nothing is waited for.
    pub fn record(&self, kind: &str, namespace: &str, name: &str, rv: Option<&str>) {
        let Some(rv) = rv.and_then(|r| r.parse::<u64>().ok()) else {
            return;
        };
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                (kind.to_string(), namespace.to_string(), name.to_string()),
                (rv, std::time::Instant::now()),
            );
    }

    /// Whether the cached copy of `kind` `namespace/name`, at `cached_rv`, predates this
    /// process's last write of it (made less than [`OWN_WRITE_WAIT`] ago). Once the cache has
    /// caught up, or the wait is over, the write is forgotten.
    pub fn behind(&self, kind: &str, namespace: &str, name: &str, cached_rv: &str) -> bool {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        let mut g = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let Some((rv, at)) = g.get(&key).copied() else {
            return false;
        };
        let behind = at.elapsed() < OWN_WRITE_WAIT
            && cached_rv.parse::<u64>().is_ok_and(|cached| cached < rv);
        if !behind {
            g.remove(&key);
        }
        behind
    }
}

fn key_of<K: Resource>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// A trigger that asks the controller of `K` to reconcile each changed object itself,
/// except for the echoes of its own writes.
pub fn reconcile_itself<K: Cached>(
    tx: futures::channel::mpsc::UnboundedSender<ObjectRef<K>>,
    echoes: Echoes,
) -> Trigger<K> {
    Box::new(move |o: &K| {
        if !echoes.is_echo(o) {
            let _ = tx.unbounded_send(ObjectRef::from_obj(o));
        }
    })
}

/// Reports one result of a kube-runtime `Controller` of `kind`: a refused watch is a
/// missing permission ([`access`]); a reconcile, done or failed (the error policy reported
/// it), says nothing of the kind's watch, which its cache reports; an object deleted before
/// its turn came needs nothing; anything else is logged.
pub fn controller_result<T, R>(
    kind: &'static str,
) -> impl FnMut(
    Result<T, kube::runtime::controller::Error<R, watcher::Error>>,
) -> futures::future::Ready<()>
where
    R: std::error::Error + 'static,
{
    use kube::runtime::controller::Error;
    move |result| {
        match result {
            Err(Error::QueueError(e)) => access::watch_failed(kind, &e),
            Ok(_) | Err(Error::ReconcilerFailed(..) | Error::ObjectNotFound(_)) => {}
            Err(e) => tracing::warn!(%kind, error = %e, "controller"),
        }
        futures::future::ready(())
    }
}

/// A channel of reconcile requests for `Controller::reconcile_on`, and the sending half
/// for triggers.
pub fn requests<T>() -> (
    futures::channel::mpsc::UnboundedSender<ObjectRef<T>>,
    futures::channel::mpsc::UnboundedReceiver<ObjectRef<T>>,
)
where
    T: Resource<DynamicType = ()>,
{
    futures::channel::mpsc::unbounded()
}

/// Strips what no controller reads from any cached object: `managedFields` are kept only
/// where a controller needs them (scaling reads them on HPAs and ScaledObjects).
pub fn strip_last_applied(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// The annotation `kubectl apply` (client-side) leaves: a copy of the whole object as
/// applied, which no controller reads.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sandbox::SandboxClaim;
    use crate::runtime::decode::decode;
    use serde_json::json;

    fn claim(name: &str, rv: &str, ok: bool) -> Decoded<SandboxClaim> {
        let pool_ref = if ok { json!({"name": "p"}) } else { json!("p") };
        decode(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "spec": {"poolRef": pool_ref},
        }))
    }

    fn name<K: Resource>(e: &Option<watcher::Event<K>>) -> String {
        match e {
            Some(watcher::Event::Apply(k)) => format!("apply {}", k.name_any()),
            Some(watcher::Event::InitApply(k)) => format!("init {}", k.name_any()),
            Some(watcher::Event::Delete(k)) => format!("delete {}", k.name_any()),
            Some(_) => "marker".into(),
            None => "-".into(),
        }
    }

    #[test]
    fn own_writes_are_waited_for_until_the_cache_shows_them() {
        let own = OwnWrites::default();
        assert!(
            !own.behind("Deployment", "shop", "web", "10"),
            "never written"
        );
        own.record("Deployment", "shop", "web", Some("12"));
        assert!(
            own.behind("Deployment", "shop", "web", "11"),
            "the cache is behind"
        );
        assert!(!own.behind("HorizontalPodAutoscaler", "shop", "web", "11"));
        assert!(!own.behind("Deployment", "shop", "web", "12"), "caught up");
        assert!(
            !own.behind("Deployment", "shop", "web", "11"),
            "forgotten once seen"
        );
        own.record("Deployment", "shop", "web", Some("20"));
        assert!(
            !own.behind("Deployment", "shop", "web", "25"),
            "a later write"
        );
        own.record("Deployment", "shop", "api", Some("opaque"));
        own.record("Deployment", "shop", "db", Some("30"));
        assert!(
            !own.behind("Deployment", "shop", "api", "1"),
            "not a number"
        );
        assert!(
            !own.behind("Deployment", "shop", "db", "opaque"),
            "not a number"
        );
    }

    #[test]
    fn an_object_that_stops_decoding_is_evicted_and_one_never_seen_is_skipped() {
        let stored = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            (m.name.as_deref() == Some("known"))
                .then(|| claim("known", "1", true).valid().expect("a valid claim"))
        };
        use watcher::Event::*;
        let cases = [
            (Apply(claim("known", "2", false)), "delete known"),
            (Apply(claim("new", "2", false)), "-"),
            (InitApply(claim("known", "2", false)), "-"),
            (Delete(claim("known", "2", false)), "delete known"),
            (Apply(claim("new", "3", true)), "apply new"),
            (InitApply(claim("new", "3", true)), "init new"),
            (Init, "marker"),
        ];
        for (event, want) in cases {
            assert_eq!(name(&typed_event(event, stored)), want);
        }
    }

    #[test]
    fn a_relist_triggers_once_the_store_shows_it_and_names_what_it_dropped() {
        let valid = |name: &str, rv: &str| claim(name, rv, true).valid().expect("valid");
        let (store, mut writer) = reflector::store::<SandboxClaim>();
        for o in [valid("kept", "1"), valid("gone", "1")] {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        // The watch expired; the relist lists `kept` at a new version and `new`, not `gone`.
        let mut relist = Relist::start(store.state());
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in [valid("kept", "7"), valid("new", "8")] {
            relist.listed(&o);
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        // Until InitDone the store still shows the old world: nothing may trigger yet.
        assert_eq!(store.state().len(), 2);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut fired: Vec<String> = relist
            .done(&store)
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    o.name_any(),
                    o.resource_version().unwrap_or_default()
                )
            })
            .collect();
        fired.sort();
        assert_eq!(fired, ["gone 1", "kept 7", "new 8"]);
    }

    #[test]
    fn a_new_resource_version_alone_is_no_change() {
        let valid = |rv: &str, pool: &str| {
            let mut c = claim("c", rv, true).valid().expect("valid");
            c.spec.pool_ref.as_mut().expect("a pool").name = pool.into();
            c
        };
        assert!(changed(None, &mut valid("1", "p")), "never stored");
        let stored = valid("1", "p");
        let mut again = valid("2", "p");
        assert!(!changed(Some(&stored), &mut again));
        assert_eq!(again.resource_version().as_deref(), Some("2"), "its own");
        assert!(changed(Some(&stored), &mut valid("2", "q")));
    }

    #[test]
    fn only_the_echo_of_our_own_write_is_skipped() {
        let echoes = Echoes::default();
        let ours = claim("c", "5", true).valid().expect("valid");
        let theirs = claim("c", "6", true).valid().expect("valid");
        echoes.expect(&ours);
        assert!(echoes.is_echo(&ours));
        // Seen once: the same version again (a relist) wakes the object.
        assert!(!echoes.is_echo(&ours));
        echoes.expect(&ours);
        assert!(!echoes.is_echo(&theirs));
        assert!(!echoes.is_echo(&ours));
    }

    /// A watch busy decoding on one core does not hold back another: the second runs on the
    /// other worker while the first never yields (one task polling both would run the second
    /// only after the first gave up, 5 s later). Both carry the controller's name.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_watch_does_not_hold_back_another_and_both_carry_the_controllers_name() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (other_ran, busy_saw_it) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let names = Arc::new(Mutex::new(Vec::new()));
        let (flag, saw, seen) = (other_ran.clone(), busy_saw_it.clone(), names.clone());
        let busy: BoxFuture<'static, ()> = Box::pin(async move {
            seen.lock().unwrap().push(access::CONTROLLER.with(|c| *c));
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !flag.load(Ordering::Acquire) && std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            saw.store(flag.load(Ordering::Acquire), Ordering::Release);
        });
        let (flag, seen) = (other_ran.clone(), names.clone());
        let other: BoxFuture<'static, ()> = Box::pin(async move {
            seen.lock().unwrap().push(access::CONTROLLER.with(|c| *c));
            flag.store(true, Ordering::Release);
        });
        spawn_watches("cache-test", vec![busy, other])
            .join_all()
            .await;
        assert!(
            busy_saw_it.load(Ordering::Acquire),
            "the second watch ran only after the first"
        );
        assert_eq!(*names.lock().unwrap(), vec!["cache-test", "cache-test"]);
    }
}
