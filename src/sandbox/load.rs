//! Load: the plain-data snapshots the sandbox reconcilers decide on, from the shared caches
//! (plus a direct read where a lagging cache would mislead: a bound claim's Pod, an Env's
//! Pool), and the one reading of the clock per reconcile ([`Now`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::{
    Api, Client, ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use super::autoscaler::Snapshot;
use super::claim::{ClaimSnapshot, Found, Target};
use super::env::{EnvSnapshot, MemberPool};
use super::memory::Memory;
use super::pool::{ClaimView, PodView, PoolSnapshot, keys};
use crate::api::conditions::{self, types};
use crate::api::sandbox::{SandboxClaim, SandboxEnv, SandboxPool, reasons};
use crate::runtime::{decode::Decoded, invalid};

mod autoscaling;

/// The caches the sandbox reconcilers load from.
#[derive(Clone)]
pub struct Stores {
    /// Sandbox Pods (those labelled with a pool), trimmed.
    pub pods: Store<Pod>,
    /// Claims.
    pub claims: Store<SandboxClaim>,
    /// Pools.
    pub pools: Store<SandboxPool>,
    /// Envs, for a Pool's autoscaling group.
    pub envs: Store<SandboxEnv>,
    /// ResourceQuotas, for the autoscaler's admission probe.
    pub quotas: Store<ResourceQuota>,
}

/// The instant one reconcile runs at, read once by Load and passed down: every decision
/// and every timestamp a reconcile writes use it, so one reconcile is consistent with
/// itself (and decide and commit are testable without a clock).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// The wall clock: what is decided and written.
    pub wall: Timestamp,
    /// The monotonic clock: backoffs and the age of in-flight writes.
    pub mono: tokio::time::Instant,
}

impl Now {
    fn read() -> Self {
        Self {
            wall: Timestamp::now(),
            mono: tokio::time::Instant::now(),
        }
    }
}

/// `ns/name` of a Pool: how the process memory keys it.
pub fn pool_key(pool: &SandboxPool) -> String {
    format!(
        "{}/{}",
        pool.namespace().unwrap_or_default(),
        pool.name_any()
    )
}

/// Whether a claim targets this pool (`poolRef`, or `envRef` to its Env and group).
pub fn claim_targets(c: &SandboxClaim, pool: &SandboxPool) -> bool {
    if c.namespace() != pool.namespace() {
        return false;
    }
    if let Some(r) = &c.spec.pool_ref {
        return r.name == pool.name_any();
    }
    if let Some(r) = &c.spec.env_ref {
        let env_owned = pool
            .owner_references()
            .iter()
            .any(|o| o.kind == "SandboxEnv" && o.name == r.name);
        let group_ok = r
            .group
            .as_ref()
            .is_none_or(|g| pool.spec.scaling_group.as_ref() == Some(g));
        return env_owned && group_ok;
    }
    false
}

/// The Pool whose Pod holds `c` (the Pod its status names, while it carries the claim's
/// mark): a claim's change concerns it even when the claim no longer targets it (its Env's
/// member moved to another scaling group).
pub fn holding_pool(c: &SandboxClaim, pods: &Store<Pod>) -> Option<ObjectRef<SandboxPool>> {
    let ns = c.namespace()?;
    let name = c.status.as_ref()?.pod_name.as_ref()?;
    let pod = pods.get(&ObjectRef::new(name).within(&ns))?;
    let (held_by, uid) = claim_of(&pod)?;
    if held_by != c.name_any() || Some(uid) != c.uid().as_deref() {
        return None;
    }
    Some(ObjectRef::new(pod.labels().get(keys::POOL)?).within(&ns))
}

fn parse_time(s: Option<&String>) -> Option<Timestamp> {
    s?.parse().ok()
}

/// The claim a Pod is claimed by, `(name, uid)`, from its `moonin.io/claim` mark.
pub fn claim_of(p: &Pod) -> Option<(&str, &str)> {
    p.annotations().get(keys::CLAIM)?.split_once('/')
}

fn pod_view(p: &Pod) -> PodView {
    let status = p.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let phase = status.and_then(|s| s.phase.as_deref());
    let annotations = p.annotations();
    let claim = claim_of(p).map(|(n, u)| (n.to_string(), u.to_string()));
    let since = parse_time(annotations.get(keys::STATE_SINCE))
        .or_else(|| p.creation_timestamp().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    PodView {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
        resource_version: p.resource_version().unwrap_or_default(),
        ready,
        ip: status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        terminating: p.metadata.deletion_timestamp.is_some(),
        finished: matches!(phase, Some("Failed" | "Succeeded")),
        claim,
        marked: annotations.contains_key(keys::SCALE_DOWN),
        since,
    }
}

/// What the pool planner reads of a claim.
pub fn claim_view(c: &SandboxClaim) -> ClaimView {
    let status = c.status.clone().unwrap_or_default();
    ClaimView {
        name: c.name_any(),
        uid: c.uid().unwrap_or_default(),
        created: c
            .creation_timestamp()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        phase: status.phase,
        pod_name: status.pod_name,
    }
}

/// The Pool's Env (its owner) from the Env cache.
fn env_of(stores: &Stores, pool: &SandboxPool) -> Option<Arc<SandboxEnv>> {
    let ns = pool.namespace()?;
    let owner = pool
        .owner_references()
        .iter()
        .find(|o| o.kind == "SandboxEnv")?;
    stores.envs.get(&ObjectRef::new(&owner.name).within(&ns))
}

/// The scaling group a Pool's autoscaler decides in (`ns/env-uid/group`), when the Pool is
/// in a group of an Env the cache shows.
pub fn group_key(stores: &Stores, pool: &SandboxPool) -> Option<String> {
    let group = pool.spec.scaling_group.as_ref()?;
    let env = env_of(stores, pool)?;
    Some(format!(
        "{}/{}/{group}",
        pool.namespace().unwrap_or_default(),
        env.uid().unwrap_or_default()
    ))
}

/// A Pool as its reconcile sees it.
#[derive(Debug, Clone)]
pub struct PoolLoad {
    /// The instant of this reconcile.
    pub now: Now,
    /// `ns/name`.
    pub key: String,
    /// The Pool's Pods in the cache, with the binds in flight overlaid.
    pub views: Vec<PodView>,
    /// The claims that target the Pool, with the binds in flight overlaid.
    pub claims: Vec<ClaimView>,
    /// Pods this process created that the cache does not show yet.
    pub in_flight_creates: Vec<String>,
    /// Claims whose status says this Pool (or its Env's group) is missing: it is not.
    pub waiting_claims: Vec<ObjectRef<SandboxClaim>>,
    /// UIDs of claims the Pool's Pods hold that exist but do not decode now.
    pub undecodable_claims: Vec<String>,
    /// The autoscaler's snapshot, for a Pool of a scaling group whose Env the cache shows.
    pub autoscaler: Option<Snapshot>,
}

impl PoolLoad {
    /// The planner's snapshot at size `replicas`.
    pub fn plan_input(
        &self,
        pool: &SandboxPool,
        replicas: i32,
        pods: Vec<PodView>,
    ) -> PoolSnapshot {
        PoolSnapshot {
            replicas,
            recycle: pool.spec.recycle_policy,
            pods,
            in_flight_creates: self.in_flight_creates.clone(),
            claims: self.claims.clone(),
            claims_synced: true,
            undecodable_claims: self.undecodable_claims.clone(),
        }
    }
}

/// Whether `pool` is the Pod's controller. The label alone is not enough: the Pods of a
/// Pool deleted and created again under its name carry the label until the garbage
/// collector deletes them, and a Pod anyone labels is not the Pool's to hand out.
fn controlled_by(pod: &Pod, pool: &SandboxPool) -> bool {
    let uid = pool.uid();
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// Load of one Pool: its Pods and claims from the caches, the writes in flight, and (in a
/// scaling group) the autoscaler's snapshot. Call it holding the group's turn
/// ([`group_key`]): siblings' sizes are read here.
pub fn pool(stores: &Stores, memory: &Memory, pool: &SandboxPool) -> PoolLoad {
    let now = Now::read();
    let ns = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let key = pool_key(pool);
    let pods: Vec<Arc<Pod>> = stores
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(keys::POOL) == Some(&name)
                && controlled_by(p, pool)
        })
        .collect();
    let mut views: Vec<PodView> = pods.iter().map(|p| pod_view(p)).collect();
    let in_flight_creates = memory.in_flight.creates(&key, &views, now.mono);
    let targeting: Vec<Arc<SandboxClaim>> = stores
        .claims
        .state()
        .into_iter()
        .filter(|c| claim_targets(c, pool))
        .collect();
    let waiting_claims = targeting
        .iter()
        .filter(|c| {
            let conds = c
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            conditions::has_reason(conds, types::READY, reasons::POOL_NOT_FOUND)
                || conditions::has_reason(conds, types::READY, reasons::ENV_NOT_FOUND)
        })
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect();
    // And the claims this Pool's Pods hold that no longer target it (their Env's member moved
    // to another scaling group): still bound here, not deleted.
    let named: BTreeSet<&(String, String)> =
        views.iter().filter_map(|v| v.claim.as_ref()).collect();
    // A claim that does not decode is not in the cache, but it is not gone either.
    let mut held: Vec<Arc<SandboxClaim>> = Vec::new();
    let mut undecodable_claims = Vec::new();
    for (name, uid) in named {
        if targeting.iter().any(|c| c.uid().as_deref() == Some(uid)) {
            continue;
        }
        let same = |found: Option<&String>| found == Some(uid);
        match stores.claims.get(&ObjectRef::new(name).within(&ns)) {
            Some(c) if same(c.uid().as_ref()) => held.push(c),
            _ if invalid::find("SandboxClaim", &ns, name)
                .is_some_and(|u| same(u.metadata.uid.as_ref())) =>
            {
                undecodable_claims.push(uid.clone());
            }
            _ => {}
        }
    }
    let mut claims: Vec<ClaimView> = targeting
        .iter()
        .chain(&held)
        .map(|c| claim_view(c))
        .collect();
    memory
        .in_flight
        .overlay(&key, &mut views, &mut claims, now.mono);
    let mut load = PoolLoad {
        now,
        key,
        views,
        claims,
        in_flight_creates,
        waiting_claims,
        undecodable_claims,
        autoscaler: None,
    };
    if let Some(env) = env_of(stores, pool) {
        load.autoscaler =
            autoscaling::snapshot(stores, memory, pool, &env, &load, &pods, &targeting);
    }
    load
}

/// Load of one claim: what its reference finds (Pending), or whether its Pod still holds
/// it (Bound). The Pod cache can lag the claim cache just after a binding: the API server
/// is asked before a Pod is declared lost.
pub async fn claim(stores: &Stores, client: &Client, claim: &SandboxClaim) -> (ClaimSnapshot, Now) {
    let now = Now::read();
    let ns = claim.namespace().unwrap_or_default();
    let status = claim.status.clone().unwrap_or_default();
    let found = match status.phase.as_deref().unwrap_or("Pending") {
        "Pending" => Found::Pending(target(stores, claim, &ns)),
        "Bound" => {
            let pod = status.pod_name.clone().unwrap_or_default();
            Found::Bound {
                pod_alive: pod_holds(stores, client, claim, &ns, &pod).await,
            }
        }
        _ => Found::Settled,
    };
    let snapshot = ClaimSnapshot {
        namespace: ns,
        generation: claim.metadata.generation,
        created: claim.creation_timestamp().map(|t| t.0),
        lifetime: claim.spec.lifetime.map(Into::into),
        status,
        found,
    };
    (snapshot, now)
}

/// What a Pending claim's reference finds in this cluster.
fn target(stores: &Stores, claim: &SandboxClaim, ns: &str) -> Target {
    if let Some(r) = &claim.spec.pool_ref {
        let found = stores
            .pools
            .get(&ObjectRef::new(&r.name).within(ns))
            .is_some();
        Target::Pool {
            name: r.name.clone(),
            found,
            undecodable: (!found)
                .then(|| invalid::find("SandboxPool", ns, &r.name).map(|u| u.message()))
                .flatten(),
        }
    } else if let Some(r) = &claim.spec.env_ref {
        Target::Env {
            name: r.name.clone(),
            group: r.group.clone(),
            pools: stores
                .pools
                .state()
                .iter()
                .filter(|p| claim_targets(claim, p))
                .count(),
        }
    } else {
        Target::Unset
    }
}

/// Whether the Pod `pod` exists, is not terminating and names the claim; true when the API
/// server cannot say (decided at the next reconcile).
async fn pod_holds(
    stores: &Stores,
    client: &Client,
    claim: &SandboxClaim,
    ns: &str,
    pod: &str,
) -> bool {
    let uid = claim.uid().unwrap_or_default();
    let holds = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.annotations()
                .get(keys::CLAIM)
                .is_some_and(|c| c.ends_with(&uid))
    };
    if stores
        .pods
        .get(&ObjectRef::new(pod).within(ns))
        .is_some_and(|p| holds(&p))
    {
        return true;
    }
    match Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(pod)
        .await
    {
        Ok(Some(p)) => holds(&p),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Load of one Env: the Pool of each member of this cluster (the cache's, else the API
/// server's: a stored Pool that does not decode counts as absent and is replaced by the
/// Env's spec) and the Pools the cache shows the Env owns.
pub async fn env(
    stores: &Stores,
    client: &Client,
    env: Arc<SandboxEnv>,
    cluster: &str,
) -> Result<(EnvSnapshot, Now), kube::Error> {
    let now = Now::read();
    let ns = env.namespace().unwrap_or_default();
    let mut pools = BTreeMap::new();
    for m in env
        .spec
        .clusters
        .iter()
        .filter(|c| c.name == cluster)
        .flat_map(|c| &c.members)
    {
        let name = format!("{}-{}", env.name_any(), m.name);
        let cached = stores.pools.get(&ObjectRef::new(&name).within(&ns));
        let stored = match &cached {
            Some(p) => Some(p.clone()),
            None => Api::<Decoded<SandboxPool>>::namespaced(client.clone(), &ns)
                .get_opt(&name)
                .await?
                .and_then(Decoded::valid)
                .map(Arc::new),
        };
        pools.insert(name, MemberPool { cached, stored });
    }
    let uid = env.uid().unwrap_or_default();
    let owned = stores
        .pools
        .state()
        .iter()
        .filter(|p| {
            p.owner_references().iter().any(|o| o.uid == uid)
                && p.namespace().as_deref() == Some(ns.as_str())
        })
        .map(|p| p.name_any())
        .collect();
    let snapshot = EnvSnapshot {
        env,
        cluster: cluster.to_string(),
        pools,
        owned,
    };
    Ok((snapshot, now))
}

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    use super::*;
    use crate::sandbox::pool::{self, PodOp};

    pub(super) fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (store, mut writer) = reflector::store();
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        store
    }

    /// A ready, idle sandbox Pod of Pool `p`; `marked` carries a scale-down mark.
    fn pod(name: &str, marked: bool) -> Pod {
        let annotations = if marked {
            json!({ keys::SCALE_DOWN: "{}" })
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                "resourceVersion": "1", "labels": { keys::POOL: "p" },
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxPool", "name": "p",
                    "uid": "p-uid", "controller": true,
                }],
            },
            "status": {
                "podIP": "10.0.0.1",
                "conditions": [{ "type": "Ready", "status": "True" }],
            },
        }))
        .expect("pod")
    }

    #[test]
    fn a_deleted_marked_pod_the_cache_still_shows_is_not_replaced_by_a_spare() {
        // The autoscaler lowered the Pool from 3 to 2 and deleted its marked Pod `a`; the
        // next reconcile comes before the Pod cache shows the delete.
        let pool: SandboxPool = serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "p-uid" },
            "spec": { "replicas": 2, "template": {} },
        }))
        .expect("pool");
        let stores = Stores {
            pods: store(vec![pod("a", true), pod("b", false), pod("c", false)]),
            claims: store(vec![]),
            pools: store(vec![pool.clone()]),
            envs: store(vec![]),
            quotas: store(vec![]),
        };
        let deletes = |memory: &Memory| {
            let load = super::pool(&stores, memory, &pool);
            let snap = load.plan_input(&pool, pool.spec.replicas, load.views.clone());
            let plan = pool::plan(&snap, || "fresh".to_string());
            let deleted: Vec<String> = plan
                .ops
                .into_iter()
                .filter_map(|o| match o {
                    PodOp::Delete { pod, .. } => Some(pod),
                    _ => None,
                })
                .collect();
            (deleted, plan.counts.replicas)
        };
        // Without the memory of the delete, a spare Pod (`b` or `c`) would go in `a`'s place.
        let (deleted, replicas) = deletes(&Memory::default());
        assert_eq!((deleted.len(), replicas), (1, 2));
        assert_ne!(deleted[0], "a");
        let memory = Memory::default();
        memory
            .in_flight
            .deleted("ns/p", "a", "a-uid", tokio::time::Instant::now());
        assert_eq!(deletes(&memory), (vec![], 2));
    }

    /// A claim bound through its Env's scaling group keeps its Pod when the Env's member
    /// moves to another group: the claim no longer targets the Pool, but its Pod holds it.
    #[test]
    fn a_bound_claim_keeps_its_pod_when_its_pool_leaves_the_claims_group() {
        let pool: SandboxPool = serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "p-uid",
                "ownerReferences": [{
                    "apiVersion": "moonin.io/v1alpha1", "kind": "SandboxEnv", "name": "e",
                    "uid": "e-uid", "controller": true,
                }],
            },
            "spec": { "replicas": 2, "template": {}, "recyclePolicy": "Replace", "scalingGroup": "fast" },
        }))
        .expect("pool");
        let claim: SandboxClaim = serde_json::from_value(json!({
            "metadata": { "name": "c", "namespace": "ns", "uid": "c-uid", "resourceVersion": "7" },
            "spec": { "envRef": { "name": "e", "group": "slow" } },
            "status": { "phase": "Bound", "podName": "a" },
        }))
        .expect("claim");
        assert!(
            !claim_targets(&claim, &pool),
            "the member moved to another group"
        );
        let mut held = pod("a", false);
        held.annotations_mut()
            .insert(keys::CLAIM.to_string(), "c/c-uid".to_string());
        let stores = Stores {
            pods: store(vec![held, pod("b", false)]),
            claims: store(vec![claim]),
            pools: store(vec![pool.clone()]),
            envs: store(vec![]),
            quotas: store(vec![]),
        };
        let load = super::pool(&stores, &Memory::default(), &pool);
        let snap = load.plan_input(&pool, pool.spec.replicas, load.views.clone());
        let plan = pool::plan(&snap, || "fresh".to_string());
        assert_eq!(plan.ops, vec![], "nothing released, nothing created");
        assert_eq!((plan.counts.claimed, plan.counts.idle), (1, 1));
        // Its release or deletion wakes the Pool that holds its Pod all the same.
        let c = stores.claims.state()[0].clone();
        assert_eq!(
            holding_pool(&c, &stores.pods),
            Some(ObjectRef::new("p").within("ns"))
        );
        let unmarked = store(vec![pod("a", false)]);
        assert_eq!(
            holding_pool(&c, &unmarked),
            None,
            "a Pod that no longer holds it"
        );
    }
}
