//! Helpers the benchmarks share: plain HTTP to a local endpoint, reading Prometheus text,
//! progress lines, the machine's other work, and Ctrl-C. Each benchmark uses some of them.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use jiff::Timestamp;

/// `GET path` over HTTP/1.0; the body when the answer is 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.split_whitespace()
        .nth(1)
        .is_some_and(|s| s == "200")
        .then(|| body.to_string())
}

/// The value of label `name` on a Prometheus text line, `?` when it has none.
pub fn label<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    line.find(&key)
        .and_then(|i| {
            let rest = &line[i + key.len()..];
            rest.find('"').map(|j| &rest[..j])
        })
        .unwrap_or("?")
}

/// A timestamped progress line on stderr (the report goes to stdout).
pub fn progress(what: &str) {
    eprintln!("[{}] {what}", Timestamp::now().strftime("%H:%M:%S%.3f"));
}

/// KiB as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// ` (a, b, …)` for up to ten items, nothing for none.
pub fn listing(v: &[String]) -> String {
    if v.is_empty() {
        String::new()
    } else {
        let shown: Vec<&str> = v.iter().take(10).map(String::as_str).collect();
        format!(
            " ({}{})",
            shown.join(", "),
            if v.len() > 10 { ", …" } else { "" }
        )
    }
}

/// Resolves on Ctrl-C or SIGTERM, saying which, so that a benchmark can clean up first.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted (SIGINT); cleaning up",
        _ = term.recv() => "terminated (SIGTERM); cleaning up",
    }
}

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
