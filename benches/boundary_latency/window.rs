//! The manager from its start until the window opens, then both edges of the window: each
//! timed from the boundary instant until every write was seen and the write counter stood
//! still.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use jiff::{SignedDuration, Timestamp};
use kube::{Client, ResourceExt, api::ListParams};
use moonin::api::scaling::{ScalingTemplate, keys};

use crate::{
    Params, QUIET, SCRAPE_EVERY,
    probes::patch_round_trip,
    report::{Boundary, Startup, Window, count},
    server::{CpuMark, Work, WorkMark, machine_note, server_times_async},
    shared::{
        harness::Manager,
        manager::{ManagerSeat, wait_until_leading},
        metrics::{Counters as Scrape, scrape, scrape_retrying},
        process,
        report::progress,
    },
    targets::Targets,
    watch::{Edges, Seen, Shared},
};

/// Starts the manager (into `slot`), waits until it leads and has made every template Idle,
/// and measures one PATCH round trip while it is idle; fails when that takes until 3 s
/// before `open`.
pub async fn start_manager(
    client: &Client,
    p: &Params,
    seat: &ManagerSeat,
    t: &Targets,
    open: Timestamp,
    slot: &mut Option<Manager>,
) -> Result<Startup, String> {
    let launched = Instant::now();
    let setup_deadline = Instant::now()
        + Duration::try_from(open.duration_since(Timestamp::now()) - SignedDuration::from_secs(3))
            .unwrap_or_default();
    let (addr, writes) = launch_manager(p, seat, t, slot, setup_deadline)
        .await
        .map_err(|e| format!("{e} before the window (raise MOONIN_BENCH_SETUP_SECS)"))?;
    let log_path = slot.as_ref().map(|m| m.log.display().to_string());
    let pid = process::pid_of(&seat.identity)?;
    let secs = launched.elapsed().as_secs_f64() - QUIET.as_secs_f64();
    let duplicate_finalizers = t
        .templates
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|t| {
                    t.finalizers()
                        .iter()
                        .filter(|f| *f == keys::FINALIZER)
                        .count()
                        > 1
                })
                .count()
        })
        .unwrap_or(0);
    let round_trip = patch_round_trip(client, &seat.namespace).await;
    progress(&format!(
        "manager pid {pid} leading, its templates Idle after {secs:.1} s; {} startup writes; \
         {:.0} s until the window opens",
        count(writes.writes_total()),
        open.duration_since(Timestamp::now()).as_secs_f64()
    ));
    Ok(Startup {
        addr,
        pid,
        log_path: log_path.unwrap_or_default(),
        writes,
        secs,
        duplicate_finalizers,
        round_trip,
    })
}

/// Starts the manager as `seat` (into `slot`) and waits, until `deadline`, until it leads
/// and has made every template Idle; returns its address and its counters then.
pub async fn launch_manager(
    p: &Params,
    seat: &ManagerSeat,
    t: &Targets,
    slot: &mut Option<Manager>,
    deadline: Instant,
) -> Result<(SocketAddr, Scrape), String> {
    let manager = seat.start("scaling", &[]).await;
    let addr = manager.addr;
    *slot = Some(manager);
    wait_until_leading(addr, deadline).await?;
    Ok((addr, templates_idle(addr, t, p, deadline).await?))
}

/// Waits until every template carries the finalizer and is Idle (every one it must refuse
/// says so) and the manager's write counter stood still for [`QUIET`]; the counters then.
async fn templates_idle(
    addr: SocketAddr,
    t: &Targets,
    p: &Params,
    deadline: Instant,
) -> Result<Scrape, String> {
    // The measured templates Idle; those it must refuse (`MOONIN_BENCH_INVALID`) reconciled.
    let idle = |list: &[ScalingTemplate]| {
        let phase = |t: &ScalingTemplate| t.status.as_ref().and_then(|s| s.phase.clone());
        let (refused, measured): (Vec<_>, Vec<_>) = list.iter().partition(|t| {
            t.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("invalid-"))
        });
        measured.len() == p.templates
            && refused.len() == p.invalid
            && measured.iter().all(|t| {
                t.finalizers().iter().any(|f| f == keys::FINALIZER)
                    && phase(t).as_deref() == Some("Idle")
            })
            && refused.iter().all(|t| {
                // Reconciled; a refused spec says so at once, a missing target only once
                // a window opens (it may yet be created).
                t.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Ready" && (c.status == "False" || c.reason == "Reconciled")
                    })
                })
            })
    };
    let mut last_total = f64::NAN;
    let mut moved = Instant::now();
    loop {
        if let Some(s) = scrape(addr).await {
            if s.writes_total() != last_total {
                (last_total, moved) = (s.writes_total(), Instant::now());
            } else if moved.elapsed() >= QUIET
                && let Ok(list) = t.templates.list(&ListParams::default()).await
                && idle(&list.items)
            {
                return Ok(s);
            }
        }
        if Instant::now() >= deadline {
            return Err(
                "timed out waiting for every template to be Idle and the manager quiet".into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Both edges of the window, then 10 s more; the machine noted at each checkpoint.
/// `while_open` runs between the edges (once the open settled), its answer returned.
pub async fn run_window<W>(
    t: &Targets,
    names: &[String],
    identity: &str,
    startup: &Startup,
    open: Timestamp,
    close: Timestamp,
    while_open: impl std::future::Future<Output = W>,
) -> Result<(Window, W), String> {
    let all = |pick: fn(&Edges) -> Option<Timestamp>| {
        move |s: &Seen| {
            names.iter().all(|name| {
                s.hpas.get(name).and_then(pick).is_some()
                    && s.deployments.get(name).and_then(pick).is_some()
            })
        }
    };
    let mut machine = Vec::new();
    let edge = Edge {
        seen: &t.seen,
        identity,
        addr: startup.addr,
        pid: startup.pid,
    };
    let (open_boundary, idle) = edge
        .wait_out("open", open, 50, all(|e| e.open), &mut machine)
        .await?;
    let between = while_open.await;
    let (close_boundary, _) = edge
        .wait_out("close", close, 60, all(|e| e.close), &mut machine)
        .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after_close = scrape_retrying(startup.addr).await?;
    let window = Window {
        open: open_boundary,
        close: close_boundary,
        after_close,
        idle,
        peak: process::usage(startup.pid),
        machine,
    };
    Ok((window, between))
}

/// What an edge of the window is measured with.
struct Edge<'a> {
    seen: &'a Shared,
    identity: &'a str,
    addr: SocketAddr,
    pid: u32,
}

impl Edge<'_> {
    /// The edge at `at` (`what`: open or close), given at most `secs` to settle: the API
    /// server's times from 3 s before, the counters and the manager's memory 1 s before,
    /// then [`boundary`] until `done`.
    async fn wait_out(
        &self,
        what: &str,
        at: Timestamp,
        secs: u64,
        done: impl Fn(&Seen) -> bool,
        machine: &mut Vec<(String, String)>,
    ) -> Result<(Boundary, process::Usage), String> {
        sleep_until(at - SignedDuration::from_secs(3)).await;
        let server_before = server_times_async().await;
        sleep_until(at - SignedDuration::from_secs(1)).await;
        let before = scrape_retrying(self.addr).await?;
        let usage = process::usage(self.pid);
        machine.push((format!("1 s before {what}"), machine_note(self.identity)));
        let deadline = Instant::now() + Duration::from_secs(secs);
        // The machine's CPU at the edge instant, read by a task of its own so that the
        // boundary's first scrape is not held back.
        let label = format!("edge-{what}");
        let at_edge = tokio::spawn(async move {
            sleep_until(at).await;
            crate::server::profile(&label);
            CpuMark::now()
        });
        let (mut b, done_at) = boundary(self.addr, self.seen, before, deadline, done).await;
        b.server = (server_before, server_times_async().await);
        let start = WorkMark {
            gc_cycles: b.server.0.gc_cycles,
            cpu: at_edge.await.ok().flatten(),
        };
        // An edge never done is counted until its deadline, without its CPU.
        let end = done_at.unwrap_or(WorkMark {
            gc_cycles: b.server.1.gc_cycles,
            cpu: None,
        });
        b.work = end.since(&start);
        b.cpu_secs = process::usage(self.pid).cpu_secs - usage.cpu_secs;
        progress(&format!(
            "{what} boundary settled ({} writes)",
            count(b.settled.minus(&b.before).writes_total())
        ));
        machine.push((format!("{what} settled"), machine_note(self.identity)));
        Ok((b, usage))
    }
}

async fn sleep_until(t: Timestamp) {
    if let Ok(d) = Duration::try_from(t.duration_since(Timestamp::now())) {
        tokio::time::sleep(d).await;
    }
}

/// Waits out a boundary: until `done` holds for what the watches saw and the write
/// counter stood still for [`QUIET`], or `deadline`.
async fn boundary(
    addr: SocketAddr,
    seen: &Shared,
    before: Scrape,
    deadline: Instant,
    done: impl Fn(&Seen) -> bool,
) -> (Boundary, Option<WorkMark>) {
    let changes_before = seen.lock().expect("seen").template_changes;
    let mut last = before.clone();
    let mut last_write = None;
    let mut moved = Instant::now();
    // The API server's CPU time and garbage collections when every target was first seen
    // done.
    let mut done_at = None;
    loop {
        tokio::time::sleep(SCRAPE_EVERY).await;
        if let Some(s) = scrape(addr).await {
            if s.writes_total() != last.writes_total() {
                last_write = Some(Timestamp::now());
                moved = Instant::now();
            }
            last = s;
        }
        let (complete, changes) = {
            let s = seen.lock().expect("seen");
            (done(&s), s.template_changes - changes_before)
        };
        if complete && done_at.is_none() {
            done_at = Some(WorkMark::end().await);
        }
        if (complete && moved.elapsed() >= QUIET) || Instant::now() >= deadline {
            let b = Boundary {
                before,
                settled: last,
                last_write,
                complete,
                template_changes: changes,
                server: Default::default(),
                cpu_secs: 0.0,
                work: Work::default(),
            };
            return (b, done_at);
        }
    }
}
