//! `moonin suggest`: reads the replica histories of the namespaces' inventories and the
//! scaling templates from the cluster, and prints what [`super::suggest`] finds.

use std::io::Write as _;

use anyhow::{Context as _, bail};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt as _};

use super::{Existing, ExistingAction, Observed, Rules, render_table, render_yaml, suggest};
use crate::api::discovery::NamespaceInventory;
use crate::api::scaling::{ClusterScalingTemplate, ScalingAction, ScalingTemplate, WindowSpec};

/// Arguments of `moonin suggest`.
#[derive(clap::Args, Debug, Clone)]
pub struct SuggestArgs {
    /// Only this workload: a Deployment, or the HPA or ScaledObject that scales it.
    #[arg(value_name = "WORKLOAD")]
    pub workload: Option<String>,
    /// The namespace [default: the kubeconfig context's].
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// The IANA time zone windows are written in [default: the histories' own, which
    /// `ClusterDiscovery.spec.replicaHistory.timeZone` sets].
    #[arg(long, value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// Open windows this long before the observed rise, e.g. `15m`.
    #[arg(long, default_value = "15m", value_parser = crate::cron::span_arg)]
    pub lead: SignedDuration,
    /// A rhythm is a rise seen in every period kept, and in at least this many.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub min_periods: u8,
    /// `table` for people; `yaml` prints the suggested ScalingTemplates, ready to commit.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// How `moonin suggest` prints.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A summary.
    Table,
    /// The templates as YAML, the evidence as comments.
    Yaml,
}

/// `moonin suggest`: loads, suggests, prints.
pub async fn run(args: SuggestArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig context")?;
    let namespace = match (&args.namespace, args.all_namespaces) {
        (_, true) => None,
        (Some(ns), false) => Some(ns.clone()),
        (None, false) => Some(client.default_namespace().to_string()),
    };
    let observed = histories(&client, namespace.as_deref(), args.workload.as_deref()).await?;
    if observed.is_empty() {
        bail!(
            "no replica history {}: discovery keeps one per HPA or ScaledObject in each \
             namespace's NamespaceInventory (status.replicaHistory) once its first slot closed",
            match &namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "in any namespace".into(),
            }
        );
    }
    let zone = args
        .time_zone
        .clone()
        .unwrap_or_else(|| observed[0].history.time_zone.clone());
    let tz = TimeZone::get(&zone).with_context(|| format!("time zone {zone:?} is unknown"))?;
    let existing = templates(&client, namespace.as_deref()).await?;
    let rules = Rules {
        lead: args.lead,
        min_periods: usize::from(args.min_periods),
        tz,
    };
    let report = suggest(&observed, &existing, &rules, Timestamp::now());
    let out = match args.output {
        Output::Table => render_table(&report),
        Output::Yaml => render_yaml(&report).context("rendering YAML")?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

/// The histories in the namespace (every namespace when `None`), of `workload` only when
/// given.
async fn histories(
    client: &Client,
    namespace: Option<&str>,
    workload: Option<&str>,
) -> anyhow::Result<Vec<Observed>> {
    let api: Api<NamespaceInventory> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing NamespaceInventories")?;
    let mut out: Vec<Observed> = Vec::new();
    for inv in list.items {
        let ns = inv.namespace().unwrap_or_default();
        for h in inv.status.map(|s| s.replica_history).unwrap_or_default() {
            let named = |s: &str| s.split_once('/').is_some_and(|(_, n)| Some(n) == workload);
            if workload.is_some() && !named(&h.autoscaler) && !named(&h.target) {
                continue;
            }
            if !out
                .iter()
                .any(|o| o.namespace == ns && o.history.autoscaler == h.autoscaler)
            {
                out.push(Observed {
                    namespace: ns.clone(),
                    history: h,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        (&a.namespace, &a.history.autoscaler).cmp(&(&b.namespace, &b.history.autoscaler))
    });
    Ok(out)
}

/// The ScalingTemplates in the namespace (all of them when `None`) and every
/// ClusterScalingTemplate.
async fn templates(client: &Client, namespace: Option<&str>) -> anyhow::Result<Vec<Existing>> {
    let api: Api<ScalingTemplate> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let lp = ListParams::default();
    let mut out = Vec::new();
    for t in api.list(&lp).await.context("listing ScalingTemplates")? {
        let ns = t.namespace().unwrap_or_default();
        let name = t.name_any();
        let label = format!("ScalingTemplate {ns}/{name}");
        let mut e = existing(label, t.spec.window, &t.spec.actions, Some(&ns));
        e.name = Some((ns, name));
        out.push(e);
    }
    let cluster: Api<ClusterScalingTemplate> = Api::all(client.clone());
    for t in cluster
        .list(&lp)
        .await
        .context("listing ClusterScalingTemplates")?
    {
        let label = format!("ClusterScalingTemplate {}", t.name_any());
        out.push(existing(label, t.spec.window, &t.spec.actions, None));
    }
    Ok(out)
}

/// One template as [`Existing`]: its actions' targets are in `namespace` (a ScalingTemplate's
/// own), or each names its own (a ClusterScalingTemplate's, when `None`).
fn existing(
    label: String,
    window: WindowSpec,
    actions: &[ScalingAction],
    namespace: Option<&str>,
) -> Existing {
    let actions = actions
        .iter()
        .map(|a| ExistingAction {
            name: a.name.clone(),
            namespace: namespace
                .map(str::to_string)
                .or_else(|| a.target.namespace.clone())
                .unwrap_or_default(),
            deployment: a.target.name.clone(),
            min_replicas: a.min_replicas,
        })
        .collect();
    Existing {
        label,
        name: None,
        window,
        actions,
    }
}
