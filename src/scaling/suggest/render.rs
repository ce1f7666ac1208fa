//! How `moonin suggest` prints: a summary for people, or YAML ready to commit (each
//! template preceded by its evidence as comments).

use std::fmt::Write as _;

use serde_json::json;

use super::{Report, Suggestion};

/// The annotation a suggested template carries: what it was suggested from.
pub const SUGGESTED_FROM: &str = "moonin.io/suggested-from";

/// `10h15m`, `40s`, `1h30s`: a Go duration, as `spec.duration` reads.
fn go_duration(secs: i64) -> String {
    let (h, m, s) = (secs / 3_600, secs % 3_600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if m > 0 {
        let _ = write!(out, "{m}m");
    }
    if s > 0 || out.is_empty() {
        let _ = write!(out, "{s}s");
    }
    out
}

/// The longest action name a template takes.
const ACTION_NAME_MAX: usize = 63;

/// An action's name for `deployment`: the name itself when it fits an action name's 63
/// characters (a Deployment's may have 253), else its first 54 characters and 8 hex digits
/// of a hash of the whole, so that two long names never share one.
pub fn action_name(deployment: &str) -> String {
    if deployment.len() <= ACTION_NAME_MAX {
        return deployment.to_string();
    }
    // FNV-1a: stable across builds and platforms.
    let hash = deployment.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let head: String = deployment.chars().take(54).collect();
    format!("{}-{:08x}", head.trim_end_matches(['-', '.']), hash >> 32)
}

/// The manifest of a suggestion, as JSON.
pub fn manifest(s: &Suggestion) -> serde_json::Value {
    let actions: Vec<serde_json::Value> = s
        .actions
        .iter()
        .map(|a| {
            json!({
                "name": action_name(&a.deployment),
                "target": {"kind": "Deployment", "name": a.deployment},
                "minReplicas": a.min_replicas,
                "maxReplicas": a.max_replicas,
            })
        })
        .collect();
    json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {
            "name": s.name,
            "namespace": s.namespace,
            "annotations": {SUGGESTED_FROM: "moonin suggest: replica history"},
        },
        "spec": {
            "schedule": s.schedule,
            "timeZone": s.time_zone,
            "duration": go_duration(s.duration.as_secs()),
            "actions": actions,
        },
    })
}

/// Every suggestion as a YAML document, its evidence (and what else was found) in comments.
pub fn render_yaml(report: &Report) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for s in &report.suggestions {
        out.push_str("---\n");
        for a in &s.actions {
            let _ = writeln!(out, "# {}: {}", a.deployment, a.evidence);
        }
        out.push_str(&serde_saphyr::to_string(&manifest(s))?);
    }
    if !report.unneeded.is_empty() || !report.notes.is_empty() {
        out.push_str(if report.suggestions.is_empty() {
            ""
        } else {
            "\n"
        });
        for line in found(report) {
            let _ = writeln!(out, "# {line}");
        }
    }
    Ok(out)
}

/// The templates that changed nothing and the notes, one line each.
fn found(report: &Report) -> Vec<String> {
    let unneeded = report
        .unneeded
        .iter()
        .map(|u| format!("{} (action {}): {}", u.template, u.action, u.evidence));
    let notes = report
        .notes
        .iter()
        .map(|n| format!("{} in {}: {}", n.autoscaler, n.namespace, n.text));
    unneeded.chain(notes).collect()
}

/// The summary for people.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    if report.suggestions.is_empty() {
        out.push_str("no rhythm found to schedule\n");
    }
    for s in &report.suggestions {
        let _ = writeln!(
            out,
            "ScalingTemplate {}/{}: {:?} in {}, windows of {}",
            s.namespace,
            s.name,
            s.schedule,
            s.time_zone,
            go_duration(s.duration.as_secs())
        );
        for a in &s.actions {
            let _ = writeln!(
                out,
                "  {}: minReplicas {}, maxReplicas {}. {}",
                a.deployment, a.min_replicas, a.max_replicas, a.evidence
            );
        }
    }
    let found = found(report);
    if !found.is_empty() {
        out.push('\n');
        for line in found {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_durations() {
        assert_eq!(go_duration(36_900), "10h15m");
        assert_eq!(go_duration(40), "40s");
        assert_eq!(go_duration(3_630), "1h30s");
        assert_eq!(go_duration(0), "0s");
        for secs in [1, 59, 60, 61, 3_599, 3_600, 86_399, 604_800] {
            let d: kube::core::Duration = go_duration(secs).parse().unwrap();
            assert_eq!(std::time::Duration::from(d).as_secs(), secs.unsigned_abs());
        }
    }

    #[test]
    fn an_action_name_fits_the_63_characters_and_stays_apart() {
        assert_eq!(action_name("web"), "web");
        let long = |tail: &str| format!("{}{tail}", "a".repeat(70));
        let (one, two) = (action_name(&long("-x")), action_name(&long("-y")));
        assert_eq!(one.len(), 63, "{one}");
        assert_ne!(one, two, "two long names, two action names");
        assert_eq!(one, action_name(&long("-x")), "the same name each time");
        assert_eq!(action_name(&"b".repeat(63)), "b".repeat(63));
    }
}
