//! A namespace's Services, Ingresses, NetworkPolicies and RBAC bindings for its inventory
//! ([`super::namespace`]): the roles its bindings grant (loaded), the entries (pure, over
//! [`network`] and [`rbac`]) and the signals its Warning Events report, each about the
//! Service, the Ingress or the ServiceAccount.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ObjectReference;

use super::{
    inventory::Connections,
    namespace::{NamespaceSnapshot, ObjectSignals},
    network, rbac,
    rbac::{BindingView, RoleView},
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

/// The signals a published inventory part shows for its Services, Ingresses and the
/// ServiceAccounts its bindings name, keyed as [`NamespaceSnapshot::published_connections`].
pub fn published_signals(st: &NamespaceInventoryStatus, out: &mut HashMap<String, Vec<String>>) {
    for e in &st.services {
        out.insert(format!("Service/{}", e.name), e.signals.clone());
    }
    for e in &st.ingresses {
        out.insert(format!("Ingress/{}", e.name), e.signals.clone());
    }
    for signal in st.role_bindings.iter().flat_map(|b| &b.signals) {
        if let Some(account) = rbac::signal_account(signal) {
            out.entry(format!("ServiceAccount/{account}"))
                .or_default()
                .push(signal.clone());
        }
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

/// The signals of each Service and Ingress (none ends an earlier report), and of each
/// ServiceAccount of the namespace a binding lists: its `PrivilegedServiceAccount` hazards.
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
    for b in &c.role_bindings {
        for subject in &b.subjects {
            if let Some(name) = subject.strip_prefix("ServiceAccount/")
                && !name.contains('/')
            {
                accounts.entry(name).or_default();
            }
        }
        for signal in &b.signals {
            if let Some(account) = rbac::signal_account(signal) {
                accounts.entry(account).or_default().push(signal.clone());
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
    services.chain(ingresses).chain(accounts).collect()
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
