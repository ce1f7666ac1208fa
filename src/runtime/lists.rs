//! How a watch gets its initial state: streamed from the API server's watch cache as watch
//! events (`sendInitialEvents`, Kubernetes' WatchList feature) where the server offers it,
//! else listed in pages of [`PAGE`].
//!
//! A streamed start is one request per kind, served from memory the API server already
//! holds, and arrives one object at a time, so it holds no page of objects in this process
//! either. Paginated lists that go past the watch cache cost a round trip per page (50,000
//! Pods: 100 of them). Servers without the feature (it is on by default in recent
//! Kubernetes) refuse such a watch, so the choice is made once, at start, by asking.

use http::Request;
use kube::{Client, runtime::watcher};

/// Objects per page of a paginated list.
pub const PAGE: u32 = 500;

/// A cheap watch that asks for its initial state as events: accepted only where the server
/// streams initial state. Namespaces: every controller that watches may list them, and there
/// are few. It ends at once (`timeoutSeconds=1`; the answer's status is all that is read).
const PROBE: &str = "/api/v1/namespaces?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";

/// How watches start on this API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// Streamed as watch events.
    Streaming,
    /// Listed in pages.
    Paginated,
}

impl InitialList {
    /// Asks the API server whether it streams a watch's initial state.
    pub async fn probe(client: &Client) -> Self {
        let Ok(request) = Request::get(PROBE).body(Vec::new()) else {
            return Self::Paginated;
        };
        match client.send(request.map(Into::into)).await {
            Ok(response) if response.status().is_success() => Self::Streaming,
            Ok(response) => {
                tracing::info!(status = %response.status(), "the API server does not stream a watch's initial state; watches start with paginated lists");
                Self::Paginated
            }
            Err(e) => {
                tracing::info!(error = %super::errors::brief(&e), "asking whether the API server streams a watch's initial state failed; watches start with paginated lists");
                Self::Paginated
            }
        }
    }

    /// A watcher configuration that starts this way.
    pub fn config(self) -> watcher::Config {
        match self {
            Self::Streaming => watcher::Config::default().streaming_lists(),
            Self::Paginated => watcher::Config::default().page_size(PAGE),
        }
    }
}
