//! Moonin's quantity parser (`moonin::api::quantity`) against Kubernetes' own
//! (`k8s.io/apimachinery/pkg/api/resource`, the API server's code, built by `e2e/quantity`)
//! on several hundred generated quantities: decimal and binary suffixes through `E`/`Ei`,
//! exponent forms, signs, fractions, leading and trailing zeros, and malformed text.
//!
//! Both must accept and refuse the same texts and read the same value, to the nano-unit.
//! Where they differ, the API server wins: the one difference allowed is a decimal value
//! too large for Moonin to hold (over about 1.7·10²⁹ units), which Moonin reads as nothing
//! and the test lists.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use moonin::api::quantity::parse;

#[path = "common/mod.rs"]
mod common;

use common::Rng;

const SUFFIXES: &[&str] = &[
    "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3",
    "E3", "e-3", "e0", "e+2", "e-10", "e18", "E-6", "e30", "e-30",
];

/// `count` generated quantities, plus the edge cases worth naming.
fn generated(seed: u64, count: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut out: Vec<String> = [
        "0",
        "1",
        "-1",
        "+1",
        "1.",
        ".5",
        "-.5",
        ".",
        "-",
        "+",
        "007",
        "0.000",
        "1e-10",
        "-1e-10",
        "1.5Gi",
        "100m",
        "8Ei",
        "16Ei",
        "1Ei",
        "0.5E",
        "1.2.3",
        "1KB",
        "1 ",
        " 1",
        "",
        "1e",
        "e3",
        "1k3",
        "Ki",
        "1ki",
        "1e999999",
        "1e-999999",
        "12345678901234567890123",
        "1.0000000001",
        "999999999999999999999Ei",
        "3800m",
        "0.1",
        "0.3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for _ in 0..count {
        let sign = *rng.pick(&["", "", "+", "-"]);
        let int = match rng.below(5) {
            0 => String::new(),
            1 => "0".to_string(),
            2 => rng.below(10).to_string(),
            3 => rng.below(100_000).to_string(),
            _ => (rng.next() % 10u64.pow(1 + rng.below(18) as u32)).to_string(),
        };
        let frac = match rng.below(4) {
            0 | 1 => String::new(),
            2 => format!(".{}", rng.below(1000)),
            _ => format!(".{:09}", rng.below(1_000_000_000)),
        };
        let suffix = *rng.pick(SUFFIXES);
        out.push(format!("{sign}{int}{frac}{suffix}"));
    }
    out
}

/// An exact decimal (`-12.340`) in nano-units, if it fits (the API server rounds to 1n).
fn nanos_of(decimal: &str) -> Option<i128> {
    let (negative, digits) = match decimal.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, decimal),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let frac = format!("{frac:0<9}");
    if frac.len() > 9 && frac[9..].bytes().any(|b| b != b'0') {
        return None;
    }
    let mut n: i128 = 0;
    for b in int.bytes().chain(frac[..9].bytes()) {
        n = n.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    Some(if negative { -n } else { n })
}

/// Kubernetes' reading of each of `texts`: `Ok(exact decimal)` or `Err(message)`. `None`
/// when the tool cannot be built or run here.
fn kubernetes(texts: &[String]) -> Option<Vec<Result<String, String>>> {
    let mut child = Command::new(common::root().join("e2e/quantity"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut input = texts.join("\n");
    input.push('\n');
    child.stdin.take()?.write_all(input.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(
        text.lines()
            .map(|line| {
                let mut parts = line.split('\t');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("ok"), Some(_canonical), Some(value)) => Ok(value.to_string()),
                    (_, message, _) => Err(message.unwrap_or_default().to_string()),
                }
            })
            .collect(),
    )
}

#[test]
fn moonin_reads_quantities_as_the_api_server_does() {
    let texts = generated(0x9a4b_17e5, 600);
    let Some(answers) = kubernetes(&texts) else {
        let required = std::env::var("MOONIN_E2E").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "MOONIN_E2E=required but e2e/quantity (Kubernetes' parser, built with Go) cannot run"
        );
        eprintln!("skipping: e2e/quantity cannot run here (it needs Go to build)");
        return;
    };
    assert_eq!(answers.len(), texts.len(), "one answer per quantity");
    let mut disagreements = Vec::new();
    let mut too_large: Vec<(String, usize)> = Vec::new();
    let mut accepted = 0;
    for (text, answer) in texts.iter().zip(&answers) {
        let ours = parse(text).map(|q| q.nanos());
        match (answer, ours) {
            (Err(_), None) => {}
            (Ok(value), ours) => {
                accepted += 1;
                match (nanos_of(value), ours) {
                    (Some(theirs), Some(ours)) if theirs == ours => {}
                    (None, None) => {
                        let int = value.trim_start_matches('-').split('.').next();
                        too_large.push((text.clone(), int.map_or(0, str::len)));
                    }
                    (theirs, ours) => disagreements.push(format!(
                        "{text:?}: Kubernetes {value} ({theirs:?} n), Moonin {ours:?} n"
                    )),
                }
            }
            (Err(message), Some(ours)) => disagreements.push(format!(
                "{text:?}: Kubernetes refuses it ({message}), Moonin reads {ours} n"
            )),
        }
    }
    eprintln!(
        "{} quantities: {accepted} accepted by Kubernetes, {} refused; {} too large for Moonin: {}",
        texts.len(),
        texts.len() - accepted,
        too_large.len(),
        too_large
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // Only values past 1.7·10²⁹ units (30 integer digits) may be too large for Moonin.
    for (text, digits) in &too_large {
        assert!(*digits >= 30, "{text} should fit");
    }
}
