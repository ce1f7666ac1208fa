//! `moonin fleet` through the built binary, with no cluster: a context whose credential
//! plugin waits (for a login that never comes) is a row within `--timeout`, and holds up
//! neither the other contexts nor the command's end.

use std::process::Command;
use std::time::{Duration, Instant};

/// A kubeconfig of three contexts whose user's exec plugin answers only after `secs`.
fn kubeconfig_waiting(secs: u32) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("moonin-fleet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("kubeconfig");
    let credential = r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}"#;
    let text = format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:9
contexts:
- name: eu
  context: {{cluster: c, user: sso}}
- name: us
  context: {{cluster: c, user: sso}}
- name: ap
  context: {{cluster: c, user: sso}}
current-context: eu
users:
- name: sso
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: sh
      args:
      - -c
      - |
        sleep {secs}; echo '{credential}'
      interactiveMode: Never
"#
    );
    std::fs::write(&path, text).expect("kubeconfig written");
    path
}

#[test]
fn a_credential_plugin_that_waits_is_a_row_within_the_timeout() {
    let kubeconfig = kubeconfig_waiting(60);
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_moonin"))
        .args(["fleet", "images", "--timeout", "2s", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("moonin runs");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for context in ["eu", "us", "ap"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(context) && l.contains("no answer within 2s")),
            "{context}: {stdout}"
        );
    }
    // The plugins still wait (60 s): the command did not.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
