//! Drift test of the documentation: `docs/reference.md` must name every condition type,
//! condition reason, Event reason, annotation, label, finalizer, field manager, metric and
//! `moonin run` flag that the code defines, and the links of the docs must resolve. Pure: no
//! cluster, only the sources, the library and the built binary.
//!
//! A name counts as documented when it appears in backticks, exactly: `` `Ready` ``,
//! `` `moonin.io/owner` ``, `` `--cluster-name` ``. That keeps short names from matching inside
//! longer words ("Complete" in "Completed").
//!
//! Where the names come from:
//! - Constants: Moonin keeps its names as `pub const NAME: &str = "...";` inside a few
//!   modules (listed in [`TYPE_MODULES`], [`REASON_MODULES`], [`KEY_MODULES`]). Rust cannot
//!   enumerate a module's constants, so the test reads those modules from the source.
//!   rustfmt formats the tree (`cargo fmt --check` is part of `e2e/test`), so a top-level
//!   module ends at a line that is exactly `}`, and each constant is on one line. Each
//!   listed module must yield at least one name, and a few names are cross-checked against
//!   the library, so a moved module fails the test instead of silently finding nothing.
//! - Literals: some reasons, condition types and labels are string literals where they are
//!   used. The test reads them from the non-test code: the type and reason arguments of every
//!   `Desired::new(...)`, the reason of Event constructors, and every `"moonin.io/..."` key.
//! - Enums: the `Active` condition's reasons come from `scaling::window::{Trigger, Reason}`.
//! - Metrics: every family registered in the code (the first argument of `.register(`), and
//!   the exact rendered names (`_total` on counters) of those the public API can fill in.
//! - Flags: `moonin run --help` of the built binary (global flags included), cross-checked
//!   with clap's view of `moonin::manager::RunArgs`.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

fn reference() -> String {
    read("docs/reference.md")
}

/// Names not in backticks in `doc`.
fn missing<'a>(doc: &str, names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| !doc.contains(&format!("`{n}`")))
        .cloned()
        .collect()
}

fn assert_documented(what: &str, names: &BTreeSet<String>) {
    assert!(!names.is_empty(), "found no {what} in the code");
    let doc = reference();
    let gone = missing(&doc, names);
    assert!(
        gone.is_empty(),
        "docs/reference.md does not mention these {what} (write each in backticks): {gone:?}"
    );
}

/// Modules whose `pub const NAME: &str = "...";` items are condition types.
const TYPE_MODULES: &[(&str, &str)] = &[
    ("src/api/conditions.rs", "types"),
    ("src/sandbox/autoscaler/mod.rs", "condition_types"),
    ("src/discovery/names.rs", "condition_types"),
];

/// ... condition and Event reasons, and status values (phases, states, results). Scaling's
/// `reasons` also holds its condition types `Active`, `Conflict` and `Reverted`.
const REASON_MODULES: &[(&str, &str)] = &[
    ("src/api/conditions.rs", "reasons"),
    ("src/api/scaling.rs", "reasons"),
    ("src/api/sandbox.rs", "reasons"),
    ("src/sandbox/autoscaler/mod.rs", "reasons"),
    ("src/discovery/signals.rs", "reasons"),
    ("src/discovery/names.rs", "condition_reasons"),
    ("src/scaling/decide/plan.rs", "state"),
    ("src/sandbox/autoscaler/mod.rs", "session_states"),
    ("src/sandbox/autoscaler/mod.rs", "attempt_results"),
];

/// ... annotation and label keys (and label values), the finalizer, field managers.
const KEY_MODULES: &[(&str, &str)] = &[
    ("src/api/scaling.rs", "keys"),
    ("src/sandbox/pool.rs", "keys"),
    ("src/api/mod.rs", "field_manager"),
];

/// Every constant of `modules`.
fn consts_in(modules: &[(&str, &str)]) -> BTreeSet<String> {
    modules
        .iter()
        .flat_map(|(file, module)| consts_of(file, module))
        .collect()
}

/// The string constants of top-level `pub mod <module> { ... }` in `file`.
fn consts_of(file: &str, module: &str) -> BTreeSet<String> {
    let text = read(file);
    let open = format!("pub mod {module} {{");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != open);
    assert!(
        lines.next().is_some(),
        "{file}: no top-level `{open}` (update the module lists in tests/docs.rs)"
    );
    let found: BTreeSet<String> = lines
        .take_while(|l| *l != "}")
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("pub const ")?;
            let (_, value) = rest.split_once(": &str = \"")?;
            value.strip_suffix("\";").map(str::to_string)
        })
        .collect();
    assert!(
        !found.is_empty(),
        "{file}: `pub mod {module}` has no string constant (update the module lists in tests/docs.rs)"
    );
    found
}

/// Every `.rs` file under `src/`, without test files and test modules.
fn code() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p.to_string_lossy().ends_with("_tests.rs")
            {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("source is readable");
            // Test modules come last in every file; what follows `#[cfg(test)]` is not code.
            let code = match text.find("\n#[cfg(test)]") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            (p, code)
        })
        .collect()
}

/// The top-level arguments of the call whose `(` is at `open`: their source text, split at
/// commas outside strings and brackets.
fn call_args(text: &str, open: usize) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for c in text[open..].chars() {
        if in_str {
            current.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                current.push(c);
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > 1 {
                    current.push(c);
                }
            }
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    args.push(current.trim().to_string());
                    return args;
                }
                current.push(c);
            }
            ',' if depth == 1 => args.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(c),
        }
    }
    args
}

/// The string literals in a piece of source (no raw strings; none are used for names).
fn literals(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = src.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (true, c) => {
                    s.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => break,
                (false, c) => s.push(c),
            }
        }
        out.push(s);
    }
    out
}

/// A CamelCase identifier, as Kubernetes reasons and condition types are.
fn camel(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The string literal `src` starts with (after white space), if it is CamelCase.
fn first_camel_literal(src: &str) -> Option<String> {
    let src = src.trim_start();
    if !src.starts_with('"') {
        return None;
    }
    literals(src).into_iter().next().filter(|l| camel(l))
}

/// For each occurrence of `needle` (ending in `(`) in `text`, the literals of argument `i`
/// that pass `keep`.
fn literal_args(text: &str, needle: &str, i: usize, keep: fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(needle) {
        let args = call_args(text, at + needle.len() - 1);
        if let Some(arg) = args.get(i) {
            out.extend(literals(arg).into_iter().filter(|l| keep(l)));
        }
    }
    out
}

/// [`literal_args`] over all the code, CamelCase literals only.
fn camel_args(needle: &str, i: usize) -> BTreeSet<String> {
    code()
        .iter()
        .flat_map(|(_, text)| literal_args(text, needle, i, camel))
        .collect()
}

#[test]
fn every_condition_type_is_documented() {
    let mut names = consts_in(TYPE_MODULES);
    // The scaling controller's own types live with its reasons.
    names.extend(
        [
            moonin::api::scaling::reasons::ACTIVE,
            moonin::api::scaling::reasons::CONFLICT,
            moonin::api::scaling::reasons::REVERTED,
        ]
        .map(String::from),
    );
    // Types written as literals: the first argument of `Desired::new`.
    names.extend(camel_args("Desired::new(", 0));
    for known in [
        moonin::api::conditions::types::READY,
        moonin::discovery::controller::condition_types::HELM_ACCESS,
        moonin::sandbox::autoscaler::condition_types::SATURATED,
    ] {
        assert!(names.contains(known), "the parser missed {known}");
    }
    assert_documented("condition types", &names);
}

#[test]
fn every_reason_and_status_value_is_documented() {
    let mut names = consts_in(REASON_MODULES);
    // Literal condition reasons: the third argument of `Desired::new`.
    let literal_reasons = camel_args("Desired::new(", 2);
    assert!(
        literal_reasons.len() >= 5,
        "the Desired::new parser found too few literal reasons: {literal_reasons:?}"
    );
    names.extend(literal_reasons);
    // The `Active` condition's reasons and the phases.
    use moonin::scaling::window::{Reason, Trigger};
    for t in [Trigger::Schedule, Trigger::Manual] {
        names.insert(t.as_str().to_string());
    }
    for r in [
        Reason::Active,
        Reason::Idle,
        Reason::Suspended,
        Reason::Expired,
    ] {
        names.insert(r.as_str().to_string());
    }
    for known in [
        moonin::api::scaling::reasons::REAPPLY_LIMIT,
        moonin::api::sandbox::reasons::QUEUED,
        moonin::sandbox::autoscaler::reasons::GROUP_MAX_REACHED,
        moonin::discovery::signals::reasons::SELECTOR_OVERLAP,
        moonin::scaling::decide::state::BLOCKED,
    ] {
        assert!(names.contains(known), "the parser missed {known}");
    }
    assert_documented("reasons and status values", &names);
}

#[test]
fn every_event_reason_is_documented() {
    let mut names = BTreeSet::new();
    for ctor in [
        "EventNote::normal(",
        "EventNote::warning(",
        "PoolEvent::normal(",
        "PoolEvent::warning(",
    ] {
        names.extend(camel_args(ctor, 0));
    }
    // `Shared::event(regarding, warning, reason, note)` of the sandbox controllers.
    names.extend(camel_args(".event(", 2));
    // `event = Some((warning, "Reason", note))` in the claim controller, and match arms of
    // the form `… => ("Reason", "verb")` (rustfmt may break either over lines); scaling's
    // Normal Event reasons are constants (`api::scaling::events`).
    for (_, text) in code() {
        for (at, _) in text.match_indices("Some((") {
            let rest = text[at + "Some((".len()..].trim_start();
            let rest = rest
                .strip_prefix("true")
                .or_else(|| rest.strip_prefix("false"))
                .and_then(|r| r.trim_start().strip_prefix(','));
            if let Some(rest) = rest {
                names.extend(first_camel_literal(rest));
            }
        }
        for (at, _) in text.match_indices("=> (") {
            // Only a pair of literals, `("Reason", "verb")`.
            let pair = call_args(&text, at + "=> ".len());
            if pair.len() == 2 && pair.iter().all(|a| a.starts_with('"') && a.ends_with('"')) {
                names.extend(first_camel_literal(&pair[0]));
            }
        }
    }
    names.extend(consts_in(&[("src/api/scaling.rs", "events")]));
    for known in ["Applied", "Reapplied", "Bound", "Released", "PodLost"] {
        assert!(names.contains(known), "the Event parser missed {known}");
    }
    assert_documented("Event reasons", &names);
}

#[test]
fn every_annotation_label_finalizer_and_field_manager_is_documented() {
    let mut names = consts_in(KEY_MODULES);
    // Keys written as literals: `"moonin.io/<key>"`, or `~1`-escaped in a JSON Patch path.
    for (_, text) in code() {
        for lit in literals(&text) {
            let key = if let Some(k) = lit.strip_prefix("moonin.io/") {
                Some(k.to_string())
            } else {
                lit.split('/')
                    .find_map(|seg| seg.strip_prefix("moonin.io~1"))
                    .map(str::to_string)
            };
            if let Some(k) = key
                && !k.is_empty()
                && k != moonin::api::VERSION
            {
                names.insert(format!("moonin.io/{k}"));
            }
        }
        // The recommended label on objects Moonin creates.
        if text.contains("\"app.kubernetes.io/managed-by\": \"moonin\"") {
            names.insert("app.kubernetes.io/managed-by".to_string());
        }
        // Event reporters: `Reporter { controller: "<name>" ... }`.
        for (at, _) in text.match_indices("controller: \"") {
            if let Some(name) = literals(&text[at..]).into_iter().next() {
                names.insert(name);
            }
        }
    }
    names.insert(moonin::manager::leader::LEASE_NAME.to_string());
    names.insert(moonin::discovery::controller::HEARTBEAT_LEASE.to_string());
    for known in [
        moonin::api::scaling::keys::ORIGINAL,
        moonin::api::scaling::keys::FINALIZER,
        moonin::sandbox::pool::keys::STATE,
        moonin::api::field_manager::SANDBOX_AUTOSCALER,
        "moonin.io/env",
        "moonin-scaling",
    ] {
        assert!(names.contains(known), "the parser missed {known}");
    }
    assert_documented(
        "annotations, labels, finalizers, field managers and Leases",
        &names,
    );
}

#[test]
fn every_metric_is_documented() {
    // Every family registered anywhere in the code: the first argument of `.register(`.
    // Each registry is made with `Registry::with_prefix("moonin")`.
    let mut registered = BTreeSet::new();
    for (path, text) in code() {
        if !text.contains(".register(") {
            continue;
        }
        assert!(
            text.contains("Registry::with_prefix(\"moonin\")"),
            "{}: a metrics registry without the `moonin` prefix",
            path.display()
        );
        registered.extend(literal_args(&text, ".register(", 0, |_| true));
    }
    assert!(
        registered.contains("leader") && registered.contains("reconciliations"),
        "the .register( parser found {registered:?}"
    );
    // A counter's samples carry `_total`: either spelling counts here, the exact one below.
    let doc = reference();
    let gone: Vec<&String> = registered
        .iter()
        .filter(|n| {
            !doc.contains(&format!("`moonin_{n}`")) && !doc.contains(&format!("`moonin_{n}_total`"))
        })
        .collect();
    assert!(
        gone.is_empty(),
        "docs/reference.md does not mention these metrics (as `moonin_<name>`): {gone:?}"
    );

    // The exact names, from the rendered text, of the families the public API can fill in
    // (a family without a series is not rendered).
    use moonin::runtime::metrics::{ControllerLabels, ErrorLabels, Metrics};
    let m = Metrics::new();
    let controller = ControllerLabels {
        controller: "scaling".into(),
    };
    m.reconciliations.get_or_create(&controller).inc();
    m.reconcile_duration.get_or_create(&controller).observe(0.1);
    m.reconcile_errors
        .get_or_create(&ErrorLabels {
            controller: "scaling".into(),
            reason: "Conflict".into(),
        })
        .inc();
    m.wrote("scaling", "Deployment");
    let text = m.render();
    let names: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            // OpenMetrics names a counter family without the `_total` its samples carry.
            Some(match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                _ => name.to_string(),
            })
        })
        .collect();
    assert!(
        names.contains("moonin_leader") && names.contains("moonin_reconciliations_total"),
        "unexpected metrics text:\n{text}"
    );
    assert_documented("metrics", &names);
}

#[test]
fn every_run_flag_env_var_default_and_value_is_documented() {
    let out = Command::new(env!("CARGO_BIN_EXE_moonin"))
        .args(["run", "--help"])
        .output()
        .expect("the moonin binary runs");
    assert!(out.status.success(), "moonin run --help failed");
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let mut flags = BTreeSet::new();
    let mut extras = BTreeSet::new();
    for line in help.lines() {
        let t = line.trim();
        // `--name <VALUE>` or `-h, --help`, at the start of an option's line.
        if let Some(flag) = t
            .split([' ', ','])
            .find(|w| w.starts_with("--") && w.len() > 2)
            .filter(|_| t.starts_with('-'))
        {
            flags.insert(flag.to_string());
        }
        for (open, stop) in [("[env: ", '='), ("[default: ", ']')] {
            if let Some(rest) = t.strip_prefix(open)
                && let Some((value, _)) = rest.split_once(stop)
            {
                extras.insert(value.to_string());
            }
        }
        // Possible values: `- json:   One JSON object per line`.
        if let Some(rest) = t.strip_prefix("- ")
            && let Some((value, _)) = rest.split_once(':')
            && !value.contains(' ')
        {
            extras.insert(value.to_string());
        }
    }
    flags.remove("--help");
    // clap's own view of `moonin run`: the help parser must have seen every flag.
    use clap::Args as _;
    let cmd = moonin::manager::RunArgs::augment_args(clap::Command::new("run"));
    for arg in cmd.get_arguments() {
        if let Some(long) = arg.get_long() {
            assert!(
                flags.contains(&format!("--{long}")),
                "--{long} is missing from the parsed help:\n{help}"
            );
        }
    }
    assert!(
        flags.contains("--log-format"),
        "global flags are in the help"
    );
    assert_documented("`moonin run` flags", &flags);
    assert_documented(
        "environment variables, defaults and values of `moonin run`",
        &extras,
    );
}

/// Every subcommand of `moonin --help` has a row in the reference's command table, and
/// each of its own flags is named in that row (the flags of `run` have a table of their
/// own, checked above).
#[test]
fn every_subcommand_and_its_flags_are_in_the_command_table() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_moonin"))
            .args(args)
            .output()
            .expect("the moonin binary runs");
        assert!(out.status.success(), "moonin {args:?} failed");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let top = help(&["--help"]);
    let subcommands: Vec<String> = top
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    assert!(
        subcommands.len() >= 4 && subcommands.iter().any(|c| c == "run"),
        "unexpected help:\n{top}"
    );
    let doc = reference();
    let mut missing = Vec::new();
    for sub in &subcommands {
        let Some(row) = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `moonin {sub}")))
        else {
            missing.push(format!("a row `moonin {sub}`"));
            continue;
        };
        if sub == "run" {
            continue;
        }
        for line in help(&[sub, "--help"]).lines() {
            let t = line.trim();
            if !t.starts_with('-') {
                continue;
            }
            // `-o, --output <OUTPUT>` or `--from <RFC3339>`: the row names one of the spellings.
            let spellings: Vec<&str> = t
                .split([' ', ','])
                .filter(|w| w.starts_with('-') && w.len() > 1)
                .collect();
            // Possible values (`- json: …`) are not flags.
            let global_or_help = spellings.is_empty()
                || spellings
                    .iter()
                    .any(|w| matches!(*w, "--help" | "--log-format"));
            if !global_or_help && !spellings.iter().any(|w| row.contains(w)) {
                missing.push(format!(
                    "{} in the row of `moonin {sub}`",
                    spellings.join("/")
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/reference.md's command table lacks: {missing:?}"
    );
}

#[test]
fn links_in_the_docs_resolve() {
    let mut broken = Vec::new();
    let readme = read("README.md");
    let mut pages = vec![
        (PathBuf::from("README.md"), readme.clone()),
        (PathBuf::from("ARCHITECTURE.md"), read("ARCHITECTURE.md")),
    ];
    for page in [
        "install.md",
        "helm.md",
        "reference.md",
        "troubleshooting.md",
        "scaling-benchmark.md",
    ] {
        let rel = format!("docs/{page}");
        assert!(
            readme.contains(&format!("]({rel})")),
            "README.md does not link {rel}"
        );
        pages.push((PathBuf::from(&rel), read(&rel)));
    }
    for (page, text) in &pages {
        let dir = root().join(page).parent().map(Path::to_path_buf);
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            if target.contains("://") {
                continue;
            }
            let resolved = if path.is_empty() {
                root().join(page)
            } else {
                dir.clone().unwrap_or_default().join(path)
            };
            let ok = match std::fs::read_to_string(&resolved) {
                Err(_) => resolved.is_dir() && anchor.is_empty(),
                Ok(_) if anchor.is_empty() => true,
                Ok(body) => body
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| slug(h.trim_start_matches('#')) == anchor),
            };
            if !ok {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links that do not resolve: {broken:?}");
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// ARCHITECTURE.md is the map a newcomer reads first: every folder of `src/` is on it.
#[test]
fn the_architecture_map_names_every_folder_of_src() {
    fn folders(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
            let path = e.path();
            if path.is_dir() {
                let rel = path.strip_prefix(root()).unwrap_or(&path);
                out.push(format!("{}/", rel.display()));
                folders(&path, out);
            }
        }
    }
    let map = read("ARCHITECTURE.md");
    let mut all = Vec::new();
    folders(&root().join("src"), &mut all);
    let missing: Vec<&String> = all.iter().filter(|f| !map.contains(f.as_str())).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name these folders: {missing:?}"
    );
    assert!(
        !map.contains("../shared") && !read("README.md").contains("../shared"),
        "the repository's docs point outside it"
    );
}
