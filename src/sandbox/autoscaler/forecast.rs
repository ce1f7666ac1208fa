//! The pure maths of predictive warm-up: which slot of the period an instant falls in (in
//! the policy's time zone), how a closed slot's claim count is blended into the history,
//! how many claims the history expects over a span of time, and how many ready Pods cover
//! them. No clock, no I/O; decide (`decide/predict.rs`) and the `warmup_trace` benchmark
//! use it.

use jiff::{SignedDuration, Timestamp, civil::DateTime, tz::TimeZone};
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

/// The first slot of every period starts at this civil instant (a Monday, 00:00) plus a
/// whole number of periods, in the policy's time zone.
const ANCHOR: DateTime = jiff::civil::date(1970, 1, 5).at(0, 0, 0, 0);

/// How the period is cut into slots, in which time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// Slot length, seconds (at least 1).
    pub slot_secs: i64,
    /// Slots per period (at least 1).
    pub slots: usize,
    /// The time zone's name, as the history records it.
    pub zone: String,
    /// The time zone.
    pub tz: TimeZone,
}

/// One slot: its index in the period and when it starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Index in the period, `0..slots`.
    pub index: usize,
    /// First instant of the slot.
    pub start: Timestamp,
    /// First instant after it.
    pub end: Timestamp,
}

impl Geometry {
    /// The geometry of a policy, or why there is none (an unknown time zone).
    pub fn of(policy: &PredictivePolicy) -> Result<Self, String> {
        let zone = policy.time_zone.clone().unwrap_or_else(|| "UTC".into());
        let tz = TimeZone::get(&zone)
            .map_err(|_| format!("time zone {zone:?} is unknown: predictive warm-up is off"))?;
        let slot_secs = i64::from(policy.slot_seconds.max(1));
        let period = i64::from(policy.period_seconds.max(1)).max(slot_secs);
        let slots = usize::try_from(period / slot_secs)
            .unwrap_or(1)
            .clamp(1, 2016);
        Ok(Self {
            slot_secs,
            slots,
            zone,
            tz,
        })
    }

    /// True when a history was built with this geometry (else it starts again).
    pub fn built(&self, h: &ClaimHistory) -> bool {
        i64::from(h.slot_seconds) == self.slot_secs
            && i64::from(h.period_seconds) == self.period_secs()
            && h.time_zone == self.zone
            && h.expected.len() == self.slots
    }

    fn period_secs(&self) -> i64 {
        self.slot_secs * i64::try_from(self.slots).unwrap_or(1)
    }

    /// Civil seconds since the anchor, in the time zone.
    fn civil(&self, t: Timestamp) -> i64 {
        let dt = self.tz.to_datetime(t);
        dt.duration_since(ANCHOR).as_secs()
    }

    /// The instant of civil seconds since the anchor; a civil time skipped by a daylight
    /// saving change maps to the instant just after the gap.
    fn instant(&self, civil: i64) -> Timestamp {
        let dt = ANCHOR
            .checked_add(SignedDuration::from_secs(civil))
            .unwrap_or(ANCHOR);
        self.tz
            .to_ambiguous_timestamp(dt)
            .compatible()
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// The slot `t` falls in.
    pub fn slot_at(&self, t: Timestamp) -> Slot {
        let c = self.civil(t);
        let pos = c.rem_euclid(self.period_secs());
        let start_civil = c - pos % self.slot_secs;
        let start = self.instant(start_civil).min(t);
        let end = self.instant(start_civil + self.slot_secs).max(
            t.checked_add(SignedDuration::from_secs(1))
                .unwrap_or(Timestamp::MAX),
        );
        Slot {
            index: usize::try_from(pos / self.slot_secs).unwrap_or(0),
            start,
            end,
        }
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

/// Blends a closed slot's claim count into its expectation (the first observation is
/// taken as it is), in hundredths.
pub fn blend(previous: i32, claims: i64) -> i32 {
    #[allow(clippy::cast_precision_loss)]
    let observed = claims.max(0) as f64 * 100.0;
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

/// `30s`, `15m`, `2h`, `1d`: the largest whole unit.
pub fn span(secs: i64) -> String {
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
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

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn slots_count_from_monday_midnight_in_the_time_zone() {
        let week = geometry(900, 604_800, Some("Europe/Berlin"));
        // Monday 2026-11-30 09:00 in Berlin (UTC+1) is 08:00 UTC: slot 36 of the week.
        let s = week.slot_at(ts("2026-11-30T08:05:00Z"));
        assert_eq!(s.index, 36);
        assert_eq!(s.start, ts("2026-11-30T08:00:00Z"));
        assert_eq!(s.end, ts("2026-11-30T08:15:00Z"));
        // Sunday 23:59 Berlin is the last slot.
        assert_eq!(week.slot_at(ts("2026-11-29T22:59:00Z")).index, 671);
        // The same civil time in summer (UTC+2) is the same slot.
        assert_eq!(week.slot_at(ts("2026-06-01T07:05:00Z")).index, 36);
        let utc = geometry(900, 604_800, None);
        assert_eq!(utc.slot_at(ts("2026-11-30T08:05:00Z")).index, 32);
    }

    #[test]
    fn a_daylight_saving_change_shortens_or_lengthens_one_slot_only() {
        let day = geometry(3600, 86_400, Some("Europe/Berlin"));
        // 2026-03-29 02:00 Berlin does not exist: the 01:00 slot ends at 03:00 local.
        let s = day.slot_at(ts("2026-03-29T00:30:00Z"));
        assert_eq!(
            (s.index, s.start, s.end),
            (1, ts("2026-03-29T00:00:00Z"), ts("2026-03-29T01:00:00Z"))
        );
        let after = day.slot_at(ts("2026-03-29T01:30:00Z"));
        assert_eq!(after.index, 3);
        // Every instant is inside the slot found for it.
        for minute in 0..(48 * 60) {
            let t = ts("2026-10-24T12:00:00Z") + SignedDuration::from_mins(minute);
            let s = day.slot_at(t);
            assert!(s.start <= t && t < s.end, "{t}: {s:?}");
        }
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
        assert_eq!(blend(-1, 14), 1400);
        assert_eq!(blend(1400, 0), 980);
        assert_eq!(blend(1000, 20), 1300);
        assert_eq!(blend(0, 0), 0);
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
        assert_eq!(span(900), "15m");
        assert_eq!(span(90), "90s");
        assert_eq!(span(7200), "2h");
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
