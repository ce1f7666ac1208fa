//! From rises to templates: each rise placed as a window a cron schedule can write, in the
//! output time zone and a lead time earlier; the days of one workload folded into one
//! window, then the workloads that share a window into one template.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};

use super::{Existing, Observed, Rules, SuggestedAction, Suggestion, geometry, rises};
use crate::cron::slots::{Geometry, span};

/// How a history's period repeats, as the fields of a cron schedule write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Repeat {
    /// A week: minute, hour and days of the week.
    Weekly,
    /// A day: minute and hour.
    Daily,
    /// An hour: the minute.
    Hourly,
    /// Every so many minutes, a divisor of 60: the first minute and the step.
    EveryMinutes(i64),
}

impl Repeat {
    /// How a period of `secs` repeats, or none when a cron schedule cannot write it.
    pub fn of(secs: i64) -> Option<Self> {
        match secs {
            604_800 => Some(Self::Weekly),
            86_400 => Some(Self::Daily),
            3_600 => Some(Self::Hourly),
            s if s > 0 && s % 60 == 0 && 3_600 % s == 0 => Some(Self::EveryMinutes(s / 60)),
            _ => None,
        }
    }

    /// The period, seconds.
    fn secs(self) -> i64 {
        match self {
            Self::Weekly => 604_800,
            Self::Daily => 86_400,
            Self::Hourly => 3_600,
            Self::EveryMinutes(m) => m * 60,
        }
    }

    /// The period's name in plural: `weeks`, `periods of 2m`.
    fn plural(self) -> String {
        match self {
            Self::Weekly => "weeks".into(),
            Self::Daily => "days".into(),
            Self::Hourly => "hours".into(),
            Self::EveryMinutes(m) => format!("periods of {}", span(m * 60)),
        }
    }
}

/// One rise of one workload, placed: where in the cron unit (a day for weekly and daily
/// periods, else the period) its window starts, on which day of the week.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    namespace: String,
    deployment: String,
    autoscaler: String,
    min: i32,
    max: i32,
    level: i32,
    floor: i32,
    seen: usize,
    kept: usize,
    repeat: Repeat,
    slot_secs: i64,
    /// Cron day of the week (0 Sunday) for weekly periods.
    day: Option<i8>,
    /// The window: seconds into the unit, on a whole minute, and its length.
    start: i64,
    secs: i64,
    /// The rise itself, seconds into the unit, and its length.
    rise_start: i64,
    rise_secs: i64,
}

/// The windows of `o`'s rises, and why some are not suggested; an error when none can be.
pub(super) fn place_rises(
    o: &Observed,
    existing: &[Existing],
    rules: &Rules,
) -> Result<(Vec<Placed>, Vec<String>), String> {
    let h = &o.history;
    let (g, newest) = geometry(h)?;
    let repeat = Repeat::of(g.period_secs()).ok_or_else(|| {
        format!(
            "its history repeats every {}, which a cron schedule cannot write (a week, a day, \
             an hour or a whole number of minutes dividing an hour can be)",
            span(g.period_secs())
        )
    })?;
    let deployment = match h.target.split_once('/') {
        Some(("Deployment", name)) => name.to_string(),
        _ => {
            return Err(format!(
                "it scales {}; ScalingTemplates scale Deployments only",
                h.target
            ));
        }
    };
    let kept = h.periods.len();
    let scheduled = scheduled(&g, newest, kept, &o.namespace, &deployment, existing);
    let mut windows = Vec::new();
    let mut notes = Vec::new();
    for rise in rises(h, rules.min_periods) {
        if rise.slots >= g.slots {
            notes.push(format!(
                "it asked for at least {} (its minimum is {}) in every slot of {} of the last {kept} \
                 {}: no window helps; raise its minReplicas instead",
                rise.level,
                h.min_replicas,
                rise.seen,
                repeat.plural()
            ));
            continue;
        }
        if let Some(by) = covered(&g, newest, kept, &rise, &scheduled) {
            notes.push(format!(
                "its rise at {} is already scheduled by {by}",
                clock(
                    repeat,
                    unit_secs(repeat, rules, rise_instants(&g, newest, kept, &rise).0).1
                )
            ));
            continue;
        }
        let (start, end) = rise_instants(&g, newest, kept, &rise);
        let opens = start.checked_sub(rules.lead).unwrap_or(start);
        let (day, at, floored) = place(repeat, rules, opens);
        let (_, rise_start, _) = place(repeat, rules, start);
        let secs = end.duration_since(floored).as_secs().min(repeat.secs());
        windows.push(Placed {
            namespace: o.namespace.clone(),
            deployment: deployment.clone(),
            autoscaler: h.autoscaler.clone(),
            min: h.min_replicas,
            max: h.max_replicas.max(rise.level),
            level: rise.level,
            floor: rise.floor,
            seen: rise.seen,
            kept,
            repeat,
            slot_secs: g.slot_secs,
            day,
            start: at,
            secs,
            rise_start,
            rise_secs: end.duration_since(start).as_secs(),
        });
    }
    Ok((windows, notes))
}

/// The rise in the newest of the `kept` periods where no change of UTC offset falls inside
/// it (else in the newest): first instant, first instant after. A window placed in a week of
/// a daylight-saving change would be an hour short or long in every other week.
fn rise_instants(
    g: &Geometry,
    newest: i64,
    kept: usize,
    rise: &super::Rise,
) -> (Timestamp, Timestamp) {
    let at = |p: i64| {
        (
            g.slot_start(p, rise.first),
            g.slot_start(p, rise.first + rise.slots),
        )
    };
    let plain = i64::try_from(rise.slots)
        .unwrap_or(i64::MAX)
        .saturating_mul(g.slot_secs);
    (0..i64::try_from(kept).unwrap_or(1))
        .map(|back| at(newest - back))
        .find(|(start, end)| end.duration_since(*start).as_secs() == plain)
        .unwrap_or_else(|| at(newest))
}

/// `t` in the output zone: its day of the week (weekly periods), seconds into the cron unit,
/// not rounded.
fn unit_secs(repeat: Repeat, rules: &Rules, t: Timestamp) -> (Option<i8>, i64) {
    let dt = rules.tz.to_datetime(t);
    let (h, m, s) = (
        i64::from(dt.hour()),
        i64::from(dt.minute()),
        i64::from(dt.second()),
    );
    let day = matches!(repeat, Repeat::Weekly).then(|| dt.weekday().to_sunday_zero_offset());
    let secs = match repeat {
        Repeat::Weekly | Repeat::Daily => h * 3_600 + m * 60 + s,
        Repeat::Hourly => m * 60 + s,
        Repeat::EveryMinutes(p) => (m % p) * 60 + s,
    };
    (day, secs)
}

/// `t` rounded down to its minute, placed: day, seconds into the unit, the rounded instant.
fn place(repeat: Repeat, rules: &Rules, t: Timestamp) -> (Option<i8>, i64, Timestamp) {
    let (day, secs) = unit_secs(repeat, rules, t);
    let extra = secs % 60;
    let floored = t.checked_sub(SignedDuration::from_secs(extra)).unwrap_or(t);
    (day, secs - extra, floored)
}

/// The windows, over the periods kept, of each existing template with an action for the
/// Deployment: (`<template> (action <name>)`, its windows).
fn scheduled(
    g: &Geometry,
    newest: i64,
    kept: usize,
    namespace: &str,
    deployment: &str,
    existing: &[Existing],
) -> Vec<(String, Vec<(Timestamp, Timestamp)>)> {
    let oldest = newest - i64::try_from(kept).unwrap_or(1) + 1;
    existing
        .iter()
        .filter_map(|t| {
            let action = t
                .actions
                .iter()
                .find(|a| a.namespace == namespace && a.deployment == deployment)?;
            let windows = super::unneeded::windows(
                &t.window,
                g.period_start(oldest),
                g.period_start(newest + 1),
            );
            Some((format!("{} (action {})", t.label, action.name), windows))
        })
        .collect()
}

/// The template already scheduling `rise` (one of [`scheduled`]), if one of its windows
/// holds the rise's first slot in a period kept.
fn covered(
    g: &Geometry,
    newest: i64,
    kept: usize,
    rise: &super::Rise,
    scheduled: &[(String, Vec<(Timestamp, Timestamp)>)],
) -> Option<String> {
    let oldest = newest - i64::try_from(kept).unwrap_or(1) + 1;
    let firsts: Vec<Timestamp> = (oldest..=newest)
        .map(|p| g.slot_start(p, rise.first))
        .collect();
    scheduled.iter().find_map(|(by, windows)| {
        firsts
            .iter()
            .any(|&f| windows.iter().any(|&(s, e)| s <= f && f < e))
            .then(|| by.clone())
    })
}

/// The templates of `placed`: per workload its windows folded across days, then the
/// workloads sharing a window and its days folded into one template, each named apart from
/// the others and from the ScalingTemplates that exist (`taken`: namespace and name).
pub(super) fn templates(
    mut placed: Vec<Placed>,
    rules: &Rules,
    mut taken: BTreeSet<(String, String)>,
) -> Vec<Suggestion> {
    placed.sort_by(|a, b| {
        (&a.namespace, &a.deployment, a.repeat, a.start).cmp(&(
            &b.namespace,
            &b.deployment,
            b.repeat,
            b.start,
        ))
    });
    // Per workload: the days on which the same window opens.
    let rhythms = fold(placed, |a, b| {
        a.namespace == b.namespace && a.deployment == b.deployment && a.repeat == b.repeat
    });
    let mut rhythms: Vec<Rhythm> = rhythms.into_iter().map(Rhythm::of).collect();
    rhythms.sort_by(|a, b| {
        (&a.first.namespace, a.first.repeat, &a.days, a.first.start).cmp(&(
            &b.first.namespace,
            b.first.repeat,
            &b.days,
            b.first.start,
        ))
    });
    // Then the workloads with the same days and window.
    let mut out: Vec<Suggestion> = Vec::new();
    for group in fold_rhythms(rhythms) {
        let s = suggestion(&group, rules, &taken);
        taken.insert((s.namespace.clone(), s.name.clone()));
        out.push(s);
    }
    out
}

/// One workload's window and the days it opens on.
#[derive(Debug, Clone)]
struct Rhythm {
    first: Placed,
    days: BTreeSet<i8>,
    start: i64,
    end: i64,
    rise_start: i64,
    rise_end: i64,
    level: i32,
    floor: i32,
    seen: usize,
}

impl Rhythm {
    fn of(group: Vec<Placed>) -> Self {
        let first = group[0].clone();
        Self {
            days: group.iter().filter_map(|p| p.day).collect(),
            start: group.iter().map(|p| p.start).min().unwrap_or(0),
            end: group.iter().map(|p| p.start + p.secs).max().unwrap_or(0),
            rise_start: group.iter().map(|p| p.rise_start).min().unwrap_or(0),
            rise_end: group
                .iter()
                .map(|p| p.rise_start + p.rise_secs)
                .max()
                .unwrap_or(0),
            level: median(group.iter().map(|p| p.level)),
            floor: group.iter().map(|p| p.floor).min().unwrap_or(0),
            seen: group.iter().map(|p| p.seen).min().unwrap_or(0),
            first,
        }
    }
}

/// The upper median.
fn median(values: impl Iterator<Item = i32>) -> i32 {
    let mut v: Vec<i32> = values.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Groups in order: an item joins the first group whose first item `same` accepts and
/// whose window starts and ends within a slot of its own.
fn fold(items: Vec<Placed>, same: impl Fn(&Placed, &Placed) -> bool) -> Vec<Vec<Placed>> {
    let mut groups: Vec<Vec<Placed>> = Vec::new();
    for item in items {
        let close = |g: &&mut Vec<Placed>| {
            let f = &g[0];
            same(f, &item)
                && (f.start - item.start).abs() <= item.slot_secs
                && (f.start + f.secs - item.start - item.secs).abs() <= item.slot_secs
        };
        match groups.iter_mut().find(|g| close(g)) {
            Some(g) => g.push(item),
            None => groups.push(vec![item]),
        }
    }
    groups
}

/// The most actions a template takes: more workloads with one rhythm make more templates.
const MAX_ACTIONS: usize = 100;

fn fold_rhythms(rhythms: Vec<Rhythm>) -> Vec<Vec<Rhythm>> {
    let mut groups: Vec<Vec<Rhythm>> = Vec::new();
    for r in rhythms {
        let tol = r.first.slot_secs;
        let joins = |g: &&mut Vec<Rhythm>| {
            let f = &g[0];
            g.len() < MAX_ACTIONS
                && f.first.namespace == r.first.namespace
                && f.first.repeat == r.first.repeat
                && f.days == r.days
                && (f.start - r.start).abs() <= tol
                && (f.end - r.end).abs() <= tol
        };
        match groups.iter_mut().find(|g| joins(g)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
}

/// The template of workloads sharing a window; its name is not one of `taken`'s.
fn suggestion(group: &[Rhythm], rules: &Rules, taken: &BTreeSet<(String, String)>) -> Suggestion {
    let first = &group[0];
    let repeat = first.first.repeat;
    let start = group.iter().map(|r| r.start).min().unwrap_or(0);
    let end = group.iter().map(|r| r.end).max().unwrap_or(0);
    let zone = rules.tz.iana_name().unwrap_or("UTC").to_string();
    let mut actions: Vec<SuggestedAction> = group
        .iter()
        .map(|r| SuggestedAction {
            deployment: r.first.deployment.clone(),
            min_replicas: r.level.max(1),
            max_replicas: r.first.max.max(r.level),
            evidence: format!(
                "{} {}–{} {zone}, {} of the last {} {}, {} asked for ≥ {}{} while its min is {}",
                days_phrase(repeat, &r.days),
                clock(repeat, r.rise_start),
                clock(repeat, r.rise_end),
                r.seen,
                r.first.kept,
                repeat.plural(),
                r.first.autoscaler,
                r.level,
                if r.floor < r.level {
                    format!(" through most of it (≥ {} throughout)", r.floor)
                } else {
                    String::new()
                },
                r.first.min
            ),
        })
        .collect();
    actions.sort_by(|a, b| a.deployment.cmp(&b.deployment));
    actions.dedup_by(|a, b| a.deployment == b.deployment);
    let base = name(&actions, repeat, start);
    let namespace = first.first.namespace.clone();
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&(namespace.clone(), name.clone())) {
        name = format!("{}-{n}", base.chars().take(60).collect::<String>());
        n += 1;
    }
    Suggestion {
        namespace,
        name,
        schedule: cron(repeat, start, &first.days),
        time_zone: zone,
        duration: SignedDuration::from_secs((end - start).clamp(1, repeat.secs())),
        actions,
    }
}

/// The cron schedule of windows starting `start` seconds into the unit, on `days`.
fn cron(repeat: Repeat, start: i64, days: &BTreeSet<i8>) -> String {
    let (h, m) = (start / 3_600, start % 3_600 / 60);
    match repeat {
        Repeat::Weekly => format!("{m} {h} * * {}", cron_days(days)),
        Repeat::Daily => format!("{m} {h} * * *"),
        Repeat::Hourly => format!("{m} * * * *"),
        Repeat::EveryMinutes(1) => "* * * * *".into(),
        Repeat::EveryMinutes(p) => format!("{}-59/{p} * * * *", start / 60),
    }
}

/// `1-5`, `0,6`, `*`.
fn cron_days(days: &BTreeSet<i8>) -> String {
    if days.len() == 7 {
        return "*".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut run: Vec<i8> = Vec::new();
    let flush = |run: &mut Vec<i8>, parts: &mut Vec<String>| {
        match run.as_slice() {
            [] => {}
            [one] => parts.push(one.to_string()),
            [a, .., b] if b - a >= 2 => parts.push(format!("{a}-{b}")),
            more => parts.extend(more.iter().map(ToString::to_string)),
        }
        run.clear();
    };
    for &d in days {
        if run.last().is_some_and(|&l| l + 1 != d) {
            flush(&mut run, &mut parts);
        }
        run.push(d);
    }
    flush(&mut run, &mut parts);
    parts.join(",")
}

/// `weekdays`, `weekends`, `every day`, `Mon, Wed`; for shorter periods the period.
fn days_phrase(repeat: Repeat, days: &BTreeSet<i8>) -> String {
    const NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    match repeat {
        Repeat::Weekly => match days.iter().copied().collect::<Vec<_>>().as_slice() {
            [1, 2, 3, 4, 5] => "weekdays".into(),
            [0, 6] => "weekends".into(),
            [0, 1, 2, 3, 4, 5, 6] => "every day".into(),
            ds => ds
                .iter()
                .filter_map(|&d| NAMES.get(usize::try_from(d).ok()?))
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
        },
        Repeat::Daily => "every day".into(),
        Repeat::Hourly => "every hour".into(),
        Repeat::EveryMinutes(p) => format!("every {}", span(p * 60)),
    }
}

/// `08:00` for days, `:15` for hours, `1:20` (minutes and seconds) for shorter periods.
fn clock(repeat: Repeat, secs: i64) -> String {
    let secs = secs.rem_euclid(repeat.secs().clamp(60, 86_400));
    match repeat {
        Repeat::Weekly | Repeat::Daily => format!("{:02}:{:02}", secs / 3_600, secs % 3_600 / 60),
        Repeat::Hourly => format!(":{:02}", secs / 60),
        Repeat::EveryMinutes(_) => format!("{}:{:02}", secs / 60, secs % 60),
    }
}

/// `web-0745`, `web-and-2-more-0745`, `web-every-2m`: at most 63 characters.
fn name(actions: &[SuggestedAction], repeat: Repeat, start: i64) -> String {
    let who = match actions {
        [one] => one.deployment.clone(),
        [first, rest @ ..] => format!("{}-and-{}-more", first.deployment, rest.len()),
        [] => "suggested".into(),
    };
    let when = match repeat {
        Repeat::Weekly | Repeat::Daily => {
            format!("{:02}{:02}", start / 3_600, start % 3_600 / 60)
        }
        Repeat::Hourly => format!("hourly-{:02}", start / 60),
        Repeat::EveryMinutes(p) => format!("every-{p}m"),
    };
    let keep = 62 - when.len();
    let who: String = who.chars().take(keep).collect();
    format!("{}-{when}", who.trim_end_matches(['-', '.']))
}
