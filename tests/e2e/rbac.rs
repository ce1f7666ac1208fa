//! RBAC proven, not assumed: each controller, run with `config/rbac` minus its own role,
//! fails clearly (a log line and `/readyz`, hence the Pod's `Ready` condition, naming the
//! missing permission) and recovers once allowed, on a quiet kind too, and the manager
//! without discovery needs none of discovery's permissions.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{self, Manager, TestNamespace, wait_for};
use crate::require_cluster;

/// The lines of a JSON log whose message starts with `missing permission`.
fn missing_permission_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("missing permission"))
        })
        .collect()
}

#[tokio::test]
async fn each_controller_names_the_permission_its_missing_role_held() {
    let client = require_cluster!();
    let _serial = harness::serial().await;
    harness::install_crds(&client).await;
    // The controller, its role file, and a resource that role alone grants.
    for (controller, role, resource) in [
        ("discovery", "discovery_role.yaml", "nodes"),
        ("scaling", "scaling_role.yaml", "scalingtemplates"),
        ("sandbox", "sandbox_role.yaml", "sandboxpools"),
    ] {
        let mut ns = TestNamespace::new(&client, &format!("rbac-{controller}")).await;
        let user = ns.grant_rbac_except("config/rbac", &[role]);
        let kubeconfig = harness::impersonating_kubeconfig(&user);
        let manager = Manager::start(
            &kubeconfig,
            &format!("rbac-{}", ns.name),
            &["--namespace", &ns.name, "--controllers", controller],
        )
        .await;
        // The watches are refused one after another: wait for this one.
        let names = |l: &str| l.contains(&format!("cannot list resource \"{resource}\""));
        let body = wait_for(
            &format!("{controller}: /readyz naming `list {resource}`"),
            Duration::from_secs(30),
            || async {
                let (code, body) = manager.get("/readyz")?;
                (code == 503
                    && body.starts_with("missing permission:")
                    && body
                        .lines()
                        .any(|l| l.starts_with(&format!("{controller}: ")) && names(l)))
                .then_some(body)
            },
        )
        .await;
        assert_eq!(manager.get("/readyz").map(|(c, _)| c), Some(503), "{body}");
        let line = wait_for(
            &format!("{controller}: a log line naming `list {resource}`"),
            Duration::from_secs(10),
            || async {
                missing_permission_lines(&manager.log_text())
                    .into_iter()
                    .find(|v| {
                        v["fields"]["controller"] == controller
                            && v["fields"]["permission"].as_str().is_some_and(names)
                    })
            },
        )
        .await;
        // Logged once: each retry of the refused list is refused again, never "granted" in
        // between (a retry starts with the watcher's `Init`, which proves nothing).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let log = manager.log_text();
        assert!(!log.contains("permission granted again"), "{log}");
        let lines = missing_permission_lines(&log);
        let same: Vec<&Value> = lines
            .iter()
            .filter(|v| {
                v["fields"]["controller"] == controller
                    && v["fields"]["permission"].as_str().is_some_and(names)
            })
            .collect();
        assert_eq!(same.len(), 1, "{same:#?}");
        assert_eq!(line["level"], "ERROR", "{line}");
        // Nothing else is blamed: every missing permission is one of this controller's.
        assert!(
            lines
                .iter()
                .all(|v| v["fields"]["controller"] == controller),
            "{lines:#?}"
        );
        drop(manager);
    }
}

#[tokio::test]
async fn without_discovery_nothing_needs_its_permissions() {
    let client = require_cluster!();
    let _serial = harness::serial().await;
    harness::install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "rbac-nodisc").await;
    let user = ns.grant_rbac_except("config/rbac", &["discovery_role.yaml"]);
    let kubeconfig = harness::impersonating_kubeconfig(&user);
    let manager = Manager::start(
        &kubeconfig,
        &format!("rbac-{}", ns.name),
        &["--namespace", &ns.name, "--controllers", "scaling,sandbox"],
    )
    .await;
    wait_for(
        "the manager without discovery to be ready",
        Duration::from_secs(30),
        || async { (manager.get("/readyz")? == (200, "ok".to_string())).then_some(()) },
    )
    .await;
    // Ready, and stays so: no watch was refused meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(manager.get("/readyz"), Some((200, "ok".to_string())));
    let log = manager.log_text();
    // RBAC refusals read `… is forbidden: User "…" cannot <verb> resource …` (other 403s,
    // such as a namespace another test is deleting, are not about permissions).
    assert!(
        missing_permission_lines(&log).is_empty() && !log.contains("is forbidden: User"),
        "{log}"
    );
}

/// A ClusterRole named `name` with `rules` (YAML), bound to `user`'s ServiceAccount in `ns`.
fn grant(ns: &mut TestNamespace, name: &str, rules: &str) {
    let name = format!("{}-{name}", ns.name);
    let yaml = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\nrules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {name}\nsubjects:\n  - kind: ServiceAccount\n    name: moonin\n    namespace: {}\n",
        ns.name
    );
    let file = std::env::temp_dir().join(format!("moonin-e2e-{name}.yaml"));
    std::fs::write(&file, yaml).expect("write role");
    harness::kubectl_apply(&file, None);
    ns.cluster_objects.push(format!("clusterrole/{name}"));
    ns.cluster_objects
        .push(format!("clusterrolebinding/{name}"));
}

#[tokio::test]
async fn a_watch_refused_after_its_list_recovers_once_allowed_on_a_quiet_kind() {
    let client = require_cluster!();
    let _serial = harness::serial().await;
    harness::install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "rbac-watch").await;
    // The scaling role, but its templates may be listed and not watched: the cache syncs,
    // then each start of the watch is refused.
    let user = ns.grant_rbac_except("config/rbac", &["scaling_role.yaml"]);
    let role = std::fs::read_to_string(crate::common::root().join("config/rbac/scaling_role.yaml"))
        .expect("scaling role");
    let rules = crate::common::yaml_documents(&role).expect("role yaml")[0]["rules"].clone();
    let mut rules = rules.as_array().expect("rules").clone();
    for r in &mut rules {
        if r["resources"][0] == "scalingtemplates" {
            let verbs = r["verbs"].as_array_mut().expect("verbs");
            verbs.retain(|v| v != "watch");
        }
    }
    let listing = crate::common::to_yaml(&Value::Array(rules));
    grant(&mut ns, "scaling-no-watch", &listing);
    let kubeconfig = harness::impersonating_kubeconfig(&user);
    let manager = Manager::start(
        &kubeconfig,
        &format!("rbac-{}", ns.name),
        &["--namespace", &ns.name, "--controllers", "scaling"],
    )
    .await;
    let refused = |l: &str| l.contains("cannot watch resource \"scalingtemplates\"");
    let body = wait_for(
        "/readyz naming `watch scalingtemplates`",
        Duration::from_secs(30),
        || async {
            let (code, body) = manager.get("/readyz")?;
            (code == 503 && body.lines().any(refused)).then_some(body)
        },
    )
    .await;
    assert!(
        !body.contains("cannot list"),
        "only the watch is refused: {body}"
    );

    // Allowed again. No template is created: the watch, once it starts again, has nothing
    // to deliver, so no event can clear the refusal. It is over 70 s after the last one,
    // which came before the retry that got through.
    let allowed = Instant::now();
    grant(
        &mut ns,
        "scaling-watch",
        "  - apiGroups: [\"moonin.io\"]\n    resources: [\"scalingtemplates\", \"clusterscalingtemplates\"]\n    verbs: [\"watch\"]\n",
    );
    wait_for(
        "/readyz 200 without any template event",
        Duration::from_secs(150),
        || async { (manager.get("/readyz")? == (200, "ok".to_string())).then_some(()) },
    )
    .await;
    let took = allowed.elapsed();
    let log = manager.log_text();
    assert!(log.contains("permission granted again"), "{log}");
    assert_eq!(
        missing_permission_lines(&log)
            .iter()
            .filter(|v| v["fields"]["permission"].as_str().is_some_and(refused))
            .count(),
        1,
        "the refusal logged once, however often the watch was retried: {log}"
    );
    eprintln!(
        "ready {:.0} s after the watch was allowed",
        took.as_secs_f64()
    );
}
