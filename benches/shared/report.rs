//! How the benchmarks write: progress on stderr as they go, and the pieces of their
//! Markdown report on stdout (sizes, counts, short lists, breakdowns by kind or verb).

use std::collections::BTreeMap;

use jiff::Timestamp;

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

/// A whole number as one (never `-0`), anything else with one decimal.
pub fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

/// `a 1, b 2.5`: each entry times `per`, or `none` for no entry.
pub fn breakdown(m: &BTreeMap<String, f64>, per: f64, none: &str) -> String {
    if m.is_empty() {
        return none.into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {}", num(v * per)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes by kind, `0` for none.
pub fn by_kind(m: &BTreeMap<String, f64>, per: f64) -> String {
    breakdown(m, per, "0")
}
