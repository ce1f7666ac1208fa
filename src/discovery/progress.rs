//! What the rebuilds established per namespace, for the cluster status: which inventories
//! are written, split, and their signals and images.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::discovery::NamespaceInventoryStatus;
use crate::discovery::signals::reasons;

/// Per namespace, what the rebuilds established for the cluster status.
#[derive(Debug, Default)]
pub struct Progress {
    /// Namespaces whose inventory was written at least once since this process led.
    written: BTreeSet<String>,
    /// Namespaces split into parts.
    split: BTreeSet<String>,
    /// Signals per namespace, for the totals.
    signals: BTreeMap<String, i32>,
    /// Images per namespace, for the totals.
    images: BTreeMap<String, BTreeSet<String>>,
    /// Per namespace, the Deployments and CronJobs showing each signal reason.
    by_signal: BTreeMap<String, BTreeMap<String, i64>>,
}

/// The reason a signal starts with (`CrashLoopBackOff: container app` → `CrashLoopBackOff`),
/// `Other` when it is none of [`reasons::ALL`]: a bounded label.
fn reason_of(signal: &str) -> &'static str {
    let head = signal.split(':').next().unwrap_or_default().trim();
    reasons::ALL
        .iter()
        .find(|r| **r == head)
        .copied()
        .unwrap_or("Other")
}

impl Progress {
    /// A full rebuild starts: no inventory counts as written until it is again.
    pub fn restart(&mut self) {
        self.written.clear();
    }

    /// Every namespace the totals count something of.
    pub fn known(&self) -> BTreeSet<String> {
        let mut all: BTreeSet<String> = self.written.iter().cloned().collect();
        all.extend(self.split.iter().cloned());
        all.extend(self.signals.keys().cloned());
        all.extend(self.images.keys().cloned());
        all.extend(self.by_signal.keys().cloned());
        all
    }

    /// A namespace no longer inventoried (excluded, deleted or being deleted).
    pub fn forget(&mut self, ns: &str) {
        self.signals.remove(ns);
        self.images.remove(ns);
        self.by_signal.remove(ns);
        self.split.remove(ns);
        self.written.remove(ns);
    }

    /// A namespace's inventory was built: its signals and images count in the totals,
    /// whether or not it gets written.
    pub fn built(&mut self, ns: &str, status: &NamespaceInventoryStatus) {
        self.signals.insert(
            ns.to_string(),
            status.summary.as_ref().map_or(0, |s| s.error_signals),
        );
        self.images
            .insert(ns.to_string(), status.images.iter().cloned().collect());
        let mut by_signal: BTreeMap<String, i64> = BTreeMap::new();
        let workloads = status.deployments.iter().map(|d| &d.signals);
        for signals in workloads.chain(status.cron_jobs.iter().map(|c| &c.signals)) {
            // A workload counts once per reason, however many of its signals share it.
            let reasons: BTreeSet<&str> = signals.iter().map(|s| reason_of(s)).collect();
            for r in reasons {
                *by_signal.entry(r.to_string()).or_default() += 1;
            }
        }
        self.by_signal.insert(ns.to_string(), by_signal);
    }

    /// The Deployments and CronJobs showing each signal reason, over every namespace.
    pub fn workloads_by_signal(&self) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for per_ns in self.by_signal.values() {
            for (reason, n) in per_ns {
                *out.entry(reason.clone()).or_default() += n;
            }
        }
        out
    }

    /// A namespace's inventory was written, in `parts` parts.
    pub fn written(&mut self, ns: &str, parts: usize) {
        if parts > 1 {
            self.split.insert(ns.to_string());
        } else {
            self.split.remove(ns);
        }
        self.written.insert(ns.to_string());
    }

    /// How many of `namespaces` have their inventory written.
    pub fn written_of(&self, namespaces: &[&String]) -> usize {
        namespaces
            .iter()
            .filter(|n| self.written.contains(**n))
            .count()
    }

    /// Distinct images over every namespace.
    pub fn images(&self) -> usize {
        self.images
            .values()
            .flatten()
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Signals over every namespace.
    pub fn error_signals(&self) -> i32 {
        self.signals.values().sum()
    }

    /// Namespaces split into parts, in order.
    pub fn split(&self) -> Vec<String> {
        self.split.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::discovery::InventorySummary;

    fn status(signals: i32, images: &[&str]) -> NamespaceInventoryStatus {
        NamespaceInventoryStatus {
            summary: Some(InventorySummary {
                error_signals: signals,
                ..Default::default()
            }),
            images: images.iter().map(|i| i.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn progress_counts_what_was_built_and_written() {
        let mut p = Progress::default();
        p.built("a", &status(2, &["web:1", "db:1"]));
        p.built("b", &status(1, &["web:1"]));
        p.written("a", 1);
        p.written("b", 3);
        let (a, b, c) = ("a".to_string(), "b".to_string(), "c".to_string());
        assert_eq!(p.written_of(&[&a, &b, &c]), 2);
        assert_eq!(p.images(), 2, "distinct over every namespace");
        assert_eq!(p.error_signals(), 3);
        assert_eq!(p.split(), ["b"]);

        // A namespace built but not written still counts in the totals.
        p.built("c", &status(4, &["cron:1"]));
        assert_eq!(p.written_of(&[&a, &b, &c]), 2);
        assert_eq!((p.images(), p.error_signals()), (3, 7));

        p.written("b", 1);
        assert!(p.split().is_empty(), "no longer split");
        p.forget("a");
        assert_eq!((p.images(), p.error_signals()), (2, 5));
        assert_eq!(p.written_of(&[&a, &b, &c]), 1);
        p.restart();
        assert_eq!(p.written_of(&[&a, &b, &c]), 0);
        assert_eq!(p.error_signals(), 5, "a restart keeps the totals");
        // ... and names the namespaces they count, so that a full rebuild forgets those
        // deleted meanwhile (while another replica led, say).
        assert_eq!(p.known(), BTreeSet::from([b.clone(), c.clone()]));
    }

    #[test]
    fn workloads_are_counted_once_per_signal_reason_with_unknown_ones_as_other() {
        use crate::api::discovery::{CronJobEntry, DeploymentEntry};
        let deployment = |name: &str, signals: &[&str]| DeploymentEntry {
            name: name.into(),
            signals: signals.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let shop = NamespaceInventoryStatus {
            deployments: vec![
                deployment(
                    "web",
                    &[
                        "CrashLoopBackOff: container app",
                        "CrashLoopBackOff: container sidecar",
                    ],
                ),
                deployment(
                    "api",
                    &[
                        "CrashLoopBackOff: container app",
                        "Unavailable: 0/2 available",
                    ],
                ),
                deployment("db", &[]),
            ],
            cron_jobs: vec![CronJobEntry {
                name: "nightly".into(),
                signals: vec!["LastRunFailed: job nightly-1".into(), "SomethingNew".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut p = Progress::default();
        p.built("shop", &shop);
        p.built(
            "ops",
            &NamespaceInventoryStatus {
                deployments: vec![deployment("x", &["CrashLoopBackOff: container x"])],
                ..Default::default()
            },
        );
        let want: BTreeMap<String, i64> = [
            ("CrashLoopBackOff", 3),
            ("LastRunFailed", 1),
            ("Other", 1),
            ("Unavailable", 1),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into();
        assert_eq!(p.workloads_by_signal(), want);
        p.forget("ops");
        assert_eq!(p.workloads_by_signal()["CrashLoopBackOff"], 2);
    }
}
