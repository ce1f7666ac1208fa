//! What else competes for the machine and the API server: other managers, and the API
//! server's own request times, which explain the latencies.

use std::collections::BTreeMap;

use crate::shared::{
    machine,
    metrics::label,
    process::{ManagerProcess, moonin_managers},
};

/// Other managers that reconcile scaling templates (and so would write to ours).
pub fn rival_managers(identity: &str) -> Vec<ManagerProcess> {
    moonin_managers()
        .into_iter()
        .filter(|m| m.identity != identity && m.runs("scaling"))
        .collect()
}

/// The machine at one instant: load average and what else competes for it.
pub fn machine_note(identity: &str) -> String {
    machine::note(identity, |m| {
        if m.runs("scaling") {
            "RIVAL scaling manager"
        } else {
            "other manager without scaling"
        }
    })
}

/// The API server's own `apiserver_request_duration_seconds` (sum, count) by
/// (verb, resource[/subresource]), all clients together; and, under the verb [`CLOSED`], its
/// `apiserver_terminated_watchers_total` by resource (count only).
pub type ServerTimes = BTreeMap<(String, String), (f64, f64)>;

/// The verb under which [`ServerTimes`] holds the watches the API server closed because
/// their client did not read its events in time: until it does, or its time budget is spent,
/// the API server holds back that resource's events from every other watcher too.
pub const CLOSED: &str = "CLOSED";

/// The resources whose closed watches are reported: those the manager and this benchmark
/// both watch.
pub const CLOSED_ROWS: [&str; 3] = [
    "deployments",
    "horizontalpodautoscalers",
    "scalingtemplates",
];

fn server_times() -> ServerTimes {
    let mut out = ServerTimes::new();
    let Ok(o) = std::process::Command::new("kubectl")
        .args(["get", "--raw", "/metrics"])
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some(rest) = line.strip_prefix("apiserver_terminated_watchers_total{") {
            let n = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            let key = (CLOSED.to_string(), label(rest, "resource").to_string());
            out.entry(key).or_default().1 += n.unwrap_or(0.0);
            continue;
        }
        let (is_sum, rest) =
            if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
                (true, r)
            } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_count{") {
                (false, r)
            } else {
                continue;
            };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let sub = label(rest, "subresource");
        let resource = match sub {
            "" | "?" => label(rest, "resource").to_string(),
            sub => format!("{}/{sub}", label(rest, "resource")),
        };
        let e = out
            .entry((label(rest, "verb").to_string(), resource))
            .or_default();
        if is_sum {
            e.0 += value;
        } else {
            e.1 += value;
        }
    }
    out
}

/// The API server's request times now (zero when `kubectl get --raw /metrics` fails).
pub async fn server_times_async() -> ServerTimes {
    tokio::task::spawn_blocking(server_times)
        .await
        .unwrap_or_default()
}

/// The requests whose server-side time explains the latencies.
pub const SERVER_ROWS: [(&str, &str); 9] = [
    ("PATCH", "horizontalpodautoscalers"),
    ("PATCH", "deployments"),
    // The Deployment controller's writes: a ReplicaSet's replicas, and the annotations it
    // copies from its Deployment; the Deployment's status.
    ("PUT", "replicasets"),
    ("PUT", "deployments/status"),
    ("APPLY", "scalingtemplates/status"),
    ("POST", "events"),
    ("PATCH", "events"),
    ("POST", "pods"),
    ("PATCH", "pods/status"),
];
