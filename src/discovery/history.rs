//! Replica history: per autoscaler, the highest replica count it asked for in each slot of
//! a repeating period (`ClusterDiscovery.spec.replicaHistory`), for the last few periods.
//!
//! The open slot lives in memory ([`OpenSlots`]): every look at the namespace raises its
//! highest count. When a slot has closed, its count goes into the history, which the
//! namespace's inventory publishes; so the inventory changes once per slot, and a restart
//! reads the history back from it (losing at most the open slot). Pure but for the lock.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::view::{HpaView, ScaledObjectView};
use crate::api::discovery::{ReplicaHistory, ReplicaHistoryPolicy};
use crate::cron::slots::{Geometry, Slot};

/// The history's geometry and how many periods it keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Keeping {
    /// Slots of the period, in the time zone.
    pub geometry: Geometry,
    /// Periods kept.
    pub periods: usize,
}

impl Keeping {
    /// What a policy keeps, or why nothing (switched off, or an unknown time zone).
    pub fn of(policy: &ReplicaHistoryPolicy) -> Result<Self, String> {
        if !policy.enabled {
            return Err("replica history is switched off".into());
        }
        let zone = policy.time_zone.as_deref().unwrap_or("UTC");
        let geometry = Geometry::new(
            i64::from(policy.slot_seconds),
            i64::from(policy.period_seconds),
            zone,
        )?;
        Ok(Self {
            geometry,
            periods: usize::try_from(policy.periods).unwrap_or(1).clamp(1, 8),
        })
    }

    /// True when `h` was kept with this geometry (else it starts again).
    fn built(&self, h: &ReplicaHistory) -> bool {
        let g = &self.geometry;
        i64::from(h.slot_seconds) == g.slot_secs
            && i64::from(h.period_seconds) == g.period_secs()
            && h.time_zone == g.zone
            && h.periods.iter().all(|p| p.len() == g.slots)
    }
}

/// One autoscaler as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// `HPA/<name>` or `ScaledObject/<name>`.
    pub autoscaler: String,
    /// `<kind>/<name>` of what it scales.
    pub target: String,
    /// Its bounds.
    pub min: i32,
    /// Its bounds.
    pub max: i32,
    /// The replicas it asks for now (`status.desiredReplicas`).
    pub desired: i32,
}

/// The slot being observed: the highest count seen in it, and the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// The slot.
    pub slot: Slot,
    /// The highest count seen in it.
    pub max: i32,
    /// The count seen last: what a slot passed without a look held.
    pub last: i32,
}

/// The history of `sample` at `now`, and the slot now open. `published` is the history as
/// the inventory holds it, `open` the slot this process was observing. A slot that closed
/// is recorded with its highest count, and each slot passed since without a look with the
/// count seen last (the process watched throughout, and nothing changed), unless more than
/// a period passed.
pub fn advance(
    keeping: &Keeping,
    published: Option<&ReplicaHistory>,
    open: Option<Open>,
    sample: &Sample,
    now: Timestamp,
) -> (ReplicaHistory, Open) {
    let g = &keeping.geometry;
    let slot = g.slot_at(now);
    let mut history = published
        .filter(|h| keeping.built(h))
        .cloned()
        .unwrap_or_else(|| empty(g, slot));
    history.autoscaler.clone_from(&sample.autoscaler);
    history.target.clone_from(&sample.target);
    history.min_replicas = sample.min;
    history.max_replicas = sample.max;
    let next = match open {
        Some(o) if o.slot.start == slot.start => Open {
            slot,
            max: o.max.max(sample.desired),
            last: sample.desired,
        },
        Some(o) if o.slot.start < slot.start => {
            record(keeping, &mut history, o.slot, o.max);
            // A gap longer than a period is a process that was not looking: unobserved.
            let gap = slot.start.duration_since(o.slot.end).as_secs();
            let mut at = o.slot.end;
            while gap <= g.period_secs() && at < slot.start {
                let passed = g.slot_at(at);
                record(keeping, &mut history, passed, o.last);
                at = passed.end;
            }
            fresh(slot, sample.desired)
        }
        // Nothing observed yet, or the clock went back.
        _ => fresh(slot, sample.desired),
    };
    (history, next)
}

fn fresh(slot: Slot, desired: i32) -> Open {
    Open {
        slot,
        max: desired,
        last: desired,
    }
}

/// A history with nothing observed, its newest period the one of `slot`.
fn empty(g: &Geometry, slot: Slot) -> ReplicaHistory {
    ReplicaHistory {
        slot_seconds: i32::try_from(g.slot_secs).unwrap_or(i32::MAX),
        period_seconds: i32::try_from(g.period_secs()).unwrap_or(i32::MAX),
        time_zone: g.zone.clone(),
        newest_period_start: Time(g.period_start(slot.period)),
        periods: vec![vec![-1; g.slots]],
        autoscaler: String::new(),
        target: String::new(),
        min_replicas: 0,
        max_replicas: 0,
    }
}

/// Records `count` for `slot`: a newer period starts new rows (the oldest beyond what is
/// kept are dropped), a slot recorded twice keeps the higher count, a slot older than every
/// row kept is dropped.
fn record(keeping: &Keeping, h: &mut ReplicaHistory, slot: Slot, count: i32) {
    let g = &keeping.geometry;
    let newest = g.slot_at(h.newest_period_start.0).period;
    if slot.period > newest {
        let new_rows = usize::try_from(slot.period - newest)
            .unwrap_or(usize::MAX)
            .min(keeping.periods);
        for _ in 0..new_rows {
            h.periods.insert(0, vec![-1; g.slots]);
        }
        h.newest_period_start = Time(g.period_start(slot.period));
    }
    h.periods.truncate(keeping.periods);
    let newest = g.slot_at(h.newest_period_start.0).period;
    let Ok(row) = usize::try_from(newest - slot.period) else {
        return;
    };
    if let Some(cell) = h.periods.get_mut(row).and_then(|r| r.get_mut(slot.index)) {
        *cell = (*cell).max(count);
    }
}

/// The histories of a namespace's autoscalers at `now`, sorted by autoscaler, and their
/// open slots. KEDA's HPA is recorded under its ScaledObject, with the ScaledObject's
/// bounds; an HPA that has not reported a count yet is left out.
pub fn histories(
    keeping: &Keeping,
    hpas: &[&HpaView],
    scaled_objects: &[&ScaledObjectView],
    published: &HashMap<String, ReplicaHistory>,
    open: &HashMap<String, Open>,
    now: Timestamp,
) -> (Vec<ReplicaHistory>, HashMap<String, Open>) {
    let mut out = Vec::new();
    let mut opened = HashMap::new();
    for hpa in hpas {
        let so = hpa
            .scaled_object
            .as_ref()
            .and_then(|n| scaled_objects.iter().find(|s| &s.name == n));
        let autoscaler = match &hpa.scaled_object {
            Some(n) => format!("ScaledObject/{n}"),
            None => format!("HPA/{}", hpa.name),
        };
        // No count yet, or less than the HPA's minimum: it cannot scale its target (it
        // reports 0 then) or has not caught up with a new minimum. Nothing to learn from;
        // what was recorded stays.
        let Some(desired) = hpa.desired.filter(|&d| d >= hpa.min.unwrap_or(1)) else {
            out.extend(published.get(&autoscaler).cloned());
            opened.extend(open.get(&autoscaler).map(|o| (autoscaler.clone(), *o)));
            continue;
        };
        let sample = Sample {
            autoscaler,
            target: format!("{}/{}", hpa.target.0, hpa.target.1),
            // The autoscaler's own minimum, also while a template overrides it.
            min: match so {
                Some(s) => s.overridden_min.or(s.min).unwrap_or(0),
                None => hpa.overridden_min.or(hpa.min).unwrap_or(1),
            },
            max: so.and_then(|s| s.max).unwrap_or(hpa.max),
            desired,
        };
        let key = &sample.autoscaler;
        let (h, o) = advance(
            keeping,
            published.get(key),
            open.get(key).copied(),
            &sample,
            now,
        );
        opened.insert(key.clone(), o);
        out.push(h);
    }
    out.sort_by(|a, b| a.autoscaler.cmp(&b.autoscaler));
    (out, opened)
}

/// The open slot of each autoscaler this process observes, by namespace and autoscaler.
#[derive(Debug, Default)]
pub struct OpenSlots(Mutex<HashMap<(String, String), Open>>);

impl OpenSlots {
    /// The open slots of `ns`'s autoscalers, by autoscaler.
    pub fn of(&self, ns: &str) -> HashMap<String, Open> {
        self.lock()
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|((_, a), o)| (a.clone(), *o))
            .collect()
    }

    /// After `ns`'s inventory was written: its open slots are `open` (autoscalers gone are
    /// forgotten).
    pub fn set(&self, ns: &str, open: HashMap<String, Open>) {
        let mut all = self.lock();
        all.retain(|(n, _), _| n != ns);
        all.extend(open.into_iter().map(|(a, o)| ((ns.to_string(), a), o)));
    }

    /// Forgets every open slot: each history goes on from the one its inventory publishes.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Open>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    /// Slots of 10 s in a 60 s period, three periods kept.
    fn keeping() -> Keeping {
        Keeping::of(&ReplicaHistoryPolicy {
            slot_seconds: 10,
            period_seconds: 60,
            periods: 3,
            ..ReplicaHistoryPolicy::default()
        })
        .unwrap()
    }

    /// `secs` after the start of period 0 (Monday 1970-01-05 00:00 UTC).
    fn at(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_hours(96) + SignedDuration::from_secs(secs)
    }

    fn sample(desired: i32) -> Sample {
        Sample {
            autoscaler: "HPA/web".into(),
            target: "Deployment/web".into(),
            min: 2,
            max: 10,
            desired,
        }
    }

    /// Feeds `(second, desired)` looks in order; the history after each.
    fn feed(looks: &[(i64, i32)]) -> ReplicaHistory {
        let k = keeping();
        let (mut h, mut open) = (None, None);
        for &(secs, desired) in looks {
            let (next, o) = advance(&k, h.as_ref(), open, &sample(desired), at(secs));
            h = Some(next);
            open = Some(o);
        }
        h.unwrap()
    }

    #[test]
    fn a_slot_is_recorded_with_its_highest_count_once_it_closed() {
        let h = feed(&[(1, 2), (4, 7), (8, 3)]);
        assert_eq!(
            h.periods,
            vec![vec![-1; 6]],
            "the open slot is not published"
        );
        let h = feed(&[(1, 2), (4, 7), (8, 3), (11, 3)]);
        assert_eq!(h.periods, vec![vec![7, -1, -1, -1, -1, -1]]);
        assert_eq!((h.autoscaler.as_str(), h.min_replicas), ("HPA/web", 2));
        assert_eq!(h.newest_period_start, Time(at(0)));
    }

    #[test]
    fn slots_passed_without_a_look_keep_the_last_count() {
        let h = feed(&[(1, 2), (4, 7), (8, 3), (45, 5)]);
        assert_eq!(h.periods, vec![vec![7, 3, 3, 3, -1, -1]]);
    }

    #[test]
    fn a_new_period_starts_a_row_and_old_rows_are_dropped() {
        let h = feed(&[(1, 4), (61, 5), (71, 6)]);
        assert_eq!(h.periods[0], vec![5, -1, -1, -1, -1, -1]);
        assert_eq!(h.periods[1], vec![4, 4, 4, 4, 4, 4]);
        assert_eq!(h.newest_period_start, Time(at(60)));
        // More than a period without a look is not filled in.
        let h = feed(&[(1, 4), (61, 5), (71, 6), (245, 6)]);
        assert_eq!(h.periods[0], vec![5, 6, -1, -1, -1, -1]);
        // Three periods on, only three rows are kept.
        let h = feed(&[(1, 4), (61, 5), (71, 6), (245, 6), (251, 7)]);
        assert_eq!(
            h.periods,
            vec![vec![6, -1, -1, -1, -1, -1], vec![-1; 6], vec![-1; 6]]
        );
        assert_eq!(h.newest_period_start, Time(at(240)));
    }

    #[test]
    fn a_restart_keeps_the_published_history_and_loses_only_the_open_slot() {
        let k = keeping();
        let published = feed(&[(1, 4), (15, 8), (21, 8)]);
        assert_eq!(&published.periods[0][..2], &[4, 8]);
        // A new process: no open slot; it sees 9 in slot 2 and then slot 3.
        let (h, open) = advance(&k, Some(&published), None, &sample(9), at(25));
        assert_eq!(
            h.periods, published.periods,
            "nothing recorded on the first look"
        );
        let (h, _) = advance(&k, Some(&h), Some(open), &sample(9), at(31));
        assert_eq!(&h.periods[0][..4], &[4, 8, 9, -1]);
    }

    #[test]
    fn another_geometry_starts_a_new_history() {
        let published = feed(&[(1, 4), (15, 8)]);
        let daily = Keeping::of(&ReplicaHistoryPolicy {
            slot_seconds: 20,
            period_seconds: 60,
            periods: 3,
            ..ReplicaHistoryPolicy::default()
        })
        .unwrap();
        let (h, _) = advance(&daily, Some(&published), None, &sample(3), at(25));
        assert_eq!((h.slot_seconds, h.periods.clone()), (20, vec![vec![-1; 3]]));
        let off = ReplicaHistoryPolicy {
            enabled: false,
            ..ReplicaHistoryPolicy::default()
        };
        assert!(Keeping::of(&off).is_err());
    }

    #[test]
    fn keda_hpas_are_recorded_under_their_scaled_object_with_its_bounds() {
        let hpa = |name: &str, so: Option<&str>, desired: Option<i32>| HpaView {
            namespace: "shop".into(),
            name: name.into(),
            target: ("Deployment".into(), "web".into()),
            min: Some(1),
            max: 5,
            scaled_object: so.map(str::to_string),
            desired,
            overridden_min: None,
        };
        let keda = hpa("keda-hpa-web", Some("web"), Some(3));
        let plain = hpa("api", None, Some(2));
        let silent = hpa("new", None, None);
        let so = ScaledObjectView {
            name: "web".into(),
            min: Some(0),
            max: Some(20),
            ..ScaledObjectView::default()
        };
        let (hs, open) = histories(
            &keeping(),
            &[&keda, &plain, &silent],
            &[&so],
            &HashMap::new(),
            &HashMap::new(),
            at(1),
        );
        let names: Vec<_> = hs.iter().map(|h| h.autoscaler.as_str()).collect();
        assert_eq!(
            names,
            ["HPA/api", "ScaledObject/web"],
            "an HPA without a count is left out"
        );
        assert_eq!((hs[1].min_replicas, hs[1].max_replicas), (0, 20));
        assert_eq!((hs[0].min_replicas, hs[0].max_replicas), (1, 5));
        assert_eq!(open["ScaledObject/web"].max, 3);
    }

    #[test]
    fn an_overridden_hpa_is_recorded_with_its_own_minimum_and_a_count_below_it_is_not() {
        let view = |min: i32, overridden_min: Option<i32>, desired: i32| HpaView {
            namespace: "shop".into(),
            name: "web".into(),
            target: ("Deployment".into(), "web".into()),
            min: Some(min),
            max: 20,
            scaled_object: None,
            desired: Some(desired),
            overridden_min,
        };
        let record = |v: HpaView, published: &HashMap<String, ReplicaHistory>| {
            histories(&keeping(), &[&v], &[], published, &HashMap::new(), at(1)).0
        };
        let overridden = record(view(10, Some(2), 12), &HashMap::new());
        assert_eq!(overridden[0].min_replicas, 2);
        // An HPA that cannot scale its target reports 0: nothing is recorded, and what was
        // recorded before stays.
        assert_eq!(record(view(3, None, 0), &HashMap::new()), []);
        let published = HashMap::from([("HPA/web".to_string(), overridden[0].clone())]);
        assert_eq!(record(view(3, None, 0), &published), overridden);
    }

    #[test]
    fn open_slots_are_kept_per_namespace() {
        let slots = OpenSlots::default();
        let k = keeping();
        let (_, o) = advance(&k, None, None, &sample(3), at(1));
        slots.set("a", HashMap::from([("HPA/web".to_string(), o)]));
        slots.set("b", HashMap::from([("HPA/api".to_string(), o)]));
        assert_eq!(slots.of("a").len(), 1);
        slots.set("a", HashMap::new());
        assert!(slots.of("a").is_empty());
        assert_eq!(slots.of("b").len(), 1);
    }
}
