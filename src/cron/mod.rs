//! Cron schedules: the five-field syntax of Kubernetes CronJobs ([`schedule`]) and the
//! instants a schedule fires at in a time zone ([`fires`]). Pure, and shared by the
//! controllers that read schedules (scaling's windows, discovery's missed CronJob runs).

pub mod fires;
pub mod schedule;

pub use schedule::{CronError, Field, Schedule};
