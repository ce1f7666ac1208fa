//! Each kind's health in Argo CD's terms, as data: the checks in the order they are made;
//! the first that matches decides. [`super::argocd`] turns them into Lua.
//!
//! Every kind first waits for its status to describe the current `metadata.generation`,
//! is Degraded while `Stalled=True` or while `Ready=False` for a reason that needs a person,
//! and is Healthy once `Ready=True`; the kinds differ in their reasons, in the conditions
//! only they have, and in what they say while they work.

use crate::api::{
    conditions::{reasons as common, types},
    sandbox::reasons as sandbox,
    scaling::reasons as scaling,
};

/// A health status of Argo CD's that a check returns (`Missing` and `Unknown` are Argo CD's
/// own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Doing what its spec asks.
    Healthy,
    /// Working towards its spec; no person is needed yet.
    Progressing,
    /// Needs a person: a change of the spec, of the cluster or of the namespace.
    Degraded,
    /// Switched off by its spec.
    Suspended,
}

impl Health {
    /// The name Argo CD gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Progressing => "Progressing",
            Health::Degraded => "Degraded",
            Health::Suspended => "Suspended",
        }
    }
}

/// Whose text a check returns as its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// The tested condition's own message (its reason when it has none).
    Own,
    /// The tested condition's own text when its reason is this one, else `Ready`'s.
    OwnWhenReason(&'static str),
}

/// One check. Conditions are read from `status.conditions` by type; a condition's text is
/// its message, or its reason when the message is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Progressing while there is no status, or while it describes an older generation
    /// (`status.observedGeneration`, else the `Ready` condition's `observedGeneration`,
    /// behind `metadata.generation`). The message says which.
    Unobserved,
    /// Progressing with `message` while the status holds neither `<field>` nor any condition:
    /// the kind gets a status only once something happened to it (an object that cannot be
    /// decoded gets conditions only, and the checks after this one read them).
    AwaitStatusField {
        /// The field of `status`.
        field: &'static str,
        /// What the object waits for.
        message: &'static str,
    },
    /// `health` while condition `type_` has status `status` (and, when `spec` names a path,
    /// only while that field of the spec is `true`).
    Condition {
        /// The condition type.
        type_: &'static str,
        /// `True` or `False`.
        status: bool,
        /// A path in `spec` that must be `true` as well; empty for none.
        spec: &'static [&'static str],
        /// The health it means.
        health: Health,
        /// The message.
        text: Text,
    },
    /// Progressing while there is no `Ready` condition.
    ReadyMissing,
    /// Degraded while `Ready=False` for one of these reasons: a person must act. Any other
    /// reason is taken as work in progress.
    ReadyFalseFor(&'static [&'static str]),
    /// `health`, with `Ready`'s text, while this field of the spec is `true`.
    SpecTrue {
        /// The path in `spec`.
        path: &'static [&'static str],
        /// The health it means.
        health: Health,
    },
    /// Progressing, with `Ready`'s text, while `Ready` is not `True`.
    ReadyNotTrue,
    /// `health` while `status.phase` is `phase` (and, with `ready`, `Ready=True`); the message
    /// is `Ready`'s text, or `fallback` without a `Ready` condition.
    Phase {
        /// The phase.
        phase: &'static str,
        /// Whether `Ready=True` is needed as well.
        ready: bool,
        /// The health it means.
        health: Health,
        /// The message without a `Ready` condition.
        fallback: &'static str,
    },
    /// The last check: `health` with `Ready`'s text (`fallback` without a `Ready` condition;
    /// `{phase}` in it stands for `status.phase`), followed by `; ` and the text of condition
    /// `append` while that one is `True`.
    Otherwise {
        /// The health it means.
        health: Health,
        /// The message without a `Ready` condition; empty when `Ready` is known to exist.
        fallback: &'static str,
        /// A condition whose text is added while it is `True`; empty for none.
        append: &'static str,
    },
}

/// A check and why it is there (shown in the script's header; empty when the check says
/// it all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The check.
    pub step: Step,
    /// Why it means what it means.
    pub why: &'static str,
}

const fn rule(step: Step, why: &'static str) -> Rule {
    Rule { step, why }
}

/// One kind's health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindHealth {
    /// The kind, as in its CRD.
    pub kind: &'static str,
    /// What the check reads and why, for the script's header (one paragraph).
    pub about: &'static str,
    /// The checks, in order; the last is [`Step::Otherwise`].
    pub rules: &'static [Rule],
}

/// `Stalled=True` → Degraded, with its message.
const STALLED: Rule = rule(
    Step::Condition {
        type_: types::STALLED,
        status: true,
        spec: &[],
        health: Health::Degraded,
        text: Text::Own,
    },
    "",
);

/// The status describes an older generation, or there is none.
const UNOBSERVED: Rule = rule(Step::Unobserved, "");

/// No `Ready` condition yet.
const READY_MISSING: Rule = rule(Step::ReadyMissing, "");

/// `Ready` False or Unknown for a reason that is not in the kind's list.
const READY_NOT_TRUE: Rule = rule(Step::ReadyNotTrue, "");

/// Anything else, after [`READY_NOT_TRUE`]: `Ready=True`, Healthy.
const READY_TRUE: Rule = rule(
    Step::Otherwise {
        health: Health::Healthy,
        fallback: "",
        append: "",
    },
    "Ready=True",
);

/// The checks of the two template kinds, which share one status type.
const TEMPLATE_RULES: &[Rule] = &[
    UNOBSERVED,
    rule(
        STALLED.step,
        "phase Invalid: InvalidSchedule, UnknownTimeZone, InvalidDuration, CrossNamespaceTarget",
    ),
    READY_MISSING,
    rule(
        Step::ReadyFalseFor(&[
            common::INVALID_SPEC,
            scaling::INVALID_SCHEDULE,
            scaling::UNKNOWN_TIME_ZONE,
            scaling::INVALID_DURATION,
            scaling::CROSS_NAMESPACE_TARGET,
            scaling::TARGET_NOT_FOUND,
            scaling::CONFLICT,
            scaling::BLOCKED,
            scaling::REAPPLY_LIMIT,
            scaling::APPLY_FAILED,
        ]),
        "the template or its targets need a change",
    ),
    rule(
        Step::SpecTrue {
            path: &["suspend"],
            health: Health::Suspended,
        },
        "once observed",
    ),
    READY_NOT_TRUE,
    rule(
        Step::Condition {
            type_: types::RECONCILING,
            status: true,
            spec: &[],
            health: Health::Progressing,
            text: Text::Own,
        },
        "WaitingForRestore: a target still carries another template's override",
    ),
    rule(
        Step::Otherwise {
            health: Health::Healthy,
            fallback: "",
            append: "",
        },
        "Ready=True: phase Active, Idle or Expired",
    ),
];

/// The checks of a kind with no conditions of its own: Ready and Stalled only.
const READY_ONLY_RULES: &[Rule] = &[
    UNOBSERVED,
    STALLED,
    READY_MISSING,
    rule(Step::ReadyFalseFor(&[common::INVALID_SPEC]), ""),
    READY_NOT_TRUE,
    READY_TRUE,
];

/// `Truncated`: discovery's condition for an inventory split into parts.
const TRUNCATED: &str = "Truncated";

const SCALING_TEMPLATE: KindHealth = KindHealth {
    kind: "ScalingTemplate",
    about: "Reads what the scaling controller writes (src/scaling/decide/).",
    rules: TEMPLATE_RULES,
};

const CLUSTER_SCALING_TEMPLATE: KindHealth = KindHealth {
    kind: "ClusterScalingTemplate",
    about: "Reads what the scaling controller writes (src/scaling/decide/); the same rules \
            as ScalingTemplate's: both kinds share one status type.",
    rules: TEMPLATE_RULES,
};

const SANDBOX_ENV: KindHealth = KindHealth {
    kind: "SandboxEnv",
    about: "The Env controller (src/sandbox/controller.rs) writes Ready=True/PoolsReconciled \
            once the Pools of this cluster's members match the spec; each Pool has its own \
            health (it is a child of the Env in Argo CD's tree).",
    rules: READY_ONLY_RULES,
};

const SANDBOX_POOL: KindHealth = KindHealth {
    kind: "SandboxPool",
    about: "Reads what the sandbox controller and its autoscaler write \
            (src/sandbox/controller.rs, src/sandbox/autoscaler/). ScalingLimited=True is a \
            configured bound, not a problem: the Pool stays Healthy.",
    rules: &[
        UNOBSERVED,
        STALLED,
        READY_MISSING,
        rule(
            Step::ReadyFalseFor(&[common::INVALID_SPEC, sandbox::POD_CREATE_FAILED]),
            "the API server refuses Pods built from spec.template",
        ),
        rule(
            Step::Condition {
                type_: "Saturated",
                status: true,
                spec: &[],
                health: Health::Degraded,
                text: Text::Own,
            },
            "PartialScaleUp, ScaleUpRejected: the namespace's quota refused the Pods a \
             scale-up needs",
        ),
        rule(Step::ReadyNotTrue, "PodsStarting"),
        rule(
            Step::Condition {
                type_: "Progressing",
                status: true,
                spec: &[],
                health: Health::Progressing,
                text: Text::OwnWhenReason("PodsStarting"),
            },
            "Pods starting, or more Pods than spec.replicas while a scale-down finishes: then \
             Ready's counts tell the story",
        ),
        rule(
            Step::Otherwise {
                health: Health::Healthy,
                fallback: "",
                append: "",
            },
            "Ready=True: PoolReady",
        ),
    ],
};

const SANDBOX_CLAIM: KindHealth = KindHealth {
    kind: "SandboxClaim",
    about: "Reads what the sandbox controller writes (src/sandbox/controller.rs). A Pending \
            claim whose pool exists gets no status until it binds: it is simply queued.",
    rules: &[
        rule(
            Step::AwaitStatusField {
                field: "phase",
                message: "waiting for a sandbox Pod",
            },
            "queued",
        ),
        UNOBSERVED,
        rule(
            Step::Phase {
                phase: "Failed",
                ready: false,
                health: Health::Degraded,
                fallback: "the claim failed",
            },
            "PodLost: the bound Pod was deleted",
        ),
        STALLED,
        rule(
            Step::ReadyFalseFor(&[
                common::INVALID_SPEC,
                sandbox::POOL_NOT_FOUND,
                sandbox::ENV_NOT_FOUND,
            ]),
            "nothing to claim from",
        ),
        rule(
            Step::Phase {
                phase: "Bound",
                ready: true,
                health: Health::Healthy,
                fallback: "",
            },
            "",
        ),
        rule(
            Step::Phase {
                phase: "Released",
                ready: false,
                health: Health::Healthy,
                fallback: "released",
            },
            "the lifetime ended; the claim did its job",
        ),
        rule(
            Step::Otherwise {
                health: Health::Progressing,
                fallback: "phase {phase}: waiting for a sandbox Pod",
                append: "",
            },
            "Pending, or a phase from a newer Moonin",
        ),
    ],
};

const CLUSTER_DISCOVERY: KindHealth = KindHealth {
    kind: "ClusterDiscovery",
    about: "Reads what the discovery controller writes (src/discovery/controller.rs): \
            conditions Ready, ApiReachable, InventoryComplete, HelmAccess, SecretAccess and \
            Truncated.",
    rules: &[
        UNOBSERVED,
        STALLED,
        rule(
            Step::Condition {
                type_: "ApiReachable",
                status: false,
                spec: &[],
                health: Health::Degraded,
                text: Text::Own,
            },
            "discovery cannot read the cluster",
        ),
        rule(
            Step::Condition {
                type_: "HelmAccess",
                status: false,
                spec: &["helm", "enabled"],
                health: Health::Degraded,
                text: Text::Own,
            },
            "the opt-in Helm role is missing",
        ),
        rule(
            Step::Condition {
                type_: "SecretAccess",
                status: false,
                spec: &["secretChanges", "enabled"],
                health: Health::Degraded,
                text: Text::Own,
            },
            "the opt-in Secrets role is missing",
        ),
        READY_MISSING,
        rule(Step::ReadyFalseFor(&[common::INVALID_SPEC]), ""),
        READY_NOT_TRUE,
        rule(
            Step::Condition {
                type_: "InventoryComplete",
                status: false,
                spec: &[],
                health: Health::Progressing,
                text: Text::Own,
            },
            "the first full pass is still running",
        ),
        rule(
            Step::Otherwise {
                health: Health::Healthy,
                fallback: "",
                append: TRUNCATED,
            },
            "Ready=True; Truncated=True is reported in the message: the status was bounded, \
             nothing was dropped silently",
        ),
    ],
};

const NAMESPACE_INVENTORY: KindHealth = KindHealth {
    kind: "NamespaceInventory",
    about: "Reads what the discovery controller writes (src/discovery/controller.rs): \
            conditions Ready and Truncated. The error signals it lists belong to the \
            workloads, which have their own health; they do not make the inventory unhealthy.",
    rules: &[
        UNOBSERVED,
        STALLED,
        READY_MISSING,
        rule(Step::ReadyFalseFor(&[common::INVALID_SPEC]), ""),
        READY_NOT_TRUE,
        rule(
            Step::Otherwise {
                health: Health::Healthy,
                fallback: "",
                append: TRUNCATED,
            },
            "Ready=True; Truncated=True, a split inventory, is reported in the message",
        ),
    ],
};

/// `NotRecorded`: discovery's reason for a WorkloadRevision it did not write.
const NOT_RECORDED: &str = "NotRecorded";

const WORKLOAD_REVISION: KindHealth = KindHealth {
    kind: "WorkloadRevision",
    about: "Reads what the discovery controller writes (src/discovery/): Ready once the \
            record is complete. A revision records a change; whether the change was good is \
            the workload's own health. One that discovery did not write (NotRecorded) stays \
            so until a person removes it.",
    rules: &[
        UNOBSERVED,
        STALLED,
        READY_MISSING,
        rule(
            Step::ReadyFalseFor(&[common::INVALID_SPEC, NOT_RECORDED]),
            "not a record of discovery's",
        ),
        READY_NOT_TRUE,
        READY_TRUE,
    ],
};

/// Every kind's health check, in the order of [`crate::api::all_crds`].
pub fn kinds() -> [KindHealth; 8] {
    [
        SCALING_TEMPLATE,
        CLUSTER_SCALING_TEMPLATE,
        SANDBOX_ENV,
        SANDBOX_POOL,
        SANDBOX_CLAIM,
        CLUSTER_DISCOVERY,
        NAMESPACE_INVENTORY,
        WORKLOAD_REVISION,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_health_check_in_crd_order() {
        let crds: Vec<String> = crate::api::all_crds()
            .into_iter()
            .map(|c| c.spec.names.kind)
            .collect();
        let checked: Vec<&str> = kinds().iter().map(|k| k.kind).collect();
        assert_eq!(checked, crds);
    }

    /// The generated Lua reads `status.*` only once [`Step::Unobserved`] returned for a
    /// status that is not a table, reads Ready's fields only after asking whether it exists,
    /// and always returns something.
    #[test]
    fn every_check_starts_with_the_generation_and_ends_with_a_default() {
        for k in kinds() {
            let steps: Vec<Step> = k.rules.iter().map(|r| r.step).collect();
            let first = steps
                .iter()
                .position(|s| !matches!(s, Step::AwaitStatusField { .. }));
            assert_eq!(
                first.map(|i| steps[i]),
                Some(Step::Unobserved),
                "{}: the first check after waiting for a field is the generation",
                k.kind
            );
            assert!(
                matches!(steps.last(), Some(Step::Otherwise { .. })),
                "{}: the last check is Otherwise",
                k.kind
            );
            let otherwise = steps
                .iter()
                .filter(|s| matches!(s, Step::Otherwise { .. }))
                .count();
            assert_eq!(otherwise, 1, "{}: one Otherwise", k.kind);
            // Without ReadyMissing before it, a check that quotes Ready needs a fallback.
            let ready_known = steps.iter().position(|s| *s == Step::ReadyMissing);
            for (i, s) in steps.iter().enumerate() {
                let quotes_ready_without_fallback = matches!(
                    s,
                    Step::Otherwise { fallback: "", .. }
                        | Step::Phase {
                            fallback: "",
                            ready: false,
                            ..
                        }
                        | Step::Condition {
                            text: Text::OwnWhenReason(_),
                            ..
                        }
                );
                if quotes_ready_without_fallback {
                    assert!(
                        ready_known.is_some_and(|r| r < i),
                        "{}: check {i} quotes Ready before asking whether it exists",
                        k.kind
                    );
                }
            }
        }
    }

    /// Condition types and reasons written here as literals (those only one controller
    /// writes and keeps in its own module) are names the reference documents, and
    /// `tests/docs.rs` keeps the reference in step with the code.
    #[test]
    fn every_condition_and_reason_named_is_documented() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let reference =
            std::fs::read_to_string(root.join("docs/reference.md")).expect("docs/reference.md");
        let mut names = Vec::new();
        for k in kinds() {
            for r in k.rules {
                match r.step {
                    Step::Condition { type_, text, .. } => {
                        names.push(type_);
                        if let Text::OwnWhenReason(reason) = text {
                            names.push(reason);
                        }
                    }
                    Step::ReadyFalseFor(reasons) => names.extend(reasons),
                    Step::Otherwise { append, .. } if !append.is_empty() => names.push(append),
                    _ => {}
                }
            }
        }
        let missing: Vec<&str> = names
            .into_iter()
            .filter(|n| !reference.contains(&format!("`{n}`")))
            .collect();
        assert!(missing.is_empty(), "not in docs/reference.md: {missing:?}");
    }
}
