//! Per-object exponential backoff for failures that repeat.
//!
//! A write the API server refuses (a Pod template it rejects, a quota, an admission policy)
//! is refused again if retried at once. Each object that fails waits [`FIRST`], then twice
//! as long after each further failure, up to [`MAX`]; a success, or a new generation of the
//! object (someone changed its spec), starts over. A failure that happens before the wait is
//! over (another event woke the object) does not count as a step: the wait stays where it
//! is, so a busy object cannot shorten or lengthen its own backoff, and a log line per step
//! is a log line per counted failure.
//!
//! An entry whose wait ended more than [`STALE`] times the longest wait ago is forgotten at
//! the next failure of any key: nothing retried its object (it was deleted, or its write is
//! no longer wanted), so the map holds only objects that are still failing. One that fails
//! again that much later starts over at [`FIRST`].
//!
//! Time is a parameter: the caller passes `now`, and the tests drive a fake clock.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use tokio::time::Instant;

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_secs(5);
/// The longest wait.
pub const MAX: Duration = Duration::from_secs(300);
/// How many longest waits after its wait ended an entry nothing retried is forgotten.
pub const STALE: u32 = 2;

#[derive(Debug, Clone)]
struct Entry {
    generation: Option<i64>,
    failures: u32,
    due: Instant,
    message: String,
}

/// One failure, as the backoff counted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// How long to wait before the next attempt.
    pub wait: Duration,
    /// Failures counted in a row, this one included (a failure before the wait was over is
    /// not counted).
    pub failures: u32,
    /// Whether this failure was counted: log it (the others repeat one already logged).
    pub counted: bool,
}

/// A failure still being waited out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Time left before the next attempt.
    pub remaining: Duration,
    /// The last failure's message.
    pub message: String,
}

/// Backoff state per object key (e.g. `namespace/name`).
#[derive(Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(FIRST, MAX)
    }
}

impl Backoff {
    /// A backoff from `first` doubling to `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The failure `key` (at `generation`) is still waiting out, if any. A new generation
    /// ends the wait.
    pub fn waiting(&self, key: &str, generation: Option<i64>, now: Instant) -> Option<Waiting> {
        let mut g = self.entries();
        let e = g.get(key)?;
        if e.generation != generation {
            g.remove(key);
            return None;
        }
        (now < e.due).then(|| Waiting {
            remaining: e.due - now,
            message: e.message.clone(),
        })
    }

    /// Records a failure of `key` at `generation` with `message`.
    pub fn failed(&self, key: &str, generation: Option<i64>, now: Instant, message: &str) -> Step {
        let mut g = self.entries();
        let stale = self.max.saturating_mul(STALE);
        g.retain(|_, e| now.saturating_duration_since(e.due) <= stale);
        let e = g.entry(key.to_string()).or_insert_with(|| Entry {
            generation,
            failures: 0,
            due: now,
            message: String::new(),
        });
        if e.generation != generation {
            e.generation = generation;
            e.failures = 0;
            e.due = now;
        }
        e.message = message.to_string();
        if now < e.due {
            return Step {
                wait: e.due - now,
                failures: e.failures,
                counted: false,
            };
        }
        e.failures += 1;
        let wait = self
            .first
            .saturating_mul(1u32 << (e.failures - 1).min(16))
            .min(self.max);
        e.due = now + wait;
        Step {
            wait,
            failures: e.failures,
            counted: true,
        }
    }

    /// Records a success of `key`: the next failure waits [`FIRST`] again.
    pub fn succeeded(&self, key: &str) {
        self.entries().remove(key);
    }

    /// How many objects are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn waits_double_to_the_maximum() {
        let b = Backoff::default();
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..9 {
            let step = b.failed("ns/p", Some(1), now, "refused");
            assert!(step.counted);
            waits.push(step.wait.as_secs());
            now += step.wait;
        }
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_failure_before_the_wait_is_over_does_not_count() {
        let b = Backoff::default();
        let t0 = Instant::now();
        assert_eq!(b.failed("k", None, t0, "x").wait, secs(5));
        let early = b.failed("k", None, t0 + secs(2), "x");
        assert_eq!(
            early,
            Step {
                wait: secs(3),
                failures: 1,
                counted: false
            }
        );
        let on_time = b.failed("k", None, t0 + secs(5), "x");
        assert_eq!((on_time.wait, on_time.counted), (secs(10), true));
    }

    #[test]
    fn success_and_a_new_generation_start_over() {
        let b = Backoff::default();
        let t0 = Instant::now();
        b.failed("k", Some(1), t0, "x");
        b.failed("k", Some(1), t0 + secs(5), "x");
        assert_eq!(
            b.waiting("k", Some(1), t0 + secs(6)),
            Some(Waiting {
                remaining: secs(9),
                message: "x".into()
            })
        );
        // The spec changed: try at once, and a failure waits the first step again.
        assert_eq!(b.waiting("k", Some(2), t0 + secs(6)), None);
        assert_eq!(b.failed("k", Some(2), t0 + secs(6), "y").wait, secs(5));
        b.succeeded("k");
        assert_eq!(b.waiting("k", Some(2), t0 + secs(7)), None);
        assert_eq!(b.failed("k", Some(2), t0 + secs(7), "y").wait, secs(5));
    }

    #[test]
    fn an_object_nothing_retries_is_forgotten_and_starts_over() {
        let b = Backoff::default();
        let t0 = Instant::now();
        b.failed("deleted", None, t0, "x");
        // "live" is retried whenever its wait ends and refused each time; "deleted" is
        // never woken again.
        let (mut t, mut wait) = (t0, b.failed("live", None, t0, "x").wait);
        while t < t0 + MAX * (STALE + 1) {
            t += wait;
            wait = b.failed("live", None, t, "x").wait;
        }
        assert_eq!(wait, MAX, "the live object kept its place in the sequence");
        assert_eq!(b.len(), 1);
        assert_eq!(b.waiting("deleted", None, t), None);
        // An object that fails again long after its last wait waits the first step.
        let later = t + wait + MAX * STALE + secs(1);
        assert_eq!(b.failed("live", None, later, "x").wait, FIRST);
    }

    #[test]
    fn creates_over_ninety_seconds_are_one_per_step() {
        // A create attempted whenever the object is woken (every 100 ms here) and refused
        // each time is sent only when no wait is pending.
        let b = Backoff::default();
        let t0 = Instant::now();
        let mut sent = 0;
        let mut t = t0;
        while t < t0 + secs(90) {
            if b.waiting("k", Some(1), t).is_none() {
                sent += 1;
                b.failed("k", Some(1), t, "refused");
            }
            t += Duration::from_millis(100);
        }
        // At 0, 5, 15, 35 and 75 s.
        assert_eq!(sent, 5);
    }
}
