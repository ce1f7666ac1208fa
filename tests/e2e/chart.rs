//! The Helm chart on the local control plane, with Helm built from its Go module
//! (`e2e/helm`): `helm install`, `helm upgrade` switching each controller off in turn, and
//! `helm uninstall`. After each, the manager runs from the chart's settings — the installed
//! Deployment's flags, a token of the chart's ServiceAccount and nothing else — and must
//! become Ready: kwok only pretends to run the Deployment's Pods, so the test runs the
//! `moonin` binary as that Pod would. A controller switched off leaves the ServiceAccount
//! without any of its permissions.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use k8s_openapi::api::{apps::v1::Deployment, rbac::v1::ClusterRole};
use kube::{Api, Client, api::ListParams};
use serde_json::Value;

use crate::{
    common,
    harness::{self, Manager, TestNamespace, install_crds, random_suffix, wait_for},
    require_cluster, samples,
};

/// Helm against the test cluster, with a scratch home for this release.
fn helm(home: &Path, args: &[&str]) -> String {
    let out = Command::new(common::root().join("e2e/helm"))
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(common::root())
        .output()
        .expect("e2e/helm runs");
    assert!(
        out.status.success(),
        "helm {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A kubeconfig for the current cluster that authenticates with a token of the ServiceAccount
/// `sa`, as the in-cluster configuration of the chart's Pod would.
fn service_account_kubeconfig(ns: &str, sa: &str) -> PathBuf {
    let token = kubectl(&["create", "token", sa, "-n", ns, "--duration", "1h"]);
    let server = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let ca = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": sa, "namespace": ns}}],
        "current-context": "sa",
    });
    let path =
        std::env::temp_dir().join(format!("moonin-e2e-chart-kubeconfig-{}", random_suffix()));
    std::fs::write(&path, crate::common::to_yaml(&config)).expect("kubeconfig");
    path
}

/// The manager as the chart's Deployment runs it: its ServiceAccount's token, its flags (the
/// listen address and log format aside, which the test harness sets), the Lease in the
/// release namespace (a Pod reads it from its service account). Returns the manager, Ready
/// and leading, and the Deployment's `--controllers`.
async fn run_from_the_chart(client: &Client, ns: &str, release: &str) -> (Manager, String) {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(release)
        .await
        .expect("the chart's Deployment");
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec");
    let sa = pod
        .service_account_name
        .clone()
        .expect("serviceAccountName");
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"));
    let mut kept: Vec<String> = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--http-addr" || a == "--log-format" {
            it.next();
        } else {
            kept.push(a.clone());
        }
    }
    let controllers = kept
        .windows(2)
        .find(|w| w[0] == "--controllers")
        .map(|w| w[1].clone())
        .expect("--controllers");
    kept.extend(["--namespace".to_string(), ns.to_string()]);
    let kubeconfig = service_account_kubeconfig(ns, &sa);
    let args: Vec<&str> = kept.iter().map(String::as_str).collect();
    let manager = Manager::start(&kubeconfig, &format!("chart-{}", random_suffix()), &args).await;
    wait_for(
        "the manager to be ready",
        Duration::from_secs(60),
        || async {
            let (code, body) = manager.get("/readyz")?;
            (code == 200).then_some(body)
        },
    )
    .await;
    wait_for("the manager to lead", Duration::from_secs(60), || async {
        manager
            .get("/metrics")?
            .1
            .contains("moonin_leader 1")
            .then_some(())
    })
    .await;
    (manager, controllers)
}

/// `kubectl auth can-i` as the chart's ServiceAccount.
fn can(ns: &str, sa: &str, verb: &str, resource: &str) -> bool {
    let out = Command::new("kubectl")
        .args(["auth", "can-i", verb, resource, "-n", ns])
        .arg(format!("--as=system:serviceaccount:{ns}:{sa}"))
        .output()
        .expect("kubectl runs");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// The release's ClusterRoles, by name.
async fn cluster_roles(client: &Client, release: &str) -> Vec<String> {
    let mut names: Vec<String> = Api::<ClusterRole>::all(client.clone())
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}")))
        .await
        .expect("list ClusterRoles")
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    names.sort();
    names
}

/// One permission each controller has and no other: gone when the controller is off.
fn only_permission_of(controller: &str) -> (&'static str, &'static str) {
    match controller {
        "discovery" => ("list", "nodes"),
        "scaling" => ("patch", "deployments.apps"),
        "sandbox" => ("create", "pods"),
        other => panic!("no controller {other}"),
    }
}

#[tokio::test]
async fn helm_install_upgrade_and_uninstall_with_the_manager_running_from_the_chart() {
    let client = require_cluster!();
    // The manager reconciles every namespace: no other may run meanwhile.
    let _serial = harness::serial().await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "chart").await;
    let release = format!("moonin-{}", random_suffix());
    let home = std::env::temp_dir().join(format!("moonin-e2e-helm-{release}"));
    let chart = common::root().join("charts/moonin").display().to_string();
    // The release's cluster-scoped objects go with the test, whatever happens.
    struct Uninstall<'a>(&'a Path, String, String);
    impl Drop for Uninstall<'_> {
        fn drop(&mut self) {
            let _ = Command::new(common::root().join("e2e/helm"))
                .args(["uninstall", &self.1, "-n", &self.2, "--ignore-not-found"])
                .env("HELM_CACHE_HOME", self.0.join("cache"))
                .env("HELM_CONFIG_HOME", self.0.join("config"))
                .env("HELM_DATA_HOME", self.0.join("data"))
                .output();
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let _uninstall = Uninstall(&home, release.clone(), ns.name.clone());

    // Install: every controller, and the samples they look after reconciled by the manager
    // running from the chart's settings.
    helm(
        &home,
        &[
            "install",
            &release,
            &chart,
            "-n",
            &ns.name,
            "--set",
            "replicas=1",
        ],
    );
    let status: Value = serde_json::from_str(&helm(
        &home,
        &["status", &release, "-n", &ns.name, "-o", "json"],
    ))
    .expect("helm status json");
    assert_eq!(status["info"]["status"], "deployed", "{status}");
    assert_eq!(status["version"], 1);
    let roles = cluster_roles(&client, &release).await;
    let want: Vec<String> = ["discovery", "manager", "sandbox", "scaling"]
        .iter()
        .map(|r| format!("{release}-{r}"))
        .collect();
    assert_eq!(roles, want);
    let (mut manager, controllers) = run_from_the_chart(&client, &ns.name, &release).await;
    assert_eq!(controllers, "discovery,scaling,sandbox");
    // The namespaced samples of each controller (the cluster-scoped ones belong to the
    // samples test).
    let objects: Vec<Value> = samples::objects_in(&common::root().join("samples"), &ns.name)
        .into_iter()
        .filter(|o| o["metadata"]["namespace"].is_string())
        .collect();
    samples::apply(&ns, &objects, "chart-samples");
    samples::wait_ready(&client, &objects, Duration::from_secs(120)).await;
    assert!(manager.terminate(Duration::from_secs(20)).await);
    let sa = release.clone();

    // Upgrade, each controller off in turn: its ClusterRole and binding go, its permissions
    // with them, and the manager runs the others and is Ready (no permission it needs is
    // missing).
    for (revision, off) in ["discovery", "scaling", "sandbox"].into_iter().enumerate() {
        helm(
            &home,
            &[
                "upgrade",
                &release,
                &chart,
                "-n",
                &ns.name,
                "--reuse-values",
                "--set",
                "controllers.discovery.enabled=true,controllers.scaling.enabled=true,controllers.sandbox.enabled=true",
                "--set",
                &format!("controllers.{off}.enabled=false"),
            ],
        );
        let status: Value = serde_json::from_str(&helm(
            &home,
            &["status", &release, "-n", &ns.name, "-o", "json"],
        ))
        .expect("helm status json");
        assert_eq!(status["version"], revision + 2);
        let roles = cluster_roles(&client, &release).await;
        assert!(
            !roles.contains(&format!("{release}-{off}")),
            "{off} off: {roles:?}"
        );
        assert_eq!(roles.len(), 3, "{off} off: {roles:?}");
        let (verb, resource) = only_permission_of(off);
        assert!(
            !can(&ns.name, &sa, verb, resource),
            "{off} off: the ServiceAccount may still {verb} {resource}"
        );
        for on in ["discovery", "scaling", "sandbox"]
            .iter()
            .filter(|c| **c != off)
        {
            let (verb, resource) = only_permission_of(on);
            assert!(
                can(&ns.name, &sa, verb, resource),
                "{on} on: {verb} {resource}"
            );
        }
        let (mut manager, controllers) = run_from_the_chart(&client, &ns.name, &release).await;
        assert!(!controllers.split(',').any(|c| c == off), "{controllers}");
        assert!(
            !manager.log_text().contains("missing permission"),
            "{}",
            manager.log_text()
        );
        assert!(manager.terminate(Duration::from_secs(20)).await);
    }

    // Uninstall: the release's objects go, cluster-scoped ones included; the CRDs stay
    // (Helm never deletes what it installed from crds/), and so do the Moonin objects.
    helm(&home, &["uninstall", &release, "-n", &ns.name, "--wait"]);
    assert_eq!(cluster_roles(&client, &release).await, Vec::<String>::new());
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &ns.name)
            .get_opt(&release)
            .await
            .expect("get")
            .is_none()
    );
    assert!(!can(&ns.name, &sa, "list", "nodes"));
    let crds = kubectl(&["get", "crd", "-o", "name"]);
    for crd in moonin::api::all_crds() {
        assert!(
            crds.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{}",
                kube::ResourceExt::name_any(&crd)
            )),
            "{crds}"
        );
    }
}
