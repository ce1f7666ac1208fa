//! `moonin suggest`: ScalingTemplates from the replica histories discovery keeps
//! (`NamespaceInventory.status.replicaHistory`).
//!
//! Pure: [`rises`] finds, in one history, the runs of slots in which the autoscaler asked
//! for more than its minimum in every period observed; [`suggest`] places each rise as a
//! window a cron schedule can write (a lead time earlier, in the output time zone), folds
//! the days, then the workloads, that share a window into one template each, and flags the
//! existing templates whose windows changed nothing (`unneeded.rs`). `cli.rs` loads the
//! histories and templates and prints (`render.rs`).

pub mod cli;
mod fold;
mod render;
mod unneeded;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::api::discovery::ReplicaHistory;
use crate::api::scaling::WindowSpec;
use crate::cron::slots::Geometry;

pub use fold::Repeat;
pub use render::{render_table, render_yaml};

/// What the suggestions follow.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Windows open this long before the observed rise (then at the whole minute before).
    pub lead: SignedDuration,
    /// A rise is a slot raised in every period observed, at least this many (at least 1).
    pub min_periods: usize,
    /// The time zone the windows are written in.
    pub tz: TimeZone,
}

/// One autoscaler's history, read from its namespace's inventory.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The namespace.
    pub namespace: String,
    /// The history.
    pub history: ReplicaHistory,
}

/// A scaling template that exists, as far as suggestions care.
#[derive(Debug, Clone, PartialEq)]
pub struct Existing {
    /// `ScalingTemplate shop/peak` or `ClusterScalingTemplate peak`.
    pub label: String,
    /// A ScalingTemplate's namespace and name (none for a ClusterScalingTemplate): a
    /// suggestion never takes it, or applying the suggestion would replace the template.
    pub name: Option<(String, String)>,
    /// When its windows open.
    pub window: WindowSpec,
    /// Its actions: name, the target's namespace and Deployment, `minReplicas`.
    pub actions: Vec<ExistingAction>,
}

/// One action of an [`Existing`] template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingAction {
    /// The action's name.
    pub name: String,
    /// The target's namespace.
    pub namespace: String,
    /// The target Deployment.
    pub deployment: String,
    /// `minReplicas` while the window is open.
    pub min_replicas: i32,
}

/// A run of slots in which the autoscaler asked for more than its minimum in every period
/// observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rise {
    /// Its first slot (a rise may wrap past the period's end).
    pub first: usize,
    /// How many slots.
    pub slots: usize,
    /// The count asked for through most of it: the (upper) median over its slots of the
    /// lowest count each slot saw (the edges of a rise move from week to week; its plateau does not).
    pub level: i32,
    /// The lowest count asked for in any of its slots in any period.
    pub floor: i32,
    /// The fewest periods observed in any of its slots.
    pub seen: usize,
}

/// The rises of `h`, by first slot: each slot observed in at least `min_periods` periods and
/// above `h.minReplicas` in every one of them belongs to one.
pub fn rises(h: &ReplicaHistory, min_periods: usize) -> Vec<Rise> {
    let slots = h.periods.first().map_or(0, Vec::len);
    if slots == 0 || h.periods.iter().any(|p| p.len() != slots) {
        return Vec::new();
    }
    let routine: Vec<Option<(i32, usize)>> = (0..slots)
        .map(|i| {
            let seen: Vec<i32> = h.periods.iter().map(|p| p[i]).filter(|&v| v >= 0).collect();
            let low = seen.iter().copied().min()?;
            (seen.len() >= min_periods.max(1) && low > h.min_replicas).then_some((low, seen.len()))
        })
        .collect();
    // From the slot after a gap round to the gap, so a rise that wraps is one rise.
    let gap = routine.iter().position(Option::is_none);
    let order = (1..=slots).map(|step| gap.map_or(step % slots, |g| (g + step) % slots));
    let mut out = Vec::new();
    let mut run: Vec<(usize, i32, usize)> = Vec::new();
    for i in order {
        match routine[i] {
            Some((low, seen)) => run.push((i, low, seen)),
            None => out.extend(rise(&mut run)),
        }
    }
    out.extend(rise(&mut run));
    out.sort_by_key(|r| r.first);
    out
}

/// The rise of a run of routine slots (slot, lowest count, periods seen), emptied.
fn rise(run: &mut Vec<(usize, i32, usize)>) -> Option<Rise> {
    let &(first, _, _) = run.first()?;
    let mut lows: Vec<i32> = run.iter().map(|r| r.1).collect();
    lows.sort_unstable();
    let r = Rise {
        first,
        slots: run.len(),
        level: lows[lows.len() / 2],
        floor: lows[0],
        seen: run.iter().map(|r| r.2).min().unwrap_or(0),
    };
    run.clear();
    Some(r)
}

/// The geometry `h` was kept with, and the number of its newest period.
pub fn geometry(h: &ReplicaHistory) -> Result<(Geometry, i64), String> {
    let g = Geometry::new(
        i64::from(h.slot_seconds),
        i64::from(h.period_seconds),
        &h.time_zone,
    )?;
    let newest = g.slot_at(h.newest_period_start.0).period;
    Ok((g, newest))
}

/// One suggested template.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The cron schedule.
    pub schedule: String,
    /// The time zone's IANA name.
    pub time_zone: String,
    /// How long each window lasts.
    pub duration: SignedDuration,
    /// Its actions, by name.
    pub actions: Vec<SuggestedAction>,
}

/// One action of a [`Suggestion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuggestedAction {
    /// The Deployment, which also names the action.
    pub deployment: String,
    /// `minReplicas`: the level observed.
    pub min_replicas: i32,
    /// `maxReplicas`: the autoscaler's own maximum (at least the level).
    pub max_replicas: i32,
    /// Why, in plain words.
    pub evidence: String,
}

/// A template whose windows changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unneeded {
    /// `ScalingTemplate shop/peak`.
    pub template: String,
    /// The action.
    pub action: String,
    /// Why, in plain words.
    pub evidence: String,
}

/// Something found that is not a suggestion: why an autoscaler's rises are not suggested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The namespace.
    pub namespace: String,
    /// The autoscaler, `HPA/web`.
    pub autoscaler: String,
    /// What, in plain words.
    pub text: String,
}

/// Everything `moonin suggest` reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// New templates, by namespace and name.
    pub suggestions: Vec<Suggestion>,
    /// Existing templates that changed nothing.
    pub unneeded: Vec<Unneeded>,
    /// Rises not suggested, and why.
    pub notes: Vec<Note>,
}

/// What `observed` suggests at `now`, given the templates that exist.
pub fn suggest(
    observed: &[Observed],
    existing: &[Existing],
    rules: &Rules,
    now: Timestamp,
) -> Report {
    let mut report = Report::default();
    let mut placed = Vec::new();
    for o in observed {
        let note = |text: String| Note {
            namespace: o.namespace.clone(),
            autoscaler: o.history.autoscaler.clone(),
            text,
        };
        match fold::place_rises(o, existing, rules) {
            Ok((windows, notes)) => {
                placed.extend(windows);
                report.notes.extend(notes.into_iter().map(note));
            }
            Err(text) => report.notes.push(note(text)),
        }
        report
            .unneeded
            .extend(unneeded::unneeded(o, existing, rules.min_periods, now));
    }
    let taken = existing.iter().filter_map(|e| e.name.clone()).collect();
    report.suggestions = fold::templates(placed, rules, taken);
    report
        .unneeded
        .sort_by(|a, b| (&a.template, &a.action).cmp(&(&b.template, &b.action)));
    report.unneeded.dedup();
    report
}

#[cfg(test)]
mod tests;
