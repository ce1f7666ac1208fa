//! The run: the targets, a quiet machine, the write floor, the templates, then (in
//! [`crate::window`]) the manager and both edges of the window, and what is left after them.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use kube::{
    Client, ResourceExt,
    api::{ListParams, PostParams},
};

use crate::{
    CREATE_CONCURRENCY, Carrier, HPA_MAX, HPA_MIN, POLL, Params, REPLICAS,
    objects::{deployment, hpa, invalid_reason, invalid_template, scaled_object, template},
    probes::{moonin_events, spec_floor, write_floor},
    report::{Floor, Floors, Leftovers, LogSummary, Presence, Report},
    server::{IdleServer, ServerTimes, WorkMark, machine_note, rival_managers, server_times_async},
    shared::{
        harness::Manager,
        machine::builds,
        machine::wait_until_quiet,
        manager as bench_manager,
        manager::ManagerSeat,
        metrics::scrape,
        process,
        report::progress,
        stats::{Stats, stats},
        wait,
    },
    targets::Targets,
    watch::{Latencies, Seen, both_latencies, floor_kinds, floor_latencies, latencies},
    window::{launch_manager, run_window, start_manager},
};

/// Measures one window of `p`'s templates with a manager running as `seat`; the manager
/// goes into `manager_slot` as soon as it runs, so that the caller can clean up with it.
pub async fn measure(
    client: &Client,
    p: &Params,
    seat: &ManagerSeat,
    manager_slot: &mut Option<Manager>,
) -> Result<Report, String> {
    let (ns, identity) = (seat.namespace.as_str(), seat.identity.as_str());
    let names = p.names();
    let t = Targets::watch(client, ns, p.autoscaler).await?;
    // The floors' writes go through the manager's own kubeconfig: the API server
    // authenticates, authorizes and queues them (API Priority and Fairness) as it does
    // Moonin's, not as the cluster admin's this process otherwise uses.
    let as_manager = t.through(&seat_client(seat).await?, ns);

    // 1. The targets, on a machine as quiet as it gets.
    create_targets(&t, &names).await?;
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(identity)).await;

    // The API server's write floor on this machine: the same number of writes (one per
    // Deployment and one per HPA, Deployment first), sent by this process as fast as the
    // same in-flight bound allows. Annotation-only, so no controller cascades follow.
    let (floor, floor_server) =
        with_server_times(write_floor_seen(&as_manager, &names, "before")).await;

    // The same floor with the window's own spec writes: what those writes cost with the
    // Deployment and HPA controllers reacting to them. Open, settle, close, settle; then
    // the watches forget what they saw, so the window's edges are Moonin's alone. Not for
    // ScaledObjects: their close would wait for KEDA's HPAs, which this benchmark does
    // not watch, and without that wait the old bounds scale the Deployments back.
    let (spec_floor, spec_floor_server) = match t.carrier {
        Carrier::Hpa => with_server_times(spec_floors(&as_manager, &names)).await,
        Carrier::ScaledObject => (None, Default::default()),
    };
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(identity)).await;

    // 2. The templates, on the next whole minute that leaves time to set up.
    let earliest = Timestamp::now().as_second() + p.setup_secs;
    let open = Timestamp::from_second((earliest + 59) / 60 * 60).expect("timestamp");
    let close = open + SignedDuration::from_mins(crate::WINDOW_MINUTES);
    progress(&format!("window {open} → {close}"));
    create_templates(&t, p, open).await?;
    create_invalid(&t, p, open).await?;

    // 3. The manager; 4. and 5. the window opens and closes.
    let startup = start_manager(client, p, seat, &t, open, manager_slot).await?;
    // A missing target is reported once the window opens: the reasons are counted then.
    // Then, the Deployments settled at the window's minimum, the write floor between the
    // edges: the API server as the edges find it (the manager running and watching, the
    // window's Pods), which the floor before the manager starts does not see.
    let between = async {
        let refused = refusals(&t, p).await;
        // Done 15 s before the close at the latest, or not measured.
        let budget = close.duration_since(Timestamp::now()) - SignedDuration::from_secs(15);
        let floor = async {
            settle(&t, &names, crate::ACTION_MIN).await;
            wait_for_quiet(IDLE_SERVER_WAIT, None).await;
            let cpu = process::usage(startup.pid).cpu_secs;
            let floor = write_floor_seen(&as_manager, &names, "between").await;
            floor.map(|f| (f, process::usage(startup.pid).cpu_secs - cpu))
        };
        let floor = tokio::time::timeout(Duration::try_from(budget).unwrap_or_default(), floor)
            .await
            .unwrap_or_else(|_| {
                progress("no write floor between the edges: the window closes too soon");
                None
            });
        (refused, floor)
    };
    let (window, (refused, floor_between)) =
        run_window(&t, &names, identity, &startup, open, close, between).await?;

    // 6. What is left.
    let left = leftovers(&t).await?;
    let log = LogSummary::read(&startup.log_path, ns);
    let events = moonin_events(client, ns).await;
    let latencies = Latencies::from_seen(&t.seen.lock().expect("seen"), p, &names, open, close);

    // Both floors with the manager running, every window closed: what its presence alone
    // (its watches, the reconciles the floors' writes wake) costs the API server, beside
    // the same floors a moment later with the manager stopped. Its write counters say it
    // wrote nothing in between.
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(identity)).await;
    let before = scrape(startup.addr).await;
    let floors_beside = Floors {
        write: write_floor_seen(&as_manager, &names, "beside").await,
        spec: match t.carrier {
            Carrier::Hpa => spec_floors(&as_manager, &names).await,
            Carrier::ScaledObject => None,
        },
    };
    let writes_beside = scrape(startup.addr)
        .await
        .zip(before)
        .map(|(after, before)| after.minus(&before).writes_total());

    // 7. Both floors again, the manager stopped: the control plane and the objects have
    // gone through the window's writes too, which the floors before it had not.
    if let Some(m) = manager_slot.as_mut() {
        m.terminate(Duration::from_secs(30)).await;
    }
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(identity)).await;
    let floor_after = write_floor_seen(&as_manager, &names, "after").await;
    let spec_floor_after = match t.carrier {
        Carrier::Hpa => spec_floors(&as_manager, &names).await,
        Carrier::ScaledObject => None,
    };
    // 8. The write floor once more in the other order, the manager still stopped and then
    // started again and idle: with the pair above, each condition is sent once early and
    // once late, so that a drift of the control plane does not pass for the manager's cost.
    let presence = presence_reversed(p, seat, &t, &as_manager, &names, manager_slot).await;
    Ok(Report {
        open,
        close,
        latencies,
        floors: Floors {
            write: floor,
            spec: spec_floor,
        },
        floor_server: (floor_server, spec_floor_server),
        floor_between,
        floors_after: Floors {
            write: floor_after,
            spec: spec_floor_after,
        },
        floors_beside,
        writes_beside,
        presence,
        startup,
        window,
        left,
        log,
        events,
        refused,
    })
}

/// The write floor with the manager stopped, then with it started again and idle (see
/// [`Presence`]); `None` when the manager does not start again.
async fn presence_reversed(
    p: &Params,
    seat: &ManagerSeat,
    t: &Targets,
    as_manager: &Targets,
    names: &[String],
    manager_slot: &mut Option<Manager>,
) -> Option<Presence> {
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(&seat.identity)).await;
    let stopped = write_floor_seen(as_manager, names, "stopped-again").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (addr, before) = match launch_manager(p, seat, t, manager_slot, deadline).await {
        Ok(started) => started,
        Err(e) => {
            progress(&format!("the manager did not start again: {e}"));
            return None;
        }
    };
    wait_for_quiet(Duration::from_secs(p.quiet_secs), Some(&seat.identity)).await;
    let running = write_floor_seen(as_manager, names, "running-again").await;
    let writes = scrape(addr)
        .await
        .map(|after| after.minus(&before).writes_total());
    if let Some(m) = manager_slot.as_mut() {
        m.terminate(Duration::from_secs(30)).await;
    }
    Some(Presence {
        stopped,
        running,
        writes,
    })
}

/// A client that reads the manager's kubeconfig (it impersonates the ServiceAccount).
async fn seat_client(seat: &ManagerSeat) -> Result<Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&seat.kubeconfig)
        .map_err(|e| format!("the manager's kubeconfig: {e}"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("the manager's kubeconfig: {e}"))?;
    Client::try_from(config).map_err(|e| format!("a client as the manager: {e}"))
}

/// `run`'s result and the API server's request times just before and just after it.
async fn with_server_times<T>(run: impl Future<Output = T>) -> (T, (ServerTimes, ServerTimes)) {
    let before = server_times_async().await;
    let out = run.await;
    (out, (before, server_times_async().await))
}

/// The write floor (see [`write_floor`]) with its annotation's `value`, timed per target
/// by the watches as the edges are (see [`Floor`]).
async fn write_floor_seen(t: &Targets, names: &[String], value: &str) -> Option<Floor> {
    let start = WorkMark::start().await;
    let began = Timestamp::now();
    let answered = write_floor(t, names, value).await?;
    let seen = until_seen(t, names, |s| floor_latencies(s, names, began, value)).await?;
    let work = WorkMark::end().await.since(&start);
    let kinds = kind_stats(floor_kinds(
        &t.seen.lock().expect("seen"),
        names,
        began,
        value,
    ));
    progress(&format!(
        "write floor: {} writes, p99 {:.0} ms answered; per target, p99 {:.0} ms seen by the watches",
        answered.n, answered.p99, seen.p99
    ));
    Some(Floor {
        seen,
        answered,
        kinds,
        work,
    })
}

/// The latencies `of` what the watches saw, once they cover every target (at most 30 s
/// after the writes were answered; fewer are reported as they are).
async fn until_seen(
    t: &Targets,
    names: &[String],
    of: impl Fn(&Seen) -> Vec<f64>,
) -> Option<Stats> {
    let of = &of;
    let all = wait::until(
        "the watches to show every floor write",
        Instant::now() + Duration::from_secs(30),
        POLL,
        || async {
            let s = t.seen.lock().expect("seen");
            let v = of(&s);
            (v.len() == names.len()).then_some(v)
        },
    )
    .await;
    stats(all.unwrap_or_else(|_| of(&t.seen.lock().expect("seen"))))
}

/// The spec-write floor, open then close (see [`spec_floor`]), each timed per target by
/// the watches from the instant it began (see [`Floor`]).
async fn spec_floors(t: &Targets, names: &[String]) -> Option<(Floor, Floor)> {
    forget_edges(t);
    let start = WorkMark::start().await;
    crate::server::profile("spec-open");
    let began = Timestamp::now();
    let open = spec_floor(t, names, true).await;
    let open_seen = until_seen(t, names, |s| both_latencies(s, names, began, |e| e.open)).await;
    let open_work = WorkMark::end().await.since(&start);
    let open_kinds = kinds(t, names, began, |e| e.open);
    settle(t, names, crate::ACTION_MIN).await;
    wait_for_quiet(IDLE_SERVER_WAIT, None).await;
    let start = WorkMark::start().await;
    crate::server::profile("spec-close");
    let began = Timestamp::now();
    let close = spec_floor(t, names, false).await;
    let close_seen = until_seen(t, names, |s| both_latencies(s, names, began, |e| e.close)).await;
    let close_work = WorkMark::end().await.since(&start);
    let close_kinds = kinds(t, names, began, |e| e.close);
    settle(t, names, REPLICAS).await;
    forget_edges(t);
    let floor = |seen: Option<Stats>, answered: Option<Stats>, kinds, work| {
        seen.zip(answered).map(|(seen, answered)| Floor {
            seen,
            answered,
            kinds,
            work,
        })
    };
    let floors = floor(open_seen, open, open_kinds, open_work).zip(floor(
        close_seen,
        close,
        close_kinds,
        close_work,
    ));
    if let Some((o, c)) = &floors {
        progress(&format!(
            "spec-write floor: open p99 {:.0} ms answered, {:.0} ms seen; close p99 {:.0} ms answered, {:.0} ms seen",
            o.answered.p99, o.seen.p99, c.answered.p99, c.seen.p99
        ));
    }
    floors
}

/// Each kind's edge `pick` as the watches saw it, from `began`: the autoscalers', the
/// Deployments'.
fn kinds(
    t: &Targets,
    names: &[String],
    began: Timestamp,
    pick: fn(&crate::watch::Edges) -> Option<Timestamp>,
) -> (Option<Stats>, Option<Stats>) {
    kind_stats(latencies(&t.seen.lock().expect("seen"), names, began, pick))
}

/// The autoscalers' and the Deployments' statistics of the watches' `[autoscalers,
/// Deployments, both]` latencies.
fn kind_stats([autoscalers, deployments, _]: [Vec<f64>; 3]) -> (Option<Stats>, Option<Stats>) {
    (stats(autoscalers), stats(deployments))
}

/// The watches forget the edges they saw: the next writes' are timed afresh.
fn forget_edges(t: &Targets) {
    let mut seen = t.seen.lock().expect("seen");
    seen.hpas.values_mut().for_each(|e| *e = Default::default());
    seen.deployments
        .values_mut()
        .for_each(|e| *e = Default::default());
}

/// Waits (at most 2 minutes) until every Deployment has exactly `replicas` available.
async fn settle(t: &Targets, names: &[String], replicas: i32) {
    let done = wait::until(
        &format!("every Deployment at {replicas} available"),
        Instant::now() + Duration::from_secs(120),
        POLL,
        || async {
            let s = t.seen.lock().expect("seen");
            names
                .iter()
                .all(|n| s.available.get(n) == Some(&replicas))
                .then_some(())
        },
    )
    .await;
    if let Err(e) = done {
        progress(&format!("{e}; going on"));
    }
}

/// Creates a Deployment and its autoscaler per action, and waits (at most 5 minutes) until every
/// Deployment is available.
async fn create_targets(t: &Targets, names: &[String]) -> Result<(), String> {
    let n = names.len();
    let started = Instant::now();
    let pp = PostParams::default();
    stream::iter(names.to_vec())
        .map(|name| {
            let (deployments, hpas, pp) = (t.deployments.clone(), t.hpas.clone(), pp.clone());
            let scaled_objects = t.scaled_objects.clone();
            async move {
                deployments.create(&pp, &deployment(&name)).await?;
                match t.carrier {
                    Carrier::Hpa => hpas.create(&pp, &hpa(&name)).await.map(|_| ())?,
                    Carrier::ScaledObject => scaled_objects
                        .create(&pp, &scaled_object(&name))
                        .await
                        .map(|_| ())?,
                }
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| format!("creating the Deployments and autoscalers: {e}"))?;
    progress(&format!(
        "created {n} Deployments and {n} {}s in {:.1} s",
        t.carrier.label(),
        started.elapsed().as_secs_f64()
    ));
    let available = wait::until(
        "every Deployment to be available",
        Instant::now() + Duration::from_secs(300),
        POLL,
        || async {
            let s = t.seen.lock().expect("seen");
            (s.hpas.len() == n && s.available.values().filter(|a| **a >= REPLICAS).count() == n)
                .then_some(())
        },
    )
    .await;
    if let Err(e) = available {
        progress(&format!("{e}; going on (the control plane is still busy)"));
    } else {
        progress(&format!(
            "every Deployment available after {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    if t.carrier == Carrier::ScaledObject {
        wait_for_keda_hpas(t, n).await;
    }
    Ok(())
}

/// KEDA's operator creates each ScaledObject's HPA at its own pace (about two a second
/// here): the window waits until every one exists with its ScaledObject's bounds, so that
/// its edges measure Moonin against a settled KEDA rather than KEDA's own setup.
async fn wait_for_keda_hpas(t: &Targets, n: usize) {
    let started = Instant::now();
    let ready = wait::until(
        "KEDA's HPA of every ScaledObject",
        Instant::now() + Duration::from_secs(600),
        Duration::from_secs(2),
        || async {
            let hpas = t.hpas.list(&ListParams::default()).await.ok()?;
            let settled = hpas
                .iter()
                .filter(|h| h.name_any().starts_with("keda-hpa-"))
                .filter(|h| h.spec.min_replicas == Some(HPA_MIN) && h.spec.max_replicas == HPA_MAX)
                .count();
            (settled == n).then_some(())
        },
    )
    .await;
    match ready {
        Ok(()) => progress(&format!(
            "KEDA's {n} HPAs in place after {:.1} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => progress(&format!("{e}; going on (KEDA is still setting up)")),
    }
}

/// Waits (up to `limit`) until the API server is idle (see [`IdleServer`]) and, with
/// `rivals_of` (this manager's identity), no other scaling manager and no build runs on this
/// machine; goes on anyway after that.
async fn wait_for_quiet(limit: Duration, rivals_of: Option<&str>) {
    let mut server = IdleServer::default();
    let what = match rivals_of {
        Some(_) => "a quiet machine (no other scaling manager, no build, an idle API server)",
        None => "an idle API server",
    };
    let quiet = wait_until_quiet(what, limit, POLL, || {
        if let Some(identity) = rivals_of
            && (!rival_managers(identity).is_empty() || !builds().is_empty())
        {
            return Some(machine_note(identity));
        }
        server.busy()
    })
    .await;
    if let Err(e) = quiet {
        progress(&format!("{e}; going on, numbers may be noisy"));
    }
}

/// How long [`wait_for_quiet`] waits for an idle API server alone.
const IDLE_SERVER_WAIT: Duration = Duration::from_secs(120);

/// Creates the templates, every one with a window from `open`.
async fn create_templates(t: &Targets, p: &Params, open: Timestamp) -> Result<(), String> {
    let pp = PostParams::default();
    stream::iter(0..p.templates)
        .map(|i| {
            let (templates, pp) = (t.templates.clone(), pp.clone());
            async move { templates.create(&pp, &template(i, p.actions, open)).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| format!("creating the templates: {e}"))?;
    progress(&format!("created {} templates", p.templates));
    Ok(())
}

/// Creates the templates the controller must refuse ([`invalid_template`]).
async fn create_invalid(t: &Targets, p: &Params, open: Timestamp) -> Result<(), String> {
    if p.invalid == 0 {
        return Ok(());
    }
    let pp = PostParams::default();
    stream::iter(0..p.invalid)
        .map(|i| {
            let (templates, pp) = (t.templates.clone(), pp.clone());
            async move { templates.create(&pp, &invalid_template(i, open).0).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| format!("creating the invalid templates: {e}"))?;
    progress(&format!(
        "created {} templates the controller must refuse",
        p.invalid
    ));
    Ok(())
}

/// How many of the templates the controller must refuse carry their exact reason
/// (`Ready=False`, [`invalid_reason`]); `None` without any.
async fn refusals(t: &Targets, p: &Params) -> Option<usize> {
    if p.invalid == 0 {
        return None;
    }
    let list = t.templates.list(&ListParams::default()).await.ok()?;
    let refused = list
        .items
        .iter()
        .filter(|tpl| {
            let name = tpl.metadata.name.as_deref().unwrap_or_default();
            let Some(i) = name.strip_prefix("invalid-").and_then(|i| i.parse().ok()) else {
                return false;
            };
            let reason = invalid_reason(i);
            tpl.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == reason)
            })
        })
        .count();
    progress(&format!(
        "{refused} of {} refused templates carry their reason",
        p.invalid
    ));
    Some(refused)
}

/// The targets that are not exactly as before the window, and the templates' phases.
async fn leftovers(t: &Targets) -> Result<Leftovers, String> {
    let mut not_restored = Vec::new();
    let marked = |a: &BTreeMap<String, String>| a.keys().any(|k| k.starts_with("moonin.io/"));
    if t.carrier == Carrier::ScaledObject {
        for so in t
            .scaled_objects
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
        {
            let (min, max) = (
                so.data["spec"]["minReplicaCount"].as_i64(),
                so.data["spec"]["maxReplicaCount"].as_i64(),
            );
            if min != Some(i64::from(HPA_MIN))
                || max != Some(i64::from(HPA_MAX))
                || marked(so.annotations())
            {
                not_restored.push(format!(
                    "ScaledObject {} min {min:?} max {max:?}",
                    so.name_any()
                ));
            }
        }
    }
    for h in t
        .hpas
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        if h.spec.min_replicas != Some(HPA_MIN)
            || h.spec.max_replicas != HPA_MAX
            || marked(h.annotations())
        {
            not_restored.push(format!(
                "HPA {} min {:?} max {}",
                h.name_any(),
                h.spec.min_replicas,
                h.spec.max_replicas
            ));
        }
    }
    for d in t
        .deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        let replicas = d.spec.as_ref().and_then(|s| s.replicas);
        if replicas != Some(REPLICAS) || marked(d.annotations()) {
            not_restored.push(format!("Deployment {} replicas {replicas:?}", d.name_any()));
        }
    }
    let mut phases = BTreeMap::new();
    for template in t
        .templates
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
    {
        let phase = template
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "none".into());
        *phases.entry(phase).or_default() += 1;
    }
    Ok(Leftovers {
        not_restored,
        phases,
    })
}

impl LogSummary {
    /// The manager's log at `path`: one line per kind of problem, the message and the
    /// error without object names (cut before `<ns>/`), the five most frequent first.
    fn read(path: &str, ns: &str) -> Self {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let mut top: Vec<(usize, String)> = bench_manager::problems(&log, None, &format!("{ns}/"))
            .into_iter()
            .map(|(k, n)| (n, k))
            .collect();
        top.sort_by_key(|b| std::cmp::Reverse(b.0));
        top.truncate(5);
        let (warnings, errors) = bench_manager::log_levels(&log);
        LogSummary {
            warnings,
            errors,
            top,
            path: path.to_string(),
        }
    }
}
