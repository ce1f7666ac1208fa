//! One action's outcome (its status entry, the ops that get it there, and the facts the
//! conditions are made of), and whose marks an object carries.

use super::plan::Op;
use super::snapshot::{Marks, TargetKey};
use crate::api::scaling::ActionStatus;

/// One action's outcome: its status entry and the ops that get it there.
pub(super) struct Outcome {
    pub(super) status: ActionStatus,
    pub(super) ops: Vec<Op>,
    /// Condition-level facts.
    pub(super) conflict: Option<String>,
    pub(super) drift: Option<(bool, String)>,
    pub(super) warning: Option<(&'static str, String)>,
}

impl Outcome {
    pub(super) fn new(
        action: &str,
        key: &TargetKey,
        state: &str,
        message: impl Into<String>,
    ) -> Self {
        Outcome {
            status: ActionStatus {
                name: action.to_string(),
                target: key.to_string(),
                state: state.to_string(),
                via: None,
                applied_hash: None,
                message: Some(message.into()),
                reapplies: None,
                original_replicas: None,
            },
            ops: Vec::new(),
            conflict: None,
            drift: None,
            warning: None,
        }
    }
}

pub(super) fn is_ours(marks: &Marks, uid: &str) -> bool {
    marks.owner.as_ref().is_some_and(|o| o.uid == uid)
}

pub(super) fn is_ours_for(marks: &Marks, uid: &str, action: &str) -> bool {
    marks
        .owner
        .as_ref()
        .is_some_and(|o| o.uid == uid && o.action == action)
}
