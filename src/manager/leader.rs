//! Leader election on the `moonin-manager` Lease. Only the holder writes.

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;

use crate::api::field_manager;
use crate::runtime::{leader::Leadership, metrics::Metrics};

/// The Lease every manager process competes for.
pub const LEASE_NAME: &str = "moonin-manager";
/// Seconds a lease stays valid after its last renewal.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// The holder renews this many seconds before expiry.
pub const LEASE_GRACE_SECONDS: u64 = 5;

/// Starts competing for the Lease in `namespace` as `identity`. The returned task releases
/// the Lease when `shutdown` is cancelled, so a successor takes over at once. Should the
/// election itself stop, the task cancels `shutdown` and returns `false`: the process exits
/// with an error and is restarted, instead of idling as a replica that can never lead.
pub async fn elect(
    client: Client,
    namespace: &str,
    identity: &str,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(Leadership, tokio::task::JoinHandle<bool>), kube_lease_manager::LeaseManagerError> {
    let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .with_field_manager(field_manager::MANAGER)
        .build()
        .await?;
    let (mut rx, lease_task) = manager.watch().await;
    let leadership = Leadership::new(rx.clone());
    let identity = identity.to_string();
    let task = tokio::spawn(async move {
        let mut intact = true;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = rx.changed() => {
                    if changed.is_err() {
                        tracing::error!("leader election stopped unexpectedly");
                        metrics.leader.set(0);
                        intact = false;
                        shutdown.cancel();
                        break;
                    }
                    let held = *rx.borrow_and_update();
                    metrics.leader.set(i64::from(held));
                    if held {
                        tracing::info!(%identity, lease = LEASE_NAME, "acquired leadership");
                    } else {
                        tracing::warn!(%identity, lease = LEASE_NAME, "lost leadership");
                    }
                }
            }
        }
        // Dropping the last receiver makes the lease task release the Lease and return.
        drop(rx);
        metrics.leader.set(0);
        match lease_task.await {
            Ok(Ok(_)) => tracing::info!(lease = LEASE_NAME, "released the Lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the Lease"),
            Err(e) => tracing::warn!(error = %e, "lease task failed"),
        }
        intact
    });
    Ok((leadership, task))
}
