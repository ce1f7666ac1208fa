//! Waiting with a deadline for something the benchmark observes.

use std::time::{Duration, Instant};

use kube::{Api, Resource, api::ListParams};
use serde::de::DeserializeOwned;

/// Polls `probe` every `every` until it returns `Some`, or fails at `deadline` saying how
/// long it waited for `what`.
pub async fn until<T, F, Fut>(
    what: &str,
    deadline: Instant,
    every: Duration,
    mut probe: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out after {:.0} s waiting for {what}",
                started.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until `api` lists nothing that `params` selects (objects being deleted, mostly), or
/// fails at `deadline`.
pub async fn until_none_left<K>(
    what: &str,
    api: &Api<K>,
    params: &ListParams,
    deadline: Instant,
    every: Duration,
) -> Result<(), String>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned,
{
    until(what, deadline, every, || async {
        api.list_metadata(params)
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await
}
