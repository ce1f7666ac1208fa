//! Who wrote what, as `managedFields` shows it, and what the scaling caches keep of it.
//!
//! A decision reads of `managedFields` who last set a Deployment's `spec.replicas`, whether
//! Moonin's marks on it are its own or a copy, who owns an autoscaler's bounds, and when the
//! bounds and the status were last written. The caches keep only that (the `keep_*`
//! functions, also used by [`super::wire`] on the wire), so that a write that changes
//! nothing a decision reads leaves the cached object as it was and wakes no template.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, Time,
};

use super::decide::{AutoscalerKind, GUARDED_ANNOTATIONS};
use crate::api::field_manager;

/// The manager that owns each of `fields` under `spec`, from `managedFields`.
pub(super) fn spec_managers(meta: &ObjectMeta, fields: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in meta.managed_fields.iter().flatten() {
        let Some(manager) = &entry.manager else {
            continue;
        };
        for f in fields {
            if field_manager::owns_spec(entry, f) {
                out.insert((*f).to_string(), manager.clone());
            }
        }
    }
    out
}

/// The time of the latest write to the object among the `managedFields` entries `pick`
/// takes (whole seconds).
fn latest_write(
    meta: &ObjectMeta,
    pick: impl Fn(&ManagedFieldsEntry) -> bool,
) -> Option<Timestamp> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| pick(m))
        .filter_map(|m| m.time.as_ref().map(|t| t.0))
        .max()
}

/// When Moonin (`moonin-scaling`, or `moonin-restore` for a restore) last wrote the
/// object, from `managedFields`.
pub(super) fn moonin_wrote(meta: &ObjectMeta) -> Option<Timestamp> {
    latest_write(meta, |m| {
        m.manager.as_deref().is_some_and(field_manager::is_scaling)
    })
}

/// Where in `entries` is the field manager that last set `spec.replicas`: the latest of
/// those that own it, the later in the list on a tie.
fn replicas_entry(entries: &[ManagedFieldsEntry]) -> Option<usize> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, m)| field_manager::owns_spec(m, "replicas"))
        .max_by_key(|(_, m)| m.time.as_ref().map(|t| t.0))
        .map(|(i, _)| i)
}

/// The field manager that last set `spec.replicas`, and when, from `managedFields`.
pub fn replicas_set_by(meta: &ObjectMeta) -> Option<(String, Timestamp)> {
    let entries = meta.managed_fields.as_deref()?;
    let m = &entries[replicas_entry(entries)?];
    Some((m.manager.clone()?, m.time.as_ref()?.0))
}

/// Trims cached metadata's annotations to those a decision reads ([`GUARDED_ANNOTATIONS`]:
/// every other one, `kubectl`'s last-applied copy of the object among them, is dropped),
/// keeping whether there are annotations at all ([`super::decide::Marks::has_annotations`]). Another
/// tool's annotation then leaves the cached object as it was, and wakes no template.
pub fn keep_guarded_annotations(meta: &mut ObjectMeta) {
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| GUARDED_ANNOTATIONS.contains(&k.as_str()));
    }
}

/// Trims a cached autoscaler's metadata to what a decision reads of it, so that a write
/// that changes nothing else (an annotation of another tool, a spec field beside the bounds,
/// the HPA controller's next status) leaves the cached object as it was and wakes no
/// template: the guarded annotations ([`keep_guarded_annotations`]); of `managedFields` the
/// entries that own one of its bounds, cut to the bounds they own ([`spec_managers`],
/// [`last_writes`]), and Moonin's own ([`moonin_wrote`]); for an HPA, its status writes
/// without their field sets and no later than a second after the last write of the bounds
/// (all [`status_after_spec`] reads is whether one came after it).
pub fn keep_autoscaler_reads(meta: &mut ObjectMeta, kind: AutoscalerKind) {
    keep_guarded_annotations(meta);
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let (status, spec): (Vec<_>, Vec<_>) = entries.into_iter().partition(is_status);
    let cut = |mut e: ManagedFieldsEntry| {
        let owned: serde_json::Map<String, serde_json::Value> = owned_bounds(&e, kind)
            .into_iter()
            .map(|f| (format!("f:{f}"), serde_json::json!({})))
            .collect();
        if owned.is_empty() && !e.manager.as_deref().is_some_and(field_manager::is_scaling) {
            return None;
        }
        e.fields_v1 = (!owned.is_empty()).then(|| FieldsV1(serde_json::json!({"f:spec": owned})));
        Some(e)
    };
    meta.managed_fields = Some(spec.into_iter().filter_map(cut).collect());
    if kind == AutoscalerKind::Hpa
        && let Some(written) = last_writes(meta).0
        && let Ok(cap) = written.checked_add(SignedDuration::from_secs(1))
    {
        let capped = status.into_iter().map(|e| ManagedFieldsEntry {
            fields_v1: None,
            time: e.time.map(|t| Time(t.0.min(cap))),
            ..e
        });
        meta.managed_fields.get_or_insert_default().extend(capped);
    }
}

/// The field paths of a Deployment whose `managedFields` owners the cache keeps:
/// `spec.replicas` (its latest owner, all [`replicas_set_by`] reads) and Moonin's two marks
/// (every owner, all [`copied_marks`] reads).
pub const KEPT_OWNERS: [&[&str]; 3] = [
    &["f:spec", "f:replicas"],
    &["f:metadata", "f:annotations", "f:moonin.io/owner"],
    &[
        "f:metadata",
        "f:annotations",
        "f:moonin.io/original-replicas",
    ],
];

/// A `fieldsV1` field set owning exactly `paths`.
pub fn field_set<'a>(paths: impl IntoIterator<Item = &'a [&'a str]>) -> FieldsV1 {
    let mut set = serde_json::Value::Object(serde_json::Map::new());
    for path in paths {
        let mut at = &mut set;
        for key in path {
            at = at
                .as_object_mut()
                .expect("built of objects")
                .entry(key.to_string())
                .or_insert_with(|| serde_json::json!({}));
        }
    }
    FieldsV1(set)
}

/// Trims a cached Deployment's `managedFields` to the entry that last set `spec.replicas`
/// and the entries that own one of Moonin's marks ([`KEPT_OWNERS`]), each trimmed to what
/// it owns of those.
pub fn keep_deployment_owners(meta: &mut ObjectMeta) {
    let entries = meta.managed_fields.take().unwrap_or_default();
    let latest = replicas_entry(&entries);
    let kept: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let owned: Vec<&[&str]> = KEPT_OWNERS
                .iter()
                .enumerate()
                .filter(|(k, p)| {
                    if *k == 0 {
                        latest == Some(i)
                    } else {
                        field_manager::owns(&m, p)
                    }
                })
                .map(|(_, p)| *p)
                .collect();
            (!owned.is_empty()).then(|| ManagedFieldsEntry {
                fields_v1: Some(field_set(owned)),
                ..m
            })
        })
        .collect();
    meta.managed_fields = (!kept.is_empty()).then_some(kept);
}

/// Whether one of Moonin's marks on a Deployment was last written by another field
/// manager: a copy, not Moonin's record. The Deployment controller copies a Deployment's
/// annotations onto its ReplicaSet, and `kubectl rollout undo` copies a ReplicaSet's back
/// onto the Deployment, so that rolling back to a ReplicaSet that lived through a window
/// brings that window's marks back long after it closed. A field's owner changes only when
/// its value does, so marks Moonin wrote stay Moonin's until someone changes them; with no
/// owner recorded at all, the marks are taken as Moonin's.
pub fn copied_marks(meta: &ObjectMeta) -> bool {
    KEPT_OWNERS[1..].iter().any(|path| {
        let mut owners = meta
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| field_manager::owns(m, path))
            .peekable();
        owners.peek().is_some()
            && !owners.any(|m| m.manager.as_deref() == Some(field_manager::SCALING))
    })
}

/// Whether the object's status was written after the last write of its bounds
/// ([`last_writes`]), from `managedFields` (whole seconds, so a status write in the same
/// second as that write does not count). The HPA controller writes an HPA's status with an
/// update that carries the resourceVersion it read, so a status write that lands after a
/// write of the bounds was computed from them: the evidence that the controller has acted on
/// them. Kubernetes sets neither `metadata.generation` nor `status.observedGeneration` on
/// HPAs, and the controller writes the status only when it changes, so no evidence is not
/// proof of the opposite (hence `load`'s wait for it, capped at [`super::decide::OBSERVATION_LIMIT`]).
pub fn status_after_spec(meta: &ObjectMeta) -> bool {
    match last_writes(meta) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(spec), Some(status)) => status > spec,
    }
}

/// The time of the last write of an HPA's bounds (by a field manager that owns
/// `minReplicas` or `maxReplicas`), and of the last write to its status, from
/// `managedFields` (whole seconds).
pub fn last_writes(meta: &ObjectMeta) -> (Option<Timestamp>, Option<Timestamp>) {
    let bounds =
        |m: &ManagedFieldsEntry| !is_status(m) && !owned_bounds(m, AutoscalerKind::Hpa).is_empty();
    (latest_write(meta, bounds), latest_write(meta, is_status))
}

/// Which of an autoscaler's bounds (`spec` field names) a `managedFields` entry owns.
fn owned_bounds(m: &ManagedFieldsEntry, kind: AutoscalerKind) -> Vec<&'static str> {
    [kind.min_field(), kind.max_field()]
        .into_iter()
        .filter(|f| field_manager::owns_spec(m, f))
        .collect()
}

fn is_status(m: &ManagedFieldsEntry) -> bool {
    m.subresource.as_deref() == Some("status")
}
#[cfg(test)]
pub(super) mod fixtures {
    //! `managedFields` entries for tests.
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub fn written_by(manager: &str, at: &str) -> ObjectMeta {
        entries(vec![entry(manager, None, at)])
    }

    /// An entry of `manager` that owns `fields` under the spec.
    pub fn owning(manager: &str, at: &str, fields: &[&str]) -> ManagedFieldsEntry {
        let spec: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|f| (format!("f:{f}"), serde_json::json!({})))
            .collect();
        ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": spec}))),
            ..entry(manager, None, at)
        }
    }

    pub fn entry(manager: &str, subresource: Option<&str>, at: &str) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            subresource: subresource.map(Into::into),
            time: Some(Time(at.parse().expect("time"))),
            ..ManagedFieldsEntry::default()
        }
    }

    pub fn entries(e: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(e),
            ..ObjectMeta::default()
        }
    }

    /// An entry of `manager` that owns the annotations `names`.
    pub fn annotating(manager: &str, at: &str, names: &[&str]) -> ManagedFieldsEntry {
        let owned: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .map(|k| (format!("f:{k}"), serde_json::json!({})))
            .collect();
        ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:metadata": {"f:annotations": owned}}),
            )),
            ..entry(manager, None, at)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::api::scaling::keys;

    /// The HPA controller's status write is the evidence it acted on a spec: only one in a
    /// later second than every other write counts.
    #[test]
    fn a_status_written_after_the_spec_is_the_controllers_observation() {
        let kcm = "kube-controller-manager";
        let spec = |at| owning(field_manager::SCALING, at, &["minReplicas"]);
        let status = |at| entry(kcm, Some("status"), at);
        let after = entries(vec![
            spec("2026-11-30T10:00:10Z"),
            status("2026-11-30T10:00:11Z"),
        ]);
        assert!(status_after_spec(&after));
        let same_second = entries(vec![
            spec("2026-11-30T10:00:10Z"),
            status("2026-11-30T10:00:10Z"),
        ]);
        assert!(!status_after_spec(&same_second), "the order is unknown");
        let before = entries(vec![
            status("2026-11-30T10:00:09Z"),
            spec("2026-11-30T10:00:10Z"),
        ]);
        assert!(!status_after_spec(&before));
        let never = entries(vec![spec("2026-11-30T10:00:10Z")]);
        assert!(!status_after_spec(&never));
        let bounds_later = entries(vec![
            spec("2026-11-30T10:00:10Z"),
            status("2026-11-30T10:00:11Z"),
            owning(
                "argocd-controller",
                "2026-11-30T10:00:12Z",
                &["maxReplicas"],
            ),
        ]);
        assert!(
            !status_after_spec(&bounds_later),
            "another manager wrote a bound since"
        );
        let label_later = entries(vec![
            spec("2026-11-30T10:00:10Z"),
            status("2026-11-30T10:00:11Z"),
            entry("kubectl-label", None, "2026-11-30T10:00:12Z"),
            owning("kubectl-edit", "2026-11-30T10:00:12Z", &["metrics"]),
        ]);
        assert!(
            status_after_spec(&label_later),
            "writes of no bound are not waited for"
        );
        assert!(
            status_after_spec(&ObjectMeta::default()),
            "nothing to act on"
        );
    }

    const KCM: &str = "kube-controller-manager";
    const OBSERVED: &str = "2026-11-30T10:00:02Z";

    /// An HPA's metadata as its watch sends it: created by kubectl, its minimum overridden
    /// by Moonin at 10:00:00, its status last written by the HPA controller at `status`;
    /// annotated with Moonin's applied `hash`, kubectl's last-applied copy and, if given,
    /// another tool's `team`; then the `extra` entries.
    fn hpa_meta(
        hash: &str,
        team: Option<&str>,
        status: &str,
        mut extra: Vec<ManagedFieldsEntry>,
    ) -> ObjectMeta {
        let mut m = entries(vec![
            owning(
                "kubectl-create",
                "2026-11-30T09:00:00Z",
                &["minReplicas", "maxReplicas", "metrics"],
            ),
            owning(
                field_manager::SCALING,
                "2026-11-30T10:00:00Z",
                &["minReplicas"],
            ),
            entry(KCM, Some("status"), status),
        ]);
        m.managed_fields.get_or_insert_default().append(&mut extra);
        let mut a = BTreeMap::from([
            (keys::APPLIED_HASH.to_string(), hash.to_string()),
            (
                crate::runtime::cache::LAST_APPLIED.to_string(),
                "{}".to_string(),
            ),
        ]);
        if let Some(t) = team {
            a.insert("example.com/team".to_string(), t.to_string());
        }
        m.annotations = Some(a);
        m
    }

    fn kept(mut m: ObjectMeta, kind: AutoscalerKind) -> ObjectMeta {
        keep_autoscaler_reads(&mut m, kind);
        m
    }

    /// What the autoscaler caches keep reads as the whole object does.
    #[test]
    fn the_autoscaler_caches_keep_what_decisions_read() {
        let base = hpa_meta("h1", Some("shop"), OBSERVED, vec![]);
        let cut = kept(base.clone(), AutoscalerKind::Hpa);
        assert_eq!(last_writes(&cut).0, last_writes(&base).0);
        assert_eq!(moonin_wrote(&cut), moonin_wrote(&base));
        let fields = ["minReplicas", "maxReplicas"];
        assert_eq!(spec_managers(&cut, &fields), spec_managers(&base, &fields));
        assert_eq!(
            cut.annotations,
            Some([(keys::APPLIED_HASH.to_string(), "h1".to_string())].into())
        );
        for status in [
            "2026-11-30T09:59:00Z",
            "2026-11-30T10:00:00Z",
            "2026-11-30T10:00:01Z",
            "2026-11-30T10:05:00Z",
        ] {
            let m = hpa_meta("h1", None, status, vec![]);
            assert_eq!(
                status_after_spec(&kept(m.clone(), AutoscalerKind::Hpa)),
                status_after_spec(&m),
                "status {status}"
            );
        }
        // A ScaledObject keeps no status entry: nothing reads KEDA's status writes.
        let so = kept(base.clone(), AutoscalerKind::ScaledObject);
        assert!(so.managed_fields.iter().flatten().all(|e| !is_status(e)));
        assert_eq!(moonin_wrote(&so), moonin_wrote(&base));
    }

    /// Another tool's write of an annotation or of a spec field beside the bounds, or a
    /// status write of the HPA controller once it has acted on the bounds, leaves the cached
    /// HPA as it was: only a write of a bound or a guarded annotation, Moonin's own, or the
    /// status write that shows the controller acted changes it (and wakes the templates of
    /// its Deployment).
    #[test]
    fn the_hpa_cache_changes_with_nothing_a_decision_does_not_read() {
        let cut = kept(
            hpa_meta("h1", Some("shop"), OBSERVED, vec![]),
            AutoscalerKind::Hpa,
        );
        let later = "2026-11-30T10:05:00Z";
        let unchanged = [
            hpa_meta("h1", Some("cart"), OBSERVED, vec![]),
            hpa_meta(
                "h1",
                None,
                OBSERVED,
                vec![entry("kubectl-annotate", None, later)],
            ),
            hpa_meta(
                "h1",
                Some("shop"),
                OBSERVED,
                vec![owning("kubectl-edit", later, &["metrics"])],
            ),
            // The controller writes its status again, already after the bounds.
            hpa_meta("h1", Some("shop"), later, vec![]),
        ];
        for m in unchanged {
            assert_eq!(kept(m.clone(), AutoscalerKind::Hpa), cut, "{m:?}");
        }
        let changed = [
            hpa_meta("h2", Some("shop"), OBSERVED, vec![]),
            hpa_meta(
                "h1",
                Some("shop"),
                OBSERVED,
                vec![owning("argocd-controller", later, &["maxReplicas"])],
            ),
            // Before its status write the controller had not acted on the bounds.
            hpa_meta("h1", Some("shop"), "2026-11-30T09:59:00Z", vec![]),
        ];
        for m in changed {
            assert_ne!(kept(m.clone(), AutoscalerKind::Hpa), cut, "{m:?}");
        }
    }

    /// The last manager to set `spec.replicas` is read from the entries that own it, and the
    /// cache keeps that one entry, trimmed to the field.
    #[test]
    fn the_replicas_owner_is_the_latest_entry_that_owns_them() {
        let owning = |manager: &str, sub: Option<&str>, at: &str| ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(serde_json::json!({
                "f:metadata": {"f:annotations": {}},
                "f:spec": {"f:replicas": {}, "f:template": {}}
            }))),
            ..entry(manager, sub, at)
        };
        let mut meta = entries(vec![
            owning("kubectl", None, "2026-11-30T09:00:00Z"),
            entry(field_manager::SCALING, None, "2026-11-30T10:00:05Z"),
            owning(
                "kube-controller-manager",
                Some("scale"),
                "2026-11-30T10:00:03Z",
            ),
        ]);
        let kcm = Some((
            "kube-controller-manager".to_string(),
            "2026-11-30T10:00:03Z".parse().expect("time"),
        ));
        assert_eq!(
            replicas_set_by(&meta),
            kcm,
            "a later entry without replicas"
        );
        keep_deployment_owners(&mut meta);
        assert_eq!(replicas_set_by(&meta), kcm);
        let kept = meta.managed_fields.as_deref().unwrap_or_default();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            kept[0].fields_v1.as_ref().map(|f| f.0.clone()),
            Some(serde_json::json!({"f:spec": {"f:replicas": {}}}))
        );
        let mut none = written_by("kubectl", "2026-11-30T09:00:00Z");
        keep_deployment_owners(&mut none);
        assert_eq!((replicas_set_by(&none), none.managed_fields), (None, None));
    }

    #[test]
    fn the_kept_owner_paths_are_the_marks_keys() {
        assert_eq!(KEPT_OWNERS[1][2], format!("f:{}", keys::OWNER));
        assert_eq!(KEPT_OWNERS[2][2], format!("f:{}", keys::ORIGINAL_REPLICAS));
    }
}
