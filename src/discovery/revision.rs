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
use crate::discovery::{names::condition_reasons, view::DeploymentView};

/// Revision records kept per workload; [`prune`] names the older ones for deletion.
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
/// and a change of `spec.replicas` (recorded whoever made it; a caller that does not want
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
/// `before == None` gives `None`: on first sight the caller writes [`initial`], and only if
/// it holds no record for the workload yet. A `before` with another non-empty UID is a
/// Deployment deleted and recreated under the same name, and gives its [`initial`] record.
///
/// `changed_by` is the template's field manager when the template changed, else the first
/// (in byte order) of the managers that own `spec.replicas`. `revision` is the annotation,
/// or 1 when absent (the annotation is missing only before the Deployment controller's first
/// sync, whose ReplicaSet is revision 1; the CRD requires at least 1).
pub fn change(
    before: Option<&DeploymentView>,
    after: &DeploymentView,
    helm: Option<HelmRevision>,
    now: Timestamp,
) -> Option<WorkloadRevisionSpec> {
    let before = before?;
    if !before.uid.is_empty() && !after.uid.is_empty() && before.uid != after.uid {
        return Some(initial(after, helm, now));
    }

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

    if edited && !rolled && after.observed_generation < after.generation {
        // The revision bump follows; record the edit with it.
        return None;
    }
    let template_changed = edited || rolled;
    if !template_changed && replicas.is_none() {
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
        helm,
    })
}

/// The "first observed" record of a Deployment: its images (each as a change from nothing),
/// replicas and config references as they are now. The caller writes it on first sight of
/// a workload for which it holds no record (at startup, or when the Deployment is created).
/// `changed_by` is the template's field manager; `revision` as in [`change`].
pub fn initial(
    after: &DeploymentView,
    helm: Option<HelmRevision>,
    now: Timestamp,
) -> WorkloadRevisionSpec {
    let listed: Vec<String> = after
        .images
        .iter()
        .map(|(container, image)| format!("{container}={image}"))
        .collect();
    let summary = if listed.is_empty() {
        format!("first observed: replicas {}", after.replicas)
    } else {
        format!(
            "first observed: {}; replicas {}",
            listed.join(", "),
            after.replicas
        )
    };
    WorkloadRevisionSpec {
        workload: workload(after),
        revision: revision_of(after),
        observed_at: Time(now),
        summary: truncate(summary),
        changed_by: after.template_manager.clone(),
        template_hash: None,
        images: after
            .images
            .iter()
            .map(|(container, image)| ImageChange {
                container: container.clone(),
                from: None,
                to: Some(image.clone()),
            })
            .collect(),
        replicas: None,
        config_refs: after.config_refs.clone(),
        helm,
    }
}

/// The object name of a revision record: `<deployment>-r<revision>-<hash>`, lowercase and a
/// valid DNS subdomain of at most 253 characters.
///
/// The hash covers the deployment name and what changed (workload, revision, summary,
/// images, replicas, config references, template hash), not `observedAt`, `changedBy` or the
/// Helm release: a restarted manager that re-derives the same change gets the same name, and
/// `create` answers AlreadyExists instead of writing a duplicate. (The same change repeated
/// at the same revision, such as replicas going 3 → 5 twice, shares a name too; the second
/// is then taken as already recorded.)
///
/// A long deployment name is cut to fit; the hash, which covers the full name, keeps two
/// names with a common prefix apart. A deployment name that is not a DNS subdomain (the API
/// server never gives one) is replaced by `workload`.
pub fn name(deployment: &str, spec: &WorkloadRevisionSpec) -> String {
    let hash = content_hash(deployment, spec);
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

/// Given a workload's existing revision records as `(name, observedAt)`, the names to delete
/// so that only the newest [`KEPT`] remain, oldest first. Records observed at the same
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
fn content_hash(deployment: &str, spec: &WorkloadRevisionSpec) -> String {
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

/// A WorkloadRevision, reduced to what pruning and restarts need.
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

/// Projects a WorkloadRevision.
pub fn rev_view(r: &WorkloadRevision) -> RevView {
    let managers: Vec<&str> = r
        .metadata
        .managed_fields
        .iter()
        .flatten()
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn now() -> Timestamp {
        ts("2026-05-01T12:00:00Z")
    }

    /// A settled Deployment `shop` at revision 3 with one container `app`.
    fn shop() -> DeploymentView {
        DeploymentView {
            namespace: "web".into(),
            name: "shop".into(),
            uid: "uid-1".into(),
            generation: 4,
            observed_generation: 4,
            replicas: 3,
            ready: 3,
            available: 3,
            updated: 3,
            images: vec![("app".into(), "shop:1.2".into())],
            config_refs: vec!["ConfigMap/shop".into()],
            revision: Some(3),
            template_manager: Some("kubectl-client-side-apply".into()),
            replicas_managers: vec!["argocd-controller".into(), "kube-controller-manager".into()],
            ..DeploymentView::default()
        }
    }

    /// `shop` after a template edit that the Deployment controller has rolled out.
    fn rolled(mut v: DeploymentView) -> DeploymentView {
        v.generation += 1;
        v.observed_generation = v.generation;
        v.revision = v.revision.map(|r| r + 1);
        v
    }

    fn spec(revision: i64, summary: &str) -> WorkloadRevisionSpec {
        WorkloadRevisionSpec {
            workload: WorkloadRef {
                kind: "Deployment".into(),
                name: "shop".into(),
            },
            revision,
            observed_at: Time(now()),
            summary: summary.into(),
            changed_by: Some("kubectl-client-side-apply".into()),
            template_hash: None,
            images: Vec::new(),
            replicas: None,
            config_refs: vec!["ConfigMap/shop".into()],
            helm: None,
        }
    }

    fn image(container: &str, from: Option<&str>, to: Option<&str>) -> ImageChange {
        ImageChange {
            container: container.into(),
            from: from.map(str::to_string),
            to: to.map(str::to_string),
        }
    }

    #[test]
    fn an_image_change_is_attributed_to_the_owner_of_that_image() {
        let before = shop();
        let mut after = rolled(shop());
        after.images = vec![("app".into(), "shop:1.3".into())];
        after.image_managers = vec![("app".into(), "deploy-bot".into())];
        let spec = change(Some(&before), &after, None, now()).expect("a record");
        assert_eq!(spec.changed_by.as_deref(), Some("deploy-bot"));
    }

    #[test]
    fn image_change_is_recorded_under_the_new_revision() {
        let before = shop();
        let mut after = rolled(shop());
        after.images = vec![("app".into(), "shop:1.3".into())];
        after.template_manager = Some("deploy-bot".into());
        let expected = WorkloadRevisionSpec {
            images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
            changed_by: Some("deploy-bot".into()),
            ..spec(4, "image app: shop:1.2 → shop:1.3")
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn containers_added_and_removed_in_container_order() {
        let mut before = shop();
        before.images = vec![
            ("init".into(), "migrate:1".into()),
            ("app".into(), "shop:1.2".into()),
            ("proxy".into(), "envoy:1.29".into()),
        ];
        let mut after = rolled(before.clone());
        after.images = vec![
            ("app".into(), "shop:1.2".into()),
            ("sidecar".into(), "log:2".into()),
            ("proxy".into(), "envoy:1.30".into()),
        ];
        let expected = WorkloadRevisionSpec {
            images: vec![
                image("sidecar", None, Some("log:2")),
                image("proxy", Some("envoy:1.29"), Some("envoy:1.30")),
                image("init", Some("migrate:1"), None),
            ],
            ..spec(
                4,
                "container sidecar added: log:2; image proxy: envoy:1.29 → envoy:1.30; \
                 container init removed: migrate:1",
            )
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn config_reference_changes_list_added_then_removed() {
        let mut before = shop();
        before.config_refs = vec!["ConfigMap/shop".into(), "Secret/db-v1".into()];
        let mut after = rolled(before.clone());
        after.config_refs = vec![
            "ConfigMap/flags".into(),
            "ConfigMap/shop".into(),
            "Secret/db-v2".into(),
        ];
        let expected = WorkloadRevisionSpec {
            config_refs: after.config_refs.clone(),
            ..spec(4, "config +ConfigMap/flags +Secret/db-v2 -Secret/db-v1")
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn replicas_only_change_names_a_replicas_manager() {
        let before = shop();
        let mut after = shop();
        after.generation += 1;
        after.replicas = 5;
        let expected = WorkloadRevisionSpec {
            replicas: Some(ReplicasChange { from: 3, to: 5 }),
            changed_by: Some("argocd-controller".into()),
            config_refs: Vec::new(),
            ..spec(3, "replicas 3 → 5")
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn image_and_replicas_change_together() {
        let before = shop();
        let mut after = rolled(shop());
        after.images = vec![("app".into(), "shop:1.3".into())];
        after.replicas = 5;
        let expected = WorkloadRevisionSpec {
            images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
            replicas: Some(ReplicasChange { from: 3, to: 5 }),
            ..spec(4, "image app: shop:1.2 → shop:1.3; replicas 3 → 5")
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn status_only_change_is_no_record() {
        let before = shop();
        let mut after = shop();
        after.ready = 1;
        after.available = 1;
        after.updated = 2;
        assert_eq!(change(Some(&before), &after, None, now()), None);
    }

    #[test]
    fn revision_bump_with_the_same_images_is_a_template_change() {
        // An env change or `kubectl rollout restart`: nothing the view lists moved.
        let before = shop();
        let after = rolled(shop());
        assert_eq!(
            change(Some(&before), &after, None, now()),
            Some(spec(4, "template changed (revision 4)"))
        );
    }

    #[test]
    fn template_edit_waits_for_the_revision_bump() {
        let before = shop();
        let mut edited = shop();
        edited.generation += 1;
        edited.images = vec![("app".into(), "shop:1.3".into())];
        assert_eq!(change(Some(&before), &edited, None, now()), None);

        // The caller keeps `before`; the bump brings one record under the new revision.
        let mut bumped = edited.clone();
        bumped.revision = Some(4);
        let expected = WorkloadRevisionSpec {
            images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
            ..spec(4, "image app: shop:1.2 → shop:1.3")
        };
        assert_eq!(change(Some(&before), &bumped, None, now()), Some(expected));
    }

    #[test]
    fn observed_edit_without_bump_is_recorded_under_the_current_revision() {
        // A paused Deployment: the controller observes the edit but rolls nothing out.
        let before = shop();
        let mut after = shop();
        after.generation += 1;
        after.observed_generation += 1;
        after.images = vec![("app".into(), "shop:1.3".into())];
        let expected = WorkloadRevisionSpec {
            images: vec![image("app", Some("shop:1.2"), Some("shop:1.3"))],
            ..spec(3, "image app: shop:1.2 → shop:1.3")
        };
        assert_eq!(change(Some(&before), &after, None, now()), Some(expected));
    }

    #[test]
    fn helm_release_is_carried() {
        let helm = HelmRevision {
            release: "shop".into(),
            revision: 7,
            chart: "shop".into(),
            version: "0.4.1".into(),
        };
        let before = shop();
        let after = rolled(shop());
        let expected = WorkloadRevisionSpec {
            helm: Some(helm.clone()),
            ..spec(4, "template changed (revision 4)")
        };
        assert_eq!(
            change(Some(&before), &after, Some(helm.clone()), now()),
            Some(expected)
        );
        assert_eq!(initial(&after, Some(helm.clone()), now()).helm, Some(helm));
    }

    #[test]
    fn first_sight_is_left_to_initial() {
        let after = shop();
        assert_eq!(change(None, &after, None, now()), None);
        let expected = WorkloadRevisionSpec {
            images: vec![image("app", None, Some("shop:1.2"))],
            ..spec(3, "first observed: app=shop:1.2; replicas 3")
        };
        assert_eq!(initial(&after, None, now()), expected);
    }

    #[test]
    fn missing_revision_annotation_records_revision_one() {
        let mut created = shop();
        created.revision = None;
        assert_eq!(initial(&created, None, now()).revision, 1);

        // The controller's first sync then annotates revision 1: nothing new to record.
        let mut synced = created.clone();
        synced.revision = Some(1);
        assert_eq!(change(Some(&created), &synced, None, now()), None);
    }

    #[test]
    fn recreated_deployment_is_first_observed_again() {
        let before = shop();
        let mut after = shop();
        after.uid = "uid-2".into();
        after.revision = Some(1);
        assert_eq!(
            change(Some(&before), &after, None, now()),
            Some(initial(&after, None, now()))
        );
    }

    #[test]
    fn long_summary_is_cut_on_a_char_boundary() {
        let before = shop();
        let mut after = rolled(shop());
        // 3-byte characters, so a cut at a fixed byte offset would land inside one.
        after.images = vec![("app".into(), "é".repeat(700))];
        let got = change(Some(&before), &after, None, now()).map(|s| s.summary);
        let summary = got.unwrap_or_else(|| panic!("expected a record"));
        assert!(summary.len() <= SUMMARY_MAX, "{} bytes", summary.len());
        assert!(summary.len() > SUMMARY_MAX - 8, "{} bytes", summary.len());
        assert!(summary.starts_with("image app: shop:1.2 → éé"));
        assert!(summary.ends_with("é…"));

        let exact = "x".repeat(SUMMARY_MAX);
        assert_eq!(truncate(exact.clone()), exact);
    }

    #[test]
    fn name_is_deterministic_and_ignores_time_changer_and_helm() {
        let a = spec(4, "image app: shop:1.2 → shop:1.3");
        let mut b = a.clone();
        b.observed_at = Time(ts("2030-01-01T00:00:00Z"));
        b.changed_by = Some("someone-else".into());
        b.helm = Some(HelmRevision {
            release: "shop".into(),
            revision: 2,
            chart: "shop".into(),
            version: "1.0.0".into(),
        });
        let n = name("shop", &a);
        assert_eq!(n, name("shop", &b));
        assert!(n.starts_with("shop-r4-"), "{n}");
        assert_eq!(n.len(), "shop-r4-".len() + NAME_HASH_DIGITS);

        let mut other = a.clone();
        other.replicas = Some(ReplicasChange { from: 3, to: 5 });
        assert_ne!(n, name("shop", &other));
        assert_ne!(n, name("shop", &spec(5, &a.summary)));
    }

    #[test]
    fn long_names_are_cut_and_kept_apart_by_the_hash() {
        let s = spec(12, "template changed (revision 12)");
        let long_a = format!("{}a", "x".repeat(252));
        let long_b = format!("{}b", "x".repeat(252));
        let (a, b) = (name(&long_a, &s), name(&long_b, &s));
        assert_eq!(a.len(), NAME_MAX);
        assert!(is_valid(&a) && is_valid(&b), "{a} {b}");
        assert_ne!(a, b);

        // The suffix `-r12-<10 hex>` leaves 238 characters; a cut that would end on '-' or
        // '.' backs off to the letter before it.
        for sep in ['-', '.'] {
            let deployment = format!("{}{sep}{}", "a".repeat(237), "b".repeat(15));
            let n = name(&deployment, &s);
            assert!(n.starts_with(&format!("{}-r12-", "a".repeat(237))), "{n}");
            assert!(is_valid(&n), "{n}");
        }
    }

    #[test]
    fn prune_keeps_exactly_the_newest_ten() {
        let base = ts("2026-05-01T00:00:00Z");
        let existing: Vec<(String, Timestamp)> = (0..14i64)
            .rev()
            .map(|i| {
                (
                    format!("shop-r{i}"),
                    base + jiff::SignedDuration::from_mins(i),
                )
            })
            .collect();
        assert_eq!(
            prune(&existing),
            vec!["shop-r0", "shop-r1", "shop-r2", "shop-r3"]
        );
        assert_eq!(prune(&existing[..KEPT]), Vec::<String>::new());
        assert_eq!(prune(&[]), Vec::<String>::new());
    }

    #[test]
    fn prune_breaks_ties_by_name() {
        let t = ts("2026-05-01T00:00:00Z");
        let existing: Vec<(String, Timestamp)> =
            ["k", "b", "e", "a", "h", "c", "j", "d", "f", "i", "g", "l"]
                .into_iter()
                .map(|n| (n.to_string(), t))
                .collect();
        assert_eq!(prune(&existing), vec!["a", "b"]);
    }

    /// The pattern of the brief, checked character by character:
    /// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`, plus the length.
    fn is_valid(n: &str) -> bool {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        let mut prev: Option<char> = None;
        for c in n.chars() {
            let ok = match prev {
                None | Some('.') => alnum(c),
                Some('-') => alnum(c) || c == '-',
                Some(_) => alnum(c) || c == '-' || c == '.',
            };
            if !ok {
                return false;
            }
            prev = Some(c);
        }
        n.len() <= NAME_MAX && prev.is_some_and(alnum)
    }

    fn subdomain() -> impl Strategy<Value = String> {
        "[a-z0-9]([-a-z0-9]{0,70}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,70}[a-z0-9])?){0,4}"
            .prop_filter("at most 253 characters", |s| s.len() <= NAME_MAX)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn names_are_valid_and_deterministic(
            deployment in subdomain(),
            revision in 1i64..=i64::MAX,
            from in "[a-z0-9:./-]{0,40}",
            to in "[a-z0-9:./-]{0,40}",
        ) {
            let mut s = spec(revision, "x");
            s.workload.name = deployment.clone();
            s.images = vec![image("app", Some(&from), Some(&to))];
            let n = name(&deployment, &s);
            prop_assert!(is_valid(&n), "{n}");
            prop_assert_eq!(n.clone(), name(&deployment, &s.clone()));
            if deployment.len() + 2 + 19 + 1 + NAME_HASH_DIGITS <= NAME_MAX {
                prop_assert!(n.starts_with(&format!("{deployment}-r{revision}-")), "{n}");
            }
        }

        #[test]
        fn names_are_valid_for_any_input(deployment in ".{0,300}", revision in any::<i64>()) {
            let n = name(&deployment, &spec(revision, "x"));
            prop_assert!(is_valid(&n), "{n}");
        }
    }
}
