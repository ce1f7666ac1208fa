//! The machine the benchmark runs on: what it is (for the report's header) and how busy it
//! is (load, compilers, other managers), at each checkpoint and before measuring.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use super::{
    process::{ManagerProcess, moonin_managers},
    report::progress,
};

/// Compilers and builds running on this machine, by command name (not counting the
/// `cargo bench` that runs this benchmark).
pub fn builds() -> BTreeMap<String, usize> {
    let mut busy: BTreeMap<String, usize> = BTreeMap::new();
    let parent = std::os::unix::process::parent_id().to_string();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if entry.file_name().to_str() == Some(parent.as_str()) {
                continue;
            }
            let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
                continue;
            };
            let comm = comm.trim();
            if matches!(comm, "rustc" | "cargo" | "go" | "compile" | "link" | "cc1") {
                *busy.entry(comm.to_string()).or_default() += 1;
            }
        }
    }
    busy
}

/// The machine at one instant: its load average, the builds running, and every `moonin run`
/// but `own_identity`, each named by `label` (`pid N (identity)` follows).
pub fn note(own_identity: &str, label: impl Fn(&ManagerProcess) -> &'static str) -> String {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let mut note = format!("load average {load}");
    for (comm, n) in builds() {
        note.push_str(&format!(", {n}× {comm}"));
    }
    for m in moonin_managers() {
        if m.identity != own_identity {
            note.push_str(&format!(", {} {m}", label(&m)));
        }
    }
    note
}

/// Prints the report's lines about the machine, the control plane (`beside`: what else
/// shares the machine) and the source tree.
pub fn print_header_lines(kube_version: &str, beside: &str) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kib| format!("{:.1} GiB", kib as f64 / 1048576.0),
        );
    let tree = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(crate::common::root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".into());
    println!(
        "- machine: {cores} cores ({cpu}), {mem} RAM; local control plane (e2e/cluster: kube-apiserver {kube_version}, etcd, kube-controller-manager, kube-scheduler, kwok) on the same machine{beside}"
    );
    println!("- source: `git describe --always --dirty` = {tree}");
}

/// Waits, checking every `every` for at most `max`, until `busy` finds nothing competing
/// (it says what competes, or returns `None`). Says when it waited more than a second, and
/// every 30 s what it still waits for; at `max`, what still competes.
pub async fn wait_until_quiet(
    what: &str,
    max: Duration,
    every: Duration,
    mut busy: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let Some(competing) = busy() else {
            if started.elapsed() > Duration::from_secs(1) {
                progress(&format!(
                    "waited {:.0} s for {what}",
                    started.elapsed().as_secs_f64()
                ));
            }
            return Ok(());
        };
        if started.elapsed() >= max {
            let waited = max.as_secs();
            return Err(format!(
                "still waiting for {what} after {waited} s: {competing}"
            ));
        }
        if last_print.elapsed() >= Duration::from_secs(30) {
            last_print = Instant::now();
            progress(&format!(
                "waiting up to {} s for {what}: {competing}",
                max.as_secs()
            ));
        }
        tokio::time::sleep(every).await;
    }
}
