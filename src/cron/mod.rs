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
