//! Cron schedules: the five-field syntax of Kubernetes CronJobs ([`schedule`]), the
//! instants a schedule fires at in a time zone ([`fires`]), and a repeating period cut
//! into slots in a time zone ([`slots`]). Pure, and shared by the
//! controllers that read schedules (scaling's windows, discovery's missed CronJob runs).

pub mod fires;
pub mod schedule;
pub mod slots;

pub use schedule::{CronError, Field, Schedule};
