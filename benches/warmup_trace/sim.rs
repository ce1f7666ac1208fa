//! One Pool under the trace, on a simulated clock: claims bind FIFO to idle Pods, a claim
//! that finds none waits (a cold claim) for the next Pod to become Ready, a released claim's
//! Pod is replaced (`recyclePolicy: Replace`), Pods take a random start time to be Ready,
//! and — for the autoscaled systems — the autoscaler's pure `decide` runs after every
//! change and at its own requeue instant, exactly as the pool reconciler feeds it, with its
//! decisions applied at once (the writes always succeed, the caches never lag).

use std::collections::VecDeque;

use jiff::{SignedDuration, Timestamp};
use moonin::api::sandbox::{
    ClaimHistory, PoolAutoScalingStatus, PredictivePolicy, ScaleDownPolicy, ScaleUpPolicy,
    ScalingGroup,
};
use moonin::sandbox::autoscaler::{
    Admission, Arrival, ForecastInput, InFlight, PodState, PoolPod, PoolView, QueueStats,
    Recommendation, RecommendationHistory, ScaleDownMark, Snapshot, decide,
    forecast::{self, Geometry},
};

use crate::trace::{Rng, Trace};

/// What runs the Pool.
#[derive(Debug, Clone)]
pub enum System {
    /// The autoscaler, reactive and proactive only.
    Reactive,
    /// The autoscaler with `scaleUpPolicy.predictive`.
    Predictive(PredictivePolicy),
    /// No autoscaler: a Pool of this many Pods.
    Static(i32),
}

/// Pod start times: uniform in `[min, max]` seconds.
#[derive(Debug, Clone, Copy)]
pub struct Starts {
    pub min_secs: f64,
    pub max_secs: f64,
}

/// What one run measured.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Claims that found no idle Pod, per week.
    pub cold_by_week: Vec<usize>,
    /// Each claim's wait for a Pod, seconds.
    pub waits: Vec<f64>,
    /// Pod-hours of Pods not bound to a claim (starting or idle), per week.
    pub idle_hours_by_week: Vec<f64>,
    /// Pod-hours in all, per week.
    pub pod_hours_by_week: Vec<f64>,
    /// Pods created.
    pub created: usize,
    /// Decisions taken.
    pub decisions: usize,
    /// `PredictedScaleUp` Events.
    pub predicted_scale_ups: usize,
}

#[derive(Debug, Clone)]
enum Phase {
    Starting { ready_at: Timestamp },
    Idle { since: Timestamp },
    Claimed { until: Timestamp },
}

#[derive(Debug, Clone)]
struct Pod {
    id: u64,
    created: Timestamp,
    ready_at: Timestamp,
    phase: Phase,
    mark: Option<ScaleDownMark>,
}

/// The autoscaling group of the runs (the API's defaults but a minimum of 1 and room to
/// grow).
pub fn group(predictive: Option<PredictivePolicy>) -> ScalingGroup {
    ScalingGroup {
        name: "trace".into(),
        enabled: true,
        min_replicas: 1,
        max_replicas: 500,
        scale_up_policy: ScaleUpPolicy {
            predictive,
            ..ScaleUpPolicy::default()
        },
        scale_down_policy: ScaleDownPolicy::default(),
    }
}

struct Pool {
    system: System,
    now: Timestamp,
    start: Timestamp,
    replicas: i32,
    pods: Vec<Pod>,
    queue: VecDeque<(Timestamp, SignedDuration)>,
    next_id: u64,
    status: PoolAutoScalingStatus,
    history: Option<ClaimHistory>,
    recommendations: RecommendationHistory,
    requeue_at: Option<Timestamp>,
    last_claim_at: Option<Timestamp>,
    arrivals: Vec<Timestamp>,
    starts: Starts,
    rng: Rng,
    out: Outcome,
}

fn week_of(start: Timestamp, t: Timestamp) -> usize {
    usize::try_from(t.duration_since(start).as_hours() / (24 * 7)).unwrap_or(0)
}

impl Pool {
    fn create(&mut self) {
        let secs = self.starts.min_secs
            + self.rng.uniform() * (self.starts.max_secs - self.starts.min_secs);
        let ready_at = self.now + SignedDuration::from_secs_f64(secs);
        self.next_id += 1;
        self.pods.push(Pod {
            id: self.next_id,
            created: self.now,
            ready_at,
            phase: Phase::Starting { ready_at },
            mark: None,
        });
        self.out.created += 1;
    }

    /// Pods become Ready, claims end (their Pods deleted), queued claims bind, the Pool is
    /// brought to its size.
    fn settle(&mut self) {
        let now = self.now;
        self.pods
            .retain(|p| !matches!(p.phase, Phase::Claimed { until } if until <= now));
        for p in &mut self.pods {
            if let Phase::Starting { ready_at } = p.phase
                && ready_at <= now
            {
                p.phase = Phase::Idle { since: ready_at };
            }
        }
        while !self.queue.is_empty() {
            let Some(pod) = self
                .pods
                .iter_mut()
                .filter(|p| matches!(p.phase, Phase::Idle { .. }) && p.mark.is_none())
                .min_by_key(|p| p.id)
            else {
                break;
            };
            let (arrived, hold) = self.queue.pop_front().expect("not empty");
            pod.phase = Phase::Claimed { until: now + hold };
            self.out
                .waits
                .push(now.duration_since(arrived).as_secs_f64());
            self.last_claim_at = Some(now);
        }
        // The pool plan: marked Pods go first, then it creates up to `spec.replicas`.
        self.pods.retain(|p| p.mark.is_none());
        let live = i32::try_from(self.pods.len()).unwrap_or(i32::MAX);
        for _ in live..self.replicas {
            self.create();
        }
    }

    fn arrive(&mut self, at: Timestamp, hold: SignedDuration) {
        let idle = self
            .pods
            .iter()
            .any(|p| matches!(p.phase, Phase::Idle { .. }) && p.mark.is_none());
        if !idle || !self.queue.is_empty() {
            let week = week_of(self.start, at);
            self.out.cold_by_week[week] += 1;
        }
        self.queue.push_back((at, hold));
        self.arrivals.push(at);
    }

    fn snapshot(&self, group: ScalingGroup, predictive: Option<&PredictivePolicy>) -> Snapshot {
        let pods = self.pods.iter().map(|p| self.pool_pod(p)).collect();
        let forecast = predictive.map(|policy| {
            let geometry = Geometry::of(policy);
            let since = forecast::counting_since(&geometry, self.history.as_ref(), self.now);
            ForecastInput {
                geometry,
                enabled: policy.enabled,
                history: self.history.clone(),
                arrivals: self
                    .arrivals
                    .iter()
                    .filter(|t| **t >= since)
                    .map(|t| Arrival::whole(*t))
                    .collect(),
                starts: self
                    .pods
                    .iter()
                    .filter(|p| p.ready_at <= self.now)
                    .map(|p| p.ready_at.duration_since(p.created))
                    .collect(),
            }
        });
        Snapshot {
            pool: PoolView {
                name: "trace".into(),
                replicas: self.replicas,
                auto_scaling: self.status.clone(),
            },
            group: Some(group),
            siblings: Vec::new(),
            queue: QueueStats {
                pending: i32::try_from(self.queue.len()).unwrap_or(i32::MAX),
                oldest_pending_since: self.queue.front().map(|(t, _)| *t),
            },
            pods,
            in_flight: InFlight::default(),
            last_claim_at: self.last_claim_at,
            admission: Admission::default(),
            history: self.recommendations.clone(),
            forecast,
        }
    }

    fn pool_pod(&self, p: &Pod) -> PoolPod {
        let (state, idle_since) = match p.phase {
            Phase::Starting { .. } => (PodState::Starting, None),
            Phase::Idle { since } => (PodState::Idle, Some(since)),
            Phase::Claimed { .. } => (PodState::Claimed, None),
        };
        let up = !matches!(state, PodState::Starting);
        PoolPod {
            name: format!("pod-{}", p.id),
            uid: p.id.to_string(),
            resource_version: "1".into(),
            state,
            ready: up,
            has_ip: up,
            idle_since,
            mark: p.mark.clone(),
        }
    }

    /// One autoscaler cycle, its decision applied.
    fn decide(&mut self) {
        let (group, predictive) = match &self.system {
            System::Static(_) => return,
            System::Reactive => (group(None), None),
            System::Predictive(p) => (group(Some(p.clone())), Some(p.clone())),
        };
        let window = SignedDuration::from_secs(i64::from(
            group.scale_down_policy.stabilization_window_seconds,
        ));
        let snap = self.snapshot(group, predictive.as_ref());
        let d = decide(&snap, self.now);
        self.out.decisions += 1;
        self.out.predicted_scale_ups += d
            .events
            .iter()
            .filter(|e| e.reason == "PredictedScaleUp")
            .count();
        for m in &d.marks {
            if let Some(p) = self.pods.iter_mut().find(|p| p.id.to_string() == m.pod.uid) {
                p.mark = Some(m.mark.clone());
            }
        }
        for u in &d.unmarks {
            if let Some(p) = self.pods.iter_mut().find(|p| p.id.to_string() == u.pod.uid) {
                p.mark = None;
            }
        }
        self.replicas = d.desired_replicas;
        self.status = d.status.clone();
        if let Some(h) = d.claim_history {
            let open = h.open_slot_start.0;
            self.arrivals.retain(|t| *t >= open);
            self.history = Some(h);
        }
        self.recommendations.record(
            Recommendation {
                at: self.now,
                replicas: d.recommendation.replicas,
            },
            window,
        );
        self.requeue_at = Some(d.requeue_at);
    }

    /// Pod-hours from `self.now` to `to`, the Pool unchanged in between.
    fn account(&mut self, to: Timestamp) {
        let hours = to.duration_since(self.now).as_secs_f64() / 3600.0;
        if hours <= 0.0 {
            return;
        }
        let week = week_of(self.start, self.now).min(self.out.pod_hours_by_week.len() - 1);
        let all = self.pods.len() as f64;
        let unbound = self
            .pods
            .iter()
            .filter(|p| !matches!(p.phase, Phase::Claimed { .. }))
            .count() as f64;
        self.out.pod_hours_by_week[week] += all * hours;
        self.out.idle_hours_by_week[week] += unbound * hours;
    }

    /// The next instant something happens on its own: a Pod Ready, a claim ending, the
    /// autoscaler's requeue.
    fn next_event(&self) -> Option<Timestamp> {
        let pods = self.pods.iter().filter_map(|p| match p.phase {
            Phase::Starting { ready_at } => Some(ready_at),
            Phase::Claimed { until } => Some(until),
            Phase::Idle { .. } => None,
        });
        pods.chain(self.requeue_at).filter(|t| *t > self.now).min()
    }
}

/// Runs the trace through one system.
pub fn run(trace: &Trace, system: System, starts: Starts, seed: u64) -> Outcome {
    let weeks = usize::try_from(trace.end.duration_since(trace.start).as_hours() / (24 * 7))
        .unwrap_or(1)
        .max(1);
    let replicas = match system {
        System::Static(n) => n,
        _ => 1,
    };
    let mut pool = Pool {
        system,
        now: trace.start,
        start: trace.start,
        replicas,
        pods: Vec::new(),
        queue: VecDeque::new(),
        next_id: 0,
        status: PoolAutoScalingStatus::default(),
        history: None,
        recommendations: RecommendationHistory::default(),
        requeue_at: None,
        last_claim_at: None,
        arrivals: Vec::new(),
        starts,
        rng: Rng::new(seed),
        out: Outcome {
            cold_by_week: vec![0; weeks],
            idle_hours_by_week: vec![0.0; weeks],
            pod_hours_by_week: vec![0.0; weeks],
            ..Outcome::default()
        },
    };
    // The Pool starts warm at its size.
    for _ in 0..replicas {
        pool.create();
    }
    for p in &mut pool.pods {
        p.ready_at = trace.start;
        p.phase = Phase::Idle { since: trace.start };
    }
    pool.decide();
    let mut claims = trace.claims.iter().peekable();
    loop {
        let next_claim = claims.peek().map(|c| c.at);
        let next = match (next_claim, pool.next_event()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => break,
            },
        };
        if next >= trace.end {
            pool.account(trace.end);
            break;
        }
        pool.account(next);
        pool.now = next;
        pool.settle();
        while let Some(c) = claims.next_if(|c| c.at <= next) {
            pool.arrive(c.at, c.hold);
        }
        pool.settle();
        pool.decide();
        pool.settle();
    }
    pool.out
}
