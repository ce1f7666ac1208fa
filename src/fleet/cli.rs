//! `moonin fleet`: picks the kubeconfig's contexts, reads from all of them at once (each
//! within `--timeout`), and prints one view. The only I/O of [`super`]; it lists Moonin's
//! kinds only, so `get`/`list` on `moonin.io` is all it needs (`config/rbac-fleet/`).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::future::join_all;
use jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, Resource};
use serde::de::DeserializeOwned;

use super::{Cluster, NO_MOONIN, Needs, Objects, Report};
use crate::api::discovery::{ClusterDiscovery, NamespaceInventory, WorkloadRevision};
use crate::api::sandbox::{SandboxEnv, SandboxPool};
use crate::api::scaling::{ClusterScalingTemplate, ScalingTemplate};
use crate::runtime::errors::brief;

/// Arguments of `moonin fleet`.
#[derive(clap::Args, Debug, Clone)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub view: View,
    /// Only these contexts, comma-separated [default: every context of the kubeconfig].
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        conflicts_with = "matching"
    )]
    pub contexts: Vec<String>,
    /// Only the contexts whose name matches this pattern, `*` standing for any characters
    /// (`prod-*`, `*-eu-*`).
    #[arg(long = "match", global = true, value_name = "PATTERN")]
    pub matching: Option<String>,
    /// The kubeconfig to read [default: $KUBECONFIG's files, else ~/.kube/config].
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// How long each cluster has to answer, e.g. `10s`; a cluster that does not is a row
    /// that says so.
    #[arg(long, global = true, default_value = "10s", value_parser = crate::cron::span_arg)]
    pub timeout: SignedDuration,
    /// `table` for people, `json` or `yaml` for scripts.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// The views of `moonin fleet`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum View {
    /// Each cluster's provider, region, version, nodes and totals (its ClusterDiscovery).
    Clusters,
    /// Where each image runs: cluster, namespace, Deployments.
    Images {
        /// Only images whose reference contains this text, e.g. `payments:2.3.1`.
        #[arg(value_name = "IMAGE")]
        image: Option<String>,
    },
    /// The Deployments and CronJobs with error signals now.
    Signals,
    /// The revisions recorded lately (what changed, when, by whom), newest first.
    Changes {
        /// How far back, e.g. `1h`, `30m`, `48h`.
        #[arg(long, default_value = "1h", value_parser = crate::cron::span_arg)]
        since: SignedDuration,
    },
    /// The scaling windows open now.
    Windows {
        /// Every ScalingTemplate and ClusterScalingTemplate, open or not.
        #[arg(long)]
        all: bool,
    },
    /// Each SandboxEnv's pools in every cluster (wanted, ready, idle, claimed,
    /// saturated), and members declared for clusters where none was found.
    Envs,
}

/// How `moonin fleet` prints.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// One table with a CLUSTER column.
    Table,
    /// `{"clusters": [...], "items": [...]}`.
    Json,
    /// The same as YAML.
    Yaml,
}

impl View {
    /// The kinds this view reads.
    fn needs(&self) -> Needs {
        match self {
            View::Clusters => Needs {
                discoveries: true,
                ..Needs::default()
            },
            View::Images { .. } | View::Signals => Needs {
                inventories: true,
                ..Needs::default()
            },
            View::Changes { .. } => Needs {
                revisions: true,
                ..Needs::default()
            },
            View::Windows { .. } => Needs {
                templates: true,
                ..Needs::default()
            },
            View::Envs => Needs {
                sandboxes: true,
                ..Needs::default()
            },
        }
    }

    fn report(&self, clusters: &[Cluster], now: Timestamp) -> Report {
        match self {
            View::Clusters => super::clusters(clusters),
            View::Images { image } => super::images(clusters, image.as_deref()),
            View::Signals => super::signals(clusters),
            View::Changes { since } => super::changes(clusters, now - *since),
            View::Windows { all } => super::windows(clusters, *all),
            View::Envs => super::envs(clusters, now),
        }
    }
}

/// `moonin fleet`: reads every chosen context at once, prints the view.
pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?,
        None => {
            Kubeconfig::read().context("reading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?
        }
    };
    let all: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let chosen = choose(&all, &args.contexts, args.matching.as_deref());
    if chosen.is_empty() {
        bail!(
            "no context of the kubeconfig is chosen (it has: {})",
            if all.is_empty() {
                "none".to_string()
            } else {
                all.join(", ")
            }
        );
    }
    let timeout = Duration::try_from(args.timeout).unwrap_or(Duration::from_secs(10));
    let needs = args.view.needs();
    let (kubeconfig, all) = (&kubeconfig, &all);
    let clusters = join_all(chosen.iter().map(|name| async move {
        let objects = if all.contains(name) {
            read_context(kubeconfig, name, needs, timeout).await
        } else {
            Err("no such context in the kubeconfig".to_string())
        };
        Cluster {
            context: name.clone(),
            objects,
        }
    }))
    .await;
    let report = args.view.report(&clusters, Timestamp::now());
    let out = match args.output {
        Output::Table => super::render_table(&report),
        Output::Json => super::render_json(&report).context("rendering JSON")?,
        Output::Yaml => super::render_yaml(&report).context("rendering YAML")?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

/// The contexts to read: those named (in that order, even if the kubeconfig lacks one),
/// else those matching the pattern, else all.
fn choose(all: &[String], named: &[String], pattern: Option<&str>) -> Vec<String> {
    if !named.is_empty() {
        return named.to_vec();
    }
    all.iter()
        .filter(|c| pattern.is_none_or(|p| matches(p, c)))
        .cloned()
        .collect()
}

/// Whether `name` matches `pattern`, where `*` stands for any characters.
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    // Cut at the prefix and suffix themselves, never inside a character.
    let Some(mut rest) = name
        .strip_prefix(first)
        .and_then(|rest| rest.strip_suffix(last))
    else {
        return false;
    };
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Moonin's objects in one context, or why not, within `timeout`. Read on a thread of its
/// own with a runtime of its own: a credential plugin (`aws eks get-token`,
/// `gke-gcloud-auth-plugin`, `kubelogin`) runs as a command the client waits for without
/// yielding, and one waiting for a login must hold up neither the other contexts nor the
/// answer past `timeout`. A thread still waiting then is left behind; the process ends
/// without it.
async fn read_context(
    kubeconfig: &Kubeconfig,
    context: &str,
    needs: Needs,
    timeout: Duration,
) -> Result<Objects, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (kubeconfig, context) = (kubeconfig.clone(), context.to_string());
    std::thread::Builder::new()
        .name(format!("fleet-{context}"))
        .spawn(move || {
            let objects = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("no runtime: {e}"))
                .and_then(|rt| rt.block_on(connect_and_read(kubeconfig, &context, needs, timeout)));
            let _ = tx.send(objects);
        })
        .map_err(|e| format!("no thread: {e}"))?;
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(objects)) => objects,
        Ok(Err(_)) => Err("its reader ended without an answer".to_string()),
        Err(_) => Err(format!("no answer within {}s", timeout.as_secs())),
    }
}

/// [`read_context`]'s work: the context's client, then [`read`].
async fn connect_and_read(
    kubeconfig: Kubeconfig,
    context: &str,
    needs: Needs,
    timeout: Duration,
) -> Result<Objects, String> {
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| format!("its kubeconfig entry does not load: {e}"))?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    let client = Client::try_from(config).map_err(|e| format!("no client: {e}"))?;
    read(&client, needs).await
}

/// Lists the kinds the view needs, all at once.
async fn read(client: &Client, needs: Needs) -> Result<Objects, String> {
    let (discoveries, inventories, revisions) = tokio::try_join!(
        list::<ClusterDiscovery>(client, needs.discoveries),
        list::<NamespaceInventory>(client, needs.inventories),
        list::<WorkloadRevision>(client, needs.revisions),
    )?;
    let (templates, cluster_templates, envs, pools) = tokio::try_join!(
        list::<ScalingTemplate>(client, needs.templates),
        list::<ClusterScalingTemplate>(client, needs.templates),
        list::<SandboxEnv>(client, needs.sandboxes),
        list::<SandboxPool>(client, needs.sandboxes),
    )?;
    Ok(Objects {
        discoveries,
        inventories,
        revisions,
        templates,
        cluster_templates,
        envs,
        pools,
    })
}

/// Every object of kind `K` in every namespace (nothing when not `wanted`). A 404 means the
/// kind is not served: Moonin's CRDs are not installed there.
async fn list<K>(client: &Client, wanted: bool) -> Result<Vec<K>, String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    if !wanted {
        return Ok(Vec::new());
    }
    let plural = format!("{}.{}", K::plural(&()), K::group(&()));
    match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(format!(
            "{NO_MOONIN}: the API server serves no {plural} (Moonin's CRDs are not installed)"
        )),
        Err(e @ kube::Error::Api(_)) => Err(format!("listing {plural}: {}", brief(&e))),
        Err(e) => Err(format!("listing {plural}: {}", causes(&e))),
    }
}

/// An error and its causes in one line (`client error (Connect): tcp connect error:
/// Connection refused (os error 111)`), each said once.
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_chosen_by_name_or_pattern() {
        let all: Vec<String> = ["prod-eu-1", "prod-us-1", "staging-eu-1", "kind"]
            .map(String::from)
            .to_vec();
        assert_eq!(choose(&all, &[], None), all);
        assert_eq!(
            choose(&all, &[], Some("prod-*")),
            ["prod-eu-1", "prod-us-1"]
        );
        assert_eq!(
            choose(&all, &[], Some("*-eu-*")),
            ["prod-eu-1", "staging-eu-1"]
        );
        assert_eq!(choose(&all, &[], Some("kind")), ["kind"]);
        assert!(choose(&all, &[], Some("kin")).is_empty());
        assert_eq!(choose(&all, &[], Some("*")), all);
        assert_eq!(
            choose(&all, &[], Some("*1")),
            ["prod-eu-1", "prod-us-1", "staging-eu-1"]
        );
        // Named ones come as named, missing ones included (a row says so).
        let named = ["kind".to_string(), "gone".to_string()];
        assert_eq!(choose(&all, &named, Some("prod-*")), named);
        // A pattern longer than the name never matches by overlapping its ends.
        assert!(!matches("ab*ba", "aba"));
        // Names beyond ASCII: no cut inside a character.
        assert!(!matches("*x", "pé"));
        assert!(matches("*é", "pé"));
        assert!(matches("p*", "pé"));
        assert!(matches("é*ü", "é-ü"));
    }

    #[test]
    fn durations_read_like_kubectl() {
        use crate::cron::span_arg;
        assert_eq!(span_arg("1h"), Ok(SignedDuration::from_hours(1)));
        assert_eq!(span_arg("1h30m"), Ok(SignedDuration::from_mins(90)));
        assert!(span_arg("soon").unwrap_err().contains("soon"));
        assert_eq!(span_arg("1.5h"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(span_arg("250ms"), Ok(SignedDuration::from_millis(250)));
        for micro in ["5us", "5µs", "5μs"] {
            assert_eq!(
                span_arg(micro),
                Ok(SignedDuration::from_micros(5)),
                "{micro}"
            );
        }
        // Refused with a reason, never a panic, never read as something else.
        for odd in [
            "-30m",
            "NaNh",
            "infh",
            "1e400h",
            "9999999999999h",
            "876600000h",
        ] {
            assert!(span_arg(odd).is_err(), "{odd}");
        }
    }
}
