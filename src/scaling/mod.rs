//! Scheduled scaling: `ScalingTemplate` and `ClusterScalingTemplate`.
//!
//! Load (`load.rs`, from shared caches) → Decide (`decide.rs`, pure) → Commit
//! (`commit.rs`, guarded writes); `window.rs` and `cron.rs` hold the pure time maths,
//! `controller.rs` the wiring, `schedule.rs` the `moonin schedule` command.

pub mod commit;
pub mod controller;
pub mod cron;
pub mod decide;
pub mod keda;
pub mod load;
pub mod schedule;
pub mod window;
