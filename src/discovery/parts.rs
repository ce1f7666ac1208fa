//! The commit of one namespace's inventory: written in as many parts as it takes
//! ([`write`], each part one server-side apply of the whole object), skipping parts that did
//! not change ([`WrittenDigests`]), and removing parts left from a larger split
//! ([`delete_parts`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use jiff::Timestamp;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::reflector::ObjectRef,
};
use serde_json::json;

use super::{
    errors::gone_is_done,
    inventory,
    names::CONTROLLER,
    names::{condition_reasons, condition_types},
    shared::Shared,
};
use crate::api::{
    conditions::{self, Desired, types},
    discovery::{ClusterDiscovery, NamespaceInventory, NamespaceInventoryStatus},
    field_manager,
};

/// A digest of each inventory status written, per `(namespace, part)` (`-1`: a part whose
/// name says no number), to skip unchanged writes while the store has not caught up (a
/// copy would double the memory the inventories take). Shared by the namespaces written at
/// once; the lock is never held across a request.
#[derive(Debug, Default)]
pub struct WrittenDigests(Mutex<HashMap<(String, i32), u64>>);

impl WrittenDigests {
    fn digests(&self) -> MutexGuard<'_, HashMap<(String, i32), u64>> {
        // A panic elsewhere cannot leave a digest half-written: take the map as it is.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `status` is what was last written to that part.
    fn unchanged(&self, key: &(String, i32), status: &NamespaceInventoryStatus) -> bool {
        self.digests().get(key) == Some(&digest(status))
    }

    /// `status` was written to that part.
    fn written(&self, key: (String, i32), status: &NamespaceInventoryStatus) {
        let d = digest(status);
        self.digests().insert(key, d);
    }

    /// Forgets every part of every namespace: another replica may have written since.
    pub fn clear(&self) {
        self.digests().clear();
    }

    /// Forgets every part of namespace `ns` (deleted, or no longer inventoried).
    pub fn forget_namespace(&self, ns: &str) {
        self.digests().retain(|(n, _), _| n != ns);
    }

    fn forget(&self, key: &(String, i32)) {
        self.digests().remove(key);
    }
}

/// A digest of a status as it is serialised (the same value gives the same digest).
fn digest(status: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(status).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// One part's write: the whole object (a NamespaceInventory has no status subresource, so
/// one server-side apply creates or updates it, spec and status together).
#[derive(Debug, Clone, PartialEq)]
pub struct PartWrite {
    /// The part's name.
    pub name: String,
    /// The key of its digest.
    key: (String, i32),
    /// Whether its spec (part numbers, owner) changes: it is new, or its numbers changed.
    pub spec: bool,
    /// Its status.
    pub status: NamespaceInventoryStatus,
    /// Whether to write it: its spec changes, or its status says something other than what
    /// the stored part says (conditions' times aside) and what was last written.
    pub write: bool,
}

/// The writes of an inventory split into `parts`, given the stored parts (`existing`) and
/// what was last written. A part carries no `observedGeneration`: without a status
/// subresource every write moves the generation, so none could say it is current.
pub fn plan_parts(
    ns: &str,
    parts: Vec<NamespaceInventoryStatus>,
    existing: impl Fn(&str) -> Option<Arc<NamespaceInventory>>,
    written: &WrittenDigests,
    now: Timestamp,
) -> Vec<PartWrite> {
    let n = parts.len();
    let mut writes = Vec::new();
    for (i, mut part) in parts.into_iter().enumerate() {
        let name = inventory::part_name(i);
        let existing = existing(&name);
        let spec_ok = existing
            .as_ref()
            .is_some_and(|e| e.spec.part == i as i32 && e.spec.parts == n as i32);
        let current = existing
            .as_ref()
            .and_then(|e| e.status.clone())
            .unwrap_or_default();
        part.observed_generation = None;
        part.conditions = conditions::merge(&current.conditions, &part_conditions(i, n), None, now);
        let key = (ns.to_string(), i as i32);
        let same = conditions::same_status(&current, &part, |st| &mut st.conditions)
            || written.unchanged(&key, &part);
        writes.push(PartWrite {
            name,
            key,
            spec: !spec_ok,
            write: !spec_ok || !same,
            status: part,
        });
    }
    writes
}

/// `Ready`, and `Truncated` saying which part of how many this is.
fn part_conditions(i: usize, n: usize) -> [Desired; 2] {
    let truncated = if n > 1 {
        Desired::new(
            condition_types::TRUNCATED,
            true,
            condition_reasons::SPLIT,
            format!(
                "the inventory passes {} KiB; this is part {} of {n}",
                inventory::MAX_BYTES / 1024,
                i + 1
            ),
        )
    } else {
        Desired::new(
            condition_types::TRUNCATED,
            false,
            condition_reasons::COMPLETE,
            "the inventory fits one object",
        )
    };
    [
        Desired::new(
            types::READY,
            true,
            condition_reasons::INVENTORIED,
            "the namespace's inventory is current",
        ),
        truncated,
    ]
}

/// Writes a namespace's inventory, split into parts when it would be too large; removes
/// parts left from an earlier, larger split. Returns the number of parts.
pub async fn write(
    shared: &Shared,
    written: &WrittenDigests,
    cd: &ClusterDiscovery,
    ns: &str,
    status: NamespaceInventoryStatus,
    now: Timestamp,
) -> Result<usize, kube::Error> {
    let parts = inventory::split(status, inventory::MAX_BYTES);
    let n = parts.len();
    let existing = |name: &str| {
        shared
            .stores
            .inventories
            .get(&ObjectRef::new(name).within(ns))
    };
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    let pp = PatchParams::apply(field_manager::DISCOVERY).force();
    for (i, part) in plan_parts(ns, parts, existing, written, now)
        .into_iter()
        .enumerate()
    {
        if !part.write {
            continue;
        }
        // Always the whole object: a field left out of an apply is a field given up.
        let body = json!({
            "apiVersion": "moonin.io/v1alpha1",
            "kind": "NamespaceInventory",
            "metadata": {
                "name": part.name,
                "namespace": ns,
                "ownerReferences": [{
                    "apiVersion": "moonin.io/v1alpha1",
                    "kind": "ClusterDiscovery",
                    "name": cd.name_any(),
                    "uid": cd.uid().unwrap_or_default(),
                }],
            },
            "spec": {"part": i, "parts": n},
            "status": part.status,
        });
        shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
        api.patch(&part.name, &pp, &Patch::Apply(&body)).await?;
        written.written(part.key, &part.status);
    }
    delete_parts(shared, written, ns, n).await?;
    Ok(n)
}

/// Deletes a namespace's inventory parts from the `n`th on (all of them for 0).
pub async fn delete_parts(
    shared: &Shared,
    written: &WrittenDigests,
    ns: &str,
    n: usize,
) -> Result<(), kube::Error> {
    let api: Api<NamespaceInventory> = Api::namespaced(shared.client.clone(), ns);
    for old in shared.stores.inventories.state() {
        // A part is known by its name (`inventory`, `inventory-<i>`; admission allows no
        // other), whatever its spec says: one someone else wrote goes as well.
        let index = inventory::part_of(&old.name_any());
        if old.namespace().as_deref() != Some(ns) || index.is_some_and(|i| i < n) {
            continue;
        }
        shared.ctx.metrics.wrote(CONTROLLER, "NamespaceInventory");
        gone_is_done(api.delete(&old.name_any(), &DeleteParams::default()).await)?;
        written.forget(&(ns.to_string(), index.map_or(-1, |i| i as i32)));
    }
    Ok(())
}

#[cfg(test)]
#[path = "parts_tests.rs"]
mod tests;
