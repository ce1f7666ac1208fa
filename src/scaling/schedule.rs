//! `moonin schedule`: the next windows of a scaling template, read from a manifest or from
//! the cluster, in the template's time zone and in UTC.
//!
//! [`plan`], [`render_table`], [`render_json`] and [`parse_manifests`] are pure; [`run`]
//! loads the template and prints.

use std::io::{Read as _, Write as _};
use std::path::Path;

use anyhow::{Context as _, bail};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::window::{ActiveWindow, PlannedWindow, Reason, WindowError, WindowInputs, evaluate};
use crate::api::scaling::{ClusterScalingTemplate, ScalingTemplate, WindowSpec};
use crate::cron::fires::fires_after;

/// Arguments of `moonin schedule`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScheduleArgs {
    /// A ScalingTemplate or ClusterScalingTemplate manifest (`-` reads stdin). When no such
    /// file exists, `namespace/name` reads a live ScalingTemplate and a bare `name` a live
    /// ClusterScalingTemplate from the current kubeconfig context.
    #[arg(value_name = "FILE|NAMESPACE/NAME")]
    pub template: String,
    /// List the windows that open after this RFC 3339 instant, e.g. 2026-03-07T00:00:00Z
    /// [default: now].
    #[arg(long, value_name = "RFC3339")]
    pub from: Option<Timestamp>,
    /// How many windows to list (1 to 1000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub count: u16,
    /// `table` for people; `json` prints only a list of {"start", "end", "dstAdjusted"}
    /// with UTC instants, for scripts.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// How `moonin schedule` prints.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A header and an aligned table.
    Table,
    /// A JSON list of windows, nothing else.
    Json,
}

/// A template's state at an instant and its next scheduled windows.
#[derive(Debug, Clone)]
pub struct SchedulePlan {
    /// The cron schedule, as written.
    pub schedule: String,
    /// The zone the schedule is read in.
    pub time_zone: TimeZone,
    /// How long each window stays open.
    pub duration: SignedDuration,
    /// The instant the plan is made at.
    pub from: Timestamp,
    /// Whether a window is open at `from`, and if not, why.
    pub reason: Reason,
    /// The window open at `from`, if any.
    pub active: Option<ActiveWindow>,
    /// The manual run, `[start, end)`, when it has not ended by `from`.
    pub manual: Option<(Timestamp, Timestamp)>,
    /// Nothing runs at or after this instant.
    pub valid_until: Option<Timestamp>,
    /// The next scheduled windows opening after `from` and before `valid_until`; empty when
    /// suspended or expired.
    pub windows: Vec<PlannedWindow>,
}

/// The state of the template at `from` and its next `count` scheduled windows, each cut at
/// `validUntil`, with no window opening at or after it.
pub fn plan(spec: &WindowSpec, from: Timestamp, count: usize) -> Result<SchedulePlan, WindowError> {
    let inputs = WindowInputs::from_spec(spec)?;
    let state = evaluate(&inputs, from);
    let valid_until = inputs.valid_until;
    let cut = |t: Timestamp| valid_until.map_or(t, |v| t.min(v));
    let end_of =
        |start: Timestamp| cut(start.checked_add(inputs.duration).unwrap_or(Timestamp::MAX));
    let windows = match state.reason {
        Reason::Suspended | Reason::Expired => Vec::new(),
        Reason::Active | Reason::Idle => fires_after(&inputs.schedule, &inputs.tz, from)
            .take_while(|f| valid_until.is_none_or(|v| f.at < v))
            .take(count)
            .map(|f| PlannedWindow {
                start: f.at,
                end: end_of(f.at),
                dst_adjusted: f.dst_adjusted,
            })
            .collect(),
    };
    let manual = inputs
        .manual
        .map(|(start, length)| (start, start.checked_add(length).unwrap_or(Timestamp::MAX)))
        .filter(|&(_, end)| end > from);
    Ok(SchedulePlan {
        schedule: spec.schedule.clone(),
        time_zone: inputs.tz,
        duration: inputs.duration,
        from,
        reason: state.reason,
        active: state.active,
        manual,
        valid_until,
        windows,
    })
}

/// An instant in the plan's zone, RFC 3339 with the local offset.
fn local(plan: &SchedulePlan, t: Timestamp) -> String {
    t.display_with_offset(plan.time_zone.to_offset(t))
        .to_string()
}

/// The human output: a header about `template` (such as `ScalingTemplate shop/peak`) and
/// an aligned table of windows, local and UTC.
pub fn render_table(template: &str, plan: &SchedulePlan) -> String {
    let zone = plan.time_zone.iana_name().unwrap_or("UTC");
    let mut out = format!(
        "{template}: schedule {:?} in {zone}, windows of {:#}\n",
        plan.schedule, plan.duration
    );
    if let Some(v) = plan.valid_until {
        out += &format!("valid until {v}\n");
    }
    if let Some((start, end)) = plan.manual {
        out += &format!(
            "manual run: {} → {}\n",
            local(plan, start),
            local(plan, end)
        );
    }
    let state = match (plan.active, plan.reason) {
        (Some(w), _) => format!(
            "yes ({} window {} → {})",
            w.trigger.as_str(),
            local(plan, w.start),
            local(plan, w.end)
        ),
        (None, Reason::Suspended) => "no (Suspended: spec.suspend is true)".to_string(),
        (None, Reason::Expired) => "no (Expired: validUntil has passed)".to_string(),
        (None, reason) => format!("no ({})", reason.as_str()),
    };
    out += &format!("active at {}: {state}\n", plan.from);

    if plan.windows.is_empty() {
        out += match plan.reason {
            Reason::Suspended => "no windows: the template is suspended\n",
            Reason::Expired => "no windows: the template has expired\n",
            Reason::Active | Reason::Idle if plan.valid_until.is_some() => {
                "no windows before validUntil\n"
            }
            Reason::Active | Reason::Idle => "no windows: the schedule never fires\n",
        };
        return out;
    }

    let header = [
        "START (LOCAL)",
        "END (LOCAL)",
        "START (UTC)",
        "END (UTC)",
        "DST",
    ]
    .map(String::from);
    let rows: Vec<[String; 5]> = plan
        .windows
        .iter()
        .map(|w| {
            [
                local(plan, w.start),
                local(plan, w.end),
                w.start.to_string(),
                w.end.to_string(),
                if w.dst_adjusted { "adjusted" } else { "" }.to_string(),
            ]
        })
        .collect();
    let mut widths = header.each_ref().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    out.push('\n');
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out += line.join("  ").trim_end();
        out.push('\n');
    }
    out
}

/// One window in `-o json`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonWindow {
    start: String,
    end: String,
    dst_adjusted: bool,
}

/// The script output: a JSON list of `{"start", "end", "dstAdjusted"}`, RFC 3339 UTC.
pub fn render_json(plan: &SchedulePlan) -> String {
    let windows: Vec<JsonWindow> = plan
        .windows
        .iter()
        .map(|w| JsonWindow {
            start: w.start.to_string(),
            end: w.end.to_string(),
            dst_adjusted: w.dst_adjusted,
        })
        .collect();
    let mut out =
        serde_json::to_string_pretty(&windows).expect("strings and booleans always serialize");
    out.push('\n');
    out
}

/// A template to plan: what to call it and its window.
#[derive(Debug, Clone)]
pub struct LoadedTemplate {
    /// Kind and name, such as `ScalingTemplate shop/peak`.
    pub label: String,
    /// The schedule and its switches.
    pub window: WindowSpec,
}

fn label(kind: &str, namespace: Option<&str>, name: Option<&str>) -> String {
    let name = name.unwrap_or("<unnamed>");
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The one ScalingTemplate or ClusterScalingTemplate in a (possibly multi-document) YAML
/// text; documents of other kinds are ignored. `source` names the text in errors.
pub fn parse_manifests(text: &str, source: &str) -> anyhow::Result<LoadedTemplate> {
    let mut found = Vec::new();
    // Read as the API server would store it, as JSON; only `true` and `false` are booleans
    // (YAML 1.2, as kubectl's YAML 1.1 `yes`/`on` are not meant in a manifest).
    let options = serde_saphyr::options! { strict_booleans: true };
    let mut input = text.as_bytes();
    let documents = serde_saphyr::read_with_options::<_, serde_json::Value>(&mut input, options);
    for (i, value) in documents.enumerate() {
        let n = i + 1;
        let value = value.with_context(|| format!("{source}: document {n} is not valid YAML"))?;
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        let template = match kind.as_str() {
            "ScalingTemplate" => {
                let t: ScalingTemplate = serde_json::from_value(value)
                    .with_context(|| format!("{source}: document {n} is not a valid {kind}"))?;
                let meta = &t.metadata;
                LoadedTemplate {
                    label: label(&kind, meta.namespace.as_deref(), meta.name.as_deref()),
                    window: t.spec.window,
                }
            }
            "ClusterScalingTemplate" => {
                let t: ClusterScalingTemplate = serde_json::from_value(value)
                    .with_context(|| format!("{source}: document {n} is not a valid {kind}"))?;
                LoadedTemplate {
                    label: label(&kind, None, t.metadata.name.as_deref()),
                    window: t.spec.window,
                }
            }
            _ => continue,
        };
        found.push(template);
    }
    match found.len() {
        0 => bail!("{source} holds no ScalingTemplate or ClusterScalingTemplate"),
        1 => Ok(found.remove(0)),
        n => {
            let names: Vec<&str> = found.iter().map(|t| t.label.as_str()).collect();
            bail!(
                "{source} holds {n} scaling templates ({}); moonin schedule reads one: \
                 put it in a file of its own, or name a live object",
                names.join(", ")
            )
        }
    }
}

/// A DNS-1123 label (`dots == false`) or subdomain (`dots == true`), as Kubernetes names are.
fn is_k8s_name(s: &str, dots: bool) -> bool {
    let max = if dots { 253 } else { 63 };
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= max
        && s.starts_with(ok)
        && s.ends_with(ok)
        && s.chars().all(|c| ok(c) || c == '-' || (dots && c == '.'))
}

/// Reads the template `arg` names: a file, stdin, or a live object.
async fn load(arg: &str) -> anyhow::Result<LoadedTemplate> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the template from stdin")?;
        return parse_manifests(&text, "stdin");
    }
    let path = Path::new(arg);
    if path.is_file() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {arg}"))?;
        return parse_manifests(&text, arg);
    }
    if path.exists() {
        bail!("{arg} is not a file");
    }
    match arg.split_once('/') {
        Some((ns, name)) if is_k8s_name(ns, false) && is_k8s_name(name, true) => {
            let what = format!("no file named {arg} and no ScalingTemplate {ns}/{name}");
            let api =
                kube::Api::<ScalingTemplate>::namespaced(client().await.context(what.clone())?, ns);
            let t = api.get(name).await.context(what)?;
            Ok(LoadedTemplate {
                label: label("ScalingTemplate", Some(ns), Some(name)),
                window: t.spec.window,
            })
        }
        None if is_k8s_name(arg, true) => {
            let what = format!("no file named {arg} and no ClusterScalingTemplate {arg}");
            let api =
                kube::Api::<ClusterScalingTemplate>::all(client().await.context(what.clone())?);
            let t = api.get(arg).await.context(what)?;
            Ok(LoadedTemplate {
                label: label("ClusterScalingTemplate", None, Some(arg)),
                window: t.spec.window,
            })
        }
        _ => bail!(
            "no file named {arg}, and {arg} is not a live template: use namespace/name for a \
             ScalingTemplate or name for a ClusterScalingTemplate"
        ),
    }
}

async fn client() -> anyhow::Result<kube::Client> {
    kube::Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig context")
}

/// `moonin schedule`: loads the template and prints its state and next windows.
pub async fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    let template = load(&args.template).await?;
    // Whole seconds read better in the header than nanoseconds.
    let now = Timestamp::now();
    let from = args
        .from
        .unwrap_or_else(|| Timestamp::from_second(now.as_second()).unwrap_or(now));
    let plan = plan(&template.window, from, usize::from(args.count))
        .with_context(|| format!("{} is invalid", template.label))?;
    let out = match args.output {
        OutputFormat::Table => render_table(&template.label, &plan),
        OutputFormat::Json => render_json(&plan),
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn spec(yaml: &str) -> WindowSpec {
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
    }

    fn planned(yaml: &str, from: &str, count: usize) -> SchedulePlan {
        plan(&spec(yaml), ts(from), count).unwrap_or_else(|e| panic!("{yaml}: {e}"))
    }

    fn json(plan: &SchedulePlan) -> serde_json::Value {
        serde_json::from_str(&render_json(plan)).unwrap_or_else(|e| panic!("{e}"))
    }

    const NEW_YORK: &str = "{schedule: '30 2 * * *', timeZone: America/New_York, duration: 1h}";

    #[test]
    fn json_across_spring_forward_flags_the_moved_window() {
        let p = planned(NEW_YORK, "2026-03-07T00:00:00Z", 3);
        assert_eq!(
            json(&p),
            serde_json::json!([
                {"start": "2026-03-07T07:30:00Z", "end": "2026-03-07T08:30:00Z", "dstAdjusted": false},
                {"start": "2026-03-08T07:00:00Z", "end": "2026-03-08T08:00:00Z", "dstAdjusted": true},
                {"start": "2026-03-09T06:30:00Z", "end": "2026-03-09T07:30:00Z", "dstAdjusted": false},
            ])
        );
        let table = render_table("ScalingTemplate shop/night", &p);
        assert!(
            table.contains("2026-03-08T03:00:00-04:00  2026-03-08T04:00:00-04:00  2026-03-08T07:00:00Z  2026-03-08T08:00:00Z  adjusted\n"),
            "{table}"
        );
        assert!(
            table.contains("active at 2026-03-07T00:00:00Z: no (Idle)"),
            "{table}"
        );
    }

    #[test]
    fn count_is_honoured_beyond_the_status_three() {
        let p = planned(NEW_YORK, "2026-03-07T00:00:00Z", 40);
        assert_eq!(p.windows.len(), 40);
        assert!(p.windows.windows(2).all(|w| w[0].start < w[1].start));
        assert_eq!(
            planned(NEW_YORK, "2026-03-07T00:00:00Z", 1).windows.len(),
            1
        );
    }

    #[test]
    fn valid_until_cuts_the_last_window_and_stops_the_list() {
        let p = planned(
            "{schedule: '@daily', duration: 3h, validUntil: '2026-01-03T01:00:00Z'}",
            "2026-01-01T12:00:00Z",
            5,
        );
        assert_eq!(
            json(&p),
            serde_json::json!([
                {"start": "2026-01-02T00:00:00Z", "end": "2026-01-02T03:00:00Z", "dstAdjusted": false},
                {"start": "2026-01-03T00:00:00Z", "end": "2026-01-03T01:00:00Z", "dstAdjusted": false},
            ])
        );
    }

    #[test]
    fn suspended_and_expired_list_nothing() {
        let p = planned(
            "{schedule: '@hourly', duration: 1h, suspend: true}",
            "2026-01-01T12:00:00Z",
            5,
        );
        assert_eq!(p.reason, Reason::Suspended);
        assert_eq!(render_json(&p), "[]\n");
        assert!(render_table("x", &p).contains("no (Suspended"));

        let p = planned(
            "{schedule: '@hourly', duration: 1h, validUntil: '2026-01-01T00:00:00Z'}",
            "2026-01-01T12:00:00Z",
            5,
        );
        assert_eq!(p.reason, Reason::Expired);
        assert_eq!(render_json(&p), "[]\n");
        assert!(render_table("x", &p).contains("no (Expired"));
    }

    #[test]
    fn a_manual_run_shows_as_active() {
        let p = planned(
            "{schedule: '0 8 * * *', duration: 2h, \
              manualRun: {startTime: '2026-01-01T11:00:00Z', duration: 3h}}",
            "2026-01-01T12:00:00Z",
            2,
        );
        let table = render_table("ClusterScalingTemplate peak", &p);
        assert!(
            table.contains(
                "active at 2026-01-01T12:00:00Z: yes (Manual window 2026-01-01T11:00:00+00:00 → 2026-01-01T14:00:00+00:00)"
            ),
            "{table}"
        );
        assert_eq!(p.windows.len(), 2);
        assert_eq!(p.windows[0].start, ts("2026-01-02T08:00:00Z"));
    }

    #[test]
    fn a_scheduled_window_open_at_from_shows_as_active() {
        let p = planned(NEW_YORK, "2026-03-07T08:00:00Z", 1);
        let table = render_table("t", &p);
        assert!(
            table.contains(
                "yes (Schedule window 2026-03-07T02:30:00-05:00 → 2026-03-07T03:30:00-05:00)"
            ),
            "{table}"
        );
    }

    #[test]
    fn invalid_templates_are_errors() {
        let bad_zone = plan(
            &spec("{schedule: '@daily', timeZone: Mars/Olympus, duration: 1h}"),
            ts("2026-01-01T00:00:00Z"),
            1,
        );
        assert!(
            matches!(bad_zone, Err(WindowError::UnknownTimeZone(ref z)) if z == "Mars/Olympus")
        );
        let bad_cron = plan(
            &spec("{schedule: '61 * * * *', duration: 1h}"),
            ts("2026-01-01T00:00:00Z"),
            1,
        );
        assert!(
            matches!(bad_cron, Err(WindowError::Schedule(_))),
            "{bad_cron:?}"
        );
    }

    const ACTIONS: &str =
        "  actions: [{name: a, target: {name: w}, minReplicas: 1, maxReplicas: 2}]\n";

    #[test]
    fn a_multi_document_file_with_one_template_parses() {
        let text = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---\n\
             apiVersion: moonin.io/v1alpha1\nkind: ScalingTemplate\n\
             metadata: {{name: peak, namespace: shop}}\n\
             spec:\n  schedule: '0 8 * * 1-5'\n  timeZone: Europe/Madrid\n  duration: 90m\n{ACTIONS}---\n"
        );
        let t = parse_manifests(&text, "f.yaml").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(t.label, "ScalingTemplate shop/peak");
        assert_eq!(t.window.schedule, "0 8 * * 1-5");
        assert_eq!(t.window.time_zone.as_deref(), Some("Europe/Madrid"));
    }

    #[test]
    fn files_without_exactly_one_template_are_refused() {
        let one = format!(
            "apiVersion: moonin.io/v1alpha1\nkind: ClusterScalingTemplate\nmetadata: {{name: a}}\n\
             spec:\n  schedule: '@daily'\n  duration: 1h\n{ACTIONS}"
        );
        let two = format!("{one}---\n{}", one.replace("name: a}", "name: b}"));
        let err = format!(
            "{:#}",
            parse_manifests(&two, "f.yaml").expect_err("two templates")
        );
        assert!(
            err.contains(
                "holds 2 scaling templates (ClusterScalingTemplate a, ClusterScalingTemplate b)"
            ),
            "{err}"
        );
        let err = format!(
            "{:#}",
            parse_manifests("kind: Namespace\n", "f.yaml").expect_err("none")
        );
        assert!(err.contains("holds no ScalingTemplate"), "{err}");
        let err = format!(
            "{:#}",
            parse_manifests("kind: ScalingTemplate\nspec: {}\n", "f.yaml").expect_err("bad")
        );
        assert!(
            err.contains("document 1 is not a valid ScalingTemplate"),
            "{err}"
        );
    }

    #[test]
    fn live_names_follow_kubernetes_rules() {
        assert!(is_k8s_name("shop", false));
        assert!(is_k8s_name("peak.v2", true));
        assert!(!is_k8s_name("peak.v2", false));
        assert!(!is_k8s_name("Shop", false));
        assert!(!is_k8s_name("-a", true));
        assert!(!is_k8s_name("", true));
    }
}
