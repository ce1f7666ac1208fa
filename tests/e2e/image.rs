//! The shipped image, not the host binary: `e2e/image build` (run by `e2e/test` before the
//! tests) builds it from the Dockerfile with podman, and this test runs it as the manager's
//! Pod would run — UID 65532, a read-only root filesystem, no capabilities, the in-cluster
//! environment and a token of the `moonin` ServiceAccount of `config/default` at the
//! service-account path — against the local control plane. It must lead, be Ready and
//! reconcile the samples: the image, the RBAC and the in-cluster configuration together.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::Value;

use crate::{
    common,
    harness::{self, TestNamespace, install_crds, kubectl_apply, wait_for},
    require_cluster, samples,
};

/// The namespace and ServiceAccount of `config/default`.
const NAMESPACE: &str = "moonin-system";
const SERVICE_ACCOUNT: &str = "moonin";

fn image(args: &[&str]) -> std::process::Output {
    Command::new(common::root().join("e2e/image"))
        .args(args)
        .output()
        .expect("e2e/image runs")
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
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `config/default` as kustomize renders it, without the Deployment: kwok would only pretend
/// to run its Pods, and the image runs here instead.
fn install_config_default(ns: &TestNamespace) {
    let rendered = kubectl(&[
        "kustomize",
        &common::root().join("config/default").display().to_string(),
    ]);
    let mut text = String::new();
    for v in crate::common::yaml_documents(&rendered).expect("kustomize renders YAML") {
        if v["kind"] == "Deployment" {
            continue;
        }
        text.push_str("---\n");
        text.push_str(&crate::common::to_yaml(&v));
    }
    let file = std::env::temp_dir().join(format!("moonin-e2e-config-default-{}.yaml", ns.name));
    std::fs::write(&file, text).expect("write");
    kubectl_apply(&file, None);
    let _ = std::fs::remove_file(&file);
}

/// What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: a token of the
/// ServiceAccount, the cluster's CA and the namespace, readable by the container's user.
fn service_account_dir(test_ns: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("moonin-e2e-sa-{test_ns}"));
    std::fs::create_dir_all(&dir).expect("sa dir");
    let token = kubectl(&[
        "create",
        "token",
        SERVICE_ACCOUNT,
        "-n",
        NAMESPACE,
        "--duration",
        "1h",
    ]);
    let ca = kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca.trim())
        .expect("the kubeconfig carries its CA");
    std::fs::write(dir.join("token"), token.trim()).expect("token");
    std::fs::write(dir.join("ca.crt"), ca).expect("ca");
    std::fs::write(dir.join("namespace"), NAMESPACE).expect("namespace");
    for f in ["token", "ca.crt", "namespace"] {
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// GET on the container's HTTP port (it shares this machine's network).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The running container, stopped (SIGTERM, then removed) when dropped; its log is printed
/// if the test failed.
struct Container {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Container {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `e2e/image stop`: SIGTERM to moonin (PID 1). Returns the container's exit status.
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let _ = image(&["stop", &self.name]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- container {} log\n{}", self.name, self.log_text());
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.stop();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[tokio::test]
async fn the_image_runs_as_its_pod_would_and_reconciles_the_samples() {
    let client = require_cluster!();
    let size = image(&["size"]);
    if !size.status.success() {
        assert!(
            std::env::var("MOONIN_E2E").as_deref() != Ok("required"),
            "no image: e2e/test builds it with `e2e/image build` ({})",
            String::from_utf8_lossy(&size.stderr)
        );
        eprintln!("skipping: no image built (run e2e/image build)");
        return;
    }
    let bytes: u64 = String::from_utf8_lossy(&size.stdout)
        .trim()
        .parse()
        .expect("a size");
    eprintln!(
        "image size: {bytes} bytes ({:.1} MiB)",
        bytes as f64 / 1048576.0
    );

    let _serial = harness::serial().await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "image").await;
    install_config_default(&ns);
    let sa = service_account_dir(&ns.name);

    let objects = samples::objects_in(&common::root().join("samples"), &ns.name);
    samples::clear_cluster_scoped(&client, &objects).await;

    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let name = format!("moonin-e2e-{}", ns.name);
    let log = std::env::temp_dir().join(format!("{name}.log"));
    let out = std::fs::File::create(&log).expect("log");
    // No --namespace: the manager reads it from the mounted service account, as in a Pod.
    let child = Command::new(common::root().join("e2e/image"))
        .args(["run", &name])
        .arg(&sa)
        .args(["run", "--log-format", "json"])
        .arg(format!("--http-addr=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("e2e/image run");
    let mut container = Container {
        name: name.clone(),
        child,
        log,
    };

    wait_for("/readyz 200", Duration::from_secs(60), || async {
        (get(port, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    wait_for("the container to lead", Duration::from_secs(60), || async {
        get(port, "/metrics")?
            .1
            .contains("moonin_leader 1")
            .then_some(())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = leases
        .get(moonin::manager::leader::LEASE_NAME)
        .await
        .expect("the Lease in the service account's namespace");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.starts_with(&name),
        "the identity comes from POD_NAME: {holder}"
    );
    let log_text = container.log_text();
    let connected: Value = log_text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["fields"]["message"] == "connected")
        .unwrap_or_else(|| panic!("a `connected` line in\n{log_text}"));
    assert_eq!(connected["fields"]["namespace"], NAMESPACE, "{connected}");

    // As its Pod: UID 65532, no effective capability, a read-only root.
    let top = image(&["podman", "top", &name, "user", "group", "capeff"]);
    let top = String::from_utf8_lossy(&top.stdout).to_string();
    let row: Vec<&str> = top
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["65532", "65532", "none"], "podman top:\n{top}");
    let inspect = image(&[
        "podman",
        "inspect",
        "--format",
        "{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}",
        &name,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspect.stdout).trim(),
        "true 65532:65532"
    );

    samples::apply(&ns, &objects, "image-samples");
    let started = Instant::now();
    samples::wait_ready(&client, &objects, Duration::from_secs(180)).await;
    eprintln!(
        "the image reconciled {} sample objects in {:.1}s",
        objects.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        !container.log_text().contains("missing permission"),
        "{}",
        container.log_text()
    );
    samples::delete_cluster_scoped(&client, &objects).await;

    // SIGTERM: a clean exit that releases the Lease.
    let status = container.stop().expect("the container exits on SIGTERM");
    assert!(status.success(), "{status}\n{}", container.log_text());
    let lease = leases
        .get(moonin::manager::leader::LEASE_NAME)
        .await
        .expect("lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref().unwrap_or_default().is_empty(),
        "released: {holder:?}"
    );
    let _ = std::fs::remove_dir_all(&sa);
}
