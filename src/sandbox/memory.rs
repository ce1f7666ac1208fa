//! What the sandbox reconcilers remember between reconciles, in process memory. None of it
//! holds truth (ARCHITECTURE.md, rule 2): each entry either bridges the lag of a cache behind
//! this process's own writes (and is forgotten once the cache shows the write, or after
//! [`IN_FLIGHT_TTL`]), or refines a figure the objects also carry. A restart loses it all
//! and the controllers still converge.
//!
//! Each type guards itself (a lock held for no `await`, except [`GroupLocks`], whose point
//! is to be held across the writes of one decision). Nothing here reads the clock: the
//! reconcilers pass the `now` their Load read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::autoscaler::{Arrival, Recommendation, RecommendationHistory};
use super::pool::{self, ClaimView, IN_FLIGHT_TTL, InFlightBinds, PodView};
use crate::runtime::backoff::Backoff;

/// Everything the sandbox reconcilers remember between reconciles.
#[derive(Default)]
pub struct Memory {
    /// Pod creates and binds the caches do not show yet.
    pub in_flight: InFlight,
    /// One autoscaler decision at a time per scaling group.
    pub groups: GroupLocks,
    /// Pool sizes written that the Pool cache does not show yet.
    pub sizes: WrittenSizes,
    /// When each Pending claim was first seen.
    pub first_seen: FirstSeen,
    /// The autoscaler's recommendations per Pool.
    pub history: Histories,
    /// Claims seen per Pool in the claim history's open slot.
    pub arrivals: Arrivals,
    /// When each Pool's status was last written.
    pub status_writes: StatusWrites,
    /// Names for new sandbox Pods.
    pub names: PodNames,
    /// Reconciles that failed on a refusal, per object (`Kind ns/name`).
    pub refusals: Backoff,
    /// Pod creates a Pool's template drew refusals for, per Pool (`ns/name`).
    pub refused_creates: Backoff,
    /// Binds, releases and deletes of a Pool's Pods the API server refused (an admission
    /// policy or webhook on Pods), per Pool (`ns/name`).
    pub refused_writes: Backoff,
}

/// The lock of `m`, also after a panic elsewhere left it poisoned: every value guarded here
/// stays consistent between two statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether an entry made `at` is younger than [`IN_FLIGHT_TTL`] at `now`.
fn fresh(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < IN_FLIGHT_TTL.unsigned_abs()
}

/// A claim as a Pod's annotation names it: `(name, uid)`.
pub type ClaimRef = (String, String);

/// Pod writes of this process the caches do not show yet, per Pool (`ns/name`): Pods
/// created, Pods deleted (name → UID), Pods patched as bound (→ claim), claims written as
/// bound (claim UID → Pod). Without them a lagging cache would make the pool create a Pod
/// twice, delete a spare Pod in place of a marked one it already deleted, bind one claim
/// twice or hand a just-bound Pod to another claim.
#[derive(Default)]
pub struct InFlight {
    entries: Mutex<InFlightEntries>,
}

#[derive(Default)]
struct InFlightEntries {
    creates: HashMap<String, BTreeMap<String, Instant>>,
    deletes: HashMap<String, BTreeMap<String, (String, Instant)>>,
    pod_binds: HashMap<String, BTreeMap<String, (ClaimRef, Instant)>>,
    claim_binds: HashMap<String, BTreeMap<String, (String, Instant)>>,
}

impl InFlight {
    /// The Pods created for `pool` that `cached` (the Pool's Pods in the cache) does not
    /// show yet. Forgets those it shows and those older than [`IN_FLIGHT_TTL`].
    pub fn creates(&self, pool: &str, cached: &[PodView], now: Instant) -> Vec<String> {
        let mut entries = lock(&self.entries);
        let creates = entries.creates.entry(pool.to_string()).or_default();
        creates.retain(|name, at| !cached.iter().any(|v| &v.name == name) && fresh(*at, now));
        creates.keys().cloned().collect()
    }

    /// A create of `pod` is about to be sent.
    pub fn creating(&self, pool: &str, pod: &str, now: Instant) {
        lock(&self.entries)
            .creates
            .entry(pool.to_string())
            .or_default()
            .insert(pod.to_string(), now);
    }

    /// The create of `pod` was refused: no Pod is coming.
    pub fn create_refused(&self, pool: &str, pod: &str) {
        if let Some(creates) = lock(&self.entries).creates.get_mut(pool) {
            creates.remove(pod);
        }
    }

    /// The delete of `pod` (UID `uid`) went through, or found it gone.
    pub fn deleted(&self, pool: &str, pod: &str, uid: &str, now: Instant) {
        lock(&self.entries)
            .deletes
            .entry(pool.to_string())
            .or_default()
            .insert(pod.to_string(), (uid.to_string(), now));
    }

    /// The Pod patch of a bind succeeded: `pod` is held by `claim`.
    pub fn pod_bound(&self, pool: &str, pod: &str, claim: ClaimRef, now: Instant) {
        lock(&self.entries)
            .pod_binds
            .entry(pool.to_string())
            .or_default()
            .insert(pod.to_string(), (claim, now));
    }

    /// The status write of a bind succeeded: the claim `claim_uid` names `pod`.
    pub fn claim_bound(&self, pool: &str, claim_uid: &str, pod: &str, now: Instant) {
        lock(&self.entries)
            .claim_binds
            .entry(pool.to_string())
            .or_default()
            .insert(claim_uid.to_string(), (pod.to_string(), now));
    }

    /// Overlays the deletes and binds of `pool` younger than [`IN_FLIGHT_TTL`] on the
    /// cached views and forgets those the caches now show: a deleted Pod the cache still
    /// shows as running is shown terminating, as the cache will show it (see
    /// [`InFlightBinds::overlay`] for the binds).
    pub fn overlay(
        &self,
        pool: &str,
        pods: &mut [PodView],
        claims: &mut [ClaimView],
        now: Instant,
    ) {
        let mut entries = lock(&self.entries);
        let deletes = entries.deletes.entry(pool.to_string()).or_default();
        deletes.retain(|name, (uid, at)| {
            let cached = pods
                .iter_mut()
                .find(|v| &v.name == name && &v.uid == uid && !v.terminating);
            match cached {
                Some(v) if fresh(*at, now) => {
                    v.terminating = true;
                    true
                }
                _ => false,
            }
        });
        let binds = entries.binds(pool, now);
        let (seen_pods, seen_claims) = binds.overlay(pods, claims);
        if let Some(m) = entries.pod_binds.get_mut(pool) {
            for p in &seen_pods {
                m.remove(p);
            }
        }
        if let Some(m) = entries.claim_binds.get_mut(pool) {
            for c in &seen_claims {
                m.remove(c);
            }
        }
    }
}

impl InFlightEntries {
    /// The binds of `pool` still in flight, after dropping those older than the TTL.
    fn binds(&mut self, pool: &str, now: Instant) -> InFlightBinds {
        let pods = self.pod_binds.entry(pool.to_string()).or_default();
        pods.retain(|_, (_, at)| fresh(*at, now));
        let claims = self.claim_binds.entry(pool.to_string()).or_default();
        claims.retain(|_, (_, at)| fresh(*at, now));
        InFlightBinds {
            pods: pods
                .iter()
                .map(|(k, (c, _))| (k.clone(), c.clone()))
                .collect(),
            claims: claims
                .iter()
                .map(|(k, (p, _))| (k.clone(), p.clone()))
                .collect(),
        }
    }
}

/// One autoscaler decision at a time per scaling group (`ns/env-uid/group`): the Pools of
/// a group share its `minReplicas` and `maxReplicas`, so a Pool's Load must see the size a
/// sibling's decision just wrote.
#[derive(Default)]
pub struct GroupLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl GroupLocks {
    /// Waits for the group's turn; the turn lasts as long as the guard.
    pub async fn lock(&self, group: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = lock(&self.locks)
            .entry(group.to_string())
            .or_default()
            .clone();
        turn.lock_owned().await
    }
}

/// `spec.replicas` this process wrote per Pool (`ns/name`), with the resourceVersion the
/// write returned, until the Pool cache shows it: a sibling's decision counts the written
/// size, not the one the cache still shows.
#[derive(Default)]
pub struct WrittenSizes {
    sizes: Mutex<HashMap<String, WrittenSize>>,
}

struct WrittenSize {
    replicas: i32,
    resource_version: String,
    at: Instant,
}

impl WrittenSizes {
    /// This process wrote `replicas` to `pool`; the write returned `resource_version`.
    pub fn wrote(&self, pool: &str, replicas: i32, resource_version: String, now: Instant) {
        lock(&self.sizes).insert(
            pool.to_string(),
            WrittenSize {
                replicas,
                resource_version,
                at: now,
            },
        );
    }

    /// The size written to `pool` that the cache (at `cached_version`) does not show yet.
    /// Forgotten once the cache shows the write, or after [`IN_FLIGHT_TTL`].
    pub fn unseen(&self, pool: &str, cached_version: Option<&str>, now: Instant) -> Option<i32> {
        let mut sizes = lock(&self.sizes);
        let written = sizes.get(pool)?;
        if cached_version == Some(written.resource_version.as_str()) || !fresh(written.at, now) {
            sizes.remove(pool);
            return None;
        }
        Some(written.replicas)
    }
}

/// How long a first sighting is kept ([`FirstSeen::saw`]).
pub const FIRST_SEEN_TTL: SignedDuration = SignedDuration::from_mins(10);

/// When this process first saw each Pending claim, by UID. A creation time has one-second
/// resolution: the sighting is the finer start of the claim's wait ([`pool::wait_start`]).
#[derive(Default)]
pub struct FirstSeen {
    seen: Mutex<HashMap<String, Timestamp>>,
}

impl FirstSeen {
    /// The claim `uid` is Pending at `now`; the first sighting is kept. Sightings older
    /// than [`FIRST_SEEN_TTL`] are forgotten: a claim deleted while Pending is never bound
    /// (and a claim still waiting falls back to its creation time).
    pub fn saw(&self, uid: &str, now: Timestamp) {
        let mut seen = lock(&self.seen);
        seen.retain(|_, at| now.duration_since(*at) < FIRST_SEEN_TTL);
        seen.entry(uid.to_string()).or_insert(now);
    }

    /// The first sighting of the claim `uid`, forgotten: the claim is being bound.
    pub fn take(&self, uid: &str) -> Option<Timestamp> {
        lock(&self.seen).remove(uid)
    }
}

/// The autoscaler's recommendation history per Pool (`ns/name`), for the scale-down
/// stabilization window (see [`RecommendationHistory`]).
#[derive(Default)]
pub struct Histories {
    by_pool: Mutex<HashMap<String, RecommendationHistory>>,
}

impl Histories {
    /// The history of `pool` (empty when none was recorded).
    pub fn of(&self, pool: &str) -> RecommendationHistory {
        lock(&self.by_pool).get(pool).cloned().unwrap_or_default()
    }

    /// Records a decision's recommendation for `pool`, keeping what a stabilization window
    /// of length `window` can reach.
    pub fn record(&self, pool: &str, recommendation: Recommendation, window: SignedDuration) {
        lock(&self.by_pool)
            .entry(pool.to_string())
            .or_default()
            .record(recommendation, window);
    }
}

/// How often a Pool's counts and conditions alone are written: a change of nothing else
/// waits until this long after the Pool's last status write, so a busy Pool costs at most
/// one status write per interval however fast claims come and go (and a replacement Pod
/// that is Ready within it never flips `Ready` in the status at all).
pub const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// When this process last wrote each Pool's (`ns/name`) status.
#[derive(Default)]
pub struct StatusWrites {
    at: Mutex<HashMap<String, Instant>>,
}

impl StatusWrites {
    /// How long a write of only counts and conditions must still wait at `now` (`None`:
    /// it may be written now).
    pub fn wait(&self, pool: &str, now: Instant) -> Option<std::time::Duration> {
        let last = *lock(&self.at).get(pool)?;
        let since = now.saturating_duration_since(last);
        (since < STATUS_INTERVAL).then(|| STATUS_INTERVAL - since)
    }

    /// The status of `pool` was written at `now`.
    pub fn wrote(&self, pool: &str, now: Instant) {
        lock(&self.at).insert(pool.to_string(), now);
    }
}

/// The claims each Pool (`ns/name`) received since its claim history's open slot started,
/// by UID with their creation time: a claim deleted before its slot closes is still
/// counted. Entries older than the open slot are dropped.
#[derive(Default)]
pub struct Arrivals {
    by_pool: Mutex<HashMap<String, HashMap<String, Arrival>>>,
}

impl Arrivals {
    /// Adds the claims `seen` (by UID) of `pool`, each with its share as it is now, forgets
    /// those created before `since`, and returns all that remain.
    pub fn observe<'a>(
        &self,
        pool: &str,
        seen: impl IntoIterator<Item = (&'a str, Arrival)>,
        since: Timestamp,
    ) -> Vec<Arrival> {
        let mut all = lock(&self.by_pool);
        let known = all.entry(pool.to_string()).or_default();
        for (uid, arrival) in seen {
            if arrival.at >= since {
                known.insert(uid.to_string(), arrival);
            }
        }
        known.retain(|_, a| a.at >= since);
        known.values().copied().collect()
    }
}

/// Names for new sandbox Pods ([`pool::pod_name`]): a counter of this process mixed with
/// the time, so names never repeat within a process and rarely across restarts.
#[derive(Default)]
pub struct PodNames {
    seq: AtomicU64,
}

impl PodNames {
    /// A fresh name for a Pod of `pool`.
    pub fn next(&self, pool: &str, now: Timestamp) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let seed = n
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(now.as_nanosecond() as u64);
        pool::pod_name(pool, seed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const TTL: Duration = IN_FLIGHT_TTL.unsigned_abs();

    fn view(name: &str) -> PodView {
        PodView {
            name: name.into(),
            uid: format!("{name}-uid"),
            resource_version: "1".into(),
            ready: true,
            ip: Some("10.0.0.1".into()),
            terminating: false,
            finished: false,
            claim: None,
            marked: false,
            since: Timestamp::UNIX_EPOCH,
        }
    }

    fn claim(name: &str) -> ClaimView {
        ClaimView {
            name: name.into(),
            uid: format!("{name}-uid"),
            created: Timestamp::UNIX_EPOCH,
            phase: None,
            pod_name: None,
        }
    }

    fn claim_ref(name: &str) -> ClaimRef {
        (name.to_string(), format!("{name}-uid"))
    }

    #[test]
    fn a_create_counts_until_the_cache_shows_its_pod_or_the_ttl_passes() {
        let t0 = Instant::now();
        let f = InFlight::default();
        f.creating("ns/p", "a", t0);
        f.creating("ns/p", "b", t0);
        f.creating("ns/q", "c", t0);
        assert_eq!(f.creates("ns/p", &[], t0), vec!["a", "b"]);
        assert_eq!(f.creates("ns/p", &[view("a")], t0), vec!["b"]);
        assert_eq!(f.creates("ns/p", &[], t0), vec!["b"], "a is forgotten");
        assert_eq!(f.creates("ns/p", &[], t0 + TTL), Vec::<String>::new());
        assert_eq!(f.creates("ns/q", &[], t0), vec!["c"], "per pool");
    }

    #[test]
    fn a_refused_create_is_forgotten_at_once() {
        let t0 = Instant::now();
        let f = InFlight::default();
        f.creating("ns/p", "a", t0);
        f.create_refused("ns/p", "a");
        f.create_refused("ns/other", "a");
        assert_eq!(f.creates("ns/p", &[], t0), Vec::<String>::new());
    }

    #[test]
    fn binds_are_overlaid_until_the_caches_show_them() {
        let t0 = Instant::now();
        let f = InFlight::default();
        f.pod_bound("ns/p", "a", claim_ref("c1"), t0);
        f.claim_bound("ns/p", "c1-uid", "a", t0);
        let (mut pods, mut claims) = (vec![view("a")], vec![claim("c1")]);
        f.overlay("ns/p", &mut pods, &mut claims, t0);
        assert_eq!(pods[0].claim, Some(claim_ref("c1")));
        assert_eq!(claims[0].pod_name.as_deref(), Some("a"));
        // The caches show both writes: the overlay changes nothing and forgets them.
        let (shown_pods, shown_claims) = (pods.clone(), claims.clone());
        f.overlay("ns/p", &mut pods, &mut claims, t0);
        assert_eq!((&pods, &claims), (&shown_pods, &shown_claims));
        let (mut fresh_pods, mut fresh_claims) = (vec![view("a")], vec![claim("c1")]);
        f.overlay("ns/p", &mut fresh_pods, &mut fresh_claims, t0);
        assert_eq!(
            (fresh_pods, fresh_claims),
            (vec![view("a")], vec![claim("c1")]),
            "forgotten once shown"
        );
    }

    #[test]
    fn a_delete_shows_its_pod_terminating_until_the_cache_does_or_the_ttl_passes() {
        let t0 = Instant::now();
        let f = InFlight::default();
        let overlaid = |pool: &str, mut pods: Vec<PodView>, at| {
            f.overlay(pool, &mut pods, &mut [], at);
            pods.iter().map(|v| v.terminating).collect::<Vec<_>>()
        };
        let other_uid = PodView {
            uid: "other".into(),
            ..view("a")
        };
        let shown = PodView {
            terminating: true,
            ..view("a")
        };
        f.deleted("ns/p", "a", "a-uid", t0);
        assert_eq!(
            overlaid("ns/p", vec![view("a"), view("b")], t0),
            [true, false]
        );
        assert_eq!(overlaid("ns/q", vec![view("a")], t0), [false], "per pool");
        assert_eq!(
            overlaid("ns/p", vec![view("a")], t0),
            [true],
            "kept until shown"
        );
        // The cache shows it terminating: forgotten, even if a later view lags again.
        assert_eq!(overlaid("ns/p", vec![shown], t0), [true]);
        assert_eq!(overlaid("ns/p", vec![view("a")], t0), [false], "forgotten");
        // Gone from the cache, or another Pod by that name: forgotten too.
        f.deleted("ns/p", "a", "a-uid", t0);
        assert_eq!(overlaid("ns/p", vec![view("b")], t0), [false]);
        assert_eq!(overlaid("ns/p", vec![view("a")], t0), [false], "forgotten");
        f.deleted("ns/p", "a", "a-uid", t0);
        assert_eq!(overlaid("ns/p", vec![other_uid], t0), [false]);
        assert_eq!(overlaid("ns/p", vec![view("a")], t0), [false], "forgotten");
        // Too old.
        f.deleted("ns/p", "a", "a-uid", t0);
        assert_eq!(overlaid("ns/p", vec![view("a")], t0 + TTL), [false]);
    }

    #[test]
    fn binds_older_than_the_ttl_are_dropped() {
        let t0 = Instant::now();
        let f = InFlight::default();
        f.pod_bound("ns/p", "a", claim_ref("c1"), t0);
        f.claim_bound("ns/p", "c1-uid", "a", t0);
        let (mut pods, mut claims) = (vec![view("a")], vec![claim("c1")]);
        f.overlay("ns/p", &mut pods, &mut claims, t0 + TTL);
        assert_eq!((pods, claims), (vec![view("a")], vec![claim("c1")]));
    }

    #[test]
    fn a_written_size_counts_until_the_cache_shows_its_version_or_the_ttl_passes() {
        let t0 = Instant::now();
        let s = WrittenSizes::default();
        assert_eq!(s.unseen("ns/p", Some("1"), t0), None);
        s.wrote("ns/p", 5, "7".into(), t0);
        assert_eq!(s.unseen("ns/p", Some("6"), t0), Some(5));
        assert_eq!(s.unseen("ns/p", None, t0), Some(5));
        assert_eq!(s.unseen("ns/p", Some("7"), t0), None, "the cache shows it");
        assert_eq!(s.unseen("ns/p", Some("6"), t0), None, "forgotten");
        s.wrote("ns/p", 5, "7".into(), t0);
        assert_eq!(s.unseen("ns/p", Some("6"), t0 + TTL), None, "too old");
    }

    #[test]
    fn the_first_sighting_of_a_claim_is_kept_until_taken() {
        let t = |s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH);
        let f = FirstSeen::default();
        f.saw("u", t(10));
        f.saw("u", t(20));
        assert_eq!(f.take("u"), Some(t(10)));
        assert_eq!(f.take("u"), None);
        // A claim deleted while Pending is never taken: forgotten once it is old.
        f.saw("gone", t(100));
        f.saw("other", t(100 + FIRST_SEEN_TTL.as_secs() - 1));
        assert_eq!(f.take("gone"), Some(t(100)), "kept within the TTL");
        f.saw("gone", t(100));
        f.saw("late", t(100 + FIRST_SEEN_TTL.as_secs()));
        assert_eq!(f.take("gone"), None, "forgotten after it");
        assert!(f.take("other").is_some());
    }

    #[test]
    fn histories_are_per_pool() {
        let at = Timestamp::from_second(100).unwrap_or(Timestamp::UNIX_EPOCH);
        let h = Histories::default();
        assert_eq!(h.of("ns/p"), RecommendationHistory::default());
        let r = Recommendation { at, replicas: 3 };
        h.record("ns/p", r, SignedDuration::from_secs(60));
        assert_eq!(
            h.of("ns/p"),
            RecommendationHistory {
                since: Some(at),
                entries: vec![r],
            }
        );
        assert_eq!(h.of("ns/q"), RecommendationHistory::default());
    }

    #[test]
    fn pod_names_do_not_repeat_at_one_instant() {
        let names = PodNames::default();
        let now = Timestamp::UNIX_EPOCH;
        let a = names.next("pool", now);
        let b = names.next("pool", now);
        assert_ne!(a, b);
        assert!(a.starts_with("pool-"), "{a}");
    }

    #[tokio::test]
    async fn one_decision_at_a_time_per_group() {
        let locks = GroupLocks::default();
        let held = locks.lock("ns/env/g").await;
        let other = tokio::time::timeout(Duration::from_millis(50), locks.lock("ns/env/h")).await;
        assert!(other.is_ok(), "another group is not held up");
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock("ns/env/g")).await;
        assert!(same.is_err(), "the same group waits");
        drop(held);
        let next = tokio::time::timeout(Duration::from_millis(50), locks.lock("ns/env/g")).await;
        assert!(next.is_ok(), "its turn comes once the guard is dropped");
    }

    #[test]
    fn arrivals_outlive_their_claims_until_the_slot_moves_on() {
        let a = Arrivals::default();
        let t = |s: i64| Arrival::whole(Timestamp::from_second(s).unwrap());
        let times = |v: Vec<Arrival>| {
            let mut v: Vec<_> = v.iter().map(|a| (a.at, a.share.to_bits())).collect();
            v.sort();
            v
        };
        assert_eq!(
            a.observe("ns/p", [("a", t(100)), ("old", t(10))], t(60).at),
            vec![t(100)]
        );
        // "a" is gone from the cache; it is still counted.
        let seen = a.observe("ns/p", [("b", t(120))], t(60).at);
        assert_eq!(times(seen), times(vec![t(100), t(120)]));
        // "b" now may bind in two Pools: its share as it is now.
        let half = Arrival {
            share: 0.5,
            ..t(120)
        };
        let seen = a.observe("ns/p", [("b", half)], t(60).at);
        assert_eq!(times(seen), times(vec![t(100), half]));
        // The open slot moved to 110: "a" is forgotten.
        assert_eq!(a.observe("ns/p", [], t(110).at), vec![half]);
        assert!(a.observe("ns/other", [], t(0).at).is_empty());
    }

    #[test]
    fn counts_wait_out_the_interval_after_a_status_write() {
        let w = StatusWrites::default();
        let t0 = Instant::now();
        assert_eq!(w.wait("ns/p", t0), None, "never written");
        w.wrote("ns/p", t0);
        let half = STATUS_INTERVAL / 2;
        assert_eq!(w.wait("ns/p", t0 + half), Some(STATUS_INTERVAL - half));
        assert_eq!(w.wait("ns/p", t0 + STATUS_INTERVAL), None);
        assert_eq!(w.wait("ns/other", t0), None);
    }
}
