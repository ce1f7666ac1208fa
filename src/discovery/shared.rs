//! What discovery's loops share — the client, the stores, the dirty set, the revision
//! baselines, the Helm state, the heartbeat's outcome, the Event publisher — kept apart from
//! the wiring that builds it, so the rebuild, revision, status and heartbeat files use it
//! without depending on the wiring.

use std::sync::Arc;

use kube::Client;

use super::{
    baselines::Baselines, dirty::Pending, heartbeat::Reachability, helm_secrets::HelmState,
    history::OpenSlots, opt_in::Access, stores::Stores,
};
use crate::runtime::{context::Context, events::Publisher};

pub use super::names::CONTROLLER;

/// What the rebuilds, the heartbeat and the watches share.
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// The manager's context: leadership, metrics, names.
    pub ctx: Context,
    /// Every store discovery reads.
    pub stores: Stores,
    /// What changed since the last rebuild.
    pub pending: Arc<Pending>,
    /// The views revision records are measured from.
    pub baselines: Arc<Baselines>,
    /// Decoded Helm releases, and whether reading them is refused.
    pub helm: Arc<HelmState>,
    /// Whether the Secrets workloads refer to may be read.
    pub secret_access: Arc<Access>,
    /// The heartbeat's last outcome.
    pub reachability: Reachability,
    /// Publishes discovery's Events.
    pub events: Publisher,
    /// The slot each autoscaler's replica history is observing.
    pub open_slots: OpenSlots,
    /// The fleet facts of the last cluster status (`moonin_fleet_inventory`,
    /// `moonin_fleet_workloads_with_signal`), read at each scrape.
    pub facts: Arc<std::sync::Mutex<Vec<crate::runtime::facts::Fact>>>,
}
