//! A namespace's Services, Ingresses, NetworkPolicies and RBAC bindings for its inventory
//! ([`super::namespace`]): the roles its bindings grant (loaded), the entries (pure, over
//! [`network`] and [`rbac`]) and the signals its Warning Events report, each about the
//! Service, the Ingress or the ServiceAccount.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;

use super::{
    inventory::Connections,
    network, rbac,
    rbac::{BindingView, RoleView},
    snapshot::{NamespaceSnapshot, ObjectSignals},
    stores::Stores,
    view::{DeploymentView, PodView},
};
use crate::api::discovery::NamespaceInventoryStatus;

/// The roles `bindings` grant that exist, keyed by `(kind, name)`.
pub fn granted_roles(
    s: &Stores,
    ns: &str,
    role_bindings: &[(String, BindingView)],
    cluster_role_bindings: &[(String, BindingView)],
) -> HashMap<(String, String), RoleView> {
    role_bindings
        .iter()
        .chain(cluster_role_bindings)
        .filter_map(|(_, b)| {
            let role = match &*b.role_kind {
                "Role" => s.roles.read(|i| i.get(ns, &b.role)),
                _ => s.cluster_roles.read(|i| i.get("", &b.role)),
            }?;
            Some(((b.role_kind.to_string(), b.role.to_string()), role))
        })
        .collect()
}

/// The signals a published inventory part of namespace `ns` shows for its Services,
/// Ingresses, the ServiceAccounts its bindings name and the namespace itself, keyed as
/// [`NamespaceSnapshot::published_connections`].
pub fn published_signals(
    ns: &str,
    st: &NamespaceInventoryStatus,
    out: &mut HashMap<String, Vec<String>>,
) {
    for e in &st.services {
        out.insert(format!("Service/{}", e.name), e.signals.clone());
    }
    for e in &st.ingresses {
        out.insert(format!("Ingress/{}", e.name), e.signals.clone());
    }
    for signal in st.role_bindings.iter().flat_map(|b| &b.signals) {
        out.entry(signal_object(ns, signal))
            .or_default()
            .push(signal.clone());
    }
}

/// What a binding's signal is about, as `Kind/name`: the ServiceAccount it names, or the
/// namespace when it names a group of all its ServiceAccounts.
fn signal_object(ns: &str, signal: &str) -> String {
    match rbac::signal_account(signal) {
        Some(account) => format!("ServiceAccount/{account}"),
        None => format!("Namespace/{ns}"),
    }
}

/// The namespace's Services, Ingresses, NetworkPolicies and RBAC bindings.
pub fn connections(s: &NamespaceSnapshot) -> Connections {
    let deployments: Vec<&DeploymentView> = s.deployments.iter().map(|d| &**d).collect();
    let pods: Vec<&PodView> = s.pods.iter().collect();
    let service_names: Vec<&str> = s.services.iter().map(|v| v.name.as_str()).collect();
    Connections {
        services: network::service_entries(&s.services, &deployments, &pods),
        ingresses: network::ingress_entries(&s.ingresses, &service_names),
        network_policies: network::network_policy_entries(&s.network_policies, &deployments),
        role_bindings: rbac::binding_entries(
            &s.namespace,
            &s.role_bindings,
            &s.cluster_role_bindings,
            |kind, name| {
                s.roles
                    .get(&(kind.to_string(), name.to_string()))
                    .map(|r| r.wildcard)
            },
        ),
    }
}

/// The signals of each Service and Ingress (none ends an earlier report), of each
/// ServiceAccount of the namespace a binding lists (its `PrivilegedServiceAccount` hazards),
/// and of the namespace itself (those of a group all its ServiceAccounts are in).
pub fn signals(s: &NamespaceSnapshot, c: &Connections) -> Vec<ObjectSignals> {
    let object = |api_version: &str, kind: &str, name: &str, signals: Vec<String>| {
        let key = format!("{kind}/{name}");
        ObjectSignals {
            regarding: ObjectReference {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
                namespace: Some(s.namespace.clone()),
                name: Some(name.into()),
                ..Default::default()
            },
            signals,
            published: s.published_connections.get(&key).cloned(),
        }
    };
    let mut accounts: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut of_namespace = Vec::new();
    for b in &c.role_bindings {
        for subject in &b.subjects {
            if let Some(name) = subject.strip_prefix("ServiceAccount/")
                && !name.contains('/')
            {
                accounts.entry(name).or_default();
            }
        }
        for signal in &b.signals {
            match rbac::signal_account(signal) {
                Some(account) => accounts.entry(account).or_default().push(signal.clone()),
                None => of_namespace.push(signal.clone()),
            }
        }
    }
    let services = c
        .services
        .iter()
        .map(|e| object("v1", "Service", &e.name, e.signals.clone()));
    let ingresses = c.ingresses.iter().map(|e| {
        object(
            "networking.k8s.io/v1",
            "Ingress",
            &e.name,
            e.signals.clone(),
        )
    });
    let accounts = accounts
        .into_iter()
        .map(|(name, signals)| object("v1", "ServiceAccount", name, signals));
    // A Namespace has no namespace; the reference carries it all the same, so that the
    // Event is in the namespace it is about, where `kubectl get events -n` shows it.
    let namespace = object("v1", "Namespace", &s.namespace, of_namespace);
    services
        .chain(ingresses)
        .chain(accounts)
        .chain([namespace])
        .collect()
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
