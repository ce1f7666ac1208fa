//! What the rebuilds established per namespace, for the cluster status: which inventories
//! are written, split, and their signals and images.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::discovery::NamespaceInventoryStatus;

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
}

impl Progress {
    /// A full rebuild starts: no inventory counts as written until it is again.
    pub fn restart(&mut self) {
        self.written.clear();
    }

    /// A namespace no longer inventoried (excluded, deleted or being deleted).
    pub fn forget(&mut self, ns: &str) {
        self.signals.remove(ns);
        self.images.remove(ns);
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
    }
}
