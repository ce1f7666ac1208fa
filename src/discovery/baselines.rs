//! The baselines revision records are measured from: per Deployment, the view its last
//! record was derived from (or its first sight). Shared by the recorders, the Deployment
//! watch and the inventory, which publishes each one ([`published`]) so that the next
//! process starts from it ([`restored`]) instead of from nothing.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::{config, view::DeploymentView};
use crate::api::discovery::{ContainerImage, WorkloadBaseline};

/// Per Deployment (`(namespace, name)`), the view its last revision record was derived
/// from: a change is measured from there, not from the previous event (an edit is recorded
/// once its ReplicaSet revision shows). Shared by the recorders and the Deployment watch,
/// which forgets a deleted Deployment.
#[derive(Default)]
pub struct Baselines(Mutex<HashMap<(String, String), Arc<DeploymentView>>>);

impl Baselines {
    /// The baseline of a Deployment, if it has one.
    pub fn get(&self, key: &(String, String)) -> Option<Arc<DeploymentView>> {
        self.locked().get(key).cloned()
    }

    /// Measures the Deployment's next change from `view`.
    pub fn set(&self, view: &Arc<DeploymentView>) {
        self.locked()
            .insert((view.namespace.clone(), view.name.clone()), view.clone());
    }

    /// Forgets a deleted Deployment: one created again under its name is first seen.
    pub fn forget(&self, key: &(String, String)) {
        self.locked().remove(key);
    }

    /// Forgets every baseline: each Deployment is measured from the one its inventory
    /// publishes, as in a process that has just started.
    pub fn clear(&self) {
        self.locked().clear();
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<DeploymentView>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the inventory publishes of a baseline: the fields a change is measured on.
pub fn published(view: &DeploymentView) -> WorkloadBaseline {
    WorkloadBaseline {
        uid: view.uid.clone(),
        revision: view.revision,
        replicas: view.replicas,
        containers: view
            .images
            .iter()
            .map(|(name, image)| ContainerImage {
                name: name.clone(),
                image: image.clone(),
            })
            .collect(),
        config_refs: view.config_refs.clone(),
        configs: view.configs.iter().map(config::published).collect(),
    }
}

/// The baseline an earlier process published for `namespace`/`name`, as a view to measure
/// from (the fields [`published`] leaves out are empty: no change is measured on them).
pub fn restored(namespace: &str, name: &str, b: &WorkloadBaseline) -> DeploymentView {
    DeploymentView {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: b.uid.clone(),
        revision: b.revision,
        replicas: b.replicas,
        images: b
            .containers
            .iter()
            .map(|c| (c.name.clone(), c.image.clone()))
            .collect(),
        config_refs: b.config_refs.clone(),
        configs: b.configs.iter().map(config::restored).collect(),
        ..DeploymentView::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(revision: i64, image: &str) -> DeploymentView {
        DeploymentView {
            namespace: "shop".into(),
            name: "web".into(),
            revision: Some(revision),
            images: vec![("app".into(), image.into())],
            ..Default::default()
        }
    }

    #[test]
    fn a_deleted_deployment_loses_its_baseline() {
        let baselines = Baselines::default();
        let v = Arc::new(web(1, "app:1"));
        baselines.set(&v);
        let key = ("shop".to_string(), "web".to_string());
        assert_eq!(baselines.get(&key), Some(v));
        baselines.forget(&key);
        assert_eq!(baselines.get(&key), None);
    }

    #[test]
    fn a_published_baseline_restores_every_field_a_change_is_measured_on() {
        let view = DeploymentView {
            uid: "u1".into(),
            replicas: 3,
            config_refs: vec!["ConfigMap/web".into(), "Secret/db".into()],
            images: vec![
                ("init".into(), "busybox:1".into()),
                ("app".into(), "app:2".into()),
            ],
            // Not measured on: left out.
            ready: 2,
            template_manager: Some("kubectl".into()),
            ..web(2, "app:2")
        };
        let back = restored("shop", "web", &published(&view));
        assert_eq!(
            back,
            DeploymentView {
                ready: 0,
                template_manager: None,
                ..view.clone()
            }
        );
        assert_eq!(
            crate::discovery::revision::change(
                Some(&back),
                &view,
                None,
                "2026-01-01T00:00:00Z".parse().unwrap()
            ),
            None,
            "nothing changed since the published baseline"
        );
    }
}
