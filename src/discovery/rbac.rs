//! Roles, ClusterRoles, RoleBindings and ClusterRoleBindings: their projections, and a
//! namespace's RBAC summary — which binding grants which role to whom — with the hazard of a
//! ServiceAccount of the namespace that holds `cluster-admin` or a role with a wildcard rule.
//! Everything here is pure.
//!
//! A namespace's bindings are its RoleBindings (every subject) and the ClusterRoleBindings
//! that reach its ServiceAccounts (only those subjects are listed): by naming one, or, for a
//! binding that is not the API server's own, by naming a group every ServiceAccount of the
//! namespace is in (`system:serviceaccounts:<namespace>`, `system:serviceaccounts`,
//! `system:authenticated`).

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::ResourceExt;

use super::signals::reasons;
use crate::api::discovery::RoleBindingEntry;

/// The ClusterRole that grants everything.
pub const CLUSTER_ADMIN: &str = "cluster-admin";

/// The group of the ServiceAccounts of one namespace: this prefix and the namespace.
const ACCOUNTS_OF: &str = "system:serviceaccounts:";

/// Groups every ServiceAccount of every namespace is in.
const EVERY_ACCOUNT: [&str; 2] = ["system:serviceaccounts", "system:authenticated"];

/// The label the API server puts on the roles and bindings it creates itself.
const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");

/// A Role or ClusterRole, reduced to whether one of its rules has `*` as a verb, a
/// resource or an API group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleView {
    /// Whether a rule has a wildcard.
    pub wildcard: bool,
}

fn wildcard(rules: Option<&Vec<PolicyRule>>) -> bool {
    let star = |v: Option<&Vec<String>>| v.into_iter().flatten().any(|s| s == "*");
    rules.into_iter().flatten().any(|r| {
        r.verbs.iter().any(|v| v == "*")
            || star(r.resources.as_ref())
            || star(r.api_groups.as_ref())
    })
}

/// Projects a Role.
pub fn role(r: &Role) -> RoleView {
    RoleView {
        wildcard: wildcard(r.rules.as_ref()),
    }
}

/// Projects a ClusterRole (an aggregated one carries the rules its controller filled in).
pub fn cluster_role(r: &ClusterRole) -> RoleView {
    RoleView {
        wildcard: wildcard(r.rules.as_ref()),
    }
}

/// A binding's subject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectView {
    /// `ServiceAccount`, `User` or `Group`.
    pub kind: Box<str>,
    /// Name.
    pub name: Box<str>,
    /// Namespace (ServiceAccounts only; empty otherwise).
    pub namespace: Box<str>,
}

/// A RoleBinding or ClusterRoleBinding, reduced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingView {
    /// `roleRef.kind`: `Role` or `ClusterRole`.
    pub role_kind: Box<str>,
    /// `roleRef.name`.
    pub role: Box<str>,
    /// Subjects.
    pub subjects: Vec<SubjectView>,
    /// Made by the API server itself (label `kubernetes.io/bootstrapping=rbac-defaults`):
    /// listed, never a hazard.
    pub bootstrap: bool,
}

fn binding(
    labels: &std::collections::BTreeMap<String, String>,
    role_ref: &RoleRef,
    subjects: Option<&Vec<Subject>>,
) -> BindingView {
    BindingView {
        role_kind: role_ref.kind.as_str().into(),
        role: role_ref.name.as_str().into(),
        subjects: subjects
            .into_iter()
            .flatten()
            .map(|s| SubjectView {
                kind: s.kind.as_str().into(),
                name: s.name.as_str().into(),
                namespace: s.namespace.as_deref().unwrap_or_default().into(),
            })
            .collect(),
        bootstrap: labels.get(BOOTSTRAP_LABEL.0).map(String::as_str) == Some(BOOTSTRAP_LABEL.1),
    }
}

/// Projects a RoleBinding.
pub fn role_binding(b: &RoleBinding) -> BindingView {
    binding(b.labels(), &b.role_ref, b.subjects.as_ref())
}

/// Projects a ClusterRoleBinding.
pub fn cluster_role_binding(b: &ClusterRoleBinding) -> BindingView {
    binding(b.labels(), &b.role_ref, b.subjects.as_ref())
}

/// Whose ServiceAccounts a subject stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach<'a> {
    /// Those of one namespace (one of them, or the group of all of them).
    Namespace(&'a str),
    /// Those of every namespace.
    Every,
}

impl SubjectView {
    /// The ServiceAccounts it stands for; `None` for a user or another group.
    fn reach(&self) -> Option<Reach<'_>> {
        match &*self.kind {
            "ServiceAccount" => Some(Reach::Namespace(&self.namespace)),
            "Group" if EVERY_ACCOUNT.contains(&&*self.name) => Some(Reach::Every),
            "Group" => self.name.strip_prefix(ACCOUNTS_OF).map(Reach::Namespace),
            _ => None,
        }
    }

    /// Whether it stands for a ServiceAccount of namespace `ns`, or all of them.
    fn reaches(&self, ns: &str) -> bool {
        match self.reach() {
            Some(Reach::Namespace(n)) => n == ns,
            Some(Reach::Every) => true,
            None => false,
        }
    }
}

impl BindingView {
    /// What its subjects stand for; the API server's own bindings count only through the
    /// ServiceAccounts they name.
    fn reaches(&self) -> impl Iterator<Item = Reach<'_>> {
        self.subjects
            .iter()
            .filter(|s| !self.bootstrap || &*s.kind == "ServiceAccount")
            .filter_map(SubjectView::reach)
    }

    /// The namespaces whose ServiceAccounts it names: as ServiceAccounts, or as their
    /// namespace's group.
    pub fn service_account_namespaces(&self) -> impl Iterator<Item = &str> {
        self.reaches().filter_map(|r| match r {
            Reach::Namespace(ns) => Some(ns),
            Reach::Every => None,
        })
    }

    /// Whether it names a group every ServiceAccount of every namespace is in.
    pub fn reaches_every_namespace(&self) -> bool {
        self.reaches().any(|r| r == Reach::Every)
    }

    /// Whether it reaches the ServiceAccounts of namespace `ns` (see the module's docs).
    pub fn binds_service_account_of(&self, ns: &str) -> bool {
        self.reaches_every_namespace() || self.service_account_namespaces().any(|n| n == ns)
    }
}

/// A subject as the inventory of namespace `ns` shows it.
fn subject_text(s: &SubjectView, ns: &str) -> String {
    if &*s.kind == "ServiceAccount" && &*s.namespace != ns {
        format!("ServiceAccount/{}/{}", s.namespace, s.name)
    } else {
        format!("{}/{}", s.kind, s.name)
    }
}

/// The RBAC summary of namespace `ns`: its RoleBindings, then the ClusterRoleBindings that
/// reach its ServiceAccounts (only the subjects that do are listed), each sorted by name.
///
/// `wildcard(kind, name)` says whether a role has a wildcard rule (`None`: not found, no
/// hazard). A binding that is not the API server's own, of `cluster-admin` or of a role with
/// a wildcard rule to a ServiceAccount of `ns` or to a group all of them are in, carries
/// `PrivilegedServiceAccount` for each such subject.
pub fn binding_entries(
    ns: &str,
    role_bindings: &[(String, BindingView)],
    cluster_role_bindings: &[(String, BindingView)],
    wildcard: impl Fn(&str, &str) -> Option<bool>,
) -> Vec<RoleBindingEntry> {
    let mut out = Vec::new();
    let kinds = [
        ("RoleBinding", role_bindings, false),
        ("ClusterRoleBinding", cluster_role_bindings, true),
    ];
    for (kind, bindings, only_own_accounts) in kinds {
        let mut entries: Vec<RoleBindingEntry> = bindings
            .iter()
            .filter(|(_, b)| !only_own_accounts || b.binds_service_account_of(ns))
            .map(|(name, b)| entry(ns, kind, name, b, only_own_accounts, &wildcard))
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(entries);
    }
    out
}

fn entry(
    ns: &str,
    kind: &str,
    name: &str,
    b: &BindingView,
    only_own_accounts: bool,
    wildcard: &impl Fn(&str, &str) -> Option<bool>,
) -> RoleBindingEntry {
    let subjects: Vec<&SubjectView> = b
        .subjects
        .iter()
        .filter(|s| !only_own_accounts || s.reaches(ns))
        .collect();
    let role = format!("{}/{}", b.role_kind, b.role);
    let why = if &*b.role_kind == "ClusterRole" && &*b.role == CLUSTER_ADMIN {
        Some(CLUSTER_ADMIN)
    } else if wildcard(&b.role_kind, &b.role) == Some(true) {
        Some("a wildcard rule")
    } else {
        None
    };
    let binding = format!("{kind}/{name}");
    let signals: BTreeSet<String> = match why {
        Some(why) if !b.bootstrap => subjects
            .iter()
            .filter(|s| s.reaches(ns))
            .map(|s| {
                let who = if &*s.kind == "ServiceAccount" {
                    format!("ServiceAccount/{}", s.name)
                } else {
                    format!(
                        "Group/{} (every ServiceAccount of the namespace is in it)",
                        s.name
                    )
                };
                format!(
                    "{}: {who} has {role} ({why}) through {binding}",
                    reasons::PRIVILEGED_SERVICE_ACCOUNT,
                )
            })
            .collect(),
        _ => BTreeSet::new(),
    };
    let mut subjects: Vec<String> = subjects.iter().map(|s| subject_text(s, ns)).collect();
    subjects.sort();
    subjects.dedup();
    RoleBindingEntry {
        name: binding,
        role,
        subjects,
        signals: signals.into_iter().collect(),
    }
}

/// The ServiceAccount a `PrivilegedServiceAccount` signal names (its Warning Event is about
/// that ServiceAccount); `None` for one that names a group (its Event is about the
/// namespace).
pub fn signal_account(signal: &str) -> Option<&str> {
    let (_, detail) = signal.split_once(": ServiceAccount/")?;
    detail.split_once(' ').map(|(name, _)| name)
}

#[cfg(test)]
#[path = "rbac_tests.rs"]
mod tests;
