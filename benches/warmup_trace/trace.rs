//! The generated claim trace: four weeks of Poisson arrivals in a named time zone, busy on
//! weekdays with peaks at 09:00 and 14:00, quiet at night and at weekends, with one holiday
//! (a weekday that is as quiet as a Sunday) and random bursts; each claim holds its Pod
//! for an exponentially distributed time. Deterministic for a seed.

use jiff::{SignedDuration, Timestamp, civil::Weekday, tz::TimeZone};

/// A small deterministic generator (SplitMix64): the trace is the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with this mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

/// The trace's shape.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Where the working day happens.
    pub zone: String,
    /// Claims per minute at the top of the 09:00 peak.
    pub morning_peak: f64,
    /// Claims per minute at the top of the 14:00 peak.
    pub afternoon_peak: f64,
    /// Claims per minute during working hours outside the peaks.
    pub daytime: f64,
    /// Claims per minute at night and at weekends.
    pub quiet: f64,
    /// Random bursts per week, each `burst_size` claims within a minute.
    pub bursts_per_week: f64,
    pub burst_size: usize,
    /// Mean time a claim holds its Pod, seconds.
    pub mean_hold_secs: f64,
    /// Weeks in the trace.
    pub weeks: i64,
    /// The weekday of week 3 that is a holiday.
    pub holiday: Weekday,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            zone: "Europe/Berlin".into(),
            morning_peak: 3.0,
            afternoon_peak: 2.0,
            daytime: 0.3,
            quiet: 0.01,
            bursts_per_week: 2.0,
            burst_size: 12,
            mean_hold_secs: 480.0,
            weeks: 4,
            holiday: Weekday::Wednesday,
        }
    }
}

/// One claim of the trace.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// When it is created.
    pub at: Timestamp,
    /// How long it holds its Pod once bound.
    pub hold: SignedDuration,
}

/// The generated trace, claims in order of creation.
pub struct Trace {
    pub start: Timestamp,
    pub end: Timestamp,
    pub claims: Vec<Claim>,
    pub bursts: usize,
}

fn bump(hour: f64, centre: f64, width: f64) -> f64 {
    let x = (hour - centre) / width;
    (-0.5 * x * x).exp()
}

impl Shape {
    /// The start: Monday 00:00 of the first week, in the zone.
    pub fn start(&self) -> Timestamp {
        let tz = TimeZone::get(&self.zone).expect("a known time zone");
        jiff::civil::date(2026, 11, 2)
            .at(0, 0, 0, 0)
            .to_zoned(tz)
            .expect("a civil time in the zone")
            .timestamp()
    }

    /// Claims per minute at `t`.
    pub fn rate(&self, t: Timestamp, tz: &TimeZone, start: Timestamp) -> f64 {
        let local = tz.to_datetime(t);
        let week = t.duration_since(start).as_hours() / (24 * 7);
        let weekday = local.date().weekday();
        let weekend = matches!(weekday, Weekday::Saturday | Weekday::Sunday);
        let holiday = week == 2 && weekday == self.holiday;
        if weekend || holiday {
            return self.quiet;
        }
        let hour = f64::from(local.hour()) + f64::from(local.minute()) / 60.0;
        let working = if (7.0..19.0).contains(&hour) {
            self.daytime
        } else {
            self.quiet
        };
        working
            + self.morning_peak * bump(hour, 9.25, 0.5)
            + self.afternoon_peak * bump(hour, 14.25, 0.6)
    }

    /// The trace for `seed`: non-homogeneous Poisson arrivals by thinning, plus bursts.
    pub fn generate(&self, seed: u64) -> Trace {
        let tz = TimeZone::get(&self.zone).expect("a known time zone");
        let start = self.start();
        let end = start + SignedDuration::from_hours(24 * 7 * self.weeks);
        let mut rng = Rng::new(seed);
        let top = self.morning_peak + self.afternoon_peak + self.daytime + self.quiet;
        let mut claims = Vec::new();
        let mut t = start;
        loop {
            t += SignedDuration::from_secs_f64(rng.exponential(60.0 / top));
            if t >= end {
                break;
            }
            if rng.uniform() * top < self.rate(t, &tz, start) {
                let hold = SignedDuration::from_secs_f64(rng.exponential(self.mean_hold_secs));
                claims.push(Claim { at: t, hold });
            }
        }
        let mut bursts = 0;
        let span = end.duration_since(start).as_secs_f64();
        let mut b = start;
        loop {
            b += SignedDuration::from_secs_f64(
                rng.exponential(7.0 * 86_400.0 / self.bursts_per_week.max(0.01)),
            );
            if b >= end || b.duration_since(start).as_secs_f64() > span {
                break;
            }
            bursts += 1;
            for _ in 0..self.burst_size {
                let at = b + SignedDuration::from_secs_f64(rng.uniform() * 60.0);
                let hold = SignedDuration::from_secs_f64(rng.exponential(self.mean_hold_secs));
                claims.push(Claim { at, hold });
            }
        }
        claims.sort_by_key(|c| c.at);
        claims.retain(|c| c.at < end);
        Trace {
            start,
            end,
            claims,
            bursts,
        }
    }
}
