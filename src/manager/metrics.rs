//! Prometheus metrics of the manager and its controllers, in the text exposition format.

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use std::sync::Arc;

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
    /// `moonin_leader`: 1 while this process holds the leader Lease.
    pub leader: Gauge,
    /// `moonin_api_writes_total{controller,kind}`: every create, patch and delete sent.
    pub api_writes: Family<WriteLabels, Counter>,
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
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this process holds the leader Lease",
            leader.clone(),
        );
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_writes",
            "Writes (create, patch, delete) sent to the API server, per controller and kind",
            api_writes.clone(),
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
        Self {
            registry: Arc::new(registry),
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            leader,
            api_writes,
        }
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
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        m.leader.set(1);
        let text = m.render();
        for needle in [
            "moonin_reconciliations_total{controller=\"scaling\"} 1",
            "moonin_leader 1",
            "moonin_build_info{version=\"",
            "# TYPE moonin_reconcile_duration_seconds histogram",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
