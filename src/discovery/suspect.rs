//! "What changed before it broke": the suspect change of a failing Deployment is its newest
//! revision record observed within [`WINDOW`] before now that is not only an autoscaler's
//! move ([`super::revision::autoscaler_move`]: the autoscaler reacts to load, often to the
//! very failure a change before it caused). Each failure signal of the
//! Deployment names it, with what changed and who changed it, so the inventory entry and
//! the Warning Event carry it:
//! `Unavailable: MinimumReplicasUnavailable; after web-r4-0c1d2e3f4a (image app: 1.4.2 → 1.4.3 by argocd-controller)`.
//! Pure; the detail holds no time, so it stays byte-identical while it holds.

use jiff::{SignedDuration, Timestamp};

use super::{revision::RevView, signals};

/// How far back a change may be and still be suspected.
pub const WINDOW: SignedDuration = SignedDuration::from_hours(1);

/// The newest record of `workload` (Moonin's own, not an autoscaler's move) observed
/// within [`WINDOW`] before `now`.
pub fn suspect<'a>(workload: &str, records: &'a [RevView], now: Timestamp) -> Option<&'a RevView> {
    records
        .iter()
        .filter(|r| r.workload == workload && r.foreign.is_none() && !r.autoscaler_move)
        .filter(|r| r.observed_at <= now && now.duration_since(r.observed_at) <= WINDOW)
        .max_by(|a, b| (a.observed_at, &a.name).cmp(&(b.observed_at, &b.name)))
}

/// `<record> (<what changed> by <who>)`.
pub fn describe(r: &RevView) -> String {
    match &r.changed_by {
        Some(by) => format!("{} ({} by {by})", r.name, r.summary),
        None => format!("{} ({})", r.name, r.summary),
    }
}

/// `signals` with every failure signal naming `suspect`; hazards are left as they are.
pub fn annotate(signals: Vec<String>, suspect: Option<&RevView>) -> Vec<String> {
    let Some(r) = suspect else { return signals };
    let after = format!("after {}", describe(r));
    signals
        .into_iter()
        .map(|s| {
            if !signals::is_failure(&s) {
                s
            } else if s.contains(": ") {
                format!("{s}; {after}")
            } else {
                format!("{s}: {after}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minute * 60).unwrap()
    }

    fn rec(name: &str, workload: &str, minute: i64) -> RevView {
        RevView {
            name: name.into(),
            workload: workload.into(),
            revision: 1,
            observed_at: at(minute),
            reason: None,
            foreign: None,
            rollout: true,
            images: Vec::new(),
            outcome: None,
            summary: "image app: 1.4.2 → 1.4.3".into(),
            changed_by: Some("argocd-controller".into()),
            autoscaler_move: false,
        }
    }

    #[test]
    fn the_newest_change_of_the_workload_within_the_window_is_suspected() {
        let records = [
            rec("web-r3", "web", 0),
            rec("web-r4", "web", 30),
            rec("api-r9", "api", 50),
            RevView {
                foreign: Some("kubectl".into()),
                ..rec("web-r9", "web", 55)
            },
            // The HPA scaled after the image change: a reaction, not the suspect.
            RevView {
                rollout: false,
                summary: "replicas 3 → 6".into(),
                changed_by: Some("kube-controller-manager".into()),
                autoscaler_move: true,
                ..rec("web-r4-b", "web", 40)
            },
        ];
        assert_eq!(
            suspect("web", &records, at(60)).map(|r| r.name.as_str()),
            Some("web-r4")
        );
        // An hour and a half later, nothing is suspected any more.
        assert_eq!(suspect("web", &records, at(120)), None);
        // Nor is a change "after" now (a clock behind the record's).
        assert_eq!(suspect("web", &records[..1], at(-1)), None);
    }

    #[test]
    fn failure_signals_name_the_change_and_hazards_do_not() {
        let r = rec("web-r4", "web", 30);
        let got = annotate(
            vec![
                "Unavailable: MinimumReplicasUnavailable".into(),
                "ProgressDeadlineExceeded".into(),
                "TwoAutoscalers: HPA/a, HPA/b".into(),
            ],
            Some(&r),
        );
        assert_eq!(
            got,
            [
                "Unavailable: MinimumReplicasUnavailable; after web-r4 (image app: 1.4.2 → 1.4.3 by argocd-controller)",
                "ProgressDeadlineExceeded: after web-r4 (image app: 1.4.2 → 1.4.3 by argocd-controller)",
                "TwoAutoscalers: HPA/a, HPA/b",
            ]
        );
        assert_eq!(signals::reason_of(&got[1]), "ProgressDeadlineExceeded");
        assert_eq!(annotate(vec!["Unavailable".into()], None), ["Unavailable"]);
    }
}
