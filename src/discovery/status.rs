//! The cluster status: load what the `ClusterDiscovery` status says ([`load`]), build it
//! ([`decide`], pure), and write it only when it changed ([`write`]); every other
//! ClusterDiscovery is told it is not in charge ([`report_not_in_charge`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{
    cluster,
    errors::gone_is_done,
    names::CONTROLLER,
    names::{condition_reasons, condition_types},
    progress::Progress,
    shared::Shared,
    view::NodeView,
};
use crate::api::{
    conditions::{self, Desired, types},
    discovery::{ClusterDiscovery, ClusterDiscoveryStatus, Sourced, Totals},
    field_manager,
};
use crate::runtime::facts::{Fact, INVENTORY_FACTS, Series};

/// The API server's version, asked again at the first rebuild once [`VERSION_TTL`] has
/// passed (so a control-plane upgrade shows at the next rebuild after it), and whether the
/// API server answered when last asked: `ApiReachable` until the heartbeat's first beat.
#[derive(Debug, Default)]
pub struct ApiProbe {
    version: Option<String>,
    asked: Option<Instant>,
    reachable: Option<Result<(), String>>,
}

/// How long a version the API server gave stands before it is asked for again.
pub const VERSION_TTL: Duration = Duration::from_secs(600);

impl ApiProbe {
    /// Whether to ask for the version at `now`: not known yet, or known for
    /// [`VERSION_TTL`].
    fn due(&self, now: Instant) -> bool {
        self.version.is_none() || self.asked.is_none_or(|at| now >= at + VERSION_TTL)
    }

    /// Asks for the version when it is due. A failed ask keeps the version known before.
    async fn probe(&mut self, client: &kube::Client) {
        let now = Instant::now();
        if !self.due(now) {
            return;
        }
        self.asked = Some(now);
        match client.apiserver_version().await {
            Ok(v) => {
                self.version = Some(v.git_version);
                self.reachable = Some(Ok(()));
            }
            Err(e) => self.reachable = Some(Err(format!("GET /version failed: {e}"))),
        }
    }
}

/// Whether the Secrets an opt-in part of discovery reads are read.
#[derive(Debug, Clone, PartialEq)]
pub enum SecretAccess {
    /// Switched off in the spec.
    Disabled,
    /// Reading them is refused: why.
    Denied(String),
    /// They are read.
    Readable,
}

/// What the cluster status is built from.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    /// The cluster's name and where it came from.
    pub name: Sourced,
    /// The Nodes.
    pub nodes: Vec<NodeView>,
    /// The API server's version, if known.
    pub version: Option<String>,
    /// Whether the API server answered last (None: not asked yet).
    pub reachable: Option<Result<(), String>>,
    /// Whether Helm release Secrets are read.
    pub helm: SecretAccess,
    /// Whether the Secrets workloads refer to are read.
    pub secrets: SecretAccess,
    /// The totals.
    pub totals: Totals,
    /// How many of the `totals.namespaces` inventoried namespaces have their inventory
    /// written.
    pub written: i32,
    /// Namespaces whose inventory is split into parts.
    pub split: Vec<String>,
    /// The ClusterDiscovery's generation.
    pub generation: Option<i64>,
    /// Its status now.
    pub current: ClusterDiscoveryStatus,
    /// When it was loaded.
    pub now: Timestamp,
}

/// The fleet facts of a cluster status: its totals and the workloads showing each signal.
pub fn facts(totals: &Totals, progress: &Progress) -> Vec<Fact> {
    let inventory = [
        totals.namespaces,
        totals.deployments,
        totals.images,
        totals.cron_jobs,
        totals.error_signals,
    ];
    let mut out: Vec<Fact> = INVENTORY_FACTS
        .iter()
        .zip(inventory)
        .map(|(fact, n)| {
            Fact::new(
                Series::Inventory,
                vec![("fact", (*fact).to_string())],
                i64::from(n),
            )
        })
        .collect();
    out.extend(
        progress
            .workloads_by_signal()
            .into_iter()
            .map(|(signal, n)| Fact::new(Series::WorkloadsWithSignal, vec![("signal", signal)], n)),
    );
    out
}

/// Loads the cluster status's inputs: the stores, what the rebuilds established, and the
/// API server's answers (its version is asked for when due, [`ApiProbe`]).
pub async fn load(
    shared: &Shared,
    cd: &ClusterDiscovery,
    live: &BTreeSet<String>,
    excluded: &BTreeSet<&str>,
    progress: &Progress,
    probe: &mut ApiProbe,
) -> ClusterSnapshot {
    let s = &shared.stores;
    probe.probe(&shared.client).await;
    let name = match &cd.spec.cluster_name {
        Some(n) => Sourced {
            value: n.clone(),
            source: "spec.clusterName".into(),
        },
        None => Sourced {
            value: shared.ctx.cluster_name.clone(),
            source: "--cluster-name".into(),
        },
    };
    let inventoried: Vec<&String> = live
        .iter()
        .filter(|n| !excluded.contains(n.as_str()))
        .collect();
    let outside = |ns: &str| excluded.contains(ns);
    let access = |enabled: bool, denied: Option<String>| match (enabled, denied) {
        (false, _) => SecretAccess::Disabled,
        (true, Some(why)) => SecretAccess::Denied(why),
        (true, None) => SecretAccess::Readable,
    };
    let helm = access(cd.spec.helm.enabled, shared.helm.access.denied());
    let secrets = access(
        cd.spec.secret_changes.enabled,
        shared.secret_access.denied(),
    );
    ClusterSnapshot {
        name,
        nodes: s.nodes.all(),
        version: probe.version.clone(),
        // From the heartbeat; until its first beat, from the version probe.
        reachable: shared
            .reachability
            .last()
            .or_else(|| probe.reachable.clone()),
        helm,
        secrets,
        totals: Totals {
            namespaces: inventoried.len() as i32,
            deployments: s
                .deployments
                .all()
                .iter()
                .filter(|d| !outside(&d.namespace))
                .count() as i32,
            images: progress.images() as i32,
            cron_jobs: s
                .cron_jobs
                .all()
                .iter()
                .filter(|c| !outside(&c.namespace))
                .count() as i32,
            error_signals: progress.error_signals(),
        },
        written: progress.written_of(&inventoried) as i32,
        split: progress.split(),
        generation: cd.metadata.generation,
        current: cd.status.clone().unwrap_or_default(),
        now: Timestamp::now(),
    }
}

/// The cluster status: metadata, node groups, totals and conditions.
pub fn decide(s: &ClusterSnapshot) -> ClusterDiscoveryStatus {
    ClusterDiscoveryStatus {
        observed_generation: s.generation,
        cluster: Some(cluster::metadata(
            &s.nodes,
            s.name.clone(),
            s.version.clone(),
        )),
        node_groups: cluster::node_groups(&s.nodes),
        totals: Some(s.totals.clone()),
        conditions: conditions::merge(&s.current.conditions, &desired(s), s.generation, s.now),
    }
}

/// The conditions the cluster status should have.
fn desired(s: &ClusterSnapshot) -> Vec<Desired> {
    let complete = s.written == s.totals.namespaces;
    let api = match &s.reachable {
        Some(Err(e)) => Desired::new(
            condition_types::API_REACHABLE,
            false,
            condition_reasons::UNREACHABLE,
            e.clone(),
        ),
        _ => Desired::new(
            condition_types::API_REACHABLE,
            true,
            condition_reasons::REACHABLE,
            "the API server answers",
        ),
    };
    vec![
        Desired::new(
            types::READY,
            complete,
            if complete {
                condition_reasons::INVENTORIED
            } else {
                condition_reasons::INVENTORYING
            },
            format!(
                "{} of {} namespaces inventoried",
                s.written, s.totals.namespaces
            ),
        ),
        api,
        // In charge: whatever said otherwise while an older one was is over.
        Desired::new(types::STALLED, false, conditions::reasons::RECONCILED, ""),
        Desired::new(
            condition_types::INVENTORY_COMPLETE,
            complete,
            if complete {
                condition_reasons::COMPLETE
            } else {
                condition_reasons::IN_PROGRESS
            },
            "every watched kind has listed and every namespace's inventory is written",
        ),
        helm_condition(&s.helm),
        secret_condition(&s.secrets),
        truncated_condition(&s.split),
    ]
}

fn helm_condition(helm: &SecretAccess) -> Desired {
    access_condition(
        condition_types::HELM_ACCESS,
        helm,
        "Helm discovery is off (spec.helm.enabled)",
        "Helm release Secrets are read and sanitised",
    )
}

fn secret_condition(secrets: &SecretAccess) -> Desired {
    access_condition(
        condition_types::SECRET_ACCESS,
        secrets,
        "Secret change tracking is off (spec.secretChanges.enabled)",
        "the Secrets workloads refer to are watched, reduced to key names",
    )
}

/// The condition of an opt-in reading of Secrets: off, refused or working.
fn access_condition(
    type_: &'static str,
    access: &SecretAccess,
    off: &'static str,
    reading: &'static str,
) -> Desired {
    match access {
        SecretAccess::Disabled => Desired::new(type_, false, condition_reasons::DISABLED, off),
        SecretAccess::Denied(why) => Desired::new(
            type_,
            false,
            condition_reasons::FORBIDDEN,
            format!(
                "{why}; grant the opt-in Secrets role (config/rbac-helm; with the Helm chart, controllers.discovery.helmReleases=true)"
            ),
        ),
        SecretAccess::Readable => {
            Desired::new(type_, true, condition_reasons::SECRETS_READABLE, reading)
        }
    }
}

fn truncated_condition(split: &[String]) -> Desired {
    if split.is_empty() {
        Desired::new(
            condition_types::TRUNCATED,
            false,
            condition_reasons::COMPLETE,
            "every inventory fits one object",
        )
    } else {
        Desired::new(
            condition_types::TRUNCATED,
            true,
            condition_reasons::SPLIT,
            format!("split into parts: {}", split.join(", ")),
        )
    }
}

/// Writes the cluster status when it says something new, and only as the leader.
pub async fn write(
    shared: &Shared,
    cd: &ClusterDiscovery,
    current: &ClusterDiscoveryStatus,
    next: &ClusterDiscoveryStatus,
) -> Result<(), kube::Error> {
    let same = conditions::same_status(current, next, |st| &mut st.conditions);
    if same || !shared.ctx.leadership.is_leader() {
        return Ok(());
    }
    let api: Api<ClusterDiscovery> = Api::all(shared.client.clone());
    let body = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterDiscovery",
        "status": next,
    });
    shared
        .ctx
        .metrics
        .wrote(CONTROLLER, "ClusterDiscovery/status");
    api.patch_status(
        &cd.name_any(),
        &PatchParams::apply(field_manager::DISCOVERY).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// The conditions of a ClusterDiscovery that is not the one in charge (`in_charge`):
/// `Ready=False` and `Stalled=True` with reason `NotInCharge`, so a second one does not look
/// like it works. None when it says so already.
pub fn not_in_charge(
    in_charge: &ClusterDiscovery,
    other: &ClusterDiscovery,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let message = format!(
        "ClusterDiscovery {} is in charge of this cluster (the oldest); this one does nothing until it is the oldest",
        in_charge.name_any()
    );
    let current = other.status.clone().unwrap_or_default();
    let next = conditions::merge(
        &current.conditions,
        &[
            Desired::new(
                types::READY,
                false,
                condition_reasons::NOT_IN_CHARGE,
                message.clone(),
            ),
            Desired::new(
                types::STALLED,
                true,
                condition_reasons::NOT_IN_CHARGE,
                message,
            ),
        ],
        other.metadata.generation,
        now,
    );
    let same = conditions::equal_ignoring_time(&current.conditions, &next)
        && current.observed_generation == other.metadata.generation;
    (!same).then_some(next)
}

/// Gives every ClusterDiscovery but the one in charge the conditions of
/// [`not_in_charge`].
pub async fn report_not_in_charge(
    shared: &Shared,
    cd: &ClusterDiscovery,
) -> Result<(), kube::Error> {
    let now = Timestamp::now();
    let api: Api<ClusterDiscovery> = Api::all(shared.client.clone());
    for other in shared.stores.discoveries.state() {
        if other.uid() == cd.uid() || other.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(next) = not_in_charge(cd, &other, now) else {
            continue;
        };
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "status": {"observedGeneration": other.metadata.generation, "conditions": next},
        });
        shared
            .ctx
            .metrics
            .wrote(CONTROLLER, "ClusterDiscovery/status");
        gone_is_done(
            api.patch_status(
                &other.name_any(),
                &PatchParams::apply(field_manager::DISCOVERY).force(),
                &Patch::Apply(&body),
            )
            .await,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_asked_until_known_then_again_once_it_is_old() {
        let t0 = Instant::now();
        let mut p = ApiProbe::default();
        assert!(p.due(t0), "never asked");
        p.asked = Some(t0);
        assert!(p.due(t0), "asked, no answer yet");
        p.version = Some("v1.35.0".into());
        assert!(!p.due(t0 + VERSION_TTL - Duration::from_secs(1)));
        assert!(p.due(t0 + VERSION_TTL), "asked again once old");
    }

    fn now() -> Timestamp {
        "2026-03-01T00:00:00Z".parse().unwrap()
    }

    fn snapshot() -> ClusterSnapshot {
        ClusterSnapshot {
            name: Sourced {
                value: "prod".into(),
                source: "spec.clusterName".into(),
            },
            nodes: vec![NodeView {
                name: "n1".into(),
                zone: Some("z1".into()),
                ready: true,
                ..Default::default()
            }],
            version: Some("v1.36.3".into()),
            reachable: None,
            helm: SecretAccess::Disabled,
            secrets: SecretAccess::Disabled,
            totals: Totals {
                namespaces: 3,
                deployments: 5,
                images: 4,
                cron_jobs: 1,
                error_signals: 2,
            },
            written: 3,
            split: vec![],
            generation: Some(2),
            current: ClusterDiscoveryStatus::default(),
            now: now(),
        }
    }

    /// `(type, status, reason)` of each condition, and the `Ready` and `Truncated`
    /// messages.
    fn said(status: &ClusterDiscoveryStatus) -> (Vec<(String, String, String)>, Vec<String>) {
        let conditions = status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        let messages = status
            .conditions
            .iter()
            .filter(|c| c.type_ == types::READY || c.type_ == condition_types::TRUNCATED)
            .map(|c| c.message.clone())
            .collect();
        (conditions, messages)
    }

    fn c(type_: &str, status: &str, reason: &str) -> (String, String, String) {
        (type_.into(), status.into(), reason.into())
    }

    #[test]
    fn a_complete_inventory_is_ready() {
        let status = decide(&snapshot());
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.totals, Some(snapshot().totals));
        assert_eq!(status.node_groups.len(), 1);
        assert_eq!(
            said(&status),
            (
                vec![
                    c("Ready", "True", "Inventoried"),
                    c("ApiReachable", "True", "Reachable"),
                    c("Stalled", "False", "Reconciled"),
                    c("InventoryComplete", "True", "Complete"),
                    c("HelmAccess", "False", "Disabled"),
                    c("SecretAccess", "False", "Disabled"),
                    c("Truncated", "False", "Complete"),
                ],
                vec![
                    "3 of 3 namespaces inventoried".to_string(),
                    "every inventory fits one object".to_string()
                ]
            )
        );
    }

    #[test]
    fn an_unfinished_split_unreachable_cluster_with_helm_denied_says_so() {
        let s = ClusterSnapshot {
            written: 1,
            split: vec!["big".into(), "bigger".into()],
            reachable: Some(Err("renewing the heartbeat Lease failed".into())),
            helm: SecretAccess::Denied("listing Helm release Secrets is forbidden".into()),
            secrets: SecretAccess::Denied("listing Secrets is forbidden".into()),
            ..snapshot()
        };
        let status = decide(&s);
        assert_eq!(
            said(&status),
            (
                vec![
                    c("Ready", "False", "Inventorying"),
                    c("ApiReachable", "False", "Unreachable"),
                    c("Stalled", "False", "Reconciled"),
                    c("InventoryComplete", "False", "InProgress"),
                    c("HelmAccess", "False", "Forbidden"),
                    c("SecretAccess", "False", "Forbidden"),
                    c("Truncated", "True", "Split"),
                ],
                vec![
                    "1 of 3 namespaces inventoried".to_string(),
                    "split into parts: big, bigger".to_string()
                ]
            )
        );
        let readable = decide(&ClusterSnapshot {
            helm: SecretAccess::Readable,
            secrets: SecretAccess::Readable,
            ..snapshot()
        });
        let conditions = said(&readable).0;
        assert!(conditions.contains(&c("HelmAccess", "True", "SecretsReadable")));
        assert!(conditions.contains(&c("SecretAccess", "True", "SecretsReadable")));
    }

    #[test]
    fn the_same_status_at_another_time_is_no_write() {
        let first = decide(&snapshot());
        let later = ClusterSnapshot {
            current: first.clone(),
            now: "2026-03-02T00:00:00Z".parse().unwrap(),
            ..snapshot()
        };
        assert!(conditions::same_status(&first, &decide(&later), |s| &mut s.conditions));
        let changed = ClusterSnapshot {
            written: 2,
            ..later
        };
        assert!(!conditions::same_status(&first, &decide(&changed), |s| {
            &mut s.conditions
        }));
    }

    fn discovery(name: &str, status: Option<ClusterDiscoveryStatus>) -> ClusterDiscovery {
        let mut cd: ClusterDiscovery = serde_json::from_value(json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "ClusterDiscovery",
            "metadata": {"name": name, "generation": 1},
            "spec": {},
        }))
        .unwrap();
        cd.status = status;
        cd
    }

    #[test]
    fn a_second_discovery_is_told_once_that_it_is_not_in_charge() {
        let first = discovery("first", None);
        let second = discovery("second", None);
        let Some(conditions) = not_in_charge(&first, &second, now()) else {
            panic!("the second one is told");
        };
        let told: Vec<(&str, &str, &str)> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            told,
            [
                ("Ready", "False", "NotInCharge"),
                ("Stalled", "True", "NotInCharge")
            ]
        );
        let told = discovery(
            "second",
            Some(ClusterDiscoveryStatus {
                observed_generation: Some(1),
                conditions,
                ..Default::default()
            }),
        );
        assert_eq!(not_in_charge(&first, &told, now()), None);
    }
}
