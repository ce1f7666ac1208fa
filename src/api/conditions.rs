//! Standard Kubernetes conditions: the names Moonin uses and the rules for updating them.
//!
//! Two rules make status writes cheap and honest: `lastTransitionTime` moves only when a
//! condition's `status` changes, and two condition lists are compared ignoring it, so a
//! reconcile that concludes the same thing as last time writes nothing.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types.
pub mod types {
    /// The object is reconciled and doing what its spec asks.
    pub const READY: &str = "Ready";
    /// kstatus: the controller is working towards the spec.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: the controller cannot make progress without a change to the spec.
    pub const STALLED: &str = "Stalled";
}

/// Reasons shared by every kind.
pub mod reasons {
    /// The object is reconciled.
    pub const RECONCILED: &str = "Reconciled";
    /// The spec is invalid in a way admission could not catch.
    pub const INVALID_SPEC: &str = "InvalidSpec";
}

/// Whether the condition of this type currently has this reason.
pub fn has_reason(conditions: &[Condition], type_: &str, reason: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.reason == reason)
}

/// `"True"` / `"False"` as Kubernetes spells them.
pub fn status_str(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// What a controller concludes about one condition; the timestamp is filled in by [`merge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Condition type.
    pub type_: &'static str,
    /// Whether the condition holds.
    pub status: bool,
    /// A CamelCase reason.
    pub reason: String,
    /// A human message.
    pub message: String,
}

impl Desired {
    /// A condition with the given type, status, reason and message.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Builds the next condition list from the current one and what the controller concludes.
///
/// Conditions not mentioned in `desired` are kept as they are (another writer may own
/// them); `lastTransitionTime` is kept unless the status flipped.
pub fn merge(
    current: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut next: Vec<Condition> = current.to_vec();
    for want in desired {
        let status = status_str(want.status).to_string();
        let existing = next.iter_mut().find(|c| c.type_ == want.type_);
        match existing {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Time(now);
                }
                c.status = status;
                c.reason = want.reason.clone();
                c.message = want.message.clone();
                c.observed_generation = generation;
            }
            None => next.push(Condition {
                type_: want.type_.to_string(),
                status,
                reason: want.reason.clone(),
                message: want.message.clone(),
                observed_generation: generation,
                last_transition_time: Time(now),
            }),
        }
    }
    next
}

/// True when the lists say the same thing, whatever their timestamps.
pub fn equal_ignoring_time(a: &[Condition], b: &[Condition]) -> bool {
    let key = |c: &Condition| {
        (
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// Whether the condition of this type is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether two statuses say the same thing, whatever their conditions' timestamps.
pub fn same_status<S: Clone + PartialEq>(
    a: &S,
    b: &S,
    conditions_of: fn(&mut S) -> &mut Vec<Condition>,
) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    let ca = std::mem::take(conditions_of(&mut a));
    let cb = std::mem::take(conditions_of(&mut b));
    a == b && equal_ignoring_time(&ca, &cb)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T01:00:00Z");
        let first = merge(
            &[],
            &[Desired::new(types::READY, false, "Waiting", "a")],
            Some(1),
            t0,
        );
        let same = merge(
            &first,
            &[Desired::new(types::READY, false, "Waiting", "b")],
            Some(1),
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0));
        assert_eq!(same[0].message, "b");
        let flipped = merge(
            &same,
            &[Desired::new(types::READY, true, "Ok", "c")],
            Some(2),
            t1,
        );
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        assert_eq!(flipped[0].observed_generation, Some(2));
    }

    #[test]
    fn comparison_ignores_timestamps_and_order() {
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-02-01T00:00:00Z");
        let want = [
            Desired::new(types::READY, true, "Ok", ""),
            Desired::new(types::STALLED, false, "Ok", ""),
        ];
        let a = merge(&[], &want, Some(1), t0);
        let mut b = merge(&[], &want, Some(1), t1);
        b.reverse();
        assert!(equal_ignoring_time(&a, &b));
        let c = merge(
            &a,
            &[Desired::new(types::READY, false, "No", "")],
            Some(1),
            t0,
        );
        assert!(!equal_ignoring_time(&a, &c));
        assert!(is_true(&a, types::READY));
        assert!(!is_true(&c, types::READY));
    }

    #[test]
    fn unmentioned_conditions_are_kept() {
        let t0 = at("2026-01-01T00:00:00Z");
        let a = merge(&[], &[Desired::new("Other", true, "X", "")], None, t0);
        let b = merge(&a, &[Desired::new(types::READY, true, "Ok", "")], None, t0);
        assert_eq!(b.len(), 2);
    }
}
