//! Whether a template's window is open at `now`, and when it next opens or closes, from the
//! fires of its schedule in its time zone ([`crate::cron::fires`]).
//!
//! Everything here is pure: `now` is always a parameter.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::api::scaling::WindowSpec;
use crate::cron::{
    CronError, Schedule,
    fires::{add, fires_after, latest_fire_within, next_fire},
};

/// How many upcoming windows `evaluate` plans.
pub const PLANNED_WINDOWS: usize = 3;

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
                Some((whole_seconds(run.start_time.0), length))
            }
        };
        Ok(WindowInputs {
            schedule,
            tz,
            duration,
            suspend: spec.suspend,
            valid_until: spec.valid_until.as_ref().map(|t| whole_seconds(t.0)),
            manual,
        })
    }
}

/// `t` without its fraction of a second. A status keeps instants to the second (as the API
/// server's own timestamps do): a window's start or end read from a spec that gives a
/// fraction would never match the one its status announced, and each reconcile would take
/// the window for a new one.
fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
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
    use crate::cron::fires::{Fire, sub};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn schedule(s: &str) -> Schedule {
        Schedule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap_or_else(|e| panic!("{name}: {e}"))
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
