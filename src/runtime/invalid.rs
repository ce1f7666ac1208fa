//! Objects the watches could not decode, and how they are reported.
//!
//! Every watch of the manager decodes its objects one by one ([`super::decode`]). What does
//! not decode is recorded here, per kind, logged once (with the field and the decoder's
//! message, never the object), counted in `moonin_invalid_objects{kind}`, and left out of
//! the typed caches, so every other object of the kind keeps being reconciled. For Moonin's
//! own kinds, [`report`] also gives the object `Ready=False` with reason `InvalidSpec` (and
//! `Stalled=True`, which kstatus reads as Failed) and a Warning Event naming the field —
//! written as raw JSON, since the object has no typed form. A core object (a Deployment
//! from a newer API server, say) is only skipped: it is not Moonin's to annotate.
//!
//! The registry is process-wide, like [`super::access`]: the watches that fill it
//! are spread over the controllers.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
    time::Duration,
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::watcher,
};
use serde_json::{Value, json};

use super::decode::{Decoded, Undecodable};
use super::{events::Publisher, leader::Leadership};
use crate::api::{
    conditions::{reasons, types},
    field_manager,
};

/// `(kind, namespace, name)`.
type Key = (String, String, String);

struct Entry {
    object: Undecodable,
    /// Not seen in the relist under way (removed when it completes).
    stale: bool,
}

static INVALID: Mutex<BTreeMap<Key, Entry>> = Mutex::new(BTreeMap::new());
/// Wakes the reporters when an object becomes (or changes while) invalid.
static CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// How often a reporter looks again when nothing wakes it (a failed status write retries
/// then).
const RESYNC: Duration = Duration::from_secs(300);
use super::events::NOTE_MAX as NOTE_LIMIT;

fn key_of(kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        kind.to_string(),
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn reference(kind: &str, key: &Key) -> String {
    if key.1.is_empty() {
        format!("{kind}/{}", key.2)
    } else {
        format!("{kind} {}/{}", key.1, key.2)
    }
}

/// Records what one watch event says about the objects of `K` that do not decode. Call it
/// for every event of a [`Decoded`] watch, before the event reaches a store.
pub fn observe<K>(event: &watcher::Event<Decoded<K>>)
where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&());
    let mut g = INVALID.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        watcher::Event::Init => {
            for (_, e) in g.range_mut(kind_range(&kind)) {
                e.stale = true;
            }
        }
        watcher::Event::InitDone => {
            let gone: Vec<Key> = g
                .range(kind_range(&kind))
                .filter(|(_, e)| e.stale)
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                g.remove(&k);
            }
        }
        watcher::Event::Apply(Decoded::Invalid(u))
        | watcher::Event::InitApply(Decoded::Invalid(u)) => {
            let key = key_of(&kind, &u.metadata);
            let new = g.get(&key).is_none_or(|e| {
                e.object.metadata.uid != u.metadata.uid
                    || e.object.metadata.generation != u.metadata.generation
                    || e.object.message() != u.message()
            });
            if new {
                tracing::warn!(
                    object = %reference(&kind, &key),
                    field = %u.field,
                    error = %u.error,
                    "cannot decode this object: it is skipped until it changes"
                );
            }
            g.insert(
                key,
                Entry {
                    object: (**u).clone(),
                    stale: false,
                },
            );
            drop(g);
            if new {
                CHANGED.notify_waiters();
            }
        }
        watcher::Event::Apply(Decoded::Valid(k)) | watcher::Event::InitApply(Decoded::Valid(k)) => {
            let key = key_of(&kind, k.meta());
            if g.remove(&key).is_some() {
                tracing::info!(object = %reference(&kind, &key), "the object decodes again");
            }
        }
        watcher::Event::Delete(d) => {
            g.remove(&key_of(&kind, d.meta()));
        }
    }
}

fn kind_range(kind: &str) -> std::ops::RangeInclusive<Key> {
    let lo = (kind.to_string(), String::new(), String::new());
    // No namespace or name sorts after `char::MAX` repeated.
    let top = char::MAX.to_string().repeat(2);
    (lo.clone())..=(kind.to_string(), top.clone(), top)
}

/// How many objects of each kind do not decode now (`moonin_invalid_objects`).
pub fn counts() -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (k, _) in INVALID.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        *out.entry(k.0.clone()).or_insert(0) += 1;
    }
    out
}

/// The objects of `kind` that do not decode now.
pub fn of_kind(kind: &str) -> Vec<Undecodable> {
    INVALID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .range(kind_range(kind))
        .map(|(_, e)| e.object.clone())
        .collect()
}

/// The object of `kind` named `namespace/name`, if it does not decode now.
pub fn find(kind: &str, namespace: &str, name: &str) -> Option<Undecodable> {
    INVALID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(kind.to_string(), namespace.to_string(), name.to_string()))
        .map(|e| e.object.clone())
}

/// The status that reports `object` invalid, or `None` when its status already says so
/// (for this generation, with this message).
pub fn report_patch(object: &Undecodable, now: Timestamp) -> Option<Value> {
    let message = object.message();
    let generation = object.metadata.generation;
    let s = &object.status;
    if s.observed_generation == generation
        && s.ready_reason.as_deref() == Some(reasons::INVALID_SPEC)
        && s.ready_message.as_deref() == Some(message.as_str())
    {
        return None;
    }
    let condition = |type_: &str, status: &str| {
        json!({
            "type": type_,
            "status": status,
            "reason": reasons::INVALID_SPEC,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": now.to_string(),
        })
    };
    Some(json!({"status": {
        "observedGeneration": generation,
        "conditions": [
            condition(types::READY, "False"),
            condition(types::STALLED, "True"),
            condition(types::RECONCILING, "False"),
        ],
    }}))
}

/// The Warning Event's note for `object`, within the API server's limit.
pub fn event_note(object: &Undecodable) -> String {
    let mut note = format!(
        "cannot decode {}; nothing is done with this object until it is fixed",
        object.message()
    );
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// What one report said: `(uid, generation, message)`.
type Stamp = (Option<String>, Option<i64>, String);

/// Reports the objects of Moonin's kind `K` that do not decode, while this process leads:
/// `Ready=False`/`Stalled=True` with reason `InvalidSpec` in their status, and a Warning
/// Event when that status is written. Runs until `shutdown`.
pub async fn report<K>(
    client: Client,
    leadership: Leadership,
    events: Publisher,
    shutdown: tokio_util::sync::CancellationToken,
) where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&()).to_string();
    let resource = ApiResource::erase::<K>(&());
    // What this process wrote, per `(namespace, name)`, until the watch shows it.
    let mut written: HashMap<(String, String), Stamp> = HashMap::new();
    let mut acquisitions = Box::pin(leadership.acquisitions());
    loop {
        let changed = CHANGED.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if leadership.is_leader() {
            let objects = of_kind(&kind);
            written.retain(|k, _| objects.iter().any(|o| id_of(o) == *k));
            for object in objects {
                let id = id_of(&object);
                let stamp = (
                    object.metadata.uid.clone(),
                    object.metadata.generation,
                    object.message(),
                );
                if written.get(&id) == Some(&stamp) {
                    continue;
                }
                let Some(body) = report_patch(&object, Timestamp::now()) else {
                    continue;
                };
                if write_report::<K>(&client, &resource, &events, &object, &body).await {
                    written.insert(id, stamp);
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = &mut changed => {}
            _ = acquisitions.next() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

fn id_of(object: &Undecodable) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// Writes one report (`body`) and its Event; whether it stands now.
async fn write_report<K>(
    client: &Client,
    resource: &ApiResource,
    events: &Publisher,
    object: &Undecodable,
    body: &Value,
) -> bool
where
    K: Resource<DynamicType = ()>,
{
    let kind = K::kind(&()).to_string();
    let (ns, name) = id_of(object);
    let api: kube::Api<DynamicObject> = if ns.is_empty() {
        kube::Api::all_with(client.clone(), resource)
    } else {
        kube::Api::namespaced_with(client.clone(), &ns, resource)
    };
    let pp = PatchParams {
        field_manager: Some(field_manager::MANAGER.to_string()),
        ..PatchParams::default()
    };
    match api.patch_status(&name, &pp, &Patch::Merge(body)).await {
        Ok(_) => {}
        // Deleted meanwhile: nothing to report.
        Err(kube::Error::Api(s)) if s.code == 404 => return true,
        Err(e) => {
            tracing::info!(
                object = %reference(&kind, &(kind.clone(), ns, name)),
                error = %super::errors::brief(&e),
                "could not report an undecodable object; retrying later"
            );
            return false;
        }
    }
    let regarding = ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(kind),
        name: Some(name),
        namespace: (!ns.is_empty()).then_some(ns),
        uid: object.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    events
        .publish(
            &regarding,
            true,
            reasons::INVALID_SPEC,
            Some("Decode"),
            &event_note(object),
        )
        .await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::sandbox::SandboxClaim;
    use crate::runtime::decode::decode;

    fn claim(name: &str, ok: bool) -> Decoded<SandboxClaim> {
        let pool_ref = if ok { json!({"name": "p"}) } else { json!(7) };
        decode(json!({
            "metadata": {"name": name, "namespace": "invalid-test", "uid": format!("u-{name}"), "generation": 1},
            "spec": {"poolRef": pool_ref},
        }))
    }

    fn names() -> Vec<String> {
        of_kind("SandboxClaim")
            .into_iter()
            .filter(|u| u.metadata.namespace.as_deref() == Some("invalid-test"))
            .filter_map(|u| u.metadata.name)
            .collect()
    }

    #[test]
    fn the_registry_follows_the_watch_and_a_relist_drops_what_vanished() {
        use watcher::Event::*;
        observe::<SandboxClaim>(&Init);
        observe(&InitApply(claim("a", false)));
        observe(&InitApply(claim("b", true)));
        observe(&InitApply(claim("c", false)));
        observe::<SandboxClaim>(&InitDone);
        assert_eq!(names(), ["a", "c"]);
        // Fixed, then deleted.
        observe(&Apply(claim("a", true)));
        observe(&Delete(claim("c", false)));
        assert!(names().is_empty());
        observe(&Apply(claim("d", false)));
        assert_eq!(names(), ["d"]);
        // A relist without `d`: it went away while the watch was down.
        observe::<SandboxClaim>(&Init);
        observe(&InitApply(claim("e", false)));
        observe::<SandboxClaim>(&InitDone);
        assert_eq!(names(), ["e"]);
        assert!(counts().get("SandboxClaim").is_some_and(|n| *n >= 1));
        observe(&Delete(claim("e", false)));
    }

    #[test]
    fn a_standing_report_is_not_written_again() {
        let Decoded::Invalid(u) = claim("r", false) else {
            panic!("decoded");
        };
        let now = Timestamp::UNIX_EPOCH;
        let body = report_patch(&u, now).expect("a first report");
        assert_eq!(body["status"]["conditions"][0]["reason"], "InvalidSpec");
        assert_eq!(body["status"]["conditions"][0]["status"], "False");
        assert_eq!(body["status"]["conditions"][1]["type"], "Stalled");
        assert_eq!(body["status"]["observedGeneration"], 1);
        let message = body["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.starts_with("spec.poolRef: invalid type"),
            "{message}"
        );
        let mut reported = (*u).clone();
        reported.status.observed_generation = Some(1);
        reported.status.ready_reason = Some("InvalidSpec".into());
        reported.status.ready_message = Some(message.clone());
        assert_eq!(report_patch(&reported, now), None);
        // A new generation with the same fault is reported again.
        reported.metadata.generation = Some(2);
        assert!(report_patch(&reported, now).is_some());
    }

    #[test]
    fn an_event_note_fits_the_api_servers_limit() {
        let Decoded::Invalid(mut u) = claim("n", false) else {
            panic!("decoded");
        };
        u.error = "é".repeat(2000);
        let note = event_note(&u);
        assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
        assert!(note.ends_with("..."));
    }
}
