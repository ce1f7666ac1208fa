//! `moonin fleet`: one view over many clusters. [`cli`] reads Moonin's own objects from
//! every kubeconfig context at once (the only I/O); the views here turn what each cluster
//! answered into one table with a CLUSTER column. Pure: no client, no clock (the caller
//! passes `now`), so every view is table-tested with hand-built clusters.
//!
//! A cluster that did not answer, or that has no Moonin, is a [`Reach`] that says why, shown
//! beside the rows of the others: one cluster never fails the whole command.

pub mod cli;
mod render;
mod views;

pub use render::{render_json, render_table, render_yaml};
pub use views::{changes, clusters, envs, images, signals, windows};

use serde::Serialize;
use serde_json::Value;

use crate::api::discovery::{ClusterDiscovery, NamespaceInventory, WorkloadRevision};
use crate::api::sandbox::{SandboxEnv, SandboxPool};
use crate::api::scaling::{ClusterScalingTemplate, ScalingTemplate};

/// What one kubeconfig context answered.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The context's name: the CLUSTER column.
    pub context: String,
    /// Moonin's objects there, or why there are none.
    pub objects: Result<Objects, String>,
}

/// Moonin's objects in one cluster; a view reads only the kinds it needs (the others stay
/// empty, never listed).
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub discoveries: Vec<ClusterDiscovery>,
    pub inventories: Vec<NamespaceInventory>,
    pub revisions: Vec<WorkloadRevision>,
    pub templates: Vec<ScalingTemplate>,
    pub cluster_templates: Vec<ClusterScalingTemplate>,
    pub envs: Vec<SandboxEnv>,
    pub pools: Vec<SandboxPool>,
}

/// The kinds a view reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub discoveries: bool,
    pub inventories: bool,
    pub revisions: bool,
    pub templates: bool,
    pub sandboxes: bool,
}

/// How a cluster answered, as every output shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reach {
    pub cluster: String,
    /// `ok`, or `unreachable` / `no Moonin` with the error.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A view's answer: its columns, one row per fact (each an object keyed by the column's
/// field), and how every cluster answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `(HEADER, field)`, in the table's order.
    #[serde(skip)]
    pub columns: Vec<(&'static str, &'static str)>,
    pub clusters: Vec<Reach>,
    pub items: Vec<Value>,
}

/// Marks an error as "this cluster has no Moonin" rather than "did not answer": the list of
/// one of Moonin's kinds found no such resource (its CRDs are not installed).
pub const NO_MOONIN: &str = "no Moonin";

/// Every cluster's [`Reach`], in the order given.
fn reaches(clusters: &[Cluster]) -> Vec<Reach> {
    clusters
        .iter()
        .map(|c| match &c.objects {
            Ok(_) => Reach {
                cluster: c.context.clone(),
                state: "ok".into(),
                error: None,
            },
            Err(e) => {
                let (state, error) = match e.strip_prefix(NO_MOONIN) {
                    Some(rest) => (NO_MOONIN, rest.trim_start_matches(": ")),
                    None => ("unreachable", e.as_str()),
                };
                Reach {
                    cluster: c.context.clone(),
                    state: state.into(),
                    error: Some(error.into()),
                }
            }
        })
        .collect()
}
