//! Flux's view of Moonin objects: the kstatus library (`e2e/kstatus`, built from its Go
//! module) reads `Current` once an object is reconciled, `InProgress` while the controller has
//! not caught up with its spec, and `Failed` for an object that needs a fix.

use std::{process::Command, time::Duration};

use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use moonin::api::sandbox::{SandboxClaim, SandboxEnv, SandboxPool};
use serde_json::json;

use crate::{common, harness::wait_for, require_cluster, scaling::Rig};

/// `(status, message)` that kstatus computes for one object, read with kubectl.
fn kstatus(resource: &str, ns: &str, name: &str) -> (String, String) {
    let get = Command::new("kubectl")
        .args(["get", resource, name, "-n", ns, "-o", "json"])
        .output()
        .expect("kubectl runs");
    // Not there yet (an Env's Pools appear once the manager has reconciled it): no status.
    if !get.status.success() {
        return (
            "NotFound".into(),
            String::from_utf8_lossy(&get.stderr).trim().to_string(),
        );
    }
    let mut child = Command::new(common::root().join("e2e/kstatus"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("e2e/kstatus runs");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&get.stdout)
            .expect("write");
    }
    let out = child.wait_with_output().expect("e2e/kstatus");
    assert!(out.status.success(), "e2e/kstatus failed");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = line.splitn(3, ' ');
    let _object = parts.next();
    (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    )
}

async fn kstatus_is(resource: &str, ns: &str, name: &str, want: &str) -> String {
    wait_for(
        &format!("kstatus {resource}/{name} {want}"),
        Duration::from_secs(40),
        || async {
            let (status, message) = kstatus(resource, ns, name);
            (status == want).then_some(message)
        },
    )
    .await
}

#[tokio::test]
async fn flux_kstatus_reads_current_in_progress_and_failed() {
    let client = require_cluster!();
    let mut rig = Rig::new(client.clone(), "kstatus").await;
    let ns = rig.ns().to_string();

    // The samples, reconciled, are Current: the Env and its Pools, a bound claim, a
    // ScalingTemplate whose target exists.
    let env: SandboxEnv = serde_json::from_value(common::load(
        &common::root().join("samples/sandboxenv.yaml"),
    ))
    .expect("env sample");
    Api::<SandboxEnv>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &env)
        .await
        .expect("env");
    for pool in ["python-small", "python-large"] {
        kstatus_is("sandboxpools.moonin.io", &ns, pool, "Current").await;
    }
    kstatus_is("sandboxenvs.moonin.io", &ns, "python", "Current").await;
    let claim: SandboxClaim = serde_json::from_value(common::load(
        &common::root().join("samples/sandboxclaim.yaml"),
    ))
    .expect("claim sample");
    Api::<SandboxClaim>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
    kstatus_is("sandboxclaims.moonin.io", &ns, "notebook-alice", "Current").await;
    rig.deployment("checkout", 2).await;
    let tpl: moonin::api::scaling::ScalingTemplate = serde_json::from_value(common::load(
        &common::root().join("samples/scalingtemplate.yaml"),
    ))
    .expect("template sample");
    rig.templates()
        .create(&PostParams::default(), &tpl)
        .await
        .expect("template");
    kstatus_is(
        "scalingtemplates.moonin.io",
        &ns,
        "business-hours",
        "Current",
    )
    .await;

    // InProgress: a spec change the controller has not seen yet (the manager is down).
    rig.kill();
    let pools: Api<SandboxPool> = Api::namespaced(client.clone(), &ns);
    let p = pools.get("python-small").await.expect("pool");
    pools
        .patch(
            "python-small",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})),
        )
        .await
        .expect("spec change");
    let after = pools.get("python-small").await.expect("pool");
    assert!(after.metadata.generation > p.metadata.generation);
    let (status, message) = kstatus("sandboxpools.moonin.io", &ns, "python-small");
    assert_eq!(status, "InProgress", "{message}");
    rig.start().await;
    kstatus_is("sandboxpools.moonin.io", &ns, "python-small", "Current").await;

    // Failed: a template the API server refuses.
    let bad: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "bad"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "Not_A_DNS_Label", "image": "registry.example/x:1"}]}}}
    }))
    .expect("pool");
    pools
        .create(&PostParams::default(), &bad)
        .await
        .expect("bad pool");
    let message = kstatus_is("sandboxpools.moonin.io", &ns, "bad", "Failed").await;
    assert!(message.contains("Not_A_DNS_Label"), "{message}");
}
