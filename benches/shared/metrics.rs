//! Prometheus text as the benchmarks read it: a line's labels and value, and the manager's
//! own request and write counters, scraped from its `/metrics` (a sum over one metric's
//! samples is the harness's `metric_sum`).

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use super::http::get_parsed;

/// The value of label `name` on a Prometheus text line, `?` when it has none.
pub fn label<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    line.find(&key)
        .and_then(|i| {
            let rest = &line[i + key.len()..];
            rest.find('"').map(|j| &rest[..j])
        })
        .unwrap_or("?")
}

/// The value of a Prometheus text line (its last field).
pub fn value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

/// The manager's counters that the benchmarks read, each summed over its other labels.
#[derive(Clone, Default, Debug)]
pub struct Counters {
    /// `moonin_api_requests_total` by `verb` (every request, reads included).
    pub requests: BTreeMap<String, f64>,
    /// `moonin_api_writes_total` by `kind`.
    pub writes: BTreeMap<String, f64>,
    /// `moonin_reconcile_errors_total` by `reason`.
    pub errors: BTreeMap<String, f64>,
    /// `moonin_reconciliations_total`.
    pub reconciles: f64,
    /// `moonin_scaling_edge_delay_seconds` by `edge` (as scraped, not differenced).
    pub edge_delays: BTreeMap<String, Histogram>,
}

/// One series of a Prometheus histogram.
#[derive(Clone, Default, Debug)]
pub struct Histogram {
    /// Observations.
    pub count: f64,
    /// Their sum.
    pub sum: f64,
    /// Cumulative counts by upper bound, in the order rendered (`+Inf` last).
    pub buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The smallest bucket bound that holds fraction `q` of the observations.
    pub fn bound(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let want = q * self.count;
        self.buckets
            .iter()
            .find(|(_, cum)| *cum >= want)
            .map(|(le, _)| *le)
    }
}

impl Counters {
    /// The counters of a `/metrics` body.
    pub fn parse(body: &str) -> Self {
        let mut c = Counters::default();
        for line in body.lines() {
            let Some(v) = value(line) else { continue };
            if let Some(rest) = line.strip_prefix("moonin_scaling_edge_delay_seconds_") {
                let h = c
                    .edge_delays
                    .entry(label(line, "edge").to_string())
                    .or_default();
                if rest.starts_with("count") {
                    h.count = v;
                } else if rest.starts_with("sum") {
                    h.sum = v;
                } else if let Ok(le) = label(line, "le").parse::<f64>() {
                    h.buckets.push((le, v));
                }
                continue;
            }
            let (map, by) = if line.starts_with("moonin_api_requests_total{") {
                (&mut c.requests, "verb")
            } else if line.starts_with("moonin_api_writes_total{") {
                (&mut c.writes, "kind")
            } else if line.starts_with("moonin_reconcile_errors_total{") {
                (&mut c.errors, "reason")
            } else {
                if line.starts_with("moonin_reconciliations_total{") {
                    c.reconciles += v;
                }
                continue;
            };
            *map.entry(label(line, by).to_string()).or_default() += v;
        }
        c
    }

    /// What was counted since `earlier` (entries that did not move left out).
    pub fn minus(&self, earlier: &Counters) -> Counters {
        let diff = |a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>| {
            a.iter()
                .map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v != 0.0)
                .collect()
        };
        Counters {
            requests: diff(&self.requests, &earlier.requests),
            writes: diff(&self.writes, &earlier.writes),
            errors: diff(&self.errors, &earlier.errors),
            reconciles: self.reconciles - earlier.reconciles,
            edge_delays: self.edge_delays.clone(),
        }
    }

    /// Every write.
    pub fn writes_total(&self) -> f64 {
        self.writes.values().sum()
    }

    /// Every write but those of `kind` (the discovery heartbeat's Lease, renewed by design).
    pub fn writes_except(&self, kind: &str) -> f64 {
        self.writes
            .iter()
            .filter(|(k, _)| *k != kind)
            .map(|(_, v)| v)
            .sum()
    }

    /// Requests of one verb.
    pub fn request(&self, verb: &str) -> f64 {
        self.requests.get(verb).copied().unwrap_or(0.0)
    }

    /// Writes of one kind.
    pub fn write(&self, kind: &str) -> f64 {
        self.writes.get(kind).copied().unwrap_or(0.0)
    }
}

/// The manager's counters now, or `None` when its `/metrics` does not answer.
pub async fn scrape(addr: SocketAddr) -> Option<Counters> {
    get_parsed(addr, "/metrics", Counters::parse).await
}

/// [`scrape`], tried for five seconds.
pub async fn scrape_retrying(addr: SocketAddr) -> Result<Counters, String> {
    for _ in 0..20 {
        if let Some(c) = scrape(addr).await {
            return Ok(c);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("the manager's /metrics on {addr} does not answer"))
}
