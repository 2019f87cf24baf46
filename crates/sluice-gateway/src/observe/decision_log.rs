//! Decision log lines: a sampled share of admitted decisions and every denial up to a rate cap.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use sluice_core::{Algorithm, Clock, GcraState, TokenBucket};
use sluice_store::KeyHash;

/// The tracing target of decision lines.
pub const TARGET: &str = "sluice::decision";

/// Where sampling draws come from: uniform `u64`s. Injected so tests are deterministic.
pub trait SampleSource: Send + Sync + fmt::Debug {
    /// The next draw.
    fn next_u64(&self) -> u64;
}

/// The thread-local generator of `rand`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadRandom;

impl SampleSource for ThreadRandom {
    fn next_u64(&self) -> u64 {
        rand::random()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sampling {
    Never,
    Always,
    /// Log when a draw is below this.
    Below(u64),
}

impl Sampling {
    fn of(share: f64) -> Self {
        if share.is_nan() || share <= 0.0 {
            Sampling::Never
        } else if share >= 1.0 {
            Sampling::Always
        } else {
            // share * 2^64, exact enough: the error is far below one draw in 2^40.
            Sampling::Below((share * 18_446_744_073_709_551_616.0) as u64)
        }
    }
}

/// The policy of `[decision_log]`: which decisions get a line.
///
/// Admitted decisions are logged with probability `sample` (one draw per admitted request, none
/// when `sample` is 0 or 1). Denials (and shadow denials and store errors) are all logged, up
/// to `denials_per_second`: a token bucket of that rate, holding one second's worth, decides, so
/// an attack cannot flood the logs; what it refuses is counted in
/// `sluice_decision_log_dropped_total`.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::{ManualClock, NANOS_PER_SEC};
/// use sluice_gateway::observe::{DecisionLog, ThreadRandom};
/// use prometheus_client::metrics::counter::Counter;
///
/// let clock = Arc::new(ManualClock::new(0));
/// let dropped = Counter::default();
/// let config = sluice_config::DecisionLog { sample: 0.0, denials_per_second: 2.0 };
/// let log = DecisionLog::new(&config, clock.clone(), Arc::new(ThreadRandom), dropped.clone());
/// let logged = (0..5).filter(|_| log.admit_denial()).count();
/// assert_eq!((logged, dropped.get()), (2, 3));
/// clock.advance(NANOS_PER_SEC / 2); // one more token
/// assert!(log.admit_denial());
/// assert!(!log.sample_admitted());
/// ```
pub struct DecisionLog {
    /// Which admitted decisions get a line.
    sampling: Sampling,
    /// The denial cap (the core's token bucket); `None` logs no denial.
    cap: Option<TokenBucket>,
    /// The cap's one bucket.
    cap_state: Mutex<GcraState>,
    /// Until when (clock nanoseconds) the cap is known to be spent: it refused a line then and
    /// told how long until its next one.
    cap_shut_until: AtomicU64,
    /// Time for the cap.
    clock: Arc<dyn Clock>,
    /// Draws for sampling.
    random: Arc<dyn SampleSource>,
    /// Counts the denial lines the cap refused.
    dropped: Counter,
}

impl fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecisionLog").field("sampling", &self.sampling).field("cap", &self.cap).finish_non_exhaustive()
    }
}

impl DecisionLog {
    /// The policy of `config`, reading `clock` for the cap and `random` for sampling, and
    /// counting dropped lines in `dropped`.
    pub fn new(
        config: &sluice_config::DecisionLog,
        clock: Arc<dyn Clock>,
        random: Arc<dyn SampleSource>,
        dropped: Counter,
    ) -> Self {
        let rate = config.denials_per_second;
        // A bucket of one second's worth (at least one line), refilled at the rate. A rate too
        // small to express (or 0) logs no denial at all.
        let cap = (rate.is_finite() && rate > 0.0)
            .then(|| TokenBucket::new(rate.ceil().max(1.0) as u64, rate).ok())
            .flatten();
        Self {
            sampling: Sampling::of(config.sample),
            cap,
            cap_state: Mutex::new(GcraState::default()),
            cap_shut_until: AtomicU64::new(0),
            clock,
            random,
            dropped,
        }
    }

    /// Whether this admitted decision gets a line.
    pub fn sample_admitted(&self) -> bool {
        match self.sampling {
            Sampling::Never => false,
            Sampling::Always => true,
            Sampling::Below(t) => self.random.next_u64() < t,
        }
    }

    /// Whether this denial gets a line: true while under the cap; a refusal is counted as dropped.
    pub fn admit_denial(&self) -> bool {
        let admitted = self.cap.is_some_and(|bucket| {
            let now = self.clock.now();
            // Under a flood nearly every denial finds the cap spent: known without the lock
            // (which every worker thread would take for every denial) until its next line.
            if now < self.cap_shut_until.load(Ordering::Relaxed) {
                return false;
            }
            let mut state = self.cap_state.lock().unwrap_or_else(|e| e.into_inner());
            match bucket.check(&mut state, now, 1) {
                Ok(d) if d.allowed => true,
                Ok(d) => {
                    self.cap_shut_until.store(now.saturating_add(d.retry_after), Ordering::Relaxed);
                    false
                }
                Err(_) => false,
            }
        });
        if !admitted {
            self.dropped.inc();
        }
        admitted
    }
}

/// One decision log line. Built only for decisions that are logged; it holds the key's hash,
/// never the key.
#[derive(Debug, Clone, Copy)]
pub struct DecisionLine<'a> {
    /// The configured route name (or `/v1/check` for the decision API).
    pub route: &'a str,
    /// The policy described: for a denial, the limit that denied.
    pub policy: &'a str,
    /// Its algorithm.
    pub algorithm: &'static str,
    /// What the key was built from: `ip`, `header`, `user`, `json`, ..., `absent`, `api`.
    pub key_type: &'static str,
    /// The keyed hash of the key.
    pub key: KeyHash,
    /// `allowed`, `denied`, `shadow_denied`, `soft_over` or `error`.
    pub decision: &'static str,
    /// The limit's size.
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// When denied, when the same request would be admitted (ms, rounded up); else 0.
    pub retry_after_ms: u64,
    /// The request's cost under this limit.
    pub cost: u64,
    /// The store's kind.
    pub store: &'static str,
    /// How long the store took, microseconds.
    pub store_latency_us: u64,
    /// The response status; 0 when the connection was closed without one (`on_deny = "drop"`).
    pub status: u16,
    /// Whether the policy described is a shadow policy.
    pub shadow: bool,
    /// For `error`, or a failure mode's verdict: the kind of store error.
    pub error: Option<&'static str>,
    /// For a verdict the store's failure mode gave instead of the store: `fail-open` or `local`.
    pub degraded: Option<&'static str>,
}

/// `bytes` in lower-case hex, as `KeyHash::to_hex` writes them, from a table instead of the
/// formatter (which took about 9,000 instructions for a key, a quarter of a line's cost).
fn hex(bytes: &[u8; 16]) -> HexKey {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    HexKey(out)
}

/// A key hash in hex.
struct HexKey([u8; 32]);

impl HexKey {
    fn as_str(&self) -> &str {
        // Hex digits only: always ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl DecisionLine<'_> {
    /// Writes the line (target [`TARGET`], level INFO).
    pub fn emit(&self) {
        self.emit_with(None);
    }

    /// Writes the line with the id of the request it decided (`request_id`, the gateway's
    /// `X-Request-Id`).
    pub fn emit_with(&self, request_id: Option<&str>) {
        tracing::info!(
            target: TARGET,
            request_id,
            route = self.route,
            policy = self.policy,
            algorithm = self.algorithm,
            key_type = self.key_type,
            key_hash = hex(&self.key.0).as_str(),
            decision = self.decision,
            limit = self.limit,
            remaining = self.remaining,
            retry_after_ms = self.retry_after_ms,
            cost = self.cost,
            store = self.store,
            store_latency_us = self.store_latency_us,
            status = self.status,
            shadow = self.shadow,
            error = self.error,
            degraded = self.degraded,
            "decision"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn key_hashes_are_written_as_the_store_writes_them() {
        for key in [[0u8; 16], [0xff; 16], std::array::from_fn(|i| (i as u8).wrapping_mul(37))] {
            assert_eq!(super::hex(&key).as_str(), sluice_store::KeyHash(key).to_hex());
        }
    }

    use sluice_core::{ManualClock, NANOS_PER_SEC};

    use super::*;

    /// Replays a fixed cycle of draws.
    #[derive(Debug)]
    struct Cycle(Vec<u64>, AtomicUsize);

    impl SampleSource for Cycle {
        fn next_u64(&self) -> u64 {
            let i = self.1.fetch_add(1, Ordering::Relaxed);
            self.0[i % self.0.len()]
        }
    }

    fn log(sample: f64, rate: f64, draws: Vec<u64>) -> (DecisionLog, Arc<ManualClock>, Counter) {
        let clock = Arc::new(ManualClock::new(1_000 * NANOS_PER_SEC));
        let dropped = Counter::default();
        let config = sluice_config::DecisionLog { sample, denials_per_second: rate };
        let l = DecisionLog::new(&config, clock.clone(), Arc::new(Cycle(draws, AtomicUsize::new(0))), dropped.clone());
        (l, clock, dropped)
    }

    #[test]
    fn a_draw_below_the_share_of_the_range_is_sampled() {
        // A quarter: draws below 2^62 are logged.
        let (l, _, _) = log(0.25, 1.0, vec![0, (1 << 62) - 1, 1 << 62, u64::MAX]);
        let got: Vec<bool> = (0..4).map(|_| l.sample_admitted()).collect();
        assert_eq!(got, [true, true, false, false]);
    }

    #[test]
    fn sampling_none_and_all_draw_nothing() {
        let (never, _, _) = log(0.0, 1.0, vec![0]);
        let (always, _, _) = log(1.0, 1.0, vec![u64::MAX]);
        assert!((0..100).all(|_| !never.sample_admitted()));
        assert!((0..100).all(|_| always.sample_admitted()));
        assert_eq!(never.random.next_u64(), 0, "no draw was taken");
    }

    #[test]
    fn the_cap_admits_one_seconds_worth_then_the_rate_and_counts_the_rest() {
        let (l, clock, dropped) = log(0.0, 100.0, vec![0]);
        // 10,000 denials over one second, evenly: 100 at once, then one per 10 ms.
        let mut logged = 0;
        for _ in 0..10_000 {
            logged += usize::from(l.admit_denial());
            clock.advance(100_000);
        }
        // The last denial comes 0.9999 s after the first: 99 tokens refilled.
        assert_eq!(logged, 100 + 99);
        assert_eq!(dropped.get(), 10_000 - 199);
    }

    #[test]
    fn a_zero_rate_logs_no_denial() {
        let (l, _, dropped) = log(0.0, 0.0, vec![0]);
        assert!(!l.admit_denial());
        assert_eq!(dropped.get(), 1);
    }

    #[test]
    fn a_fractional_rate_still_logs_one_line() {
        let (l, clock, _) = log(0.0, 0.5, vec![0]);
        assert!(l.admit_denial());
        assert!(!l.admit_denial());
        clock.advance(2 * NANOS_PER_SEC);
        assert!(l.admit_denial());
    }
}
