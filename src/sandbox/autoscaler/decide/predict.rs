//! Predictive warm-up (phase 3a of the module docs of [`super`]), when the group has
//! `scaleUpPolicy.predictive`: the claim history is kept (a closed slot's count blended
//! into it, the Pod start time measured again), and, while predictions are enabled, the
//! Pods the next claims need are asked for one Pod start time ahead of them.
//!
//! *Policy*: the ready Pods cover, but one time in ten ([`forecast::SHORTFALL`]), the
//! claims expected over the lead (the measured Pod start time) plus the cooldown — the
//! longest a consumed Pod can wait for its replacement to be asked for and be Ready. The
//! expected rate is the higher of the slot of now and the slot one lead ahead, so the pool
//! grows a lead before a busy slot and does not shrink before the busy slot is over.

use jiff::SignedDuration;

use super::super::forecast::{self, Geometry, Slot};
use super::super::snapshot::ForecastInput;
use super::{Cycle, Policy, PoolEvent, plus, reasons};
use crate::api::sandbox::{ClaimHistory, Prediction};

/// What the prediction asks of this cycle.
#[derive(Debug, Default)]
pub(super) struct Forecast {
    /// Idle or coming Pods (beyond the queued claims) the prediction keeps; 0 when off.
    pub ready: i64,
}

impl Cycle<'_> {
    /// Phase 3a: keeps the claim history and, while predictions are enabled, says how many
    /// Pods to keep ready. Records the history to write and the next slot boundaries.
    pub(super) fn predict(&mut self, p: &Policy) -> Forecast {
        let Some(input) = &self.snap.forecast else {
            self.status.prediction = None;
            return Forecast::default();
        };
        let geometry = match &input.geometry {
            Ok(g) => g,
            Err(why) => {
                self.unavailable(why);
                return Forecast::default();
            }
        };
        let history = self.keep_history(geometry, input);
        if !input.enabled {
            self.status.prediction = None;
            return Forecast::default();
        }
        let lead = SignedDuration::from_secs(i64::from(history.pod_start_seconds.unwrap_or(0)));
        let now_slot = geometry.slot_at(self.now);
        let lead_slot = geometry.slot_at(plus(self.now, lead));
        let rate = forecast::per_slot(&history.expected, now_slot.index)
            .max(forecast::per_slot(&history.expected, lead_slot.index));
        let slot_secs = lead_slot
            .end
            .duration_since(lead_slot.start)
            .as_secs_f64()
            .max(1.0);
        let horizon = (lead + p.cooldown).as_secs_f64();
        let ready = forecast::ready_for(rate * horizon / slot_secs);
        self.requeue.at(now_slot.end);
        self.requeue
            .at(lead_slot.end.checked_sub(lead).unwrap_or(lead_slot.end));
        let expected = forecast::per_slot(&history.expected, lead_slot.index).round();
        #[allow(clippy::cast_possible_truncation)]
        let expected_claims = expected.min(f64::from(i32::MAX)) as i32;
        let lead_secs = i32::try_from(lead.as_secs()).unwrap_or(i32::MAX);
        self.status.prediction = Some(Prediction {
            expected_claims,
            ready_pods: super::to_i32(ready),
            lead_seconds: lead_secs,
            message: format!(
                "Predicted: {expected_claims} claims expected in the next {}; {ready} Pod(s) kept ready ahead of them (Pods start in {lead_secs}s)",
                forecast::span(geometry.slot_secs)
            ),
        });
        Forecast { ready }
    }

    /// The history after this cycle: continued, or started again (none yet, or built with
    /// another geometry); a closed slot's claims are blended into it. Set to be written
    /// when it changed.
    fn keep_history(&mut self, g: &Geometry, input: &ForecastInput) -> ClaimHistory {
        let starts = forecast::start_p90(&input.starts);
        let mut history = match &input.history {
            Some(h) if g.built(h) => h.clone(),
            _ => g.new_history(self.now, starts),
        };
        let open: Slot = g.slot_at(history.open_slot_start.0);
        if self.now >= open.end {
            let claims: f64 = input
                .arrivals
                .iter()
                .filter(|a| open.start <= a.at && a.at < open.end)
                .map(|a| a.share)
                .sum();
            if let Some(e) = history.expected.get_mut(open.index) {
                *e = forecast::blend(*e, claims);
            }
            history.pod_start_seconds = starts.or(history.pod_start_seconds);
            history.open_slot_start.0 = g.slot_at(self.now).start;
        }
        self.requeue.at(g.slot_at(history.open_slot_start.0).end);
        if history.pod_start_seconds.is_none() {
            history.pod_start_seconds = starts;
        }
        if input.history.as_ref() != Some(&history) {
            self.history = Some(history.clone());
        }
        history
    }

    /// An unknown time zone: the prediction says why, once with a Warning Event.
    fn unavailable(&mut self, why: &str) {
        let prediction = Prediction {
            expected_claims: 0,
            ready_pods: 0,
            lead_seconds: 0,
            message: why.to_string(),
        };
        if self.prev().prediction.as_ref() != Some(&prediction) {
            self.events.push(PoolEvent::warning(
                reasons::PREDICTION_UNAVAILABLE,
                why.to_string(),
            ));
        }
        self.status.prediction = Some(prediction);
    }
}

#[cfg(test)]
#[path = "predict_tests.rs"]
mod tests;
