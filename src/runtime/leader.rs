//! The leader gate: whether this process may write. Only the holder of the Lease
//! `moonin-manager` writes; the manager's election (`manager::leader`) feeds it.

use tokio::sync::watch;

/// Whether this process holds the Lease now. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
}

impl Leadership {
    /// A gate that follows `rx` (true while the Lease is held).
    pub fn new(rx: watch::Receiver<bool>) -> Self {
        Self { rx }
    }

    /// True while this process holds the Lease. Every write to the cluster checks this first.
    pub fn is_leader(&self) -> bool {
        // A closed channel means the lease task ended and nobody renews the Lease any more:
        // its last value (maybe `true`) is stale, and another process may hold it soon.
        self.rx.has_changed().is_ok() && *self.rx.borrow()
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
    use super::*;

    #[test]
    fn not_leader_once_the_lease_task_is_gone() {
        let (tx, rx) = watch::channel(true);
        let leadership = Leadership { rx };
        assert!(leadership.is_leader());
        drop(tx);
        assert!(!leadership.is_leader());
    }
}
