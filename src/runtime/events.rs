//! Publishing Events: one publisher per controller (its `reportingController` name), notes
//! kept within the API server's limit, and a refused Event logged rather than failing the
//! work it reports on (Events are published after the writes they describe succeeded).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

/// The API server keeps at most 1 KiB of an Event's note.
pub const NOTE_MAX: usize = 1024;

/// Publishes the Events of one controller. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    recorder: Recorder,
}

impl Publisher {
    /// A publisher reporting as `controller` (e.g. `moonin-sandbox`).
    pub fn new(client: Client, controller: &str) -> Self {
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: controller.into(),
                    instance: None,
                },
            ),
        }
    }

    /// Publishes one Event about `regarding`; `action` defaults to the reason.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: Option<&str>,
        note: &str,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(truncate(note, NOTE_MAX)),
            action: action.unwrap_or(reason).to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %super::errors::brief(&e), %reason, "could not publish an Event");
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary, with `...` when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate(&"é".repeat(1000), NOTE_MAX);
        assert!(cut.len() <= NOTE_MAX, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
