#[test]
fn a_refusal_reads_the_same_for_every_generated_name() {
    let invalid = |n: &str| {
        format!(
            "Pod \"{n}\" is invalid: spec.containers[0].name: Invalid value: \"-5m\": a lowercase RFC 1123 label"
        )
    };
    assert_eq!(
        without_name(&invalid("p-bcdfg"), "p-bcdfg"),
        without_name(&invalid("p-xz245"), "p-xz245")
    );
    assert_eq!(
        without_name(&invalid("p-bcdfg"), "p-bcdfg"),
        "Pod is invalid: spec.containers[0].name: Invalid value: \"-5m\": a lowercase RFC 1123 label"
    );
    assert_eq!(
        without_name("pods \"p-kk\" is forbidden: exceeded quota: q", "p-kk"),
        "pods is forbidden: exceeded quota: q"
    );
    assert_eq!(
        without_name("no p-kk here", "p-kk"),
        "no <generated name> here"
    );
}

use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[test]
fn wait_starts_at_the_finer_of_sighting_and_creation() {
    let ms = |m: i64| t(0) + SignedDuration::from_millis(m);
    // (first seen, created, expected start); now is t(30).
    let cases = [
        (Some(ms(400)), Some(t(0)), ms(400)), // seen within the creation second
        (Some(ms(999)), Some(t(0)), ms(999)), // still within it
        (Some(ms(1_000)), Some(t(0)), t(0)),  // seen late: creation is the bound
        (Some(t(20)), Some(t(0)), t(0)),      // seen by a new leader after 20 s
        (Some(ms(-200)), Some(t(0)), ms(-200)), // our clock a little behind the server's
        (None, Some(t(3)), t(3)),             // sighting lost (restart)
        (Some(ms(2_500)), None, ms(2_500)),   // no creation time
        (None, None, t(30)),                  // nothing: zero wait
    ];
    for (seen, created, want) in cases {
        assert_eq!(
            wait_start(seen, created, t(30)),
            want,
            "{seen:?} {created:?}"
        );
    }
}

fn pod(name: &str, ready: bool) -> PodView {
    PodView {
        name: name.into(),
        uid: format!("{name}-uid"),
        resource_version: "1".into(),
        ready,
        ip: ready.then(|| "10.0.0.1".to_string()),
        terminating: false,
        finished: false,
        claim: None,
        marked: false,
        since: t(0),
    }
}

fn claim(name: &str, created: i64) -> ClaimView {
    ClaimView {
        name: name.into(),
        uid: format!("{name}-uid"),
        created: t(created),
        phase: None,
        pod_name: None,
    }
}

fn snap(replicas: i32, pods: Vec<PodView>, claims: Vec<ClaimView>) -> PoolSnapshot {
    PoolSnapshot {
        replicas,
        recycle: RecyclePolicy::Replace,
        pods,
        in_flight_creates: vec![],
        claims,
        claims_synced: true,
        undecodable_claims: vec![],
    }
}

fn names() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("new-{n}")
    }
}

#[test]
fn an_empty_pool_fills_up() {
    let p = plan(&snap(3, vec![], vec![]), names());
    assert_eq!(
        p.ops,
        vec![
            PodOp::Create("new-1".into()),
            PodOp::Create("new-2".into()),
            PodOp::Create("new-3".into())
        ]
    );
    assert_eq!(p.counts.replicas, 3);
}

#[test]
fn creates_the_cache_has_not_seen_count_so_nothing_is_created_twice() {
    let mut s = snap(3, vec![pod("a", true)], vec![]);
    s.in_flight_creates = vec!["b".into(), "c".into()];
    assert_eq!(plan(&s, names()).ops, vec![]);
}

#[test]
fn a_bind_the_caches_do_not_show_yet_is_not_made_twice() {
    // This process bound claim c1 to Pod a; neither cache shows it yet.
    let mut pods = vec![pod("a", true), pod("b", true)];
    let mut claims = vec![claim("c1", 0)];
    let binds = InFlightBinds {
        pods: [("a".to_string(), ("c1".to_string(), "c1-uid".to_string()))].into(),
        claims: [("c1-uid".to_string(), "a".to_string())].into(),
    };
    let (seen_pods, seen_claims) = binds.overlay(&mut pods, &mut claims);
    assert!(seen_pods.is_empty() && seen_claims.is_empty());
    let p = plan(&snap(2, pods, claims), names());
    assert_eq!(p.ops, vec![], "no second bind, no FinishBind");
    assert_eq!((p.counts.idle, p.counts.claimed), (1, 1));
}

#[test]
fn a_pod_bind_without_its_claim_write_is_finished_not_redone() {
    // The Pod patch of a bind succeeded, the claim write did not (or is not seen).
    let mut pods = vec![pod("a", true), pod("b", true)];
    let mut claims = vec![claim("c1", 0)];
    let binds = InFlightBinds {
        pods: [("a".to_string(), ("c1".to_string(), "c1-uid".to_string()))].into(),
        claims: Default::default(),
    };
    binds.overlay(&mut pods, &mut claims);
    let p = plan(&snap(2, pods, claims), names());
    assert_eq!(
        p.ops,
        vec![PodOp::FinishBind {
            pod: "a".into(),
            ip: Some("10.0.0.1".into()),
            claim: "c1".into(),
            claim_uid: "c1-uid".into()
        }]
    );
}

#[test]
fn binds_the_caches_show_are_forgotten() {
    let mut a = pod("a", true);
    a.claim = Some(("c1".into(), "c1-uid".into()));
    let mut c1 = claim("c1", 0);
    c1.phase = Some("Bound".into());
    c1.pod_name = Some("a".into());
    let binds = InFlightBinds {
        pods: [
            ("a".to_string(), ("c1".to_string(), "c1-uid".to_string())),
            ("gone".to_string(), ("c2".to_string(), "c2-uid".to_string())),
        ]
        .into(),
        claims: [
            ("c1-uid".to_string(), "a".to_string()),
            ("c2-uid".to_string(), "gone".to_string()),
        ]
        .into(),
    };
    let mut pods = vec![a.clone()];
    let mut claims = vec![c1.clone()];
    let (seen_pods, seen_claims) = binds.overlay(&mut pods, &mut claims);
    assert_eq!(seen_pods, vec!["a".to_string(), "gone".to_string()]);
    assert_eq!(
        seen_claims,
        vec!["c1-uid".to_string(), "c2-uid".to_string()]
    );
    assert_eq!((pods, claims), (vec![a], vec![c1]), "views unchanged");
}

#[test]
fn terminating_pods_count_as_gone() {
    let mut dying = pod("a", true);
    dying.terminating = true;
    let p = plan(&snap(1, vec![dying], vec![]), names());
    assert_eq!(p.ops, vec![PodOp::Create("new-1".into())]);
}

#[test]
fn claims_bind_fifo_to_ready_idle_pods_with_an_ip() {
    let mut older = pod("older", true);
    older.since = t(-10);
    let starting = pod("starting", false);
    let mut marked = pod("marked", true);
    marked.marked = true;
    let p = plan(
        &snap(
            4,
            vec![pod("newer", true), older, starting, marked],
            vec![claim("second", 5), claim("first", 1), claim("third", 9)],
        ),
        names(),
    );
    let binds: Vec<(String, String)> = p
        .ops
        .iter()
        .filter_map(|o| match o {
            PodOp::Bind { pod, claim, .. } => Some((claim.clone(), pod.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        binds,
        vec![
            ("first".to_string(), "older".to_string()),
            ("second".to_string(), "newer".to_string())
        ],
        "FIFO, the longest-idle Pod first, never a marked or unready Pod"
    );
    assert_eq!(p.queued, 1);
    assert_eq!(p.counts.idle, 0);
    assert_eq!(p.counts.claimed, 2);
}

#[test]
fn a_bound_pod_whose_claim_is_deleted_is_replaced_or_reused() {
    let mut held = pod("a", true);
    held.claim = Some(("gone".into(), "gone-uid".into()));
    let p = plan(&snap(1, vec![held.clone()], vec![]), names());
    assert_eq!(
        p.ops,
        vec![
            PodOp::Delete {
                pod: "a".into(),
                uid: "a-uid".into(),
                resource_version: "1".into()
            },
            PodOp::Create("new-1".into())
        ]
    );
    let mut s = snap(1, vec![held], vec![]);
    s.recycle = RecyclePolicy::Reuse;
    assert_eq!(
        plan(&s, names()).ops,
        vec![PodOp::Unclaim {
            pod: "a".into(),
            resource_version: "1".into()
        }]
    );
}

#[test]
fn a_missing_claim_in_an_unsynced_cache_releases_nothing() {
    let mut held = pod("a", true);
    held.claim = Some(("x".into(), "x-uid".into()));
    let mut s = snap(1, vec![held], vec![]);
    s.claims_synced = false;
    assert_eq!(plan(&s, names()).ops, vec![]);
}

#[test]
fn a_claim_that_does_not_decode_keeps_its_pod() {
    let mut held = pod("a", true);
    held.claim = Some(("x".into(), "x-uid".into()));
    let mut s = snap(2, vec![held, pod("b", true)], vec![claim("y", 0)]);
    s.undecodable_claims = vec!["x-uid".into()];
    let p = plan(&s, names());
    // Kept and still claimed: not released, and not handed to the pending claim.
    assert_eq!(
        p.ops,
        vec![PodOp::Bind {
            pod: "b".into(),
            resource_version: "1".into(),
            claim: "y".into(),
            claim_uid: "y-uid".into(),
            ip: "10.0.0.1".into(),
        }]
    );
    s.undecodable_claims.clear();
    assert!(
        plan(&s, names())
            .ops
            .iter()
            .any(|op| matches!(op, PodOp::Delete { pod, .. } if pod == "a")),
        "once the claim is gone, its sandbox is released"
    );
}

#[test]
fn a_crash_between_the_pod_and_the_claim_write_is_finished() {
    let mut held = pod("a", true);
    held.claim = Some(("c".into(), "c-uid".into()));
    let p = plan(&snap(1, vec![held], vec![claim("c", 0)]), names());
    assert_eq!(
        p.ops,
        vec![PodOp::FinishBind {
            pod: "a".into(),
            ip: Some("10.0.0.1".into()),
            claim: "c".into(),
            claim_uid: "c-uid".into()
        }]
    );
    assert_eq!(p.queued, 0);
}

#[test]
fn a_pod_that_lost_a_binding_race_is_freed() {
    let mut loser = pod("a", true);
    loser.claim = Some(("c".into(), "c-uid".into()));
    let mut c = claim("c", 0);
    c.phase = Some("Bound".into());
    c.pod_name = Some("b".into());
    let p = plan(&snap(2, vec![loser, pod("b", true)], vec![c]), names());
    assert!(p.ops.contains(&PodOp::Unclaim {
        pod: "a".into(),
        resource_version: "1".into()
    }));
}

#[test]
fn a_released_claim_gives_its_pod_back() {
    let mut held = pod("a", true);
    held.claim = Some(("c".into(), "c-uid".into()));
    let mut c = claim("c", 0);
    c.phase = Some("Released".into());
    c.pod_name = Some("a".into());
    let p = plan(&snap(1, vec![held], vec![c]), names());
    assert_eq!(p.ops.len(), 2, "{:?}", p.ops);
    assert!(matches!(p.ops[0], PodOp::Delete { .. }));
}

#[test]
fn excess_pods_go_starting_first_never_claimed_or_marked() {
    let mut held = pod("held", true);
    held.claim = Some(("c".into(), "c-uid".into()));
    let mut c = claim("c", 0);
    c.phase = Some("Bound".into());
    c.pod_name = Some("held".into());
    let mut marked = pod("marked", true);
    marked.marked = true;
    let p = plan(
        &snap(
            2,
            vec![held, marked, pod("idle", true), pod("starting", false)],
            vec![c],
        ),
        names(),
    );
    let deleted: Vec<&str> = p
        .ops
        .iter()
        .filter_map(|o| match o {
            PodOp::Delete { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, vec!["starting", "idle"]);
}

#[test]
fn finished_pods_are_replaced() {
    let mut done = pod("done", false);
    done.finished = true;
    let p = plan(&snap(1, vec![done], vec![]), names());
    assert!(matches!(p.ops[0], PodOp::Delete { .. }));
    assert_eq!(p.ops[1], PodOp::Create("new-1".into()));
}

#[test]
fn pod_names_are_valid_and_vary() {
    let a = pod_name("pool", 1);
    let b = pod_name("pool", 2);
    assert_ne!(a, b);
    assert!(a.starts_with("pool-") && a.len() == 10, "{a}");
    assert!(pod_name(&"x".repeat(80), 7).len() <= 63);
}

#[test]
fn two_pods_naming_one_pending_claim_finish_one_bind_and_free_the_other() {
    // A bind planned from a cache that missed the first: both Pods name the claim, whose
    // status write never came.
    let mut a = pod("a", true);
    let mut b = pod("b", true);
    a.claim = Some(("c".into(), "c-uid".into()));
    b.claim = Some(("c".into(), "c-uid".into()));
    let p = plan(&snap(2, vec![a, b], vec![claim("c", 0)]), names());
    assert_eq!(
        p.ops,
        vec![
            PodOp::FinishBind {
                pod: "a".into(),
                ip: Some("10.0.0.1".into()),
                claim: "c".into(),
                claim_uid: "c-uid".into()
            },
            PodOp::Unclaim {
                pod: "b".into(),
                resource_version: "1".into()
            },
        ]
    );
}

mod fuzzed {
    //! Random pools — Pods in every state, claims in every phase, naming each other or
    //! objects that do not exist — against the planner's safety rules.

    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn arb_pod(i: usize) -> impl Strategy<Value = PodView> {
        (
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            prop::option::weighted(0.5, 0usize..10),
            prop::bool::weighted(0.1),
            0i64..100,
        )
            .prop_map(
                move |(ready, ip, terminating, finished, claim, marked, since)| PodView {
                    name: format!("p{i}"),
                    uid: format!("p{i}-uid"),
                    resource_version: "7".into(),
                    ready,
                    ip: ip.then(|| format!("10.0.0.{i}")),
                    terminating,
                    finished,
                    claim: claim.map(|c| (format!("c{c}"), format!("c{c}-uid"))),
                    marked,
                    since: t(since),
                },
            )
    }

    fn arb_claim(i: usize) -> impl Strategy<Value = ClaimView> {
        (
            prop::option::of(prop_oneof![
                Just("Pending"),
                Just("Bound"),
                Just("Released"),
                Just("Failed")
            ]),
            prop::option::weighted(0.5, 0usize..10),
            0i64..100,
        )
            .prop_map(move |(phase, pod, created)| ClaimView {
                name: format!("c{i}"),
                uid: format!("c{i}-uid"),
                created: t(created),
                phase: phase.map(str::to_string),
                pod_name: pod.map(|p| format!("p{p}")),
            })
    }

    fn arb_snapshot() -> impl Strategy<Value = PoolSnapshot> {
        (
            0usize..8,
            0usize..8,
            -1i32..10,
            any::<bool>(),
            0usize..3,
            any::<bool>(),
            0usize..4,
        )
            .prop_flat_map(
                |(pods, claims, replicas, reuse, in_flight, synced, undecodable)| {
                    let pods: Vec<_> = (0..pods).map(arb_pod).collect();
                    let claims_n = claims;
                    let claims: Vec<_> = (0..claims).map(arb_claim).collect();
                    (pods, claims).prop_map(move |(pods, claims)| PoolSnapshot {
                        replicas,
                        recycle: if reuse {
                            RecyclePolicy::Reuse
                        } else {
                            RecyclePolicy::Replace
                        },
                        pods,
                        in_flight_creates: (0..in_flight).map(|i| format!("f{i}")).collect(),
                        claims,
                        claims_synced: synced,
                        // Claims Pods may name that the cache lacks, found not to decode.
                        undecodable_claims: (claims_n..claims_n + undecodable)
                            .map(|c| format!("c{c}-uid"))
                            .collect(),
                    })
                },
            )
    }

    /// The Pod and the claim an op is about.
    fn subjects(op: &PodOp) -> (Option<&str>, Option<&str>) {
        match op {
            PodOp::Create(name) => (Some(name), None),
            PodOp::Bind { pod, claim, .. } | PodOp::FinishBind { pod, claim, .. } => {
                (Some(pod), Some(claim))
            }
            PodOp::Unclaim { pod, .. } | PodOp::Delete { pod, .. } => (Some(pod), None),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        #[test]
        fn a_plan_binds_each_pod_and_claim_once_and_never_takes_a_held_sandbox(
            s in arb_snapshot()
        ) {
            let p = plan(&s, names());
            let pods: HashMap<&str, &PodView> = s.pods.iter().map(|p| (p.name.as_str(), p)).collect();
            let claims: HashMap<&str, &ClaimView> = s.claims.iter().map(|c| (c.name.as_str(), c)).collect();
            let mut pod_ops: HashMap<&str, usize> = HashMap::new();
            let mut claim_binds: HashMap<&str, usize> = HashMap::new();
            for op in &p.ops {
                let (pod, claim) = subjects(op);
                if let Some(pod) = pod {
                    *pod_ops.entry(pod).or_default() += 1;
                }
                if let Some(claim) = claim {
                    *claim_binds.entry(claim).or_default() += 1;
                }
            }
            // One write per Pod, one bind per claim.
            prop_assert!(pod_ops.values().all(|&n| n == 1), "{:?}", p.ops);
            prop_assert!(claim_binds.values().all(|&n| n == 1), "{:?}", p.ops);
            for op in &p.ops {
                match op {
                    // A bind takes a free, ready Pod for a Pending claim no Pod holds.
                    PodOp::Bind { pod, claim, .. } => {
                        prop_assert!(pods[pod.as_str()].bindable(), "{op:?}");
                        let c = claims[claim.as_str()];
                        prop_assert!(c.pending(), "{op:?}");
                        let held = s.pods.iter().any(|p| {
                            !p.terminating
                                && !p.finished
                                && p.claim.as_ref().is_some_and(|(_, uid)| *uid == c.uid)
                        });
                        prop_assert!(!held, "{op:?} binds a claim a Pod already holds");
                    }
                    // Finishing a bind needs the Pod to name the claim, which is Pending.
                    PodOp::FinishBind { pod, claim, .. } => {
                        let named = pods[pod.as_str()].claim.as_ref().map(|(n, _)| n.as_str());
                        prop_assert_eq!(named, Some(claim.as_str()));
                        prop_assert!(claims[claim.as_str()].pending(), "{op:?}");
                    }
                    // A Pod its claim holds (Bound to it, not released, still running) is
                    // never deleted or freed, and a Pod whose claim may still exist is never
                    // freed unseen.
                    PodOp::Delete { pod, .. } | PodOp::Unclaim { pod, .. } => {
                        let v = pods[pod.as_str()];
                        let serving = v.claim.as_ref().and_then(|(_, uid)| {
                            s.claims.iter().find(|c| &c.uid == uid)
                        }).is_some_and(|c| {
                            c.pod_name.as_deref() == Some(pod.as_str())
                                && c.phase.as_deref() != Some("Released")
                        });
                        prop_assert!(v.finished || !serving, "{op:?} takes a sandbox its claim holds");
                        let orphan_unseen = v.claim.as_ref().is_some_and(|(_, uid)| {
                            !s.claims.iter().any(|c| &c.uid == uid)
                        }) && !s.claims_synced && !v.finished;
                        prop_assert!(!orphan_unseen, "{op:?} before the claim cache synced");
                        let undecodable = v.claim.as_ref().is_some_and(|(_, uid)| {
                            s.undecodable_claims.contains(uid)
                        }) && !v.finished;
                        prop_assert!(!undecodable, "{op:?} takes the sandbox of a claim that exists");
                    }
                    PodOp::Create(_) => {}
                }
            }
            // Never more Pods than asked for are created, and the counts add up.
            let wanted = usize::try_from(s.replicas.max(0)).unwrap_or(0);
            let creates = p.ops.iter().filter(|o| matches!(o, PodOp::Create(_))).count();
            let deleted: Vec<&str> = p.ops.iter().filter_map(|o| match o {
                PodOp::Delete { pod, .. } => Some(pod.as_str()),
                _ => None,
            }).collect();
            let kept = s.pods.iter().filter(|v| !v.terminating && !deleted.contains(&v.name.as_str())).count()
                + s.in_flight_creates.len();
            prop_assert!(creates == 0 || kept + creates == wanted, "{:?}", p.ops);
            prop_assert_eq!(usize::try_from(p.counts.replicas).unwrap_or(0), kept + creates);
            prop_assert!(p.counts.replicas >= 0 && p.counts.idle >= 0 && p.counts.claimed >= 0);
            prop_assert!(p.counts.idle + p.counts.claimed <= p.counts.replicas, "{:?}", p.counts);
        }
    }
}

/// A Pool the autoscaler no longer sizes (its member left its scaling group) has its
/// published autoscaling status removed: a status change, although nothing else moved.
#[test]
fn an_autoscaling_status_with_no_autoscaler_left_is_a_change() {
    let counts = Counts::default();
    let current = crate::api::sandbox::SandboxPoolStatus {
        auto_scaling: Some(crate::api::sandbox::PoolAutoScalingStatus::default()),
        replicas: counts.replicas,
        ready_replicas: counts.ready,
        idle_replicas: counts.idle,
        claimed_replicas: counts.claimed,
        ..Default::default()
    };
    let same = current.auto_scaling.clone();
    assert!(!status_changed(&current, None, counts, &[], same.as_ref()));
    assert!(status_changed(&current, None, counts, &[], None));
    let none = crate::api::sandbox::SandboxPoolStatus {
        auto_scaling: None,
        ..current
    };
    assert!(!status_changed(&none, None, counts, &[], None));
}
