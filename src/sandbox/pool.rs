//! The pool's Pods and claims, decided purely: which Pods to create or delete so the pool
//! matches `spec.replicas`, which Pending claims bind to which idle Pods (FIFO), which
//! claimed Pods are released, and what the Pool's status reports afterwards. The pool
//! reconciler turns the [`PoolPlan`] into guarded writes.
//!
//! Cache lag never creates extra Pods: Pods this process created that the cache does not
//! show yet count as present, and Pods already being deleted count as gone.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::conditions::{self, Desired, types};
use crate::api::sandbox::{PoolAutoScalingStatus, RecyclePolicy, SandboxPoolStatus, reasons};

/// Labels and annotations the sandbox controllers put on Pods.
pub mod keys {
    /// Label: the pool a sandbox Pod belongs to.
    pub const POOL: &str = "moonin.io/pool";
    /// Label: `idle` or `claimed`.
    pub const STATE: &str = "moonin.io/state";
    /// Annotation: when the Pod entered its state (RFC 3339).
    pub const STATE_SINCE: &str = "moonin.io/state-since";
    /// Annotation: the claim holding the Pod, `<name>/<uid>`.
    pub const CLAIM: &str = "moonin.io/claim";
    /// Annotation on a Pod chosen for scale-down: `{"decision": "<id>", "expiresAt": "<RFC
    /// 3339>"}` (see [`ScaleDownMark`](crate::sandbox::autoscaler::ScaleDownMark)). Binding
    /// refuses a marked Pod.
    pub const SCALE_DOWN: &str = "moonin.io/scale-down";
    /// Value of [`STATE`] for a free Pod.
    pub const IDLE: &str = "idle";
    /// Value of [`STATE`] for a bound Pod.
    pub const CLAIMED: &str = "claimed";
}

/// A sandbox Pod, as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// resourceVersion it was read at.
    pub resource_version: String,
    /// Ready condition True.
    pub ready: bool,
    /// `status.podIP`.
    pub ip: Option<String>,
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// Phase `Failed` or `Succeeded`: it will never serve again.
    pub finished: bool,
    /// The claim holding it, `(name, uid)`.
    pub claim: Option<(String, String)>,
    /// Marked for removal by a scale-down (never bound).
    pub marked: bool,
    /// When it entered its current state (idle since / claimed since), else its creation.
    pub since: Timestamp,
}

impl PodView {
    /// Ready, with an IP, not claimed, not marked, not terminating: may be bound.
    pub fn bindable(&self) -> bool {
        self.ready
            && self.ip.is_some()
            && self.claim.is_none()
            && !self.marked
            && !self.terminating
            && !self.finished
    }
}

/// A claim that targets this pool.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimView {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Creation time (FIFO order).
    pub created: Timestamp,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.podName`.
    pub pod_name: Option<String>,
}

impl ClaimView {
    /// Not bound yet: no phase or `Pending`, and no Pod named.
    pub fn pending(&self) -> bool {
        matches!(self.phase.as_deref(), None | Some("Pending")) && self.pod_name.is_none()
    }
}

/// Everything the planner needs about one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSnapshot {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.recyclePolicy`.
    pub recycle: RecyclePolicy,
    /// The pool's Pods in the cache.
    pub pods: Vec<PodView>,
    /// Names of Pods created by this process that the cache does not show yet.
    pub in_flight_creates: Vec<String>,
    /// Claims that target this pool (poolRef, or envRef to its env and group).
    pub claims: Vec<ClaimView>,
    /// Claims bound elsewhere or by name, to tell a missing claim from a slow cache: the
    /// claim cache has synced.
    pub claims_synced: bool,
    /// UIDs of claims this pool's Pods hold that exist but do not decode now (an upgrade
    /// tightened their schema, a foreign write): not gone, so their Pods are kept.
    pub undecodable_claims: Vec<String>,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodOp {
    /// Create a Pod with this name from the template.
    Create(String),
    /// Bind: mark the Pod claimed (guarded by its resourceVersion), then the claim Bound.
    Bind {
        /// Pod name.
        pod: String,
        /// Pod resourceVersion.
        resource_version: String,
        /// Pod IP.
        ip: String,
        /// Claim name.
        claim: String,
        /// Claim UID.
        claim_uid: String,
    },
    /// The Pod already names the claim (a crash came between the two writes): finish by
    /// writing the claim's status.
    FinishBind {
        /// Pod name.
        pod: String,
        /// Pod IP.
        ip: Option<String>,
        /// Claim name.
        claim: String,
        /// Claim UID.
        claim_uid: String,
    },
    /// Return a claimed Pod to idle (`Reuse`, or a binding that lost a race).
    Unclaim {
        /// Pod name.
        pod: String,
        /// Pod resourceVersion.
        resource_version: String,
    },
    /// Delete a Pod (released with `Replace`, finished, or in excess), preconditioned on
    /// its UID and resourceVersion.
    Delete {
        /// Pod name.
        pod: String,
        /// UID precondition.
        uid: String,
        /// resourceVersion precondition.
        resource_version: String,
    },
}

/// The answer of [`plan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolPlan {
    /// Writes, in order: releases, deletes, binds, creates.
    pub ops: Vec<PodOp>,
    /// Counts for the pool status, after the plan.
    pub counts: Counts,
    /// Pending claims left without a Pod (the autoscaler's queue).
    pub queued: usize,
}

/// Pool status counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods that exist or are being created, not terminating.
    pub replicas: i32,
    /// Ready Pods.
    pub ready: i32,
    /// Ready, free Pods.
    pub idle: i32,
    /// Bound Pods.
    pub claimed: i32,
}

/// Picks a fresh Pod name: `<pool>-<5 chars>` derived from `seed`.
pub fn pod_name(pool: &str, seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = seed;
    let mut suffix = String::with_capacity(5);
    for _ in 0..5 {
        suffix.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    let base: String = pool.chars().take(63 - 6).collect();
    format!("{}-{suffix}", base.trim_end_matches('-'))
}

/// The API server's message about the Pod `name` without that name: a refusal of the same
/// template reads the same for every generated name, so repeating it changes no status.
pub fn without_name(message: &str, name: &str) -> String {
    message
        .replace(&format!(" \"{name}\""), "")
        .replace(name, "<generated name>")
}

/// Where a claim's `waitMilliseconds` starts: when this process first saw it, if that fell in
/// the second its `creationTimestamp` names (the timestamp has one-second resolution, so the
/// sighting is the finer figure); otherwise the creation time, so a claim that waited across a
/// leader change, or was first seen late, is not counted from the late sighting.
pub fn wait_start(
    first_seen: Option<Timestamp>,
    created: Option<Timestamp>,
    now: Timestamp,
) -> Timestamp {
    match (first_seen, created) {
        (Some(seen), Some(created)) if seen >= created + SignedDuration::from_secs(1) => created,
        (Some(seen), _) => seen,
        (None, Some(created)) => created,
        (None, None) => now,
    }
}

/// Plans one pool. `fresh_names` supplies names for new Pods. The phases, in order: each
/// Pod as it stands, FIFO binding, the size, the counts.
pub fn plan(snap: &PoolSnapshot, fresh_names: impl FnMut() -> String) -> PoolPlan {
    let mut ops = Vec::new();
    let (live, held) = triage(snap, &mut ops);
    let binding = bind_fifo(snap, &live, &held, &mut ops);
    resize(snap, &live, fresh_names, &mut ops);
    let counts = counts_after(snap, &live, &ops, &binding);
    PoolPlan {
        ops,
        counts,
        queued: binding.pending - binding.binds,
    }
}

/// The claims waiting for a Pod of the pool: Pending and held by none of its Pods, those a
/// plan would bind to idle Pods included. The autoscaler's queue (it subtracts the idle
/// Pods itself).
pub fn waiting_claims(snap: &PoolSnapshot) -> Vec<&ClaimView> {
    let (_, held) = triage(snap, &mut Vec::new());
    pending_claims(snap, &held)
}

/// Each Pod as it stands: a terminating Pod is gone; a finished one is deleted; a claimed
/// one is kept while its claim holds it, released (`Replace`: deleted, `Reuse`: back to
/// idle) when its claim was released or deleted, freed when its claim is bound to another
/// Pod (it lost a race), and its bind finished when its claim is still Pending (a crash
/// came between the two writes). The Pods left live, and the UIDs of the claims they hold.
fn triage<'a>(snap: &'a PoolSnapshot, ops: &mut Vec<PodOp>) -> (Vec<&'a PodView>, Vec<&'a str>) {
    let claims_by_uid = |uid: &str| snap.claims.iter().find(|c| c.uid == uid);
    let mut live: Vec<&PodView> = Vec::new();
    let mut held: Vec<&str> = Vec::new();
    for pod in &snap.pods {
        if pod.terminating {
            continue;
        }
        if pod.finished {
            ops.push(delete(pod));
            continue;
        }
        if let Some((claim_name, claim_uid)) = &pod.claim {
            let released = match claims_by_uid(claim_uid) {
                Some(c) if c.pod_name.as_deref() == Some(pod.name.as_str()) => {
                    let released = c.phase.as_deref() == Some("Released");
                    if !released {
                        held.push(&c.uid);
                    }
                    released
                }
                // Pending and not held yet (two Pods can name one claim when a bind was
                // planned from a cache that missed the first one: the first keeps it).
                Some(c) if c.pending() && !held.contains(&c.uid.as_str()) => {
                    ops.push(PodOp::FinishBind {
                        pod: pod.name.clone(),
                        ip: pod.ip.clone(),
                        claim: claim_name.clone(),
                        claim_uid: claim_uid.clone(),
                    });
                    held.push(&c.uid);
                    false
                }
                Some(_) => {
                    // The claim is bound to, or being finished on, another Pod: this one
                    // lost a race; free it.
                    ops.push(PodOp::Unclaim {
                        pod: pod.name.clone(),
                        resource_version: pod.resource_version.clone(),
                    });
                    false
                }
                // The claim exists but does not decode: its sandbox is kept, claimed, until
                // it decodes again or is deleted.
                None if snap.undecodable_claims.contains(claim_uid) => false,
                // The claim was deleted: release its sandbox.
                None => snap.claims_synced,
            };
            if released {
                ops.push(release(pod, snap.recycle));
                if snap.recycle == RecyclePolicy::Reuse {
                    live.push(pod);
                }
                continue;
            }
        }
        live.push(pod);
    }
    (live, held)
}

/// Pending claims no Pod holds, oldest first.
fn pending_claims<'a>(snap: &'a PoolSnapshot, held: &[&str]) -> Vec<&'a ClaimView> {
    let mut pending: Vec<&ClaimView> = snap
        .claims
        .iter()
        .filter(|c| c.pending() && !held.contains(&c.uid.as_str()))
        .collect();
    pending.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    pending
}

/// What FIFO binding found and did.
struct Binding {
    /// Pending claims no Pod holds.
    pending: usize,
    /// Bindable Pods.
    idle: usize,
    /// Binds planned: the oldest claims to the Pods idle the longest.
    binds: usize,
}

/// FIFO binding: the oldest Pending claim first, to the Pod idle the longest.
fn bind_fifo(
    snap: &PoolSnapshot,
    live: &[&PodView],
    held: &[&str],
    ops: &mut Vec<PodOp>,
) -> Binding {
    let pending = pending_claims(snap, held);
    let mut idle: Vec<&PodView> = live.iter().copied().filter(|p| p.bindable()).collect();
    idle.sort_by(|a, b| (a.since, &a.name).cmp(&(b.since, &b.name)));
    for (claim, pod) in pending.iter().zip(idle.iter()) {
        ops.push(PodOp::Bind {
            pod: pod.name.clone(),
            resource_version: pod.resource_version.clone(),
            ip: pod.ip.clone().unwrap_or_default(),
            claim: claim.name.clone(),
            claim_uid: claim.uid.clone(),
        });
    }
    Binding {
        pending: pending.len(),
        idle: idle.len(),
        binds: pending.len().min(idle.len()),
    }
}

/// The size: live Pods plus creates the cache has not shown yet, against `spec.replicas`.
/// Missing Pods are created; excess ones deleted: never a claimed or marked Pod, never one
/// just bound; starting Pods first, then the most recently idle.
fn resize(
    snap: &PoolSnapshot,
    live: &[&PodView],
    mut fresh_names: impl FnMut() -> String,
    ops: &mut Vec<PodOp>,
) {
    let present = live.len() + snap.in_flight_creates.len();
    let wanted = usize::try_from(snap.replicas.max(0)).unwrap_or(0);
    if present < wanted {
        for _ in 0..wanted - present {
            ops.push(PodOp::Create(fresh_names()));
        }
    } else if present > wanted {
        let bound_now: Vec<&str> = ops
            .iter()
            .filter_map(|o| match o {
                PodOp::Bind { pod, .. } => Some(pod.as_str()),
                _ => None,
            })
            .collect();
        let mut spare: Vec<&PodView> = live
            .iter()
            .copied()
            .filter(|p| p.claim.is_none() && !p.marked && !bound_now.contains(&p.name.as_str()))
            .collect();
        spare.sort_by(|a, b| {
            (a.ready, std::cmp::Reverse(a.since)).cmp(&(b.ready, std::cmp::Reverse(b.since)))
        });
        for p in spare.into_iter().take(present - wanted) {
            ops.push(delete(p));
        }
    }
}

/// The status counts once the plan's writes are done.
fn counts_after(
    snap: &PoolSnapshot,
    live: &[&PodView],
    ops: &[PodOp],
    binding: &Binding,
) -> Counts {
    let deleted: Vec<&str> = ops
        .iter()
        .filter_map(|o| match o {
            PodOp::Delete { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    let remaining: Vec<&&PodView> = live
        .iter()
        .filter(|p| !deleted.contains(&p.name.as_str()))
        .collect();
    let creates = ops.iter().filter(|o| matches!(o, PodOp::Create(_))).count();
    let binds = binding.binds;
    let claimed = remaining.iter().filter(|p| p.claim.is_some()).count() + binds;
    let idle_after = remaining.iter().filter(|p| p.bindable()).count() - binds.min(binding.idle);
    Counts {
        replicas: (remaining.len() + snap.in_flight_creates.len() + creates) as i32,
        ready: remaining.iter().filter(|p| p.ready).count() as i32,
        idle: idle_after as i32,
        claimed: claimed as i32,
    }
}

fn delete(p: &PodView) -> PodOp {
    PodOp::Delete {
        pod: p.name.clone(),
        uid: p.uid.clone(),
        resource_version: p.resource_version.clone(),
    }
}

fn release(p: &PodView, recycle: RecyclePolicy) -> PodOp {
    match recycle {
        RecyclePolicy::Reuse => PodOp::Unclaim {
            pod: p.name.clone(),
            resource_version: p.resource_version.clone(),
        },
        RecyclePolicy::Replace | RecyclePolicy::Unknown => delete(p),
    }
}

/// The Pool's own conditions after a plan: `Ready` (every Pod of `spec.replicas` ready),
/// `Progressing` (Pods starting), `Stalled` (a create from `spec.template` was refused:
/// kstatus reads `Stalled=True` as failed, the template needs a fix), then the
/// autoscaler's.
pub fn status_conditions(
    counts: Counts,
    replicas: i32,
    create_error: Option<&str>,
    autoscaler: &[Desired],
) -> Vec<Desired> {
    let c = counts;
    let starting = c.replicas - c.ready;
    let mut desired = vec![
        Desired::new(
            types::READY,
            c.ready >= replicas,
            if c.ready >= replicas {
                "PoolReady"
            } else {
                "PodsStarting"
            },
            format!(
                "{} of {} sandbox Pods ready, {} idle, {} claimed",
                c.ready, replicas, c.idle, c.claimed
            ),
        ),
        Desired::new(
            "Progressing",
            starting > 0 || c.replicas != replicas,
            if starting > 0 {
                "PodsStarting"
            } else {
                "Stable"
            },
            format!("{starting} sandbox Pods starting"),
        ),
    ];
    match create_error {
        Some(msg) => {
            let msg = format!("the API server refused a sandbox Pod from spec.template: {msg}");
            desired[0] = Desired::new(types::READY, false, reasons::POD_CREATE_FAILED, msg.clone());
            desired.push(Desired::new(
                types::STALLED,
                true,
                reasons::POD_CREATE_FAILED,
                msg,
            ));
        }
        None => desired.push(Desired::new(
            types::STALLED,
            false,
            conditions::reasons::RECONCILED,
            "",
        )),
    }
    desired.extend(autoscaler.iter().cloned());
    desired
}

/// Whether the Pool's status changes: its counts, observed generation or conditions
/// (compared without their times), or the autoscaler's part when it decided. Steady state
/// writes nothing.
pub fn status_changed(
    current: &SandboxPoolStatus,
    generation: Option<i64>,
    counts: Counts,
    next_conditions: &[Condition],
    auto_scaling: Option<&PoolAutoScalingStatus>,
) -> bool {
    current.auto_scaling.as_ref() != auto_scaling
        || current.replicas != counts.replicas
        || current.ready_replicas != counts.ready
        || current.idle_replicas != counts.idle
        || current.claimed_replicas != counts.claimed
        || current.observed_generation != generation
        || !conditions::equal_ignoring_time(&current.conditions, next_conditions)
}

/// How long a write of this process may stay invisible in the cache before it is
/// forgotten (a create that failed silently, a Pod deleted before the cache saw it). Long
/// enough that a cache lagging under load does not make the pool create Pods twice.
pub const IN_FLIGHT_TTL: SignedDuration = SignedDuration::from_secs(120);

/// Bindings this process wrote that the caches may not show yet: the Pod patch of a bind
/// (Pod → claim) and the claim status write (claim → Pod). Overlaid on the cached views
/// before planning, so a lagging cache never binds one claim twice or hands a just-bound
/// Pod to another claim.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InFlightBinds {
    /// Pod name → the claim `(name, uid)` its bind patch wrote.
    pub pods: std::collections::BTreeMap<String, (String, String)>,
    /// Claim UID → the Pod its status write names.
    pub claims: std::collections::BTreeMap<String, String>,
}

impl InFlightBinds {
    /// Applies the writes to the views. Returns the entries the caches now show (or that
    /// no longer matter: the object is gone), which the caller forgets.
    pub fn overlay(
        &self,
        pods: &mut [PodView],
        claims: &mut [ClaimView],
    ) -> (Vec<String>, Vec<String>) {
        let mut seen_pods = Vec::new();
        for (name, claim) in &self.pods {
            match pods.iter_mut().find(|p| &p.name == name) {
                Some(p) if p.claim.is_none() && !p.terminating => p.claim = Some(claim.clone()),
                _ => seen_pods.push(name.clone()),
            }
        }
        let mut seen_claims = Vec::new();
        for (uid, pod) in &self.claims {
            match claims.iter_mut().find(|c| &c.uid == uid) {
                Some(c) if c.pending() => {
                    c.phase = Some("Bound".into());
                    c.pod_name = Some(pod.clone());
                }
                _ => seen_claims.push(uid.clone()),
            }
        }
        (seen_pods, seen_claims)
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
