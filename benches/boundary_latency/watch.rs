//! What the benchmark's watches saw: per HPA and Deployment, when its override and its
//! restore first arrived, and the latencies from a boundary that follow.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::{Api, ResourceExt, runtime::watcher};
use moonin::{
    api::{
        keda::ScaledObject,
        scaling::{ScalingTemplate, keys},
    },
    scaling::owners::{last_writes, status_after_spec},
};

use crate::{
    ACTION_MAX, ACTION_MIN, HPA_MAX, HPA_MIN, Params, REPLICAS,
    shared::{
        stats::{Stats, stats},
        watch::{self, Seen as Event},
    },
    target_name,
};

/// One object's edges: when its override and its restore were first seen.
#[derive(Default)]
pub struct Edges {
    /// The override first seen.
    pub open: Option<Timestamp>,
    /// The restore first seen.
    pub close: Option<Timestamp>,
    /// The first event showing the override carried Moonin's restore record
    /// (for a Deployment: Moonin raised it, not the HPA controller).
    pub open_by_moonin: bool,
    /// Value changes seen after the first sighting (2 = one override, one restore).
    pub changes: u32,
    last: Option<(i32, i32)>,
}

impl Edges {
    pub fn record(
        &mut self,
        value: (i32, i32),
        at: Timestamp,
        applied: bool,
        restored: bool,
        by_moonin: bool,
    ) {
        if self.last.is_some_and(|l| l != value) {
            self.changes += 1;
        }
        self.last = Some(value);
        if self.open.is_none() {
            if applied {
                self.open = Some(at);
                self.open_by_moonin = by_moonin;
            }
        } else if self.close.is_none() && restored {
            self.close = Some(at);
        }
    }
}

/// What the three watches saw.
#[derive(Default)]
pub struct Seen {
    pub hpas: HashMap<String, Edges>,
    pub deployments: HashMap<String, Edges>,
    pub available: HashMap<String, i32>,
    /// Per HPA, the time of the last write outside its status and whether its controller
    /// wrote the status after that (see [`moonin::scaling::owners::status_after_spec`]).
    pub observed: HashMap<String, (Option<Timestamp>, bool)>,
    pub synced: [bool; 3],
    /// Template changes (new resourceVersions) seen after the initial list.
    pub template_changes: u64,
    pub relists: u32,
    pub errors: u32,
    /// Per autoscaler (0) and Deployment (1): when each value of the write floor's
    /// annotation ([`FLOOR_KEY`]) was first seen on it.
    pub floor_marks: HashMap<(usize, String, String), Timestamp>,
}

/// The annotation the write floor patches (a new value each time it runs).
pub const FLOOR_KEY: &str = "bench/floor";

/// Records the first sighting of the write floor's value on one object.
fn mark_floor(seen: &mut Seen, kind: usize, o: &impl ResourceExt, at: Timestamp) {
    if let Some(value) = o.annotations().get(FLOOR_KEY) {
        seen.floor_marks
            .entry((kind, o.name_any(), value.clone()))
            .or_insert(at);
    }
}

/// [`Seen`], written by the watches and read by the run.
pub type Shared = Arc<Mutex<Seen>>;

pub fn on_hpa(seen: &mut Seen, h: &HorizontalPodAutoscaler, at: Timestamp) {
    let value = (h.spec.min_replicas.unwrap_or(1), h.spec.max_replicas);
    let marked = h.annotations().contains_key(keys::ORIGINAL);
    mark_floor(seen, 0, h, at);
    seen.observed.insert(
        h.name_any(),
        (last_writes(&h.metadata).0, status_after_spec(&h.metadata)),
    );
    seen.hpas.entry(h.name_any()).or_default().record(
        value,
        at,
        value == (ACTION_MIN, ACTION_MAX),
        value == (HPA_MIN, HPA_MAX),
        marked,
    );
}

/// A ScaledObject is recorded as its target's autoscaler (KEDA's HPAs are not watched).
pub fn on_scaled_object(seen: &mut Seen, so: &ScaledObject, at: Timestamp) {
    let value = (
        so.spec.min_replica_count.unwrap_or(0),
        so.spec.max_replica_count.unwrap_or(100),
    );
    let marked = so.annotations().contains_key(keys::ORIGINAL);
    mark_floor(seen, 0, so, at);
    seen.hpas.entry(so.name_any()).or_default().record(
        value,
        at,
        value == (ACTION_MIN, ACTION_MAX),
        value == (HPA_MIN, HPA_MAX),
        marked,
    );
}

pub fn on_template(seen: &mut Seen, _: &ScalingTemplate, _: Timestamp) {
    if seen.synced[2] {
        seen.template_changes += 1;
    }
}

pub fn on_deployment(seen: &mut Seen, d: &Deployment, at: Timestamp) {
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let marked = d.annotations().contains_key(keys::ORIGINAL_REPLICAS);
    let name = d.name_any();
    mark_floor(seen, 1, d, at);
    let available = d
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    seen.available.insert(name.clone(), available);
    seen.deployments.entry(name).or_default().record(
        (replicas, 0),
        at,
        replicas >= ACTION_MIN,
        replicas == REPLICAS,
        marked,
    );
}

/// Watches `api` and records the arrival instant of every event.
pub fn spawn_watch<K>(api: Api<K>, seen: Shared, index: usize, on: fn(&mut Seen, &K, Timestamp))
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let what = ["autoscaler", "Deployment", "template"][index];
    watch::spawn(what, api, watcher::Config::default(), move |event| {
        let at = Timestamp::now();
        let mut seen = seen.lock().expect("seen");
        match event {
            Event::Object(o) => on(&mut seen, &o, at),
            Event::Synced => seen.synced[index] = true,
            Event::Relisted => seen.relists += 1,
            Event::Failed => seen.errors += 1,
            Event::Deleted(_) => {}
        }
    });
}

/// Milliseconds from `boundary` to `at`.
pub fn ms_since(boundary: Timestamp, at: Timestamp) -> f64 {
    at.duration_since(boundary).as_millis_f64()
}

/// Per target whose two writes of the write floor's `value` have both been seen: from
/// `began` to the later of the two, as [`Latencies`] times an edge's target.
pub fn floor_latencies(seen: &Seen, names: &[String], began: Timestamp, value: &str) -> Vec<f64> {
    let [_, _, both] = floor_kinds(seen, names, began, value);
    both
}

/// The write floor's writes of `value` seen: per autoscaler, per Deployment, and per target
/// whose two writes both were (as [`floor_latencies`]), from `began`.
pub fn floor_kinds(seen: &Seen, names: &[String], began: Timestamp, value: &str) -> [Vec<f64>; 3] {
    let first = |kind: usize, name: &str| {
        seen.floor_marks
            .get(&(kind, name.to_string(), value.to_string()))
            .copied()
    };
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for n in names {
        let (h, d) = (first(0, n), first(1, n));
        out[0].extend(h.map(|h| ms_since(began, h)));
        out[1].extend(d.map(|d| ms_since(began, d)));
        out[2].extend(h.zip(d).map(|(h, d)| ms_since(began, h.max(d))));
    }
    out
}

/// Per target whose edge `pick` has been seen on both its objects: from `began` to the
/// later of the two (the edges' "target done").
pub fn both_latencies(
    seen: &Seen,
    names: &[String],
    began: Timestamp,
    pick: fn(&Edges) -> Option<Timestamp>,
) -> Vec<f64> {
    let [_, _, both] = latencies(seen, names, began, pick);
    both
}

/// Per target: boundary → the edge `pick` of the HPA, of the Deployment, and of both.
pub fn latencies(
    seen: &Seen,
    names: &[String],
    boundary: Timestamp,
    pick: fn(&Edges) -> Option<Timestamp>,
) -> [Vec<f64>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for name in names {
        let h = seen.hpas.get(name).and_then(pick);
        let d = seen.deployments.get(name).and_then(pick);
        if let Some(h) = h {
            out[0].push(ms_since(boundary, h));
        }
        if let Some(d) = d {
            out[1].push(ms_since(boundary, d));
        }
        if let (Some(h), Some(d)) = (h, d) {
            out[2].push(ms_since(boundary, h.max(d)));
        }
    }
    out
}

/// What the watches saw, as latencies from each boundary and checks of each object.
pub struct Latencies {
    /// Window open → HPA override, per target.
    pub hpa_open: Vec<f64>,
    /// Window open → Deployment replicas raised.
    pub dep_open: Vec<f64>,
    /// Window open → both writes of a target.
    pub both_open: Vec<f64>,
    /// Window close → HPA restored.
    pub hpa_close: Vec<f64>,
    /// Window close → Deployment replicas restored.
    pub dep_close: Vec<f64>,
    /// Window close → both writes of a target.
    pub both_close: Vec<f64>,
    /// Per action position in its template: p50 and max of [HPA open, Deployment open,
    /// HPA close, Deployment close].
    pub positions: Vec<[Option<Stats>; 4]>,
    /// Deployments whose raise carried Moonin's restore record in the same event.
    pub raised_by_moonin: usize,
    /// Objects whose value changed more than twice.
    pub flapping: Vec<String>,
    /// Relists of the benchmark's watches.
    pub relists: u32,
    /// Errors of the benchmark's watches.
    pub watch_errors: u32,
}

impl Latencies {
    /// The latencies of the targets `names` from the window `open` → `close`.
    pub fn from_seen(
        s: &Seen,
        p: &Params,
        names: &[String],
        open: Timestamp,
        close: Timestamp,
    ) -> Self {
        let positions = (0..p.actions)
            .map(|a| {
                let names: Vec<String> = (0..p.templates).map(|t| target_name(t, a)).collect();
                let [h_open, d_open, _] = latencies(s, &names, open, |e| e.open);
                let [h_close, d_close, _] = latencies(s, &names, close, |e| e.close);
                [h_open, d_open, h_close, d_close].map(stats)
            })
            .collect();
        let [hpa_open, dep_open, both_open] = latencies(s, names, open, |e| e.open);
        let [hpa_close, dep_close, both_close] = latencies(s, names, close, |e| e.close);
        let raised_by_moonin = names
            .iter()
            .filter(|n| {
                s.deployments
                    .get(*n)
                    .is_some_and(|e| e.open.is_some() && e.open_by_moonin)
            })
            .count();
        let mut flapping: Vec<String> = s
            .hpas
            .iter()
            .filter(|(_, e)| e.changes > 2)
            .map(|(n, e)| format!("HPA {n}: {} changes", e.changes))
            .chain(
                s.deployments
                    .iter()
                    .filter(|(_, e)| e.changes > 2)
                    .map(|(n, e)| format!("Deployment {n}: {} changes", e.changes)),
            )
            .collect();
        flapping.sort();
        Latencies {
            hpa_open,
            dep_open,
            both_open,
            hpa_close,
            dep_close,
            both_close,
            positions,
            raised_by_moonin,
            flapping,
            relists: s.relists,
            watch_errors: s.errors,
        }
    }
}
