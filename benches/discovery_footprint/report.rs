//! The report: the cluster, the footprint of both systems side by side, what the image
//! changes caused, and notes.

use std::collections::BTreeSet;

use crate::{
    Params, RSS_GOAL, VERBS,
    discovery::MooninResult,
    ksm::KsmResult,
    objects::DEPLOYMENTS_PER_INGRESS,
    setup::Setup,
    shared::{
        machine,
        report::{by_kind, listing, mib, num},
    },
};

/// The report's header: the command, the target, the machine.
pub fn print_header(p: &Params, version: &str) {
    println!("# Moonin discovery footprint");
    println!();
    println!("- command: `{}`", p.command());
    println!(
        "- target: {} kwok Nodes, {} Deployments × {} replicas = {} Pods, in {} namespaces; steady window {} s; {} image changes",
        p.nodes,
        p.deployments,
        p.pods_per_deployment,
        p.pods(),
        p.namespaces,
        p.steady_secs,
        p.changed().len()
    );
    machine::print_header_lines(version, "");
}

fn print_setup(p: &Params, s: &Setup) {
    println!();
    println!("## Cluster");
    println!();
    println!("| | target | reached | created now | already there | seconds |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| kwok Nodes (Ready) | {} | {} | {} | {} | {:.1} |",
        p.nodes, s.nodes_ready, s.nodes.0, s.nodes.1, s.nodes_secs
    );
    println!(
        "| namespaces | {} | {} | {} | {} | {:.1} |",
        p.namespaces,
        s.namespaces.0 + s.namespaces.1,
        s.namespaces.0,
        s.namespaces.1,
        s.namespaces_secs
    );
    println!(
        "| Deployments | {} | {} | {} | {} | {:.1} (creates) |",
        p.deployments, s.deployments_present, s.deployments.0, s.deployments.1, s.deployments_secs
    );
    println!(
        "| Services (one per Deployment) | {} | {} | {} | {} | {:.1} (with the Ingresses) |",
        p.deployments, s.services_present, s.services.0, s.services.1, s.connections_secs
    );
    println!(
        "| Ingresses (one per {DEPLOYMENTS_PER_INGRESS} Deployments) | {} | {} | {} | {} | — |",
        p.deployments.div_ceil(DEPLOYMENTS_PER_INGRESS),
        s.ingresses_present,
        s.ingresses.0,
        s.ingresses.1
    );
    println!(
        "| Pods Running | {} | {} (of {} seen) | — | — | {:.1} (first create → target){} |",
        p.pods(),
        s.pods_running,
        s.pods_seen,
        s.running_secs,
        if s.timed_out { ", TIMED OUT" } else { "" }
    );
    println!();
    if s.deployments.0 > 0 {
        println!(
            "Setup took {:.1} s in all; per 1,000 Deployments created (with {} Pods each): {:.1} s of creates, {:.1} s until their Pods ran.",
            s.total_secs,
            p.pods_per_deployment,
            s.deployments_secs / s.deployments.0 as f64 * 1000.0,
            s.running_secs / s.deployments.0 as f64 * 1000.0
        );
    } else {
        println!(
            "Setup took {:.1} s in all: every object was there from an earlier run and was reused.",
            s.total_secs
        );
    }
}

/// Prints the whole report (Markdown) on stdout.
pub fn print_report(p: &Params, setup: &Setup, m: &Option<MooninResult>, k: &Option<KsmResult>) {
    print_setup(p, setup);
    println!();
    println!("## Footprint");
    println!();
    println!("| figure | Moonin | kube-state-metrics |");
    println!("|---|---|---|");
    let table = Footprint {
        m: m.as_ref(),
        k: k.as_ref(),
    };
    table.seen();
    table.warm_up();
    table.steady_state();
    table.ratio();
    if let Some(m) = m {
        print_changes(m);
        print_notes(p, m);
    }
    if let Some(k) = k {
        println!(
            "- kube-state-metrics {} (`e2e/kube-state-metrics`, default resources: it lists and watches {} kinds, Secrets and ConfigMaps included, with the admin kubeconfig){}; log: {}",
            k.version,
            k.resources,
            k.build_secs
                .map(|s| format!("; built in this run in {s:.0} s"))
                .unwrap_or_default(),
            k.log
        );
    }
}

/// The footprint table: a row per figure, Moonin beside kube-state-metrics (`n/a` for a
/// system that did not run).
struct Footprint<'a> {
    m: Option<&'a MooninResult>,
    k: Option<&'a KsmResult>,
}

impl Footprint<'_> {
    fn row(
        &self,
        name: &str,
        m: impl Fn(&MooninResult) -> String,
        k: impl Fn(&KsmResult) -> String,
    ) {
        let na = || "n/a".to_string();
        println!(
            "| {name} | {} | {} |",
            self.m.map_or_else(na, &m),
            self.k.map_or_else(na, &k)
        );
    }

    /// What each system saw of the cluster once warm.
    fn seen(&self) {
        self.row(
            "cluster seen when warm: Nodes / Deployments / Pods",
            |m| {
                format!(
                    "{} / {} / — (ClusterDiscovery: Nodes in node groups, Deployments; {} namespaces)",
                    m.seen.0, m.seen.1, m.seen.2
                )
            },
            |k| {
                format!(
                    "{} / {} / {} (kube_node_info, kube_deployment_created, kube_pod_info lines)",
                    k.seen.0, k.seen.1, k.seen.2
                )
            },
        );
        self.row(
            "Services / Ingresses seen when warm",
            |m| {
                format!(
                    "{} / {} (summed over the benchmark's inventories)",
                    m.connections_seen.0, m.connections_seen.1
                )
            },
            |k| {
                format!(
                    "{} / {} (kube_service_info, kube_ingress_info lines)",
                    k.seen.3, k.seen.4
                )
            },
        );
    }

    /// From the process start until warm.
    fn warm_up(&self) {
        self.row(
            "warm-up time (process start → warm)",
            |m| {
                format!(
                    "{:.1} s (InventoryComplete, every benchmark namespace inventoried)",
                    m.warm_secs
                )
            },
            |k| {
                format!(
                    "{:.1} s (every resource listed and watched); /metrics confirmed at {:.1} s",
                    k.warm_secs, k.confirmed_secs
                )
            },
        );
        self.row(
            "RSS after warm-up (VmRSS)",
            |m| mib(m.warm.rss_kib),
            |k| format!("{} (before any /metrics scrape)", mib(k.warm.rss_kib)),
        );
        self.row(
            "peak RSS during warm-up (VmHWM)",
            |m| mib(m.warm.hwm_kib),
            |k| mib(k.warm.hwm_kib),
        );
        self.row(
            "RSS later (VmRSS / VmHWM)",
            |m| {
                format!(
                    "{} / {} (after the image changes)",
                    mib(m.end.rss_kib),
                    mib(m.end.hwm_kib)
                )
            },
            |k| {
                format!(
                    "{} / {} (after the /metrics scrapes that confirmed warm-up); {} / {} at the end",
                    mib(k.after_scrape.rss_kib),
                    mib(k.after_scrape.hwm_kib),
                    mib(k.end.rss_kib),
                    mib(k.end.hwm_kib)
                )
            },
        );
        self.row(
            "CPU time during warm-up",
            |m| format!("{:.1} s", m.warm.cpu_secs),
            |k| format!("{:.1} s", k.warm.cpu_secs),
        );
        for verb in VERBS {
            self.row(
                &format!("API requests during warm-up: {verb}"),
                |m| num(m.warm_scrape.request(verb)),
                |k| match verb {
                    "list" => format!("{} (pages, {} resources)", num(k.warm_lists), k.resources),
                    "watch" => num(k.warm_watches),
                    _ => "n/a".into(),
                },
            );
        }
        self.row(
            "writes during warm-up (by kind)",
            |m| by_kind(&m.warm_scrape.writes, 1.0),
            |_| "0 (read-only)".into(),
        );
        self.row(
            "writes from start until settled (by kind)",
            |m| by_kind(&m.settled_scrape.writes, 1.0),
            |_| "0 (read-only)".into(),
        );
        self.row(
            "restart, nothing changed: first full rebuild",
            |m| format!("{:.1} s", m.restart_secs),
            |_| "n/a".into(),
        );
        self.row(
            "restart, nothing changed: writes until settled (by kind)",
            |m| by_kind(&m.restart_scrape.writes, 1.0),
            |_| "n/a".into(),
        );
    }

    /// The steady window, and the image changes after it.
    fn steady_state(&self) {
        for verb in VERBS {
            self.row(
                &format!("steady state: {verb} requests/min"),
                |m| num(m.steady.request(verb) * 60.0 / m.steady_secs),
                |k| match verb {
                    "list" => num(k.steady_lists * 60.0 / k.steady_secs),
                    "watch" => num(k.steady_watches * 60.0 / k.steady_secs),
                    _ => "n/a".into(),
                },
            );
        }
        self.row(
            "steady state: writes/min (by kind)",
            |m| by_kind(&m.steady.writes, 60.0 / m.steady_secs),
            |_| "0 (read-only)".into(),
        );
        self.row(
            "relists in steady state (list requests during the window; goal 0)",
            |m| {
                let failed = if m.steady_failed_lists > 0 {
                    format!(
                        " ({} of them retries of an initial list that failed; see Notes)",
                        m.steady_failed_lists
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} in {:.0} s{failed}",
                    num(m.steady.request("list")),
                    m.steady_secs
                )
            },
            |k| format!("{} in {:.0} s", num(k.steady_lists), k.steady_secs),
        );
        self.row(
            "writes after the image changes (by kind)",
            |m| {
                format!(
                    "{} ({} changes, settled after {:.1} s{})",
                    by_kind(&m.change.writes.writes, 1.0),
                    m.change.changed.len(),
                    m.change.secs,
                    if m.change.settled {
                        ""
                    } else {
                        ", NOT settled"
                    }
                )
            },
            |_| "n/a".into(),
        );
    }

    /// Moonin's RSS against kube-state-metrics', and the goal.
    fn ratio(&self) {
        let name = format!("RSS ratio Moonin / kube-state-metrics (goal ≤ {RSS_GOAL})");
        let ratio = match (self.m, self.k) {
            (Some(m), Some(k)) if k.warm.rss_kib > 0 => Some((
                m.warm.rss_kib as f64 / k.warm.rss_kib as f64,
                m.warm.rss_kib as f64 / k.after_scrape.rss_kib.max(1) as f64,
            )),
            _ => None,
        };
        let cell = match ratio {
            Some((r, r_scraped)) => format!(
                "{r:.3} — {} (against kube-state-metrics before any scrape; {r_scraped:.3} against it after one)",
                if r <= RSS_GOAL { "met" } else { "not met" }
            ),
            None => "n/a".into(),
        };
        println!("| {name} | {cell} |  |");
    }
}

/// What the image changes caused.
fn print_changes(m: &MooninResult) {
    let c = &m.change;
    println!();
    println!("## After the image changes");
    println!();
    println!(
        "- changed: {}",
        c.changed
            .iter()
            .map(|(ns, n)| format!("{ns}/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let touched: BTreeSet<&String> = c.changed.iter().map(|(ns, _)| ns).collect();
    println!(
        "- inventories rewritten: {} of the {} touched namespaces; {} elsewhere{}",
        c.inventories_touched.len(),
        touched.len(),
        c.inventories_elsewhere.len(),
        listing(&c.inventories_elsewhere.iter().cloned().collect::<Vec<_>>())
    );
    println!(
        "- NamespaceInventory writes: {} for {} touched namespaces (a rollout changes replica counts several times, each a rebuild after {} ms of quiet)",
        num(c.writes.write("NamespaceInventory")),
        touched.len(),
        500
    );
    println!(
        "- WorkloadRevisions created since the change: {} for the changed Deployments (expected {}), {} for others{}; WorkloadRevision writes counted: {}",
        c.revisions_changed,
        c.changed.len(),
        c.revisions_other.len(),
        listing(&c.revisions_other),
        num(c.writes.write("WorkloadRevision"))
    );
    if !c.unexpected_kinds.is_empty() {
        println!("- other kinds written: {}", c.unexpected_kinds.join(", "));
    }
    println!(
        "- writes for changed objects only: {} (the heartbeat Lease, renewed every 10 s by design, is not counted)",
        if c.only_changed() { "yes" } else { "no" }
    );
}

/// How Moonin ran, its log, and the machine.
fn print_notes(p: &Params, m: &MooninResult) {
    println!();
    println!("## Notes");
    println!();
    println!(
        "- Moonin: `moonin run --controllers discovery` (release build), impersonating the ServiceAccount with config/rbac{}; ClusterDiscovery `{}`; settled {:.1} s after warm-up before the steady window; manager log: {} ({} warnings, {} errors)",
        if p.helm_rbac {
            " and config/rbac-helm (MOONIN_BENCH_HELM_RBAC=1)"
        } else {
            " only (MOONIN_BENCH_HELM_RBAC=1 adds the opt-in config/rbac-helm)"
        },
        m.discovery,
        m.settle_secs,
        m.log,
        m.log_warnings,
        m.log_errors
    );
    println!(
        "- a baseline is not a revision: WorkloadRevisions written during warm-up: {} (each Deployment's baseline is in its inventory entry)",
        num(m.warm_scrape.write("WorkloadRevision"))
    );
    if m.steady_warnings.is_empty() {
        println!("- the manager logged no warnings during the steady window");
    } else {
        println!("- the manager's warnings during the steady window:");
        for (msg, n) in &m.steady_warnings {
            println!("  - {n}× {msg}");
        }
    }
    println!(
        "- Moonin RSS after the steady window: {} (VmHWM {})",
        mib(m.after_steady.rss_kib),
        mib(m.after_steady.hwm_kib)
    );
    for (when, note) in &m.machine {
        println!("- the machine {when}: {note}");
    }
    if let Some(o) = &m.others {
        println!("- WARNING: {o}");
    }
}
