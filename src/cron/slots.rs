//! A repeating period (a week, a day, a few seconds in tests) cut into equal slots in a
//! time zone: which slot an instant falls in, when it starts and ends, and which period it
//! belongs to. Counted from a Monday 00:00 in the zone, so a slot keeps its civil time of
//! day across daylight saving changes (the slot that contains a change is an hour shorter
//! or longer). Pure; shared by the histories that follow a weekly rhythm (the sandbox
//! pools' claims, discovery's replicas).

use jiff::{SignedDuration, Timestamp, civil::DateTime, tz::TimeZone};

/// The first slot of every period starts at this civil instant (a Monday, 00:00) plus a
/// whole number of periods, in the geometry's time zone.
const ANCHOR: DateTime = jiff::civil::date(1970, 1, 5).at(0, 0, 0, 0);

/// At most this many offset changes are followed inside one slot (a slot of a week spans
/// one or two daylight-saving changes).
const MAX_CHANGES: usize = 8;

/// At most this many slots in a period.
pub const MAX_SLOTS: usize = 2016;

/// How the period is cut into slots, in which time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// Slot length, seconds (at least 1).
    pub slot_secs: i64,
    /// Slots per period (1 to [`MAX_SLOTS`]).
    pub slots: usize,
    /// The time zone's name, as histories record it.
    pub zone: String,
    /// The time zone.
    pub tz: TimeZone,
}

/// One slot: its index in the period, when it starts and ends, and its period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Index in the period, `0..slots`.
    pub index: usize,
    /// First instant of the slot.
    pub start: Timestamp,
    /// First instant after it.
    pub end: Timestamp,
    /// Whole periods from the anchor to the slot's period.
    pub period: i64,
}

impl Geometry {
    /// Slots of `slot_secs` in a period of `period_secs` (rounded down to whole slots) in
    /// the IANA time zone `zone`, or why not (the zone is unknown).
    pub fn new(slot_secs: i64, period_secs: i64, zone: &str) -> Result<Self, String> {
        let tz = TimeZone::get(zone).map_err(|_| format!("time zone {zone:?} is unknown"))?;
        let slot_secs = slot_secs.max(1);
        let slots = usize::try_from(period_secs.max(slot_secs) / slot_secs)
            .unwrap_or(1)
            .clamp(1, MAX_SLOTS);
        Ok(Self {
            slot_secs,
            slots,
            zone: zone.to_string(),
            tz,
        })
    }

    /// The period's length, seconds.
    pub fn period_secs(&self) -> i64 {
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

    /// The slot `t` falls in: the whole stretch of time around `t` in which the wall clock
    /// stays within the slot's civil range. A repeated hour (the clock going back) keeps one
    /// slot across both passes when the slot spans the change, or lets short slots recur
    /// in the second pass; a skipped hour shortens or skips slots.
    pub fn slot_at(&self, t: Timestamp) -> Slot {
        let c = self.civil(t);
        let pos = c.rem_euclid(self.period_secs());
        let from = c - pos % self.slot_secs;
        let to = from + self.slot_secs;
        let whole = Timestamp::from_second(t.as_second()).unwrap_or(t);
        Slot {
            index: usize::try_from(pos / self.slot_secs).unwrap_or(0),
            start: self.entered(whole, c, from, to).min(t),
            end: self.left(whole, c, from, to).max(
                t.checked_add(SignedDuration::from_secs(1))
                    .unwrap_or(Timestamp::MAX),
            ),
            period: c.div_euclid(self.period_secs()),
        }
    }

    /// Going back from `t` (whose wall clock shows civil `c`), when the wall clock last
    /// entered `[from, to)`: where it showed `from`, or the offset change that moved it in.
    fn entered(&self, t: Timestamp, c: i64, from: i64, to: i64) -> Timestamp {
        let (mut at, mut c, mut search) = (t, c, t + SignedDuration::from_secs(1));
        for _ in 0..MAX_CHANGES {
            let hit = at - SignedDuration::from_secs(c - from);
            match self.tz.preceding(search).next().map(|x| x.timestamp()) {
                Some(change) if change >= hit => {
                    // Just before the change the wall clock showed `before` (exclusive).
                    let before = self.civil(change - SignedDuration::from_secs(1)) + 1;
                    if before <= from || before > to {
                        return change;
                    }
                    (at, c, search) = (change, before, change);
                }
                _ => return hit,
            }
        }
        at
    }

    /// Going forward from `t` (whose wall clock shows civil `c`), when the wall clock leaves
    /// `[from, to)`: where it shows `to`, or the offset change that moves it out.
    fn left(&self, t: Timestamp, c: i64, from: i64, to: i64) -> Timestamp {
        let (mut at, mut c) = (t, c);
        for _ in 0..MAX_CHANGES {
            let reach = at + SignedDuration::from_secs(to - c);
            match self.tz.following(at).next().map(|x| x.timestamp()) {
                Some(change) if change <= reach => {
                    let after = self.civil(change);
                    if after < from || after >= to {
                        return change;
                    }
                    (at, c) = (change, after);
                }
                _ => return reach,
            }
        }
        at
    }

    /// When period `period` (whole periods from the anchor) starts.
    pub fn period_start(&self, period: i64) -> Timestamp {
        self.instant(period.saturating_mul(self.period_secs()))
    }

    /// When slot `index` of period `period` starts.
    pub fn slot_start(&self, period: i64, index: usize) -> Timestamp {
        self.instant(
            period
                .saturating_mul(self.period_secs())
                .saturating_add(self.offset(index)),
        )
    }

    /// The civil start of slot `index` as seconds into its period (slot 0 is a Monday
    /// 00:00 in the zone).
    pub fn offset(&self, index: usize) -> i64 {
        self.slot_secs * i64::try_from(index).unwrap_or(0)
    }
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

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn slots_count_from_monday_midnight_in_the_time_zone() {
        let week = Geometry::new(900, 604_800, "Europe/Berlin").unwrap();
        // Monday 2026-11-30 09:00 in Berlin (UTC+1) is 08:00 UTC: slot 36 of the week.
        let s = week.slot_at(ts("2026-11-30T08:05:00Z"));
        assert_eq!(s.index, 36);
        assert_eq!(s.start, ts("2026-11-30T08:00:00Z"));
        assert_eq!(s.end, ts("2026-11-30T08:15:00Z"));
        // Sunday 23:59 Berlin is the last slot, of the period before.
        let sunday = week.slot_at(ts("2026-11-29T22:59:00Z"));
        assert_eq!((sunday.index, sunday.period), (671, s.period - 1));
        // The same civil time in summer (UTC+2) is the same slot.
        assert_eq!(week.slot_at(ts("2026-06-01T07:05:00Z")).index, 36);
        let utc = Geometry::new(900, 604_800, "UTC").unwrap();
        assert_eq!(utc.slot_at(ts("2026-11-30T08:05:00Z")).index, 32);
        assert_eq!(utc.offset(32), 8 * 3600);
    }

    #[test]
    fn a_daylight_saving_change_shortens_or_lengthens_one_slot_only() {
        let day = Geometry::new(3600, 86_400, "Europe/Berlin").unwrap();
        // 2026-03-29 02:00 Berlin does not exist: the 01:00 slot ends at 03:00 local.
        let s = day.slot_at(ts("2026-03-29T00:30:00Z"));
        assert_eq!(
            (s.index, s.start, s.end),
            (1, ts("2026-03-29T00:00:00Z"), ts("2026-03-29T01:00:00Z"))
        );
        let after = day.slot_at(ts("2026-03-29T01:30:00Z"));
        assert_eq!(after.index, 3);
        // 2026-11-01 01:00–02:00 New York happens twice: an hour slot spans both passes,
        // a quarter-hour slot recurs in the second pass (it used to end one second after
        // the instant asked about, so a history closed it every second).
        let ny_hour = Geometry::new(3600, 86_400, "America/New_York").unwrap();
        for t in ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"] {
            let s = ny_hour.slot_at(ts(t));
            assert_eq!(
                (s.index, s.start, s.end),
                (1, ts("2026-11-01T05:00:00Z"), ts("2026-11-01T07:00:00Z"))
            );
        }
        let ny_quarter = Geometry::new(900, 86_400, "America/New_York").unwrap();
        let first = ny_quarter.slot_at(ts("2026-11-01T05:20:00Z"));
        let second = ny_quarter.slot_at(ts("2026-11-01T06:20:00Z"));
        assert_eq!(first.index, second.index);
        assert_eq!(
            (first.start, first.end, second.start, second.end),
            (
                ts("2026-11-01T05:15:00Z"),
                ts("2026-11-01T05:30:00Z"),
                ts("2026-11-01T06:15:00Z"),
                ts("2026-11-01T06:30:00Z")
            )
        );
        // Every instant is inside the slot found for it.
        for minute in 0..(48 * 60) {
            let t = ts("2026-10-24T12:00:00Z") + SignedDuration::from_mins(minute);
            let s = day.slot_at(t);
            assert!(s.start <= t && t < s.end, "{t}: {s:?}");
        }
    }

    #[test]
    fn short_periods_count_whole_periods_from_the_anchor() {
        let g = Geometry::new(5, 60, "UTC").unwrap();
        let at = |secs: i64| {
            Timestamp::UNIX_EPOCH + SignedDuration::from_hours(96) + SignedDuration::from_secs(secs)
        };
        assert_eq!((g.slot_at(at(0)).index, g.slot_at(at(0)).period), (0, 0));
        assert_eq!((g.slot_at(at(59)).index, g.slot_at(at(59)).period), (11, 0));
        assert_eq!((g.slot_at(at(65)).index, g.slot_at(at(65)).period), (1, 1));
        assert_eq!(g.slot_at(at(-1)).period, -1);
        assert_eq!(g.period_start(1), at(60));
        assert_eq!(g.slot_at(g.period_start(7)).index, 0);
    }

    #[test]
    fn spans_use_the_largest_whole_unit_and_unknown_zones_are_refused() {
        assert_eq!(span(900), "15m");
        assert_eq!(span(90), "90s");
        assert_eq!(span(7200), "2h");
        assert_eq!(span(86_400), "1d");
        let e = Geometry::new(60, 600, "Mars/Olympus_Mons").unwrap_err();
        assert!(e.contains("Mars/Olympus_Mons"), "{e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 2048,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// For any zone, slot length and clock near a daylight-saving change, the slots
        /// tile time: the instant is inside its slot, every instant of the slot finds the
        /// same slot, and the next slot starts exactly where this one ends.
        #[test]
        fn slots_tile_time_across_daylight_saving_changes(
            zone in proptest::sample::select(vec![
                "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                "America/Santiago", "UTC", "Asia/Kolkata",
            ]),
            slot in proptest::sample::select(vec![1i64, 60, 300, 900, 1800, 3600, 5400, 7200]),
            period in proptest::sample::select(vec![86_400i64, 604_800]),
            edge in 0..crate::cron::DST_CHANGES_2026.len(),
            offset in -129_600i64..129_600,
        ) {
            let g = Geometry::new(slot, period, zone).unwrap();
            let t = ts(crate::cron::DST_CHANGES_2026[edge].1) + SignedDuration::from_secs(offset);
            let s = g.slot_at(t);
            proptest::prop_assert!(s.index < g.slots);
            proptest::prop_assert!(s.start <= t && t < s.end, "{t}: {s:?}");
            proptest::prop_assert_eq!(g.slot_at(s.start), s, "from its start");
            let last = s.end - SignedDuration::from_secs(1);
            proptest::prop_assert_eq!(g.slot_at(last), s, "from its last second");
            let next = g.slot_at(s.end);
            proptest::prop_assert_eq!(next.start, s.end, "the next slot of {:?}", s);
        }
    }
}
