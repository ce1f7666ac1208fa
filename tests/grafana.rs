//! The fleet dashboard (`config/grafana/moonin-fleet.json`) queries only series the manager
//! exports, with labels those series carry: every metric a query names is in the text a
//! manager renders with one fact of each fleet series, and every label a query matches on or
//! groups by is on that metric's samples. Pure: no cluster.

use std::collections::{BTreeMap, BTreeSet};

use moonin::runtime::facts::{Fact, Series};
use moonin::runtime::metrics::Metrics;
use serde_json::Value;

/// The exported series and the labels of their samples, from the rendered text of a
/// manager whose every fleet series has a value.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let m = Metrics::new();
    m.facts.set_cluster("eu-1");
    m.facts.add(Box::new(|| {
        let l = |pairs: &[(&'static str, &str)]| {
            pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
        };
        vec![
            Fact::new(Series::Inventory, l(&[("fact", "images")]), 3),
            Fact::new(
                Series::WorkloadsWithSignal,
                l(&[("signal", "CrashLoopBackOff")]),
                1,
            ),
            Fact::new(Series::ScalingTemplates, l(&[("phase", "Active")]), 1),
            Fact::new(Series::OpenWindows, l(&[]), 1),
            Fact::new(
                Series::PoolReplicas,
                l(&[("namespace", "s"), ("pool", "p"), ("state", "idle")]),
                2,
            ),
            Fact::new(
                Series::PoolSaturated,
                l(&[("namespace", "s"), ("pool", "p")]),
                0,
            ),
        ]
    }));
    let text = m.render();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if let Some(inner) = line[name_end..]
            .strip_prefix('{')
            .and_then(|r| r.split('}').next())
        {
            labels.extend(
                inner
                    .split(',')
                    .filter_map(|kv| kv.split('=').next())
                    .map(str::to_string),
            );
        }
    }
    out
}

/// Every query of the dashboard: the panels' `expr`s and the variables' queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().expect("targets") {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push(q.to_string());
        }
    }
    out
}

/// The identifiers of a PromQL expression that name Moonin series.
fn metrics_of(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("moonin_"))
        .map(str::to_string)
        .collect()
}

/// The label names an expression matches on (`{a="x",b=~"y"}`), groups by (`by (a, b)`) or
/// asks for (`label_values(m, a)`).
fn labels_of(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in expr.split('{').skip(1) {
        let inner = part.split('}').next().unwrap_or_default();
        out.extend(inner.split(',').filter_map(|m| {
            let name = m.split(['=', '!', '~']).next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        }));
    }
    for key in ["by (", "by(", "label_values("] {
        for part in expr.split(key).skip(1) {
            let inner = part.split(')').next().unwrap_or_default();
            let names = inner.split(',').map(str::trim);
            // label_values(metric, label): the first argument is the metric.
            let names: Vec<&str> = if key == "label_values(" {
                names.skip(1).collect()
            } else {
                names.collect()
            };
            out.extend(
                names
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            );
        }
    }
    out
}

#[test]
fn every_dashboard_query_names_an_exported_series_and_its_labels() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("config/grafana/moonin-fleet.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported();
    assert!(
        exported.contains_key("moonin_fleet_open_windows"),
        "{exported:?}"
    );
    let queries = queries(&dashboard);
    assert!(queries.len() >= 9, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let names = metrics_of(q);
        assert!(!names.is_empty(), "{q}: names no Moonin series");
        for name in &names {
            let Some(labels) = exported.get(name) else {
                panic!(
                    "{q}: {name} is not a series the manager exports ({:?})",
                    exported.keys()
                );
            };
            for label in labels_of(q) {
                assert!(
                    labels.contains(&label),
                    "{q}: {name} has no label {label} (it has {labels:?})"
                );
            }
            used.insert(name.clone());
        }
    }
    // The dashboard shows every fleet series.
    let fleet: BTreeSet<String> = exported
        .keys()
        .filter(|n| n.starts_with("moonin_fleet_"))
        .cloned()
        .collect();
    assert_eq!(
        used.intersection(&fleet).cloned().collect::<BTreeSet<_>>(),
        fleet
    );
}

#[test]
fn the_query_parsers_see_what_they_should() {
    let q =
        r#"sum by (cluster, state) (moonin_fleet_pool_replicas{cluster=~"$cluster",state="idle"})"#;
    assert_eq!(metrics_of(q), ["moonin_fleet_pool_replicas"]);
    assert_eq!(labels_of(q), ["cluster", "state"].map(String::from).into());
    assert_eq!(
        labels_of("label_values(moonin_fleet_inventory, cluster)"),
        ["cluster".to_string()].into()
    );
    // A label no fleet series has is caught.
    let exported = exported();
    assert!(!exported["moonin_fleet_open_windows"].contains("pool"));
}
