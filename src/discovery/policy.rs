//! The platform's autoscaling rules (`ClusterDiscovery.spec.autoscalingPolicy`), checked
//! purely against each KEDA ScaledObject: which rules it breaks, as one signal
//! `AutoscalingPolicy: <rule>; <rule>` that the namespace's rebuild puts on the ScaledObject
//! (a Warning Event) and on the entry of the Deployment it scales. A hazard, not a failure:
//! it does not degrade the Deployment's health.
//!
//! The admission-time half of the same rules is `config/policies/` (a
//! ValidatingAdmissionPolicy); what admission cannot see, an HPA beside a ScaledObject, is
//! only here.

use super::view::{HpaView, ScaledObjectView};
use crate::api::discovery::AutoscalingPolicy;

/// The reason of the signal.
pub const AUTOSCALING_POLICY: &str = "AutoscalingPolicy";

/// The rules `so` breaks, in the order of the policy's fields; `hpas` are the namespace's.
pub fn violations(p: &AutoscalingPolicy, so: &ScaledObjectView, hpas: &[HpaView]) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, metric_type) in &so.triggers {
        if !p.allowed_trigger_types.is_empty() && !p.allowed_trigger_types.contains(kind) {
            out.push(format!(
                "trigger {kind} is not allowed (allowed: {})",
                p.allowed_trigger_types.join(", ")
            ));
        }
        if let Some(required) = &p.required_metric_type
            && metric_type.as_ref() != Some(required)
        {
            out.push(format!("trigger {kind} does not set metricType {required}"));
        }
    }
    if let Some(least) = p.min_replica_count_at_least {
        let min = so.min.unwrap_or(0);
        if min < least {
            out.push(format!("minReplicaCount {min} is below {least}"));
        }
    }
    if p.require_max_replica_count && so.max.is_none() {
        out.push("maxReplicaCount is not set".to_string());
    }
    for field in &so.set_fields {
        if p.forbidden_fields.iter().any(|f| f == field) {
            out.push(format!("{field} is set"));
        }
    }
    if p.require_name_matches_target && so.name != so.target.1 {
        out.push(format!(
            "named {}, not after the {} it scales ({})",
            so.name, so.target.0, so.target.1
        ));
    }
    if p.forbid_hpa_beside_scaled_object {
        let beside: Vec<&str> = hpas
            .iter()
            .filter(|h| h.scaled_object.is_none() && h.target == so.target)
            .map(|h| h.name.as_str())
            .collect();
        if !beside.is_empty() {
            out.push(format!(
                "HorizontalPodAutoscaler {} beside it",
                beside.join(", ")
            ));
        }
    }
    out
}

/// The signal of `so` under `policy`, if it breaks any rule.
pub fn signal(
    policy: Option<&AutoscalingPolicy>,
    so: &ScaledObjectView,
    hpas: &[HpaView],
) -> Option<String> {
    let broken = violations(policy?, so, hpas);
    (!broken.is_empty()).then(|| format!("{AUTOSCALING_POLICY}: {}", broken.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The platform of the rules' origin: cpu and memory by utilisation, at least one
    /// replica, bounds written out, none of the tuning fields, named after the Deployment,
    /// no HPA of one's own.
    fn platform() -> AutoscalingPolicy {
        AutoscalingPolicy {
            allowed_trigger_types: vec!["cpu".into(), "memory".into()],
            required_metric_type: Some("Utilization".into()),
            min_replica_count_at_least: Some(1),
            require_max_replica_count: true,
            forbidden_fields: [
                "idleReplicaCount",
                "fallback",
                "advanced",
                "pollingInterval",
                "cooldownPeriod",
            ]
            .map(String::from)
            .to_vec(),
            require_name_matches_target: true,
            forbid_hpa_beside_scaled_object: true,
        }
    }

    fn compliant() -> ScaledObjectView {
        ScaledObjectView {
            namespace: "shop".into(),
            name: "web".into(),
            target: ("Deployment".into(), "web".into()),
            min: Some(1),
            max: Some(10),
            triggers: vec![("cpu".into(), Some("Utilization".into()))],
            set_fields: vec![],
            overridden_min: None,
        }
    }

    fn hpa(name: &str, target: &str, keda: Option<&str>) -> HpaView {
        HpaView {
            namespace: "shop".into(),
            name: name.into(),
            target: ("Deployment".into(), target.into()),
            min: Some(1),
            max: 5,
            scaled_object: keda.map(String::from),
            desired: None,
            overridden_min: None,
        }
    }

    #[test]
    fn a_compliant_scaled_object_and_keda_s_own_hpa_break_nothing() {
        let hpas = [hpa("keda-hpa-web", "web", Some("web"))];
        assert_eq!(
            violations(&platform(), &compliant(), &hpas),
            Vec::<String>::new()
        );
        assert_eq!(signal(Some(&platform()), &compliant(), &hpas), None);
    }

    #[test]
    fn each_rule_broken_is_named_and_one_signal_lists_them() {
        let so = ScaledObjectView {
            name: "web-scaler".into(),
            min: None,
            max: None,
            triggers: vec![
                ("prometheus".into(), None),
                ("memory".into(), Some("AverageValue".into())),
            ],
            set_fields: vec!["cooldownPeriod", "fallback"],
            ..compliant()
        };
        let hpas = [hpa("manual", "web", None), hpa("other", "api", None)];
        assert_eq!(
            violations(&platform(), &so, &hpas),
            [
                "trigger prometheus is not allowed (allowed: cpu, memory)",
                "trigger prometheus does not set metricType Utilization",
                "trigger memory does not set metricType Utilization",
                "minReplicaCount 0 is below 1",
                "maxReplicaCount is not set",
                "cooldownPeriod is set",
                "fallback is set",
                "named web-scaler, not after the Deployment it scales (web)",
                "HorizontalPodAutoscaler manual beside it",
            ]
        );
        let s = signal(Some(&platform()), &so, &hpas).expect("a signal");
        assert!(
            s.starts_with("AutoscalingPolicy: trigger prometheus is not allowed"),
            "{s}"
        );
        assert_eq!(crate::discovery::signals::reason_of(&s), AUTOSCALING_POLICY);
        assert!(!crate::discovery::signals::is_failure(&s));
    }

    #[test]
    fn no_policy_or_an_empty_one_checks_nothing() {
        let so = ScaledObjectView {
            min: Some(0),
            triggers: vec![("prometheus".into(), None)],
            set_fields: vec!["advanced"],
            ..compliant()
        };
        assert_eq!(signal(None, &so, &[]), None);
        assert_eq!(signal(Some(&AutoscalingPolicy::default()), &so, &[]), None);
    }
}
