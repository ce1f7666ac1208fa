//! Missing permissions, as the watches meet them.
//!
//! A watch the API server refuses with 403 is recorded here under its controller and kind,
//! logged once at error level with the API server's own message (it names the verb, the
//! resource, its group and the scope), and makes `/readyz` answer 503 with that message, so
//! the manager Pod's `Ready` condition says what is missing. It is over (someone fixed the
//! RBAC) at the first event the watch delivers afterwards, or once the watch has not been
//! refused for [`STANDS_FOR`]: a watch that starts again after it listed delivers nothing
//! until its kind next changes, which on a quiet kind may be never. With a controller's whole
//! role removed, this is the only place left to report it: the controller can neither read
//! nor write its own objects' status.
//!
//! The registry is process-wide, like the readiness it feeds; each controller's task carries
//! its name in [`CONTROLLER`].

use std::{
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use kube::runtime::watcher;

use crate::runtime::errors::brief_watch;

tokio::task_local! {
    /// The controller the current task runs (set by the manager around each controller).
    pub static CONTROLLER: &'static str;
}

/// How long a refusal stands unless the watch is refused again. Every refused watch is
/// retried with kube's default backoff: at most 30 s, plus up to as much again of jitter,
/// after the refusal before. So a refusal not repeated within 70 s means a retry was let
/// through, whether or not the watch has delivered anything since.
pub const STANDS_FOR: Duration = Duration::from_secs(70);

/// A refusal: the API server's message and when it last came.
struct Denied {
    message: String,
    at: Instant,
}

/// `(controller, kind)` → the refusal.
static DENIED: Mutex<BTreeMap<(String, String), Denied>> = Mutex::new(BTreeMap::new());
/// Whether [`DENIED`] may hold anything: keeps the lock off the path of every event.
static ANY: AtomicBool = AtomicBool::new(false);

fn controller() -> String {
    CONTROLLER
        .try_with(|c| (*c).to_string())
        .unwrap_or_else(|_| "manager".into())
}

/// The API server's message when `err` is a refusal for lack of permission.
pub fn forbidden(err: &watcher::Error) -> Option<&str> {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
            if s.code == 403 =>
        {
            Some(&s.message)
        }
        watcher::Error::WatchError(s) if s.code == 403 => Some(&s.message),
        _ => None,
    }
}

/// Reports a failed watch of `kind`: a missing permission is recorded and logged once at
/// error level; anything else is logged as a retry.
pub fn watch_failed(kind: &str, err: &watcher::Error) {
    let Some(message) = forbidden(err) else {
        if matches!(err, watcher::Error::WatchError(s) if s.code == 410) {
            // The watch's resourceVersion was compacted away (410 Gone): it lists again, as
            // designed, and the caches trigger once the relist is complete.
            tracing::info!(%kind, error = %brief_watch(err), "watch expired; relisting");
        } else {
            tracing::warn!(%kind, error = %brief_watch(err), "watch error; retrying");
        }
        return;
    };
    let controller = controller();
    if refused(controller.clone(), kind, message, Instant::now()) {
        tracing::error!(
            %controller,
            %kind,
            permission = %message,
            "missing permission: {message}"
        );
    }
}

/// Records a refusal at `now`; true when it is new (none stood for this watch).
fn refused(controller: String, kind: &str, message: &str, now: Instant) -> bool {
    let mut g = DENIED.lock().unwrap_or_else(|e| e.into_inner());
    ANY.store(true, Ordering::Release);
    let denied = Denied {
        message: message.to_string(),
        at: now,
    };
    g.insert((controller, kind.to_string()), denied)
        .is_none_or(|before| now.duration_since(before.at) >= STANDS_FOR)
}

/// Reports that a watch of `kind` delivered an event: any refusal recorded for it is over.
pub fn watch_ok(kind: &str) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    watch_ok_as(&controller(), kind);
}

fn watch_ok_as(controller: &str, kind: &str) {
    let removed = {
        let mut g = DENIED.lock().unwrap_or_else(|e| e.into_inner());
        let removed = g.remove(&(controller.to_string(), kind.to_string()));
        ANY.store(!g.is_empty(), Ordering::Release);
        removed
    };
    if removed.is_some() {
        tracing::info!(%controller, %kind, "permission granted again; watching");
    }
}

/// Every missing permission, one line each: `<controller>: <the API server's message>`.
pub fn missing() -> Vec<String> {
    if !ANY.load(Ordering::Acquire) {
        return Vec::new();
    }
    missing_at(Instant::now())
}

/// [`missing`] at `now`: the refusals not over by then (those that are over go).
fn missing_at(now: Instant) -> Vec<String> {
    let mut g = DENIED.lock().unwrap_or_else(|e| e.into_inner());
    g.retain(|(controller, kind), d| {
        let stands = now.duration_since(d.at) < STANDS_FOR;
        if !stands {
            tracing::info!(
                %controller,
                %kind,
                "permission granted again: the watch was not refused for {}s",
                STANDS_FOR.as_secs()
            );
        }
        stands
    });
    ANY.store(!g.is_empty(), Ordering::Release);
    g.iter()
        .map(|((controller, _), d)| format!("{controller}: {}", d.message))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16) -> Status {
        Status::failure(
            "pods is forbidden: User \"x\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
            "Forbidden",
        )
        .with_code(code)
    }

    #[test]
    fn only_a_403_is_a_missing_permission() {
        let denied = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403))));
        assert!(forbidden(&denied).is_some_and(|m| m.contains("cannot list resource \"pods\"")));
        let in_watch = watcher::Error::WatchError(Box::new(status(403)));
        assert!(forbidden(&in_watch).is_some());
        let gone = watcher::Error::WatchError(Box::new(status(410)));
        assert_eq!(forbidden(&gone), None);
        assert_eq!(forbidden(&watcher::Error::NoResourceVersion), None);
    }

    #[tokio::test]
    async fn recorded_per_controller_and_cleared_by_the_next_event() {
        let denied = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403))));
        CONTROLLER
            .scope("access-test", async {
                watch_failed("AccessTestKind", &denied);
                watch_failed("AccessTestKind", &denied);
                let lines: Vec<String> = missing()
                    .into_iter()
                    .filter(|l| l.starts_with("access-test: "))
                    .collect();
                assert_eq!(lines.len(), 1, "{lines:?}");
                assert!(lines[0].contains("cannot list resource \"pods\""));
                watch_ok("AccessTestKind");
                assert!(!missing().iter().any(|l| l.starts_with("access-test: ")));
            })
            .await;
    }

    #[test]
    fn a_refusal_not_repeated_for_seventy_seconds_is_over() {
        // Instants in the past, so that pruning at `now` leaves other tests' entries alone.
        let now = Instant::now();
        let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).expect("uptime");
        let line = |kind: &str| format!("access-expiry: {kind} is forbidden");
        let ours = |lines: Vec<String>| -> Vec<String> {
            lines
                .into_iter()
                .filter(|l| l.starts_with("access-expiry: "))
                .collect()
        };
        let c = || "access-expiry".to_string();
        assert!(refused(c(), "Retried", "Retried is forbidden", ago(100)));
        assert!(
            !refused(c(), "Retried", "Retried is forbidden", ago(50)),
            "refused again within 70 s: the same refusal, logged once"
        );
        assert!(refused(c(), "Quiet", "Quiet is forbidden", ago(80)));
        assert!(refused(c(), "Late", "Late is forbidden", ago(140)));
        assert!(
            refused(c(), "Late", "Late is forbidden", ago(69)),
            "refused again after 70 s: a new refusal, logged again"
        );
        assert_eq!(
            ours(missing_at(now)),
            vec![line("Late"), line("Retried")],
            "Quiet was last refused 80 s ago: a retry got through since"
        );
        assert_eq!(ours(missing_at(now)), vec![line("Late"), line("Retried")]);
        assert!(
            refused(c(), "Quiet", "Quiet is forbidden", now),
            "over, then refused again: new"
        );
        watch_ok_as(&c(), "Quiet");
        watch_ok_as(&c(), "Late");
        watch_ok_as(&c(), "Retried");
        assert!(ours(missing_at(now)).is_empty());
    }
}
