//! The autoscaler's part of a Pool's load: its snapshot of the Pool, its group's siblings and
//! their sizes, the waiting claims each counted for its share of the Pools it may bind in,
//! and predictive warm-up's inputs.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::{Now, PoolLoad, Stores, claim_targets, parse_time, pool_key};
use crate::api::sandbox::{PredictivePolicy, SandboxClaim, SandboxEnv, SandboxPool};
use crate::sandbox::admission;
use crate::sandbox::autoscaler::forecast::{self, Geometry};
use crate::sandbox::autoscaler::{
    self, Arrival, ForecastInput, PodState, PoolPod, PoolView, QueueStats, ScaleDownMark,
    SiblingPool, Snapshot,
};
use crate::sandbox::env::group_of;
use crate::sandbox::memory::Memory;
use crate::sandbox::pool::{self, PodView, keys};

/// The autoscaler's snapshot of a Pool of `env`, when the Pool is in one of its scaling
/// groups: `pods` are the Pool's Pods (in `load.views`' order), `targeting` the claims that
/// target it.
pub(super) fn snapshot(
    stores: &Stores,
    memory: &Memory,
    pool: &SandboxPool,
    env: &SandboxEnv,
    load: &PoolLoad,
    pods: &[Arc<Pod>],
    targeting: &[Arc<SandboxClaim>],
) -> Option<Snapshot> {
    let group_name = pool.spec.scaling_group.as_ref()?;
    let reading = Reading {
        stores,
        memory,
        pool,
        load,
        pods,
        claims: targeting,
        spread: Spread::of(stores, pool, targeting),
    };
    let group = group_of(env, group_name);
    let forecast = group
        .as_ref()
        .and_then(|g| g.scale_up_policy.predictive.as_ref())
        .map(|p| reading.forecast(p));
    Some(Snapshot {
        group,
        forecast,
        ..reading.snapshot()
    })
}

/// What the autoscaler's snapshot of one Pool is read from.
struct Reading<'a> {
    stores: &'a Stores,
    memory: &'a Memory,
    pool: &'a SandboxPool,
    load: &'a PoolLoad,
    /// The Pool's Pods, in `load.views`' order.
    pods: &'a [Arc<Pod>],
    /// The claims that target the Pool.
    claims: &'a [Arc<SandboxClaim>],
    spread: Spread,
}

/// How many Pools each of a Pool's claims may bind in, by UID. Only a claim for an Env (or
/// a group of it) may target several; a claim for a Pool, absent here, targets one.
struct Spread(BTreeMap<String, usize>);

impl Spread {
    /// The spread of `claims`, the claims that target `pool`.
    fn of(stores: &Stores, pool: &SandboxPool, claims: &[Arc<SandboxClaim>]) -> Self {
        let for_envs: Vec<&Arc<SandboxClaim>> = claims
            .iter()
            .filter(|c| c.spec.pool_ref.is_none())
            .collect();
        if for_envs.is_empty() {
            return Spread(BTreeMap::new());
        }
        // A claim targets Pools of its own namespace only, which is `pool`'s.
        let ns = pool.namespace();
        let pools: Vec<Arc<SandboxPool>> = stores
            .pools
            .state()
            .into_iter()
            .filter(|p| p.namespace() == ns)
            .collect();
        Spread(
            for_envs
                .into_iter()
                .filter_map(|c| {
                    let n = pools.iter().filter(|p| claim_targets(c, p)).count();
                    Some((c.uid()?, n))
                })
                .collect(),
        )
    }

    /// The Pools the claim `uid` may bind in (at least 1).
    fn pools(&self, uid: &str) -> usize {
        self.0.get(uid).copied().unwrap_or(1).max(1)
    }

    /// The share of the claim `uid` each of its Pools counts: together they count it once.
    fn share(&self, uid: &str) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let n = self.pools(uid) as f64;
        1.0 / n
    }
}

/// The claims a Pool grows for: each waiting claim counts for its share of the Pools it
/// targets (`targets`, by claim UID), the sum rounded up.
/// Counted whole in each, five claims for a group of two Pools grew the group by ten Pods;
/// by shares, by six. A claim left waiting (its share went to a Pool that cannot grow) counts
/// again in the next decisions, until an idle Pod of any of its Pools binds it.
fn demand(waiting: &[&pool::ClaimView], targets: impl Fn(&str) -> usize) -> usize {
    // In 1/2520ths (divisible by 1 to 10): exact for up to ten Pools, never below the share.
    const WHOLE: usize = 2520;
    let shares: usize = waiting
        .iter()
        .map(|c| WHOLE.div_ceil(targets(&c.uid).max(1)))
        .sum();
    shares.div_ceil(WHOLE)
}

impl Reading<'_> {
    /// The autoscaler's snapshot of the Pool (its group and forecast are filled in by the caller).
    fn snapshot(&self) -> Snapshot {
        let Reading {
            stores,
            memory,
            pool,
            load,
            pods,
            claims,
            spread,
        } = self;
        let views = &load.views;
        let in_flight = load.in_flight_creates.len();
        // Demand: every Pending claim no Pod names, including those the plan binds to idle
        // Pods (decide subtracts the idle Pods itself), each for its share: a claim for an Env
        // (or a group of it) waits in every Pool it may bind in.
        let input = load.plan_input(pool, pool.spec.replicas, views.clone());
        let queued = demand(&pool::waiting_claims(&input), |uid| spread.pools(uid));
        let claimed_by_pods: Vec<&str> = views
            .iter()
            .filter_map(|v| v.claim.as_ref().map(|(n, _)| n.as_str()))
            .collect();
        let oldest_pending_since = claims
            .iter()
            .filter(|c| {
                let s = c.status.as_ref();
                matches!(s.and_then(|s| s.phase.as_deref()), None | Some("Pending"))
                    && !claimed_by_pods.contains(&c.name_any().as_str())
            })
            .filter_map(|c| c.creation_timestamp().map(|t| t.0))
            .min();
        let last_bound = claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.bound_at.as_ref().map(|t| t.0))
            .max();
        let last_claimed = views
            .iter()
            .filter(|v| v.claim.is_some())
            .map(|v| v.since)
            .max();
        let live = views
            .iter()
            .filter(|v| !v.terminating && !v.finished)
            .count()
            + in_flight;
        let missing = pool.spec.replicas - live as i32;
        Snapshot {
            pool: PoolView {
                name: pool.name_any(),
                replicas: pool.spec.replicas,
                auto_scaling: pool
                    .status
                    .as_ref()
                    .and_then(|s| s.auto_scaling.clone())
                    .unwrap_or_default(),
            },
            group: None,
            siblings: siblings(stores, memory, pool, load.now),
            queue: QueueStats {
                pending: queued as i32,
                oldest_pending_since: if queued > 0 {
                    oldest_pending_since
                } else {
                    None
                },
            },
            pods: pods
                .iter()
                .zip(views)
                .map(|(p, v)| pool_pod(p, v))
                .collect(),
            in_flight: autoscaler::InFlight {
                creates: in_flight as i32,
            },
            last_claim_at: last_bound.max(last_claimed),
            admission: admission::probe(&stores.quotas.state(), pool, missing),
            history: memory.history.of(&load.key),
            forecast: None,
        }
    }

    /// Predictive warm-up's inputs: the geometry of the group's policy, the Pool's claim
    /// history, the claims created since its open slot started (each for its share, as in
    /// [`demand`]), and how long its Ready Pods took to start.
    fn forecast(&self, policy: &PredictivePolicy) -> ForecastInput {
        let geometry = Geometry::of(policy);
        let history = self
            .pool
            .status
            .as_ref()
            .and_then(|s| s.claim_history.clone());
        let since = forecast::counting_since(&geometry, history.as_ref(), self.load.now.wall);
        let seen: Vec<(String, Arrival)> = self
            .claims
            .iter()
            .filter_map(|c| {
                let uid = c.uid()?;
                let share = self.spread.share(&uid);
                let at = c.creation_timestamp()?.0;
                Some((uid, Arrival { at, share }))
            })
            .collect();
        let arrivals = self.memory.arrivals.observe(
            &self.load.key,
            seen.iter().map(|(u, a)| (u.as_str(), *a)),
            since,
        );
        ForecastInput {
            geometry,
            enabled: policy.enabled,
            history,
            arrivals,
            starts: self.pods.iter().filter_map(|p| start_time(p)).collect(),
        }
    }
}

/// How long a Ready Pod took from creation to its Ready condition's last transition.
fn start_time(p: &Pod) -> Option<SignedDuration> {
    let created = p.creation_timestamp()?.0;
    let ready = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    let at = ready.last_transition_time.as_ref()?.0;
    Some(at.duration_since(created)).filter(|d| !d.is_negative())
}

/// The other Pools of the Pool's group and Env, each at the size this process last wrote
/// until the cache shows that write.
fn siblings(stores: &Stores, memory: &Memory, pool: &SandboxPool, now: Now) -> Vec<SiblingPool> {
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let env_owner = pool
        .owner_references()
        .iter()
        .find(|o| o.kind == "SandboxEnv")
        .map(|o| o.uid.clone());
    stores
        .pools
        .state()
        .iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.name_any() != name
                && p.spec.scaling_group.is_some()
                && p.spec.scaling_group == pool.spec.scaling_group
                && p.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == env_owner.as_ref())
        })
        .map(|p| SiblingPool {
            name: p.name_any(),
            replicas: memory
                .sizes
                .unseen(&pool_key(p), p.resource_version().as_deref(), now.mono)
                .unwrap_or(p.spec.replicas),
        })
        .collect()
}

fn pool_pod(p: &Pod, v: &PodView) -> PoolPod {
    let annotations = p.annotations();
    let state = if v.terminating || v.finished {
        PodState::Terminating
    } else if v.claim.is_some() {
        PodState::Claimed
    } else if !v.ready || v.ip.is_none() {
        PodState::Starting
    } else {
        PodState::Idle
    };
    PoolPod {
        name: v.name.clone(),
        uid: v.uid.clone(),
        resource_version: v.resource_version.clone(),
        state,
        ready: v.ready,
        has_ip: v.ip.is_some(),
        idle_since: (state == PodState::Idle)
            .then(|| parse_time(annotations.get(keys::STATE_SINCE)))
            .flatten(),
        mark: annotations
            .get(keys::SCALE_DOWN)
            .map(|a| ScaleDownMark::from_annotation(a)),
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::super::tests::store;
    use super::*;

    /// Claims for an Env's group count in each of its Pools for their share: the group grows
    /// by about as many Pods as claims wait, not that many per Pool.
    #[test]
    fn a_claim_for_a_group_counts_in_each_of_its_pools_for_its_share() {
        let claim = |uid: &str| pool::ClaimView {
            name: uid.into(),
            uid: uid.into(),
            created: Timestamp::UNIX_EPOCH,
            phase: None,
            pod_name: None,
        };
        let group: Vec<pool::ClaimView> = (0..5).map(|i| claim(&format!("g{i}"))).collect();
        let waiting: Vec<&pool::ClaimView> = group.iter().collect();
        let two = |_: &str| 2;
        assert_eq!(demand(&waiting, two), 3, "5 claims over 2 Pools");
        assert_eq!(demand(&waiting[..1], two), 1);
        assert_eq!(demand(&waiting, |_| 3), 2, "over 3 Pools");
        assert_eq!(demand(&waiting, |_| 1), 5, "Pool references");
        let own = claim("own");
        let mixed = [&own, waiting[0], waiting[1]];
        let targets = |uid: &str| if uid == "own" { 1 } else { 2 };
        assert_eq!(demand(&mixed, targets), 2);
        assert_eq!(demand(&[], two), 0);
        assert_eq!(demand(&waiting, |_| 0), 5, "a claim counts at least once");
    }

    /// A claim for an Env's group spreads over the group's Pools of its namespace; a claim
    /// for the Env alone over all its Pools; a claim for a Pool is counted whole.
    #[test]
    fn a_claims_share_is_one_over_the_pools_it_may_bind_in() {
        let pool = |ns: &str, name: &str, group: &str| -> SandboxPool {
            serde_json::from_value(json!({
                "metadata": {
                    "name": name, "namespace": ns,
                    "ownerReferences": [{
                        "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxEnv", "name": "e",
                        "uid": "e-uid", "controller": true,
                    }],
                },
                "spec": { "replicas": 1, "template": {}, "scalingGroup": group },
            }))
            .expect("pool")
        };
        let claim = |uid: &str, spec: serde_json::Value| -> Arc<SandboxClaim> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": { "name": uid, "namespace": "ns", "uid": uid },
                    "spec": spec,
                }))
                .expect("claim"),
            )
        };
        let a = pool("ns", "a", "g");
        let stores = Stores {
            pods: store(vec![]),
            claims: store(vec![]),
            pools: store(vec![
                a.clone(),
                pool("ns", "b", "g"),
                pool("ns", "c", "h"),
                pool("elsewhere", "d", "g"),
            ]),
            envs: store(vec![]),
            quotas: store(vec![]),
        };
        let claims = vec![
            claim("group", json!({"envRef": {"name": "e", "group": "g"}})),
            claim("env", json!({"envRef": {"name": "e"}})),
            claim("pool", json!({"poolRef": {"name": "a"}})),
        ];
        let spread = Spread::of(&stores, &a, &claims);
        assert_eq!(
            spread.pools("group"),
            2,
            "a and b, not d in another namespace"
        );
        assert_eq!(spread.pools("env"), 3);
        assert_eq!(spread.pools("pool"), 1);
        assert!((spread.share("group") - 0.5).abs() < f64::EPSILON);
        assert!((spread.share("pool") - 1.0).abs() < f64::EPSILON);
    }
}
