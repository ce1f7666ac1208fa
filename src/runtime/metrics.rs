//! Prometheus metrics of the manager and its controllers, in the text exposition format.

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::sync::Arc;

use super::facts::{FactFamily, Facts, Series};

/// Labels of per-controller series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `discovery`, `scaling` or `sandbox`.
    pub controller: String,
}

/// Labels of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The controller.
    pub controller: String,
    /// The error's stable category (it is also the Event reason).
    pub reason: String,
}

/// Labels of the write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// The controller.
    pub controller: String,
    /// The kind written, e.g. `HorizontalPodAutoscaler` or `ScalingTemplate/status`.
    pub kind: String,
}

/// Labels of the scaling controller's edge delays.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EdgeLabels {
    /// `open` or `close`.
    pub edge: &'static str,
}

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch` or `delete` (see [`verb_of`]).
    pub verb: String,
}

/// Labels of per-kind series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind, e.g. `SandboxPool` or `Deployment`.
    pub kind: String,
}

/// Labels of the build-info gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: String,
}

/// Every metric Moonin exports. Cheap to clone; all clones share the series.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// `moonin_reconciliations_total{controller}`.
    pub reconciliations: Family<ControllerLabels, Counter>,
    /// `moonin_reconcile_errors_total{controller,reason}`.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// `moonin_reconcile_duration_seconds{controller}`.
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// `moonin_scaling_edge_delay_seconds{edge}`: from a scheduled window edge to the end
    /// of the reconcile that acted on it.
    pub scaling_edge_delay: Family<EdgeLabels, Histogram>,
    /// `moonin_leader`: 1 while this process holds the leader Lease.
    pub leader: Gauge,
    /// `moonin_api_reachable`: 1 while the API server answers the leader election's requests
    /// (every 2 s), 0 once none got an answer for 5 s.
    pub api_reachable: Gauge,
    /// `moonin_api_writes_total{controller,kind}`: every create, patch and delete sent.
    pub api_writes: Family<WriteLabels, Counter>,
    /// `moonin_api_requests_total{verb}`: every request the manager's client sent, reads
    /// included (a relist shows up as `list`).
    pub api_requests: Family<RequestLabels, Counter>,
    /// `moonin_invalid_objects{kind}`: objects the watches cannot decode now (read from
    /// [`crate::runtime::invalid`] at each scrape; a kind once seen stays, at 0).
    invalid_objects: Family<KindLabels, Gauge>,
    /// The kinds `invalid_objects` has shown; its lock is held through a whole render.
    invalid_kinds: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// `moonin_fleet_*{cluster,…}`: the inventory's key facts, asked of the controllers at
    /// each scrape (see [`crate::runtime::facts`]).
    pub facts: Facts,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("moonin");
        let reconciliations = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "reconciliations",
            "Reconciles run, per controller",
            reconciliations.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and error category",
            reconcile_errors.clone(),
        );
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new([
                    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ])
            });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile, per controller",
            reconcile_duration.clone(),
        );
        let scaling_edge_delay = Family::<EdgeLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0])
        });
        registry.register(
            "scaling_edge_delay_seconds",
            "From a window edge a ScalingTemplate's status announced to the end of the reconcile that acted on it (its writes and status answered), per edge",
            scaling_edge_delay.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this process holds the leader Lease",
            leader.clone(),
        );
        let api_reachable = Gauge::default();
        registry.register(
            "api_reachable",
            "1 while the API server answers the leader election's requests (every 2 s), 0 once none got an answer for 5 s",
            api_reachable.clone(),
        );
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_writes",
            "Writes (create, patch, delete) sent to the API server, per controller and kind",
            api_writes.clone(),
        );
        let api_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests sent to the API server by the manager's client, per Kubernetes verb",
            api_requests.clone(),
        );
        let invalid_objects = Family::<KindLabels, Gauge>::default();
        registry.register(
            "invalid_objects",
            "Objects the manager's watches cannot decode, per kind: they are skipped (see the InvalidSpec condition and Events)",
            invalid_objects.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        registry.register(
            "build_info",
            "Build information; the value is always 1",
            build,
        );
        let facts = register_facts(&mut registry);
        Self {
            registry: Arc::new(registry),
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            scaling_edge_delay,
            leader,
            api_reachable,
            api_writes,
            api_requests,
            invalid_objects,
            invalid_kinds: Arc::default(),
            facts,
        }
    }

    /// Counts one request sent to the API server.
    pub fn requested(&self, method: &http::Method, path: &str, query: Option<&str>) {
        self.api_requests
            .get_or_create(&RequestLabels {
                verb: verb_of(method, path, query).to_string(),
            })
            .inc();
    }

    /// Counts one write by `controller` to `kind`.
    pub fn wrote(&self, controller: &str, kind: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                controller: controller.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The registry in the Prometheus text format.
    pub fn render(&self) -> String {
        // One render at a time: the fleet series are cleared and filled again at each, so
        // two scrapes at once could add the facts twice, or encode a family just cleared.
        let mut kinds = self.invalid_kinds.lock().unwrap_or_else(|e| e.into_inner());
        self.facts.refresh();
        let counts = crate::runtime::invalid::counts();
        kinds.extend(counts.keys().cloned());
        for kind in kinds.iter() {
            self.invalid_objects
                .get_or_create(&KindLabels { kind: kind.clone() })
                .set(counts.get(kind).copied().unwrap_or(0));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Registers the fleet series (`moonin_fleet_*`, see [`crate::runtime::facts`]).
fn register_facts(registry: &mut Registry) -> Facts {
    let fleet_inventory = FactFamily::default();
    registry.register(
            "fleet_inventory",
            "What discovery inventoried in this cluster, by fact (namespaces, deployments, images, cron_jobs, error_signals)",
            fleet_inventory.clone(),
        );
    let fleet_signals = FactFamily::default();
    registry.register(
        "fleet_workloads_with_signal",
        "Deployments and CronJobs that show each error signal now",
        fleet_signals.clone(),
    );
    let fleet_templates = FactFamily::default();
    registry.register(
        "fleet_scaling_templates",
        "ScalingTemplates and ClusterScalingTemplates, by phase",
        fleet_templates.clone(),
    );
    let fleet_windows = FactFamily::default();
    registry.register(
        "fleet_open_windows",
        "Scaling windows open now",
        fleet_windows.clone(),
    );
    let fleet_pools = FactFamily::default();
    registry.register(
        "fleet_pool_replicas",
        "Each SandboxPool's Pods, by state (desired, ready, idle, claimed)",
        fleet_pools.clone(),
    );
    let fleet_saturated = FactFamily::default();
    registry.register(
        "fleet_pool_saturated",
        "1 while a SandboxPool's scale-up is held back by quota or capacity",
        fleet_saturated.clone(),
    );
    Facts::new([
        (Series::Inventory, fleet_inventory),
        (Series::WorkloadsWithSignal, fleet_signals),
        (Series::ScalingTemplates, fleet_templates),
        (Series::OpenWindows, fleet_windows),
        (Series::PoolReplicas, fleet_pools),
        (Series::PoolSaturated, fleet_saturated),
    ])
}

/// The Kubernetes verb of a request, from its method and path: a `GET` with `watch=true`
/// (or `watch=1`) is a `watch`, a `GET` of a collection a `list`, any other `GET` a `get`.
/// A collection path ends at a resource name (`/api/v1/pods`,
/// `/apis/apps/v1/namespaces/shop/deployments`); an object path has one more segment, and a
/// subresource path two.
pub fn verb_of(method: &http::Method, path: &str, query: Option<&str>) -> &'static str {
    match *method {
        http::Method::GET => {
            let watch =
                query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if watch {
                "watch"
            } else if is_collection(path) {
                "list"
            } else {
                "get"
            }
        }
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether `path` names a collection of a resource (see [`verb_of`]).
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/...` or `/apis/<group>/<version>/...`; anything else (`/version`, `/openapi`)
    // is not a resource.
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    let resource = match rest {
        // A namespaced path; `namespaces/<name>` alone is the Namespace object itself.
        ["namespaces", _ns, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    resource.len() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_from_method_and_path() {
        use http::Method;
        let cases = [
            (Method::GET, "/api/v1/pods", None, "list"),
            (Method::GET, "/api/v1/pods", Some("limit=500"), "list"),
            (
                Method::GET,
                "/api/v1/pods",
                Some("watch=true&resourceVersion=5"),
                "watch",
            ),
            (Method::GET, "/api/v1/namespaces", None, "list"),
            (Method::GET, "/api/v1/namespaces/shop", None, "get"),
            (Method::GET, "/api/v1/namespaces/shop/pods", None, "list"),
            (
                Method::GET,
                "/api/v1/namespaces/shop/pods/web-1",
                None,
                "get",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop/pods/web-1/log",
                None,
                "get",
            ),
            (
                Method::GET,
                "/apis/apps/v1/deployments",
                Some("watch=1"),
                "watch",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/shop/deployments",
                None,
                "list",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/shop/deployments/web",
                None,
                "get",
            ),
            (
                Method::GET,
                "/apis/moonin.io/v1alpha1/clusterdiscoveries/default",
                None,
                "get",
            ),
            (Method::GET, "/version", None, "get"),
            (
                Method::POST,
                "/api/v1/namespaces/shop/events",
                None,
                "create",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/l",
                None,
                "update",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/shop/deployments/web",
                None,
                "patch",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/shop/pods/web-1",
                None,
                "delete",
            ),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(
                verb_of(&method, path, query),
                want,
                "{method} {path} {query:?}"
            );
        }
    }

    #[test]
    fn scrapes_at_once_each_show_every_fact_once() {
        let m = Metrics::new();
        m.facts.add(Box::new(|| {
            vec![super::super::facts::Fact::new(
                Series::OpenWindows,
                vec![],
                3,
            )]
        }));
        let line = |body: &str| {
            body.lines()
                .find(|l| l.starts_with("moonin_fleet_open_windows{"))
                .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
        };
        let renders: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || (0..200).map(|_| line(&m.render())).collect::<Vec<_>>())
            })
            .collect();
        for r in renders {
            for seen in r.join().expect("render") {
                assert_eq!(seen.as_deref(), Some("3"), "a fact added twice or missing");
            }
        }
    }

    #[test]
    fn renders_every_family_with_the_moonin_prefix() {
        let m = Metrics::new();
        m.reconciliations
            .get_or_create(&ControllerLabels {
                controller: "scaling".into(),
            })
            .inc();
        m.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: "scaling".into(),
            })
            .observe(0.02);
        m.scaling_edge_delay
            .get_or_create(&EdgeLabels { edge: "open" })
            .observe(0.3);
        m.leader.set(1);
        m.requested(&http::Method::GET, "/api/v1/pods", Some("watch=true"));
        let text = m.render();
        for needle in [
            "moonin_reconciliations_total{controller=\"scaling\"} 1",
            "moonin_leader 1",
            "moonin_api_requests_total{verb=\"watch\"} 1",
            "moonin_build_info{version=\"",
            "# TYPE moonin_reconcile_duration_seconds histogram",
            "moonin_scaling_edge_delay_seconds_count{edge=\"open\"} 1",
            "moonin_scaling_edge_delay_seconds_bucket{le=\"0.5\",edge=\"open\"} 1",
            "moonin_scaling_edge_delay_seconds_bucket{le=\"0.25\",edge=\"open\"} 0",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
