//! The summary of a replay: what was sent, what came back, how long it took.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use sluice_sim::LaneResults;

use super::{Fate, Live, admitted};

/// How the replay was run, for the summary's header.
pub(super) struct Settings {
    pub(super) url: String,
    pub(super) retry: bool,
    pub(super) concurrency: u32,
}

/// What a replay reports, in the JSON shape (`--format json`).
#[derive(Debug, Serialize)]
pub(super) struct Summary {
    /// The target.
    url: String,
    /// Arrivals to replay (after `--requests`).
    requests: usize,
    /// Requests sent.
    sent: usize,
    /// Final responses by status code.
    statuses: BTreeMap<String, u64>,
    /// Calls that ended without a response, by kind (connect, timeout, other).
    errors: BTreeMap<&'static str, u64>,
    /// Sent, and still in flight at the deadline.
    unfinished: usize,
    /// Never sent: the deadline came first.
    not_sent: usize,
    /// Whether sluice-client's retry policy was on.
    retry: bool,
    /// Attempts after the first, over all calls.
    retries: u64,
    /// 429 answers received, retried ones included.
    rate_limited: u64,
    /// Requests in flight at most.
    concurrency: u32,
    /// From time zero to the end of the run.
    elapsed_ms: f64,
    /// Of the calls that finished, from sending to the end of the body (retries included).
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<Latency>,
    /// The longest a request was sent after its arrival time (waiting for a slot, say).
    max_lag_ms: f64,
    /// The same arrivals in virtual time, with `--algorithm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    simulated: Option<Simulated>,
}

/// Latency percentiles (nearest rank), in milliseconds.
#[derive(Debug, Serialize)]
struct Latency {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

/// The simulated policy's decisions beside the server's.
#[derive(Debug, Serialize)]
struct Simulated {
    algorithm: String,
    keyed_by: String,
    allowed: u64,
    rejected: u64,
    /// Requests where the server's decision (a response other than 429 and 503 counts as
    /// admitted) equals the simulation's.
    agreeing: u64,
}

fn ms(d: Duration) -> f64 {
    (d.as_nanos() as f64 / 1_000.0).round() / 1_000.0
}

/// The nearest-rank `p`-th percentile of sorted `v` (not empty).
fn percentile(v: &[Duration], p: u32) -> Duration {
    let rank = (v.len() * p as usize).div_ceil(100).max(1);
    v[rank - 1]
}

impl Summary {
    pub(super) fn new(settings: Settings, live: &Live, simulated: Option<&LaneResults>) -> Self {
        let mut statuses = BTreeMap::new();
        let mut errors = BTreeMap::new();
        let (mut retries, mut rate_limited) = (0u64, 0u64);
        let mut latencies = Vec::new();
        let mut lag = Duration::ZERO;
        let (mut unfinished, mut not_sent) = (0, 0);
        for fate in &live.fates {
            match fate {
                Fate::NotSent => not_sent += 1,
                Fate::Unfinished => unfinished += 1,
                Fate::Done(call) => {
                    match (call.status, call.error_kind) {
                        (Some(s), _) => *statuses.entry(s.to_string()).or_insert(0) += 1,
                        (None, kind) => *errors.entry(kind.unwrap_or("other")).or_insert(0) += 1,
                    }
                    retries += u64::from(call.retries);
                    rate_limited += u64::from(call.rate_limited);
                    latencies.push(call.latency);
                    lag = lag.max(call.lag);
                }
            }
        }
        latencies.sort_unstable();
        let latency_ms = (!latencies.is_empty()).then(|| Latency {
            p50: ms(percentile(&latencies, 50)),
            p90: ms(percentile(&latencies, 90)),
            p99: ms(percentile(&latencies, 99)),
            max: ms(latencies[latencies.len() - 1]),
        });
        let simulated = simulated.map(|lane| Simulated {
            algorithm: lane.lane.algorithm.trim_start_matches("simulated ").to_string(),
            keyed_by: lane.lane.scope.to_string(),
            allowed: lane.admitted,
            rejected: lane.rejected,
            agreeing: live.fates.iter().zip(&lane.allowed).filter(|(f, a)| admitted(f) == **a).count() as u64,
        });
        Self {
            url: settings.url,
            requests: live.fates.len(),
            sent: live.fates.len() - not_sent,
            statuses,
            errors,
            unfinished,
            not_sent,
            retry: settings.retry,
            retries,
            rate_limited,
            concurrency: settings.concurrency,
            elapsed_ms: ms(live.elapsed),
            latency_ms,
            max_lag_ms: ms(lag),
            simulated,
        }
    }

    /// The summary for people.
    pub(super) fn to_table(&self) -> String {
        let mut t = String::new();
        let retry = if self.retry { "with retries" } else { "no retries" };
        let _ = writeln!(
            t,
            "replay of {} requests to {} in {:.3} s (concurrency {}, {retry})",
            self.requests,
            self.url,
            self.elapsed_ms / 1000.0,
            self.concurrency
        );
        let _ = writeln!(
            t,
            "sent {}, unfinished at the deadline {}, never sent {}",
            self.sent, self.unfinished, self.not_sent
        );
        let _ = writeln!(t, "\n{:<14} {:>8}", "status", "count");
        for (status, n) in &self.statuses {
            let _ = writeln!(t, "{status:<14} {n:>8}");
        }
        for (kind, n) in &self.errors {
            let _ = writeln!(t, "{:<14} {n:>8}", format!("{kind} error"));
        }
        let _ = writeln!(t, "\nretries {}, 429 answers received {}", self.retries, self.rate_limited);
        if let Some(l) = &self.latency_ms {
            let _ = writeln!(t, "latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}", l.p50, l.p90, l.p99, l.max);
        }
        let _ = writeln!(t, "sent at most {:.3} ms after the arrival time", self.max_lag_ms);
        if let Some(s) = &self.simulated {
            let _ = writeln!(
                t,
                "simulated {} per {}: {} allowed, {} rejected; live and simulated agree on {} of {} requests",
                s.algorithm, s.keyed_by, s.allowed, s.rejected, s.agreeing, self.requests
            );
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50), Duration::from_millis(5));
        assert_eq!(percentile(&v, 90), Duration::from_millis(9));
        assert_eq!(percentile(&v, 99), Duration::from_millis(10));
        assert_eq!(percentile(&v[..1], 50), Duration::from_millis(1));
        assert_eq!(ms(Duration::from_nanos(1_234_567)), 1.235);
    }
}
