//! Window maths over real instants: when a schedule fires in a time zone (with the DST
//! policy from DESIGN.md §2.1), and whether a template's window is open at `now`.
//!
//! Everything here is pure: `now` is always a parameter.

use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use super::cron::{CronError, Schedule};
use crate::api::scaling::WindowSpec;

/// How many upcoming windows `evaluate` plans.
pub const PLANNED_WINDOWS: usize = 3;

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

fn add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(if d.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

fn sub(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_sub(d).unwrap_or(if d.is_negative() {
        Timestamp::MAX
    } else {
        Timestamp::MIN
    })
}

/// Why a `WindowSpec` cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The schedule does not parse.
    #[error("invalid schedule: {0}")]
    Schedule(#[from] CronError),
    /// The time zone is not in the bundled IANA database.
    #[error("unknown time zone {0:?}: use an IANA name such as Europe/Madrid")]
    UnknownTimeZone(String),
    /// `duration` is zero, negative or too large.
    #[error("duration must be positive and representable, got {0}")]
    InvalidDuration(String),
    /// `manualRun.duration` is zero, negative or too large.
    #[error("manualRun.duration must be positive and representable, got {0}")]
    InvalidManualDuration(String),
}

/// Everything `evaluate` needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct WindowInputs {
    /// The parsed cron schedule.
    pub schedule: Schedule,
    /// The zone the schedule is read in.
    pub tz: TimeZone,
    /// How long each window stays open after a fire; positive.
    pub duration: SignedDuration,
    /// Disables everything.
    pub suspend: bool,
    /// Nothing runs at or after this instant.
    pub valid_until: Option<Timestamp>,
    /// A one-off window: start and (positive) length.
    pub manual: Option<(Timestamp, SignedDuration)>,
}

fn positive(d: &kube::core::Duration) -> Option<SignedDuration> {
    if d.is_negative() {
        return None;
    }
    let std: std::time::Duration = (*d).into();
    SignedDuration::try_from(std)
        .ok()
        .filter(|d| d.is_positive())
}

impl WindowInputs {
    /// Resolves a `WindowSpec`: parses the schedule, looks up the time zone (UTC when
    /// unset) and rejects non-positive durations.
    pub fn from_spec(spec: &WindowSpec) -> Result<WindowInputs, WindowError> {
        let schedule = Schedule::parse(&spec.schedule)?;
        let tz = match &spec.time_zone {
            None => TimeZone::UTC,
            Some(name) => {
                TimeZone::get(name).map_err(|_| WindowError::UnknownTimeZone(name.clone()))?
            }
        };
        let duration = positive(&spec.duration)
            .ok_or_else(|| WindowError::InvalidDuration(spec.duration.to_string()))?;
        let manual = match &spec.manual_run {
            None => None,
            Some(run) => {
                let length = match &run.duration {
                    None => duration,
                    Some(d) => positive(d)
                        .ok_or_else(|| WindowError::InvalidManualDuration(d.to_string()))?,
                };
                Some((run.start_time.0, length))
            }
        };
        Ok(WindowInputs {
            schedule,
            tz,
            duration,
            suspend: spec.suspend,
            valid_until: spec.valid_until.as_ref().map(|t| t.0),
            manual,
        })
    }
}

/// What opened the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A fire of the cron schedule.
    Schedule,
    /// `manualRun`.
    Manual,
}

impl Trigger {
    /// The name used in status and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "Schedule",
            Trigger::Manual => "Manual",
        }
    }
}

/// The window that is open now: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveWindow {
    /// What opened it.
    pub trigger: Trigger,
    /// For a scheduled window, the latest fire that keeps it open; for a manual run, its
    /// start time.
    pub start: Timestamp,
    /// When it closes (exclusive), cut at `validUntil`.
    pub end: Timestamp,
}

/// Why the window is or is not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A window is open.
    Active,
    /// No window is open now.
    Idle,
    /// `suspend` is set.
    Suspended,
    /// `validUntil` has passed.
    Expired,
}

impl Reason {
    /// The status phase with the same name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Active => "Active",
            Reason::Idle => "Idle",
            Reason::Suspended => "Suspended",
            Reason::Expired => "Expired",
        }
    }
}

/// An upcoming scheduled window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedWindow {
    /// When it opens.
    pub start: Timestamp,
    /// When it closes (exclusive), cut at `validUntil`.
    pub end: Timestamp,
    /// True when a spring-forward gap moved the fire time.
    pub dst_adjusted: bool,
}

/// The answer of `evaluate`.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowState {
    /// The open window, if any.
    pub active: Option<ActiveWindow>,
    /// Why.
    pub reason: Reason,
    /// The earliest instant after `now` at which the answer can change; requeue then.
    /// `None` when it never changes (suspended, expired, or a schedule that never fires).
    pub next_boundary: Option<Timestamp>,
    /// The next scheduled windows starting after `now` and before `validUntil`.
    pub next_windows: Vec<PlannedWindow>,
}

/// Whether the template's window is open at `now`, and when to look again.
pub fn evaluate(inputs: &WindowInputs, now: Timestamp) -> WindowState {
    if inputs.suspend {
        return idle_forever(Reason::Suspended);
    }
    let valid_until = inputs.valid_until;
    if valid_until.is_some_and(|v| v <= now) {
        return idle_forever(Reason::Expired);
    }
    let cut = |t: Timestamp| valid_until.map_or(t, |v| t.min(v));

    let mut boundaries: Vec<Timestamp> = Vec::new();
    boundaries.extend(valid_until);

    let next = next_fire(&inputs.schedule, &inputs.tz, now);
    boundaries.extend(next.map(|f| f.at));

    let scheduled =
        latest_fire_within(&inputs.schedule, &inputs.tz, now, inputs.duration).map(|fire| {
            ActiveWindow {
                trigger: Trigger::Schedule,
                start: fire.at,
                end: cut(add(fire.at, inputs.duration)),
            }
        });
    boundaries.extend(scheduled.map(|w| w.end));

    let manual = inputs.manual.and_then(|(start, length)| {
        let end = add(start, length);
        boundaries.push(start);
        boundaries.push(end);
        (start <= now && now < end).then(|| ActiveWindow {
            trigger: Trigger::Manual,
            start,
            end: cut(end),
        })
    });

    let active = manual.or(scheduled);
    let next_windows = fires_after(&inputs.schedule, &inputs.tz, now)
        .take_while(|f| valid_until.is_none_or(|v| f.at < v))
        .take(PLANNED_WINDOWS)
        .map(|f| PlannedWindow {
            start: f.at,
            end: cut(add(f.at, inputs.duration)),
            dst_adjusted: f.dst_adjusted,
        })
        .collect();
    WindowState {
        active,
        reason: if active.is_some() {
            Reason::Active
        } else {
            Reason::Idle
        },
        next_boundary: boundaries.into_iter().filter(|&b| b > now).min(),
        next_windows,
    }
}

fn idle_forever(reason: Reason) -> WindowState {
    WindowState {
        active: None,
        reason,
        next_boundary: None,
        next_windows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
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

    fn inputs(sched: &str, tz: &str, duration: SignedDuration) -> WindowInputs {
        WindowInputs {
            schedule: schedule(sched),
            tz: zone(tz),
            duration,
            suspend: false,
            valid_until: None,
            manual: None,
        }
    }

    fn hours(h: i64) -> SignedDuration {
        SignedDuration::from_hours(h)
    }

    fn window(trigger: Trigger, start: &str, end: &str) -> Option<ActiveWindow> {
        Some(ActiveWindow {
            trigger,
            start: ts(start),
            end: ts(end),
        })
    }

    // 2026-11-30 is a Monday.
    #[test]
    fn window_boundaries_are_start_inclusive_end_exclusive() {
        let i = inputs("0 8 * * 1-5", "UTC", hours(10));
        let before = evaluate(&i, ts("2026-11-30T07:59:59.999Z"));
        assert_eq!(before.active, None);
        assert_eq!(before.reason, Reason::Idle);
        assert_eq!(before.next_boundary, Some(ts("2026-11-30T08:00:00Z")));

        let at_start = evaluate(&i, ts("2026-11-30T08:00:00Z"));
        assert_eq!(at_start.reason, Reason::Active);
        let w = window(
            Trigger::Schedule,
            "2026-11-30T08:00:00Z",
            "2026-11-30T18:00:00Z",
        );
        assert_eq!(at_start.active, w);
        assert_eq!(at_start.next_boundary, Some(ts("2026-11-30T18:00:00Z")));

        let last = evaluate(&i, ts("2026-11-30T17:59:59.999999999Z"));
        assert_eq!(last.active, w);

        let at_end = evaluate(&i, ts("2026-11-30T18:00:00Z"));
        assert_eq!(at_end.active, None);
        assert_eq!(at_end.next_boundary, Some(ts("2026-12-01T08:00:00Z")));
    }

    #[test]
    fn window_in_a_zone_uses_local_fire_times() {
        let i = inputs("0 8 * * 1-5", "America/Santiago", hours(10));
        // 08:00 -03 is 11:00Z.
        let s = evaluate(&i, ts("2026-11-30T12:00:00Z"));
        assert_eq!(
            s.active,
            window(
                Trigger::Schedule,
                "2026-11-30T11:00:00Z",
                "2026-11-30T21:00:00Z"
            )
        );
    }

    #[test]
    fn overlapping_fires_extend_the_window() {
        let i = inputs("0 */2 * * *", "UTC", hours(3));
        let s = evaluate(&i, ts("2026-11-30T03:00:00Z"));
        assert_eq!(
            s.active,
            window(
                Trigger::Schedule,
                "2026-11-30T02:00:00Z",
                "2026-11-30T05:00:00Z"
            )
        );
        assert_eq!(s.next_boundary, Some(ts("2026-11-30T04:00:00Z")));
        let later = evaluate(&i, ts("2026-11-30T04:59:00Z"));
        assert_eq!(
            later.active,
            window(
                Trigger::Schedule,
                "2026-11-30T04:00:00Z",
                "2026-11-30T07:00:00Z"
            )
        );

        // Dense fires with a long window: the latest fire wins.
        let dense = inputs("* * * * *", "Europe/Berlin", hours(30));
        let s = evaluate(&dense, ts("2026-11-30T10:00:30Z"));
        assert_eq!(
            s.active,
            window(
                Trigger::Schedule,
                "2026-11-30T10:00:00Z",
                "2026-12-01T16:00:00Z"
            )
        );
        assert_eq!(s.next_boundary, Some(ts("2026-11-30T10:01:00Z")));
    }

    #[test]
    fn manual_run_takes_priority_and_ends() {
        let mut i = inputs("0 8 * * 1-5", "UTC", hours(10));
        i.manual = Some((ts("2026-11-30T10:00:00Z"), hours(2)));
        let before = evaluate(&i, ts("2026-11-30T09:00:00Z"));
        assert_eq!(before.active.map(|w| w.trigger), Some(Trigger::Schedule));
        assert_eq!(before.next_boundary, Some(ts("2026-11-30T10:00:00Z")));

        let during = evaluate(&i, ts("2026-11-30T10:00:00Z"));
        assert_eq!(
            during.active,
            window(
                Trigger::Manual,
                "2026-11-30T10:00:00Z",
                "2026-11-30T12:00:00Z"
            )
        );
        assert_eq!(during.next_boundary, Some(ts("2026-11-30T12:00:00Z")));

        let after = evaluate(&i, ts("2026-11-30T12:00:00Z"));
        assert_eq!(after.active.map(|w| w.trigger), Some(Trigger::Schedule));

        // On a Sunday there is no scheduled window: the run alone opens one.
        i.manual = Some((ts("2026-12-06T10:00:00Z"), hours(2)));
        assert_eq!(evaluate(&i, ts("2026-12-06T09:59:59Z")).active, None);
        assert_eq!(
            evaluate(&i, ts("2026-12-06T11:00:00Z")).reason,
            Reason::Active
        );
        let done = evaluate(&i, ts("2026-12-06T12:00:00Z"));
        assert_eq!(done.active, None);
        assert_eq!(done.next_boundary, Some(ts("2026-12-07T08:00:00Z")));
    }

    #[test]
    fn suspend_wins() {
        let mut i = inputs("* * * * *", "UTC", hours(1));
        i.suspend = true;
        i.manual = Some((ts("2026-11-30T10:00:00Z"), hours(2)));
        let s = evaluate(&i, ts("2026-11-30T11:00:00Z"));
        assert_eq!(
            s,
            WindowState {
                active: None,
                reason: Reason::Suspended,
                next_boundary: None,
                next_windows: vec![],
            }
        );
    }

    #[test]
    fn valid_until_cuts_and_expires() {
        let mut i = inputs("0 8 * * 1-5", "UTC", hours(10));
        i.valid_until = Some(ts("2026-11-30T12:00:00Z"));
        let s = evaluate(&i, ts("2026-11-30T09:00:00Z"));
        assert_eq!(
            s.active,
            window(
                Trigger::Schedule,
                "2026-11-30T08:00:00Z",
                "2026-11-30T12:00:00Z"
            )
        );
        assert_eq!(s.next_boundary, Some(ts("2026-11-30T12:00:00Z")));
        assert_eq!(s.next_windows, vec![]);

        let expired = evaluate(&i, ts("2026-11-30T12:00:00Z"));
        assert_eq!(expired.reason, Reason::Expired);
        assert_eq!(expired.active, None);
        assert_eq!(expired.next_boundary, None);
        assert_eq!(expired.next_windows, vec![]);

        // A manual run is cut too.
        i.manual = Some((ts("2026-11-30T11:00:00Z"), hours(5)));
        let manual = evaluate(&i, ts("2026-11-30T11:30:00Z"));
        assert_eq!(
            manual.active,
            window(
                Trigger::Manual,
                "2026-11-30T11:00:00Z",
                "2026-11-30T12:00:00Z"
            )
        );
    }

    #[test]
    fn next_windows_lists_three_and_respects_valid_until() {
        let mut i = inputs("0 8 * * 1-5", "UTC", hours(10));
        let friday = ts("2026-12-04T09:00:00Z");
        let planned = |start: &str, end: &str| PlannedWindow {
            start: ts(start),
            end: ts(end),
            dst_adjusted: false,
        };
        assert_eq!(
            evaluate(&i, friday).next_windows,
            vec![
                planned("2026-12-07T08:00:00Z", "2026-12-07T18:00:00Z"),
                planned("2026-12-08T08:00:00Z", "2026-12-08T18:00:00Z"),
                planned("2026-12-09T08:00:00Z", "2026-12-09T18:00:00Z"),
            ]
        );
        i.valid_until = Some(ts("2026-12-08T08:00:00Z"));
        let s = evaluate(&i, friday);
        assert_eq!(
            s.next_windows,
            vec![planned("2026-12-07T08:00:00Z", "2026-12-07T18:00:00Z")]
        );
        assert_eq!(s.next_boundary, Some(ts("2026-12-04T18:00:00Z")));

        // A gap-moved window is flagged.
        let dst = inputs("30 2 * * *", "America/New_York", hours(1));
        let s = evaluate(&dst, ts("2026-03-07T12:00:00Z"));
        assert_eq!(
            s.next_windows[0],
            PlannedWindow {
                start: ts("2026-03-08T07:00:00Z"),
                end: ts("2026-03-08T08:00:00Z"),
                dst_adjusted: true,
            }
        );
    }

    #[test]
    fn never_firing_schedule_has_no_boundary() {
        let i = inputs("0 0 30 2 *", "UTC", hours(1));
        let s = evaluate(&i, ts("2026-11-30T00:00:00Z"));
        assert_eq!(s.reason, Reason::Idle);
        assert_eq!(s.next_boundary, None);
        assert_eq!(s.next_windows, vec![]);
    }

    fn spec(schedule: &str, tz: Option<&str>, duration: &str) -> WindowSpec {
        WindowSpec {
            suspend: false,
            schedule: schedule.to_string(),
            time_zone: tz.map(str::to_string),
            duration: duration
                .parse()
                .unwrap_or_else(|e| panic!("{duration}: {e:?}")),
            valid_until: None,
            manual_run: None,
        }
    }

    #[test]
    fn from_spec_resolves_and_validates() {
        let i = WindowInputs::from_spec(&spec("0 8 * * 1-5", None, "10h"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.tz, TimeZone::UTC);
        assert_eq!(i.duration, hours(10));
        assert_eq!(i.manual, None);

        let mut s = spec("@daily", Some("America/Santiago"), "90m");
        s.suspend = true;
        s.valid_until = Some(Time(ts("2026-12-31T23:59:59Z")));
        s.manual_run = Some(crate::api::scaling::ManualRun {
            start_time: Time(ts("2026-11-30T12:00:00Z")),
            duration: None,
        });
        let i = WindowInputs::from_spec(&s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.tz, zone("America/Santiago"));
        assert_eq!(i.duration, SignedDuration::from_mins(90));
        assert!(i.suspend);
        assert_eq!(i.valid_until, Some(ts("2026-12-31T23:59:59Z")));
        assert_eq!(
            i.manual,
            Some((ts("2026-11-30T12:00:00Z"), SignedDuration::from_mins(90)))
        );

        s.manual_run = Some(crate::api::scaling::ManualRun {
            start_time: Time(ts("2026-11-30T12:00:00Z")),
            duration: Some("2h".parse().unwrap_or_else(|e| panic!("{e:?}"))),
        });
        let i = WindowInputs::from_spec(&s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(i.manual, Some((ts("2026-11-30T12:00:00Z"), hours(2))));

        s.manual_run = Some(crate::api::scaling::ManualRun {
            start_time: Time(ts("2026-11-30T12:00:00Z")),
            duration: Some("0s".parse().unwrap_or_else(|e| panic!("{e:?}"))),
        });
        assert!(matches!(
            WindowInputs::from_spec(&s),
            Err(WindowError::InvalidManualDuration(_))
        ));

        let err = WindowInputs::from_spec(&spec("@daily", Some("Mars/Olympus_Mons"), "1h"));
        assert_eq!(
            err.map(|_| ()),
            Err(WindowError::UnknownTimeZone(
                "Mars/Olympus_Mons".to_string()
            ))
        );
        assert!(matches!(
            WindowInputs::from_spec(&spec("@daily", None, "0s")),
            Err(WindowError::InvalidDuration(_))
        ));
        assert!(matches!(
            WindowInputs::from_spec(&spec("@daily", None, "-1h")),
            Err(WindowError::InvalidDuration(_))
        ));
        let bad = WindowInputs::from_spec(&spec("@every 1h", None, "1h"));
        assert_eq!(
            bad.map(|_| ()).map_err(|e| e.to_string()),
            Err(
                "invalid schedule: \"@every 1h\" is not supported; use a 5-field cron expression"
                    .to_string()
            )
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

    fn schedule_strategy() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["*", "*/15", "0", "30", "0,30", "5-10", "*/7", "59"]),
            prop::sample::select(vec!["*", "2", "1-3", "*/6", "0,12", "23", "0"]),
            prop::sample::select(vec!["*", "1", "15", "1-7", "31", "*/10", "?"]),
            prop::sample::select(vec!["*", "3", "10-11", "*/2", "JAN,APR", "9,4"]),
            prop::sample::select(vec!["*", "0", "1-5", "SAT,SUN", "7", "?"]),
        )
            .prop_map(|(a, b, c, d, e)| format!("{a} {b} {c} {d} {e}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn evaluate_agrees_with_the_fire_iterator(
            sched in schedule_strategy(),
            zone_name in prop::sample::select(ZONES.to_vec()),
            // 2025-01-01 .. 2029-01-01
            secs in 1_735_689_600i64..1_861_920_000i64,
            nanos in 0i32..1_000_000_000,
            minutes in 1i64..=30 * 60,
        ) {
            let i = inputs(&sched, zone_name, SignedDuration::from_mins(minutes));
            let now = Timestamp::new(secs, nanos).unwrap_or_else(|e| panic!("{e}"));
            let state = evaluate(&i, now);
            if let Some(b) = state.next_boundary {
                prop_assert!(b > now, "boundary {b} not after {now}");
            }
            let window_start = sub(now, i.duration);
            let in_window: Vec<Fire> = fires_after(&i.schedule, &i.tz, window_start)
                .take_while(|f| f.at <= now)
                .take(2000)
                .collect();
            prop_assert_eq!(state.active.is_some(), !in_window.is_empty());
            prop_assert_eq!(
                state.reason,
                if in_window.is_empty() { Reason::Idle } else { Reason::Active }
            );
            if let (Some(w), Some(last)) = (state.active, in_window.last()) {
                prop_assert_eq!(w.trigger, Trigger::Schedule);
                prop_assert_eq!(w.start, last.at);
                prop_assert_eq!(w.end, add(last.at, i.duration));
                prop_assert!(w.start <= now && now < w.end);
            }
            for p in &state.next_windows {
                prop_assert!(p.start > now);
            }

            let upcoming: Vec<Fire> = fires_after(&i.schedule, &i.tz, now).take(12).collect();
            for pair in upcoming.windows(2) {
                prop_assert!(pair[0].at < pair[1].at, "{:?} then {:?}", pair[0], pair[1]);
            }
            for f in &upcoming {
                prop_assert!(f.at > now);
                // Unmoved fires sit on a matching wall-clock minute.
                if !f.dst_adjusted {
                    prop_assert!(i.schedule.matches(i.tz.to_datetime(f.at)), "{:?}", f);
                }
            }
            if let Some(first) = upcoming.first() {
                prop_assert!(state.next_boundary.is_some_and(|b| b <= first.at));
            }
        }
    }
}
