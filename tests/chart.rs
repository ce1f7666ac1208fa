//! The Helm chart (`charts/moonin`), rendered by Helm built from its Go module (`e2e/helm`),
//! with no cluster: its CRDs are the generated ones, `helm lint` passes, its RBAC is the RBAC
//! of `config/` rule for rule, a controller switched off gets no permission and is not run,
//! the Deployment carries `config/manager`'s hardening, and bad values fail with a message.
//! `tests/e2e/chart.rs` installs, upgrades and uninstalls it on the local control plane.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::Command,
};

use serde_json::{Value, json};

const CONTROLLERS: [&str; 3] = ["discovery", "scaling", "sandbox"];

/// Helm with a scratch home (no repositories, plugins or logins of the user's), so runs
/// never share state.
fn helm(args: &[&str]) -> std::process::Output {
    let home = std::env::temp_dir().join(format!("moonin-chart-helm-{}", std::process::id()));
    Command::new(common::root().join("e2e/helm"))
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .current_dir(common::root())
        .output()
        .expect("e2e/helm runs")
}

fn chart() -> String {
    common::root().join("charts/moonin").display().to_string()
}

/// `helm template moonin charts/moonin -n moonin-system` with `--set` values: the objects.
fn render(sets: &[&str]) -> Result<Vec<Value>, String> {
    let chart = chart();
    let mut args = vec!["template", "moonin", &chart, "--namespace", "moonin-system"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = helm(&args);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(docs(&String::from_utf8_lossy(&out.stdout)))
}

fn render_ok(sets: &[&str]) -> Vec<Value> {
    render(sets).unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"))
}

fn docs(text: &str) -> Vec<Value> {
    common::yaml_documents(text)
        .unwrap_or_else(|e| panic!("helm renders YAML: {e}"))
        .into_iter()
        .filter(|v| v.is_object())
        .collect()
}

/// Every object of the YAML files of `config/<dir>` (kustomization files left out).
fn config_objects(dir: &str) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(common::root().join("config").join(dir))
        .expect("config dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| docs(&std::fs::read_to_string(f).expect("config file")))
        .collect()
}

/// A rule as a comparable value: API groups, resources and verbs each as a sorted set.
type Rule = (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>);

fn rules(role: &Value) -> BTreeSet<Rule> {
    let set = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (set(&r["apiGroups"]), set(&r["resources"]), set(&r["verbs"])))
        .collect()
}

/// Roles and ClusterRoles by name: their rules.
fn roles(objects: &[Value]) -> BTreeMap<String, BTreeSet<Rule>> {
    objects
        .iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole") | Some("Role")))
        .map(|o| (name(o), rules(o)))
        .collect()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn find<'a>(objects: &'a [Value], kind: &str, name_: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && name(o) == name_)
        .unwrap_or_else(|| panic!("no {kind} {name_} rendered"))
}

/// The value after `flag` in the manager container's args.
fn arg(deployment: &Value, flag: &str) -> Option<String> {
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    args.windows(2)
        .find(|w| w[0] == flag)
        .and_then(|w| w[1].as_str().map(str::to_string))
}

/// A readable summary of the rendered RBAC: one line per role and rule.
fn summary(roles: &BTreeMap<String, BTreeSet<Rule>>) -> String {
    let mut out = String::new();
    for (role, rules) in roles {
        for (groups, resources, verbs) in rules {
            let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
            out.push_str(&format!(
                "{role}: [{}] {} {}\n",
                join(groups),
                join(resources),
                join(verbs)
            ));
        }
    }
    out
}

#[test]
fn the_chart_crds_are_the_generated_ones() {
    let dir = |d: &str| -> BTreeMap<String, String> {
        std::fs::read_dir(common::root().join(d))
            .expect("crd dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".moonin.io.yaml"))
            .map(|p| {
                (
                    p.file_name().unwrap_or_default().to_string_lossy().into(),
                    std::fs::read_to_string(&p).expect("crd file"),
                )
            })
            .collect()
    };
    let generated = dir("crds");
    let chart = dir("charts/moonin/crds");
    assert_eq!(generated.len(), moonin::api::all_crds().len());
    let differ: Vec<&String> = generated
        .keys()
        .chain(chart.keys())
        .filter(|k| generated.get(*k) != chart.get(*k))
        .collect();
    assert!(
        differ.is_empty(),
        "charts/moonin/crds differs from crds/ in {differ:?}: run `e2e/chart sync-crds`"
    );
}

#[test]
fn the_chart_version_is_the_crate_version() {
    let text = std::fs::read_to_string(common::root().join("charts/moonin/Chart.yaml"))
        .expect("Chart.yaml");
    let chart: Value = common::from_yaml(&text).expect("Chart.yaml parses");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn helm_lint_passes_with_every_controller_on_and_each_off() {
    let chart = chart();
    let mut cases = vec![vec!["controllers.discovery.helmReleases=true".to_string()]];
    for c in CONTROLLERS {
        cases.push(vec![format!("controllers.{c}.enabled=false")]);
    }
    cases.push(vec![
        "metrics.serviceMonitor.enabled=true".into(),
        "replicas=1".into(),
    ]);
    for sets in cases {
        let mut args = vec!["lint", "--strict", chart.as_str()];
        for s in &sets {
            args.extend(["--set", s.as_str()]);
        }
        let out = helm(&args);
        assert!(
            out.status.success(),
            "helm lint {sets:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_rendered_rbac_is_the_rbac_of_config() {
    // `moonin` in `moonin-system`: the names and namespace config/ uses.
    let rendered = render_ok(&["controllers.discovery.helmReleases=true"]);
    let mut config = config_objects("rbac");
    config.extend(config_objects("rbac-helm"));
    let chart_roles = roles(&rendered);
    let config_roles = roles(&config);
    eprintln!("rendered RBAC:\n{}", summary(&chart_roles));
    assert_eq!(
        chart_roles.keys().collect::<Vec<_>>(),
        config_roles.keys().collect::<Vec<_>>(),
        "the same roles"
    );
    for (role, want) in &config_roles {
        assert_eq!(&chart_roles[role], want, "the rules of {role}");
    }

    // Each role is bound to the chart's ServiceAccount, as config/ binds its roles: the
    // leader-election role in the release namespace only.
    let sa = find(&rendered, "ServiceAccount", "moonin");
    assert_eq!(sa["metadata"]["namespace"], "moonin-system");
    for role in config_roles.keys() {
        let binding = rendered
            .iter()
            .find(|o| {
                matches!(
                    o["kind"].as_str(),
                    Some("ClusterRoleBinding") | Some("RoleBinding")
                ) && o["roleRef"]["name"] == role.as_str()
            })
            .unwrap_or_else(|| panic!("no binding of {role}"));
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "moonin", "namespace": "moonin-system"}]),
            "{role}"
        );
        let config_binding = config
            .iter()
            .find(|o| o["roleRef"]["name"] == role.as_str())
            .unwrap_or_else(|| panic!("config/ binds {role}"));
        assert_eq!(
            binding["kind"], config_binding["kind"],
            "{role} is bound the same way"
        );
        if binding["kind"] == "RoleBinding" {
            assert_eq!(binding["metadata"]["namespace"], "moonin-system");
        }
    }
    // The Helm-release role is opt-in: off by default.
    let default = roles(&render_ok(&[]));
    assert!(!default.contains_key("moonin-discovery-helm"));
    assert!(!default.contains_key("moonin-discovery-helm-key"));
    assert!(default.contains_key("moonin-discovery"));
}

#[test]
fn a_controller_switched_off_gets_no_rbac_and_is_not_run() {
    let all = roles(&render_ok(&["controllers.discovery.helmReleases=true"]));
    for off in CONTROLLERS {
        let rendered = render_ok(&[
            &format!("controllers.{off}.enabled=false"),
            "controllers.discovery.helmReleases=true",
        ]);
        let got = roles(&rendered);
        let on: Vec<&str> = CONTROLLERS.iter().copied().filter(|c| *c != off).collect();
        // Exactly the roles of the controllers left on, plus the two every manager needs.
        let mut want: BTreeSet<String> = ["moonin-manager", "moonin-leader-election"]
            .map(String::from)
            .into();
        for c in &on {
            want.insert(format!("moonin-{c}"));
        }
        if off != "discovery" {
            want.insert("moonin-discovery-helm".into());
            want.insert("moonin-discovery-helm-key".into());
        }
        assert_eq!(
            got.keys().cloned().collect::<BTreeSet<_>>(),
            want,
            "{off} off:\n{}",
            summary(&got)
        );
        for (role, rules) in &got {
            assert_eq!(&all[role], rules, "{off} off: {role} unchanged");
        }
        // No binding is left pointing at a role that is not rendered.
        for b in rendered
            .iter()
            .filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
        {
            let r = b["roleRef"]["name"].as_str().unwrap_or_default();
            assert!(got.contains_key(r), "{off} off: binding of {r}");
        }
        let deployment = find(&rendered, "Deployment", "moonin");
        assert_eq!(
            arg(deployment, "--controllers").as_deref(),
            Some(on.join(",").as_str()),
            "{off} off"
        );
    }
}

#[test]
fn the_deployment_is_hardened_as_config_manager() {
    let rendered = render_ok(&[]);
    let chart = &find(&rendered, "Deployment", "moonin")["spec"]["template"]["spec"];
    let config = config_objects("manager");
    let config = &find(&config, "Deployment", "moonin")["spec"]["template"]["spec"];
    assert_eq!(chart["securityContext"], config["securityContext"]);
    let (c, k) = (&chart["containers"][0], &config["containers"][0]);
    for field in [
        "securityContext",
        "livenessProbe",
        "readinessProbe",
        "ports",
        "resources",
    ] {
        assert_eq!(c[field], k[field], "container {field}");
    }
    assert_eq!(c["image"], "ghcr.io/moonin/moonin:0.1.0");
    // config/manager's env (the Pod's name and namespace) is there, as is its log format.
    for e in k["env"].as_array().expect("env") {
        assert!(
            c["env"].as_array().expect("env").contains(e),
            "{e} in {}",
            c["env"]
        );
    }
    let deployment = find(&rendered, "Deployment", "moonin");
    assert_eq!(arg(deployment, "--log-format").as_deref(), Some("json"));
    assert_eq!(
        arg(deployment, "--http-addr").as_deref(),
        Some("0.0.0.0:8080")
    );
    assert_eq!(
        arg(deployment, "--controllers").as_deref(),
        Some("discovery,scaling,sandbox")
    );
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pdb = find(&rendered, "PodDisruptionBudget", "moonin");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let service = find(&rendered, "Service", "moonin-metrics");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert!(
        !rendered.iter().any(|o| o["kind"] == "ServiceMonitor"),
        "the ServiceMonitor is opt-in"
    );
}

#[test]
fn values_change_what_they_say() {
    let rendered = render_ok(&[
        "replicas=1",
        "clusterName=prod-eu-1",
        "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "metrics.port=9090",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
        "logFormat=pretty",
        "extraArgs={--cluster-name,override}",
        "podLabels.team=platform",
        "podLabels.app\\.kubernetes\\.io/name=other",
    ]);
    let deployment = find(&rendered, "Deployment", "moonin");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        arg(deployment, "--cluster-name").as_deref(),
        Some("prod-eu-1")
    );
    assert_eq!(
        arg(deployment, "--http-addr").as_deref(),
        Some("0.0.0.0:9090")
    );
    assert_eq!(arg(deployment, "--log-format").as_deref(), Some("pretty"));
    // Appended after the chart's own: `moonin run` takes a flag's last value.
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args");
    assert_eq!(
        args[args.len() - 2..],
        [json!("--cluster-name"), json!("override")]
    );
    // A Pod label never replaces the selector's.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["team"], "platform");
    assert_eq!(
        labels["app.kubernetes.io/name"],
        deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "ghcr.io/moonin/moonin@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(container["ports"][0]["containerPort"], 9090);
    // One replica: no budget (it would block every node drain).
    assert!(!rendered.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    let monitor = find(&rendered, "ServiceMonitor", "moonin");
    let service = find(&rendered, "Service", "moonin-metrics");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&service["metadata"]["labels"][k], v, "{k}");
    }
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(service["spec"]["ports"][0]["port"], 9090);
}

#[test]
fn bad_values_fail_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        // Helm names the value by its JSON pointer and says what is wrong with it.
        (&["replicas=0"], "at '/replicas': minimum: got 0, want 1"),
        (
            &["logFormat=xml"],
            "at '/logFormat': value must be one of 'json', 'pretty'",
        ),
        (
            &["replica=2"],
            "additional properties 'replica' not allowed",
        ),
        (
            &["clusterName=Prod_EU"],
            "at '/clusterName': 'Prod_EU' does not match pattern",
        ),
        (
            &["image.digest=latest"],
            "at '/image/digest': 'latest' does not match pattern",
        ),
        (
            &["controllers.scaling=true"],
            "at '/controllers/scaling': got boolean, want object",
        ),
        (&["metrics.port=70000"], "at '/metrics/port': maximum"),
        (
            &[
                "controllers.discovery.enabled=false",
                "controllers.scaling.enabled=false",
                "controllers.sandbox.enabled=false",
            ],
            "enable at least one of discovery, scaling, sandbox",
        ),
        (
            &[
                "metrics.serviceMonitor.enabled=true",
                "metrics.service.enabled=false",
            ],
            "needs metrics.service.enabled",
        ),
        (
            &["extraArgs={--identity,fixed}"],
            "extraArgs: --identity is the chart's to set",
        ),
        (
            &["extraArgs={--namespace=other}"],
            "extraArgs: --namespace=other is the chart's to set",
        ),
        (
            &["extraArgs={--controllers,sandbox}"],
            "extraArgs: --controllers is the chart's to set",
        ),
        (
            &["serviceAccount.create=false"],
            "serviceAccount.name: name the existing ServiceAccount",
        ),
    ];
    for (sets, message) in cases {
        match render(sets) {
            Ok(_) => panic!("{sets:?} rendered"),
            Err(e) => assert!(e.contains(message), "{sets:?}: {message:?} not in {e}"),
        }
    }
}

/// Value paths of `values.yaml`: nested maps are descended into, except those that are
/// Kubernetes fields or free-form maps handed on as they are.
fn value_paths(prefix: &str, v: &Value, out: &mut Vec<String>) {
    const WHOLE: &[&str] = &[
        "resources",
        "podAnnotations",
        "podLabels",
        "nodeSelector",
        "affinity",
        "serviceAccount.annotations",
        "metrics.service.annotations",
        "metrics.serviceMonitor.labels",
    ];
    match v.as_object() {
        Some(map) if !WHOLE.contains(&prefix) && !map.is_empty() => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                value_paths(&path, child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_value_is_in_the_schema_and_the_docs_table() {
    let root = common::root().join("charts/moonin");
    let values: Value =
        common::from_yaml(&std::fs::read_to_string(root.join("values.yaml")).expect("values.yaml"))
            .expect("values.yaml parses");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("values.schema.json")).expect("schema"),
    )
    .expect("values.schema.json parses");
    let mut paths = Vec::new();
    value_paths("", &values, &mut paths);
    assert!(paths.len() > 30, "{paths:?}");
    let doc = std::fs::read_to_string(common::root().join("docs/helm.md")).expect("docs/helm.md");
    let mut missing = Vec::new();
    for path in &paths {
        if !doc.contains(&format!("| `{path}` |")) {
            missing.push(format!("{path}: not in docs/helm.md's values table"));
        }
        let mut node = &schema;
        for key in path.split('.') {
            node = &node["properties"][key];
        }
        if node.is_null() {
            missing.push(format!("{path}: not in values.schema.json"));
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}
