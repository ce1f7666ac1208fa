//! The change log of Deployments: which observed changes become `WorkloadRevision` objects,
//! what they say, what they are named and which old ones go. Pure: the controller passes
//! the views, the Helm release and `now`, and writes what comes back.
//!
//! A rollout reaches the watch in steps: first the new template (a new `generation`), then the
//! Deployment controller's bump of `deployment.kubernetes.io/revision`, then its
//! `observedGeneration`. Recording the first step would log the change under the old
//! revision and the bump again as a second record, so a template edit waits for the bump
//! (see [`change`]).

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sha2::{Digest, Sha256};

use kube::ResourceExt;

use crate::api::discovery::{
    HelmRevision, ImageChange, ReplicasChange, WorkloadRef, WorkloadRevision, WorkloadRevisionSpec,
};
use crate::api::{conditions::types, field_manager};
use crate::discovery::{config, names::condition_reasons, view::DeploymentView};

/// Revision records kept per workload, and autoscaler moves ([`autoscaler_move`]) kept
/// beside them; [`prune`] names the older ones of each for deletion.
pub const KEPT: usize = 10;

/// The longest summary, in bytes (so also in characters): the CRD's `maxLength`.
pub const SUMMARY_MAX: usize = 1024;

/// The kind recorded in `spec.workload`.
const DEPLOYMENT: &str = "Deployment";

/// The longest Kubernetes object name (a DNS subdomain).
const NAME_MAX: usize = 253;

/// Hex digits of the content hash in a record's name (40 bits: a collision needs about a
/// million records of one workload at one revision).
const NAME_HASH_DIGITS: usize = 10;

/// Stands in for a deployment name that is not a DNS subdomain, which the API server never
/// hands out; the content hash still covers the real name.
const FALLBACK_PREFIX: &str = "workload";

/// Marks a cut summary.
const ELLIPSIS: &str = "…";

/// The record of one observed change of a Deployment, or `None` when nothing worth a record
/// changed.
///
/// Worth a record: a new ReplicaSet revision (the `deployment.kubernetes.io/revision`
/// annotation moved), image changes per container, changed ConfigMap / Secret references,
/// a change of the data of a ConfigMap or Secret referred to (measured from
/// `before.configs`, see [`config::changes`]; it starts no rollout), and a change of
/// `spec.replicas` (recorded whoever made it; a caller that does not want
/// autoscaler moves in the log filters them out). Status-only changes give `None`.
///
/// `before` must be the view the caller's last record was derived from (or the view it
/// started from), not simply the previous event: a template edit (images or config
/// references) that the Deployment controller has not yet observed
/// (`observedGeneration < generation`) and that has not moved the revision gives `None`, so
/// the record is made once, under the new revision, when the bump arrives. A caller that
/// advanced `before` on that `None` would lose the change. Once the controller has observed
/// the edit without a bump (a paused Deployment) the edit is recorded under the current
/// revision.
///
/// `before == None` (first sight) gives `None`: a baseline is not a revision. A `before`
/// with another non-empty UID is a Deployment deleted and created again under the same
/// name, which is first sight as well.
///
/// `changed_by` is the template's field manager when the template changed, else the field
/// manager of the first ConfigMap or Secret whose data changed, else the first
/// (in byte order) of the managers that own `spec.replicas`. `revision` is the annotation,
/// or 1 when absent (the annotation is missing only before the Deployment controller's first
/// sync, whose ReplicaSet is revision 1; the CRD requires at least 1).
pub fn change(
    before: Option<&DeploymentView>,
    after: &DeploymentView,
    helm: Option<HelmRevision>,
    now: Timestamp,
) -> Option<WorkloadRevisionSpec> {
    let before = before.filter(|b| same_object(b, after))?;

    let images = image_changes(&before.images, &after.images);
    let (added, removed) = config_changes(&before.config_refs, &after.config_refs);
    let edited = !images.is_empty() || !added.is_empty() || !removed.is_empty();
    // Compared as recorded, so a first sight before the controller's first sync (no
    // annotation, recorded as 1) and its later annotation 1 are the same revision.
    let rolled = after.revision.is_some() && revision_of(after) != revision_of(before);
    let replicas = (before.replicas != after.replicas).then_some(ReplicasChange {
        from: before.replicas,
        to: after.replicas,
    });
    let contents = config::changes(&before.configs, &after.configs);

    if edited && !rolled && after.observed_generation < after.generation {
        // The revision bump follows; record the edit with it.
        return None;
    }
    let template_changed = edited || rolled;
    if !template_changed && replicas.is_none() && contents.is_empty() {
        return None;
    }

    let revision = revision_of(after);
    let mut parts: Vec<String> = images.iter().map(describe_image).collect();
    if !added.is_empty() || !removed.is_empty() {
        parts.push(describe_config(&added, &removed));
    }
    if rolled && !edited {
        parts.push(format!("template changed (revision {revision})"));
    }
    parts.extend(contents.iter().map(config::describe));
    if let Some(r) = &replicas {
        parts.push(format!("replicas {} → {}", r.from, r.to));
    }

    // An image change is attributed to whoever owns that image field now: it set it.
    let image_author = images.iter().find_map(|c| {
        c.to.as_ref()?;
        after
            .image_managers
            .iter()
            .find(|(container, _)| *container == c.container)
            .map(|(_, m)| m.clone())
    });
    let changed_by = if template_changed {
        image_author.or_else(|| after.template_manager.clone())
    } else if let Some(c) = contents.first() {
        c.changed_by.clone()
    } else {
        after.replicas_managers.first().cloned()
    };
    Some(WorkloadRevisionSpec {
        workload: workload(after),
        revision,
        observed_at: Time(now),
        summary: truncate(parts.join("; ")),
        changed_by,
        template_hash: None,
        images,
        replicas,
        config_refs: if template_changed {
            after.config_refs.clone()
        } else {
            Vec::new()
        },
        config_changes: contents,
        helm,
        rollout: template_changed,
    })
}

/// The object name of a revision record: `<deployment>-r<revision>-<hash>`, lowercase and a
/// valid DNS subdomain of at most 253 characters.
///
/// The hash covers the deployment name, what changed (workload, revision, summary, images,
/// replicas, config references, template hash) and the write it was seen at (`occurrence`,
/// [`occurrence`]), not `observedAt`, `changedBy` or the Helm release: a restarted manager
/// that re-derives the same change gets the same name, and `create` answers AlreadyExists
/// instead of writing a duplicate, while the same change made again (replicas going 3 → 5
/// twice, a Secret's key rotated twice) is a write of its own and a record of its own.
///
/// A long deployment name is cut to fit; the hash, which covers the full name, keeps two
/// names with a common prefix apart. A deployment name that is not a DNS subdomain (the API
/// server never gives one) is replaced by `workload`.
pub fn name(deployment: &str, spec: &WorkloadRevisionSpec, occurrence: &str) -> String {
    let hash = content_hash(deployment, spec, occurrence);
    let suffix = format!("-r{}-{}", spec.revision, &hash[..NAME_HASH_DIGITS]);
    let base = if is_dns_subdomain(deployment) {
        deployment
    } else {
        FALLBACK_PREFIX
    };
    // A valid subdomain is ASCII, so any byte index is a char boundary; a cut may end a
    // label with '-' or leave a trailing '.', and neither may precede the suffix.
    let room = NAME_MAX - suffix.len();
    let cut = &base[..base.len().min(room)];
    let cut = cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{cut}{suffix}")
}

/// Whether a record is only an autoscaler's move: `spec.replicas` changed, by the HPA
/// controller, KEDA or Moonin's scheduled scaling, and nothing else. An autoscaled
/// Deployment moves many times a day; such moves are kept apart from the other changes
/// (they never push a rollout out of the log, see [`prune`]) and are never the suspect
/// change of a failure (they react to load, see [`super::suspect`]).
pub fn autoscaler_move(spec: &WorkloadRevisionSpec) -> bool {
    !spec.rollout
        && spec.config_changes.is_empty()
        && spec.replicas.is_some()
        && spec
            .changed_by
            .as_deref()
            .is_some_and(super::signals::scales_on_behalf_of_autoscaler)
}

/// Given a workload's existing revision records of one kind (autoscaler moves, or every
/// other change) as `(name, observedAt)`, the names to delete so that only the newest
/// [`KEPT`] remain, oldest first. Records observed at the same
/// instant are ordered by name (the greater name counts as newer), so every replica of the
/// manager picks the same ones.
pub fn prune(existing: &[(String, Timestamp)]) -> Vec<String> {
    let mut ordered: Vec<&(String, Timestamp)> = existing.iter().collect();
    ordered.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let excess = ordered.len().saturating_sub(KEPT);
    ordered
        .into_iter()
        .take(excess)
        .map(|(name, _)| name.clone())
        .collect()
}

/// Whether two views are of the same object: not a Deployment deleted and created again
/// under its name in between (an unknown UID is taken as the same).
pub fn same_object(before: &DeploymentView, after: &DeploymentView) -> bool {
    before.uid.is_empty() || after.uid.is_empty() || before.uid == after.uid
}

fn workload(view: &DeploymentView) -> WorkloadRef {
    WorkloadRef {
        kind: DEPLOYMENT.to_string(),
        name: view.name.clone(),
    }
}

fn revision_of(view: &DeploymentView) -> i64 {
    view.revision.unwrap_or(1).max(1)
}

/// Per container, by name: changed and added ones in the new container order, then removed
/// ones in the old order.
fn image_changes(before: &[(String, String)], after: &[(String, String)]) -> Vec<ImageChange> {
    let find = |list: &[(String, String)], name: &str| {
        list.iter()
            .find(|(c, _)| c == name)
            .map(|(_, image)| image.clone())
    };
    let mut out = Vec::new();
    for (container, image) in after {
        let old = find(before, container);
        if old.as_deref() != Some(image.as_str()) {
            out.push(ImageChange {
                container: container.clone(),
                from: old,
                to: Some(image.clone()),
            });
        }
    }
    for (container, image) in before {
        if find(after, container).is_none() {
            out.push(ImageChange {
                container: container.clone(),
                from: Some(image.clone()),
                to: None,
            });
        }
    }
    out
}

/// References added and removed, each sorted.
fn config_changes<'a>(before: &'a [String], after: &'a [String]) -> (Vec<&'a str>, Vec<&'a str>) {
    let old: BTreeSet<&str> = before.iter().map(String::as_str).collect();
    let new: BTreeSet<&str> = after.iter().map(String::as_str).collect();
    (
        new.difference(&old).copied().collect(),
        old.difference(&new).copied().collect(),
    )
}

fn describe_image(c: &ImageChange) -> String {
    match (&c.from, &c.to) {
        (Some(from), Some(to)) => format!("image {}: {from} → {to}", c.container),
        (None, Some(to)) => format!("container {} added: {to}", c.container),
        (Some(from), None) => format!("container {} removed: {from}", c.container),
        (None, None) => format!("container {}", c.container),
    }
}

fn describe_config(added: &[&str], removed: &[&str]) -> String {
    let refs: Vec<String> = added
        .iter()
        .map(|r| format!("+{r}"))
        .chain(removed.iter().map(|r| format!("-{r}")))
        .collect();
    format!("config {}", refs.join(" "))
}

/// Cuts `summary` to at most [`SUMMARY_MAX`] bytes on a character boundary, ending a cut
/// one with an ellipsis.
fn truncate(mut summary: String) -> String {
    if summary.len() <= SUMMARY_MAX {
        return summary;
    }
    let mut end = SUMMARY_MAX - ELLIPSIS.len();
    while !summary.is_char_boundary(end) {
        end -= 1;
    }
    summary.truncate(end);
    summary.push_str(ELLIPSIS);
    summary
}

/// SHA-256, in hex, of the identifying content of a record. Every field is length-prefixed
/// (options and lists with a marker or count) so that no two different contents feed the
/// same bytes.
/// Which writes a change recorded by `spec` was seen at: the Deployment's generation (every
/// change of its spec moves it) and the resourceVersion of each ConfigMap or Secret whose
/// content `spec` lists as changed. The same for a change seen again; another for the same
/// change made again.
pub fn occurrence(after: &DeploymentView, spec: &WorkloadRevisionSpec) -> String {
    let mut out = format!("generation {}", after.generation);
    for c in &spec.config_changes {
        let rv = after
            .configs
            .iter()
            .find(|s| s.source == c.source)
            .and_then(|s| s.resource_version.as_deref())
            .unwrap_or_default();
        out.push_str(&format!("; {} at {rv}", c.source));
    }
    out
}

fn content_hash(deployment: &str, spec: &WorkloadRevisionSpec, occurrence: &str) -> String {
    fn text(h: &mut Sha256, s: &str) {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    fn maybe(h: &mut Sha256, s: Option<&str>) {
        match s {
            Some(s) => {
                h.update([1]);
                text(h, s);
            }
            None => h.update([0]),
        }
    }
    let mut h = Sha256::new();
    text(&mut h, deployment);
    text(&mut h, &spec.workload.kind);
    text(&mut h, &spec.workload.name);
    h.update(spec.revision.to_le_bytes());
    text(&mut h, &spec.summary);
    maybe(&mut h, spec.template_hash.as_deref());
    h.update((spec.images.len() as u64).to_le_bytes());
    for c in &spec.images {
        text(&mut h, &c.container);
        maybe(&mut h, c.from.as_deref());
        maybe(&mut h, c.to.as_deref());
    }
    match &spec.replicas {
        Some(r) => {
            h.update([1]);
            h.update(r.from.to_le_bytes());
            h.update(r.to.to_le_bytes());
        }
        None => h.update([0]),
    }
    h.update((spec.config_refs.len() as u64).to_le_bytes());
    for r in &spec.config_refs {
        text(&mut h, r);
    }
    h.update((spec.config_changes.len() as u64).to_le_bytes());
    for c in &spec.config_changes {
        text(&mut h, &c.source);
        h.update((c.keys.len() as u64).to_le_bytes());
        for k in &c.keys {
            text(&mut h, k);
        }
        h.update([u8::from(c.keys_unknown), u8::from(c.deleted)]);
        maybe(&mut h, c.data_hash.as_deref());
    }
    text(&mut h, occurrence);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` is a DNS subdomain as Kubernetes names objects: at most 253 characters,
/// dot-separated labels of lowercase letters, digits and '-', each starting and ending with
/// a letter or digit.
fn is_dns_subdomain(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.len() <= NAME_MAX
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(&first), Some(&last)) => {
                    alnum(first) && alnum(last) && b.iter().all(|&c| alnum(c) || c == b'-')
                }
                _ => false,
            }
        })
}

/// A WorkloadRevision, reduced to what pruning, restarts and following its rollout need.
#[derive(Debug, Clone, PartialEq)]
pub struct RevView {
    /// Its name.
    pub name: String,
    /// The Deployment it records.
    pub workload: String,
    /// The ReplicaSet revision it records.
    pub revision: i64,
    /// When the change was observed.
    pub observed_at: Timestamp,
    /// Its `Ready` condition's reason, if any (a process that died between the create and
    /// the status patch leaves a record without it).
    pub reason: Option<String>,
    /// Who created it, when not Moonin's discovery: such a record is not part of the
    /// change log (it is reported, and never counted, marked or pruned).
    pub foreign: Option<String>,
    /// Whether the change started a rollout (`spec.rollout`).
    pub rollout: bool,
    /// Its image changes.
    pub images: Vec<ImageChange>,
    /// `status.outcome`, once the rollout ended.
    pub outcome: Option<String>,
    /// What changed, in one line (`spec.summary`).
    pub summary: String,
    /// Who changed it (`spec.changedBy`).
    pub changed_by: Option<String>,
    /// Only an autoscaler's move ([`autoscaler_move`]).
    pub autoscaler_move: bool,
}

impl RevView {
    /// Recorded by this controller and marked so.
    pub fn ready(&self) -> bool {
        self.reason.as_deref() == Some(condition_reasons::RECORDED)
    }

    /// Not written by Moonin's discovery, and not yet marked `NotRecorded`.
    pub fn foreign_unreported(&self) -> bool {
        self.foreign.is_some() && self.reason.as_deref() != Some(condition_reasons::NOT_RECORDED)
    }
}

/// The view of a record this process has just created (its store may not show it yet).
pub fn new_view(name: &str, spec: &WorkloadRevisionSpec) -> RevView {
    RevView {
        name: name.to_string(),
        workload: spec.workload.name.clone(),
        revision: spec.revision,
        observed_at: spec.observed_at.0,
        reason: Some(condition_reasons::RECORDED.to_string()),
        foreign: None,
        rollout: spec.rollout,
        images: spec.images.clone(),
        outcome: None,
        summary: spec.summary.clone(),
        changed_by: spec.changed_by.clone(),
        autoscaler_move: autoscaler_move(spec),
    }
}

/// Projects a WorkloadRevision.
pub fn rev_view(r: &WorkloadRevision) -> RevView {
    // Who wrote the object itself: discovery's report of a foreign record writes only its
    // status, and must not make it look like one of discovery's own.
    let managers: Vec<&str> = r
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
        .filter_map(|m| m.manager.as_deref())
        .collect();
    RevView {
        name: r.name_any(),
        workload: r.spec.workload.name.clone(),
        revision: r.spec.revision,
        observed_at: r.spec.observed_at.0,
        reason: r.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == types::READY)
                .map(|c| c.reason.clone())
        }),
        foreign: (!managers.contains(&field_manager::DISCOVERY))
            .then(|| managers.first().unwrap_or(&"unknown").to_string()),
        rollout: r.spec.rollout,
        images: r.spec.images.clone(),
        outcome: r.status.as_ref().and_then(|s| s.outcome.clone()),
        summary: r.spec.summary.clone(),
        changed_by: r.spec.changed_by.clone(),
        autoscaler_move: autoscaler_move(&r.spec),
    }
}

#[cfg(test)]
#[path = "revision_tests.rs"]
mod tests;
