//! Table tests for [`decide`]: hand-built snapshots, a fixed `now`, one `assert_eq!` on the
//! outcome of each decision; then property tests over random snapshots.
//!
//! The fixture: Pool `web-a`, in group `web` (enabled, min 4, max 20, scale-up cooldown
//! 10 s, quiet window 30 s, idle threshold 0, max step 10; scale-down stabilization 300 s,
//! idle timeout 600 s, max step 5) with one sibling Pool `web-b` at 2 replicas, so this
//! Pool ranges over [2, 18]. No quota limit, no claim ever bound, a recommendation history
//! that covers the last hour with no entry. `now` is 2026-11-30 10:00:00 UTC.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::api::sandbox::{ScaleDownPolicy, ScaleUpPolicy};
use crate::sandbox::autoscaler::forecast::Geometry;
use crate::sandbox::autoscaler::snapshot::{
    Admission, ForecastInput, InFlight, PoolView, QueueStats, RecommendationHistory, SiblingPool,
};

const POOL: &str = "web-a";

// ---------------------------------------------------------------------------------------
// Builders.

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn now() -> Timestamp {
    ts("2026-11-30T10:00:00Z")
}

fn ago(s: i64) -> Timestamp {
    plus(now(), SignedDuration::from_secs(-s))
}

fn after(s: i64) -> Timestamp {
    plus(now(), SignedDuration::from_secs(s))
}

fn at(t: Timestamp) -> Option<Time> {
    Some(Time(t))
}

/// The session id a scale-down started at `now()` gets.
fn new_id() -> String {
    decision_id(POOL, now())
}

fn group() -> ScalingGroup {
    ScalingGroup {
        name: "web".to_string(),
        enabled: true,
        min_replicas: 4,
        max_replicas: 20,
        scale_up_policy: ScaleUpPolicy {
            cooldown_seconds: 10,
            quiet_window_seconds: 30,
            idle_threshold: 0,
            max_step: 10,
            predictive: None,
        },
        scale_down_policy: ScaleDownPolicy {
            stabilization_window_seconds: 300,
            idle_timeout_seconds: 600,
            max_step: 5,
        },
    }
}

fn pod(name: &str, state: PodState) -> PoolPod {
    let up = matches!(state, PodState::Idle | PodState::Claimed);
    PoolPod {
        name: name.to_string(),
        uid: format!("{name}-uid"),
        resource_version: format!("{name}-rv"),
        state,
        ready: up,
        has_ip: up,
        idle_since: None,
        mark: None,
    }
}

/// Ready, with an IP, idle for `secs`.
fn idle(name: &str, secs: i64) -> PoolPod {
    PoolPod {
        idle_since: Some(ago(secs)),
        ..pod(name, PodState::Idle)
    }
}

fn claimed(name: &str) -> PoolPod {
    pod(name, PodState::Claimed)
}

fn starting(name: &str) -> PoolPod {
    pod(name, PodState::Starting)
}

fn terminating(name: &str) -> PoolPod {
    pod(name, PodState::Terminating)
}

/// `p` carrying the mark of `decision`, expiring `expires_in` seconds from now.
fn marked(p: PoolPod, decision: &str, expires_in: i64) -> PoolPod {
    PoolPod {
        mark: Some(ScaleDownMark {
            decision: decision.to_string(),
            expires_at: after(expires_in),
        }),
        ..p
    }
}

fn claims(n: usize) -> Vec<PoolPod> {
    (1..=n).map(|i| claimed(&format!("claimed-{i}"))).collect()
}

/// `spec.replicas = replicas` and these Pods; status: `desiredReplicas = replicas`, and
/// `idleZeroSince` 100 s ago when the Pool is dry (so bookkeeping is already done).
fn snap(replicas: i32, pods: Vec<PoolPod>) -> Snapshot {
    let dry = !pods.iter().any(PoolPod::claimable);
    Snapshot {
        pool: PoolView {
            name: POOL.to_string(),
            replicas,
            auto_scaling: PoolAutoScalingStatus {
                desired_replicas: Some(replicas),
                idle_zero_since: if dry { at(ago(100)) } else { None },
                ..PoolAutoScalingStatus::default()
            },
        },
        group: Some(group()),
        siblings: vec![SiblingPool {
            name: "web-b".to_string(),
            replicas: 2,
        }],
        queue: QueueStats::default(),
        pods,
        in_flight: InFlight::default(),
        last_claim_at: None,
        admission: Admission::default(),
        history: RecommendationHistory {
            since: Some(ago(3600)),
            entries: Vec::new(),
        },
        forecast: None,
    }
}

fn queued(mut s: Snapshot, pending: i32) -> Snapshot {
    s.queue = QueueStats {
        pending,
        oldest_pending_since: (pending > 0).then(|| ago(3)),
    };
    s
}

fn session(id: &str, state: &str, from: i32, target: i32, removed: i32) -> ScaleDownSession {
    ScaleDownSession {
        id: id.to_string(),
        state: state.to_string(),
        from,
        target,
        started_at: Time(ago(120)),
        updated_at: Time(ago(60)),
        removed,
        message: Some("marked earlier".to_string()),
    }
}

fn attempt(from: i32, target: i32, accepted: i32, result: &str) -> ScaleUpAttempt {
    ScaleUpAttempt {
        from,
        target,
        accepted,
        result: result.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// The outcome of a decision, compared in one `assert_eq!`.

#[derive(Debug, PartialEq)]
struct Outcome {
    desired: i32,
    status: PoolAutoScalingStatus,
    /// (Pod, decision, expiry).
    marks: Vec<(String, String, Timestamp)>,
    unmarks: Vec<(String, UnmarkReason)>,
    events: Vec<(EventType, &'static str)>,
    /// (type, status, reason) of `Saturated` and `ScalingLimited`.
    conditions: Vec<(&'static str, bool, String)>,
    recommendation: i32,
    requeue_at: Timestamp,
}

fn outcome(d: &Decision) -> Outcome {
    Outcome {
        desired: d.desired_replicas,
        status: d.status.clone(),
        marks: d
            .marks
            .iter()
            .map(|m| {
                (
                    m.pod.name.clone(),
                    m.mark.decision.clone(),
                    m.mark.expires_at,
                )
            })
            .collect(),
        unmarks: d
            .unmarks
            .iter()
            .map(|u| (u.pod.name.clone(), u.reason))
            .collect(),
        events: d.events.iter().map(|e| (e.type_, e.reason)).collect(),
        conditions: d
            .conditions
            .iter()
            .map(|c| (c.type_, c.status, c.reason.clone()))
            .collect(),
        recommendation: d.recommendation.replicas,
        requeue_at: d.requeue_at,
    }
}

fn run(s: &Snapshot) -> Outcome {
    outcome(&decide(s, now()))
}

fn conds(saturated: (bool, &str), limited: (bool, &str)) -> Vec<(&'static str, bool, String)> {
    vec![
        (
            condition_types::SATURATED,
            saturated.0,
            saturated.1.to_string(),
        ),
        (
            condition_types::SCALING_LIMITED,
            limited.0,
            limited.1.to_string(),
        ),
    ]
}

fn calm() -> Vec<(&'static str, bool, String)> {
    conds(
        (false, reasons::NOT_SATURATED),
        (false, reasons::WITHIN_BOUNDS),
    )
}

/// Nothing happens: the status as it is, no write, no Event, the safety resync.
fn unchanged(s: &Snapshot) -> Outcome {
    Outcome {
        desired: s.pool.replicas,
        status: s.pool.auto_scaling.clone(),
        marks: vec![],
        unmarks: vec![],
        events: vec![],
        conditions: calm(),
        recommendation: s.pool.replicas,
        requeue_at: plus(now(), RESYNC),
    }
}

fn marks_of(names: &[&str], decision: &str) -> Vec<(String, String, Timestamp)> {
    names
        .iter()
        .map(|n| (n.to_string(), decision.to_string(), after(60)))
        .collect()
}

fn ev(type_: EventType, reason: &'static str) -> (EventType, &'static str) {
    (type_, reason)
}

use EventType::{Normal, Warning};

// ---------------------------------------------------------------------------------------
// 1. Idle-zero bookkeeping.

#[test]
fn idle_zero_since_is_set_when_the_pool_runs_dry() {
    let mut s = snap(2, claims(2));
    s.pool.auto_scaling.idle_zero_since = None;
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                idle_zero_since: at(now()),
                ..s.pool.auto_scaling.clone()
            },
            requeue_at: after(30),
            ..unchanged(&s)
        }
    );
}

#[test]
fn idle_zero_since_is_kept_while_the_pool_stays_dry() {
    let s = snap(2, claims(2));
    assert_eq!(run(&s), unchanged(&s));
}

#[test]
fn idle_zero_since_is_cleared_when_an_idle_pod_appears() {
    let mut s = snap(2, vec![claimed("claimed-1"), idle("idle-1", 10)]);
    s.pool.auto_scaling.idle_zero_since = at(ago(100));
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                idle_zero_since: None,
                ..s.pool.auto_scaling.clone()
            },
            ..unchanged(&s)
        }
    );
}

#[test]
fn bookkeeping_runs_while_the_group_is_disabled() {
    let mut s = snap(1, claims(1));
    s.pool.auto_scaling.idle_zero_since = None;
    s.group = Some(ScalingGroup {
        enabled: false,
        ..group()
    });
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                idle_zero_since: at(now()),
                ..s.pool.auto_scaling.clone()
            },
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (false, reasons::AUTOSCALING_DISABLED)
            ),
            ..unchanged(&s)
        }
    );
}

#[test]
fn bookkeeping_runs_without_a_group() {
    let mut s = snap(1, vec![idle("idle-1", 10)]);
    s.pool.auto_scaling.idle_zero_since = at(ago(50));
    s.group = None;
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                idle_zero_since: None,
                ..s.pool.auto_scaling.clone()
            },
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (false, reasons::AUTOSCALING_DISABLED)
            ),
            ..unchanged(&s)
        }
    );
}

#[test]
fn idle_threshold_makes_a_pool_with_few_idle_pods_dry() {
    let mut s = snap(2, vec![claimed("claimed-1"), idle("idle-1", 10)]);
    if let Some(g) = s.group.as_mut() {
        g.scale_up_policy.idle_threshold = 1;
    }
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                idle_zero_since: at(now()),
                ..s.pool.auto_scaling.clone()
            },
            requeue_at: after(30),
            ..unchanged(&s)
        }
    );
}

// ---------------------------------------------------------------------------------------
// 2. Reactive scale-up.

/// The status after a full scale-up from `from` to `to` at `now()`.
fn scaled_up(s: &Snapshot, from: i32, to: i32) -> PoolAutoScalingStatus {
    PoolAutoScalingStatus {
        desired_replicas: Some(to),
        last_scale_up_time: at(now()),
        last_scale_up_attempt: Some(attempt(from, to, to, attempt_results::FULL)),
        ..s.pool.auto_scaling.clone()
    }
}

/// A full scale-up from `from` to `to`; the next boundary is the cooldown's end.
fn grew(s: &Snapshot, from: i32, to: i32) -> Outcome {
    Outcome {
        desired: to,
        status: scaled_up(s, from, to),
        events: vec![ev(Normal, reasons::SCALED_UP)],
        recommendation: to,
        requeue_at: after(10),
        ..unchanged(s)
    }
}

#[test]
fn reactive_scale_up_by_queued_claims_minus_starting_pods() {
    let mut pods = claims(2);
    pods.extend([starting("starting-1"), starting("starting-2")]);
    let s = queued(snap(4, pods), 5);
    assert_eq!(run(&s), grew(&s, 4, 7));
}

#[test]
fn reactive_scale_up_is_limited_by_max_step() {
    let s = queued(snap(2, claims(2)), 15);
    assert_eq!(run(&s), grew(&s, 2, 12));
}

#[test]
fn reactive_scale_up_stops_at_the_group_max_summed_over_siblings() {
    let mut s = queued(snap(6, claims(6)), 5);
    s.siblings[0].replicas = 12;
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (true, reasons::GROUP_MAX_REACHED)
            ),
            ..grew(&s, 6, 8)
        }
    );
}

#[test]
fn at_the_group_max_nothing_grows_and_the_condition_says_why() {
    let mut s = queued(snap(8, claims(8)), 3);
    s.siblings[0].replicas = 12;
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (true, reasons::GROUP_MAX_REACHED)
            ),
            ..unchanged(&s)
        }
    );
}

#[test]
fn reactive_scale_up_waits_for_the_cooldown_while_pods_are_starting() {
    let mut pods = claims(2);
    pods.extend([starting("starting-1"), starting("starting-2")]);
    let mut s = queued(snap(4, pods), 5);
    s.pool.auto_scaling.last_scale_up_time = at(ago(4));
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(6),
            ..unchanged(&s)
        }
    );
}

#[test]
fn reactive_scale_up_skips_the_cooldown_when_no_pod_is_coming() {
    let mut s = queued(snap(2, claims(2)), 3);
    s.pool.auto_scaling.last_scale_up_time = at(ago(4));
    assert_eq!(run(&s), grew(&s, 2, 5));
}

#[test]
fn pods_owed_by_the_pool_controller_count_as_coming() {
    // spec 6, 4 Pods: the pool controller still has 2 to create, and they will serve
    // the 2 queued claims.
    let s = queued(snap(6, claims(4)), 2);
    assert_eq!(run(&s), unchanged(&s));
}

#[test]
fn in_flight_creates_are_counted_and_deleted_pods_are_not() {
    // spec 5; 4 Pods cached, one of them deleted (Load shows a Pod this process deleted as
    // terminating until the cache does), 2 created but not cached yet: 3 + 2 = 5, nothing
    // owed, 2 Pods coming for 4 claims -> +2.
    let mut pods = claims(3);
    pods.push(terminating("gone-1"));
    let mut s = queued(snap(5, pods), 4);
    s.in_flight = InFlight { creates: 2 };
    assert_eq!(run(&s), grew(&s, 5, 7));
}

#[test]
fn idle_pods_serve_part_of_a_burst_and_the_rest_scales_up() {
    let s = queued(
        snap(
            3,
            vec![claimed("claimed-1"), idle("idle-1", 10), idle("idle-2", 10)],
        ),
        5,
    );
    assert_eq!(run(&s), grew(&s, 3, 6));
}

#[test]
fn claims_covered_by_starting_pods_do_not_scale_up() {
    let s = queued(
        snap(
            3,
            vec![
                starting("starting-1"),
                starting("starting-2"),
                starting("starting-3"),
            ],
        ),
        2,
    );
    assert_eq!(run(&s), unchanged(&s));
}

// ---------------------------------------------------------------------------------------
// 3. Proactive scale-up.

/// Dry for `dry_for` seconds, a claim bound `claimed_ago` seconds ago.
fn dry_in_use(replicas: i32, pods: Vec<PoolPod>, dry_for: i64, claimed_ago: i64) -> Snapshot {
    let mut s = snap(replicas, pods);
    s.pool.auto_scaling.idle_zero_since = at(ago(dry_for));
    s.last_claim_at = Some(ago(claimed_ago));
    s
}

#[test]
fn proactive_scale_up_after_the_quiet_window_when_in_use() {
    let s = dry_in_use(2, claims(2), 40, 60);
    assert_eq!(run(&s), grew(&s, 2, 3));
}

#[test]
fn no_proactive_scale_up_before_the_quiet_window_ends() {
    let s = dry_in_use(2, claims(2), 10, 60);
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(20),
            ..unchanged(&s)
        }
    );
}

#[test]
fn no_proactive_scale_up_without_a_recent_claim() {
    let s = dry_in_use(2, claims(2), 40, 700);
    assert_eq!(run(&s), unchanged(&s));
}

#[test]
fn no_proactive_scale_up_while_a_pod_is_starting() {
    let mut pods = claims(2);
    pods.push(starting("starting-1"));
    let s = dry_in_use(3, pods, 40, 60);
    assert_eq!(run(&s), unchanged(&s));
}

#[test]
fn proactive_scale_up_honours_the_cooldown() {
    let mut s = dry_in_use(2, claims(2), 40, 60);
    s.pool.auto_scaling.last_scale_up_time = at(ago(4));
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(6),
            ..unchanged(&s)
        }
    );
}

#[test]
fn proactive_scale_up_refills_to_idle_threshold_plus_one() {
    let mut s = dry_in_use(2, vec![claimed("claimed-1"), idle("idle-1", 10)], 40, 60);
    if let Some(g) = s.group.as_mut() {
        g.scale_up_policy.idle_threshold = 2;
    }
    assert_eq!(run(&s), grew(&s, 2, 4));
}

#[test]
fn a_pool_below_the_group_minimum_is_raised_to_it_even_in_cooldown() {
    let mut s = snap(0, vec![]);
    s.pool.auto_scaling.last_scale_up_time = at(ago(4));
    assert_eq!(run(&s), grew(&s, 0, 2));
}

// ---------------------------------------------------------------------------------------
// 4. Admission probe.

const QUOTA: &str = "exceeded quota compute: requests.cpu 8/10, each sandbox asks 1";

fn limited(mut s: Snapshot, headroom: i32) -> Snapshot {
    s.admission = Admission {
        headroom: Some(headroom),
        message: Some(QUOTA.to_string()),
    };
    s
}

#[test]
fn a_partly_accepted_scale_up_saturates_the_pool() {
    let s = limited(queued(snap(2, claims(2)), 5), 2);
    assert_eq!(
        run(&s),
        Outcome {
            desired: 4,
            status: PoolAutoScalingStatus {
                desired_replicas: Some(4),
                last_scale_up_time: at(now()),
                saturated_until: at(after(10)),
                scale_up_error_message: Some(QUOTA.to_string()),
                last_scale_up_attempt: Some(attempt(2, 7, 4, attempt_results::PARTIAL)),
                ..s.pool.auto_scaling.clone()
            },
            events: vec![ev(Warning, reasons::PARTIAL_SCALE_UP)],
            conditions: conds(
                (true, reasons::PARTIAL_SCALE_UP),
                (false, reasons::WITHIN_BOUNDS)
            ),
            recommendation: 4,
            requeue_at: after(10),
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_rejected_scale_up_changes_no_size_and_backs_off_for_the_longer_cooldown() {
    let mut s = limited(queued(snap(2, claims(2)), 5), 0);
    if let Some(g) = s.group.as_mut() {
        g.scale_up_policy.cooldown_seconds = 30;
    }
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                saturated_until: at(after(30)),
                scale_up_error_message: Some(QUOTA.to_string()),
                last_scale_up_attempt: Some(attempt(2, 7, 2, attempt_results::REJECTED)),
                ..s.pool.auto_scaling.clone()
            },
            events: vec![ev(Warning, reasons::SCALE_UP_REJECTED)],
            conditions: conds(
                (true, reasons::SCALE_UP_REJECTED),
                (false, reasons::WITHIN_BOUNDS)
            ),
            requeue_at: after(30),
            ..unchanged(&s)
        }
    );
}

/// Saturated until `until` by a rejected 2 → 7.
fn saturated(mut s: Snapshot, until: Timestamp) -> Snapshot {
    s.pool.auto_scaling.saturated_until = at(until);
    s.pool.auto_scaling.scale_up_error_message = Some(QUOTA.to_string());
    s.pool.auto_scaling.last_scale_up_attempt = Some(attempt(2, 7, 2, attempt_results::REJECTED));
    s
}

#[test]
fn no_scale_up_is_attempted_before_saturated_until() {
    let s = saturated(queued(snap(2, claims(2)), 5), after(5));
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (true, reasons::SCALE_UP_REJECTED),
                (false, reasons::WITHIN_BOUNDS)
            ),
            requeue_at: after(5),
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_fully_accepted_scale_up_clears_saturation() {
    let s = saturated(queued(snap(2, claims(2)), 5), ago(1));
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                saturated_until: None,
                scale_up_error_message: None,
                ..scaled_up(&s, 2, 7)
            },
            ..grew(&s, 2, 7)
        }
    );
}

#[test]
fn saturation_expires_when_no_scale_up_is_wanted() {
    let s = saturated(snap(2, claims(2)), ago(1));
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                saturated_until: None,
                scale_up_error_message: None,
                ..s.pool.auto_scaling.clone()
            },
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_rejected_attempt_identical_to_the_last_one_writes_nothing() {
    let s = limited(saturated(queued(snap(2, claims(2)), 5), ago(1)), 0);
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (true, reasons::SCALE_UP_REJECTED),
                (false, reasons::WITHIN_BOUNDS)
            ),
            ..unchanged(&s)
        }
    );
}

// ---------------------------------------------------------------------------------------
// 5. No scale-down when growing or with claims queued.

fn old_idle(n: usize) -> Vec<PoolPod> {
    (1..=n)
        .map(|i| {
            idle(
                &format!("idle-{i}"),
                600 + 100 * i64::try_from(i).unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn no_scale_down_in_a_cycle_that_scales_up() {
    let s = queued(snap(3, old_idle(3)), 5);
    assert_eq!(run(&s), grew(&s, 3, 5));
}

#[test]
fn no_scale_down_while_claims_are_queued() {
    // The 3 idle Pods serve the 2 claims: no growth, and no shrinking either.
    let s = queued(snap(3, old_idle(3)), 2);
    assert_eq!(run(&s), unchanged(&s));
}

// ---------------------------------------------------------------------------------------
// 6. Scale-down.

/// A session started at `now()` that marked `pods`, from `from` to `to`.
fn started(s: &Snapshot, from: i32, to: i32, pods: &[&str], why: &str) -> Outcome {
    let n = i32::try_from(pods.len()).unwrap_or(0);
    Outcome {
        desired: to,
        status: PoolAutoScalingStatus {
            desired_replicas: Some(to),
            last_scale_down_time: at(now()),
            scale_down_session: Some(ScaleDownSession {
                id: new_id(),
                state: session_states::STARTED.to_string(),
                from,
                target: to,
                started_at: Time(now()),
                updated_at: Time(now()),
                removed: n,
                message: Some(format!("marked {} ({why})", pods.join(", "))),
            }),
            ..s.pool.auto_scaling.clone()
        },
        marks: marks_of(pods, &new_id()),
        events: vec![ev(Normal, reasons::SCALE_DOWN_STARTED)],
        recommendation: to,
        requeue_at: after(60),
        ..unchanged(s)
    }
}

const IDLE_WHY: &str = "idle for at least 600s";

#[test]
fn idle_pods_past_the_timeout_are_marked_oldest_first() {
    let mut pods = claims(2);
    pods.extend([
        idle("idle-a", 700),
        idle("idle-b", 900),
        idle("idle-c", 650),
        idle("idle-d", 100),
    ]);
    let s = snap(6, pods);
    assert_eq!(
        run(&s),
        started(&s, 6, 3, &["idle-b", "idle-a", "idle-c"], IDLE_WHY)
    );
}

#[test]
fn scale_down_is_limited_by_its_max_step() {
    let mut pods = claims(2);
    pods.extend(old_idle(8));
    let s = snap(10, pods);
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 2,
            ..started(
                &s,
                10,
                5,
                &["idle-8", "idle-7", "idle-6", "idle-5", "idle-4"],
                IDLE_WHY
            )
        }
    );
}

#[test]
fn scale_down_stops_at_the_group_min_summed_over_siblings() {
    let s = snap(3, old_idle(3));
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (true, reasons::GROUP_MIN_REACHED)
            ),
            ..started(&s, 3, 2, &["idle-3"], IDLE_WHY)
        }
    );
}

#[test]
fn at_the_group_min_old_idle_pods_stay() {
    let s = snap(2, old_idle(2));
    assert_eq!(
        run(&s),
        Outcome {
            conditions: conds(
                (false, reasons::NOT_SATURATED),
                (true, reasons::GROUP_MIN_REACHED)
            ),
            ..unchanged(&s)
        }
    );
}

#[test]
fn stabilization_goes_down_only_to_the_highest_recent_recommendation() {
    let mut pods = claims(2);
    pods.extend(old_idle(4));
    let mut s = snap(6, pods);
    s.history.entries = vec![
        Recommendation {
            at: ago(400),
            replicas: 6,
        },
        Recommendation {
            at: ago(100),
            replicas: 5,
        },
        Recommendation {
            at: ago(50),
            replicas: 4,
        },
    ];
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 2,
            ..started(&s, 6, 5, &["idle-4"], IDLE_WHY)
        }
    );
}

#[test]
fn stabilization_holding_the_size_requeues_when_the_high_recommendation_leaves_the_window() {
    let mut pods = claims(2);
    pods.extend(old_idle(4));
    let mut s = snap(6, pods);
    s.history.entries = vec![
        Recommendation {
            at: ago(100),
            replicas: 6,
        },
        Recommendation {
            at: ago(50),
            replicas: 6,
        },
    ];
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 2,
            requeue_at: after(250),
            ..unchanged(&s)
        }
    );
}

#[test]
fn after_a_restart_nothing_is_removed_until_the_history_covers_the_window() {
    let mut pods = claims(2);
    pods.extend(old_idle(4));
    let mut s = snap(6, pods);
    s.history = RecommendationHistory {
        since: Some(ago(100)),
        entries: vec![Recommendation {
            at: ago(100),
            replicas: 2,
        }],
    };
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 2,
            requeue_at: after(200),
            ..unchanged(&s)
        }
    );
    s.history = RecommendationHistory::default();
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 2,
            ..unchanged(&s)
        }
    );
}

#[test]
fn idle_pods_of_unknown_age_are_not_removed() {
    let mut pods = claims(2);
    pods.extend([pod("idle-1", PodState::Idle), pod("idle-2", PodState::Idle)]);
    let s = snap(4, pods);
    assert_eq!(run(&s), unchanged(&s));
}

#[test]
fn a_pool_in_use_keeps_idle_threshold_plus_one_idle_pods() {
    let mut pods = claims(1);
    pods.extend(old_idle(3));
    let mut s = snap(4, pods);
    s.last_claim_at = Some(ago(60));
    assert_eq!(run(&s), started(&s, 4, 2, &["idle-3", "idle-2"], IDLE_WHY));
}

#[test]
fn no_scale_down_step_while_the_pool_is_unsettled() {
    let base = || {
        let mut pods = claims(2);
        pods.extend(old_idle(3));
        snap(5, pods)
    };
    let deleted = {
        let mut s = base();
        let last = s.pods.len() - 1;
        s.pods[last].state = PodState::Terminating;
        s
    };
    let in_flight_create = {
        let mut s = base();
        s.in_flight.creates = 1;
        s
    };
    let owed = {
        let mut s = base();
        s.pool.replicas = 6;
        s
    };
    let excess = {
        let mut s = base();
        s.pool.replicas = 4;
        s
    };
    let foreign_mark = {
        let mut s = base();
        s.pods.push(marked(idle("idle-x", 2000), "web-a-1", 30));
        s.pool.replicas = 6;
        s
    };
    for (case, s) in [
        ("a Pod deleted, not gone yet", deleted),
        ("in-flight create", in_flight_create),
        ("Pods owed", owed),
        ("excess Pods", excess),
        ("unexpired foreign mark", foreign_mark),
    ] {
        let d = decide(&s, now());
        assert_eq!(
            (case, d.marks.len(), d.desired_replicas),
            (case, 0, s.pool.replicas)
        );
    }
}

#[test]
fn above_the_group_max_idle_pods_are_shed_regardless_of_age_and_stabilization() {
    let mut pods = claims(2);
    pods.extend([
        idle("idle-1", 10),
        idle("idle-2", 20),
        idle("idle-3", 30),
        idle("idle-4", 40),
    ]);
    let mut s = snap(6, pods);
    s.siblings[0].replicas = 16;
    s.history.entries = vec![Recommendation {
        at: ago(10),
        replicas: 6,
    }];
    assert_eq!(
        run(&s),
        Outcome {
            recommendation: 4,
            ..started(
                &s,
                6,
                4,
                &["idle-4", "idle-3"],
                "above the group maximum of 4"
            )
        }
    );
}

// ---------------------------------------------------------------------------------------
// 7. Two-phase sessions.

const SESSION: &str = "web-a-1796032680000";

fn with_session(mut s: Snapshot, sess: ScaleDownSession) -> Snapshot {
    s.pool.auto_scaling.scale_down_session = Some(sess);
    s.pool.auto_scaling.last_scale_down_time = at(ago(120));
    s
}

#[test]
fn a_session_steps_once_its_marked_pods_are_gone() {
    let mut pods = claims(4);
    pods.extend(old_idle(3));
    let s = with_session(
        snap(7, pods),
        session(SESSION, session_states::STARTED, 10, 7, 3),
    );
    assert_eq!(
        run(&s),
        Outcome {
            desired: 4,
            status: PoolAutoScalingStatus {
                desired_replicas: Some(4),
                last_scale_down_time: at(now()),
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::STEPPED.to_string(),
                    target: 4,
                    removed: 6,
                    updated_at: Time(now()),
                    message: Some(format!("marked idle-3, idle-2, idle-1 ({IDLE_WHY})")),
                    ..session(SESSION, session_states::STARTED, 10, 7, 3)
                }),
                ..s.pool.auto_scaling.clone()
            },
            marks: marks_of(&["idle-3", "idle-2", "idle-1"], SESSION),
            events: vec![ev(Normal, reasons::SCALE_DOWN_STEPPED)],
            recommendation: 4,
            requeue_at: after(60),
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_session_waits_while_its_marked_pods_are_being_deleted() {
    let mut pods = claims(2);
    pods.extend([
        idle("idle-1", 10),
        idle("idle-2", 10),
        marked(idle("gone-1", 900), SESSION, 30),
        marked(idle("gone-2", 800), SESSION, 30),
    ]);
    let s = with_session(
        snap(4, pods),
        session(SESSION, session_states::STARTED, 6, 4, 2),
    );
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(30),
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_session_completes_when_no_live_pod_carries_its_mark() {
    let mut pods = claims(2);
    pods.extend([
        idle("idle-1", 10),
        idle("idle-2", 10),
        marked(terminating("gone-1"), SESSION, 30),
    ]);
    let s = with_session(
        snap(4, pods),
        session(SESSION, session_states::STEPPED, 6, 4, 2),
    );
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::COMPLETED.to_string(),
                    updated_at: Time(now()),
                    message: Some("completed: 6 → 4, 2 Pod(s) removed".to_string()),
                    ..session(SESSION, session_states::STEPPED, 6, 4, 2)
                }),
                ..s.pool.auto_scaling.clone()
            },
            events: vec![ev(Normal, reasons::SCALE_DOWN_COMPLETED)],
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_session_is_aborted_when_claims_arrive_and_its_pods_are_given_back() {
    let mut pods = claims(2);
    pods.extend([
        marked(idle("gone-1", 900), SESSION, 30),
        marked(idle("gone-2", 800), SESSION, 30),
    ]);
    let s = queued(
        with_session(
            snap(2, pods),
            session(SESSION, session_states::STARTED, 4, 2, 2),
        ),
        2,
    );
    assert_eq!(
        run(&s),
        Outcome {
            desired: 4,
            status: PoolAutoScalingStatus {
                desired_replicas: Some(4),
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::ABORTED.to_string(),
                    updated_at: Time(now()),
                    removed: 0,
                    message: Some(
                        "aborted: 2 claim(s) queued; 2 marked Pod(s) returned to the Pool (2 → 4)"
                            .to_string()
                    ),
                    ..session(SESSION, session_states::STARTED, 4, 2, 2)
                }),
                ..s.pool.auto_scaling.clone()
            },
            unmarks: vec![
                ("gone-1".to_string(), UnmarkReason::Aborted),
                ("gone-2".to_string(), UnmarkReason::Aborted),
            ],
            events: vec![ev(Normal, reasons::SCALE_DOWN_ABORTED)],
            recommendation: 4,
            ..unchanged(&s)
        }
    );
}

#[test]
fn a_session_whose_marks_expire_is_stuck_and_its_marks_removed() {
    let mut pods = claims(2);
    pods.push(marked(idle("gone-1", 900), SESSION, -1));
    let s = with_session(
        snap(2, pods),
        session(SESSION, session_states::STARTED, 3, 2, 1),
    );
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::STUCK.to_string(),
                    updated_at: Time(now()),
                    message: Some(
                        "mark(s) on gone-1 expired before the Pod(s) were deleted; marks removed"
                            .to_string()
                    ),
                    ..session(SESSION, session_states::STARTED, 3, 2, 1)
                }),
                ..s.pool.auto_scaling.clone()
            },
            unmarks: vec![("gone-1".to_string(), UnmarkReason::Expired)],
            events: vec![ev(Warning, reasons::SCALE_DOWN_STUCK)],
            ..unchanged(&s)
        }
    );
}

#[test]
fn expired_and_unreadable_marks_of_other_decisions_are_swept() {
    let mut pods = claims(2);
    pods.extend([
        marked(idle("left-1", 900), "web-a-1", -30),
        PoolPod {
            mark: Some(ScaleDownMark::from_annotation("not json")),
            ..idle("left-2", 900)
        },
    ]);
    let mut s = snap(4, pods);
    s.pool.auto_scaling.idle_zero_since = at(ago(100));
    assert_eq!(
        run(&s),
        Outcome {
            unmarks: vec![
                ("left-1".to_string(), UnmarkReason::Expired),
                ("left-2".to_string(), UnmarkReason::Expired),
            ],
            events: vec![ev(Warning, reasons::SCALE_DOWN_STUCK)],
            ..unchanged(&s)
        }
    );
}

#[test]
fn unexpired_marks_of_unknown_decisions_are_left_to_expire() {
    let mut pods = claims(2);
    pods.push(marked(idle("other-1", 900), "web-a-1", 45));
    let s = snap(2, pods);
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(45),
            ..unchanged(&s)
        }
    );
}

// ---------------------------------------------------------------------------------------
// 8. Claimed, starting, not-Ready Pods.

#[test]
fn a_claimed_pod_with_a_mark_is_unmarked_and_kept() {
    let mut pods = claims(2);
    pods.extend([idle("idle-1", 10), marked(claimed("raced-1"), SESSION, 30)]);
    let s = with_session(
        snap(3, pods),
        session(SESSION, session_states::STARTED, 4, 3, 1),
    );
    assert_eq!(
        run(&s),
        Outcome {
            desired: 4,
            status: PoolAutoScalingStatus {
                desired_replicas: Some(4),
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::COMPLETED.to_string(),
                    removed: 0,
                    updated_at: Time(now()),
                    message: Some("completed: 4 → 4, 0 Pod(s) removed".to_string()),
                    ..session(SESSION, session_states::STARTED, 4, 3, 1)
                }),
                ..s.pool.auto_scaling.clone()
            },
            unmarks: vec![("raced-1".to_string(), UnmarkReason::Claimed)],
            events: vec![
                ev(Warning, reasons::MARKED_POD_CLAIMED),
                ev(Normal, reasons::SCALE_DOWN_COMPLETED)
            ],
            recommendation: 4,
            ..unchanged(&s)
        }
    );
}

#[test]
fn starting_and_not_ready_pods_are_never_marked() {
    let pods = vec![
        claimed("claimed-1"),
        PoolPod {
            idle_since: Some(ago(900)),
            ..starting("starting-1")
        },
        PoolPod {
            ready: false,
            ..idle("not-ready-1", 900)
        },
        PoolPod {
            has_ip: false,
            ..idle("no-ip-1", 900)
        },
        PoolPod {
            idle_since: Some(ago(900)),
            ..claimed("claimed-2")
        },
    ];
    let s = snap(5, pods);
    assert_eq!(run(&s), unchanged(&s));
}

// ---------------------------------------------------------------------------------------
// 9. Autoscaling off.

fn disabled_group() -> Option<ScalingGroup> {
    Some(ScalingGroup {
        enabled: false,
        ..group()
    })
}

fn off() -> Vec<(&'static str, bool, String)> {
    conds(
        (false, reasons::NOT_SATURATED),
        (false, reasons::AUTOSCALING_DISABLED),
    )
}

#[test]
fn a_disabled_group_makes_no_scaling_decision() {
    let mut pods = claims(2);
    pods.extend(old_idle(4));
    let mut s = queued(snap(6, pods), 9);
    s.group = disabled_group();
    s.pool.replicas = 1;
    s.pool.auto_scaling.desired_replicas = Some(1);
    assert_eq!(
        run(&s),
        Outcome {
            desired: 1,
            recommendation: 1,
            conditions: off(),
            ..unchanged(&s)
        }
    );
}

#[test]
fn disabling_aborts_an_open_session_without_giving_pods_back() {
    let mut pods = claims(1);
    pods.push(marked(idle("gone-1", 900), SESSION, 30));
    let mut s = with_session(
        snap(1, pods),
        session(SESSION, session_states::STARTED, 2, 1, 1),
    );
    s.group = disabled_group();
    assert_eq!(
        run(&s),
        Outcome {
            status: PoolAutoScalingStatus {
                scale_down_session: Some(ScaleDownSession {
                    state: session_states::ABORTED.to_string(),
                    updated_at: Time(now()),
                    message: Some(
                        "aborted: autoscaling group web is disabled; marks removed".to_string()
                    ),
                    ..session(SESSION, session_states::STARTED, 2, 1, 1)
                }),
                ..s.pool.auto_scaling.clone()
            },
            unmarks: vec![("gone-1".to_string(), UnmarkReason::Aborted)],
            events: vec![ev(Normal, reasons::SCALE_DOWN_ABORTED)],
            conditions: off(),
            ..unchanged(&s)
        }
    );
}

#[test]
fn without_a_group_the_pool_keeps_its_replicas() {
    let mut s = queued(snap(3, claims(3)), 4);
    s.group = None;
    assert_eq!(
        run(&s),
        Outcome {
            conditions: off(),
            ..unchanged(&s)
        }
    );
}

// ---------------------------------------------------------------------------------------
// 10. Steady state.

/// What the Pool looks like after the commit of `d` (the pool controller not run yet).
fn committed(s: &Snapshot, d: &Decision) -> Snapshot {
    let mut next = s.clone();
    next.pool.replicas = d.desired_replicas;
    next.pool.auto_scaling = d.status.clone();
    next
}

#[test]
fn a_steady_pool_writes_nothing_and_says_nothing() {
    let idle_pool = snap(
        4,
        vec![claimed("claimed-1"), idle("idle-1", 30), idle("idle-2", 60)],
    );
    let at_min = snap(2, old_idle(2));
    let dry_unused = snap(2, claims(2));
    let parked_at_quota = limited(saturated(queued(snap(2, claims(2)), 5), ago(1)), 0);
    let mut off = queued(snap(3, claims(3)), 4);
    off.group = disabled_group();
    let mut fresh = snap(3, vec![idle("idle-1", 10)]);
    fresh.pool.auto_scaling = PoolAutoScalingStatus::default();
    for (case, s) in [
        ("idle pool", idle_pool),
        ("at the group min", at_min),
        ("dry, unused", dry_unused),
        ("parked at a full quota", parked_at_quota),
        ("disabled", off),
        ("never decided before", fresh),
    ] {
        let first = decide(&s, now());
        let s = committed(&s, &first);
        let again = decide(&s, now() + SignedDuration::from_secs(1));
        assert_eq!(
            (
                case,
                again.changes_nothing(&s),
                &again.conditions,
                again.requeue_at > now()
            ),
            (case, true, &first.conditions, true),
            "{again:#?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Notes, ids, annotations, history.

#[test]
fn events_and_conditions_tell_the_story() {
    let mut pods = claims(2);
    pods.extend([starting("starting-1")]);
    let s = limited(queued(snap(3, pods), 5), 2);
    let d = decide(&s, now());
    let notes: Vec<&str> = d.events.iter().map(|e| e.note.as_str()).collect();
    let messages: Vec<&str> = d.conditions.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        (notes, messages),
        (
            vec![
                "scaled up from 3 to 5 of 7 wanted (5 claim(s) queued, the oldest waiting 3s, 0 idle, 1 Pod(s) on the way): exceeded quota compute: requests.cpu 8/10, each sandbox asks 1"
            ],
            vec![
                "exceeded quota compute: requests.cpu 8/10, each sandbox asks 1; the last scale-up from 3 to 7 was accepted up to 5",
                ""
            ]
        )
    );
}

#[test]
fn scale_down_events_name_the_session_and_the_pods() {
    let s = snap(3, old_idle(3));
    let d = decide(&s, now());
    let notes: Vec<(&str, &str)> = d
        .events
        .iter()
        .map(|e| (e.reason, e.note.as_str()))
        .collect();
    let messages: Vec<&str> = d.conditions.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        (notes, messages),
        (
            vec![(
                reasons::SCALE_DOWN_STARTED,
                "scale-down web-a-1796032800000: marked idle-3 (idle for at least 600s); 3 → 2"
            )],
            vec![
                "",
                "group web keeps at least 4 Pod(s) over its Pools and the other Pools hold 2: this Pool stays at or above 2"
            ]
        )
    );
}

#[test]
fn decision_ids_are_the_pool_name_and_the_instant() {
    assert_eq!(
        (
            decision_id(POOL, now()),
            decision_id(POOL, now() + SignedDuration::from_millis(5))
        ),
        (
            "web-a-1796032800000".to_string(),
            "web-a-1796032800005".to_string()
        )
    );
}

#[test]
fn the_mark_annotation_round_trips_at_whole_seconds() {
    let mark = ScaleDownMark {
        decision: SESSION.to_string(),
        expires_at: after(60),
    };
    let value = mark.to_annotation();
    assert_eq!(
        (
            value.as_str(),
            ScaleDownMark::from_annotation(&value),
            ScaleDownMark::from_annotation("{\"decision\": 3}")
        ),
        (
            r#"{"decision":"web-a-1796032680000","expiresAt":"2026-11-30T10:01:00Z"}"#,
            mark,
            ScaleDownMark::unreadable()
        )
    );
}

#[test]
fn marks_and_status_times_are_whole_seconds() {
    let s = snap(3, old_idle(3));
    let d = decide(&s, now() + SignedDuration::from_millis(400));
    assert_eq!(
        (
            d.marks[0].mark.expires_at,
            d.status.last_scale_down_time.clone()
        ),
        (after(60), at(now()))
    );
}

#[test]
fn the_history_keeps_what_a_window_can_reach() {
    let window = SignedDuration::from_secs(300);
    let mut h = RecommendationHistory::default();
    for (t, r) in [(ago(600), 9), (ago(301), 8), (ago(100), 7)] {
        h.record(Recommendation { at: t, replicas: r }, window);
    }
    h.record(
        Recommendation {
            at: now(),
            replicas: 6,
        },
        window,
    );
    assert_eq!(
        (
            h.since,
            h.entries.iter().map(|r| r.replicas).collect::<Vec<_>>(),
            h.covers(ago(300)),
            h.covers(ago(700))
        ),
        (Some(ago(600)), vec![7, 6], true, false)
    );
}

#[test]
fn the_requeue_is_the_next_idle_timeout() {
    let s = snap(
        3,
        vec![
            claimed("claimed-1"),
            idle("idle-1", 550),
            idle("idle-2", 100),
        ],
    );
    assert_eq!(
        run(&s),
        Outcome {
            requeue_at: after(50),
            ..unchanged(&s)
        }
    );
}

// ---------------------------------------------------------------------------------------
// Properties over random snapshots.

fn arb_pod() -> impl Strategy<Value = (u8, bool, bool, Option<i64>, Option<(u8, i64)>)> {
    (
        0..4u8,
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.8),
        prop::option::weighted(0.9, 0..2000i64),
        prop::option::weighted(0.1, (0..3u8, -120..120i64)),
    )
}

const OPEN: &str = "web-a-1";

// A table (or a generator) reads best whole.
#[allow(clippy::too_many_lines)]
fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    let group = prop::option::weighted(
        0.9,
        (
            prop::bool::weighted(0.85),
            0..12i32,
            0..25i32,
            (0..60i32, 0..60i32, 0..3i32, 1..6i32),
            (0..600i32, 0..900i32, 1..6i32),
        ),
    );
    let pool = (
        // A size, or none: the Pool is as big as its live Pods (settled).
        prop::option::weighted(0.4, -2..30i32),
        prop::collection::vec(0..10i32, 0..3),
        prop_oneof![2 => Just(0i32), 1 => 0..12i32],
        prop::collection::vec(arb_pod(), 0..16),
        prop_oneof![3 => Just(0i32), 1 => 0..3i32],
        prop::option::of(0..1200i64),
        prop::option::of(0..8i32),
    );
    let history = (
        prop::option::of(0..900i64),
        prop::collection::vec((0..900i64, 0..30i32), 0..5),
    );
    let prev = (
        prop::option::of(0..30i64),
        prop::option::of(-30..30i64),
        prop::option::of(0..200i64),
        prop::option::of(0..5u8),
        any::<bool>(),
    );
    // Predictive warm-up: the expectation of the slots of now and the next, the measured
    // Pod start time, whether predictions are enabled.
    let forecast = prop::option::weighted(0.4, (0..6000i32, 0..6000i32, 0..120i32, any::<bool>()));
    (group, pool, history, prev, forecast).prop_map(|(g, pool, hist, prev, fc)| {
        let (size, siblings, pending, pods, creates, claimed_ago, headroom) = pool;
        let states = [
            PodState::Starting,
            PodState::Idle,
            PodState::Claimed,
            PodState::Terminating,
        ];
        let pods = pods
            .into_iter()
            .enumerate()
            .map(|(i, (state, ready, ip, idle_for, mark))| PoolPod {
                name: format!("p{i:02}"),
                uid: format!("u{i}"),
                resource_version: format!("r{i}"),
                state: states[usize::from(state)],
                ready,
                has_ip: ip,
                idle_since: idle_for.map(ago),
                mark: mark.map(|(who, exp)| match who {
                    0 => ScaleDownMark {
                        decision: OPEN.to_string(),
                        expires_at: after(exp),
                    },
                    1 => ScaleDownMark {
                        decision: "web-a-0".to_string(),
                        expires_at: after(exp),
                    },
                    _ => ScaleDownMark::unreadable(),
                }),
            })
            .collect::<Vec<_>>();
        let live = pods
            .iter()
            .filter(|p| p.state != PodState::Terminating)
            .count();
        let replicas = size.unwrap_or_else(|| i32::try_from(live).unwrap_or(0));
        let session_states = [
            session_states::STARTED,
            session_states::STEPPED,
            session_states::COMPLETED,
            session_states::ABORTED,
            session_states::STUCK,
        ];
        let (last_up, sat, dry, sess, attempt_kept) = prev;
        Snapshot {
            pool: PoolView {
                name: POOL.to_string(),
                replicas,
                auto_scaling: PoolAutoScalingStatus {
                    desired_replicas: Some(replicas),
                    idle_zero_since: dry.map(|d| Time(ago(d))),
                    last_scale_up_time: last_up.map(|d| Time(ago(d))),
                    last_scale_down_time: None,
                    saturated_until: sat.map(|d| Time(after(d))),
                    scale_up_error_message: sat.map(|_| QUOTA.to_string()),
                    last_scale_up_attempt: attempt_kept
                        .then(|| attempt(replicas, replicas + 1, replicas, "Rejected")),
                    scale_down_session: sess.map(|k| {
                        session(
                            OPEN,
                            session_states[usize::from(k)],
                            replicas + 1,
                            replicas,
                            1,
                        )
                    }),
                    prediction: None,
                },
            },
            group: g.map(
                |(enabled, min, extra, (cool, quiet, thr, up), (stab, timeout, down))| {
                    ScalingGroup {
                        name: "web".to_string(),
                        enabled,
                        min_replicas: min,
                        max_replicas: min + extra,
                        scale_up_policy: ScaleUpPolicy {
                            cooldown_seconds: cool,
                            quiet_window_seconds: quiet,
                            idle_threshold: thr,
                            max_step: up,
                            predictive: None,
                        },
                        scale_down_policy: ScaleDownPolicy {
                            stabilization_window_seconds: stab,
                            idle_timeout_seconds: timeout,
                            max_step: down,
                        },
                    }
                },
            ),
            siblings: siblings
                .into_iter()
                .enumerate()
                .map(|(i, r)| SiblingPool {
                    name: format!("s{i}"),
                    replicas: r,
                })
                .collect(),
            queue: QueueStats {
                pending,
                oldest_pending_since: (pending > 0).then(|| ago(5)),
            },
            pods,
            in_flight: InFlight { creates },
            last_claim_at: claimed_ago.map(ago),
            admission: Admission {
                headroom,
                message: headroom.map(|_| QUOTA.to_string()),
            },
            history: RecommendationHistory {
                since: hist.0.map(ago),
                entries: hist
                    .1
                    .into_iter()
                    .map(|(a, r)| Recommendation {
                        at: ago(a),
                        replicas: r,
                    })
                    .collect(),
            },
            forecast: fc.map(arb_forecast),
        }
    })
}

/// A forecast of 15-minute slots of a week in UTC whose history expects `now_e` and
/// `next_e` hundredths of claims in the slots of `now` and the next, Pods starting in
/// `lead` seconds.
fn arb_forecast((now_e, next_e, lead, enabled): (i32, i32, i32, bool)) -> ForecastInput {
    let policy = crate::api::sandbox::PredictivePolicy::default();
    let geometry = Geometry::of(&policy).expect("UTC");
    let mut history = geometry.new_history(now(), Some(lead));
    let slot = geometry.slot_at(now()).index;
    history.expected[slot] = now_e;
    let next = (slot + 1) % history.expected.len();
    history.expected[next] = next_e;
    ForecastInput {
        geometry: Ok(geometry),
        enabled,
        history: Some(history),
        arrivals: Vec::new(),
        starts: vec![SignedDuration::from_secs(i64::from(lead))],
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4096,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn decide_keeps_its_invariants(s in arb_snapshot()) {
        let d = decide(&s, now());
        let spec = s.pool.replicas.max(0);
        let enabled = s.group.as_ref().is_some_and(|g| g.enabled);

        // Always answers, always in the future, at most a resync away.
        prop_assert!(d.requeue_at > now() && d.requeue_at <= plus(now(), RESYNC));
        prop_assert_eq!(d.status.desired_replicas, Some(d.desired_replicas));
        prop_assert!(d.desired_replicas >= 0);

        // Never marks anything but a claimable Pod, each once, all with one fresh mark.
        for m in &d.marks {
            let p = s.pods.iter().find(|p| p.name == m.pod.name);
            prop_assert!(p.is_some_and(PoolPod::claimable), "marked {:?}", p);
            prop_assert!(m.mark.expires_at > now());
            prop_assert_eq!(&m.mark.decision, &d.marks[0].mark.decision);
        }
        let mut names: Vec<&str> = d.marks.iter().map(|m| m.pod.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        prop_assert_eq!(names.len(), d.marks.len());
        // Every marked claimed Pod loses its mark; only marked Pods are unmarked.
        for p in s.pods.iter().filter(|p| p.mark.is_some() && p.state == PodState::Claimed) {
            prop_assert!(d.unmarks.iter().any(|u| u.pod.name == p.name && u.reason == UnmarkReason::Claimed));
        }
        for u in &d.unmarks {
            prop_assert!(s.pods.iter().any(|p| p.name == u.pod.name && p.mark.is_some()));
        }

        // Never scales down while claims are queued, nor in a cycle that scaled up.
        if s.queue.pending > 0 || d.status.last_scale_up_attempt != s.pool.auto_scaling.last_scale_up_attempt {
            prop_assert!(d.marks.is_empty());
        }
        // Shrinking happens only through marks, one replica per mark.
        if !d.marks.is_empty() {
            prop_assert_eq!(d.desired_replicas, spec - i32::try_from(d.marks.len()).unwrap_or(0));
        } else {
            prop_assert!(d.desired_replicas >= spec);
        }

        let Some(g) = s.group.as_ref().filter(|_| enabled) else {
            prop_assert_eq!(d.desired_replicas, spec);
            prop_assert!(d.marks.is_empty());
            return Ok(());
        };
        let siblings: i32 = s.siblings.iter().map(|x| x.replicas.max(0)).sum();
        let pool_max = (g.max_replicas - siblings).max(0);
        let pool_min = (g.min_replicas - siblings).clamp(0, pool_max);
        // Given back by an abort or a claimed mark: the open session's marks.
        let open = s.pool.auto_scaling.scale_down_session.as_ref()
            .is_some_and(|x| x.state == session_states::STARTED || x.state == session_states::STEPPED);
        let given_back = i32::try_from(d.unmarks.iter().filter(|u| {
            open && u.reason != UnmarkReason::Expired
                && s.pods.iter().any(|p| p.name == u.pod.name && p.mark.as_ref().is_some_and(|m| m.decision == OPEN))
        }).count()).unwrap_or(0);
        // Never grows past the group max (summed over siblings).
        prop_assert!(d.desired_replicas <= pool_max.max(spec + given_back), "max {} spec {} → {}", pool_max, spec, d.desired_replicas);
        // Never goes below the group min because of a scale-down.
        if !d.marks.is_empty() {
            prop_assert!(d.desired_replicas >= pool_min, "min {} → {}", pool_min, d.desired_replicas);
        }
    }

    /// Committing a decision and deciding again at the same instant marks nothing new
    /// while the first marks are pending (one step at a time), and never re-marks a Pod.
    #[test]
    fn one_scale_down_step_at_a_time(s in arb_snapshot()) {
        let d = decide(&s, now());
        if d.marks.is_empty() {
            return Ok(());
        }
        let mut next = committed(&s, &d);
        for m in &d.marks {
            if let Some(p) = next.pods.iter_mut().find(|p| p.name == m.pod.name) {
                p.mark = Some(m.mark.clone());
                p.resource_version.push('+');
            }
        }
        let again = decide(&next, now());
        prop_assert!(again.marks.is_empty(), "{:?}", again.marks);
        prop_assert_eq!(again.desired_replicas, d.desired_replicas);
    }
}
