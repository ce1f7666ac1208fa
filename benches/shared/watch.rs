//! The benchmarks' own watches: what arrives, in the order it arrives, so that a benchmark
//! can time each event the moment it is seen.

use futures::StreamExt;
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher},
};

/// What one event of a watch says.
pub enum Seen<K> {
    /// An object as it is now (listed or changed).
    Object(K),
    /// An object that was deleted.
    Deleted(K),
    /// The initial list is complete (again, after a relist).
    Synced,
    /// A list started after the first one completed: the watch could not resume, and an
    /// arrival time may be late.
    Relisted,
    /// The watch failed (the watcher retries with backoff); already reported on stderr.
    Failed,
}

/// Watches `api` with `config` in a task of its own and hands every event to `on` as it
/// arrives; `what` names the watch in error lines.
pub fn spawn<K, F>(
    what: &'static str,
    api: Api<K>,
    config: watcher::Config,
    mut on: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: FnMut(Seen<K>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut synced = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => on(Seen::Object(o)),
                Ok(watcher::Event::Delete(o)) => on(Seen::Deleted(o)),
                Ok(watcher::Event::Init) if synced => on(Seen::Relisted),
                Ok(watcher::Event::Init) => {}
                Ok(watcher::Event::InitDone) => {
                    synced = true;
                    on(Seen::Synced);
                }
                Err(e) => {
                    eprintln!("{what} watch error (the watcher retries): {e}");
                    on(Seen::Failed);
                }
            }
        }
    })
}
