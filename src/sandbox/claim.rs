//! A claim, decided purely: a Pending claim whose pool or env is missing says so (and is not
//! retried in a loop), one still waiting after [`QUEUED_AFTER`] says `Queued`; a Bound
//! claim is released when its lifetime ends and fails when its Pod is lost. Binding itself
//! is the pool's (its status is [`bound_status`]).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::conditions::{self, Desired, reasons as condition_reasons, types};
use crate::api::sandbox::{SandboxClaimStatus, reasons};

/// How long a claim waits unbound before its status says `Queued`: a claim the pool binds
/// at once never says it (a write saved per claim).
pub const QUEUED_AFTER: SignedDuration = SignedDuration::from_secs(2);

/// How often a claim is looked at when nothing else wakes it.
const RESYNC: Duration = super::autoscaler::RESYNC.unsigned_abs();

/// One claim, as Load found it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimSnapshot {
    /// `metadata.namespace` (for messages).
    pub namespace: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `spec.lifetime`.
    pub lifetime: Option<Duration>,
    /// The status as stored (default when absent).
    pub status: SandboxClaimStatus,
    /// What Load found for the claim's phase.
    pub found: Found,
}

/// What Load looked up for a claim, by phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// A Pending claim: what its reference finds in this cluster.
    Pending(Target),
    /// A Bound claim: whether its Pod still holds it (true when that is unknown: decided at
    /// the next reconcile).
    Bound {
        /// The Pod exists, is not terminating and names this claim.
        pod_alive: bool,
    },
    /// Released, Failed, or a phase this version does not know: nothing to do.
    Settled,
}

/// What a Pending claim's reference finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `spec.poolRef`.
    Pool {
        /// The Pool's name.
        name: String,
        /// The Pool cache has it.
        found: bool,
        /// Why a stored Pool of that name does not decode, when it does not.
        undecodable: Option<String>,
    },
    /// `spec.envRef`.
    Env {
        /// The Env's name.
        name: String,
        /// `spec.envRef.group`.
        group: Option<String>,
        /// The Pools of this cluster the claim may bind from.
        pools: usize,
    },
    /// Neither (admission refuses such a claim).
    Unset,
}

/// An Event about the claim, published once its status is written: `(warning, reason,
/// note)`.
pub type ClaimEvent = (bool, &'static str, String);

/// What one claim reconcile does.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan {
    /// The status to write, guarded by the claim's resourceVersion (the pool may bind the
    /// claim meanwhile); `None` when it does not change.
    pub status: Option<SandboxClaimStatus>,
    /// The Event to publish once the status is written.
    pub event: Option<ClaimEvent>,
    /// When to look again; `None`: at the claim's next change.
    pub requeue: Option<Duration>,
}

/// Decides one claim reconcile.
pub fn decide(snap: &ClaimSnapshot, now: Timestamp) -> ClaimPlan {
    match &snap.found {
        Found::Pending(target) => pending(snap, target, now),
        Found::Bound { pod_alive } => bound(snap, *pod_alive, now),
        Found::Settled => ClaimPlan {
            status: None,
            event: None,
            requeue: None,
        },
    }
}

/// The claim's status with `ready` merged into its conditions. A report that the claim
/// could not be decoded (`InvalidSpec`: it decodes now) goes with it.
fn with_ready(snap: &ClaimSnapshot, ready: Desired, now: Timestamp) -> SandboxClaimStatus {
    let mut next = snap.status.clone();
    if reported_invalid(snap) {
        next.conditions
            .retain(|c| c.type_ == types::READY || c.reason != condition_reasons::INVALID_SPEC);
        next.observed_generation = snap.generation;
    }
    next.conditions = conditions::merge(&next.conditions, &[ready], snap.generation, now);
    next
}

/// Whether the status says the claim could not be decoded: it was not, when it was
/// reported; it is now.
fn reported_invalid(snap: &ClaimSnapshot) -> bool {
    snap.status
        .conditions
        .iter()
        .any(|c| c.reason == condition_reasons::INVALID_SPEC)
}

/// The plan that writes `next` (when it changed) and publishes `event` with it.
fn write(
    snap: &ClaimSnapshot,
    next: SandboxClaimStatus,
    event: Option<ClaimEvent>,
    requeue: Duration,
) -> ClaimPlan {
    let changed = next != snap.status;
    ClaimPlan {
        status: changed.then_some(next),
        event: event.filter(|_| changed),
        requeue: Some(requeue),
    }
}

/// Why a Pending claim's reference finds nothing in this cluster, if it does not.
fn missing(snap: &ClaimSnapshot, target: &Target) -> Option<(&'static str, String)> {
    let ns = &snap.namespace;
    match target {
        Target::Pool { found: true, .. } | Target::Unset => None,
        Target::Pool {
            name, undecodable, ..
        } => {
            let why = match undecodable {
                Some(message) => format!("cannot be decoded ({message})"),
                None => "does not exist".to_string(),
            };
            Some((
                reasons::POOL_NOT_FOUND,
                format!("SandboxPool {ns}/{name} {why}"),
            ))
        }
        Target::Env { pools, .. } if *pools > 0 => None,
        Target::Env { name, group, .. } => Some((
            reasons::ENV_NOT_FOUND,
            match group {
                Some(g) => {
                    format!("SandboxEnv {ns}/{name} has no pool in group {g} in this cluster")
                }
                None => format!("SandboxEnv {ns}/{name} has no pool in this cluster"),
            },
        )),
    }
}

/// A Pending claim: a missing target is reported once (Warning); otherwise the claim is
/// queued for the pool, and says so once it has waited [`QUEUED_AFTER`] (or when a
/// `Ready=False` left from a missing target must be replaced).
fn pending(snap: &ClaimSnapshot, target: &Target, now: Timestamp) -> ClaimPlan {
    let conds = &snap.status.conditions;
    if let Some((reason, msg)) = missing(snap, target) {
        let mut next = with_ready(
            snap,
            Desired::new(types::READY, false, reason, msg.clone()),
            now,
        );
        next.phase = Some("Pending".into());
        let event =
            (!conditions::has_reason(conds, types::READY, reason)).then_some((true, reason, msg));
        return write(snap, next, event, RESYNC);
    }
    let stale = [reasons::POOL_NOT_FOUND, reasons::ENV_NOT_FOUND]
        .iter()
        .any(|r| conditions::has_reason(conds, types::READY, r))
        || reported_invalid(snap);
    let unreported = !conds.iter().any(|c| c.type_ == types::READY);
    let waited = snap
        .created
        .map_or(SignedDuration::ZERO, |t| now.duration_since(t));
    let nothing = |requeue| ClaimPlan {
        status: None,
        event: None,
        requeue,
    };
    if unreported && waited < QUEUED_AFTER {
        return nothing(Some(
            Duration::try_from(QUEUED_AFTER - waited).unwrap_or(Duration::ZERO),
        ));
    }
    if !stale && !unreported {
        // Looked at again: its Pool or Env may go meanwhile, and no trigger says so.
        return nothing(Some(RESYNC));
    }
    let next = with_ready(
        snap,
        Desired::new(
            types::READY,
            false,
            reasons::QUEUED,
            "waiting for an idle sandbox Pod",
        ),
        now,
    );
    write(snap, next, None, RESYNC)
}

/// A Bound claim: released when its lifetime (from `boundAt`) ends, failed when its Pod
/// is lost, else looked at again when its lifetime ends.
fn bound(snap: &ClaimSnapshot, pod_alive: bool, now: Timestamp) -> ClaimPlan {
    let pod = snap.status.pod_name.clone().unwrap_or_default();
    let expiry = snap.lifetime.and_then(|l| {
        let bound = snap.status.bound_at.as_ref()?.0;
        bound.checked_add(SignedDuration::try_from(l).ok()?).ok()
    });
    if let Some(end) = expiry
        && end <= now
    {
        let ready = Desired::new(
            types::READY,
            false,
            "Released",
            "the claim's lifetime ended",
        );
        let mut next = with_ready(snap, ready, now);
        next.phase = Some("Released".into());
        let event = Some((
            false,
            "Released",
            format!("lifetime ended; sandbox Pod {pod} released"),
        ));
        return write(snap, next, event, RESYNC);
    }
    if !pod_alive {
        let message = format!("sandbox Pod {pod} was deleted");
        let ready = Desired::new(types::READY, false, "PodLost", message);
        let mut next = with_ready(snap, ready, now);
        next.phase = Some("Failed".into());
        let event = Some((
            true,
            "PodLost",
            format!("sandbox Pod {pod} was deleted while bound"),
        ));
        return write(snap, next, event, RESYNC);
    }
    let requeue = expiry.map_or(RESYNC, |end| {
        Duration::try_from(end.duration_since(now)).unwrap_or(Duration::ZERO)
    });
    if reported_invalid(snap) {
        let ready = Desired::new(
            types::READY,
            true,
            "Bound",
            format!("bound to sandbox Pod {pod}"),
        );
        return write(snap, with_ready(snap, ready, now), None, requeue);
    }
    ClaimPlan {
        status: None,
        event: None,
        requeue: Some(requeue),
    }
}

/// The status that binds a claim to `pod` at `now`, after waiting `wait_milliseconds`.
pub fn bound_status(
    current: &SandboxClaimStatus,
    generation: Option<i64>,
    pod: &str,
    ip: Option<String>,
    wait_milliseconds: i64,
    now: Timestamp,
) -> SandboxClaimStatus {
    let mut status = current.clone();
    status.observed_generation = generation;
    status.phase = Some("Bound".into());
    status.pod_name = Some(pod.to_string());
    status.pod_ip = ip;
    status.bound_at = Some(Time(now));
    status.wait_milliseconds = Some(wait_milliseconds);
    status.conditions = conditions::merge(
        &status.conditions,
        &[Desired::new(
            types::READY,
            true,
            "Bound",
            format!("bound to sandbox Pod {pod}"),
        )],
        generation,
        now,
    );
    status
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn ready(reason: &str) -> Vec<Condition> {
        conditions::merge(
            &[],
            &[Desired::new(types::READY, false, reason, "earlier")],
            Some(1),
            t(0),
        )
    }

    fn snap(status: SandboxClaimStatus, found: Found) -> ClaimSnapshot {
        ClaimSnapshot {
            namespace: "ns".into(),
            generation: Some(1),
            created: Some(t(0)),
            lifetime: Some(Duration::from_secs(600)),
            status,
            found,
        }
    }

    fn pending(conditions: Vec<Condition>, target: Target) -> ClaimSnapshot {
        let status = SandboxClaimStatus {
            conditions,
            ..SandboxClaimStatus::default()
        };
        snap(status, Found::Pending(target))
    }

    fn pool(found: bool, undecodable: Option<&str>) -> Target {
        Target::Pool {
            name: "p".into(),
            found,
            undecodable: undecodable.map(String::from),
        }
    }

    fn bound(pod_alive: bool) -> ClaimSnapshot {
        let status = SandboxClaimStatus {
            phase: Some("Bound".into()),
            pod_name: Some("pod-1".into()),
            bound_at: Some(Time(t(0))),
            ..SandboxClaimStatus::default()
        };
        snap(status, Found::Bound { pod_alive })
    }

    /// A plan in short: (phase written, Ready reason and message written, Event, requeue).
    type Short = (
        Option<String>,
        Option<(String, String)>,
        Option<(bool, &'static str)>,
        Option<Duration>,
    );

    fn short(plan: ClaimPlan) -> Short {
        let written = plan.status.map(|s| {
            let ready = s
                .conditions
                .iter()
                .find(|c| c.type_ == types::READY)
                .map(|c| (c.reason.clone(), c.message.clone()));
            (s.phase, ready)
        });
        let (phase, ready) = written.unwrap_or_default();
        let event = plan.event.map(|(warning, reason, _)| (warning, reason));
        (phase, ready, event, plan.requeue)
    }

    fn ready_says(reason: &str, message: &str) -> Option<(String, String)> {
        Some((reason.to_string(), message.to_string()))
    }

    const RESYNC: Option<Duration> = Some(Duration::from_secs(300));

    // A table (or a generator) reads best whole.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn claims_are_decided_by_phase_and_target() {
        let env = |group: Option<&str>, pools| Target::Env {
            name: "e".into(),
            group: group.map(String::from),
            pools,
        };
        let cases: Vec<(&str, ClaimSnapshot, Timestamp, Short)> = vec![
            (
                "a missing pool is reported once, with a Warning",
                pending(vec![], pool(false, None)),
                t(1),
                (
                    Some("Pending".into()),
                    ready_says(reasons::POOL_NOT_FOUND, "SandboxPool ns/p does not exist"),
                    Some((true, reasons::POOL_NOT_FOUND)),
                    RESYNC,
                ),
            ),
            (
                "a pool that does not decode says why",
                pending(vec![], pool(false, Some("bad field"))),
                t(1),
                (
                    Some("Pending".into()),
                    ready_says(
                        reasons::POOL_NOT_FOUND,
                        "SandboxPool ns/p cannot be decoded (bad field)",
                    ),
                    Some((true, reasons::POOL_NOT_FOUND)),
                    RESYNC,
                ),
            ),
            (
                "an env without a pool of the group in this cluster",
                pending(vec![], env(Some("g"), 0)),
                t(1),
                (
                    Some("Pending".into()),
                    ready_says(
                        reasons::ENV_NOT_FOUND,
                        "SandboxEnv ns/e has no pool in group g in this cluster",
                    ),
                    Some((true, reasons::ENV_NOT_FOUND)),
                    RESYNC,
                ),
            ),
            (
                "a missing pool already reported: no second Event",
                pending(ready(reasons::POOL_NOT_FOUND), pool(false, None)),
                t(1),
                (
                    Some("Pending".into()),
                    ready_says(reasons::POOL_NOT_FOUND, "SandboxPool ns/p does not exist"),
                    None,
                    RESYNC,
                ),
            ),
            (
                "a fresh claim waits for its first bind without a write",
                pending(vec![], pool(true, None)),
                t(0) + SignedDuration::from_millis(500),
                (None, None, None, Some(Duration::from_millis(1500))),
            ),
            (
                "a claim still waiting after QUEUED_AFTER says Queued",
                pending(vec![], env(None, 2)),
                t(3),
                (
                    None,
                    ready_says(reasons::QUEUED, "waiting for an idle sandbox Pod"),
                    None,
                    RESYNC,
                ),
            ),
            (
                "a pool that appeared replaces the stale report",
                pending(ready(reasons::POOL_NOT_FOUND), pool(true, None)),
                t(1),
                (
                    None,
                    ready_says(reasons::QUEUED, "waiting for an idle sandbox Pod"),
                    None,
                    RESYNC,
                ),
            ),
            (
                "a queued claim already says so, and is looked at again in a while",
                pending(ready(reasons::QUEUED), pool(true, None)),
                t(30),
                (None, None, None, RESYNC),
            ),
            (
                "a bound claim is looked at again when its lifetime ends",
                bound(true),
                t(100),
                (None, None, None, Some(Duration::from_secs(500))),
            ),
            (
                "a lifetime that ended releases the claim",
                bound(true),
                t(600),
                (
                    Some("Released".into()),
                    ready_says("Released", "the claim's lifetime ended"),
                    Some((false, "Released")),
                    RESYNC,
                ),
            ),
            (
                "a lost Pod fails the claim",
                bound(false),
                t(100),
                (
                    Some("Failed".into()),
                    ready_says("PodLost", "sandbox Pod pod-1 was deleted"),
                    Some((true, "PodLost")),
                    RESYNC,
                ),
            ),
            (
                "a released claim is left alone",
                snap(SandboxClaimStatus::default(), Found::Settled),
                t(100),
                (None, None, None, None),
            ),
        ];
        for (name, s, now, want) in cases {
            assert_eq!(short(decide(&s, now)), want, "{name}");
        }
    }

    #[test]
    fn a_bound_status_names_the_pod_and_the_wait() {
        let s = bound_status(
            &SandboxClaimStatus::default(),
            Some(2),
            "pod-1",
            Some("10.0.0.1".into()),
            1500,
            t(5),
        );
        assert_eq!(
            (
                s.observed_generation,
                s.phase.as_deref(),
                s.pod_name.as_deref(),
                s.pod_ip.as_deref(),
                s.bound_at,
                s.wait_milliseconds,
                conditions::is_true(&s.conditions, types::READY),
            ),
            (
                Some(2),
                Some("Bound"),
                Some("pod-1"),
                Some("10.0.0.1"),
                Some(Time(t(5))),
                Some(1500),
                true
            )
        );
    }

    #[test]
    fn a_claim_that_decodes_again_loses_its_invalid_spec_report() {
        let bad = "spec.lifetime: invalid type";
        let invalid = conditions::merge(
            &[],
            &[
                Desired::new(types::READY, false, condition_reasons::INVALID_SPEC, bad),
                Desired::new(types::STALLED, true, condition_reasons::INVALID_SPEC, bad),
                Desired::new(
                    types::RECONCILING,
                    false,
                    condition_reasons::INVALID_SPEC,
                    bad,
                ),
            ],
            Some(2),
            t(0),
        );
        let only_ready = |s: &SandboxClaimStatus| {
            assert_eq!(s.observed_generation, Some(3), "{s:?}");
            assert_eq!(s.conditions.len(), 1, "{s:?}");
            let c = &s.conditions[0];
            assert_eq!(c.observed_generation, Some(3));
            (c.type_.clone(), c.status.clone(), c.reason.clone())
        };
        let mut held = bound(true);
        held.generation = Some(3);
        held.status.observed_generation = Some(2);
        held.status.conditions = invalid.clone();
        let plan = decide(&held, t(5));
        assert_eq!(plan.event, None);
        let written = plan.status.expect("the report replaced");
        assert_eq!(
            only_ready(&written),
            ("Ready".into(), "True".into(), "Bound".into())
        );
        held.status = written;
        assert_eq!(decide(&held, t(6)).status, None, "written once");

        let mut waiting = pending(invalid, pool(true, None));
        waiting.generation = Some(3);
        let written = decide(&waiting, t(5)).status.expect("the report replaced");
        assert_eq!(
            only_ready(&written),
            ("Ready".into(), "False".into(), reasons::QUEUED.into())
        );
    }
}
