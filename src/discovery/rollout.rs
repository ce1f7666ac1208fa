//! How the rollout a recorded change started ends, decided purely from the Deployment as it
//! is now and the workload's later records: `Complete` once every replica of its revision
//! is updated and available, `Failed` when the Deployment, having observed its spec,
//! reports `ProgressDeadlineExceeded` or a `ReplicaFailure` that came after the change,
//! `Superseded` when a newer change came first, `RolledBack` when that newer change put
//! back the images this one replaced. An outcome is final: a record that has one is not
//! looked at again.

use jiff::{SignedDuration, Timestamp};

use super::{
    revision::RevView,
    signals::{condition_types::PROGRESSING, fails_rollout},
    view::DeploymentView,
};
use crate::api::discovery::{ImageChange, outcomes};

/// `Progressing`'s reason once the new ReplicaSet is available and the old ones are gone.
const NEW_REPLICA_SET_AVAILABLE: &str = "NewReplicaSetAvailable";

/// How one record's rollout ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One of [`outcomes`].
    pub outcome: &'static str,
    /// Why, in one line.
    pub message: String,
    /// From the change to now, as `42s`, `3m10s` or `2h5m`.
    pub took: String,
}

/// The records of `d` whose rollout ended by `now`, with their outcome. `records` are the
/// namespace's records (only Moonin's, of this workload, that started a rollout and have
/// no outcome yet are judged).
pub fn settle(records: &[RevView], d: &DeploymentView, now: Timestamp) -> Vec<(String, Outcome)> {
    let mut ours: Vec<&RevView> = records
        .iter()
        .filter(|r| r.workload == d.name && r.foreign.is_none() && r.rollout)
        .collect();
    ours.sort_by(|a, b| {
        (a.observed_at, a.revision, &a.name).cmp(&(b.observed_at, b.revision, &b.name))
    });
    ours.iter()
        .enumerate()
        .filter(|(_, r)| r.outcome.is_none())
        .filter_map(|(i, r)| {
            let o = outcome(r, ours.get(i + 1).copied(), d, now)?;
            Some((r.name.clone(), o))
        })
        .collect()
}

/// The outcome of `r`'s rollout, given the next change of the workload (if any) and the
/// Deployment now; `None` while it runs.
pub fn outcome(
    r: &RevView,
    next: Option<&RevView>,
    d: &DeploymentView,
    now: Timestamp,
) -> Option<Outcome> {
    let took = human(now.duration_since(r.observed_at));
    if let Some(next) = next {
        let (outcome, verb) = if rolls_back(&r.images, &next.images) {
            (outcomes::ROLLED_BACK, "rolled back by")
        } else {
            (outcomes::SUPERSEDED, "superseded by")
        };
        return Some(Outcome {
            outcome,
            message: format!("{verb} {} (revision {})", next.name, next.revision),
            took,
        });
    }
    if d.revision != Some(r.revision) {
        // A newer revision that is not recorded yet: its record settles this one.
        return None;
    }
    // Until the controller has observed the spec, its conditions are the last rollout's (the
    // revision of a rollback to an existing ReplicaSet is written before them).
    if d.observed_generation < d.generation {
        return None;
    }
    // The rollout began when its template was written (by the API server's clock, as the
    // controller's conditions are), or, when that is not known, when it was recorded.
    let began = d.template_changed.unwrap_or(r.observed_at);
    if let Some(why) = failure(d, began) {
        return Some(Outcome {
            outcome: outcomes::FAILED,
            message: why,
            took,
        });
    }
    complete(d).then(|| Outcome {
        outcome: outcomes::COMPLETE,
        message: format!(
            "{} of {} replicas updated and available",
            d.available, d.replicas
        ),
        took,
    })
}

/// Whether `next` puts back exactly the images `changed` replaced (and nothing else).
fn rolls_back(changed: &[ImageChange], next: &[ImageChange]) -> bool {
    !changed.is_empty()
        && changed.len() == next.len()
        && changed.iter().all(|c| {
            next.iter()
                .any(|n| n.container == c.container && n.from == c.to && n.to == c.from)
        })
}

/// `Reason: message` of a failed rollout that began at `since`. A failure reported before
/// it is an earlier rollout's: the Deployment controller keeps `ProgressDeadlineExceeded`
/// (and a `ReplicaFailure`) through a rollback until the rollback makes progress. The times
/// are whole seconds: a deadline, at least a second long, ends in a later second than the
/// one its rollout began in, while a refused Pod may be reported in that very second.
fn failure(d: &DeploymentView, since: Timestamp) -> Option<String> {
    let since = Timestamp::from_second(since.as_second()).unwrap_or(since);
    let c = d.conditions.iter().find(|c| {
        fails_rollout(c)
            && c.updated.is_none_or(|at| {
                let deadline = c.type_ == PROGRESSING;
                at > since || (!deadline && at == since)
            })
    })?;
    let reason = c.reason.clone().unwrap_or_else(|| c.type_.clone());
    Some(match &c.message {
        Some(m) if !m.is_empty() => format!("{reason}: {m}"),
        _ => reason,
    })
}

/// The Deployment controller has observed the latest spec, every replica is updated and
/// available, and (when it says) the new ReplicaSet is the only one left.
fn complete(d: &DeploymentView) -> bool {
    let progressing = d.conditions.iter().find(|c| c.type_ == PROGRESSING);
    d.observed_generation >= d.generation
        && d.updated >= d.replicas
        && d.available >= d.replicas
        && progressing.is_none_or(|c| c.reason.as_deref() == Some(NEW_REPLICA_SET_AVAILABLE))
}

/// `42s`, `3m10s`, `2h5m` (negative clocks count as 0).
pub fn human(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
#[path = "rollout_tests.rs"]
mod tests;
