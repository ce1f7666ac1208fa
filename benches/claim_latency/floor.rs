//! The floor: no controller runs; this process makes, at the claim rate, the API calls that
//! one bind and one replacement need, as Moonin makes them (`src/sandbox/commit.rs`), so
//! that the plane's own limit stands beside the systems'.
//!
//! The pool is Pods of the same template as Moonin's and agent-sandbox's
//! ([`pod_template`]), created by this process, labelled like Moonin's (`moonin.io/pool`,
//! `moonin.io/state=idle`), with no owner. The claims are Moonin `SandboxClaim`s in a
//! namespace no Moonin manager watches. For each claim, once its create returned (the
//! claim is the client's write, as with every system):
//!
//! 1. a Ready, idle Pod with an IP is taken from a cache that a watch of the namespace's
//!    Pods keeps (claims wait first come, first served, as with Moonin's pool), and patched
//!    with a JSON Patch that tests the resourceVersion it was read at and sets
//!    `moonin.io/state=claimed`, `moonin.io/claim` and `moonin.io/state-since`; a failed
//!    test puts the claim back at the head of the queue;
//! 2. the claim's status: `phase: Bound` with the rest Moonin writes
//!    (`moonin::sandbox::claim::bound_status`), a merge patch guarded by the claim's
//!    resourceVersion;
//! 3. the Pod is deleted with UID and resourceVersion preconditions;
//! 4. a replacement Pod is created from the template under a client-chosen name.
//!
//! Steps 3 and 4 follow step 2 at once, where Moonin waits for the claim's delete (which the
//! benchmark sends when it sees the claim bound): the same calls at the same rate, a little
//! sooner. The writes counted as the controller's are those of steps 1–4, retries included
//! (4 per claim when nothing is retried); the claim's create is not among them.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PostParams},
    runtime::watcher,
};
use moonin::{
    api::{
        field_manager,
        sandbox::{SandboxClaim, SandboxClaimStatus},
    },
    runtime::errors::is_conflict,
    sandbox::{
        claim::bound_status,
        pool::{keys, pod_name},
        writer::{guarded_delete, json_patch, params},
    },
};
use serde_json::json;

use crate::{
    POLL,
    shared::{
        report::progress,
        wait,
        watch::{self, Seen as Event},
    },
    system::{POOL, pod_template},
};

/// Pods of the pool created at once while it fills (not measured).
const FILL_AT_ONCE: usize = 16;

/// A sandbox Pod as the floor's cache holds it.
struct Cached {
    uid: String,
    resource_version: String,
    ip: Option<String>,
    ready: bool,
    idle: bool,
    terminating: bool,
    /// Chosen for a claim (by this process).
    taken: bool,
    /// The resourceVersion a patch of it was refused at: not chosen again before it changes.
    refused: Option<String>,
}

impl Cached {
    fn from_pod(pod: &Pod) -> Self {
        let status = pod.status.as_ref();
        Cached {
            uid: pod.uid().unwrap_or_default(),
            resource_version: pod.resource_version().unwrap_or_default(),
            ip: status.and_then(|s| s.pod_ip.clone()),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            idle: pod.labels().get(keys::STATE).map(String::as_str) == Some(keys::IDLE),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            taken: false,
            refused: None,
        }
    }

    /// Ready, idle, with an IP, not chosen yet, and not refused at this resourceVersion.
    fn free(&self) -> bool {
        self.ready
            && self.ip.is_some()
            && self.idle
            && !self.terminating
            && !self.taken
            && self.refused.as_ref() != Some(&self.resource_version)
    }
}

/// A claim waiting for a Pod, as its create returned it.
struct Waiting {
    name: String,
    uid: String,
    resource_version: String,
    generation: Option<i64>,
    since: Instant,
}

/// One bind to perform: the claim, and the Pod as the cache held it.
struct Bind {
    claim: Waiting,
    pod: String,
    uid: String,
    resource_version: String,
    ip: Option<String>,
}

#[derive(Default)]
struct State {
    /// Pod name → what the watch last said of it.
    pods: HashMap<String, Cached>,
    queue: VecDeque<Waiting>,
}

struct Inner {
    pods: Api<Pod>,
    claims: Api<SandboxClaim>,
    state: Mutex<State>,
    /// The writes made in the controller's place (steps 1–4).
    writes: AtomicU64,
    /// The next seed of a Pod name.
    seed: AtomicU64,
    /// Binds started and not finished.
    in_flight: AtomicUsize,
    stopped: AtomicBool,
}

/// The floor of one stage: the cache of its Pods and the binds it performs.
pub struct Floor {
    inner: Arc<Inner>,
    watch: tokio::task::JoinHandle<()>,
}

/// Hands the claims this process created to the floor. Cheap to clone.
#[derive(Clone)]
pub struct Binder(Arc<Inner>);

impl Binder {
    /// Queues the claim the create call returned, and binds what can be bound.
    pub fn claimed(&self, created: &DynamicObject) {
        let waiting = Waiting {
            name: created.name_any(),
            uid: created.uid().unwrap_or_default(),
            resource_version: created.resource_version().unwrap_or_default(),
            generation: created.metadata.generation,
            since: Instant::now(),
        };
        lock(&self.0).queue.push_back(waiting);
        dispatch(&self.0);
    }
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, State> {
    inner.state.lock().expect("floor state")
}

impl Floor {
    /// Starts the watch of `ns`'s Pods that feeds the cache.
    pub fn start(client: &Client, ns: &str) -> Self {
        let inner = Arc::new(Inner {
            pods: Api::namespaced(client.clone(), ns),
            claims: Api::namespaced(client.clone(), ns),
            state: Mutex::default(),
            writes: AtomicU64::new(0),
            seed: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        });
        let fed = inner.clone();
        let config = watcher::Config::default().labels(&format!("{}={POOL}", keys::POOL));
        let watch = watch::spawn("floor pod", inner.pods.clone(), config, move |event| {
            match event {
                Event::Object(p) => {
                    let mut s = lock(&fed);
                    let mut fresh = Cached::from_pod(&p);
                    if let Some(old) = s.pods.get(&p.name_any()) {
                        fresh.taken = old.taken;
                        fresh.refused = old.refused.clone();
                    }
                    s.pods.insert(p.name_any(), fresh);
                }
                Event::Deleted(p) => {
                    lock(&fed).pods.remove(&p.name_any());
                }
                _ => return,
            }
            dispatch(&fed);
        });
        Floor { inner, watch }
    }

    pub fn binder(&self) -> Binder {
        Binder(self.inner.clone())
    }

    /// The writes made in the controller's place so far.
    pub fn writes(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }

    /// Pods in the cache free for a claim.
    pub fn idle(&self) -> usize {
        lock(&self.inner).pods.values().filter(|c| c.free()).count()
    }

    /// Creates the pool's `size` Pods, [`FILL_AT_ONCE`] at a time (not counted as writes).
    pub async fn create_pool(&self, size: usize) -> Result<(), String> {
        let results: Vec<Result<(), String>> = futures::stream::iter(0..size)
            .map(|_| create_pod(&self.inner))
            .buffer_unordered(FILL_AT_ONCE)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Stops binding: no new bind starts, the watch ends, and the binds in flight finish
    /// (for at most 30 s), so nothing creates a Pod after this returns.
    pub async fn stop(self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        self.watch.abort();
        let inner = &self.inner;
        let done = wait::until(
            "the floor's binds in flight to finish",
            Instant::now() + Duration::from_secs(30),
            POLL,
            || async { (inner.in_flight.load(Ordering::SeqCst) == 0).then_some(()) },
        )
        .await;
        if let Err(e) = done {
            progress(&format!("floor: {e}"));
        }
    }
}

/// Pairs waiting claims with free Pods, first come, first served, and starts their binds.
fn dispatch(inner: &Arc<Inner>) {
    if inner.stopped.load(Ordering::SeqCst) {
        return;
    }
    let mut s = lock(inner);
    while !s.queue.is_empty() {
        let Some((name, pod)) = s.pods.iter_mut().find(|(_, c)| c.free()) else {
            break;
        };
        pod.taken = true;
        let (pod, uid, resource_version, ip) = (
            name.clone(),
            pod.uid.clone(),
            pod.resource_version.clone(),
            pod.ip.clone(),
        );
        let claim = s.queue.pop_front().expect("a waiting claim");
        inner.in_flight.fetch_add(1, Ordering::SeqCst);
        let job = Bind {
            claim,
            pod,
            uid,
            resource_version,
            ip,
        };
        tokio::spawn(bind(inner.clone(), job));
    }
}

/// Steps 1–4 for one claim.
async fn bind(inner: Arc<Inner>, job: Bind) {
    let now = Timestamp::now();
    let held = format!("{}/{}", job.claim.name, job.claim.uid);
    let patch = json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": job.resource_version},
        {"op": "add", "path": "/metadata/labels/moonin.io~1state", "value": keys::CLAIMED},
        {"op": "add", "path": "/metadata/annotations/moonin.io~1claim", "value": held},
        {"op": "add", "path": "/metadata/annotations/moonin.io~1state-since", "value": now.to_string()},
    ]));
    inner.writes.fetch_add(1, Ordering::Relaxed);
    let manager = params(field_manager::SANDBOX);
    match inner.pods.patch(&job.pod, &manager, &patch).await {
        Ok(patched) => {
            bind_claim(&inner, &job, now).await;
            let rv = patched.resource_version().unwrap_or_default();
            delete_pod(&inner, &job.pod, &job.uid, rv).await;
            if !inner.stopped.load(Ordering::SeqCst)
                && let Err(e) = create_counted(&inner).await
            {
                progress(&format!("floor: {e}"));
            }
        }
        Err(e) => refused(&inner, job, &e),
    }
    inner.in_flight.fetch_sub(1, Ordering::SeqCst);
}

/// A Pod patch refused: the claim goes back to the head of the queue, the Pod is not
/// chosen again at that resourceVersion.
fn refused(inner: &Arc<Inner>, job: Bind, e: &kube::Error) {
    if !is_conflict(e) {
        progress(&format!("floor: binding {} refused: {e}", job.pod));
    }
    {
        let mut s = lock(inner);
        if let Some(c) = s.pods.get_mut(&job.pod) {
            c.taken = false;
            c.refused = Some(job.resource_version);
        }
        s.queue.push_front(job.claim);
    }
    dispatch(inner);
}

/// Step 2: the claim's status names the Pod, guarded by the claim's resourceVersion.
async fn bind_claim(inner: &Inner, job: &Bind, now: Timestamp) {
    let c = &job.claim;
    let wait = c.since.elapsed().as_millis() as i64;
    let status = bound_status(
        &SandboxClaimStatus::default(),
        c.generation,
        &job.pod,
        job.ip.clone(),
        wait,
        now,
    );
    let body = json!({
        "metadata": {"resourceVersion": c.resource_version},
        "status": status,
    });
    inner.writes.fetch_add(1, Ordering::Relaxed);
    let manager = params(field_manager::SANDBOX);
    if let Err(e) = inner
        .claims
        .patch_status(&c.name, &manager, &Patch::Merge(&body))
        .await
    {
        progress(&format!(
            "floor: the status of claim {} refused: {e}",
            c.name
        ));
    }
}

/// Step 3: deletes the Pod with UID and resourceVersion preconditions; on a conflict, reads
/// it again and retries (at most three times).
async fn delete_pod(inner: &Inner, pod: &str, uid: &str, mut resource_version: String) {
    for _ in 0..3 {
        inner.writes.fetch_add(1, Ordering::Relaxed);
        match inner
            .pods
            .delete(pod, &guarded_delete(uid, &resource_version))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) if is_conflict(&e) => match inner.pods.get(pod).await {
                Ok(p) => resource_version = p.resource_version().unwrap_or_default(),
                Err(_) => return,
            },
            Err(e) => {
                progress(&format!("floor: deleting {pod} refused: {e}"));
                return;
            }
        }
    }
}

/// Step 4: a replacement Pod, counted as the controller's write.
async fn create_counted(inner: &Inner) -> Result<(), String> {
    inner.writes.fetch_add(1, Ordering::Relaxed);
    create_pod(inner).await
}

/// Creates one idle Pod of the pool from the template, under a fresh name.
async fn create_pod(inner: &Inner) -> Result<(), String> {
    let name = pod_name(POOL, inner.seed.fetch_add(1, Ordering::Relaxed));
    let mut v = pod_template();
    v["metadata"]["name"] = json!(name);
    v["metadata"]["labels"][keys::POOL] = json!(POOL);
    v["metadata"]["labels"][keys::STATE] = json!(keys::IDLE);
    v["metadata"]["annotations"] = json!({keys::STATE_SINCE: Timestamp::now().to_string()});
    let pod: Pod = serde_json::from_value(v).expect("a sandbox Pod");
    let pp = PostParams {
        field_manager: Some(field_manager::SANDBOX.to_string()),
        ..PostParams::default()
    };
    inner
        .pods
        .create(&pp, &pod)
        .await
        .map(|_| ())
        .map_err(|e| format!("creating Pod {name}: {e}"))
}
