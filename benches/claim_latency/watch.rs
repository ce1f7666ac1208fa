//! What the benchmark's watches saw: Pods by UID and claims by name, each with the instant
//! its event arrived.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, ResourceExt, api::DeleteParams, runtime::watcher};

use crate::{
    POLL,
    shared::{
        wait,
        watch::{self, Seen as Event},
    },
    system::System,
};

/// What happened to one Pod, as the watch saw it.
#[derive(Default)]
pub struct PodSeen {
    pub added: Option<Instant>,
    pub ready: Option<Instant>,
    pub terminating: bool,
    pub gone: bool,
}

/// What the watches of one phase saw.
#[derive(Default)]
pub struct Seen {
    /// Claim name → first instant it was seen bound.
    pub bound: HashMap<String, Instant>,
    /// Pod UID → what happened to it.
    pub pods: HashMap<String, PodSeen>,
    pub synced: [bool; 2],
    pub relists: u32,
    pub errors: u32,
}

impl Seen {
    /// Counts what a watch event other than an object says: watch `index` synced, relisted
    /// or failed.
    pub fn count<K>(&mut self, index: usize, event: &Event<K>) {
        match event {
            Event::Synced => self.synced[index] = true,
            Event::Relisted => self.relists += 1,
            Event::Failed => self.errors += 1,
            Event::Object(_) | Event::Deleted(_) => {}
        }
    }

    pub fn live_ready(&self) -> usize {
        self.pods
            .values()
            .filter(|p| p.ready.is_some() && !p.terminating && !p.gone)
            .count()
    }
}

/// [`Seen`], written by the watches and read by the phase.
pub type Shared = Arc<Mutex<Seen>>;

fn on_pod(seen: &mut Seen, pod: &Pod, at: Instant, deleted: bool) {
    let uid = pod.uid().unwrap_or_default();
    let e = seen.pods.entry(uid).or_default();
    if e.added.is_none() {
        e.added = Some(at);
    }
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if ready && e.ready.is_none() {
        e.ready = Some(at);
    }
    e.terminating |= pod.metadata.deletion_timestamp.is_some();
    e.gone |= deleted;
}

/// Waits until both watches of [`spawn_watches`] listed what there is.
pub async fn watches_synced(seen: &Shared) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    wait::until("the watches to sync", deadline, POLL, || async {
        seen.lock()
            .expect("seen")
            .synced
            .iter()
            .all(|s| *s)
            .then_some(())
    })
    .await
}

/// Watches the namespace's Pods and the system's claims, recording arrival instants. With
/// `release`, deletes every claim once it is seen bound.
pub fn spawn_watches(
    system: System,
    client: &Client,
    ns: &str,
    seen: Shared,
    release: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod_seen = seen.clone();
    let pod_task = watch::spawn("pod", pods, watcher::Config::default(), move |event| {
        let at = Instant::now();
        let mut s = pod_seen.lock().expect("seen");
        match event {
            Event::Object(p) => on_pod(&mut s, &p, at, false),
            Event::Deleted(p) => on_pod(&mut s, &p, at, true),
            event => s.count(0, &event),
        }
    });
    let claims = system.claims(client, ns);
    let api = claims.clone();
    let claim_task = watch::spawn("claim", api, watcher::Config::default(), move |event| {
        let at = Instant::now();
        let mut s = seen.lock().expect("seen");
        let Event::Object(c) = event else {
            return s.count(1, &event);
        };
        let name = c.name_any();
        if system.is_bound(&c) && !s.bound.contains_key(&name) {
            s.bound.insert(name.clone(), at);
            if release {
                let claims = claims.clone();
                tokio::spawn(async move {
                    let _ = claims.delete(&name, &DeleteParams::background()).await;
                });
            }
        }
    });
    vec![pod_task, claim_task]
}
