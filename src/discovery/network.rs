//! Services, Ingresses and NetworkPolicies: their projections, and what a namespace's
//! inventory says of them — which Deployments each Service fronts, what each Ingress routes
//! to, which Deployments each NetworkPolicy selects and so isolates. Everything here is pure.
//!
//! A Service fronts a Deployment when every label of its selector is on the Deployment's Pod
//! template. A NetworkPolicy's `podSelector` is read in full (`matchLabels` and the four
//! `matchExpressions` operators); an operator Moonin does not know selects nothing, so no
//! isolation is claimed that the API server might not enforce.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::{
    core::v1::Service,
    networking::v1::{Ingress, IngressBackend, NetworkPolicy},
};
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString};
use kube::ResourceExt;

use super::signals::reasons;
use super::view::{DeploymentView, Labels, PodView};
use crate::api::discovery::{DeploymentEntry, IngressEntry, NetworkPolicyEntry, ServiceEntry};

/// A Service, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceView {
    /// Name.
    pub name: String,
    /// `spec.type` (`ClusterIP` when unset).
    pub type_: Box<str>,
    /// `spec.selector`; `None` when it has none (or an empty one), or is an ExternalName:
    /// its endpoints are not the Pods of a selector.
    pub selector: Option<Labels>,
    /// Ports as the inventory shows them, joined by `,`.
    pub ports: Box<str>,
}

/// Projects a Service.
pub fn service(s: &Service) -> ServiceView {
    let spec = s.spec.as_ref();
    let ports: Vec<String> = spec
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            let target = match &p.target_port {
                Some(IntOrString::Int(t)) if *t != p.port => format!("→{t}"),
                Some(IntOrString::String(t)) => format!("→{t}"),
                _ => String::new(),
            };
            let name = p
                .name
                .as_deref()
                .map(|n| format!("{n} "))
                .unwrap_or_default();
            format!("{name}{}/{protocol}{target}", p.port)
        })
        .collect();
    ServiceView {
        name: s.name_any(),
        type_: spec
            .and_then(|s| s.type_.as_deref())
            .unwrap_or("ClusterIP")
            .into(),
        // An ExternalName Service's selector selects nothing: it is a DNS name.
        selector: spec
            .filter(|s| s.type_.as_deref() != Some("ExternalName"))
            .and_then(|s| s.selector.as_ref())
            .filter(|m| !m.is_empty())
            .map(Labels::from),
        ports: ports.join(",").into_boxed_str(),
    }
}

/// Whether every label of `selector` is in `labels` with an equal value (an empty selector
/// is a subset of anything).
pub fn subset(selector: &Labels, labels: &Labels) -> bool {
    selector.pairs().all(|(k, v)| labels.get(k) == Some(v))
}

/// An Ingress, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngressView {
    /// Name.
    pub name: String,
    /// `spec.ingressClassName`.
    pub class: Option<String>,
    /// Hosts of its rules, sorted and unique (`*` for a rule without one).
    pub hosts: Vec<String>,
    /// Whether it has a `tls` section.
    pub tls: bool,
    /// Its backends, sorted and unique: `Service/<name>:<port>` or `<kind>/<name>`.
    pub backends: Vec<String>,
}

/// A backend as the inventory shows it.
fn backend(b: &IngressBackend) -> Option<String> {
    if let Some(s) = &b.service {
        let port = s
            .port
            .as_ref()
            .and_then(|p| p.number.map(|n| n.to_string()).or_else(|| p.name.clone()));
        return Some(match port {
            Some(port) => format!("Service/{}:{port}", s.name),
            None => format!("Service/{}", s.name),
        });
    }
    b.resource
        .as_ref()
        .map(|r| format!("{}/{}", r.kind, r.name))
}

/// The Service a backend of [`IngressView::backends`] names, if it names one.
pub fn backend_service(backend: &str) -> Option<&str> {
    let rest = backend.strip_prefix("Service/")?;
    Some(rest.split_once(':').map_or(rest, |(name, _)| name))
}

/// Projects an Ingress.
pub fn ingress(i: &Ingress) -> IngressView {
    let spec = i.spec.as_ref();
    let rules = spec.and_then(|s| s.rules.as_ref()).into_iter().flatten();
    let mut hosts = BTreeSet::new();
    let mut backends = BTreeSet::new();
    for r in rules {
        hosts.insert(r.host.clone().unwrap_or_else(|| "*".into()));
        let paths = r.http.as_ref().map(|h| h.paths.as_slice()).unwrap_or(&[]);
        backends.extend(paths.iter().filter_map(|p| backend(&p.backend)));
    }
    backends.extend(
        spec.and_then(|s| s.default_backend.as_ref())
            .and_then(backend),
    );
    IngressView {
        name: i.name_any(),
        class: spec.and_then(|s| s.ingress_class_name.clone()),
        hosts: hosts.into_iter().collect(),
        tls: spec
            .and_then(|s| s.tls.as_ref())
            .is_some_and(|t| !t.is_empty()),
        backends: backends.into_iter().collect(),
    }
}

/// A `matchExpressions` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `In`.
    In,
    /// `NotIn`.
    NotIn,
    /// `Exists`.
    Exists,
    /// `DoesNotExist`.
    DoesNotExist,
    /// Any other: selects nothing.
    Unknown,
}

/// A label selector: `matchLabels` and `matchExpressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `matchLabels`.
    pub labels: Labels,
    /// `matchExpressions`: key, operator, values.
    pub expressions: Vec<(String, Op, Vec<String>)>,
}

impl Selector {
    /// Reads a label selector.
    pub fn from_label_selector(s: &LabelSelector) -> Self {
        let op = |o: &str| match o {
            "In" => Op::In,
            "NotIn" => Op::NotIn,
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            _ => Op::Unknown,
        };
        Selector {
            labels: s
                .match_labels
                .as_ref()
                .map(Labels::from)
                .unwrap_or_default(),
            expressions: s
                .match_expressions
                .iter()
                .flatten()
                .map(|e| {
                    (
                        e.key.clone(),
                        op(&e.operator),
                        e.values.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }

    /// Whether it selects Pods carrying `labels` (an empty selector selects every Pod).
    pub fn matches(&self, labels: &Labels) -> bool {
        subset(&self.labels, labels)
            && self.expressions.iter().all(|(key, op, values)| {
                let value = labels.get(key);
                match op {
                    Op::In => value.is_some_and(|v| values.iter().any(|x| x == v)),
                    Op::NotIn => value.is_none_or(|v| values.iter().all(|x| x != v)),
                    Op::Exists => value.is_some(),
                    Op::DoesNotExist => value.is_none(),
                    Op::Unknown => false,
                }
            })
    }

    /// The selector as text: `key=value`, `key in (a,b)`, `key notin (a,b)`, `key`, `!key`,
    /// joined by `,`; `*` when empty.
    pub fn text(&self) -> String {
        let mut parts: Vec<String> = self
            .labels
            .pairs()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for (key, op, values) in &self.expressions {
            parts.push(match op {
                Op::In => format!("{key} in ({})", values.join(",")),
                Op::NotIn => format!("{key} notin ({})", values.join(",")),
                Op::Exists => key.clone(),
                Op::DoesNotExist => format!("!{key}"),
                Op::Unknown => format!("{key} ?"),
            });
        }
        if parts.is_empty() {
            "*".into()
        } else {
            parts.join(",")
        }
    }
}

/// A NetworkPolicy, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicyView {
    /// Name.
    pub name: String,
    /// `spec.podSelector`.
    pub selector: Selector,
    /// Whether it isolates the selected Pods for ingress.
    pub ingress: bool,
    /// Whether it isolates the selected Pods for egress.
    pub egress: bool,
}

/// Projects a NetworkPolicy. Without `policyTypes` it isolates for ingress, and for egress
/// too when it has egress rules (the API's rule).
pub fn network_policy(p: &NetworkPolicy) -> NetworkPolicyView {
    let spec = p.spec.as_ref();
    let types = spec.and_then(|s| s.policy_types.as_ref());
    let (ingress, egress) = match types {
        Some(t) => (
            t.iter().any(|t| t == "Ingress"),
            t.iter().any(|t| t == "Egress"),
        ),
        None => (true, spec.is_some_and(|s| s.egress.is_some())),
    };
    NetworkPolicyView {
        name: p.name_any(),
        selector: spec
            .and_then(|s| s.pod_selector.as_ref())
            .map(Selector::from_label_selector)
            .unwrap_or_default(),
        ingress,
        egress,
    }
}

/// The Services of a namespace: the Deployments each fronts, and `ServiceSelectsNothing`
/// for one with a selector that matches no Deployment's Pod template and no Pod. Sorted by
/// name.
///
/// A namespace with thousands of Deployments and as many Services stays linear: each
/// selector is checked only against the Deployments carrying its first label.
pub fn service_entries(
    services: &[ServiceView],
    deployments: &[&DeploymentView],
    pods: &[&PodView],
) -> Vec<ServiceEntry> {
    let mut by_label: HashMap<(&str, &str), Vec<&DeploymentView>> = HashMap::new();
    for d in deployments {
        for pair in d.template_labels.pairs() {
            by_label.entry(pair).or_default().push(d);
        }
    }
    let mut out: Vec<ServiceEntry> = services
        .iter()
        .map(|s| {
            let fronts: Vec<String> = s.selector.as_ref().map_or(Vec::new(), |sel| {
                let candidates = sel.pairs().next().and_then(|first| by_label.get(&first));
                candidates
                    .into_iter()
                    .flatten()
                    .filter(|d| subset(sel, &d.template_labels))
                    .map(|d| d.name.clone())
                    .collect()
            });
            let selects_nothing = s.selector.as_ref().is_some_and(|sel| {
                fronts.is_empty() && !pods.iter().any(|p| subset(sel, &p.labels))
            });
            ServiceEntry {
                name: s.name.clone(),
                type_: s.type_.to_string(),
                selector: s.selector.as_ref().map(|l| l.as_str().to_string()),
                ports: s
                    .ports
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect(),
                deployments: sorted(fronts),
                signals: if selects_nothing {
                    vec![reasons::SERVICE_SELECTS_NOTHING.to_string()]
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The Ingresses of a namespace: `BackendNotFound: Service/<name>` for each backend
/// Service that does not exist in it (`services`: the names of its Services). Resource
/// backends are listed, not judged. Sorted by name.
pub fn ingress_entries(ingresses: &[IngressView], services: &[&str]) -> Vec<IngressEntry> {
    let mut out: Vec<IngressEntry> = ingresses
        .iter()
        .map(|i| {
            let missing: BTreeSet<&str> = i
                .backends
                .iter()
                .filter_map(|b| backend_service(b))
                .filter(|s| !services.contains(s))
                .collect();
            IngressEntry {
                name: i.name.clone(),
                class: i.class.clone(),
                hosts: i.hosts.clone(),
                tls: i.tls,
                backends: i.backends.clone(),
                signals: missing
                    .into_iter()
                    .map(|s| format!("{}: Service/{s}", reasons::BACKEND_NOT_FOUND))
                    .collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The NetworkPolicies of a namespace, each with the Deployments whose Pod template it
/// selects. Sorted by name.
pub fn network_policy_entries(
    policies: &[NetworkPolicyView],
    deployments: &[&DeploymentView],
) -> Vec<NetworkPolicyEntry> {
    let mut out: Vec<NetworkPolicyEntry> = policies
        .iter()
        .map(|p| NetworkPolicyEntry {
            name: p.name.clone(),
            policy_types: policy_types(p.ingress, p.egress),
            pod_selector: p.selector.text(),
            deployments: sorted(
                deployments
                    .iter()
                    .filter(|d| p.selector.matches(&d.template_labels))
                    .map(|d| d.name.clone())
                    .collect(),
            ),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn policy_types(ingress: bool, egress: bool) -> Vec<String> {
    [(ingress, "Ingress"), (egress, "Egress")]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, t)| t.to_string())
        .collect()
}

/// Fills in each Deployment entry the Services that front it and the traffic the
/// namespace's NetworkPolicies isolate its Pods for.
pub fn annotate_deployments(
    entries: &mut [DeploymentEntry],
    deployments: &[&DeploymentView],
    services: &[ServiceEntry],
    policies: &[NetworkPolicyView],
) {
    let mut fronted: HashMap<&str, Vec<String>> = HashMap::new();
    for s in services {
        for d in &s.deployments {
            fronted.entry(d).or_default().push(s.name.clone());
        }
    }
    for e in entries {
        e.services = fronted.remove(e.name.as_str()).unwrap_or_default();
        let Some(d) = deployments.iter().find(|d| d.name == e.name) else {
            continue;
        };
        let selecting: Vec<&NetworkPolicyView> = policies
            .iter()
            .filter(|p| p.selector.matches(&d.template_labels))
            .collect();
        e.isolation = policy_types(
            selecting.iter().any(|p| p.ingress),
            selecting.iter().any(|p| p.egress),
        );
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
