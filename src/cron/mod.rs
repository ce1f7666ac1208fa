//! Cron schedules: the five-field syntax of Kubernetes CronJobs ([`schedule`]), the
//! instants a schedule fires at in a time zone ([`fires`]), and a repeating period cut
//! into slots in a time zone ([`slots`]). Pure, and shared by the
//! controllers that read schedules (scaling's windows, discovery's missed CronJob runs),
//! and by the commands that take a duration ([`span_arg`]).

pub mod fires;
pub mod schedule;
pub mod slots;

pub use schedule::{CronError, Field, Schedule};

/// A command-line duration in Go's syntax, as kubectl takes them (`15m`, `1h30m`, `90s`).
pub fn span_arg(s: &str) -> Result<jiff::SignedDuration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration such as 15m or 1h: {e}"))?;
    jiff::SignedDuration::try_from(std::time::Duration::from(d)).map_err(|e| e.to_string())
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
