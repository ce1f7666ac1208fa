//! The scaling controller's requests in flight, and which of them go first: a window's
//! writes before the statuses and Events that report them.

use tokio::sync::{Semaphore, SemaphorePermit, watch};

/// Requests one manager's scaling controller has in flight at most.
pub const MAX_IN_FLIGHT: usize = 32;

/// The scaling controller's requests in flight: at most [`MAX_IN_FLIGHT`], in two classes.
/// A write of a workload or an autoscaler takes a slot in arrival order; a report (a
/// template's status, an Event) takes one only when no write is pending, neither waiting
/// for a slot nor in flight. At an edge the statuses and Events then go once the windows'
/// writes are answered instead of among the last of them, whose latency is the edge's;
/// the statuses and warnings of templates with nothing to write (a target that does not
/// exist) go after the other windows' writes too.
pub struct Permits {
    slots: Semaphore,
    writes_pending: watch::Sender<usize>,
}

/// One write pending: counted from when it asks for a slot until it has none (its
/// request answered, or the write given up).
struct Pending<'a>(&'a watch::Sender<usize>);

impl<'a> Pending<'a> {
    fn new(count: &'a watch::Sender<usize>) -> Self {
        count.send_if_modified(|n| {
            *n += 1;
            false
        });
        Self(count)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // Reports wait for zero only: the last pending write wakes them, no other count does.
        self.0.send_if_modified(|n| {
            *n -= 1;
            *n == 0
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
            writes_pending: watch::Sender::new(0),
        }
    }

    /// A slot for a write, in arrival order.
    pub async fn write(&self) -> Option<WriteSlot<'_>> {
        let pending = Pending::new(&self.writes_pending);
        let slot = self.slots.acquire().await.ok()?;
        Some(WriteSlot {
            _slot: slot,
            _pending: pending,
        })
    }

    /// A slot for a report, once no write is pending. A slot that comes to a report while
    /// a write has started waiting is passed on at once (the semaphore serves in arrival
    /// order, and the write may have queued behind this report).
    pub async fn report(&self) -> Option<SemaphorePermit<'_>> {
        let mut pending = self.writes_pending.subscribe();
        loop {
            // The sender lives as long as `self`: this returns once no write is pending.
            let _ = pending.wait_for(|n| *n == 0).await;
            let slot = self.slots.acquire().await.ok()?;
            if *pending.borrow() == 0 {
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
}
