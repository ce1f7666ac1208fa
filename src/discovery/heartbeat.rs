//! The heartbeat: the leader renews a Lease instead of writing status, and `ApiReachable`
//! follows whether that works ([`Reachability`]).

use std::{sync::Mutex, time::Duration};

use jiff::Timestamp;
use k8s_openapi::{api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{
    dirty::{Mark, Pending},
    names::CONTROLLER,
};
use crate::api::field_manager;
use crate::runtime::context::Context;

/// How often the leader renews the heartbeat Lease.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The heartbeat Lease, in the manager's namespace.
pub const HEARTBEAT_LEASE: &str = "moonin-discovery-heartbeat";

/// The last heartbeat's outcome (`ApiReachable`); None until the first one.
#[derive(Debug, Default)]
pub struct Reachability(Mutex<Option<Result<(), String>>>);

impl Reachability {
    /// Records a beat's outcome; true when it flipped since the last beat (the first beat
    /// flips nothing: the version probe said whether the API server answers until then).
    pub fn beat(&self, outcome: Result<(), String>) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let before = last.as_ref().map(Result::is_ok);
        let flipped = before.is_some_and(|ok| ok != outcome.is_ok());
        *last = Some(outcome);
        flipped
    }

    /// The last beat's outcome.
    pub fn last(&self) -> Option<Result<(), String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The Lease as the leader renews it at `now`.
fn lease(now: Timestamp) -> serde_json::Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": HEARTBEAT_LEASE},
        "spec": {
            "holderIdentity": "moonin-discovery",
            "renewTime": MicroTime(now),
            "leaseDurationSeconds": (HEARTBEAT.as_secs() * 3) as i32,
        },
    })
}

/// Renews the heartbeat Lease while this process leads; the cluster status is rebuilt
/// only when reachability flips.
pub async fn run(ctx: &Context, reachability: &Reachability, pending: &Pending) {
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        if !ctx.leadership.is_leader() {
            continue;
        }
        let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        ctx.metrics.wrote(CONTROLLER, "Lease");
        let outcome = api
            .patch(
                HEARTBEAT_LEASE,
                &PatchParams::apply(field_manager::DISCOVERY).force(),
                &Patch::Apply(&lease(Timestamp::now())),
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("renewing the heartbeat Lease failed: {e}"));
        if reachability.beat(outcome) {
            pending.mark(Mark::cluster());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_flip_after_the_first_beat_rebuilds_the_cluster_status() {
        let r = Reachability::default();
        assert_eq!(r.last(), None);
        assert!(!r.beat(Err("down".into())), "the first beat flips nothing");
        assert!(!r.beat(Err("still down".into())));
        assert_eq!(r.last(), Some(Err("still down".into())));
        assert!(r.beat(Ok(())));
        assert!(!r.beat(Ok(())));
        assert!(r.beat(Err("down".into())));
    }

    #[test]
    fn the_lease_lasts_three_beats() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let l = lease(now);
        assert_eq!(l["metadata"]["name"], HEARTBEAT_LEASE);
        assert_eq!(l["spec"]["leaseDurationSeconds"], 30);
        assert_eq!(l["spec"]["renewTime"], "2026-01-01T00:00:00.000000Z");
    }
}
