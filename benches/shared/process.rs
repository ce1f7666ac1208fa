//! Processes on this machine, from `/proc`: a process's memory and CPU time, and the
//! `moonin run` processes (the benchmark's own manager, and any other that would compete
//! with it or write to its objects).

/// VmRSS and VmHWM of a process, in KiB, and its CPU time (user + system), in seconds.
#[derive(Clone, Copy, Default, Debug)]
pub struct Usage {
    /// Resident memory now.
    pub rss_kib: u64,
    /// The peak of resident memory so far.
    pub hwm_kib: u64,
    /// CPU time so far.
    pub cpu_secs: f64,
}

/// The usage of process `pid` now (zeros for a process that is gone).
pub fn usage(pid: u32) -> Usage {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    // Fields 14 and 15 of /proc/<pid>/stat, after the command in parentheses; in clock
    // ticks of 1/100 s on Linux.
    let cpu_secs = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0);
    Usage {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
        cpu_secs,
    }
}

/// A `moonin run` process on this machine.
#[derive(Clone, Debug)]
pub struct ManagerProcess {
    /// Its process id.
    pub pid: u32,
    /// Its `--identity` (`?` without one).
    pub identity: String,
    /// Its `--controllers`; `None` runs every controller.
    pub controllers: Option<String>,
}

impl ManagerProcess {
    /// Whether it runs `controller` (and so reconciles that controller's objects).
    pub fn runs(&self, controller: &str) -> bool {
        self.controllers
            .as_deref()
            .is_none_or(|c| c.split(',').any(|c| c == controller))
    }
}

impl std::fmt::Display for ManagerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.identity)
    }
}

/// Every `moonin run` process on this machine.
pub fn moonin_managers() -> Vec<ManagerProcess> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_moonin = args
                .first()
                .is_some_and(|a| a == "moonin" || a.ends_with("/moonin"));
            if !is_moonin || !args.iter().any(|a| a == "run") {
                return None;
            }
            let flag = |name: &str| {
                args.iter()
                    .position(|a| a == name)
                    .and_then(|i| args.get(i + 1))
                    .cloned()
            };
            Some(ManagerProcess {
                pid,
                identity: flag("--identity").unwrap_or_else(|| "?".into()),
                controllers: flag("--controllers"),
            })
        })
        .collect()
}

/// The process id of the `moonin run` with this identity.
pub fn pid_of(identity: &str) -> Result<u32, String> {
    moonin_managers()
        .into_iter()
        .find(|m| m.identity == identity)
        .map(|m| m.pid)
        .ok_or_else(|| "the manager's process is not in /proc".to_string())
}

/// `pid 1 (a), pid 2 (b)`, or `none`.
pub fn listed(managers: &[ManagerProcess]) -> String {
    if managers.is_empty() {
        return "none".into();
    }
    managers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
