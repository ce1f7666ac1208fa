//! `moonin schedule` on the samples, through the built binary (no cluster).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn sample(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("samples")
        .join(name)
        .display()
        .to_string()
}

fn moonin(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_moonin"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("moonin starts");
    let mut input = child.stdin.take().expect("stdin piped");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("stdin written");
    drop(input);
    child.wait_with_output().expect("moonin runs")
}

/// Runs `moonin schedule … -o json`, expects success, returns the (start, end, dstAdjusted)
/// of each window.
fn windows(args: &[&str]) -> Vec<(String, String, bool)> {
    let mut all = vec!["schedule"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = moonin(&all, None);
    assert!(
        out.status.success(),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("stdout is exactly a JSON list");
    list.iter()
        .map(|w| {
            let start = w["start"].as_str().expect("start").to_string();
            let end = w["end"].as_str().expect("end").to_string();
            let parse = |s: &str| s.parse::<jiff::Timestamp>().expect("RFC 3339");
            assert!(parse(&end) > parse(&start), "{w}");
            (start, end, w["dstAdjusted"].as_bool().expect("dstAdjusted"))
        })
        .collect()
}

fn owned(list: &[(&str, &str, bool)]) -> Vec<(String, String, bool)> {
    list.iter()
        .map(|&(s, e, d)| (s.to_string(), e.to_string(), d))
        .collect()
}

#[test]
fn business_hours_across_santiago_fall_back() {
    // "0 8 * * 1-5" in America/Santiago, 10h. Thursday 2026-04-02 09:00 -03 is inside a
    // window; Chile leaves DST at 2026-04-05T03:00Z (-03 → -04), so from Monday 08:00 local
    // is 12:00Z instead of 11:00Z. The weekend has no window.
    let got = windows(&[
        &sample("scalingtemplate.yaml"),
        "--from",
        "2026-04-02T12:00:00Z",
        "--count",
        "4",
    ]);
    assert_eq!(
        got,
        owned(&[
            ("2026-04-03T11:00:00Z", "2026-04-03T21:00:00Z", false),
            ("2026-04-06T12:00:00Z", "2026-04-06T22:00:00Z", false),
            ("2026-04-07T12:00:00Z", "2026-04-07T22:00:00Z", false),
            ("2026-04-08T12:00:00Z", "2026-04-08T22:00:00Z", false),
        ])
    );
    // The default count is 5.
    assert_eq!(
        windows(&[
            &sample("scalingtemplate.yaml"),
            "--from",
            "2026-04-02T12:00:00Z"
        ])
        .len(),
        5
    );
}

#[test]
fn nightly_ingest_stops_at_valid_until() {
    // 02:00 UTC daily, 3h, validUntil 2027-12-31T23:59:59Z: only two fires are left.
    let got = windows(&[
        &sample("clusterscalingtemplate.yaml"),
        "--from",
        "2027-12-29T12:00:00Z",
        "--count",
        "5",
    ]);
    assert_eq!(
        got,
        owned(&[
            ("2027-12-30T02:00:00Z", "2027-12-30T05:00:00Z", false),
            ("2027-12-31T02:00:00Z", "2027-12-31T05:00:00Z", false),
        ])
    );
    let after = windows(&[
        &sample("clusterscalingtemplate.yaml"),
        "--from",
        "2028-01-01T00:00:00Z",
    ]);
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn the_table_says_whether_the_template_is_active() {
    let out = moonin(
        &[
            "schedule",
            &sample("scalingtemplate.yaml"),
            "--from",
            "2026-04-02T12:00:00Z",
            "--count",
            "2",
        ],
        None,
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("ScalingTemplate business-hours: "),
        "{text}"
    );
    assert!(
        text.contains(
            "active at 2026-04-02T12:00:00Z: yes (Schedule window \
             2026-04-02T08:00:00-03:00 → 2026-04-02T18:00:00-03:00)"
        ),
        "{text}"
    );
    assert!(
        text.contains("2026-04-06T08:00:00-04:00  2026-04-06T18:00:00-04:00  2026-04-06T12:00:00Z"),
        "{text}"
    );
}

#[test]
fn stdin_with_two_templates_is_refused() {
    let both = format!(
        "{}\n---\n{}",
        std::fs::read_to_string(sample("scalingtemplate.yaml")).expect("sample"),
        std::fs::read_to_string(sample("clusterscalingtemplate.yaml")).expect("sample"),
    );
    let out = moonin(&["schedule", "-", "-o", "json"], Some(&both));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stdin holds 2 scaling templates"), "{err}");
}

#[test]
fn a_missing_file_that_is_no_object_name_is_an_error() {
    let out = moonin(&["schedule", "No/Such/File.yaml"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no file named No/Such/File.yaml"), "{err}");
}
