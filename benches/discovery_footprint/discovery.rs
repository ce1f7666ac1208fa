//! Moonin's side: `moonin run --controllers discovery` from its start until warm, a steady
//! window, then a few image changes and what they caused.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::{Duration, Instant},
};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use moonin::api::discovery::{ClusterDiscovery, NamespaceInventory, WorkloadRevision};
use serde_json::json;

use crate::{
    CHANGE_KINDS, DISCOVERY, HEARTBEAT_KIND, LABEL_KEY, LABEL_VALUE, POLL, Params, QUIET, SELECTOR,
    VERBS, namespace_name,
    objects::labels,
    placement,
    shared::{
        harness::{Manager, TestNamespace, metric_sum},
        http::get_parsed,
        machine::{self, wait_until_quiet},
        manager::{self as bench_manager, ManagerSeat},
        metrics::{Counters as Scrape, scrape, scrape_retrying},
        process::{self, Usage, listed, moonin_managers, usage},
        report::{by_kind, mib, num, progress},
        wait,
    },
};

/// The machine at one instant: load average and what else competes for it.
fn machine_note(own_identity: &str) -> String {
    machine::note(own_identity, |_| "OTHER `moonin run`")
}

/// Waits until no `moonin run` runs on this machine (another discovery manager would write
/// the same inventories; an end-to-end test would replace the ClusterDiscovery).
pub async fn wait_for_no_manager(p: &Params) -> Option<String> {
    let quiet = wait_until_quiet(
        "other `moonin run` processes to stop (MOONIN_BENCH_QUIET_WAIT_SECS)",
        Duration::from_secs(p.quiet_wait_secs),
        Duration::from_secs(2),
        || {
            let others = moonin_managers();
            (!others.is_empty()).then(|| listed(&others))
        },
    )
    .await;
    let note = format!("{}; measured anyway", quiet.err()?);
    progress(&note);
    Some(note)
}

/// What happened after the image changes.
#[derive(Default)]
pub struct ChangeReport {
    /// The Deployments changed: (namespace, name).
    pub changed: Vec<(String, String)>,
    /// The manager's writes from the change until settled.
    pub writes: Scrape,
    /// Seconds until settled.
    pub secs: f64,
    /// Whether it settled within 3 minutes.
    pub settled: bool,
    /// Namespaces whose inventory (any part) changed: inside / outside the touched set.
    pub inventories_touched: BTreeSet<String>,
    /// See `inventories_touched`.
    pub inventories_elsewhere: BTreeSet<String>,
    /// WorkloadRevisions created since the change: for a changed Deployment / another one.
    pub revisions_changed: usize,
    /// See `revisions_changed`.
    pub revisions_other: Vec<String>,
    /// Kinds written that a Deployment change does not explain.
    pub unexpected_kinds: Vec<String>,
}

impl ChangeReport {
    /// Whether only what changed was written (the heartbeat aside).
    pub fn only_changed(&self) -> bool {
        self.inventories_elsewhere.is_empty()
            && self.revisions_other.is_empty()
            && self.revisions_changed == self.changed.len()
            && self.unexpected_kinds.is_empty()
    }
}

/// What Moonin's manager measured (fields as the report names them).
#[derive(Default)]
pub struct MooninResult {
    pub warm_secs: f64,
    pub warm: Usage,
    pub warm_scrape: Scrape,
    /// What the ClusterDiscovery status counted when warm: (Nodes in node groups,
    /// Deployments, namespaces).
    pub seen: (i64, i64, i64),
    /// Services and Ingresses the benchmark's inventories counted when warm.
    pub connections_seen: (i64, i64),
    pub settle_secs: f64,
    /// The counters once settled after warm-up (from the process start).
    pub settled_scrape: Scrape,
    /// A restart with nothing changed: seconds to its first finished rebuild, and its
    /// counters once settled (from its start).
    pub restart_secs: f64,
    pub restart_scrape: Scrape,
    pub steady_secs: f64,
    pub steady: Scrape,
    /// The manager's warnings during the steady window, by message.
    pub steady_warnings: BTreeMap<String, usize>,
    /// Of the steady window's list requests, retries of an initial list that failed.
    pub steady_failed_lists: usize,
    pub after_steady: Usage,
    pub change: ChangeReport,
    pub end: Usage,
    pub discovery: String,
    pub log: String,
    pub log_warnings: usize,
    pub log_errors: usize,
    pub machine: Vec<(String, String)>,
    pub others: Option<String>,
}

/// The ClusterDiscovery to use: the benchmark's own (created fresh), or an existing one
/// whose status is cleared so that warm-up is judged on what this manager writes.
/// (name, created by the benchmark).
pub async fn ensure_discovery(client: &Client, p: &Params) -> Result<(String, bool), String> {
    let api: Api<ClusterDiscovery> = Api::all(client.clone());
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing ClusterDiscoveries: {e}"))?
        .items;
    let ours =
        |c: &ClusterDiscovery| c.labels().get(LABEL_KEY).map(String::as_str) == Some(LABEL_VALUE);
    let mut foreign: Vec<&ClusterDiscovery> = all
        .iter()
        .filter(|c| !ours(c) && c.metadata.deletion_timestamp.is_none())
        .collect();
    foreign.sort_by_key(|c| (c.creation_timestamp().map(|t| t.0), c.name_any()));
    if let Some(cd) = foreign.first() {
        let name = cd.name_any();
        let excluded: Vec<String> = (0..p.namespaces)
            .map(namespace_name)
            .filter(|n| cd.spec.exclude_namespaces.contains(n))
            .collect();
        if !excluded.is_empty() {
            return Err(format!(
                "the existing ClusterDiscovery {name} excludes benchmark namespaces ({})",
                excluded.join(", ")
            ));
        }
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .map_err(|e| format!("clearing the status of ClusterDiscovery {name}: {e}"))?;
        return Ok((name, false));
    }
    // A leftover of an interrupted run: start from a fresh one.
    for c in all.iter().filter(|c| ours(c)) {
        let _ = api.delete(&c.name_any(), &DeleteParams::default()).await;
    }
    wait::until_none_left(
        "an earlier benchmark ClusterDiscovery to go",
        &api,
        &ListParams::default().labels(SELECTOR),
        Instant::now() + Duration::from_secs(60),
        POLL,
    )
    .await?;
    let cd: ClusterDiscovery = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ClusterDiscovery",
        "metadata": {"name": DISCOVERY, "labels": labels()},
        "spec": {"clusterName": "bench", "helm": {"enabled": false}}
    }))
    .expect("ClusterDiscovery");
    api.create(&PostParams::default(), &cd)
        .await
        .map_err(|e| format!("creating ClusterDiscovery {DISCOVERY}: {e}"))?;
    Ok((DISCOVERY.to_string(), true))
}

fn condition_true(cd: &ClusterDiscovery, type_: &str) -> bool {
    cd.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// (namespace, name) → resourceVersion of every NamespaceInventory.
async fn inventory_versions(client: &Client) -> Result<BTreeMap<(String, String), String>, String> {
    let api: Api<NamespaceInventory> = Api::all(client.clone());
    Ok(api
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("listing NamespaceInventories: {e}"))?
        .items
        .iter()
        .map(|i| {
            (
                (i.namespace().unwrap_or_default(), i.name_any()),
                i.resource_version().unwrap_or_default(),
            )
        })
        .collect())
}

/// The Services and Ingresses the inventories of `namespaces` count (all parts).
async fn connections_seen(
    client: &Client,
    namespaces: &BTreeSet<String>,
) -> Result<(i64, i64), String> {
    let api: Api<NamespaceInventory> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing NamespaceInventories: {e}"))?;
    let summaries = list
        .items
        .iter()
        .filter(|i| namespaces.contains(&i.namespace().unwrap_or_default()))
        .filter_map(|i| i.status.as_ref()?.summary.as_ref());
    Ok(summaries.fold((0, 0), |(s, i), sum| {
        (s + i64::from(sum.services), i + i64::from(sum.ingresses))
    }))
}

/// Runs a manager in a namespace of its own, under `config/rbac` (and the Helm role with
/// `MOONIN_BENCH_HELM_RBAC=1`), measures it into `result`, then stops it.
pub async fn measure_moonin(
    client: &Client,
    p: &Params,
    discovery: &str,
    slot: &mut Option<Manager>,
    result: &mut MooninResult,
) -> Result<(), String> {
    let mut ns = TestNamespace::new(client, "bench-discovery").await;
    let extra: &[&str] = if p.helm_rbac {
        &["config/rbac-helm"]
    } else {
        &[]
    };
    let seat = ManagerSeat::new(&mut ns, extra);
    let outcome = measure_manager(client, p, discovery, &seat, slot, result).await;
    if let Some(m) = slot.as_mut() {
        bench_manager::stop(m).await;
        result.log = m.log.display().to_string();
        (result.log_warnings, result.log_errors) = bench_manager::log_levels(&m.log_text());
    }
    *slot = None;
    drop(ns);
    drop(seat);
    outcome
}

async fn measure_manager(
    client: &Client,
    p: &Params,
    discovery: &str,
    seat: &ManagerSeat,
    slot: &mut Option<Manager>,
    r: &mut MooninResult,
) -> Result<(), String> {
    let identity = seat.identity.as_str();
    r.machine
        .push(("before the manager starts".into(), machine_note(identity)));

    // 1. Warm-up: process start → InventoryComplete and an inventory in every namespace of
    //    the benchmark.
    let launched = Instant::now();
    let manager = seat.start("discovery", &["--cluster-name", "bench"]).await;
    let addr = manager.addr;
    *slot = Some(manager);
    let pid = process::pid_of(identity)?;
    progress(&format!("manager pid {pid} serves {addr}; warming up"));
    let run = Run {
        client,
        p,
        addr,
        pid,
    };
    run.warm_up(discovery, launched, r).await?;
    r.machine.push(("warm".into(), machine_note(identity)));

    // 2. Let the last rebuilds finish, then the steady state.
    let after = run.steady(slot.as_ref(), r).await?;
    r.machine
        .push(("end of the steady state".into(), machine_note(identity)));

    // 3. K image changes, in distinct namespaces where possible.
    r.change = run.image_changes(&after).await?;
    r.end = usage(pid);

    // 4. A restart with nothing changed since: it should write nothing.
    if let Some(m) = slot.as_mut() {
        bench_manager::stop(m).await;
    }
    let launched = Instant::now();
    let manager = seat.start("discovery", &["--cluster-name", "bench"]).await;
    let addr = manager.addr;
    *slot = Some(manager);
    (r.restart_secs, r.restart_scrape) = restarted(addr, launched, p).await?;
    progress(&format!(
        "restarted: first rebuild after {:.1} s; writes {}",
        r.restart_secs,
        by_kind(&r.restart_scrape.writes, 1.0)
    ));
    Ok(())
}

/// Waits for the restarted manager at `addr` to finish its first (full) rebuild, then for
/// its writes (the heartbeat aside) to stand still for [`QUIET`]: the seconds to that
/// rebuild and the counters then.
async fn restarted(
    addr: SocketAddr,
    launched: Instant,
    p: &Params,
) -> Result<(f64, Scrape), String> {
    let deadline = launched + Duration::from_secs(p.warmup_timeout_secs);
    loop {
        let finished = get_parsed(addr, "/metrics", |body| {
            metric_sum(
                body,
                "moonin_reconcile_duration_seconds_count",
                &["controller=\"discovery\""],
            )
            .unwrap_or_default()
        })
        .await;
        if finished.is_some_and(|n| n >= 1.0) {
            break;
        }
        if Instant::now() >= deadline {
            return Err("the restarted manager finished no rebuild".into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let secs = launched.elapsed().as_secs_f64();
    let from = scrape_retrying(addr).await?;
    quiet(addr, from.writes_except(HEARTBEAT_KIND), deadline).await;
    Ok((secs, scrape_retrying(addr).await?))
}

/// Waits until the writes of the manager at `addr` (the heartbeat aside), `writes` when
/// called, stood still for [`QUIET`], or until `deadline`.
async fn quiet(addr: SocketAddr, mut writes: f64, deadline: Instant) {
    let mut moved = Instant::now();
    while moved.elapsed() < QUIET && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(s) = scrape(addr).await
            && s.writes_except(HEARTBEAT_KIND) != writes
        {
            writes = s.writes_except(HEARTBEAT_KIND);
            moved = Instant::now();
        }
    }
}

/// What one manager's measurement uses.
struct Run<'a> {
    client: &'a Client,
    p: &'a Params,
    /// The manager's `/metrics`.
    addr: SocketAddr,
    /// Its process.
    pid: u32,
}

impl Run<'_> {
    /// Waits until the ClusterDiscovery `discovery` says InventoryComplete and every
    /// namespace of the benchmark has its inventory; then the time, memory and counters.
    async fn warm_up(
        &self,
        discovery: &str,
        launched: Instant,
        r: &mut MooninResult,
    ) -> Result<(), String> {
        let cds: Api<ClusterDiscovery> = Api::all(self.client.clone());
        let bench_namespaces: BTreeSet<String> =
            (0..self.p.namespaces).map(namespace_name).collect();
        let deadline = launched + Duration::from_secs(self.p.warmup_timeout_secs);
        let mut last_print = Instant::now();
        loop {
            if let Ok(cd) = cds.get(discovery).await
                && condition_true(&cd, "InventoryComplete")
            {
                let have: BTreeSet<String> = inventory_versions(self.client)
                    .await?
                    .into_keys()
                    .filter(|(_, name)| name == "inventory")
                    .map(|(ns, _)| ns)
                    .collect();
                if bench_namespaces.is_subset(&have) {
                    r.warm_secs = launched.elapsed().as_secs_f64();
                    r.warm = usage(self.pid);
                    let status = cd.status.unwrap_or_default();
                    let totals = status.totals.as_ref();
                    r.seen = (
                        status.node_groups.iter().map(|g| i64::from(g.count)).sum(),
                        totals.map_or(0, |t| i64::from(t.deployments)),
                        totals.map_or(0, |t| i64::from(t.namespaces)),
                    );
                    r.connections_seen = connections_seen(self.client, &bench_namespaces).await?;
                    break;
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the manager was not warm after {} s (MOONIN_BENCH_WARMUP_TIMEOUT_SECS)",
                    self.p.warmup_timeout_secs
                ));
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                last_print = Instant::now();
                let s = scrape(self.addr).await.unwrap_or_default();
                progress(&format!(
                    "warming up {:.0} s: requests {}; writes {}; RSS {}",
                    launched.elapsed().as_secs_f64(),
                    by_verb(&s, 1.0),
                    by_kind(&s.writes, 1.0),
                    mib(usage(self.pid).rss_kib)
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        r.warm_scrape = scrape_retrying(self.addr).await?;
        progress(&format!(
            "warm after {:.1} s: RSS {} (peak {}), requests {}, writes {}",
            r.warm_secs,
            mib(r.warm.rss_kib),
            mib(r.warm.hwm_kib),
            by_verb(&r.warm_scrape, 1.0),
            by_kind(&r.warm_scrape.writes, 1.0)
        ));
        Ok(())
    }

    /// Waits (up to 2 minutes) until the writes but the heartbeat stood still for
    /// [`QUIET`], then counts a steady window; the counters at its end.
    async fn steady(
        &self,
        manager: Option<&Manager>,
        r: &mut MooninResult,
    ) -> Result<Scrape, String> {
        let settle_started = Instant::now();
        quiet(
            self.addr,
            r.warm_scrape.writes_except(HEARTBEAT_KIND),
            settle_started + Duration::from_secs(120),
        )
        .await;
        r.settle_secs = settle_started.elapsed().as_secs_f64();
        let before = scrape_retrying(self.addr).await?;
        r.settled_scrape = before.clone();
        let steady_started = Instant::now();
        let steady_from = Timestamp::now();
        progress(&format!(
            "steady state for {} s (after {:.1} s settling)",
            self.p.steady_secs, r.settle_secs
        ));
        let end = steady_started + Duration::from_secs(self.p.steady_secs);
        while Instant::now() < end {
            let left = end.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_secs(30))).await;
            if Instant::now() < end {
                let s = scrape(self.addr).await.unwrap_or_default().minus(&before);
                progress(&format!(
                    "  {:.0} s: requests {}; writes {}",
                    steady_started.elapsed().as_secs_f64(),
                    by_verb(&s, 1.0),
                    by_kind(&s.writes, 1.0)
                ));
            }
        }
        let after = scrape_retrying(self.addr).await?;
        r.steady_secs = steady_started.elapsed().as_secs_f64();
        r.steady = after.minus(&before);
        r.after_steady = usage(self.pid);
        if let Some(m) = manager {
            let window = Some((steady_from, Timestamp::now()));
            // The user name, which differs per run, follows " User ".
            r.steady_warnings = bench_manager::problems(&m.log_text(), window, " User ");
            r.steady_failed_lists = r
                .steady_warnings
                .iter()
                .filter(|(k, _)| k.contains("failed to perform initial object list"))
                .map(|(_, n)| n)
                .sum();
        }
        Ok(after)
    }

    /// Changes the image of the first Deployments, waits until their revisions are
    /// written and the writes stood still, and reports what was written where.
    async fn image_changes(&self, after: &Scrape) -> Result<ChangeReport, String> {
        let versions_before = inventory_versions(self.client).await?;
        let change_started = Instant::now();
        let since = Timestamp::now();
        let changed = self.change_images().await?;
        let settled = self.changes_settled(after, changed.len() as f64).await;
        let done = scrape_retrying(self.addr).await?;
        let mut c = ChangeReport {
            writes: done.minus(after),
            secs: change_started.elapsed().as_secs_f64(),
            settled,
            ..Default::default()
        };
        let touched: BTreeSet<String> = changed.iter().map(|(ns, _)| ns.clone()).collect();
        for (key, version) in inventory_versions(self.client).await? {
            if versions_before.get(&key) != Some(&version) {
                if touched.contains(&key.0) {
                    c.inventories_touched.insert(key.0);
                } else {
                    c.inventories_elsewhere.insert(key.0);
                }
            }
        }
        self.count_revisions(&changed, since, &mut c).await?;
        c.unexpected_kinds = c
            .writes
            .writes
            .keys()
            .filter(|k| !CHANGE_KINDS.contains(&k.as_str()) && k.as_str() != HEARTBEAT_KIND)
            .cloned()
            .collect();
        c.changed = changed;
        progress(&format!(
            "the changes settled after {:.1} s: writes {}",
            c.secs,
            by_kind(&c.writes.writes, 1.0)
        ));
        Ok(c)
    }

    /// A new image for each Deployment of [`Params::changed`]; (namespace, name) of each.
    async fn change_images(&self) -> Result<Vec<(String, String)>, String> {
        let tag = Timestamp::now().as_second();
        let mut changed = Vec::new();
        for i in self.p.changed() {
            let (name, ns, _) = placement(self.p, i);
            let api: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": format!("registry.example/bench/svc-{}:run-{tag}", i % 200)}
            ]}}}});
            api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map_err(|e| format!("changing the image of {ns}/{name}: {e}"))?;
            changed.push((ns, name));
        }
        progress(&format!(
            "changed the image of {} Deployments",
            changed.len()
        ));
        Ok(changed)
    }

    /// Whether, within 3 minutes, `k` WorkloadRevisions were written since `after` and the
    /// writes but the heartbeat stood still for [`QUIET`].
    async fn changes_settled(&self, after: &Scrape, k: f64) -> bool {
        let started = Instant::now();
        let mut last = after.writes_except(HEARTBEAT_KIND);
        let mut moved = Instant::now();
        while started.elapsed() < Duration::from_secs(180) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Some(s) = scrape(self.addr).await else {
                continue;
            };
            if s.writes_except(HEARTBEAT_KIND) != last {
                last = s.writes_except(HEARTBEAT_KIND);
                moved = Instant::now();
            }
            let revisions = s.minus(after).write("WorkloadRevision");
            if revisions >= k && moved.elapsed() >= QUIET {
                return true;
            }
        }
        false
    }

    /// The WorkloadRevisions created since `since`: of a changed Deployment, or another.
    async fn count_revisions(
        &self,
        changed: &[(String, String)],
        since: Timestamp,
        c: &mut ChangeReport,
    ) -> Result<(), String> {
        let revisions: Api<WorkloadRevision> = Api::all(self.client.clone());
        for rev in revisions
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing WorkloadRevisions: {e}"))?
            .items
        {
            let new = rev
                .creation_timestamp()
                .is_some_and(|t| t.0 >= since - jiff::SignedDuration::from_secs(1));
            if !new {
                continue;
            }
            let key = (
                rev.namespace().unwrap_or_default(),
                rev.spec.workload.name.clone(),
            );
            if changed.contains(&key) {
                c.revisions_changed += 1;
            } else {
                c.revisions_other
                    .push(format!("{}/{}", key.0, rev.name_any()));
            }
        }
        Ok(())
    }
}

/// Requests by verb, in table order; `0` for none.
pub fn by_verb(s: &Scrape, per: f64) -> String {
    let parts: Vec<String> = VERBS
        .iter()
        .map(|v| (v, s.request(v) * per))
        .filter(|(_, n)| *n != 0.0)
        .map(|(v, n)| format!("{v} {}", num(n)))
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(", ")
    }
}
