//! Cron schedules: the five-field syntax of Kubernetes CronJobs ([`schedule`]), the
//! instants a schedule fires at in a time zone ([`fires`]), and a repeating period cut
//! into slots in a time zone ([`slots`]). Pure, and shared by the
//! controllers that read schedules (scaling's windows, discovery's missed CronJob runs),
//! and by the commands that take a duration ([`span_arg`]).

pub mod fires;
pub mod schedule;
pub mod slots;

pub use schedule::{CronError, Field, Schedule};

/// A command-line duration in Go's syntax, as kubectl takes them (`15m`, `1h30m`, `90s`):
/// not negative, and at most 100 years (`NaNh`, `1e400h` or `-30m` are refused, not read).
pub fn span_arg(s: &str) -> Result<jiff::SignedDuration, String> {
    let refused = |why: &str| format!("{s:?} is not a duration such as 15m or 1h: {why}");
    let t = s.trim();
    if t.starts_with('-') {
        return Err(refused("it is negative"));
    }
    // The parser multiplies floats into a std Duration, which panics on what is not a
    // finite, representable number: only digits, one dot per number, and units get there.
    let plain = t.chars().all(|c| {
        c.is_ascii_digit() || matches!(c, '.' | '+' | 'h' | 'm' | 's' | 'u' | 'µ' | 'μ' | 'n')
    });
    let digits = t.chars().filter(char::is_ascii_digit).count();
    if !plain || digits > 12 {
        return Err(refused(
            "only numbers of at most 12 digits with h, m, s, ms, us or ns",
        ));
    }
    let d: kube::core::Duration = t.parse().map_err(|e| refused(&format!("{e}")))?;
    let d = jiff::SignedDuration::try_from(std::time::Duration::from(d))
        .map_err(|e| refused(&e.to_string()))?;
    if d > jiff::SignedDuration::from_hours(24 * 366 * 100) {
        return Err(refused("longer than 100 years"));
    }
    Ok(d)
}

/// The 2026 daylight-saving changes the property tests draw their clocks around, as
/// (zone, instant of the change): spring and autumn in Berlin and New York, Lord Howe's
/// half-hour changes and Santiago's autumn (a repeated hour south of the equator).
#[cfg(test)]
pub(crate) const DST_CHANGES_2026: [(&str, &str); 7] = [
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
    ("America/Santiago", "2026-04-05T03:00:00Z"),
];
