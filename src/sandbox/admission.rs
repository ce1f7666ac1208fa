//! The autoscaler's admission probe, run by Load before every decision: how many more Pods
//! the namespace's ResourceQuotas accept.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;

use super::autoscaler::Admission;
use crate::api::{
    quantity::{self, Quantity},
    sandbox::SandboxPool,
};

/// The sum of one resource's requests over a Pod template's containers, read exactly; a
/// request that does not read (the API server would refuse the Pod) counts as nothing.
fn template_request(pool: &SandboxPool, resource: &str) -> Quantity {
    pool.spec
        .template
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(resource))
        .filter_map(|q| quantity::parse(&q.0))
        .fold(Quantity::default(), |sum, q| {
            sum.checked_add(q).unwrap_or(sum)
        })
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
            let Some(h) = hard.get(key).and_then(|q| quantity::parse(&q.0)) else {
                continue;
            };
            let u = used
                .get(key)
                .and_then(|q| quantity::parse(&q.0))
                .unwrap_or_default();
            let free = h.checked_sub(u).unwrap_or_default();
            let each = match per_pod {
                None => Quantity::from_nanos(quantity::NANOS_PER_UNIT),
                Some(r) => template_request(pool, r),
            };
            let Some(pods) = free.times(each) else {
                continue;
            };
            let pods = i64::try_from(pods).unwrap_or(i64::MAX);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(memory: &str) -> SandboxPool {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "a", "resources": {"requests": {"memory": memory}}},
                {"name": "b", "resources": {"requests": {"memory": memory}}},
            ]}}}
        }))
        .expect("pool")
    }

    fn quota(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> Arc<ResourceQuota> {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"hard": map(hard)},
                "status": {"used": map(used)},
            }))
            .expect("quota"),
        )
    }

    #[test]
    fn quotas_in_any_suffix_are_read_exactly() {
        // Two containers of 64Ti each: a 1Pi quota with 512Ti used fits 4 more Pods; the
        // `pods` quota fits 3; the smallest wins, less the 1 Pod still to create.
        let quotas = [
            quota(
                "memory",
                &[("requests.memory", "1Pi")],
                &[("requests.memory", "512Ti")],
            ),
            quota("pods", &[("pods", "10")], &[("pods", "7")]),
        ];
        let a = probe(&quotas, &pool("64Ti"), 1);
        assert_eq!(a.headroom, Some(2), "{:?}", a.message);
        assert!(
            a.message
                .unwrap_or_default()
                .starts_with("ResourceQuota pods allows 3")
        );
        // Exa: 1E of memory and 0.25E per Pod (two containers of 125P).
        let a = probe(&[quota("m", &[("memory", "1E")], &[])], &pool("125P"), 0);
        assert_eq!(a.headroom, Some(4));
        // Used past hard admits nothing; an unreadable quota is not probed.
        let a = probe(
            &[
                quota("over", &[("pods", "2")], &[("pods", "3")]),
                quota("odd", &[("pods", "lots")], &[]),
            ],
            &pool("1Gi"),
            0,
        );
        assert_eq!(a.headroom, Some(0));
    }
}
