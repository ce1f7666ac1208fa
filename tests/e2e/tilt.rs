//! The Tiltfile's inner loop, run once with `tilt ci` (`e2e/tilt`, Tilt built from its Go
//! module) against the local control plane: the CRDs, the RBAC and the samples are applied,
//! the manager runs as a local_resource until its /readyz answers, the samples are reconciled,
//! and nothing is left running when Tilt exits.

use std::{
    net::TcpListener,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, api::DeleteParams};
use serde_json::Value;

use crate::{
    common,
    harness::{self, TestNamespace, install_crds, moonin_api, wait_for},
    require_cluster,
};

/// A port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One object of `samples/`.
#[derive(Clone)]
struct Sample {
    kind: String,
    /// `<plural>.moonin.io`, for kubectl.
    resource: String,
    name: String,
    namespaced: bool,
}

/// Every Moonin object of `samples/` (the Deployments and HPA it holds too go with the test
/// namespace).
fn samples() -> Vec<Sample> {
    let crds = moonin::api::all_crds();
    common::sample_files()
        .iter()
        .flat_map(|f| common::load_all(f))
        .filter(common::is_moonin)
        .map(|obj| {
            let kind = obj["kind"].as_str().expect("kind").to_string();
            let crd = crds
                .iter()
                .find(|c| c.spec.names.kind == kind)
                .expect("the sample's CRD");
            Sample {
                resource: format!("{}.{}", crd.spec.names.plural, moonin::api::GROUP),
                name: obj["metadata"]["name"].as_str().expect("name").to_string(),
                namespaced: crd.spec.scope == "Namespaced",
                kind,
            }
        })
        .collect()
}

/// `moonin run` processes started from `binary` with `--namespace <namespace>`.
fn managers_running(binary: &Path, namespace: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let runs = args.first().is_some_and(|a| Path::new(a) == binary)
            && args.iter().any(|a| a == "run")
            && args
                .windows(2)
                .any(|w| w[0] == "--namespace" && w[1] == namespace);
        if runs {
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                args.join(" ")
            ));
        }
    }
    found
}

/// Whether the object's `Ready` condition is True for its current generation.
fn ready_for_generation(obj: &Value) -> bool {
    let generation = obj["metadata"]["generation"].as_i64();
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
        && obj["status"]["observedGeneration"].as_i64() == generation
}

/// Runs last: the manager Tilt ran is gone, so nothing would remove the finalizers it put on
/// the samples (the scaling templates' revert: here nothing was overridden, their targets do
/// not exist), and the test namespace and the cluster-scoped samples could not be deleted.
struct StripFinalizers {
    namespace: String,
    samples: Vec<Sample>,
}

impl StripFinalizers {
    fn strip(&self, s: &Sample) {
        let mut cmd = Command::new("kubectl");
        cmd.args(["patch", &s.resource, &s.name, "--type=merge"])
            .args(["-p", r#"{"metadata":{"finalizers":null}}"#]);
        if s.namespaced {
            cmd.args(["-n", &self.namespace]);
        }
        let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

impl Drop for StripFinalizers {
    fn drop(&mut self) {
        for s in &self.samples {
            self.strip(s);
        }
    }
}

async fn get(client: &Client, kind: &str, ns: &str, name: &str) -> Value {
    let obj = moonin_api(client, kind, ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{kind} {name} was applied by Tilt: {e}"));
    serde_json::to_value(obj).expect("json")
}

#[tokio::test]
async fn tilt_ci_applies_the_samples_and_runs_the_manager_until_they_are_reconciled() {
    let client = require_cluster!();
    // Tilt runs a manager, which reconciles every namespace: no other may run meanwhile.
    let _serial = harness::serial().await;
    install_crds(&client).await;
    let mut ns = TestNamespace::new(&client, "tilt").await;

    // The cluster-scoped samples keep their names (the Tiltfile applies the samples as they
    // are): any earlier ones go first, so their status cannot pass for this run's, and they go
    // again afterwards. No manager runs now to remove an earlier one's finalizer.
    let samples = samples();
    // Declared after `ns`, so it runs before the namespace and the samples are deleted.
    let strip = StripFinalizers {
        namespace: ns.name.clone(),
        samples: samples.clone(),
    };
    for s in samples.iter().filter(|s| !s.namespaced) {
        let api = moonin_api(&client, &s.kind, "");
        let _ = api.delete(&s.name, &DeleteParams::default()).await;
        strip.strip(s);
        wait_for(
            &format!("an earlier {} {} to go", s.kind, s.name),
            Duration::from_secs(60),
            || async { api.get_opt(&s.name).await.ok()?.is_none().then_some(()) },
        )
        .await;
        ns.cluster_objects
            .push(format!("{}/{}", s.resource, s.name));
    }

    let binary = Path::new(env!("CARGO_BIN_EXE_moonin"));
    let port = free_port();
    let snapshot = std::env::temp_dir().join(format!("moonin-e2e-tilt-{}.json", ns.name));
    let log = std::env::temp_dir().join(format!("moonin-e2e-tilt-{}.log", ns.name));
    let started = Instant::now();
    let status = {
        let (ns, snapshot, log) = (ns.name.clone(), snapshot.clone(), log.clone());
        tokio::task::spawn_blocking(move || {
            let out = std::fs::File::create(&log).expect("log file");
            Command::new(common::root().join("e2e/tilt"))
                .arg("ci")
                .arg("--output-snapshot-on-exit")
                .arg(&snapshot)
                .arg("--")
                .args(["--samples-namespace", &ns, "--manager-namespace", &ns])
                .arg(format!("--http-port={port}"))
                .arg(format!("--moonin-bin={}", binary.display()))
                .env("E2E_TILT_TIMEOUT", "600")
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("log"))
                .stderr(out)
                .status()
                .expect("e2e/tilt runs")
        })
        .await
        .expect("tilt ci")
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = output.lines().collect();
        lines[lines.len().saturating_sub(80)..].join("\n")
    };
    assert!(status.success(), "e2e/tilt ci: {status}\n{tail}");
    assert!(
        output.contains("SUCCESS. All workloads are healthy."),
        "{tail}"
    );
    eprintln!("tilt ci passed in {:.1}s", started.elapsed().as_secs_f64());

    // Tilt's own account: every resource is there and none failed (the last one to finish may
    // still read in_progress: Tilt writes the snapshot as it decides to exit), and the
    // manager's readiness probe on /readyz passed, which is what makes its runtime status ok.
    let snap: Value =
        serde_json::from_str(&std::fs::read_to_string(&snapshot).expect("Tilt's snapshot"))
            .expect("snapshot is JSON");
    let _ = std::fs::remove_file(&snapshot);
    let resources = snap["view"]["uiResources"].as_array().expect("uiResources");
    let resource = |name: &str| {
        resources
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("Tilt resource {name} in the snapshot"))
    };
    // `checkout` and `ingest`: the workloads the scaling samples target, one resource each.
    for name in [
        "config",
        "crds-established",
        "samples",
        "checkout",
        "ingest",
        "moonin",
        "samples-reconciled",
    ] {
        let r = resource(name);
        assert_ne!(r["status"]["updateStatus"], "error", "{name}: {r}");
        assert_ne!(r["status"]["runtimeStatus"], "error", "{name}: {r}");
    }
    assert!(output.contains("[readiness probe: success]"), "{tail}");
    let manager = resource("moonin");
    assert_eq!(manager["status"]["runtimeStatus"], "ok", "{manager}");
    let links: Vec<&str> = manager["status"]["endpointLinks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["url"].as_str())
        .collect();
    assert!(
        links.contains(&format!("http://127.0.0.1:{port}/metrics").as_str()),
        "{links:?}"
    );

    // What Tilt applied is there, and the manager reconciled it while Tilt ran.
    for s in &samples {
        let namespace = if s.namespaced { ns.name.as_str() } else { "" };
        get(&client, &s.kind, namespace, &s.name).await;
    }
    let env = get(&client, "SandboxEnv", &ns.name, "python").await;
    assert!(ready_for_generation(&env), "{env}");
    for pool in ["python-small", "python-large"] {
        let p = get(&client, "SandboxPool", &ns.name, pool).await;
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"], "python",
            "{pool} was created by the manager for its env: {p}"
        );
    }
    let claim = get(&client, "SandboxClaim", &ns.name, "notebook-alice").await;
    assert_eq!(claim["status"]["phase"], "Bound", "{claim}");
    let discovery = get(&client, "ClusterDiscovery", "", "cluster").await;
    assert!(ready_for_generation(&discovery), "{discovery}");
    // The manager led from --manager-namespace, and Tilt stopped it with SIGTERM when it
    // exited: a clean stop releases the Lease.
    let lease = Api::<Lease>::namespaced(client.clone(), &ns.name)
        .get(moonin::manager::leader::LEASE_NAME)
        .await
        .expect("the manager's Lease in --manager-namespace");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref().unwrap_or_default().is_empty(),
        "the Lease is released: {holder:?}"
    );

    // And nothing of it is left running.
    assert_eq!(managers_running(binary, &ns.name), Vec::<String>::new());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens on the manager's port any more"
    );
    let _ = std::fs::remove_file(&log);
}
