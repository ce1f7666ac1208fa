//! How `moonin fleet` prints a [`Report`]: a table for people (the clusters that did not
//! answer as rows of their own, after the others), JSON or YAML for scripts.

use serde_json::Value;

use super::Report;

/// One cell as the table shows it: `-` for nothing, lists joined with commas.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) if s.is_empty() => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => if *b { "yes" } else { "no" }.into(),
        Some(Value::Array(a)) if a.is_empty() => "-".into(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| cell(Some(x)))
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

/// The table: a header, one line per row, columns padded to their widest cell; then one
/// line per cluster that did not answer (`CLUSTER  unreachable: …`).
pub fn render_table(report: &Report) -> String {
    let mut lines: Vec<Vec<String>> = vec![report.columns.iter().map(|c| c.0.into()).collect()];
    for item in &report.items {
        lines.push(
            report
                .columns
                .iter()
                .map(|(_, field)| cell(item.get(*field)))
                .collect(),
        );
    }
    let mut widths = vec![0; report.columns.len()];
    for line in &lines {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let padded: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(padded.join("   ").trim_end());
        out.push('\n');
    }
    // The clusters that did not answer: their name under CLUSTER, then why.
    let column = report
        .columns
        .iter()
        .position(|c| c.1 == "cluster")
        .unwrap_or(0);
    let indent: usize = widths[..column].iter().map(|w| w + 3).sum();
    let width = widths[column];
    for r in report.clusters.iter().filter(|r| r.error.is_some()) {
        let why = r.error.as_deref().unwrap_or_default();
        out.push_str(&format!(
            "{:indent$}{:<width$}   {}: {why}\n",
            "", r.cluster, r.state
        ));
    }
    out
}

/// The report as JSON: `clusters` (how each answered) and `items` (the rows).
pub fn render_json(report: &Report) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(report).map(|s| s + "\n")
}

/// The report as YAML, the same shape as [`render_json`].
pub fn render_yaml(report: &Report) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(report)
}
