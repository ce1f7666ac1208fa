//! The benchmark's objects in its namespace (the Deployments, their autoscalers and the
//! templates), and the watches that time every change of them.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use kube::api::DynamicObject;
use kube::{Api, Client};
use moonin::api::{keda::ScaledObject, scaling::ScalingTemplate};

use crate::{
    Carrier, POLL,
    shared::wait,
    watch::{Shared, on_deployment, on_hpa, on_scaled_object, on_template, spawn_watch},
};

/// The benchmark's objects in its namespace, and what its watches see of them.
pub struct Targets {
    /// One per action.
    pub deployments: Api<Deployment>,
    /// One per action, on its Deployment (HPA runs).
    pub hpas: Api<HorizontalPodAutoscaler>,
    /// One per action, on its Deployment (ScaledObject runs).
    pub scaled_objects: Api<DynamicObject>,
    /// Which of the two the run creates.
    pub carrier: Carrier,
    /// One per template.
    pub templates: Api<ScalingTemplate>,
    /// What the watches saw.
    pub seen: Shared,
}

impl Targets {
    /// The objects of `ns` through `client`, with what `seen` watches saw of them.
    fn new(client: &Client, ns: &str, carrier: Carrier, seen: Shared) -> Self {
        Targets {
            deployments: Api::namespaced(client.clone(), ns),
            hpas: Api::namespaced(client.clone(), ns),
            scaled_objects: crate::shared::harness::scaled_objects(client, ns),
            carrier,
            templates: Api::namespaced(client.clone(), ns),
            seen,
        }
    }

    /// The same objects and watches, written through `client` (the floors are sent as the
    /// manager's ServiceAccount, which is who Moonin's writes are from).
    pub fn through(&self, client: &Client, ns: &str) -> Self {
        Targets::new(client, ns, self.carrier, self.seen.clone())
    }

    /// Watches the namespace's Deployments, HPAs and templates until each listed.
    pub async fn watch(client: &Client, ns: &str, carrier: Carrier) -> Result<Self, String> {
        let t = Targets::new(client, ns, carrier, Arc::default());
        match carrier {
            Carrier::Hpa => spawn_watch(t.hpas.clone(), t.seen.clone(), 0, on_hpa),
            Carrier::ScaledObject => spawn_watch(
                Api::<ScaledObject>::namespaced(client.clone(), ns),
                t.seen.clone(),
                0,
                on_scaled_object,
            ),
        };
        spawn_watch(t.deployments.clone(), t.seen.clone(), 1, on_deployment);
        spawn_watch(t.templates.clone(), t.seen.clone(), 2, on_template);
        wait::until(
            "the benchmark's watches to sync",
            Instant::now() + Duration::from_secs(30),
            POLL,
            || async {
                t.seen
                    .lock()
                    .expect("seen")
                    .synced
                    .iter()
                    .all(|s| *s)
                    .then_some(())
            },
        )
        .await?;
        Ok(t)
    }
}
