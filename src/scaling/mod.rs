//! Scheduled scaling: the pure cron and window maths behind `ScalingTemplate` and
//! `ClusterScalingTemplate`.

pub mod cron;
pub mod window;
