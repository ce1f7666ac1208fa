//! The sweep's writes: the restores of overrides whose template is gone, target by target,
//! each Event on the object written.

use super::{CommitError, Writer};
use crate::scaling::decide::{EventNote, Op};

impl Writer {
    /// Performs sweep ops (owner template gone), target by target; Events go to the object
    /// written. A refused op stops its target's ops until the next sweep: the next may
    /// delete the only record of what the refused one restores.
    pub async fn sweep(&self, targets: &[Vec<Op>]) -> Result<Swept, CommitError> {
        let mut swept = Swept::default();
        for ops in targets {
            for op in ops {
                match self.write(op).await? {
                    Ok(()) => {
                        swept.written += 1;
                        if let Some(note) = &op.event {
                            self.publish_swept(op, note).await;
                        }
                    }
                    Err(msg) => {
                        tracing::warn!(object = %op.name, error = %msg, "sweep write refused");
                        swept.refused += 1;
                        break;
                    }
                }
            }
        }
        Ok(swept)
    }

    /// The Event of a swept write, on the object written.
    async fn publish_swept(&self, op: &Op, note: &EventNote) {
        let kind = op.write.object_kind();
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(kind.api_version().to_string()),
            kind: Some(kind.as_str().to_string()),
            namespace: Some(op.namespace.clone()),
            name: Some(op.name.clone()),
            ..Default::default()
        };
        let mut note = note.clone();
        note.note = format!("{} (its template no longer exists)", note.note);
        self.publish(&note, &regarding).await;
    }
}

/// What one sweep did: writes made, and targets stopped by a refusal.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Writes the API server accepted.
    pub written: usize,
    /// Targets whose ops stopped at a refused write.
    pub refused: usize,
}
