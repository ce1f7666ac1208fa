//! Missing permissions, as the watches meet them.
//!
//! A watch the API server refuses with 403 is recorded here under its controller and kind,
//! logged once at error level with the API server's own message (it names the verb, the
//! resource, its group and the scope), and makes `/readyz` answer 503 with that message, so
//! the manager Pod's `Ready` condition says what is missing. The first event the watch
//! delivers afterwards (someone fixed the RBAC) clears it. With a controller's whole role
//! removed, this is the only place left to report it: the controller can neither read nor
//! write its own objects' status.
//!
//! The registry is process-wide, like the readiness it feeds; each controller's task carries
//! its name in [`CONTROLLER`].

use std::{
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use kube::runtime::watcher;

use crate::runtime::errors::brief_watch;

tokio::task_local! {
    /// The controller the current task runs (set by the manager around each controller).
    pub static CONTROLLER: &'static str;
}

/// `(controller, kind)` → the API server's message.
static DENIED: Mutex<BTreeMap<(String, String), String>> = Mutex::new(BTreeMap::new());
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
    let fresh = {
        let mut g = DENIED.lock().unwrap_or_else(|e| e.into_inner());
        ANY.store(true, Ordering::Release);
        g.insert((controller.clone(), kind.to_string()), message.to_string())
            .is_none()
    };
    if fresh {
        tracing::error!(
            %controller,
            %kind,
            permission = %message,
            "missing permission: {message}"
        );
    }
}

/// Reports that a watch of `kind` delivered an event: any refusal recorded for it is over.
pub fn watch_ok(kind: &str) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let controller = controller();
    let removed = {
        let mut g = DENIED.lock().unwrap_or_else(|e| e.into_inner());
        let removed = g.remove(&(controller.clone(), kind.to_string()));
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
    DENIED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|((controller, _), message)| format!("{controller}: {message}"))
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
}
