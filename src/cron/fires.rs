//! When a schedule fires in a time zone: real instants from wall-clock cron fields, with the
//! daylight-saving policy of CronJob's cronie ancestry. A schedule whose minute and hour are
//! both fixed fires once at the end of a spring-forward gap that swallowed its time and once,
//! on the first pass, in a repeated hour; any other schedule follows the wall clock.
//!
//! Pure: every instant is a parameter.

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use super::Schedule;

/// Guards the fire search against pathological zones: each step crosses a transition or
/// skips one repeated-hour fire, so real schedules need far fewer.
const MAX_SEARCH_STEPS: usize = 10_000;

/// One instant at which a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    /// The real instant.
    pub at: Timestamp,
    /// True when the wall-clock time did not exist (spring-forward gap) and the fire was
    /// moved to the first instant after the gap.
    pub dst_adjusted: bool,
}

/// The first fire of `schedule` in `tz` strictly after `after`.
///
/// Schedules whose minute and hour fields are both fixed follow cronie's policy: a
/// wall-clock time inside a gap fires at the end of the gap (the transition instant) and a
/// repeated wall-clock time fires only on its first pass. Other schedules follow the wall
/// clock: nothing inside a gap, both passes of a repeated hour.
pub fn next_fire(schedule: &Schedule, tz: &TimeZone, after: Timestamp) -> Option<Fire> {
    let fixed = schedule.is_fixed_time();
    // Walk the offset segments between transitions: inside one segment, instants and wall
    // times move together, so the civil search is exact there.
    let mut from = after;
    let mut inclusive = false;
    for _ in 0..MAX_SEARCH_STEPS {
        let offset = tz.to_offset(from);
        let civil = offset.to_datetime(from);
        let wall = if inclusive {
            schedule.next_at_or_after(civil)
        } else {
            schedule.next_after(civil)
        }?;
        let candidate = offset.to_timestamp(wall).ok()?;
        if let Some(transition) = tz.following(from).next()
            && transition.timestamp() <= candidate
        {
            let at = transition.timestamp();
            let new_offset = transition.offset();
            if fixed && new_offset > offset {
                let gap_start = offset.to_datetime(at);
                let gap_end = new_offset.to_datetime(at);
                if schedule
                    .next_at_or_after(gap_start)
                    .is_some_and(|w| w < gap_end)
                {
                    // A real fire at the same instant means nothing was moved.
                    let dst_adjusted = !schedule.matches(gap_end);
                    return Some(Fire { at, dst_adjusted });
                }
            }
            from = at;
            inclusive = true;
            continue;
        }
        if fixed && is_second_pass(tz, wall, offset) {
            from = candidate;
            inclusive = false;
            continue;
        }
        return Some(Fire {
            at: candidate,
            dst_adjusted: false,
        });
    }
    None
}

/// Whether `wall`, read with `offset`, is the second occurrence of a repeated time.
fn is_second_pass(tz: &TimeZone, wall: jiff::civil::DateTime, offset: jiff::tz::Offset) -> bool {
    matches!(
        tz.to_ambiguous_timestamp(wall).offset(),
        AmbiguousOffset::Fold { before, after } if before != after && offset == after
    )
}

/// Iterator over the fires strictly after an instant, in increasing order.
#[derive(Debug, Clone)]
pub struct Fires<'a> {
    schedule: &'a Schedule,
    tz: &'a TimeZone,
    after: Option<Timestamp>,
}

impl Iterator for Fires<'_> {
    type Item = Fire;

    fn next(&mut self) -> Option<Fire> {
        let fire = next_fire(self.schedule, self.tz, self.after?);
        self.after = fire.map(|f| f.at);
        fire
    }
}

/// All fires of `schedule` in `tz` strictly after `after`, in increasing instant order,
/// without duplicates.
pub fn fires_after<'a>(schedule: &'a Schedule, tz: &'a TimeZone, after: Timestamp) -> Fires<'a> {
    Fires {
        schedule,
        tz,
        after: Some(after),
    }
}

/// The most recent fire in `(now - duration, now]`, if any: the fire that keeps a window of
/// `duration` open at `now`.
pub fn latest_fire_within(
    schedule: &Schedule,
    tz: &TimeZone,
    now: Timestamp,
    duration: SignedDuration,
) -> Option<Fire> {
    let mut lo = sub(now, duration);
    let first = next_fire(schedule, tz, lo)?;
    if first.at > now {
        return None;
    }
    // Bisect instead of stepping through every fire: `* * * * *` with a 30h window would
    // otherwise take 1800 steps. Invariant: a fire lies in (lo, now], none in (hi, now].
    let mut best = first;
    let mut hi = now;
    while hi.duration_since(lo) > SignedDuration::from_nanos(1) {
        let mid = add(lo, hi.duration_since(lo) / 2);
        match next_fire(schedule, tz, mid) {
            Some(f) if f.at <= now => {
                lo = mid;
                best = f;
            }
            _ => hi = mid,
        }
    }
    Some(best)
}

/// `t + d`, saturating at the ends of time.
pub fn add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(if d.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// `t - d`, saturating at the ends of time.
pub fn sub(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_sub(d).unwrap_or(if d.is_negative() {
        Timestamp::MAX
    } else {
        Timestamp::MIN
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn hours(h: i64) -> SignedDuration {
        SignedDuration::from_hours(h)
    }

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn schedule(s: &str) -> Schedule {
        Schedule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// The first `n` fires as (UTC RFC 3339, dst_adjusted).
    fn fires(sched: &str, tz: &str, after: &str, n: usize) -> Vec<(String, bool)> {
        let s = schedule(sched);
        let z = zone(tz);
        fires_after(&s, &z, ts(after))
            .take(n)
            .map(|f| (f.at.to_string(), f.dst_adjusted))
            .collect()
    }

    fn want(list: &[(&str, bool)]) -> Vec<(String, bool)> {
        list.iter().map(|&(s, a)| (s.to_string(), a)).collect()
    }

    /// (zone, [(transition instant, offset before, offset after)]) for 2026, from jiff's
    /// bundled tzdb; the expectations below were checked against each zone's rules.
    #[test]
    fn transitions_2026_are_what_the_dst_tables_assume() {
        #[allow(clippy::type_complexity)]
        let cases: &[(&str, &[(&str, &str, &str)])] = &[
            (
                "America/New_York",
                &[
                    ("2026-03-08T07:00:00Z", "-05", "-04"),
                    ("2026-11-01T06:00:00Z", "-04", "-05"),
                ],
            ),
            (
                "Europe/Berlin",
                &[
                    ("2026-03-29T01:00:00Z", "+01", "+02"),
                    ("2026-10-25T01:00:00Z", "+02", "+01"),
                ],
            ),
            // Chile changes at 24:00 on the first Saturday of April / September.
            (
                "America/Santiago",
                &[
                    ("2026-04-05T03:00:00Z", "-03", "-04"),
                    ("2026-09-06T04:00:00Z", "-04", "-03"),
                ],
            ),
            (
                "Australia/Sydney",
                &[
                    ("2026-04-04T16:00:00Z", "+11", "+10"),
                    ("2026-10-03T16:00:00Z", "+10", "+11"),
                ],
            ),
            // Lord Howe Island shifts by 30 minutes.
            (
                "Australia/Lord_Howe",
                &[
                    ("2026-04-04T15:00:00Z", "+11", "+10:30"),
                    ("2026-10-03T15:30:00Z", "+10:30", "+11"),
                ],
            ),
            ("Asia/Tokyo", &[]),
            ("UTC", &[]),
        ];
        for &(name, expected) in cases {
            let tz = zone(name);
            let got: Vec<(String, String, String)> = tz
                .following(ts("2026-01-01T00:00:00Z"))
                .take_while(|t| t.timestamp() < ts("2027-01-01T00:00:00Z"))
                .map(|t| {
                    let before = tz.to_offset(sub(t.timestamp(), SignedDuration::from_secs(1)));
                    (
                        t.timestamp().to_string(),
                        before.to_string(),
                        t.offset().to_string(),
                    )
                })
                .collect();
            let expected: Vec<(String, String, String)> = expected
                .iter()
                .map(|&(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                .collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    /// (zone, schedule, after, expected fires). Fixed schedules move gap times to the end
    /// of the gap and fire once in a repeated hour; `*` schedules follow the wall clock.
    // A table (or a generator) reads best whole.
    #[allow(clippy::too_many_lines)]
    #[test]
    fn dst_tables() {
        #[allow(clippy::type_complexity)]
        let cases: &[(&str, &str, &str, &[(&str, bool)])] = &[
            // New York: 02:00 EST -> 03:00 EDT on 03-08; 02:00 EDT -> 01:00 EST on 11-01.
            (
                "America/New_York",
                "30 2 * * *",
                "2026-03-08T00:00:00Z",
                &[
                    ("2026-03-08T07:00:00Z", true),
                    ("2026-03-09T06:30:00Z", false),
                ],
            ),
            (
                "America/New_York",
                "30 1 * * *",
                "2026-11-01T00:00:00Z",
                &[
                    ("2026-11-01T05:30:00Z", false),
                    ("2026-11-02T06:30:00Z", false),
                ],
            ),
            (
                "America/New_York",
                "*/30 2 * * *",
                "2026-03-08T00:00:00Z",
                &[
                    ("2026-03-09T06:00:00Z", false),
                    ("2026-03-09T06:30:00Z", false),
                ],
            ),
            (
                "America/New_York",
                "*/30 1 * * *",
                "2026-11-01T00:00:00Z",
                &[
                    ("2026-11-01T05:00:00Z", false),
                    ("2026-11-01T05:30:00Z", false),
                    ("2026-11-01T06:00:00Z", false),
                    ("2026-11-01T06:30:00Z", false),
                    ("2026-11-02T06:00:00Z", false),
                ],
            ),
            (
                "America/New_York",
                "0 * * * *",
                "2026-11-01T04:30:00Z",
                &[
                    ("2026-11-01T05:00:00Z", false),
                    ("2026-11-01T06:00:00Z", false),
                    ("2026-11-01T07:00:00Z", false),
                ],
            ),
            // Berlin: 02:00 -> 03:00 on 03-29; 03:00 -> 02:00 on 10-25.
            (
                "Europe/Berlin",
                "30 2 * * *",
                "2026-03-29T00:00:00Z",
                &[
                    ("2026-03-29T01:00:00Z", true),
                    ("2026-03-30T00:30:00Z", false),
                ],
            ),
            (
                "Europe/Berlin",
                "30 2 * * *",
                "2026-10-25T00:00:00Z",
                &[
                    ("2026-10-25T00:30:00Z", false),
                    ("2026-10-26T01:30:00Z", false),
                ],
            ),
            (
                "Europe/Berlin",
                "*/30 2 * * *",
                "2026-03-29T00:00:00Z",
                &[
                    ("2026-03-30T00:00:00Z", false),
                    ("2026-03-30T00:30:00Z", false),
                ],
            ),
            (
                "Europe/Berlin",
                "*/30 2 * * *",
                "2026-10-24T23:59:00Z",
                &[
                    ("2026-10-25T00:00:00Z", false),
                    ("2026-10-25T00:30:00Z", false),
                    ("2026-10-25T01:00:00Z", false),
                    ("2026-10-25T01:30:00Z", false),
                    ("2026-10-26T01:00:00Z", false),
                ],
            ),
            // Santiago: 24:00 -> 23:00 on 04-04 (repeated 23:xx); 24:00 -> 01:00 on 09-06.
            (
                "America/Santiago",
                "30 23 * * *",
                "2026-04-04T12:00:00Z",
                &[
                    ("2026-04-05T02:30:00Z", false),
                    ("2026-04-06T03:30:00Z", false),
                ],
            ),
            (
                "America/Santiago",
                "30 0 * * *",
                "2026-09-05T12:00:00Z",
                &[
                    ("2026-09-06T04:00:00Z", true),
                    ("2026-09-07T03:30:00Z", false),
                ],
            ),
            (
                "America/Santiago",
                "@daily",
                "2026-09-05T12:00:00Z",
                &[
                    ("2026-09-06T04:00:00Z", true),
                    ("2026-09-07T03:00:00Z", false),
                ],
            ),
            (
                "America/Santiago",
                "*/30 0 * * *",
                "2026-09-05T12:00:00Z",
                &[
                    ("2026-09-07T03:00:00Z", false),
                    ("2026-09-07T03:30:00Z", false),
                ],
            ),
            (
                "America/Santiago",
                "*/30 23 * * *",
                "2026-04-04T12:00:00Z",
                &[
                    ("2026-04-05T02:00:00Z", false),
                    ("2026-04-05T02:30:00Z", false),
                    ("2026-04-05T03:00:00Z", false),
                    ("2026-04-05T03:30:00Z", false),
                    ("2026-04-06T03:00:00Z", false),
                ],
            ),
            // Sydney: 03:00 -> 02:00 on 04-05; 02:00 -> 03:00 on 10-04 (local dates).
            (
                "Australia/Sydney",
                "30 2 * * *",
                "2026-10-03T00:00:00Z",
                &[
                    ("2026-10-03T16:00:00Z", true),
                    ("2026-10-04T15:30:00Z", false),
                ],
            ),
            (
                "Australia/Sydney",
                "30 2 * * *",
                "2026-04-04T00:00:00Z",
                &[
                    ("2026-04-04T15:30:00Z", false),
                    ("2026-04-05T16:30:00Z", false),
                ],
            ),
            (
                "Australia/Sydney",
                "*/30 2 * * *",
                "2026-10-03T00:00:00Z",
                &[
                    ("2026-10-04T15:00:00Z", false),
                    ("2026-10-04T15:30:00Z", false),
                ],
            ),
            (
                "Australia/Sydney",
                "*/30 2 * * *",
                "2026-04-04T00:00:00Z",
                &[
                    ("2026-04-04T15:00:00Z", false),
                    ("2026-04-04T15:30:00Z", false),
                    ("2026-04-04T16:00:00Z", false),
                    ("2026-04-04T16:30:00Z", false),
                    ("2026-04-05T16:00:00Z", false),
                ],
            ),
            // Lord Howe: 02:00 -> 01:30 on 04-05; 02:00 -> 02:30 on 10-04 (local dates).
            (
                "Australia/Lord_Howe",
                "15 2 * * *",
                "2026-10-03T00:00:00Z",
                &[
                    ("2026-10-03T15:30:00Z", true),
                    ("2026-10-04T15:15:00Z", false),
                ],
            ),
            // 02:00 is moved onto the real 02:30: one fire, and not flagged.
            (
                "Australia/Lord_Howe",
                "0,30 2 * * *",
                "2026-10-03T00:00:00Z",
                &[
                    ("2026-10-03T15:30:00Z", false),
                    ("2026-10-04T15:00:00Z", false),
                    ("2026-10-04T15:30:00Z", false),
                ],
            ),
            (
                "Australia/Lord_Howe",
                "45 1 * * *",
                "2026-04-04T00:00:00Z",
                &[
                    ("2026-04-04T14:45:00Z", false),
                    ("2026-04-05T15:15:00Z", false),
                ],
            ),
            (
                "Australia/Lord_Howe",
                "*/30 2 * * *",
                "2026-10-03T00:00:00Z",
                &[
                    ("2026-10-03T15:30:00Z", false),
                    ("2026-10-04T15:00:00Z", false),
                    ("2026-10-04T15:30:00Z", false),
                ],
            ),
            (
                "Australia/Lord_Howe",
                "*/15 1 * * *",
                "2026-04-04T14:00:00Z",
                &[
                    ("2026-04-04T14:15:00Z", false),
                    ("2026-04-04T14:30:00Z", false),
                    ("2026-04-04T14:45:00Z", false),
                    ("2026-04-04T15:00:00Z", false),
                    ("2026-04-04T15:15:00Z", false),
                    ("2026-04-05T14:30:00Z", false),
                ],
            ),
            // No DST: nothing moves.
            (
                "Asia/Tokyo",
                "30 2 * * *",
                "2026-03-08T00:00:00Z",
                &[
                    ("2026-03-08T17:30:00Z", false),
                    ("2026-03-09T17:30:00Z", false),
                ],
            ),
            (
                "Asia/Tokyo",
                "*/30 * * * *",
                "2026-11-01T00:00:00Z",
                &[
                    ("2026-11-01T00:30:00Z", false),
                    ("2026-11-01T01:00:00Z", false),
                ],
            ),
            (
                "UTC",
                "0 2 * * *",
                "2026-03-08T02:00:00Z",
                &[("2026-03-09T02:00:00Z", false)],
            ),
        ];
        for &(tz, sched, after, expected) in cases {
            assert_eq!(
                fires(sched, tz, after, expected.len()),
                want(expected),
                "{sched} in {tz} after {after}"
            );
        }
    }

    #[test]
    fn never_firing_schedule_yields_nothing() {
        assert_eq!(
            fires("0 0 30 2 *", "Europe/Berlin", "2026-01-01T00:00:00Z", 1),
            vec![]
        );
    }

    /// Brute force over every UTC minute around every transition of 2025–2028: the
    /// segment-walking search must agree with a direct reading of the DST policy.
    #[test]
    fn fires_agree_with_brute_force_around_every_transition() {
        let schedules = [
            "* * * * *",
            "*/30 * * * *",
            "0 * * * *",
            "*/15 1-3 * * *",
            "30 2 * * *",
            "0,30 2 * * *",
            "15 1 * * *",
            "0 0 * * *",
            "30 23 * * *",
            "0-59 0-3 * * *",
        ];
        let minute = SignedDuration::from_mins(1);
        for name in ZONES {
            let tz = zone(name);
            let transitions: Vec<Timestamp> = tz
                .following(ts("2025-01-01T00:00:00Z"))
                .map(|t| t.timestamp())
                .take_while(|&t| t < ts("2029-01-01T00:00:00Z"))
                .collect();
            for &transition in &transitions {
                let from = sub(transition, hours(3));
                let to = add(transition, hours(3));
                for sched in schedules {
                    let s = schedule(sched);
                    let mut expected: Vec<Fire> = Vec::new();
                    let mut t = from;
                    while t < to {
                        let wall = tz.to_datetime(t);
                        let second_pass = matches!(
                            tz.to_ambiguous_timestamp(wall).offset(),
                            AmbiguousOffset::Fold { after, .. } if tz.to_offset(t) == after
                        );
                        if s.matches(wall) && !(s.is_fixed_time() && second_pass) {
                            expected.push(Fire {
                                at: t,
                                dst_adjusted: false,
                            });
                        }
                        t = add(t, minute);
                    }
                    let before = tz.to_offset(sub(transition, SignedDuration::from_secs(1)));
                    let after = tz.to_offset(transition);
                    if s.is_fixed_time() && after > before {
                        let gap_start = before.to_datetime(transition);
                        let gap_end = after.to_datetime(transition);
                        let mut wall = gap_start;
                        let mut hit = false;
                        while wall < gap_end {
                            hit |= s.matches(wall);
                            wall = wall.checked_add(minute).unwrap_or_else(|e| panic!("{e}"));
                        }
                        if hit && !expected.iter().any(|f| f.at == transition) {
                            expected.push(Fire {
                                at: transition,
                                dst_adjusted: true,
                            });
                            expected.sort_by_key(|f| f.at);
                        }
                    }
                    let got: Vec<Fire> =
                        fires_after(&s, &tz, sub(from, SignedDuration::from_nanos(1)))
                            .take_while(|f| f.at < to)
                            .collect();
                    assert_eq!(got, expected, "{sched} in {name} around {transition}");
                }
            }
        }
    }

    const ZONES: &[&str] = &[
        "UTC",
        "America/New_York",
        "Europe/Berlin",
        "America/Santiago",
        "Australia/Sydney",
        "Australia/Lord_Howe",
        "Asia/Tokyo",
    ];
}
