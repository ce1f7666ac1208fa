//! A control plane of a test's own (`e2e/cluster up` in a directory of its own), so that
//! stopping its API server or etcd disturbs no other test.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{
    common,
    harness::{Manager, wait_for},
};

/// A plane of its own, taken down when dropped.
pub struct Plane {
    dir: PathBuf,
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// A client of it.
    pub client: Client,
}

impl Plane {
    /// Starts the plane `faults-<name>` (a leftover of an earlier run is replaced).
    pub async fn up(name: &str) -> Self {
        Self::up_with(name, "").await
    }

    /// Like [`Plane::up`], with extra kube-apiserver flags (`key=value …`).
    pub async fn up_with(name: &str, apiserver_args: &str) -> Self {
        let cache = std::env::var_os("MOONIN_CACHE").map_or_else(
            || PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/moonin"),
            PathBuf::from,
        );
        let dir = cache.join(format!("faults-{name}"));
        let plane = |dir: &PathBuf, args: &[&str]| {
            Command::new(common::root().join("e2e/cluster"))
                .args(args)
                .env("MOONIN_CLUSTER_DIR", dir)
                .env("MOONIN_APISERVER_ARGS", apiserver_args)
                .status()
                .expect("e2e/cluster runs")
        };
        // A plane left by a killed run holds state of its own: start afresh.
        plane(&dir, &["down"]);
        assert!(plane(&dir, &["up"]).success(), "e2e/cluster up ({name})");
        let kubeconfig = dir.join("kubeconfig");
        let config = Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
            &KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig parses");
        let client = Client::try_from(config).expect("client");
        Self {
            dir,
            kubeconfig,
            client,
        }
    }

    fn run(&self, args: &[&str]) {
        let status = Command::new(common::root().join("e2e/cluster"))
            .args(args)
            .env("MOONIN_CLUSTER_DIR", &self.dir)
            .status()
            .expect("e2e/cluster runs");
        assert!(status.success(), "e2e/cluster {}", args.join(" "));
    }

    /// Kills a component (`kube-apiserver`, `etcd`): an outage from this instant.
    pub fn stop(&self, component: &str) -> Instant {
        self.run(&["stop", component]);
        Instant::now()
    }

    /// Starts a stopped component again; for the API server, returns once it is ready.
    pub fn start(&self, component: &str) {
        self.run(&["start", component]);
    }

    /// Installs Moonin's CRDs and creates the namespaces named.
    pub async fn prepare(&self, namespaces: &[&str]) {
        crate::harness::install_crds(&self.client).await;
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client.clone());
        for ns in namespaces {
            let body = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                .expect("namespace");
            api.create(&kube::api::PostParams::default(), &body)
                .await
                .expect("namespace");
        }
    }

    /// The resident memory of the plane's processes (etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kwok), KiB: every process whose command line
    /// names the plane's directory.
    pub fn rss_kib(&self) -> u64 {
        let dir = self.dir.to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return 0;
        };
        entries
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
            .filter_map(|status| {
                let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .sum()
    }

    /// Waits until `/readyz` of the API server answers ok.
    pub async fn ready(&self, timeout: Duration) {
        wait_for("the API server /readyz", timeout, || async {
            let ok = self
                .client
                .request_text(
                    http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("request"),
                )
                .await
                .ok()?;
            (ok == "ok").then_some(())
        })
        .await;
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        let _ = Command::new(common::root().join("e2e/cluster"))
            .arg("down")
            .env("MOONIN_CLUSTER_DIR", &self.dir)
            .status();
    }
}

/// Waits until `manager` leads (its `/metrics` say `moonin_leader 1`).
pub async fn leading(manager: &Manager) {
    let what = format!("{} to lead", manager.identity);
    wait_for(&what, Duration::from_secs(30), || async {
        manager
            .get("/metrics")?
            .1
            .contains("moonin_leader 1")
            .then_some(())
    })
    .await;
}
