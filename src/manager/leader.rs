//! Leader election on the `moonin-manager` Lease. Only the holder writes, and only while its
//! last renewal is recent enough that no other process can have taken the Lease since.
//!
//! The rules are Kubernetes' own (client-go's `leaderelection`): a follower takes the Lease
//! once it has seen the Lease unchanged for a whole lease duration by its own clock (so clocks
//! need not agree), every take and renewal replaces the Lease at the `resourceVersion` it read
//! (so two processes never both succeed), and the holder stops writing a renew deadline after
//! the start of its last successful renewal, which is shorter than the lease duration. A holder
//! cut off from the API server therefore stops before anyone can take over, and when the cut
//! is lifted it writes nothing until it has renewed again.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use jiff::Timestamp;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt as _},
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::field_manager;
use crate::runtime::{context::Readiness, leader::Leadership, metrics::Metrics};

/// The Lease every manager process competes for.
pub const LEASE_NAME: &str = "moonin-manager";
/// Seconds a Lease stays valid after it last changed, as a follower sees it.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Seconds after the start of its last successful renewal at which the holder stops
/// writing, unless it renewed again; shorter than the lease duration.
pub const RENEW_DEADLINE_SECONDS: u64 = 10;
/// Seconds between two attempts to take or renew the Lease.
pub const RETRY_SECONDS: u64 = 2;

const LEASE_DURATION: Duration = Duration::from_secs(LEASE_DURATION_SECONDS);
const RENEW_DEADLINE: Duration = Duration::from_secs(RENEW_DEADLINE_SECONDS);
const RETRY: Duration = Duration::from_secs(RETRY_SECONDS);
/// How long one attempt may take: an API server under load answers slowly, and a slow
/// renewal is still a renewal (its deadline counts from the attempt's start).
const ATTEMPT: Duration = Duration::from_secs(5);
/// The API server counts as unreachable once no attempt got an answer for this long.
const UNANSWERED: Duration = Duration::from_secs(5);

/// Whether the API server answers the election's attempts: unreachable once none got an
/// answer (any answer, a refusal too) for [`UNANSWERED`].
#[derive(Debug)]
struct Probe {
    last_answer: Instant,
    /// When (wall clock) the last answer came.
    answered_at: Timestamp,
    down: Option<String>,
}

impl Probe {
    fn new(now: Instant, wall: Timestamp) -> Self {
        Self {
            last_answer: now,
            answered_at: wall,
            down: None,
        }
    }

    /// An answer came; true when the API server was unreachable until now.
    fn answered(&mut self, now: Instant, wall: Timestamp) -> bool {
        self.last_answer = now;
        self.answered_at = wall;
        self.down.take().is_some()
    }

    /// An attempt got no answer (`error`); true when that makes the API server unreachable.
    fn unanswered(&mut self, error: &str, now: Instant) -> bool {
        if self.down.is_some() || now.saturating_duration_since(self.last_answer) < UNANSWERED {
            return false;
        }
        let since = self
            .answered_at
            .round(jiff::Unit::Second)
            .unwrap_or(self.answered_at);
        self.down = Some(format!(
            "the API server has not answered since {since}: {error}"
        ));
        true
    }

    /// Why the API server is unreachable, while it is.
    fn down(&self) -> Option<&str> {
        self.down.as_deref()
    }
}

/// What the candidate does with the Lease it just read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// There is none: create it, held by us.
    Create,
    /// Nobody holds it, or its holder let it expire: take it.
    Take,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds it and renewed it within a lease duration: wait.
    Follow,
}

/// The Lease's fields whose change shows its holder is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    holder: Option<String>,
    renewed: Option<Timestamp>,
    transitions: Option<i32>,
}

impl Seen {
    fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renewed: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions,
        }
    }
}

/// The pure part of the election: what to do with the Lease read at an instant, and until
/// when this process may write.
#[derive(Debug)]
struct Candidate {
    identity: String,
    /// The Lease as last seen, and when (by our clock) it was first seen so.
    seen: Option<(Seen, Instant)>,
    /// The start of our last successful take or renewal plus the renew deadline.
    valid_until: Option<Instant>,
}

impl Candidate {
    fn new(identity: &str) -> Self {
        Self {
            identity: identity.to_string(),
            seen: None,
            valid_until: None,
        }
    }

    fn next(&mut self, lease: Option<&LeaseSpec>, now: Instant) -> Next {
        let Some(spec) = lease else {
            return Next::Create;
        };
        let seen = Seen::of(spec);
        let since = match &self.seen {
            Some((s, at)) if *s == seen => *at,
            _ => now,
        };
        let holder = seen.holder.clone();
        self.seen = Some((seen, since));
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(LEASE_DURATION, Duration::from_secs);
        match holder {
            Some(h) if h == self.identity => Next::Renew,
            None => Next::Take,
            Some(_) if now.saturating_duration_since(since) >= duration => Next::Take,
            Some(_) => Next::Follow,
        }
    }

    /// A take or renewal that started at `started` succeeded.
    fn renewed(&mut self, started: Instant) {
        self.valid_until = Some(started + RENEW_DEADLINE);
    }

    /// Someone else holds the Lease (or took it under us).
    fn follows(&mut self) {
        self.valid_until = None;
    }

    fn leads(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }
}

/// The Lease held by `identity` from `now`: `previous` renewed, or taken over from its holder.
fn held(identity: &str, previous: Option<Lease>, now: Timestamp) -> Lease {
    let mut lease = previous.unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(LEASE_NAME.to_string()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(identity) {
        spec.holder_identity = Some(identity.to_string());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.map_or(0, |t| t + 1));
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS as i32);
    lease
}

/// The Lease's writes, under the manager's field manager.
fn params() -> PostParams {
    PostParams {
        field_manager: Some(field_manager::MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// One attempt: read the Lease, and take, renew or leave it. `Some` when we hold it now,
/// saying whether this began a term.
async fn attempt(api: &Api<Lease>, candidate: &mut Candidate) -> kube::Result<Option<Won>> {
    let lease = api.get_opt(LEASE_NAME).await?;
    let next = candidate.next(lease.as_ref().and_then(|l| l.spec.as_ref()), Instant::now());
    let identity = candidate.identity.clone();
    let won = if next == Next::Renew {
        Won::Renewed
    } else {
        Won::Took
    };
    let written = match next {
        Next::Follow => return Ok(None),
        Next::Create => {
            api.create(&params(), &held(&identity, None, Timestamp::now()))
                .await
        }
        // A replace carries the resourceVersion read: of two takers, one gets a conflict.
        Next::Take | Next::Renew => {
            api.replace(
                LEASE_NAME,
                &params(),
                &held(&identity, lease, Timestamp::now()),
            )
            .await
        }
    };
    match written {
        Ok(_) => Ok(Some(won)),
        Err(e) if crate::runtime::errors::is_conflict(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How an attempt that holds the Lease got it: a new term, or the one it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Won {
    /// Created, or taken from no holder or an expired one.
    Took,
    /// Renewed while held.
    Renewed,
}

/// Gives the Lease up if we hold it, so that a successor takes over at once.
async fn release(api: &Api<Lease>, identity: &str) -> kube::Result<bool> {
    let Some(mut lease) = api.get_opt(LEASE_NAME).await? else {
        return Ok(false);
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(false);
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    api.replace(&lease.name_any(), &params(), &lease)
        .await
        .map(|_| true)
}

/// Starts competing for the Lease in `namespace` as `identity`. The returned task gives the
/// Lease up when `shutdown` is cancelled, so that a successor takes over at once. Its
/// requests, every [`RETRY_SECONDS`], are also the manager's probe of the API server:
/// `readiness` and `moonin_api_reachable` say when none got an answer for 5 s ([`Probe`]).
pub fn elect(
    client: Client,
    namespace: &str,
    identity: &str,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> (Leadership, tokio::task::JoinHandle<()>) {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let (tx, rx) = watch::channel(false);
    let until = Arc::new(Mutex::new(None));
    let terms: Arc<AtomicU64> = Arc::default();
    let leadership = Leadership::new(rx, until.clone(), terms.clone());
    let identity = identity.to_string();
    let task = tokio::spawn(async move {
        let mut candidate = Candidate::new(&identity);
        let mut probe = Probe::new(Instant::now(), Timestamp::now());
        loop {
            let started = Instant::now();
            // Past the renew deadline the gate is shut whatever the channel says: say so
            // then, not once the attempt ends, so that a renewal that succeeds late is an
            // acquisition again (the controllers look at everything once more).
            let deadline = candidate.valid_until;
            let attempted = by_deadline(
                tokio::time::timeout(ATTEMPT, attempt(&api, &mut candidate)),
                deadline,
                || publish(&tx, false, &identity, &metrics),
            );
            let error = match attempted.await {
                Ok(Ok(Some(won))) => {
                    if won == Won::Took {
                        terms.fetch_add(1, Ordering::AcqRel);
                    }
                    candidate.renewed(started);
                    None
                }
                Ok(Ok(None)) => {
                    candidate.follows();
                    None
                }
                // An answer, if a refusal (a missing permission, a webhook): reachable.
                Ok(Err(kube::Error::Api(e))) => {
                    tracing::warn!(lease = LEASE_NAME, error = %e, "the leader Lease cannot be taken or renewed");
                    None
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer in {ATTEMPT:?}")),
            };
            let flipped = match error {
                None => probe.answered(Instant::now(), Timestamp::now()),
                Some(e) => probe.unanswered(&e, Instant::now()),
            };
            if flipped {
                match probe.down() {
                    Some(why) => tracing::warn!(lease = LEASE_NAME, "{why}"),
                    None => tracing::info!(lease = LEASE_NAME, "the API server answers again"),
                }
                readiness.set_unreachable(probe.down().map(str::to_string));
            }
            // Set at every attempt, the first included (the probe starts out reachable).
            metrics.api_reachable.set(i64::from(probe.down().is_none()));
            *until.lock().unwrap_or_else(|e| e.into_inner()) = candidate.valid_until;
            publish(&tx, candidate.leads(Instant::now()), &identity, &metrics);
            // Wake at the renew deadline if it comes first, to say so at once.
            let now = Instant::now();
            let pause = match candidate.valid_until {
                Some(until) if until > now => (until - now).min(RETRY),
                _ => RETRY,
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        *until.lock().unwrap_or_else(|e| e.into_inner()) = None;
        publish(&tx, false, &identity, &metrics);
        match tokio::time::timeout(ATTEMPT, release(&api, &identity)).await {
            Ok(Ok(true)) => tracing::info!(lease = LEASE_NAME, "released the Lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the Lease"),
            Err(_) => tracing::warn!("could not release the Lease in {ATTEMPT:?}"),
        }
    });
    (leadership, task)
}

/// Awaits `attempt`; should `deadline` pass first, calls `passed` then and goes on waiting.
async fn by_deadline<T>(
    attempt: impl std::future::Future<Output = T>,
    deadline: Option<Instant>,
    passed: impl FnOnce(),
) -> T {
    let Some(deadline) = deadline else {
        return attempt.await;
    };
    let mut attempt = std::pin::pin!(attempt);
    tokio::select! {
        out = &mut attempt => out,
        () = tokio::time::sleep_until(deadline.into()) => {
            passed();
            attempt.await
        }
    }
}

/// Sends `leads` to the gate's watchers when it changed, with the metric and a log line.
fn publish(tx: &watch::Sender<bool>, leads: bool, identity: &str, metrics: &Metrics) {
    metrics.leader.set(i64::from(leads));
    let changed = tx.send_if_modified(|held| std::mem::replace(held, leads) != leads);
    if changed && leads {
        tracing::info!(%identity, lease = LEASE_NAME, "acquired leadership");
    } else if changed {
        tracing::warn!(%identity, lease = LEASE_NAME, "lost leadership");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(
                Timestamp::from_second(1_700_000_000 + renewed_secs).expect("time"),
            )),
            lease_duration_seconds: Some(duration),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }
    }

    #[tokio::test]
    async fn a_renewal_that_outlasts_the_deadline_shuts_the_gate_when_it_passes() {
        let slow = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            "renewed"
        };
        let shut = std::cell::Cell::new(None);
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(20);
        let out = by_deadline(slow, Some(deadline), || shut.set(Some(Instant::now()))).await;
        assert_eq!(out, "renewed", "the attempt is still awaited");
        let at = shut.get().expect("said at the deadline");
        assert!(at >= deadline && at < t0 + Duration::from_millis(200));

        let fast = async { "renewed" };
        let later = Some(Instant::now() + Duration::from_secs(5));
        let out = by_deadline(fast, later, || panic!("no deadline passed")).await;
        assert_eq!(out, "renewed");
        assert_eq!(
            by_deadline(async { 1 }, None, || panic!("no deadline")).await,
            1
        );
    }

    #[test]
    fn no_lease_is_created_and_a_free_one_is_taken() {
        let t0 = Instant::now();
        let mut c = Candidate::new("a");
        assert_eq!(c.next(None, t0), Next::Create);
        assert_eq!(c.next(Some(&lease(None, 0, 15)), t0), Next::Take);
        assert_eq!(c.next(Some(&lease(Some(""), 0, 15)), t0), Next::Take);
        assert_eq!(c.next(Some(&lease(Some("a"), 0, 15)), t0), Next::Renew);
    }

    #[test]
    fn a_follower_takes_over_only_after_a_whole_lease_duration_without_a_change() {
        let t0 = Instant::now();
        let mut c = Candidate::new("b");
        let held = lease(Some("a"), 0, 15);
        // First seen now: the renewTime in it means nothing to our clock.
        assert_eq!(c.next(Some(&held), t0), Next::Follow);
        assert_eq!(
            c.next(Some(&held), t0 + Duration::from_secs(14)),
            Next::Follow
        );
        // The holder renewed: the count starts again.
        let renewed = lease(Some("a"), 10, 15);
        let t1 = t0 + Duration::from_secs(14);
        assert_eq!(c.next(Some(&renewed), t1), Next::Follow);
        assert_eq!(
            c.next(Some(&renewed), t1 + Duration::from_secs(14)),
            Next::Follow
        );
        assert_eq!(
            c.next(Some(&renewed), t1 + Duration::from_secs(15)),
            Next::Take
        );
        // The Lease's own duration counts, not ours.
        let mut c = Candidate::new("b");
        let short = lease(Some("a"), 0, 1);
        assert_eq!(c.next(Some(&short), t0), Next::Follow);
        assert_eq!(
            c.next(Some(&short), t0 + Duration::from_secs(1)),
            Next::Take
        );
    }

    #[test]
    fn the_holder_stops_at_the_renew_deadline_well_before_anyone_can_take_over() {
        const { assert!(RENEW_DEADLINE_SECONDS + RETRY_SECONDS < LEASE_DURATION_SECONDS) };
        let t0 = Instant::now();
        let mut c = Candidate::new("a");
        assert!(!c.leads(t0));
        c.renewed(t0);
        assert!(c.leads(t0 + RENEW_DEADLINE - Duration::from_millis(1)));
        assert!(!c.leads(t0 + RENEW_DEADLINE));
        // A renewal refused (someone else wrote the Lease): no longer leading at once.
        c.renewed(t0);
        c.follows();
        assert!(!c.leads(t0));
    }

    #[test]
    fn the_api_server_is_unreachable_only_after_five_seconds_without_an_answer() {
        let t0 = Instant::now();
        let wall = Timestamp::from_second(1_700_000_000).expect("time");
        let mut p = Probe::new(t0, wall);
        // A slow or failed attempt soon after an answer: not yet.
        assert!(!p.unanswered("no answer in 5s", t0 + Duration::from_secs(4)));
        assert_eq!(p.down(), None);
        assert!(p.unanswered("connection refused", t0 + UNANSWERED));
        assert_eq!(
            p.down(),
            Some("the API server has not answered since 2023-11-14T22:13:20Z: connection refused")
        );
        // Said once; the first answer clears it.
        assert!(!p.unanswered("connection refused", t0 + Duration::from_secs(30)));
        assert!(p.answered(t0 + Duration::from_secs(31), wall));
        assert!(!p.answered(t0 + Duration::from_secs(33), wall));
        assert_eq!(p.down(), None);
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let now = Timestamp::from_second(1_700_000_100).expect("time");
        let taken = held(
            "b",
            Some(Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    resource_version: Some("7".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(lease(Some("a"), 0, 15)),
            }),
            now,
        );
        let spec = taken.spec.as_ref().expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("7"));
        let later = Timestamp::from_second(1_700_000_102).expect("time");
        let renewed = held("b", Some(taken.clone()), later);
        let spec = renewed.spec.expect("spec");
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
        assert_eq!(spec.renew_time, Some(MicroTime(later)));
        let created = held("a", None, now).spec.expect("spec");
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.lease_duration_seconds, Some(15));
    }
}
