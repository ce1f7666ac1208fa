//! The autoscaler's admission probe, run by Load before every decision: how many more Pods
//! the namespace's ResourceQuotas accept.

use std::sync::Arc;

use k8s_openapi::{api::core::v1::ResourceQuota, apimachinery::pkg::api::resource::Quantity};
use kube::ResourceExt;

use super::autoscaler::Admission;
use crate::api::sandbox::SandboxPool;

/// A Kubernetes quantity as a number (`100m`, `2`, `512Mi`, `1G`); `None` if unreadable.
fn quantity(q: &Quantity) -> Option<f64> {
    let s = q.0.trim();
    let (num, mult) = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ]
    .iter()
    .find_map(|(suffix, m)| s.strip_suffix(suffix).map(|n| (n, *m)))
    .unwrap_or((s, 1.0));
    num.parse::<f64>().ok().map(|n| n * mult)
}

/// The sum of one resource's requests over a Pod template's containers.
fn template_request(pool: &SandboxPool, resource: &str) -> f64 {
    pool.spec
        .template
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(resource))
        .filter_map(quantity)
        .sum()
}

/// How many more Pods the ResourceQuotas of the Pool's namespace (among `quotas`) accept,
/// beyond the Pods the Pool still has to create for its current size (`missing`). Each
/// quota's `pods`, and its `requests.cpu` / `requests.memory` (also spelled `cpu` /
/// `memory`) divided by the template's summed container requests, count as `hard − used`;
/// the smallest wins. Other quota resources, LimitRange defaults and node capacity are not
/// probed: the API server's refusals of such creates show as Pods that never appear.
pub fn probe(quotas: &[Arc<ResourceQuota>], pool: &SandboxPool, missing: i32) -> Admission {
    let ns = pool.namespace().unwrap_or_default();
    let mut best: Option<(i64, String)> = None;
    for q in quotas {
        if q.namespace().as_deref() != Some(ns.as_str()) {
            continue;
        }
        let hard = q
            .spec
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default();
        let used = q
            .status
            .as_ref()
            .and_then(|s| s.used.clone())
            .unwrap_or_default();
        let probes = [
            ("pods", "pods", None),
            ("requests.cpu", "cpu", Some("cpu")),
            ("cpu", "cpu", Some("cpu")),
            ("requests.memory", "memory", Some("memory")),
            ("memory", "memory", Some("memory")),
        ];
        for (key, label, per_pod) in probes {
            let Some(h) = hard.get(key).and_then(quantity) else {
                continue;
            };
            let u = used.get(key).and_then(quantity).unwrap_or(0.0);
            let free = (h - u).max(0.0);
            let pods = match per_pod {
                None => free.floor() as i64,
                Some(r) => {
                    let each = template_request(pool, r);
                    if each <= 0.0 {
                        continue;
                    }
                    (free / each).floor() as i64
                }
            };
            if best.as_ref().is_none_or(|(b, _)| pods < *b) {
                best = Some((
                    pods,
                    format!(
                        "ResourceQuota {} allows {pods} more Pods ({label}: {} of {} used)",
                        q.name_any(),
                        used.get(key).map(|x| x.0.as_str()).unwrap_or("0"),
                        hard.get(key).map(|x| x.0.as_str()).unwrap_or("?"),
                    ),
                ));
            }
        }
    }
    match best {
        None => Admission::default(),
        Some((pods, msg)) => Admission {
            headroom: Some((pods - i64::from(missing.max(0))).clamp(0, i64::from(i32::MAX)) as i32),
            message: Some(msg),
        },
    }
}
