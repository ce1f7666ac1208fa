//! Scheduled scaling: `ScalingTemplate` and `ClusterScalingTemplate`.
//!
//! Load (`load.rs`, from shared caches, through `index.rs`: where each template's marks
//! are and what scales each target; `owners.rs`: who wrote what, from `managedFields`, and
//! what the caches keep of it) → Decide (`decide/`, pure) → Commit
//! (`commit/`, guarded writes); `window.rs` holds the pure window maths (over
//! [`crate::cron`]),
//! `controller.rs` the wiring, `schedule.rs` the `moonin schedule` command, `suggest/`
//! the `moonin suggest` command.

pub mod commit;
pub mod controller;
pub mod decide;
pub mod index;
pub mod load;
pub mod owners;
pub mod schedule;
pub mod suggest;
pub mod window;
pub mod wire;
