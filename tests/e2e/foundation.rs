//! The foundation: CRDs install, samples apply, admission rejects bad objects with the CEL
//! message, status writes work, and leader election fails over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    common,
    harness::{self, Manager, TestNamespace, apply_moonin, install_crds, moonin_api, wait_for},
    require_cluster,
};

#[tokio::test]
async fn every_crd_is_established_and_every_sample_applies() {
    let client = require_cluster!();
    let crds = install_crds(&client).await;
    assert_eq!(crds.len(), moonin::api::all_crds().len());
    let ns = TestNamespace::new(&client, "samples").await;
    // Every Moonin object of samples/ and docs/examples (the workloads the samples target are
    // applied by `every_sample_becomes_ready`).
    for (file, mut obj) in common::moonin_objects() {
        let cluster_scoped = matches!(
            obj["kind"].as_str(),
            Some("ClusterScalingTemplate") | Some("ClusterDiscovery")
        );
        if cluster_scoped {
            // Unique names keep concurrent runs apart; the sample's content is unchanged.
            let name = format!(
                "{}-{}",
                obj["metadata"]["name"].as_str().unwrap_or(""),
                ns.name
            );
            obj["metadata"]["name"] = name.into();
        }
        let stored = apply_moonin(&client, &ns.name, &obj)
            .await
            .unwrap_or_else(|e| panic!("{} does not apply: {e}", file.display()));
        assert!(stored.data["spec"].is_object(), "{}", file.display());
        if cluster_scoped {
            let kind = obj["kind"].as_str().unwrap_or_default();
            moonin_api(&client, kind, &ns.name)
                .delete(
                    stored.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await
                .expect("delete cluster-scoped sample");
        }
    }
}

#[tokio::test]
async fn invalid_objects_are_rejected_with_the_cel_message() {
    let client = require_cluster!();
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "admission").await;
    for case in common::admission_cases() {
        let mut obj = case.object();
        if obj["metadata"]["namespace"].is_null() {
            obj["metadata"]["namespace"] = ns.name.clone().into();
        }
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let dynamic = serde_json::from_value(obj.clone()).expect("object");
        let result = moonin_api(&client, &kind, &ns.name)
            .create(&PostParams::default(), &dynamic)
            .await;
        match result {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{kind}: {status:?}");
                assert!(
                    status.message.contains(&case.message),
                    "{} {:?}: expected {:?} in {:?}",
                    case.sample,
                    case.patch,
                    case.message,
                    status.message
                );
            }
            other => panic!(
                "{} {:?} was not rejected: {other:?}",
                case.sample, case.patch
            ),
        }
    }
}

#[tokio::test]
async fn a_claim_spec_is_immutable_on_the_server() {
    let client = require_cluster!();
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "immutable").await;
    let obj = common::load(&common::root().join("samples/sandboxclaim.yaml"));
    apply_moonin(&client, &ns.name, &obj)
        .await
        .expect("claim applies");
    let mut changed = obj.clone();
    changed["spec"]["lifetime"] = "2h".into();
    let err = apply_moonin(&client, &ns.name, &changed)
        .await
        .expect_err("spec change refused");
    assert!(
        err.to_string().contains("a claim's spec is immutable"),
        "{err}"
    );
}

#[tokio::test]
async fn status_is_written_through_the_subresource_by_the_manager_field_manager() {
    let client = require_cluster!();
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "status").await;
    let obj = common::load(&common::root().join("samples/sandboxpool.yaml"));
    apply_moonin(&client, &ns.name, &obj)
        .await
        .expect("pool applies");
    let api = moonin_api(&client, "SandboxPool", &ns.name);
    let status = json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "status": {
            "observedGeneration": 1,
            "replicas": 2, "readyReplicas": 2, "idleReplicas": 2, "claimedReplicas": 0,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Reconciled", "message": "",
                "lastTransitionTime": "2026-11-30T00:00:00Z"
            }]
        }
    });
    let params = PatchParams::apply(moonin::api::field_manager::MANAGER).force();
    let stored = api
        .patch_status("scratch", &params, &Patch::Apply(&status))
        .await
        .expect("status write");
    assert_eq!(stored.data["status"]["idleReplicas"], 2);
    assert_eq!(
        stored.data["spec"]["replicas"], 2,
        "a status write leaves the spec alone"
    );
    let managers: Vec<(String, String)> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.subresource.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&(
            moonin::api::field_manager::MANAGER.to_string(),
            "status".to_string()
        )),
        "{managers:?}"
    );
    // The status subresource ignores spec changes.
    let sneaky =
        json!({"apiVersion": "moonin.io/v1alpha1", "kind": "SandboxPool", "spec": {"replicas": 9}});
    let _ = api
        .patch_status("scratch", &PatchParams::default(), &Patch::Merge(&sneaky))
        .await;
    let now = api.get("scratch").await.expect("get");
    assert_eq!(now.data["spec"]["replicas"], 2);
}

fn lease_holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn one_leader_and_failover_after_sigkill() {
    let client = require_cluster!();
    let _serial = harness::serial().await;
    let mut ns = TestNamespace::new(&client, "leader").await;
    let user = ns.grant_manager_rbac();
    let kubeconfig = harness::impersonating_kubeconfig(&user);
    let args = ["--namespace", ns.name.as_str()];
    let a = Manager::start(&kubeconfig, &format!("a-{}", ns.name), &args).await;
    let b = Manager::start(&kubeconfig, &format!("b-{}", ns.name), &args).await;
    let mut managers = [a, b];

    for m in &managers {
        wait_for(
            &format!("{} /readyz", m.identity),
            Duration::from_secs(30),
            || async { (m.get("/readyz")?.0 == 200).then_some(()) },
        )
        .await;
        assert_eq!(m.get("/healthz").map(|r| r.0), Some(200));
    }

    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let holder = wait_for("a Lease holder", Duration::from_secs(30), || async {
        lease_holder(&leases.get_opt("moonin-manager").await.ok()??)
    })
    .await;
    let (leader, follower) = if holder == managers[0].identity {
        (0, 1)
    } else {
        (1, 0)
    };
    assert_eq!(
        managers[leader].identity, holder,
        "the holder is one of the two managers"
    );

    for (i, expected) in [(leader, "moonin_leader 1"), (follower, "moonin_leader 0")] {
        let m = &managers[i];
        wait_for(
            &format!("{} to report {expected}", m.identity),
            Duration::from_secs(10),
            || async {
                let (code, body) = m.get("/metrics")?;
                (code == 200 && body.contains(expected)).then_some(())
            },
        )
        .await;
    }
    let (_, metrics) = managers[follower].get("/metrics").expect("metrics");
    assert!(metrics.contains("moonin_build_info{version="), "{metrics}");
    // A healthy process says the API server answers from its first attempt on, not only
    // once an outage has ended.
    for m in &managers {
        let (_, metrics) = m.get("/metrics").expect("metrics");
        assert!(
            metrics.contains("moonin_api_reachable 1"),
            "{}: {metrics}",
            m.identity
        );
    }

    let killed_at = Instant::now();
    managers[leader].kill();
    let deadline = Duration::from_secs(moonin::manager::leader::LEASE_DURATION_SECONDS + 5);
    let new_holder = wait_for("the follower to take over", deadline, || async {
        let h = lease_holder(&leases.get_opt("moonin-manager").await.ok()??)?;
        (h == managers[follower].identity).then_some(h)
    })
    .await;
    eprintln!(
        "takeover by {new_holder} {:.1}s after SIGKILL (lease duration {}s)",
        killed_at.elapsed().as_secs_f64(),
        moonin::manager::leader::LEASE_DURATION_SECONDS
    );

    // A graceful stop releases the Lease at once.
    assert!(
        managers[follower].terminate(Duration::from_secs(10)).await,
        "clean exit on SIGTERM"
    );
    let released = leases.get("moonin-manager").await.expect("lease");
    assert_eq!(
        lease_holder(&released),
        None,
        "the Lease is released on SIGTERM"
    );
}

#[tokio::test]
async fn config_default_installs_with_kubectl_apply_k() {
    let client = require_cluster!();
    let out = std::process::Command::new("kubectl")
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "moonin-e2e-install",
            "-k",
        ])
        .arg(common::root().join("config/default"))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl apply -k config/default: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "moonin-system");
    let d = deployments
        .get("moonin")
        .await
        .expect("the manager Deployment");
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("pod spec");
    let c = &pod.containers[0];
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    let psc = pod.security_context.expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.map(|p| p.type_),
        Some("RuntimeDefault".to_string())
    );
    assert!(c.liveness_probe.is_some() && c.readiness_probe.is_some());
    assert!(
        c.resources
            .as_ref()
            .is_some_and(|r| r.requests.is_some() && r.limits.is_some())
    );
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "moonin-system");
    assert!(pdbs.get_opt("moonin").await.expect("get").is_some());
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "moonin-system");
    assert!(
        services
            .get_opt("moonin-metrics")
            .await
            .expect("get")
            .is_some()
    );
    // The manager objects go again (their image is not on the local plane); the namespace,
    // the RBAC and the CRDs stay, as `e2e/run` installs them too.
    let _ = deployments.delete("moonin", &Default::default()).await;
    let _ = pdbs.delete("moonin", &Default::default()).await;
    let _ = services.delete("moonin-metrics", &Default::default()).await;
}
