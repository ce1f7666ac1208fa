//! The pure maths of predictive warm-up: the policy's slots (over [`crate::cron::slots`]),
//! how a closed slot's claim count is blended into the history, how many claims the
//! history expects over a span of time, and how many ready Pods cover them. No clock, no I/O; decide (`decide/predict.rs`) and the `warmup_trace` benchmark
//! use it.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::sandbox::{ClaimHistory, PredictivePolicy};

/// The weight of the newest period when a closed slot's count is blended into the slot's
/// expectation (an exponentially weighted mean across periods): one unusual week, a
/// holiday, moves the next week's expectation by less than a third.
pub const NEWEST_WEIGHT: f64 = 0.3;

/// The chance, per Pod start time, that more claims arrive than the prediction keeps ready
/// for: the ready Pods are the smallest count the expected arrivals (Poisson) exceed with
/// at most this probability. Chosen on the `warmup_trace` benchmark: one time in twenty
/// cut cold claims a little more but cost more idle Pod-hours than the goal allows.
pub const SHORTFALL: f64 = 0.1;

pub use crate::cron::slots::{Geometry, Slot, span};

impl Geometry {
    /// The geometry of a policy, or why there is none (an unknown time zone).
    pub fn of(policy: &PredictivePolicy) -> Result<Self, String> {
        let zone = policy.time_zone.as_deref().unwrap_or("UTC");
        Geometry::new(
            i64::from(policy.slot_seconds),
            i64::from(policy.period_seconds),
            zone,
        )
        .map_err(|e| format!("{e}: predictive warm-up is off"))
    }

    /// True when a history was built with this geometry (else it starts again).
    pub fn built(&self, h: &ClaimHistory) -> bool {
        i64::from(h.slot_seconds) == self.slot_secs
            && i64::from(h.period_seconds) == self.period_secs()
            && h.time_zone == self.zone
            && h.expected.len() == self.slots
    }

    /// A new history: nothing observed, counting from the slot of `now`.
    pub fn new_history(&self, now: Timestamp, pod_start: Option<i32>) -> ClaimHistory {
        ClaimHistory {
            slot_seconds: i32::try_from(self.slot_secs).unwrap_or(i32::MAX),
            period_seconds: i32::try_from(self.period_secs()).unwrap_or(i32::MAX),
            time_zone: self.zone.clone(),
            open_slot_start: Time(self.slot_at(now).start),
            expected: vec![-1; self.slots],
            pod_start_seconds: pod_start,
        }
    }

    /// Claims the history expects in `[from, to)`: each slot's expectation spread evenly
    /// over the slot (a slot never observed expects none).
    pub fn expected_between(&self, expected: &[i32], from: Timestamp, to: Timestamp) -> f64 {
        let mut total = 0.0;
        let mut at = from;
        while at < to {
            let slot = self.slot_at(at);
            let until = slot.end.min(to);
            let part = until.duration_since(at).as_secs_f64();
            let whole = slot.end.duration_since(slot.start).as_secs_f64().max(1.0);
            total += per_slot(expected, slot.index) * part / whole;
            at = until;
        }
        total
    }
}

/// Since when a Pool's claims are counted for its history at `now`: the open slot's start
/// when the history was built with this geometry, else the start of the slot of `now` (a
/// new history starts there), else `now` (no geometry: nothing is counted).
pub fn counting_since(
    geometry: &Result<Geometry, String>,
    history: Option<&ClaimHistory>,
    now: Timestamp,
) -> Timestamp {
    match (geometry, history) {
        (Ok(g), Some(h)) if g.built(h) => h.open_slot_start.0,
        (Ok(g), _) => g.slot_at(now).start,
        (Err(_), _) => now,
    }
}

/// Claims slot `index` is expected to bring (0 when never observed).
pub fn per_slot(expected: &[i32], index: usize) -> f64 {
    f64::from(expected.get(index).copied().unwrap_or(-1).max(0)) / 100.0
}

/// Blends a closed slot's claim count (the claims' shares summed) into its expectation
/// (the first observation is taken as it is), in hundredths.
pub fn blend(previous: i32, claims: f64) -> i32 {
    let observed = claims.max(0.0) * 100.0;
    let next = if previous < 0 {
        observed
    } else {
        f64::from(previous) * (1.0 - NEWEST_WEIGHT) + observed * NEWEST_WEIGHT
    };
    #[allow(clippy::cast_possible_truncation)]
    let hundredths = next.round().min(f64::from(i32::MAX)) as i32;
    hundredths
}

/// The smallest `k` with `P(Poisson(mean) > k) ≤ SHORTFALL`: how many ready Pods cover
/// the claims expected over one Pod start time. 0 for a mean near 0.
pub fn ready_for(mean: f64) -> i64 {
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    let mut k: i64 = 0;
    let mut term = (-mean).exp(); // P(X = 0)
    let mut below = term; // P(X ≤ k)
    while 1.0 - below > SHORTFALL && k < 10_000 {
        k += 1;
        #[allow(clippy::cast_precision_loss)]
        let kf = k as f64;
        term *= mean / kf;
        below += term;
    }
    k
}

/// The 90th percentile of Pod start times, whole seconds, at least 1 (`None` without any).
pub fn start_p90(starts: &[SignedDuration]) -> Option<i32> {
    if starts.is_empty() {
        return None;
    }
    let mut secs: Vec<i64> = starts.iter().map(|d| d.as_secs().max(1)).collect();
    secs.sort_unstable();
    let at = (secs.len() * 9).div_ceil(10).saturating_sub(1);
    i32::try_from(secs[at.min(secs.len() - 1)]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(slot: i32, period: i32, zone: Option<&str>) -> Geometry {
        Geometry::of(&PredictivePolicy {
            enabled: true,
            slot_seconds: slot,
            period_seconds: period,
            time_zone: zone.map(str::to_string),
        })
        .unwrap()
    }

    #[test]
    fn expectations_are_spread_over_their_slot() {
        let g = geometry(60, 300, None);
        let expected = vec![600, -1, 1200, 0, 300];
        let at = |min: i64| {
            Timestamp::UNIX_EPOCH + SignedDuration::from_hours(96) + SignedDuration::from_mins(min)
        };
        // 1970-01-05 00:00 UTC is slot 0.
        assert_eq!(g.slot_at(at(0)).index, 0);
        let half = g.expected_between(&expected, at(0), at(0) + SignedDuration::from_secs(30));
        assert!((half - 3.0).abs() < 1e-9, "{half}");
        let across = g.expected_between(&expected, at(0) + SignedDuration::from_secs(30), at(3));
        assert!((across - (3.0 + 0.0 + 12.0)).abs() < 1e-9, "{across}");
        // The period repeats.
        let again = g.expected_between(&expected, at(5), at(6));
        assert!((again - 6.0).abs() < 1e-9, "{again}");
    }

    #[test]
    fn blending_takes_the_first_count_and_then_weighs_the_newest_period() {
        assert_eq!(blend(-1, 14.0), 1400);
        assert_eq!(blend(1400, 0.0), 980);
        assert_eq!(blend(1000, 20.0), 1300);
        assert_eq!(blend(0, 0.0), 0);
        // Shares of claims for a group of Pools.
        assert_eq!(blend(-1, 2.5), 250);
    }

    #[test]
    fn ready_pods_cover_the_expected_arrivals_but_one_time_in_ten() {
        assert_eq!(ready_for(0.0), 0);
        // P(X > 0) = 0.095 for a mean of 0.1, 0.18 for 0.2.
        assert_eq!(ready_for(0.1), 0);
        assert_eq!(ready_for(0.2), 1);
        // P(X > 2) = 0.080 for a mean of 1; P(X > 14) = 0.083 for 10.
        assert_eq!(ready_for(1.0), 2);
        assert_eq!(ready_for(10.0), 14);
        assert_eq!(ready_for(f64::NAN), 0);
    }

    #[test]
    fn start_times_take_the_ninetieth_percentile() {
        let d = |s: i64| SignedDuration::from_secs(s);
        assert_eq!(start_p90(&[]), None);
        assert_eq!(start_p90(&[d(0)]), Some(1));
        let ten: Vec<_> = (1..=10).map(d).collect();
        assert_eq!(start_p90(&ten), Some(9));
    }

    #[test]
    fn an_unknown_time_zone_is_reported() {
        let e = Geometry::of(&PredictivePolicy {
            time_zone: Some("Mars/Olympus_Mons".into()),
            ..PredictivePolicy::default()
        })
        .unwrap_err();
        assert!(e.contains("Mars/Olympus_Mons"), "{e}");
    }
}
