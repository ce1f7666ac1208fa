//! The scaling controller's requests in flight, and which of them go first: a window's
//! writes before the statuses and Events that report them.

use std::collections::BTreeMap;

use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio::time::Instant;

use crate::scaling::decide::EventNote;

/// Requests one manager's scaling controller has in flight at most.
pub const MAX_IN_FLIGHT: usize = 32;

/// How long a report waits at most for the writes and holds before it: beyond it, it takes a
/// slot in arrival order like a write. Writes that never stop (a stream of templates each
/// writing, or each holding between two writes) would otherwise starve every report.
const REPORT_WAITS_AT_MOST: std::time::Duration = std::time::Duration::from_secs(30);

/// How long after its hold lapsed a template's held Events are dropped.
const FORGOTTEN_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The scaling controller's requests in flight: at most [`MAX_IN_FLIGHT`], in two classes.
/// A write of a workload or an autoscaler takes a slot in arrival order; a report (a
/// template's status, an Event) takes one only when no write is pending (waiting for a slot or
/// in flight) and no template is [held](Permits::hold) between two of its writes, or once it
/// has waited [`REPORT_WAITS_AT_MOST`]. At an edge
/// the statuses and Events then go once the windows' writes are answered, instead of among
/// the last of them, whose latency is the edge's; the statuses and warnings of templates
/// with nothing to write (a target that does not exist) go after the other windows' writes
/// too.
pub struct Permits {
    slots: Semaphore,
    gate: watch::Sender<Gate>,
}

/// What reports wait for.
#[derive(Default)]
struct Gate {
    /// Writes pending: each counted from when it asks for a slot until it has none.
    writes: usize,
    /// Templates between two of their writes at an edge (their autoscalers restored, their
    /// Deployments waiting for the autoscalers' controller), each until when at the latest,
    /// with the Events of what they wrote so far.
    held: BTreeMap<String, (Instant, Vec<EventNote>)>,
}

impl Gate {
    /// `None` when reports may go at `now`; otherwise until when at the latest they wait
    /// (`None` inside: until the writes are answered).
    fn closed(&self, now: Instant) -> Option<Option<Instant>> {
        if self.writes > 0 {
            return Some(None);
        }
        self.held
            .values()
            .map(|(until, _)| *until)
            .filter(|until| *until > now)
            .max()
            .map(Some)
    }
}

/// One write pending: counted from when it asks for a slot until it has none (its
/// request answered, or the write given up).
struct Pending<'a>(&'a watch::Sender<Gate>);

impl<'a> Pending<'a> {
    fn new(gate: &'a watch::Sender<Gate>) -> Self {
        gate.send_if_modified(|g| {
            g.writes += 1;
            false
        });
        Self(gate)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // Reports wait for zero only: the last pending write wakes them, no other count does.
        self.0.send_if_modified(|g| {
            g.writes -= 1;
            g.writes == 0
        });
    }
}

/// A write's slot, held for as long as its request is in flight.
pub struct WriteSlot<'a> {
    // Dropped in this order: the slot is free before the write stops counting as pending,
    // so a report woken by the count finds it.
    _slot: SemaphorePermit<'a>,
    _pending: Pending<'a>,
}

impl Permits {
    /// `n` slots.
    pub fn new(n: usize) -> Self {
        Self {
            slots: Semaphore::new(n),
            gate: watch::Sender::new(Gate::default()),
        }
    }

    /// A slot for a write, in arrival order.
    pub async fn write(&self) -> Option<WriteSlot<'_>> {
        let pending = Pending::new(&self.gate);
        let slot = self.slots.acquire().await.ok()?;
        Some(WriteSlot {
            _slot: slot,
            _pending: pending,
        })
    }

    /// Holds back every report until `template` is [released](Self::release), or until
    /// `until` at the latest: its next writes are due as soon as the autoscalers' controller
    /// acts on the ones it made, and the reports would go between them. `notes` (the Events
    /// of what it wrote so far) wait with it, to go with those of its next writes.
    pub fn hold(&self, template: String, until: Instant, notes: Vec<EventNote>) {
        let now = Instant::now();
        self.gate.send_if_modified(|g| {
            // A lapsed hold keeps its Events for the template's next plan, unless that never
            // came (the template gone, the leadership lost).
            g.held.retain(|_, (u, _)| *u + FORGOTTEN_AFTER > now);
            g.held.insert(template, (until, notes));
            false
        });
    }

    /// Keeps `notes` (the Events of writes a plan made before it stopped: a conflict, a
    /// status write refused) for `template`'s next plan to publish with its own, without
    /// holding any report back: they join its hold's, if it has one, and its hold keeps its
    /// time.
    pub fn keep(&self, template: &str, notes: Vec<EventNote>) {
        if notes.is_empty() {
            return;
        }
        let now = Instant::now();
        self.gate.send_if_modified(|g| {
            g.held
                .entry(template.to_string())
                .or_insert_with(|| (now, Vec::new()))
                .1
                .extend(notes);
            false
        });
    }

    /// Ends `template`'s hold, if it has one: the Events it held, to be published with its
    /// own.
    pub fn release(&self, template: &str) -> Vec<EventNote> {
        let mut notes = Vec::new();
        self.gate
            .send_if_modified(|g| match g.held.remove(template) {
                Some((_, held)) => {
                    notes = held;
                    true
                }
                None => false,
            });
        notes
    }

    /// A slot for a report, once no write is pending and no template is held, or once it
    /// has waited [`REPORT_WAITS_AT_MOST`]. A slot that comes to a report while a write has
    /// started waiting is passed on at once (the semaphore serves in arrival order, and the
    /// write may have queued behind this report).
    pub async fn report(&self) -> Option<SemaphorePermit<'_>> {
        self.report_by(Instant::now() + REPORT_WAITS_AT_MOST).await
    }

    /// [`Self::report`], waiting for the writes and holds until `deadline` at most.
    async fn report_by(&self, deadline: Instant) -> Option<SemaphorePermit<'_>> {
        let mut gate = self.gate.subscribe();
        let open = |gate: &mut watch::Receiver<Gate>| {
            let now = Instant::now();
            match gate.borrow_and_update().closed(now) {
                _ if now >= deadline => None,
                None => None,
                Some(until) => Some(until.map_or(deadline, |u| u.min(deadline))),
            }
        };
        loop {
            while let Some(until) = open(&mut gate) {
                // The sender lives as long as `self`: `changed` fails only with it.
                if let Ok(changed) = tokio::time::timeout_at(until, gate.changed()).await {
                    changed.ok()?;
                }
            }
            let slot = self.slots.acquire().await.ok()?;
            if open(&mut gate).is_none() {
                return Some(slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_takes_a_freed_slot_before_a_report_that_asked_earlier() {
        let permits = std::sync::Arc::new(Permits::new(1));
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        // The only slot is a report's: no write is pending.
        let held = permits.report().await;
        let take = |report: bool| {
            let (permits, order) = (permits.clone(), order.clone());
            tokio::spawn(async move {
                if report {
                    let _slot = permits.report().await;
                    order.lock().expect("order").push("report");
                } else {
                    let _slot = permits.write().await;
                    order.lock().expect("order").push("write");
                }
            })
        };
        let report = take(true);
        // The report passes the gate (no write is pending) and queues for the held slot.
        tokio::task::yield_now().await;
        let write = take(false);
        tokio::task::yield_now().await;
        drop(held);
        let (r, w) = tokio::join!(report, write);
        r.expect("report");
        w.expect("write");
        assert_eq!(*order.lock().expect("order"), vec!["write", "report"]);
    }

    #[tokio::test]
    async fn a_report_waits_for_the_writes_in_flight_though_a_slot_is_free() {
        let permits = Permits::new(2);
        let write = permits.write().await;
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), permits.report());
        assert!(
            early.await.is_err(),
            "a report went beside a write in flight"
        );
        drop(write);
        let report = tokio::time::timeout(std::time::Duration::from_secs(5), permits.report());
        assert!(report.await.expect("a free slot").is_some());
    }

    #[tokio::test]
    async fn a_report_takes_a_slot_at_once_when_no_write_is_pending() {
        let permits = Permits::new(1);
        drop(permits.write().await);
        let report = tokio::time::timeout(std::time::Duration::from_secs(5), permits.report());
        assert!(report.await.expect("a free slot").is_some());
    }

    #[tokio::test]
    async fn a_held_template_holds_reports_until_released_or_its_time_is_up() {
        let ms = std::time::Duration::from_millis;
        let permits = Permits::new(2);
        let note = EventNote {
            warning: false,
            reason: "Reverted",
            note: "a: HorizontalPodAutoscaler restored".into(),
        };
        permits.hold(
            "ns/t".into(),
            Instant::now() + ms(5_000),
            vec![note.clone()],
        );
        let early = tokio::time::timeout(ms(100), permits.report());
        assert!(
            early.await.is_err(),
            "a report went while a template was held"
        );
        assert_eq!(permits.release("ns/t"), vec![note]);
        assert!(permits.release("ns/t").is_empty(), "a hold released twice");
        let now = tokio::time::timeout(ms(1_000), permits.report());
        assert!(now.await.expect("released").is_some());

        // Never released: the hold lapses at its time, and its Events wait for the next plan.
        let started = Instant::now();
        permits.hold("ns/u".into(), started + ms(300), vec![]);
        let lapsed = tokio::time::timeout(ms(5_000), permits.report());
        assert!(lapsed.await.expect("lapsed").is_some());
        assert!(started.elapsed() >= ms(300), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn kept_events_wait_for_the_next_plan_and_hold_nothing_back() {
        let ms = std::time::Duration::from_millis;
        let permits = Permits::new(1);
        let note = |text: &str| EventNote {
            warning: false,
            reason: "Applied",
            note: text.into(),
        };
        permits.keep("ns/t", vec![note("a: HPA ns/a minReplicas 1 -> 2")]);
        let report = tokio::time::timeout(ms(1_000), permits.report());
        assert!(
            report.await.expect("nothing is held back").is_some(),
            "kept Events held a report back"
        );
        permits.keep("ns/t", vec![note("b: HPA ns/b minReplicas 1 -> 2")]);
        assert_eq!(
            permits.release("ns/t"),
            vec![
                note("a: HPA ns/a minReplicas 1 -> 2"),
                note("b: HPA ns/b minReplicas 1 -> 2")
            ]
        );

        // Kept beside a hold: they join its Events, and the hold still holds until its time.
        permits.hold(
            "ns/u".into(),
            Instant::now() + ms(60_000),
            vec![note("c: restored")],
        );
        permits.keep("ns/u", vec![note("d: restored")]);
        let early = tokio::time::timeout(ms(100), permits.report());
        assert!(early.await.is_err(), "keeping Events ended a hold");
        assert_eq!(
            permits.release("ns/u"),
            vec![note("c: restored"), note("d: restored")]
        );
    }

    #[tokio::test]
    async fn a_report_goes_once_it_has_waited_long_enough_though_writes_never_stop() {
        let ms = std::time::Duration::from_millis;
        let permits = Permits::new(2);
        let _write = permits.write().await;
        permits.hold("ns/t".into(), Instant::now() + ms(60_000), vec![]);
        let started = Instant::now();
        let report = tokio::time::timeout(ms(5_000), permits.report_by(started + ms(300)));
        assert!(report.await.expect("waited out").is_some());
        assert!(started.elapsed() >= ms(300), "{:?}", started.elapsed());
    }
}
