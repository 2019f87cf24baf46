//! What the status page shows of an upstream: each target's health, load, counts and response
//! times, read from the same health records and metric handles the requests update.

use serde::Serialize;

use super::{Group, Pick, Target};

/// An upstream, as `/status.json` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamView {
    /// Its name (`default` for `[upstream]`).
    pub name: String,
    /// `round-robin`, `least-requests` or `hash`.
    pub balance: &'static str,
    /// Whether its targets are asked by active health checks.
    pub health_checked: bool,
    /// Its targets.
    pub targets: Vec<TargetView>,
}

/// One target of an upstream, as `/status.json` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetView {
    /// `host:port`.
    pub target: String,
    /// `up`, `ejected` (by its failures) or `down` (by its health checks).
    pub state: &'static str,
    /// Seconds left of an ejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub back_in_seconds: Option<f64>,
    /// Requests sent to it and waiting for their response head (counted with
    /// `least-requests`; 0 otherwise).
    pub waiting: usize,
    /// Response heads so far (`sluice_upstream_responses_total`, every class).
    pub responses: u64,
    /// Failed requests so far (`sluice_upstream_failures_total`, every kind).
    pub failures: u64,
    /// Times it was ejected.
    pub ejections: u64,
    /// The bucket bounds, in milliseconds, that the median and the 99th percentile of its
    /// response times are under (`sluice_upstream_response_seconds`); absent before its first
    /// response, or above the last bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ms_at_most: Option<f64>,
    /// See `p50_ms_at_most`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms_at_most: Option<f64>,
}

impl Group {
    /// What the status page shows of this group at `now`.
    pub(super) fn view(&self, now: u64) -> UpstreamView {
        UpstreamView {
            name: self.name.to_string(),
            balance: match self.pick {
                Pick::RoundRobin => "round-robin",
                Pick::LeastRequests => "least-requests",
                Pick::Hash(_) => "hash",
            },
            health_checked: self.check.is_some(),
            targets: self.targets.iter().map(|t| t.view(now)).collect(),
        }
    }
}

impl Target {
    fn view(&self, now: u64) -> TargetView {
        let (state, left) = self.health.state(now);
        let c = &self.counts;
        let ms = |ns: u64| ns as f64 / 1e6;
        TargetView {
            target: self.authority.clone(),
            state,
            back_in_seconds: left.map(|ns| ns as f64 / 1e9),
            waiting: self.health.waiting.load(std::sync::atomic::Ordering::Relaxed),
            responses: c.responses.iter().map(|r| r.get()).sum(),
            failures: c.failures.iter().map(|f| f.get()).sum(),
            ejections: c.ejections.get(),
            p50_ms_at_most: c.latency.quantile_bound(0.5).map(ms),
            p99_ms_at_most: c.latency.quantile_bound(0.99).map(ms),
        }
    }
}
