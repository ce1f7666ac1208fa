//! A cron parser and matcher with the same meaning as a Kubernetes CronJob `schedule`
//! (robfig/cron v3 "standard" syntax), over wall-clock (civil) times.
//!
//! Time zones and daylight-saving policy live in `window.rs`; this module only answers
//! "which wall-clock minutes match".

use std::fmt;

use jiff::civil::{Date, DateTime};

/// How far ahead a search goes before concluding that a schedule never matches. Nine years
/// covers the longest gap between two 29 Februaries (2096 → 2104), so a schedule that can
/// match is always found, while one that cannot (`0 0 30 2 *`) gives up quickly.
const SEARCH_YEARS: i16 = 9;

/// One of the five fields of a cron expression, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The first field, 0–59.
    Minute,
    /// The second field, 0–23.
    Hour,
    /// The third field, 1–31.
    DayOfMonth,
    /// The fourth field, 1–12 or JAN–DEC.
    Month,
    /// The fifth field, 0–7 (0 and 7 are Sunday) or SUN–SAT.
    DayOfWeek,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        })
    }
}

/// Why a schedule string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The schedule is empty or only whitespace.
    #[error("schedule is empty")]
    Empty,
    /// A `TZ=` or `CRON_TZ=` prefix: Kubernetes rejects these; the zone belongs in `timeZone`.
    #[error("time zone prefix {0:?} is not allowed in the schedule; set timeZone instead")]
    TimeZonePrefix(String),
    /// `@every <duration>` is a robfig extension that CronJob does not accept.
    #[error("{0:?} is not supported; use a 5-field cron expression")]
    Every(String),
    /// A `@name` that is not one of the known macros.
    #[error(
        "unknown macro {0:?}; expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly"
    )]
    UnknownMacro(String),
    /// Six fields: a seconds field, which CronJob does not support.
    #[error("seconds fields are not supported: expected 5 fields, found 6 in {0:?}")]
    Seconds(String),
    /// Any other field count.
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week), found {found} in {schedule:?}"
    )]
    FieldCount {
        /// How many whitespace-separated fields there were.
        found: usize,
        /// The schedule as given.
        schedule: String,
    },
    /// One field could not be parsed.
    #[error("invalid {field} field {value:?}: {reason}")]
    InvalidField {
        /// Which field.
        field: Field,
        /// The offending part of the field.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A parsed cron schedule: the set of wall-clock minutes it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    source: String,
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// robfig's "star bit": a `*`/`?` day field (without a step > 1) does not take part in
    /// the either-day-matches rule.
    dom_star: bool,
    dow_star: bool,
    minute_fixed: bool,
    hour_fixed: bool,
}

struct Bounds {
    field: Field,
    min: u32,
    /// Upper end of `*` and of `a/n`.
    max: u32,
    /// Largest value accepted when written explicitly (7 for day-of-week).
    max_explicit: u32,
    names: &'static [&'static str],
}

const MONTH_NAMES: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const MINUTE: Bounds = Bounds {
    field: Field::Minute,
    min: 0,
    max: 59,
    max_explicit: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    field: Field::Hour,
    min: 0,
    max: 23,
    max_explicit: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    field: Field::DayOfMonth,
    min: 1,
    max: 31,
    max_explicit: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    field: Field::Month,
    min: 1,
    max: 12,
    max_explicit: 12,
    names: MONTH_NAMES,
};
const DOW: Bounds = Bounds {
    field: Field::DayOfWeek,
    min: 0,
    max: 6,
    max_explicit: 7,
    names: DAY_NAMES,
};

/// The bits of one parsed field, and whether it counts as a "star" field.
struct Parsed {
    bits: u64,
    star: bool,
}

fn field_error(field: Field, value: &str, reason: impl Into<String>) -> CronError {
    CronError::InvalidField {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parse_value(b: &Bounds, whole: &str, s: &str) -> Result<u32, CronError> {
    if let Some(pos) = b.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        // Names are listed from the field's minimum value upwards.
        return Ok(b.min + pos as u32);
    }
    let v: u32 = s
        .parse()
        .map_err(|_| field_error(b.field, whole, format!("{s:?} is not a number or name")))?;
    if v < b.min || v > b.max_explicit {
        return Err(field_error(
            b.field,
            whole,
            format!("{v} is outside {}-{}", b.min, b.max_explicit),
        ));
    }
    Ok(v)
}

fn parse_part(b: &Bounds, part: &str) -> Result<Parsed, CronError> {
    if part.is_empty() {
        return Err(field_error(b.field, part, "empty list element"));
    }
    let (range, step) = match part.split_once('/') {
        Some((r, s)) => {
            let step: u32 = s
                .parse()
                .map_err(|_| field_error(b.field, part, format!("step {s:?} is not a number")))?;
            if step == 0 {
                return Err(field_error(b.field, part, "step must be at least 1"));
            }
            (r, Some(step))
        }
        None => (part, None),
    };
    let (start, end, mut star) = if range == "*" || range == "?" {
        (b.min, b.max, true)
    } else if let Some((lo, hi)) = range.split_once('-') {
        let lo = parse_value(b, part, lo)?;
        let hi = parse_value(b, part, hi)?;
        if lo > hi {
            return Err(field_error(
                b.field,
                part,
                format!("range start {lo} is after its end {hi}"),
            ));
        }
        (lo, hi, false)
    } else {
        let v = parse_value(b, part, range)?;
        // `a/n` means `a-max/n`, as in robfig/cron.
        (v, if step.is_some() { b.max } else { v }, false)
    };
    let step = step.unwrap_or(1);
    if step > 1 {
        // robfig clears the star bit for `*/n` with n > 1, which changes the day rule.
        star = false;
    }
    let mut bits = 0u64;
    let mut v = start;
    while v <= end {
        bits |= 1 << v;
        v += step;
    }
    Ok(Parsed { bits, star })
}

fn parse_field(b: &Bounds, field: &str) -> Result<Parsed, CronError> {
    let mut out = Parsed {
        bits: 0,
        star: false,
    };
    for part in field.split(',') {
        let p = parse_part(b, part)?;
        out.bits |= p.bits;
        out.star |= p.star;
    }
    Ok(out)
}

fn expand_macro(s: &str) -> Result<&'static str, CronError> {
    let lower = s.to_ascii_lowercase();
    Ok(match lower.as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ if lower.starts_with("@every") => return Err(CronError::Every(s.to_string())),
        _ => return Err(CronError::UnknownMacro(s.to_string())),
    })
}

/// Lowest set bit of `mask` at or above `from`, if any.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let rest = mask >> from;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

impl Schedule {
    /// Parses a CronJob-style schedule: five fields or a macro such as `@daily`.
    pub fn parse(schedule: &str) -> Result<Schedule, CronError> {
        let trimmed = schedule.trim();
        if trimmed.is_empty() {
            return Err(CronError::Empty);
        }
        let upper = trimmed.to_ascii_uppercase();
        if upper.starts_with("TZ=") || upper.starts_with("CRON_TZ=") {
            let prefix = trimmed.split_whitespace().next().unwrap_or(trimmed);
            return Err(CronError::TimeZonePrefix(prefix.to_string()));
        }
        let expanded = if trimmed.starts_with('@') {
            expand_macro(trimmed)?
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(if fields.len() == 6 {
                CronError::Seconds(trimmed.to_string())
            } else {
                CronError::FieldCount {
                    found: fields.len(),
                    schedule: trimmed.to_string(),
                }
            });
        };
        let minutes = parse_field(&MINUTE, minute)?;
        let hours = parse_field(&HOUR, hour)?;
        let doms = parse_field(&DOM, dom)?;
        let months = parse_field(&MONTH, month)?;
        let dows = parse_field(&DOW, dow)?;
        // Fold 7 onto 0 so that both spell Sunday.
        let dow_bits = (dows.bits | (dows.bits >> 7)) & 0x7f;
        Ok(Schedule {
            source: trimmed.to_string(),
            minutes: minutes.bits,
            // The masks are built from in-range values, so these narrowings lose nothing.
            hours: hours.bits as u32,
            days_of_month: doms.bits as u32,
            months: months.bits as u16,
            days_of_week: dow_bits as u8,
            dom_star: doms.star,
            dow_star: dows.star,
            // cronie's rule for the DST policy looks at the text, not at the value set.
            minute_fixed: !minute.starts_with('*') && !minute.starts_with('?'),
            hour_fixed: !hour.starts_with('*') && !hour.starts_with('?'),
        })
    }

    /// The schedule as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the minute field is fixed (does not start with `*`).
    pub fn minute_fixed(&self) -> bool {
        self.minute_fixed
    }

    /// Whether the hour field is fixed (does not start with `*`).
    pub fn hour_fixed(&self) -> bool {
        self.hour_fixed
    }

    /// Whether the DST policy for fixed times applies (both minute and hour are fixed):
    /// gap times are moved to the end of the gap and repeated times fire once.
    pub fn is_fixed_time(&self) -> bool {
        self.minute_fixed && self.hour_fixed
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.days_of_month & (1 << date.day()) != 0;
        let dow = self.days_of_week & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether `dt` is a matching minute (seconds and sub-seconds must be zero).
    pub fn matches(&self, dt: DateTime) -> bool {
        dt.second() == 0
            && dt.subsec_nanosecond() == 0
            && self.months & (1 << dt.month()) != 0
            && self.day_matches(dt.date())
            && self.hours & (1 << dt.hour()) != 0
            && self.minutes & (1 << dt.minute()) != 0
    }

    /// The first matching wall-clock minute strictly after `after`, or `None` when nothing
    /// matches within the search horizon (about nine years).
    pub fn next_after(&self, after: DateTime) -> Option<DateTime> {
        let minute_start = after.with().second(0).subsec_nanosecond(0).build().ok()?;
        let next = minute_start
            .checked_add(jiff::SignedDuration::from_mins(1))
            .ok()?;
        self.next_at_or_after(next)
    }

    /// The first matching wall-clock minute at or after `from`, or `None` when nothing
    /// matches within the search horizon (about nine years).
    pub fn next_at_or_after(&self, from: DateTime) -> Option<DateTime> {
        let from = if from.second() != 0 || from.subsec_nanosecond() != 0 {
            // A partial minute has already passed its matching instant.
            let floor = from.with().second(0).subsec_nanosecond(0).build().ok()?;
            floor.checked_add(jiff::SignedDuration::from_mins(1)).ok()?
        } else {
            from
        };
        let limit = from.year().saturating_add(SEARCH_YEARS);
        let (mut y, mut mo, mut d) = (from.year(), from.month(), from.day());
        let (mut h, mut mi) = (
            u32::try_from(from.hour()).ok()?,
            u32::try_from(from.minute()).ok()?,
        );
        loop {
            if y > limit {
                return None;
            }
            if self.months & (1 << mo) == 0 {
                (y, mo, d, h, mi) = next_month(y, mo);
                continue;
            }
            let first = Date::new(y, mo, 1).ok()?;
            if d > first.days_in_month() {
                (y, mo, d, h, mi) = next_month(y, mo);
                continue;
            }
            let date = Date::new(y, mo, d).ok()?;
            if !self.day_matches(date) {
                (d, h, mi) = (d + 1, 0, 0);
                continue;
            }
            let Some(nh) = next_bit(u64::from(self.hours), h) else {
                (d, h, mi) = (d + 1, 0, 0);
                continue;
            };
            if nh != h {
                (h, mi) = (nh, 0);
            }
            let Some(nm) = next_bit(self.minutes, mi) else {
                (h, mi) = (h + 1, 0);
                if h > 23 {
                    (d, h) = (d + 1, 0);
                }
                continue;
            };
            // h < 24 and nm < 60 by construction of the masks.
            return Some(date.at(h as i8, nm as i8, 0, 0));
        }
    }
}

/// First instant of the month after `mo` of year `y`, as loop state.
fn next_month(y: i16, mo: i8) -> (i16, i8, i8, u32, u32) {
    if mo >= 12 {
        (y.saturating_add(1), 1, 1, 0, 0)
    } else {
        (y, mo + 1, 1, 0, 0)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl std::str::FromStr for Schedule {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
