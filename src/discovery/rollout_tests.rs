use super::*;
use crate::discovery::view::Cond;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn at(minute: u32) -> Timestamp {
    ts(&format!("2026-03-01T10:{minute:02}:00Z"))
}

fn image(from: &str, to: &str) -> ImageChange {
    ImageChange {
        container: "app".into(),
        from: Some(from.into()),
        to: Some(to.into()),
    }
}

fn rec(name: &str, revision: i64, minute: u32, images: Vec<ImageChange>) -> RevView {
    RevView {
        name: name.into(),
        workload: "web".into(),
        revision,
        observed_at: at(minute),
        reason: None,
        foreign: None,
        rollout: true,
        images,
        outcome: None,
        summary: String::new(),
        changed_by: None,
        autoscaler_move: false,
    }
}

/// `web` at `revision`, 3 replicas of which `available` are available, all updated.
fn web(revision: i64, available: i32, conditions: Vec<Cond>) -> DeploymentView {
    DeploymentView {
        namespace: "shop".into(),
        name: "web".into(),
        generation: 4,
        observed_generation: 4,
        replicas: 3,
        updated: 3,
        ready: available,
        available,
        revision: Some(revision),
        conditions,
        ..Default::default()
    }
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Cond {
    Cond {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        updated: None,
    }
}

#[test]
fn a_rollout_completes_when_its_revision_is_all_available() {
    let r = rec("web-r2", 2, 0, vec![image("web:1", "web:2")]);
    let running = web(
        2,
        1,
        vec![cond("Progressing", "True", "ReplicaSetUpdated", "")],
    );
    assert_eq!(outcome(&r, None, &running, at(1)), None);
    let done = web(
        2,
        3,
        vec![cond("Progressing", "True", "NewReplicaSetAvailable", "")],
    );
    assert_eq!(
        outcome(&r, None, &done, ts("2026-03-01T10:01:12Z")),
        Some(Outcome {
            outcome: outcomes::COMPLETE,
            message: "3 of 3 replicas updated and available".into(),
            took: "1m12s".into(),
        })
    );
    // Not yet observed by the Deployment controller: not complete, whatever the counts.
    let unobserved = DeploymentView {
        observed_generation: 3,
        ..done.clone()
    };
    assert_eq!(outcome(&r, None, &unobserved, at(2)), None);
}

#[test]
fn a_rollout_fails_on_the_progress_deadline_or_a_replica_failure() {
    let r = rec("web-r2", 2, 0, vec![image("web:1", "web:2")]);
    let stuck = web(
        2,
        0,
        vec![cond(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            "ReplicaSet \"web-7c\" has timed out progressing.",
        )],
    );
    let got = outcome(&r, None, &stuck, at(10)).expect("an outcome");
    assert_eq!(got.outcome, outcomes::FAILED);
    assert_eq!(
        got.message,
        "ProgressDeadlineExceeded: ReplicaSet \"web-7c\" has timed out progressing."
    );
    assert_eq!(got.took, "10m0s");
    let quota = web(
        2,
        0,
        vec![cond(
            "ReplicaFailure",
            "True",
            "FailedCreate",
            "exceeded quota",
        )],
    );
    assert_eq!(
        outcome(&r, None, &quota, at(1)).map(|o| (o.outcome, o.message)),
        Some((outcomes::FAILED, "FailedCreate: exceeded quota".to_string()))
    );
}

/// A rollback to a ReplicaSet that still exists: the Deployment controller writes the
/// revision first, with the failed rollout's conditions and generation still observed, and
/// then, having observed the rollback, keeps the failed rollout's `ProgressDeadlineExceeded`
/// until the rollback makes progress. The rollback is judged on its own rollout.
#[test]
fn a_rollback_after_a_failed_rollout_is_not_judged_on_its_conditions() {
    let r = rec("web-r3", 3, 10, vec![image("web:2", "web:1")]);
    let reported = |minute| {
        let mut c = cond(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            "ReplicaSet \"web-7c\" has timed out progressing.",
        );
        c.updated = Some(at(minute));
        c
    };
    let mut quota = cond("ReplicaFailure", "True", "FailedCreate", "exceeded quota");
    quota.updated = Some(at(8));
    let mut revised = web(3, 1, vec![reported(9), quota.clone()]);
    revised.generation = 5;
    assert_eq!(
        outcome(&r, None, &revised, at(11)),
        None,
        "not observed yet"
    );
    revised.observed_generation = 5;
    assert_eq!(
        outcome(&r, None, &revised, at(11)),
        None,
        "observed, with the failed rollout's conditions"
    );
    let mut observed = web(
        3,
        3,
        vec![cond("Progressing", "True", "NewReplicaSetAvailable", "")],
    );
    observed.generation = 5;
    observed.observed_generation = 5;
    assert_eq!(
        outcome(&r, None, &observed, at(2)).map(|o| o.outcome),
        Some(outcomes::COMPLETE)
    );
    // And a rollback that fails in its turn fails.
    let mut stuck = web(3, 0, vec![reported(20)]);
    stuck.generation = 5;
    stuck.observed_generation = 5;
    assert_eq!(
        outcome(&r, None, &stuck, at(21)).map(|o| o.outcome),
        Some(outcomes::FAILED)
    );
    // In the second the rollback began: an earlier deadline's, a refused Pod's own.
    let mut same_second = web(3, 0, vec![reported(10)]);
    same_second.generation = 5;
    same_second.observed_generation = 5;
    assert_eq!(outcome(&r, None, &same_second, at(21)), None);
    let mut quota_now = cond("ReplicaFailure", "True", "FailedCreate", "exceeded quota");
    quota_now.updated = Some(at(10));
    same_second.conditions = vec![quota_now];
    assert_eq!(
        outcome(&r, None, &same_second, at(21)).map(|o| o.outcome),
        Some(outcomes::FAILED)
    );
    let mut refused = web(3, 0, vec![quota]);
    refused.generation = 5;
    refused.observed_generation = 5;
    assert_eq!(outcome(&r, None, &refused, at(21)), None);
    // The rollout began when its template was written, which may be before it was recorded
    // (the manager down meanwhile): a failure between the two is its own.
    refused.template_changed = Some(at(7));
    assert_eq!(
        outcome(&r, None, &refused, at(21)).map(|o| o.outcome),
        Some(outcomes::FAILED)
    );
}

#[test]
fn a_newer_change_supersedes_or_rolls_back() {
    let r = rec("web-r2", 2, 0, vec![image("web:1", "web:2")]);
    let any = web(3, 0, vec![]);
    let newer = rec("web-r3", 3, 1, vec![image("web:2", "web:3")]);
    assert_eq!(
        outcome(&r, Some(&newer), &any, at(1)).map(|o| (o.outcome, o.message)),
        Some((
            outcomes::SUPERSEDED,
            "superseded by web-r3 (revision 3)".to_string()
        ))
    );
    let undo = rec("web-r3", 3, 1, vec![image("web:2", "web:1")]);
    assert_eq!(
        outcome(&r, Some(&undo), &any, at(1)).map(|o| o.outcome),
        Some(outcomes::ROLLED_BACK)
    );
    // A change of references only (no images) is superseded, never rolled back.
    let refs = rec("web-r2", 2, 0, vec![]);
    assert_eq!(
        outcome(&refs, Some(&rec("web-r3", 3, 1, vec![])), &any, at(1)).map(|o| o.outcome),
        Some(outcomes::SUPERSEDED)
    );
}

#[test]
fn a_deployment_already_past_the_recorded_revision_waits_for_the_next_record() {
    let r = rec("web-r2", 2, 0, vec![image("web:1", "web:2")]);
    assert_eq!(outcome(&r, None, &web(3, 3, vec![]), at(1)), None);
}

#[test]
fn settle_judges_only_open_rollouts_of_the_workload_in_order() {
    let done = RevView {
        outcome: Some(outcomes::COMPLETE.into()),
        ..rec("web-r1", 1, 0, vec![image("web:0", "web:1")])
    };
    let replicas_only = RevView {
        rollout: false,
        ..rec("web-r2-replicas", 2, 2, vec![])
    };
    let foreign = RevView {
        foreign: Some("kubectl".into()),
        ..rec("web-r9", 9, 3, vec![])
    };
    let other = RevView {
        workload: "api".into(),
        ..rec("api-r2", 2, 1, vec![])
    };
    let records = [
        rec("web-r3", 3, 5, vec![image("web:2", "web:1")]),
        rec("web-r2", 2, 1, vec![image("web:1", "web:2")]),
        done,
        replicas_only,
        foreign,
        other,
    ];
    let d = web(
        3,
        3,
        vec![cond("Progressing", "True", "NewReplicaSetAvailable", "")],
    );
    let got: Vec<(String, &str)> = settle(&records, &d, at(6))
        .into_iter()
        .map(|(name, o)| (name, o.outcome))
        .collect();
    assert_eq!(
        got,
        [
            ("web-r2".to_string(), outcomes::ROLLED_BACK),
            ("web-r3".to_string(), outcomes::COMPLETE),
        ]
    );
}

#[test]
fn durations_read_like_kubectl_ages() {
    let s = SignedDuration::from_secs;
    assert_eq!(human(s(0)), "0s");
    assert_eq!(human(s(59)), "59s");
    assert_eq!(human(s(60)), "1m0s");
    assert_eq!(human(s(3599)), "59m59s");
    assert_eq!(human(s(7500)), "2h5m");
    assert_eq!(human(s(-5)), "0s");
}
