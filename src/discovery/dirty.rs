//! What changed since the last rebuild: the watches mark it, the rebuild loop takes it.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use super::view::DeploymentView;

/// What one observed change asks of the next rebuild.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mark {
    /// A namespace whose inventory is to be rebuilt.
    pub namespace: Option<String>,
    /// Whether the cluster status is to be rebuilt.
    pub cluster: bool,
    /// A Deployment as it is now, for its revision record.
    pub deployment: Option<Arc<DeploymentView>>,
    /// A ConfigMap or Secret whose data changed, as `(namespace, "ConfigMap/<name>")`: the
    /// Deployments that refer to it are measured again.
    pub config: Option<(String, String)>,
}

impl Mark {
    /// Nothing to do.
    pub fn none() -> Self {
        Self::default()
    }

    /// The cluster status.
    pub fn cluster() -> Self {
        Self {
            cluster: true,
            ..Self::default()
        }
    }

    /// A namespace's inventory.
    pub fn namespace(ns: &str) -> Self {
        Self {
            namespace: Some(ns.to_string()),
            ..Self::default()
        }
    }

    /// A namespace's inventory and the cluster status.
    pub fn namespace_and_cluster(ns: &str) -> Self {
        Self {
            cluster: true,
            ..Self::namespace(ns)
        }
    }

    fn is_none(&self) -> bool {
        self.namespace.is_none()
            && !self.cluster
            && self.deployment.is_none()
            && self.config.is_none()
    }
}

/// The dirty set: what the next rebuild does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dirty {
    /// Namespaces whose inventory is rebuilt.
    pub namespaces: BTreeSet<String>,
    /// Whether the cluster status is rebuilt.
    pub cluster: bool,
    /// Deployments that changed, in the order seen (their revision baseline is kept in
    /// [`Baselines`](super::baselines::Baselines)).
    pub deployments: Vec<Arc<DeploymentView>>,
    /// ConfigMaps and Secrets whose data changed, `(namespace, "ConfigMap/<name>")`.
    pub configs: BTreeSet<(String, String)>,
}

impl Dirty {
    /// Adds what `mark` asks for.
    pub fn add(&mut self, mark: Mark) {
        self.namespaces.extend(mark.namespace);
        self.cluster |= mark.cluster;
        self.deployments.extend(mark.deployment);
        self.configs.extend(mark.config);
    }

    /// A full rebuild: every namespace (instead of those marked) and the cluster status.
    pub fn everything(&mut self, namespaces: impl IntoIterator<Item = String>) {
        self.namespaces = namespaces.into_iter().collect();
        self.cluster = true;
    }

    /// Puts back the work of a rebuild that failed, `earlier` than what was marked since:
    /// nothing is dropped, and each Deployment's changes stay in the order seen.
    pub fn put_back(&mut self, earlier: Dirty) {
        self.cluster = true;
        self.namespaces.extend(earlier.namespaces);
        self.configs.extend(earlier.configs);
        let newer = std::mem::replace(&mut self.deployments, earlier.deployments);
        self.deployments.extend(newer);
    }
}

/// The dirty set shared by the watches and the rebuild loop, and the loop's wake-up.
#[derive(Default)]
pub struct Pending {
    dirty: Mutex<Dirty>,
    wake: tokio::sync::Notify,
}

impl Pending {
    /// Marks what `mark` asks for and wakes the loop (a mark that asks nothing wakes no one).
    pub fn mark(&self, mark: Mark) {
        if mark.is_none() {
            return;
        }
        self.with(|d| d.add(mark));
    }

    /// Puts back the work of a failed rebuild (see [`Dirty::put_back`]) and wakes the loop.
    pub fn put_back(&self, earlier: Dirty) {
        self.with(|d| d.put_back(earlier));
    }

    /// Takes the dirty set, leaving it empty.
    pub fn take(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits until something is marked (a mark made while nobody waits is kept).
    pub async fn marked(&self) {
        self.wake.notified().await;
    }

    fn with(&self, f: impl FnOnce(&mut Dirty)) {
        f(&mut self.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(name: &str, revision: i64) -> Arc<DeploymentView> {
        Arc::new(DeploymentView {
            namespace: "shop".into(),
            name: name.into(),
            revision: Some(revision),
            ..Default::default()
        })
    }

    fn names(d: &Dirty) -> Vec<String> {
        d.deployments
            .iter()
            .map(|d| format!("{}@{}", d.name, d.revision.unwrap_or(0)))
            .collect()
    }

    #[test]
    fn marks_add_up() {
        let mut d = Dirty::default();
        d.add(Mark::namespace("a"));
        d.add(Mark::namespace_and_cluster("b"));
        d.add(Mark {
            deployment: Some(deployment("web", 1)),
            ..Mark::namespace("shop")
        });
        d.add(Mark::none());
        d.add(Mark {
            config: Some(("shop".into(), "ConfigMap/web".into())),
            ..Mark::none()
        });
        assert_eq!(
            d.configs,
            [("shop".to_string(), "ConfigMap/web".to_string())].into()
        );
        assert_eq!(
            d.namespaces,
            ["a", "b", "shop"].map(String::from).into_iter().collect()
        );
        assert!(d.cluster);
        assert_eq!(names(&d), ["web@1"]);
    }

    #[test]
    fn a_full_rebuild_takes_every_namespace_instead_of_those_marked() {
        let mut d = Dirty::default();
        d.add(Mark::namespace("gone"));
        d.everything(["a".to_string(), "b".to_string()]);
        assert_eq!(
            d.namespaces,
            ["a", "b"].map(String::from).into_iter().collect()
        );
        assert!(d.cluster);
    }

    #[test]
    fn failed_work_goes_back_before_what_was_marked_since() {
        let mut earlier = Dirty::default();
        earlier.add(Mark {
            deployment: Some(deployment("web", 1)),
            ..Mark::namespace("shop")
        });
        let mut now = Dirty::default();
        now.add(Mark {
            deployment: Some(deployment("web", 2)),
            ..Mark::namespace("other")
        });
        earlier.add(Mark {
            config: Some(("shop".into(), "Secret/db".into())),
            ..Mark::none()
        });
        now.put_back(earlier);
        assert_eq!(now.configs.len(), 1, "a config change is not dropped");
        assert_eq!(names(&now), ["web@1", "web@2"]);
        assert_eq!(
            now.namespaces,
            ["other", "shop"].map(String::from).into_iter().collect()
        );
        assert!(now.cluster, "the cluster status is rebuilt after a failure");
    }

    #[test]
    fn a_mark_that_asks_nothing_leaves_the_set_empty() {
        let pending = Pending::default();
        pending.mark(Mark::none());
        assert_eq!(pending.take(), Dirty::default());
        pending.mark(Mark::cluster());
        assert!(pending.take().cluster);
        assert_eq!(pending.take(), Dirty::default(), "taking empties the set");
    }
}
