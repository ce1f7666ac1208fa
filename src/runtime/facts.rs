//! The inventory's key facts as Prometheus series with a `cluster` label, for teams that
//! federate Prometheus across clusters: a fleet dashboard over many managers' `/metrics`.
//!
//! Each controller adds a [`Source`] (a closure over what it already holds: discovery's last
//! totals, the template and pool caches); every scrape asks each source again, so a series
//! is exactly what the manager knows at that instant and a gone object's series go with it.
//!
//! Cardinality is bounded by construction, whatever the cluster holds:
//! - `moonin_fleet_inventory{cluster,fact}`: the 5 [`INVENTORY_FACTS`];
//! - `moonin_fleet_workloads_with_signal{cluster,signal}`: one per signal reason discovery
//!   knows (16) and `Other`;
//! - `moonin_fleet_scaling_templates{cluster,phase}`: one per template phase (5, and
//!   `Unknown` before a first status);
//! - `moonin_fleet_open_windows{cluster}`: one;
//! - `moonin_fleet_pool_replicas{cluster,namespace,pool,state}`: 4 states for each of at
//!   most [`MAX_POOLS`] pools (by namespace and name; the rest summed as pool `_other`) and
//!   `moonin_fleet_pool_saturated{cluster,namespace,pool}` one for each.
//!
//! With one cluster name per manager, at most 5 + 17 + 6 + 1 + 5 × 101 = 534 series.

use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use prometheus_client::metrics::{family::Family, gauge::Gauge};

/// The facts of `moonin_fleet_inventory`, as `fact` label values.
pub const INVENTORY_FACTS: [&str; 5] = [
    "namespaces",
    "deployments",
    "images",
    "cron_jobs",
    "error_signals",
];

/// Pools exported one by one; beyond, summed under pool `_other`.
pub const MAX_POOLS: usize = 100;

/// The states of `moonin_fleet_pool_replicas`.
pub const POOL_STATES: [&str; 4] = ["desired", "ready", "idle", "claimed"];

/// The series a fact belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    /// `moonin_fleet_inventory{fact}`.
    Inventory,
    /// `moonin_fleet_workloads_with_signal{signal}`.
    WorkloadsWithSignal,
    /// `moonin_fleet_scaling_templates{phase}`.
    ScalingTemplates,
    /// `moonin_fleet_open_windows`.
    OpenWindows,
    /// `moonin_fleet_pool_replicas{namespace,pool,state}`.
    PoolReplicas,
    /// `moonin_fleet_pool_saturated{namespace,pool}`.
    PoolSaturated,
}

/// One value of one series; `cluster` is added by [`Facts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    pub series: Series,
    /// The labels besides `cluster`, in order.
    pub labels: Vec<(&'static str, String)>,
    pub value: i64,
}

impl Fact {
    pub fn new(series: Series, labels: Vec<(&'static str, String)>, value: i64) -> Self {
        Self {
            series,
            labels,
            value,
        }
    }
}

/// What a controller reports at each scrape.
pub type Source = Box<dyn Fn() -> Vec<Fact> + Send + Sync>;

/// A fleet series: a gauge per label set (`cluster` first).
pub type FactFamily = Family<Vec<(String, String)>, Gauge>;

use crate::api::{sandbox::SandboxPool, scaling::ScalingTemplateStatus};

/// The fleet series and their sources. Cheap to clone; clones share both.
#[derive(Clone)]
pub struct Facts {
    cluster: Arc<Mutex<String>>,
    families: [(Series, FactFamily); 6],
    sources: Arc<Mutex<Vec<Source>>>,
}

impl Facts {
    /// The fleet series over their families (registered by [`crate::runtime::metrics`]).
    pub fn new(families: [(Series, FactFamily); 6]) -> Self {
        Self {
            cluster: Arc::default(),
            families,
            sources: Arc::default(),
        }
    }

    /// The `cluster` label of every series (`--cluster-name`).
    pub fn set_cluster(&self, name: &str) {
        *self.cluster.lock().unwrap_or_else(|e| e.into_inner()) = name.to_string();
    }

    /// Adds a source, asked at every scrape.
    pub fn add(&self, source: Source) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Asks every source again and replaces the series with their answers.
    pub fn refresh(&self) {
        let cluster = self
            .cluster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let facts: Vec<Fact> = self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|s| s())
            .collect();
        for (_, family) in &self.families {
            family.clear();
        }
        for fact in facts {
            let Some((_, family)) = self.families.iter().find(|(s, _)| *s == fact.series) else {
                continue;
            };
            let mut labels = vec![("cluster".to_string(), cluster.clone())];
            labels.extend(fact.labels.into_iter().map(|(k, v)| (k.to_string(), v)));
            family.get_or_create(&labels).inc_by(fact.value);
        }
    }
}

/// The phases of `moonin_fleet_scaling_templates` (`Unknown`: no status yet, or a phase
/// this build does not know).
pub const TEMPLATE_PHASES: [&str; 6] = [
    "Idle",
    "Active",
    "Suspended",
    "Expired",
    "Invalid",
    "Unknown",
];

/// The templates' facts: how many in each phase (every phase, 0 included) and how many
/// windows are open.
pub fn template_facts<'a>(
    statuses: impl Iterator<Item = Option<&'a ScalingTemplateStatus>>,
) -> Vec<Fact> {
    let mut phases = [0i64; TEMPLATE_PHASES.len()];
    let mut open = 0;
    for status in statuses {
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown");
        let i = TEMPLATE_PHASES
            .iter()
            .position(|p| *p == phase)
            .unwrap_or(TEMPLATE_PHASES.len() - 1);
        phases[i] += 1;
        open += i64::from(status.is_some_and(|s| s.window.is_some()));
    }
    let mut out: Vec<Fact> = TEMPLATE_PHASES
        .iter()
        .zip(phases)
        .map(|(p, n)| {
            Fact::new(
                Series::ScalingTemplates,
                vec![("phase", (*p).to_string())],
                n,
            )
        })
        .collect();
    out.push(Fact::new(Series::OpenWindows, vec![], open));
    out
}

/// A SandboxPool's counts, as its status says: wanted (the autoscaler's desired size, else
/// the spec), ready, idle, claimed, and whether it is saturated at `now`.
pub fn pool_counts(pool: &SandboxPool, now: Timestamp) -> PoolCounts {
    let status = pool.status.as_ref();
    let scaling = status.and_then(|s| s.auto_scaling.as_ref());
    let count =
        |f: fn(&crate::api::sandbox::SandboxPoolStatus) -> i32| i64::from(status.map_or(0, f));
    PoolCounts {
        namespace: pool.metadata.namespace.clone().unwrap_or_default(),
        name: pool.metadata.name.clone().unwrap_or_default(),
        replicas: [
            i64::from(
                scaling
                    .and_then(|a| a.desired_replicas)
                    .unwrap_or(pool.spec.replicas),
            ),
            count(|s| s.ready_replicas),
            count(|s| s.idle_replicas),
            count(|s| s.claimed_replicas),
        ],
        saturated: i64::from(
            scaling
                .and_then(|a| a.saturated_until.as_ref())
                .is_some_and(|t| t.0 > now),
        ),
    }
}

/// One pool's facts for [`pool_facts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCounts {
    pub namespace: String,
    pub name: String,
    /// desired, ready, idle, claimed (as [`POOL_STATES`]).
    pub replicas: [i64; 4],
    /// Saturated pools it stands for: 0 or 1 (for `_other`, how many of those it sums).
    pub saturated: i64,
}

/// The pools' facts: the first [`MAX_POOLS`] by namespace and name one by one, the rest
/// summed as pool `_other` (namespace empty).
pub fn pool_facts(mut pools: Vec<PoolCounts>) -> Vec<Fact> {
    pools.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    if pools.len() > MAX_POOLS {
        let rest = pools.split_off(MAX_POOLS);
        let mut other = PoolCounts {
            namespace: String::new(),
            name: "_other".into(),
            replicas: [0; 4],
            saturated: 0,
        };
        for p in &rest {
            for (sum, n) in other.replicas.iter_mut().zip(p.replicas) {
                *sum += n;
            }
            other.saturated += p.saturated;
        }
        pools.push(other);
    }
    let mut out = Vec::new();
    for p in pools {
        let at = || vec![("namespace", p.namespace.clone()), ("pool", p.name.clone())];
        for (state, n) in POOL_STATES.iter().zip(p.replicas) {
            let mut labels = at();
            labels.push(("state", (*state).to_string()));
            out.push(Fact::new(Series::PoolReplicas, labels, n));
        }
        out.push(Fact::new(Series::PoolSaturated, at(), p.saturated));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(ns: &str, name: &str, ready: i64, saturated: bool) -> PoolCounts {
        PoolCounts {
            namespace: ns.into(),
            name: name.into(),
            replicas: [ready, ready, 1, 0],
            saturated: i64::from(saturated),
        }
    }

    #[test]
    fn every_scrape_asks_the_sources_again_under_the_cluster_label() {
        let metrics = crate::runtime::metrics::Metrics::new();
        let facts = &metrics.facts;
        facts.set_cluster("eu-1");
        let open = Arc::new(Mutex::new(2));
        let seen = open.clone();
        facts.add(Box::new(move || {
            vec![Fact::new(
                Series::OpenWindows,
                vec![],
                *seen.lock().unwrap(),
            )]
        }));
        facts.add(Box::new(|| {
            vec![
                Fact::new(Series::Inventory, vec![("fact", "images".into())], 7),
                Fact::new(
                    Series::WorkloadsWithSignal,
                    vec![("signal", "CrashLoopBackOff".into())],
                    1,
                ),
                Fact::new(
                    Series::WorkloadsWithSignal,
                    vec![("signal", "CrashLoopBackOff".into())],
                    2,
                ),
            ]
        }));
        let text = metrics.render();
        assert!(
            text.contains("moonin_fleet_open_windows{cluster=\"eu-1\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("moonin_fleet_inventory{cluster=\"eu-1\",fact=\"images\"} 7\n"),
            "{text}"
        );
        // Two sources' facts of one series add up.
        assert!(
            text.contains("moonin_fleet_workloads_with_signal{cluster=\"eu-1\",signal=\"CrashLoopBackOff\"} 3\n"),
            "{text}"
        );
        *open.lock().unwrap() = 0;
        assert!(
            metrics
                .render()
                .contains("moonin_fleet_open_windows{cluster=\"eu-1\"} 0\n")
        );
    }

    #[test]
    fn templates_are_counted_by_phase_and_open_window() {
        let status = |phase: Option<&str>, open: bool| ScalingTemplateStatus {
            phase: phase.map(str::to_string),
            window: open.then(|| crate::api::scaling::WindowStatus {
                trigger: "Schedule".into(),
                start: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
                end: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            }),
            ..Default::default()
        };
        let all = [
            Some(status(Some("Active"), true)),
            Some(status(Some("Active"), true)),
            Some(status(Some("Idle"), false)),
            Some(status(Some("Pondering"), false)),
            None,
        ];
        let facts = template_facts(all.iter().map(Option::as_ref));
        let of = |phase: &str| {
            facts
                .iter()
                .find(|f| f.labels == vec![("phase", phase.to_string())])
                .map(|f| f.value)
        };
        assert_eq!(
            TEMPLATE_PHASES.map(of),
            [Some(1), Some(2), Some(0), Some(0), Some(0), Some(2)]
        );
        assert!(facts.contains(&Fact::new(Series::OpenWindows, vec![], 2)));
    }

    #[test]
    fn pools_beyond_the_bound_are_summed_as_other() {
        let mut pools: Vec<PoolCounts> = (0..MAX_POOLS + 3)
            .map(|i| pool("ns", &format!("p{i:03}"), 2, i % 2 == 0))
            .collect();
        pools.reverse();
        let facts = pool_facts(pools);
        let names: std::collections::BTreeSet<String> = facts
            .iter()
            .map(|f| f.labels.iter().find(|l| l.0 == "pool").unwrap().1.clone())
            .collect();
        assert_eq!(names.len(), MAX_POOLS + 1);
        assert!(names.contains("p000") && names.contains("_other") && !names.contains("p100"));
        let other: Vec<&Fact> = facts
            .iter()
            .filter(|f| {
                f.labels
                    .iter()
                    .any(|l| l == &("pool", "_other".to_string()))
            })
            .collect();
        // Ready summed over the three left out; two of them (p100, p102) saturated.
        assert!(other.iter().any(|f| f.series == Series::PoolReplicas
            && f.labels.contains(&("state", "ready".into()))
            && f.value == 6));
        assert!(
            other
                .iter()
                .any(|f| f.series == Series::PoolSaturated && f.value == 2)
        );
        assert_eq!(facts.len(), (MAX_POOLS + 1) * 5);
    }
}
