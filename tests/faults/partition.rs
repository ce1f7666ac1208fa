//! Two replicas; the leader's connection to the API server is cut (the API server stays up).
//! The other takes over within a lease duration and the retry periods; the old leader writes
//! nothing once its renew deadline has passed, not even when the cut is lifted and its caches
//! still hold the world as it was.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use moonin::manager::leader::{LEASE_DURATION_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_SECONDS};
use serde_json::Value;

use crate::{
    harness::{self, Manager, wait_for},
    load::Load,
    plane::{Plane, leading},
    proxy::Proxy,
};

fn read(kubeconfig: &Path) -> Value {
    crate::common::from_yaml(&std::fs::read_to_string(kubeconfig).expect("kubeconfig"))
        .expect("kubeconfig parses")
}

/// The API server's address in `kubeconfig` (`https://<ip>:<port>`).
pub(crate) fn upstream(kubeconfig: &Path) -> std::net::SocketAddr {
    read(kubeconfig)["clusters"][0]["cluster"]["server"]
        .as_str()
        .and_then(|s| s.strip_prefix("https://"))
        .and_then(|s| s.parse().ok())
        .expect("server is https://<ip>:<port>")
}

/// A copy of `kubeconfig` whose server is `addr` (the proxy); the certificate still names
/// 127.0.0.1.
pub(crate) fn through(kubeconfig: &Path, addr: std::net::SocketAddr) -> PathBuf {
    let mut config = read(kubeconfig);
    config["clusters"][0]["cluster"]["server"] = format!("https://{addr}").into();
    let path = kubeconfig.with_file_name("kubeconfig-through-proxy");
    std::fs::write(&path, crate::common::to_yaml(&config)).expect("write kubeconfig");
    path
}

/// The sum of `moonin_api_writes_total` on a manager's `/metrics`: every write it sent.
fn writes(m: &Manager) -> u64 {
    let (_, body) = m.get("/metrics").expect("/metrics");
    harness::metric_sum(&body, "moonin_api_writes_total", &[]).unwrap_or_default() as u64
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_writing_before_the_other_takes_over() {
    if harness::cluster().await.is_none() {
        return;
    }
    let _serial = harness::serial().await;
    let plane = Plane::up("partition").await;
    let client = plane.client.clone();
    let ns = "faults";
    plane.prepare(&[ns]).await;

    // A reaches the API server through the proxy, B directly. A leads.
    let proxy = Proxy::start(upstream(&plane.kubeconfig)).await;
    let a_config = through(&plane.kubeconfig, proxy.addr);
    let a = Manager::start(&a_config, "a", &["--namespace", ns]).await;
    leading(&a).await;
    let mut b = Manager::start(&plane.kubeconfig, "b", &["--namespace", ns]).await;
    wait_for("B to follow, ready", Duration::from_secs(30), || async {
        let ready = b.get("/readyz")?.0 == 200;
        (ready && b.get("/metrics")?.1.contains("moonin_leader 0")).then_some(())
    })
    .await;

    // Work for whoever leads: a window A applies that closes during the cut, one that opens
    // during it, and (right after the cut) a changed Deployment and claims A never sees.
    let load = Load::prepare(&client, ns).await;
    let cut_at = Timestamp::now() + SignedDuration::from_secs(5);
    load.open_window_closing_at(cut_at + SignedDuration::from_secs(25))
        .await;
    load.window_opening_at(cut_at + SignedDuration::from_secs(30))
        .await;
    let wait = cut_at.duration_since(Timestamp::now());
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;

    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let before = leases.get("moonin-manager").await.expect("lease");
    assert_eq!(holder(&before).as_deref(), Some("a"));
    let cut = Instant::now();
    proxy.cut();
    load.change_and_claim().await;

    // A stops at its renew deadline; B takes over once the Lease has not changed for a lease
    // duration by its clock.
    wait_for(
        "A to stop leading",
        Duration::from_secs(RENEW_DEADLINE_SECONDS + RETRY_SECONDS + 2),
        || async {
            a.get("/metrics")?
                .1
                .contains("moonin_leader 0")
                .then_some(())
        },
    )
    .await;
    let stopped = cut.elapsed();
    let a_writes = writes(&a);
    let taken = wait_for(
        "B to take the Lease",
        Duration::from_secs(LEASE_DURATION_SECONDS + 3 * RETRY_SECONDS + 5),
        || async {
            let l = leases.get("moonin-manager").await.ok()?;
            (holder(&l).as_deref() == Some("b")).then_some(l)
        },
    )
    .await;
    let takeover = cut.elapsed();
    let spec = taken.spec.clone().expect("spec");
    assert_eq!(
        spec.lease_transitions,
        before
            .spec
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .map(|t| t + 1)
    );
    let last_renewal = before
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0)
        .expect("renewTime");
    let acquired = spec.acquire_time.map(|t| t.0).expect("acquireTime");
    let gap = acquired.duration_since(last_renewal).as_secs_f64();
    eprintln!(
        "partition: A stopped leading {:.1}s after the cut, B took over {:.1}s after it \
         ({gap:.1}s after A's last renewal it saw; lease {LEASE_DURATION_SECONDS}s, renew \
         deadline {RENEW_DEADLINE_SECONDS}s, retry {RETRY_SECONDS}s)",
        stopped.as_secs_f64(),
        takeover.as_secs_f64()
    );
    // B saw A's last renewal at most one retry period after it was made, and takes over at
    // most one retry period after a lease duration from then; A's stop comes first.
    assert!(
        gap <= (LEASE_DURATION_SECONDS + 2 * RETRY_SECONDS + 1) as f64,
        "takeover {gap:.1}s after the last renewal"
    );
    assert!(stopped < takeover, "A stopped leading before B took over");

    // B does the work A was cut off from; then the cut is lifted.
    let deadline = Instant::now() + Duration::from_secs(90);
    while let Err(e) = load.check().await {
        assert!(
            Instant::now() < deadline,
            "B never reached the end state: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "partition: the end state {:.1}s after the cut",
        cut.elapsed().as_secs_f64()
    );
    let b_writes = writes(&b);
    assert!(
        b_writes > 0,
        "B wrote the work of the window and the claims"
    );
    proxy.heal();
    let healed = Instant::now();

    // A reconnects to a world it has a stale picture of, and writes nothing.
    wait_for(
        "A to reach the API server again",
        Duration::from_secs(30),
        || async {
            a.get("/metrics")?
                .1
                .contains("moonin_api_reachable 1")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (_, metrics) = a.get("/metrics").expect("/metrics");
    assert!(metrics.contains("moonin_leader 0"), "A follows");
    assert_eq!(
        writes(&a),
        a_writes,
        "A sent no write after its renew deadline, in the {:.0}s after the heal either",
        healed.elapsed().as_secs_f64()
    );
    load.check()
        .await
        .unwrap_or_else(|e| panic!("after the heal: {e}"));
    let l = leases.get("moonin-manager").await.expect("lease");
    assert_eq!(holder(&l).as_deref(), Some("b"));
    eprintln!(
        "partition: writes sent by A after its renew deadline 0 (before it {a_writes}), by B {}",
        writes(&b)
    );

    // B records one more change and goes; A leads again. A's own baseline of `web` dates
    // from before the cut (app:1): it starts from the one B published (app:3), or it would
    // record app:1 → app:3, the two changes B recorded merged into one.
    load.deploy("registry.example/app:3").await;
    let b_recorded = [
        "registry.example/app:1 → registry.example/app:2",
        "registry.example/app:2 → registry.example/app:3",
    ];
    wait_for(
        "B to record app:3 and publish it as web's baseline",
        Duration::from_secs(60),
        || async {
            let published = load.published_web_image().await;
            (load.web_changes().await == b_recorded
                && published.as_deref() == Some("registry.example/app:3"))
            .then_some(())
        },
    )
    .await;
    b.kill();
    wait_for(
        "A to lead again",
        Duration::from_secs(LEASE_DURATION_SECONDS + 3 * RETRY_SECONDS + 5),
        || async {
            a.get("/metrics")?
                .1
                .contains("moonin_leader 1")
                .then_some(())
        },
    )
    .await;
    // A's first rebuild measures every Deployment; give it time to, and a change to see.
    let rebuilds = |m: &Manager| {
        m.get("/metrics").and_then(|(_, body)| {
            harness::metric_sum(
                &body,
                "moonin_reconcile_duration_seconds_count",
                &["controller=\"discovery\""],
            )
        })
    };
    let led_from = rebuilds(&a).unwrap_or_default();
    wait_for("A to rebuild", Duration::from_secs(60), || async {
        (rebuilds(&a)? > led_from).then_some(())
    })
    .await;
    load.deploy("registry.example/app:4").await;
    wait_for("A to record app:4", Duration::from_secs(60), || async {
        (load.web_changes().await.len() > 2).then_some(())
    })
    .await;
    assert_eq!(
        load.web_changes().await,
        [
            b_recorded[0],
            b_recorded[1],
            "registry.example/app:3 → registry.example/app:4"
        ],
        "A, leading again, recorded only what changed since B's last record"
    );
}
