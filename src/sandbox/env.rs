//! An Env, decided purely: the `SandboxPool` each member of this cluster wants (named
//! `<env>-<member>`, owned by the Env), which field manager owns its `spec.replicas`, the
//! Pools of members that are gone, and the Env's status (every member of every cluster,
//! and whether the API server refused a Pool).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::api::conditions::{self, Desired, types};
use crate::api::field_manager;
use crate::api::sandbox::{
    EnvMember, MemberStatus, SandboxEnv, SandboxEnvStatus, SandboxPool, ScalingGroup, reasons,
};

/// One Env, as Load found it.
#[derive(Debug, Clone)]
pub struct EnvSnapshot {
    /// The Env.
    pub env: Arc<SandboxEnv>,
    /// The cluster this manager runs in (`--cluster-name`).
    pub cluster: String,
    /// The Pool of each member of this cluster, by Pool name.
    pub pools: BTreeMap<String, MemberPool>,
    /// The Pools in the Env's namespace the cache shows owned by the Env.
    pub owned: Vec<String>,
}

/// The Pool of one member of this cluster.
#[derive(Debug, Clone, Default)]
pub struct MemberPool {
    /// As the Pool cache shows it (the status reports its counts).
    pub cached: Option<Arc<SandboxPool>>,
    /// As stored: the cached one, else what the API server returned. Right after a start
    /// the cache can lag a Pool that exists; an autoscaled Pool must not be taken for a
    /// new one and its replicas reset.
    pub stored: Option<Arc<SandboxPool>>,
}

/// A server-side apply of one member's Pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolApply {
    /// The Pool's name.
    pub pool: String,
    /// First, under the autoscaler's field manager: its current `spec.replicas`, so that
    /// dropping the field from this controller's apply keeps it (the hand-over of
    /// `spec.replicas` to the autoscaler).
    pub hand_over: Option<Value>,
    /// The Pool as this controller wants it.
    pub body: Value,
}

/// What one Env reconcile writes to its Pools.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvPlan {
    /// Every member of every cluster, for the status.
    pub members: Vec<MemberStatus>,
    /// Pools to apply, those already up to date left out.
    pub applies: Vec<PoolApply>,
    /// Pools of members that are gone.
    pub deletes: Vec<String>,
}

/// The Env's status after its Pools were written.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvStatusPlan {
    /// The status to write, when it changes.
    pub status: Option<SandboxEnvStatus>,
    /// A Warning Event's note, published once the status is written: the Pools were
    /// refused and the status did not say so yet.
    pub event: Option<String>,
    /// Why the API server refused Pools, when it did: the Env backs off.
    pub refusal: Option<String>,
}

/// The autoscaling group `name` of an Env, if the Env declares it.
pub fn group_of(env: &SandboxEnv, name: &str) -> Option<ScalingGroup> {
    env.spec
        .autoscaling
        .as_ref()?
        .groups
        .iter()
        .find(|g| g.name == name)
        .cloned()
}

/// Whether `manager` owns `spec.replicas` of a Pool (from its managedFields).
pub fn owns_replicas(pool: &SandboxPool, manager: &str) -> bool {
    crate::api::field_manager::spec_owners(&pool.metadata, "replicas")
        .any(|m| m.manager.as_deref() == Some(manager))
}

/// Decides the Pools of one Env.
pub fn decide(snap: &EnvSnapshot) -> EnvPlan {
    let env = snap.env.as_ref();
    let mut plan = EnvPlan {
        members: Vec::new(),
        applies: Vec::new(),
        deletes: Vec::new(),
    };
    let mut wanted: Vec<String> = Vec::new();
    for cluster in &env.spec.clusters {
        for m in &cluster.members {
            let local = cluster.name == snap.cluster;
            let pool_name = format!("{}-{}", env.name_any(), m.name);
            let pool = snap.pools.get(&pool_name).filter(|_| local);
            let counts = pool
                .and_then(|p| p.cached.as_ref())
                .and_then(|p| p.status.as_ref());
            plan.members.push(MemberStatus {
                name: m.name.clone(),
                cluster: cluster.name.clone(),
                local,
                pool: local.then(|| pool_name.clone()),
                ready_replicas: counts.map(|s| s.ready_replicas),
                idle_replicas: counts.map(|s| s.idle_replicas),
            });
            if !local {
                continue;
            }
            let stored = pool.and_then(|p| p.stored.as_deref());
            plan.applies.extend(apply(env, m, &pool_name, stored));
            wanted.push(pool_name);
        }
    }
    plan.deletes = snap
        .owned
        .iter()
        .filter(|p| !wanted.contains(p))
        .cloned()
        .collect();
    plan
}

/// The apply of one local member's Pool, unless the stored Pool is up to date.
/// `spec.replicas` has exactly one field manager: the autoscaler's while the member's group
/// is enabled (a new Pool starts at the member's replicas), this controller's otherwise.
fn apply(
    env: &SandboxEnv,
    m: &EnvMember,
    pool_name: &str,
    stored: Option<&SandboxPool>,
) -> Option<PoolApply> {
    let ns = env.namespace().unwrap_or_default();
    let group = m.config.as_ref().and_then(|c| c.scaling_group.clone());
    let autoscaled = stored.is_some()
        && group
            .as_ref()
            .and_then(|g| group_of(env, g))
            .is_some_and(|g| g.enabled);
    let mut desired_spec = json!({
        "template": m.spec.template,
        "recyclePolicy": m.spec.recycle_policy,
        "scalingGroup": group,
    });
    if !autoscaled {
        desired_spec["replicas"] = json!(m.spec.replicas);
    }
    let up_to_date = stored.is_some_and(|p| {
        let ours = owns_replicas(p, field_manager::SANDBOX);
        serde_json::to_value(&p.spec).ok().is_some_and(|cur| {
            cur["template"] == desired_spec["template"]
                && if autoscaled {
                    !ours
                } else {
                    ours && cur["replicas"] == desired_spec["replicas"]
                }
                && cur["recyclePolicy"] == desired_spec["recyclePolicy"]
                && cur.get("scalingGroup").cloned().unwrap_or(Value::Null)
                    == desired_spec["scalingGroup"]
        })
    });
    if up_to_date {
        return None;
    }
    let hand_over = stored
        .filter(|p| autoscaled && !owns_replicas(p, field_manager::SANDBOX_AUTOSCALER))
        .map(|p| {
            json!({
                "apiVersion": "moonin.io/v1alpha1",
                "kind": "SandboxPool",
                "metadata": {"name": pool_name, "namespace": ns},
                "spec": {"replicas": p.spec.replicas},
            })
        });
    let body = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {
            "name": pool_name,
            "namespace": ns,
            "labels": {"moonin.io/env": env.name_any(), "moonin.io/member": m.name},
            "ownerReferences": [env.controller_owner_ref(&())],
        },
        "spec": desired_spec,
    });
    Some(PoolApply {
        pool: pool_name.to_string(),
        hand_over,
        body,
    })
}

/// The Env's status once its Pools were written: `refused` names the Pools the API server
/// refused (the Env is `Stalled` until its spec changes or a retry succeeds).
pub fn status(
    snap: &EnvSnapshot,
    members: Vec<MemberStatus>,
    refused: &[String],
    now: Timestamp,
) -> EnvStatusPlan {
    let env = snap.env.as_ref();
    let current = env.status.clone().unwrap_or_default();
    let local = members.iter().filter(|m| m.local).count() as i32;
    let refusal =
        (!refused.is_empty()).then(|| format!("the API server refused {}", refused.join("; ")));
    let desired = match &refusal {
        None => {
            let msg = format!(
                "{local} of {} members run in cluster {}",
                members.len(),
                snap.cluster
            );
            vec![
                Desired::new(types::READY, true, "PoolsReconciled", msg),
                Desired::new(types::STALLED, false, conditions::reasons::RECONCILED, ""),
            ]
        }
        Some(msg) => vec![
            Desired::new(types::READY, false, reasons::POOL_APPLY_FAILED, msg.clone()),
            Desired::new(
                types::STALLED,
                true,
                reasons::POOL_APPLY_FAILED,
                msg.clone(),
            ),
        ],
    };
    let generation = env.metadata.generation;
    let next = SandboxEnvStatus {
        observed_generation: generation,
        local_members: local,
        members,
        conditions: conditions::merge(&current.conditions, &desired, generation, now),
    };
    let changed = next != current;
    let event = refusal.clone().filter(|_| {
        changed
            && !conditions::has_reason(
                &current.conditions,
                types::READY,
                reasons::POOL_APPLY_FAILED,
            )
    });
    EnvStatusPlan {
        status: changed.then_some(next),
        event,
        refusal,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn t() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "sandbox", "image": "registry.example/sandbox:1"}]}})
    }

    /// Env `e` (uid `e-uid`): member `a` here (2 replicas, group `g` when `grouped`),
    /// member `b` in cluster `elsewhere`; group `g` enabled when `enabled`.
    fn env(grouped: bool, enabled: bool) -> Arc<SandboxEnv> {
        let mut a = json!({"name": "a", "spec": {"replicas": 2, "template": template()}});
        if grouped {
            a["config"] = json!({"scalingGroup": "g"});
        }
        let env = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxEnv",
            "metadata": {"name": "e", "namespace": "ns", "uid": "e-uid", "generation": 3},
            "spec": {
                "clusters": [
                    {"name": "local", "members": [a]},
                    {"name": "elsewhere", "members": [
                        {"name": "b", "spec": {"replicas": 1, "template": template()}}
                    ]}
                ],
                "autoscaling": {"groups": [{"name": "g", "enabled": enabled, "minReplicas": 0, "maxReplicas": 10}]}
            }
        });
        Arc::new(serde_json::from_value(env).unwrap_or_else(|e| panic!("env: {e}")))
    }

    /// Pool `e-a` at `replicas`, with `spec.replicas` owned by `manager`.
    fn stored(replicas: i32, group: Option<&str>, manager: &str) -> Arc<SandboxPool> {
        let pool = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "SandboxPool",
            "metadata": {
                "name": "e-a",
                "namespace": "ns",
                "managedFields": [{
                    "manager": manager,
                    "operation": "Apply",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}
                }]
            },
            "spec": {"replicas": replicas, "template": template(), "recyclePolicy": "Replace", "scalingGroup": group},
            "status": {"readyReplicas": 1, "idleReplicas": 1}
        });
        Arc::new(serde_json::from_value(pool).unwrap_or_else(|e| panic!("pool: {e}")))
    }

    fn snap(env: Arc<SandboxEnv>, pool: Option<Arc<SandboxPool>>, owned: &[&str]) -> EnvSnapshot {
        EnvSnapshot {
            env,
            cluster: "local".into(),
            pools: [(
                "e-a".to_string(),
                MemberPool {
                    cached: pool.clone(),
                    stored: pool,
                },
            )]
            .into(),
            owned: owned.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The applies in short: (Pool, hand-over replicas, applied replicas).
    fn applies(plan: &EnvPlan) -> Vec<(String, Option<Value>, Value)> {
        plan.applies
            .iter()
            .map(|a| {
                (
                    a.pool.clone(),
                    a.hand_over.as_ref().map(|h| h["spec"]["replicas"].clone()),
                    a.body["spec"]["replicas"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn pools_are_applied_for_the_members_of_this_cluster_only() {
        let plan = decide(&snap(env(false, false), None, &[]));
        assert_eq!(
            applies(&plan),
            vec![("e-a".to_string(), None, json!(2))],
            "a new Pool at the member's replicas"
        );
        let body = &plan.applies[0].body;
        assert_eq!(
            (
                &body["metadata"]["labels"],
                &body["metadata"]["ownerReferences"][0]["uid"]
            ),
            (
                &json!({"moonin.io/env": "e", "moonin.io/member": "a"}),
                &json!("e-uid")
            )
        );
        let members: Vec<(&str, &str, bool, Option<&str>)> = plan
            .members
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.cluster.as_str(),
                    m.local,
                    m.pool.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            members,
            vec![
                ("a", "local", true, Some("e-a")),
                ("b", "elsewhere", false, None)
            ]
        );
    }

    #[test]
    fn one_field_manager_owns_the_replicas() {
        let sandbox = field_manager::SANDBOX;
        let autoscaler = field_manager::SANDBOX_AUTOSCALER;
        let cases = [
            // (grouped, enabled, the stored Pool, the applies)
            ("up to date", false, false, stored(2, None, sandbox), vec![]),
            (
                "the member's replicas changed",
                false,
                false,
                stored(5, None, sandbox),
                vec![("e-a".to_string(), None, json!(2))],
            ),
            (
                "autoscaling switched on: the autoscaler takes the current size over",
                true,
                true,
                stored(5, Some("g"), sandbox),
                vec![("e-a".to_string(), Some(json!(5)), Value::Null)],
            ),
            (
                "the autoscaler owns the size already",
                true,
                true,
                stored(5, Some("g"), autoscaler),
                vec![],
            ),
            (
                "autoscaling switched off: back to the member's replicas",
                true,
                false,
                stored(5, Some("g"), autoscaler),
                vec![("e-a".to_string(), None, json!(2))],
            ),
        ];
        for (name, grouped, enabled, pool, want) in cases {
            let plan = decide(&snap(env(grouped, enabled), Some(pool), &[]));
            assert_eq!(applies(&plan), want, "{name}");
        }
    }

    #[test]
    fn pools_of_members_that_are_gone_are_deleted() {
        let plan = decide(&snap(env(false, false), None, &["e-a", "e-old"]));
        assert_eq!(plan.deletes, vec!["e-old".to_string()]);
    }

    #[test]
    fn a_refusal_stalls_the_env_and_is_published_once() {
        let s = snap(env(false, false), None, &[]);
        let members = decide(&s).members;
        let refused = ["SandboxPool e-a: denied".to_string()];
        let first = status(&s, members.clone(), &refused, t());
        let message = "the API server refused SandboxPool e-a: denied".to_string();
        assert_eq!(first.event.as_ref(), Some(&message));
        assert_eq!(first.refusal.as_ref(), Some(&message));
        let next = first.status.clone().unwrap_or_default();
        assert_eq!(
            (
                next.observed_generation,
                next.local_members,
                conditions::has_reason(
                    &next.conditions,
                    types::STALLED,
                    reasons::POOL_APPLY_FAILED
                ),
            ),
            (Some(3), 1, true)
        );
        // Refused again: the status already says so; nothing is written or published.
        let mut again = (*s.env).clone();
        again.status = first.status;
        let s = EnvSnapshot {
            env: Arc::new(again),
            ..s
        };
        let second = status(&s, members, &refused, t());
        assert_eq!((second.status, second.event), (None, None));
        assert_eq!(second.refusal, Some(message));
    }
}
