//! The leader gate: whether this process may write. Only the holder of the Lease
//! `moonin-manager` writes; the manager's election (`manager::leader`) feeds it.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use tokio::sync::watch;

/// Whether this process holds the Lease now. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
    until: Arc<Mutex<Option<Instant>>>,
    terms: Arc<AtomicU64>,
}

impl Leadership {
    /// A gate that follows `rx` (true while the Lease is held) and is shut at `until` (the
    /// renew deadline of the last successful renewal), whichever comes first; `terms`
    /// counts the times this process took the Lease ([`Leadership::term`]).
    pub fn new(
        rx: watch::Receiver<bool>,
        until: Arc<Mutex<Option<Instant>>>,
        terms: Arc<AtomicU64>,
    ) -> Self {
        Self { rx, until, terms }
    }

    /// How many times this process has taken (or created) the Lease. An acquisition in the
    /// same term is a renewal that came after its deadline: the Lease stayed this process's
    /// throughout, so no other process can have led meanwhile.
    pub fn term(&self) -> u64 {
        self.terms.load(Ordering::Acquire)
    }

    /// True while this process holds the Lease. Every write to the cluster checks this first.
    pub fn is_leader(&self) -> bool {
        // A closed channel means the lease task ended and nobody renews the Lease any more:
        // its last value (maybe `true`) is stale, and another process may hold it soon.
        // The deadline holds even when the election task is late to say so (a renewal that
        // hangs, a starved runtime): past it another process may already have taken over.
        let renewed = self
            .until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until);
        renewed && self.rx.has_changed().is_ok() && *self.rx.borrow()
    }

    /// A stream that yields each time this process becomes the leader (and once at the
    /// start if it already is), so controllers can reconcile everything then.
    pub fn acquisitions(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let rx = self.rx.clone();
        futures::stream::unfold((rx, true), |(mut rx, first)| async move {
            if first && *rx.borrow_and_update() {
                return Some(((), (rx, false)));
            }
            loop {
                rx.changed().await.ok()?;
                if *rx.borrow_and_update() {
                    return Some(((), (rx, false)));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn gate(held: bool, until: Option<Instant>) -> (watch::Sender<bool>, Leadership) {
        let (tx, rx) = watch::channel(held);
        (
            tx,
            Leadership::new(rx, Arc::new(Mutex::new(until)), Arc::default()),
        )
    }

    #[test]
    fn not_leader_once_the_lease_task_is_gone() {
        let (tx, leadership) = gate(true, Some(Instant::now() + Duration::from_secs(60)));
        assert!(leadership.is_leader());
        drop(tx);
        assert!(!leadership.is_leader());
    }

    #[test]
    fn not_leader_past_the_renew_deadline_even_if_nobody_said_so() {
        let (_tx, leadership) = gate(true, Some(Instant::now() - Duration::from_millis(1)));
        assert!(!leadership.is_leader());
        let (_tx, leadership) = gate(true, None);
        assert!(!leadership.is_leader());
        let (_tx, leadership) = gate(false, Some(Instant::now() + Duration::from_secs(60)));
        assert!(!leadership.is_leader());
    }
}
