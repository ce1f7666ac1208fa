//! Table tests for predictive warm-up, through [`decide`](super::super::decide): the claim
//! history kept slot by slot, the Pods asked for one Pod start time ahead of a busy slot,
//! the bounds and the scale-down that take them back.
//!
//! The fixture: Pool `web-a` alone in group `web` (min 1, max 20, cooldown 10 s, the other
//! knobs at their defaults) with 15-minute slots of a week in UTC; `now` is Monday
//! 2026-11-30 10:00:00 UTC, the start of slot 40; Pods took 30 s to start.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::super::super::forecast::{Geometry, blend};
use super::super::super::snapshot::{
    Admission, Arrival, ForecastInput, InFlight, PodState, PoolPod, PoolView, QueueStats,
    RecommendationHistory, Snapshot,
};
use super::super::{EventType, decide, reasons};
use crate::api::sandbox::{
    ClaimHistory, PoolAutoScalingStatus, PredictivePolicy, ScaleDownPolicy, ScaleUpPolicy,
    ScalingGroup,
};
use crate::sandbox::autoscaler::RESYNC;

const SLOT: usize = 40;

fn now() -> Timestamp {
    "2026-11-30T10:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    now() + SignedDuration::from_secs(secs)
}

fn policy() -> PredictivePolicy {
    PredictivePolicy::default()
}

fn group(predictive: PredictivePolicy) -> ScalingGroup {
    ScalingGroup {
        name: "web".into(),
        enabled: true,
        min_replicas: 1,
        max_replicas: 20,
        scale_up_policy: ScaleUpPolicy {
            predictive: Some(predictive),
            ..ScaleUpPolicy::default()
        },
        scale_down_policy: ScaleDownPolicy::default(),
    }
}

fn idle(name: &str, idle_for: i64) -> PoolPod {
    PoolPod {
        name: name.into(),
        uid: format!("{name}-uid"),
        resource_version: "1".into(),
        state: PodState::Idle,
        ready: true,
        has_ip: true,
        idle_since: Some(at(-idle_for)),
        mark: None,
    }
}

/// A history opened at the slot of `now`, with `expected` claims (hundredths) for the
/// slots given and none observed elsewhere.
fn history(expected: &[(usize, i32)]) -> ClaimHistory {
    let g = Geometry::of(&policy()).unwrap();
    let mut h = g.new_history(now(), Some(30));
    for &(slot, e) in expected {
        h.expected[slot] = e;
    }
    h
}

/// Two idle Pods (idle 60 s), no claim queued, the given history; Pods started in 30 s.
fn snap(history: Option<ClaimHistory>) -> Snapshot {
    Snapshot {
        pool: PoolView {
            name: "web-a".into(),
            replicas: 2,
            auto_scaling: PoolAutoScalingStatus {
                desired_replicas: Some(2),
                ..PoolAutoScalingStatus::default()
            },
        },
        group: Some(group(policy())),
        siblings: Vec::new(),
        queue: QueueStats::default(),
        pods: vec![idle("a", 60), idle("b", 60)],
        in_flight: InFlight::default(),
        last_claim_at: None,
        admission: Admission::default(),
        history: RecommendationHistory {
            since: Some(at(-3600)),
            entries: Vec::new(),
        },
        forecast: Some(ForecastInput {
            geometry: Geometry::of(&policy()),
            enabled: true,
            history,
            arrivals: Vec::new(),
            starts: vec![SignedDuration::from_secs(30); 2],
        }),
    }
}

fn reasons_of(d: &super::super::Decision) -> Vec<(EventType, &'static str)> {
    d.events.iter().map(|e| (e.type_, e.reason)).collect()
}

#[test]
fn a_pool_without_history_starts_one_and_predicts_nothing() {
    let d = decide(&snap(None), now());
    let h = d.claim_history.expect("a new history is written");
    assert_eq!(h.open_slot_start, Time(now()));
    assert_eq!(
        (h.slot_seconds, h.period_seconds, h.time_zone.as_str()),
        (900, 604_800, "UTC")
    );
    assert_eq!(h.expected.len(), 672);
    assert!(h.expected.iter().all(|e| *e == -1));
    assert_eq!(h.pod_start_seconds, Some(30));
    assert_eq!(d.desired_replicas, 2);
    let p = d.status.prediction.expect("a prediction");
    assert_eq!(
        (p.expected_claims, p.ready_pods, p.lead_seconds),
        (0, 0, 30)
    );
    assert!(d.events.is_empty());
    // The requeue is no later than the end of the open slot.
    assert!(d.requeue_at <= at(900));
}

/// Claims for this Pool alone, created `secs` from now.
fn arrived(secs: &[i64]) -> Vec<Arrival> {
    secs.iter().map(|s| Arrival::whole(at(*s))).collect()
}

#[test]
fn a_claim_for_a_group_counts_in_the_history_for_its_share() {
    let mut h = history(&[(SLOT - 1, 1000)]);
    h.open_slot_start = Time(at(-900));
    let mut s = snap(Some(h));
    let half = |secs| Arrival {
        share: 0.5,
        ..Arrival::whole(at(secs))
    };
    // Two claims for a group of two Pools and one for this Pool: two claims' worth here.
    s.forecast.as_mut().unwrap().arrivals = vec![half(-800), half(-10), Arrival::whole(at(-1))];
    let next = decide(&s, now()).claim_history.expect("written");
    assert_eq!(next.expected[SLOT - 1], blend(1000, 2.0));
    assert_ne!(blend(1000, 2.0), blend(1000, 3.0));
}

#[test]
fn a_closed_slot_is_blended_in_once_and_the_history_moves_on() {
    let mut h = history(&[(SLOT - 1, 1000)]);
    h.open_slot_start = Time(at(-900));
    h.pod_start_seconds = Some(50);
    let mut s = snap(Some(h.clone()));
    let input = s.forecast.as_mut().unwrap();
    // Three claims in the closed slot, one (not counted yet) in the new one.
    input.arrivals = arrived(&[-800, -10, -1, 5]);
    let d = decide(&s, now());
    let next = d.claim_history.expect("the closed slot is written");
    assert_eq!(next.expected[SLOT - 1], blend(1000, 3.0));
    assert_eq!(next.open_slot_start, Time(now()));
    assert_eq!(
        next.pod_start_seconds,
        Some(30),
        "measured again when a slot closes"
    );
    // Within the open slot, nothing is written.
    let mut again = snap(Some(next));
    again.forecast.as_mut().unwrap().arrivals = arrived(&[5]);
    assert_eq!(decide(&again, at(60)).claim_history, None);
}

#[test]
fn the_pool_grows_one_pod_start_time_ahead_of_a_busy_slot() {
    // Slot 41 (10:15) expects 60 claims: 4 a minute. Over the 30 s lead plus the 10 s
    // cooldown, 2.67 are expected, and 5 ready Pods cover that but one time in ten.
    let h = history(&[(SLOT + 1, 6000)]);
    let mut s = snap(Some(h));
    for p in &mut s.pods {
        p.idle_since = Some(at(800));
    }
    // 31 s before 10:15 the lead does not reach the busy slot yet.
    let early = decide(&s, at(900 - 31));
    assert_eq!(early.desired_replicas, 2);
    assert_eq!(early.status.prediction.as_ref().unwrap().ready_pods, 0);
    assert!(
        early.requeue_at <= at(900 - 30),
        "woken when the lead reaches 10:15"
    );
    // 30 s before, it does.
    let d = decide(&s, at(900 - 30));
    assert_eq!(d.desired_replicas, 5);
    let p = d.status.prediction.clone().unwrap();
    assert_eq!(
        (p.expected_claims, p.ready_pods, p.lead_seconds),
        (60, 5, 30)
    );
    assert_eq!(
        p.message,
        "Predicted: 60 claims expected in the next 15m; 5 Pod(s) kept ready ahead of them (Pods start in 30s)"
    );
    assert_eq!(
        reasons_of(&d),
        vec![(EventType::Normal, reasons::PREDICTED_SCALE_UP)]
    );
    assert_eq!(
        d.events[0].note,
        format!("scaled up from 2 to 5: {}", p.message)
    );
}

#[test]
fn predicted_pods_count_what_is_coming_and_what_is_queued() {
    let h = history(&[(SLOT, 6000)]);
    let mut s = snap(Some(h));
    // Two idle, one starting, three claims queued: 0 once they are served; 5 wanted.
    s.pods.push(PoolPod {
        state: PodState::Starting,
        ready: false,
        has_ip: false,
        idle_since: None,
        ..idle("c", 0)
    });
    s.pool.replicas = 3;
    s.queue = QueueStats {
        pending: 3,
        oldest_pending_since: Some(at(-1)),
    };
    let d = decide(&s, now());
    assert_eq!(d.desired_replicas, 3 + 5);
}

#[test]
fn predictions_never_pass_the_group_maximum() {
    let h = history(&[(SLOT, 90_000)]);
    let d = decide(&snap(Some(h)), now());
    assert_eq!(d.desired_replicas, 12, "a step of at most maxStep (10)");
    assert!(d.status.prediction.unwrap().ready_pods > 18);
    let mut s = snap(Some(history(&[(SLOT, 90_000)])));
    s.pool.replicas = 18;
    s.pods = (0..18).map(|i| idle(&format!("p{i}"), 60)).collect();
    let d = decide(&s, now());
    assert_eq!(d.desired_replicas, 20);
    let limited = d
        .conditions
        .iter()
        .find(|c| c.type_ == "ScalingLimited")
        .unwrap();
    assert!(limited.status);
    assert_eq!(limited.reason, reasons::GROUP_MAX_REACHED);
}

#[test]
fn scale_down_keeps_the_predicted_pods_and_takes_back_the_rest() {
    // Eight Pods idle past the idle timeout; the slot expects 15 claims (1 a minute):
    // 0.67 over 40 s, so 2 are kept ready.
    let h = history(&[(SLOT, 1500)]);
    let mut s = snap(Some(h));
    s.pool.replicas = 8;
    s.pods = (0..8).map(|i| idle(&format!("p{i}"), 700)).collect();
    let d = decide(&s, now());
    assert_eq!(d.status.prediction.as_ref().unwrap().ready_pods, 2);
    assert_eq!(d.recommendation.replicas, 2);
    assert_eq!(
        d.desired_replicas,
        8 - 5,
        "one step of the scale-down maxStep"
    );
    // Without a prediction for the slot, the group minimum is all that is kept.
    let mut quiet = snap(Some(history(&[])));
    quiet.pool.replicas = 8;
    quiet.pods = s.pods.clone();
    assert_eq!(decide(&quiet, now()).recommendation.replicas, 1);
}

#[test]
fn a_switched_off_prediction_still_keeps_the_history() {
    let off = PredictivePolicy {
        enabled: false,
        ..policy()
    };
    let mut h = history(&[(SLOT, 6000)]);
    h.open_slot_start = Time(at(-900));
    let mut s = snap(Some(h));
    s.group = Some(group(off.clone()));
    let input = s.forecast.as_mut().unwrap();
    input.enabled = false;
    input.arrivals = arrived(&[-100]);
    let d = decide(&s, now());
    assert_eq!(d.desired_replicas, 2);
    assert_eq!(d.status.prediction, None);
    assert_eq!(d.claim_history.unwrap().expected[SLOT - 1], 100);
    assert!(d.events.is_empty());
}

#[test]
fn a_new_geometry_starts_a_new_history() {
    let h = history(&[(SLOT, 6000)]);
    let daily = PredictivePolicy {
        period_seconds: 86_400,
        ..policy()
    };
    let mut s = snap(Some(h));
    s.group = Some(group(daily.clone()));
    s.forecast.as_mut().unwrap().geometry = Geometry::of(&daily);
    let d = decide(&s, now());
    let next = d.claim_history.unwrap();
    assert_eq!((next.period_seconds, next.expected.len()), (86_400, 96));
    assert_eq!(d.desired_replicas, 2, "nothing is known of the new slots");
}

#[test]
fn an_unknown_time_zone_is_said_once() {
    let mars = PredictivePolicy {
        time_zone: Some("Mars/Olympus_Mons".into()),
        ..policy()
    };
    let mut s = snap(None);
    s.forecast.as_mut().unwrap().geometry = Geometry::of(&mars);
    let d = decide(&s, now());
    assert_eq!(d.claim_history, None);
    assert_eq!(d.desired_replicas, 2);
    assert_eq!(
        reasons_of(&d),
        vec![(EventType::Warning, reasons::PREDICTION_UNAVAILABLE)]
    );
    let p = d.status.prediction.clone().unwrap();
    assert!(p.message.contains("Mars/Olympus_Mons"), "{}", p.message);
    // Said: the next cycle publishes nothing.
    s.pool.auto_scaling = d.status;
    assert!(decide(&s, now()).events.is_empty());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// A pool woken whenever its decision asks (and at random times between), for hours
    /// across a daylight-saving change in its policy's zone, with claims at random instants:
    /// the slots it closes follow each other without gap or overlap, each lasts between one
    /// second and a slot plus the change, each counts exactly the claims that arrived in
    /// it, every decision asks to be woken later, and no more often than the slots need.
    #[test]
    fn claims_are_counted_once_across_daylight_saving_changes(
        change in 0..crate::cron::DST_CHANGES_2026.len(),
        slot in proptest::sample::select(vec![60i32, 300, 900, 1800, 3600, 5400]),
        period in proptest::sample::select(vec![86_400i32, 604_800]),
        start in -10_800i64..-3_600,
        steps in proptest::collection::vec(1i64..5400, 1..64),
        claims in proptest::collection::vec(0i64..18_000, 0..120),
    ) {
        let (zone, instant) = crate::cron::DST_CHANGES_2026[change];
        let policy = PredictivePolicy {
            time_zone: Some(zone.into()),
            slot_seconds: slot,
            period_seconds: period,
            ..policy()
        };
        let origin: Timestamp = instant.parse().unwrap();
        let first = origin + SignedDuration::from_secs(start);
        let arrivals: Vec<Timestamp> =
            claims.iter().map(|&c| first + SignedDuration::from_secs(c)).collect();
        let mut s = snap(None);
        s.group = Some(group(policy.clone()));
        s.forecast.as_mut().unwrap().geometry = Geometry::of(&policy);

        let mut now = first;
        let mut opened: Option<Timestamp> = None;
        let mut covered: Option<(Timestamp, Timestamp)> = None;
        let mut counted = 0i64;
        let until = origin + SignedDuration::from_secs(7200);
        let mut asked = 0i64;
        for step in steps.iter().cycle() {
            if now >= until {
                break;
            }
            let input = s.forecast.as_mut().unwrap();
            input.arrivals = arrivals
                .iter()
                .filter(|t| **t <= now)
                .map(|t| Arrival::whole(*t))
                .collect();
            let d = decide(&s, now);
            proptest::prop_assert!(d.requeue_at > now, "requeue {} at {now}", d.requeue_at);
            let input = s.forecast.as_mut().unwrap();
            if let Some(mut h) = d.claim_history {
                let next = h.open_slot_start.0;
                proptest::prop_assert!(next <= now, "opened {next} at {now}");
                if let Some(closed) = opened {
                    // A slot closed: [closed, next), its count at the one index it wrote.
                    let span = next.duration_since(closed).as_secs();
                    proptest::prop_assert!(span >= 1 && span <= i64::from(slot) + 3600, "closed {closed}..{next}");
                    let written: Vec<i32> = h.expected.iter().copied().filter(|e| *e >= 0).collect();
                    proptest::prop_assert_eq!(written.len(), 1, "{:?}", written);
                    let arrived = arrivals.iter().filter(|t| closed <= **t && **t < next).count();
                    proptest::prop_assert_eq!(i64::from(written[0]), 100 * i64::try_from(arrived).unwrap());
                    counted += i64::try_from(arrived).unwrap();
                    covered = Some((covered.map_or(closed, |c| c.0), next));
                }
                opened = Some(next);
                // Forget what was observed, so the next count is read as it is, not blended.
                h.expected.iter_mut().for_each(|e| *e = -1);
                input.history = Some(h);
            }
            let random = now + SignedDuration::from_secs(*step);
            asked += i64::from(d.requeue_at <= random);
            now = d.requeue_at.min(random);
        }
        // Woken when asked no more often than its slots, the lead before each and the
        // resync need (a slot misread as ending a second later would ask every second).
        let elapsed = now.duration_since(first).as_secs();
        let bound = 3 * (elapsed / i64::from(slot) + 2) + elapsed / RESYNC.as_secs() + 2;
        proptest::prop_assert!(asked <= bound, "woken {asked} times in {elapsed}s, at most {bound}");
        // Every claim between the first slot closed and the last is counted.
        if let Some((from, to)) = covered {
            let arrived = arrivals.iter().filter(|t| from <= **t && **t < to).count();
            proptest::prop_assert_eq!(counted, i64::try_from(arrived).unwrap());
        }
    }
}
