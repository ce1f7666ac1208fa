//! The baselines revision records are measured from: per Deployment, the view its last
//! record was derived from. Shared by the recorders and the Deployment watch.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::view::DeploymentView;

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

    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<DeploymentView>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
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
}
