//! Helpers for end-to-end tests: the cluster, per-test namespaces, applying objects,
//! waiting with deadlines, and running the real `moonin` binary.

use std::{
    hash::BuildHasher,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
};
use serde_json::Value;

/// Field manager of objects the tests apply.
pub const TEST_MANAGER: &str = "moonin-e2e";

/// A random lowercase hex suffix.
pub fn random_suffix() -> String {
    let n = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    format!("{:06x}", n & 0xff_ffff)
}

/// A client for the cluster, or `None` (after saying why) when none is reachable.
pub async fn cluster() -> Option<Client> {
    let required = std::env::var("MOONIN_E2E").is_ok_and(|v| v == "required");
    let reachable = async {
        let client = Client::try_default().await.ok()?;
        tokio::time::timeout(Duration::from_secs(5), client.apiserver_version())
            .await
            .ok()?
            .ok()?;
        Some(client)
    }
    .await;
    if reachable.is_none() {
        assert!(
            !required,
            "MOONIN_E2E=required but no cluster is reachable (run e2e/cluster up)"
        );
        eprintln!(
            "skipping: no Kubernetes control plane reachable; run `e2e/cluster up` and `eval \"$(e2e/cluster env)\"`"
        );
    }
    reachable
}

/// Gets a cluster client or returns from the test after printing why it is skipped.
#[macro_export]
macro_rules! require_cluster {
    () => {
        match $crate::harness::cluster().await {
            Some(client) => client,
            None => return,
        }
    };
}

/// Tests that run a manager hold this: a manager reconciles every namespace, so two at
/// once would fight over the same objects.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Polls `probe` every 100 ms until it returns `Ok`, or panics after `timeout` with what
/// the last `Err` said it saw.
pub async fn wait_showing<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; last seen: {seen}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Who last wrote the object, and when (from `managedFields`): for a failure
/// message about who changed what.
pub fn writes(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|m| {
            format!(
                "{}{} {}",
                m.manager.as_deref().unwrap_or("?"),
                m.subresource
                    .as_deref()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                m.time
                    .as_ref()
                    .map(|t| t.0.strftime("%H:%M:%S").to_string())
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `api` no longer has `name`, or panics after `timeout`.
pub async fn wait_gone<K>(api: &kube::Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{name} to be gone");
    wait_for(&what, timeout, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A template whose only window is a manual run.
pub fn manual_template(name: &str, start: &str, duration: &str, actions: Value) -> Value {
    serde_json::json!({
        "apiVersion": "moonin.io/v1alpha1",
        "kind": "ScalingTemplate",
        "metadata": {"name": name},
        "spec": {
            // 1 January at 00:00: never during a test.
            "schedule": "0 0 1 1 *",
            "duration": duration,
            "manualRun": {"startTime": start},
            "actions": actions
        }
    })
}

/// A namespace for one test, deleted when dropped. If the test failed, the namespace's
/// objects and Events are printed first.
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    /// Cluster-scoped objects the test created (`kind/name`), deleted with the namespace.
    pub cluster_objects: Vec<String>,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<random>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!("e2e-{prefix}-{}", random_suffix());
        let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"moonin.io/e2e": "true"}}
        }))
        .expect("namespace");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        Self {
            name,
            cluster_objects: Vec::new(),
        }
    }

    /// Grants the ServiceAccount `moonin` of this namespace the manager's RBAC from
    /// `config/rbac` (its ClusterRoles, bound here and cluster-wide as the kustomization
    /// does for `moonin-system`) and returns the user name to impersonate.
    pub fn grant_manager_rbac(&mut self) -> String {
        self.grant_rbac("config/rbac")
    }

    /// Like [`TestNamespace::grant_manager_rbac`], for another directory of RBAC files
    /// (for example the opt-in `config/rbac-helm`).
    pub fn grant_rbac(&mut self, dir: &str) -> String {
        self.grant_rbac_except(dir, &[])
    }

    /// Like [`TestNamespace::grant_rbac`], leaving out the files named in `skip` (for
    /// example `discovery_role.yaml`: a controller's role removed).
    pub fn grant_rbac_except(&mut self, dir: &str, skip: &[&str]) -> String {
        let dir = crate::common::root().join(dir);
        let mut docs = String::new();
        for entry in std::fs::read_dir(&dir).expect("config/rbac") {
            let path = entry.expect("entry").path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "kustomization.yaml" || skip.contains(&n))
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("rbac file");
            for mut v in crate::common::yaml_documents(&text).expect("rbac yaml") {
                match v["kind"].as_str() {
                    Some("ClusterRole") => {}
                    Some("ServiceAccount") | Some("RoleBinding") => {
                        v["metadata"]["namespace"] = self.name.clone().into();
                    }
                    Some("ClusterRoleBinding") => {
                        let name = format!(
                            "{}-{}",
                            self.name,
                            v["metadata"]["name"].as_str().unwrap_or("")
                        );
                        self.cluster_objects
                            .push(format!("clusterrolebinding/{name}"));
                        v["metadata"]["name"] = name.into();
                    }
                    _ => continue,
                }
                if let Some(subjects) = v.get_mut("subjects").and_then(|s| s.as_array_mut()) {
                    for s in subjects {
                        s["namespace"] = self.name.clone().into();
                    }
                }
                docs.push_str("---\n");
                docs.push_str(&crate::common::to_yaml(&v));
            }
        }
        let file = std::env::temp_dir().join(format!(
            "moonin-e2e-rbac-{}-{}.yaml",
            self.name,
            dir.file_name().and_then(|n| n.to_str()).unwrap_or("rbac")
        ));
        std::fs::write(&file, docs).expect("write rbac");
        kubectl_apply(&file, None);
        format!("system:serviceaccount:{}:moonin", self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for what in ["all,leases", "moonin", "events"] {
                if let Ok(out) = Command::new("kubectl")
                    .args(["get", what, "-o", "wide", "-n", &self.name])
                    .output()
                {
                    eprintln!(
                        "--- kubectl get {what} -n {}\n{}{}",
                        self.name,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
        for obj in &self.cluster_objects {
            let _ = Command::new("kubectl")
                .args(["delete", obj, "--wait=false", "--ignore-not-found"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Installs every Moonin CRD (server-side apply) and waits until each is Established.
pub async fn install_crds(client: &Client) -> Vec<CustomResourceDefinition> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply(TEST_MANAGER).force();
    let mut installed = Vec::new();
    for crd in moonin::api::all_crds() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        let established = wait_for(
            &format!("CRD {name} Established"),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let crd = api.get(&name).await.ok()?;
                    let conds = crd.status.as_ref()?.conditions.clone().unwrap_or_default();
                    conds
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(crd)
                }
            },
        )
        .await;
        installed.push(established);
    }
    installed
}

/// The dynamic API of a Moonin kind, in `namespace` when the kind is namespaced.
pub fn moonin_api(client: &Client, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let crd = moonin::api::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("unknown Moonin kind {kind}"));
    let gvk = GroupVersionKind::gvk(moonin::api::GROUP, moonin::api::VERSION, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    if crd.spec.scope == "Namespaced" {
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

/// The dynamic API of KEDA's ScaledObjects in `namespace`.
pub fn scaled_objects(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "scaledobjects");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A Deployment `name` of `replicas` Pods that kwok runs (they tolerate its Nodes' taint),
/// each asking for a little CPU and memory.
pub fn kwok_deployment(name: &str, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    }))
    .expect("a Deployment")
}

/// Applies a Moonin object given as JSON (server-side apply) and returns what was stored.
pub async fn apply_moonin(
    client: &Client,
    namespace: &str,
    obj: &Value,
) -> Result<DynamicObject, kube::Error> {
    let kind = obj["kind"].as_str().expect("object has a kind");
    let name = obj["metadata"]["name"].as_str().expect("object has a name");
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).expect("object");
    moonin_api(client, kind, namespace)
        .patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&dynamic),
        )
        .await
}

/// Applies every object of a multi-document YAML file with `kubectl apply --server-side`,
/// taking the fields over (a plane kept from an older checkout holds other values of the
/// cluster-wide roles, written by `kubectl apply -k config/default`).
pub fn kubectl_apply(path: &Path, namespace: Option<&str>) {
    let mut cmd = Command::new("kubectl");
    cmd.args([
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        TEST_MANAGER,
        "-f",
    ])
    .arg(path);
    if let Some(ns) = namespace {
        cmd.args(["-n", ns]);
    }
    let out = cmd.output().expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl apply -f {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `moonin run` process, killed when dropped; its log is printed if the test failed.
pub struct Manager {
    child: Child,
    /// Its log file (JSON lines).
    pub log: PathBuf,
    /// Its /healthz /readyz /metrics address.
    pub addr: SocketAddr,
    /// Its leader-election identity.
    pub identity: String,
}

/// Writes a copy of the current kubeconfig that impersonates `user`: the manager then runs
/// with exactly the RBAC granted to that user.
pub fn impersonating_kubeconfig(user: &str) -> PathBuf {
    let source = std::env::var("KUBECONFIG").expect("KUBECONFIG is set by e2e/cluster env");
    let source = source.split(':').next().unwrap_or_default().to_string();
    let mut config: Value =
        crate::common::from_yaml(&std::fs::read_to_string(&source).expect("kubeconfig readable"))
            .expect("kubeconfig parses");
    if let Some(users) = config.get_mut("users").and_then(|u| u.as_array_mut()) {
        for u in users {
            if let Some(map) = u.get_mut("user").and_then(|v| v.as_object_mut()) {
                map.insert("as".into(), user.into());
            }
        }
    }
    let path = std::env::temp_dir().join(format!("moonin-e2e-kubeconfig-{}", random_suffix()));
    std::fs::write(&path, crate::common::to_yaml(&config)).expect("write kubeconfig");
    path
}

/// The samples of metric `name` in a Prometheus text `body` whose labels include every one
/// of `labels` (each as rendered, `key="value"`), summed; `None` when there is none.
pub fn metric_sum(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let labelled = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}'));
            let matches = match labelled {
                Some(set) => labels.iter().all(|l| set.split(',').any(|s| s == *l)),
                None => rest.is_empty() && labels.is_empty(),
            };
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .reduce(|a, b| a + b)
}

/// The `RUST_LOG` of the managers tests and benchmarks start: `MOONIN_E2E_LOG` when set
/// (e.g. `info,moonin=debug` to see every scaling write), `info` otherwise.
fn manager_log_filter() -> String {
    std::env::var("MOONIN_E2E_LOG").unwrap_or_else(|_| "info".to_string())
}

impl Manager {
    /// Starts the built binary with `args` after `run`, on a free port, with JSON logs.
    pub async fn start(kubeconfig: &Path, identity: &str, args: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!("moonin-e2e-{identity}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_moonin"))
            .args([
                "--log-format",
                "json",
                "run",
                "--http-addr",
                "127.0.0.1:0",
                "--identity",
                identity,
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", manager_log_filter())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("moonin starts");
        let log_path = log.clone();
        let addr = wait_for(
            "the manager to log its address",
            Duration::from_secs(30),
            || {
                let log_path = log_path.clone();
                async move {
                    let text = std::fs::read_to_string(&log_path).ok()?;
                    text.lines().find_map(|line| {
                        let v: Value = serde_json::from_str(line).ok()?;
                        v["fields"]["addr"].as_str()?.parse().ok()
                    })
                }
            },
        )
        .await;
        Self {
            child,
            log,
            addr,
            identity: identity.to_string(),
        }
    }

    /// GET a path on the manager's HTTP endpoint: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((status, body))
    }

    /// The samples of metric `name` on the manager's `/metrics` whose labels include every
    /// one of `labels` (each as rendered, `key="value"`), summed; `None` when it has none or
    /// cannot be reached. See [`metric_sum`].
    pub fn metric(&self, name: &str, labels: &[&str]) -> Option<f64> {
        metric_sum(&self.get("/metrics")?.1, name, labels)
    }

    /// SIGKILL: no chance to release anything.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; returns whether it exited 0.
    pub async fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process's log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- manager {} log\n{}", self.identity, self.log_text());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn metric_sum_adds_the_samples_whose_labels_include_every_one_asked() {
    let body = "# HELP moonin_api_writes_total Writes.\n\
        moonin_api_writes_total{controller=\"scaling\",kind=\"Deployment\"} 3\n\
        moonin_api_writes_total{controller=\"scaling\",kind=\"HPA\"} 2\n\
        moonin_api_writes_total{controller=\"sandbox\",kind=\"Pod\"} 7\n\
        moonin_api_writes_total_extra{controller=\"scaling\"} 100\n\
        moonin_leader 1\n";
    let scaling = ["controller=\"scaling\""];
    assert_eq!(
        metric_sum(body, "moonin_api_writes_total", &scaling),
        Some(5.0)
    );
    assert_eq!(metric_sum(body, "moonin_api_writes_total", &[]), Some(12.0));
    let pods = ["controller=\"sandbox\"", "kind=\"Pod\""];
    assert_eq!(
        metric_sum(body, "moonin_api_writes_total", &pods),
        Some(7.0)
    );
    assert_eq!(
        metric_sum(
            body,
            "moonin_api_writes_total",
            &["kind=\"Pod\"", "controller=\"scaling\""]
        ),
        None
    );
    assert_eq!(metric_sum(body, "moonin_leader", &[]), Some(1.0));
    assert_eq!(metric_sum(body, "moonin_lead", &[]), None);
}

/// A ValidatingAdmissionPolicy (and its binding) that refuses every create and update of
/// one resource in one namespace, with the message [`Refusal::MESSAGE`]; removed on drop.
pub struct Refusal {
    name: String,
}

impl Refusal {
    /// What the policy answers.
    pub const MESSAGE: &str = "e2e refuses this write";

    /// Refuses writes of `resource` (of API group `group`) in `ns`, and waits until the API
    /// server enforces it: until `probe` (a dry-run write) is refused with the message.
    pub async fn create<F, Fut>(
        client: &Client,
        ns: &str,
        group: &str,
        resource: &str,
        probe: F,
    ) -> Self
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), kube::Error>>,
    {
        Self::create_where(client, ns, group, resource, "true", probe).await
    }

    /// As [`Refusal::create`], refusing only the writes whose object meets `when` (a CEL
    /// expression over `object`).
    pub async fn create_where<F, Fut>(
        client: &Client,
        ns: &str,
        group: &str,
        resource: &str,
        when: &str,
        probe: F,
    ) -> Self
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), kube::Error>>,
    {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        // A subresource (`scalingtemplates/status`) names the policy with a dash.
        let name = format!("e2e-refuse-{}-{ns}", resource.replace('/', "-"));
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [group], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [resource]
                }]},
                "validations": [{"expression": format!("!({when})"), "message": Self::MESSAGE}]
            }
        }))
        .expect("policy");
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": ns}
                }}
            }
        }))
        .expect("binding");
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("create policy");
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create binding");
        let guard = Self { name };
        // The API server takes a moment to enforce a new policy.
        wait_for(
            &format!("the policy to refuse writes of {resource}"),
            Duration::from_secs(30),
            || async {
                match probe().await {
                    Err(kube::Error::Api(e)) if e.message.contains(Self::MESSAGE) => Some(()),
                    _ => None,
                }
            },
        )
        .await;
        guard
    }

    /// Deletes the binding and the policy; true when kubectl did.
    fn delete(&self) -> bool {
        [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ]
        .iter()
        .all(|kind| {
            Command::new("kubectl")
                .args(["delete", kind, &self.name, "--ignore-not-found"])
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// Lifts the refusal (nothing in the namespace changes).
    pub fn lift(&self) {
        assert!(self.delete(), "kubectl delete the policy {}", self.name);
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        self.delete();
    }
}
