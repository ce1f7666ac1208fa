//! Percentiles of a set of measurements, as the benchmarks' tables show them.

use std::time::Duration;

/// The count, median, tail and maximum of a set of values (milliseconds, mostly).
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// How many values.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

/// The statistics of `v` (nearest-rank percentiles), `None` for no value.
pub fn stats(mut v: Vec<f64>) -> Option<Stats> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Stats {
        n: v.len(),
        p50: rank(0.50),
        p95: rank(0.95),
        p99: rank(0.99),
        max: v[v.len() - 1],
    })
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
