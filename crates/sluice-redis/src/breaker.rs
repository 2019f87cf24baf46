//! The circuit breaker: stop waiting on a Redis that keeps failing, probe it now and then.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::options::BreakerOptions;

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go to Redis.
    Closed,
    /// Calls take the failure path at once; a probe is due when the cool-down ends.
    Open,
    /// One probe call is in flight; the others take the failure path.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half-open`, for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Inner {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

/// Consecutive failures open it; after the cool-down one probe decides whether it closes.
#[derive(Debug)]
pub(crate) struct Breaker {
    options: BreakerOptions,
    inner: Mutex<Inner>,
    opened: AtomicU64,
}

/// Whether a call may go to Redis.
#[derive(Debug)]
pub(crate) enum Admission<'a> {
    /// Go ahead, and report how it went.
    Call(Permit<'a>),
    /// Do not call; the breaker expects to probe again in this long.
    Reject(Duration),
}

/// The right to make one call; report its outcome with [`Permit::success`] or [`Permit::failure`].
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    breaker: &'a Breaker,
    probe: bool,
    reported: bool,
}

impl Permit<'_> {
    /// The call succeeded.
    pub fn success(mut self) {
        self.reported = true;
        self.breaker.record(self.probe, true);
    }

    /// The call failed or timed out.
    pub fn failure(mut self) {
        self.reported = true;
        self.breaker.record(self.probe, false);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // A probe abandoned by its caller proved nothing: let the next call probe.
        if self.probe && !self.reported {
            *self.breaker.lock() = Inner::Open { until: Instant::now() };
        }
    }
}

impl Breaker {
    pub fn new(options: BreakerOptions) -> Self {
        Self { options, inner: Mutex::new(Inner::Closed { failures: 0 }), opened: AtomicU64::new(0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few words, valid at every point: a panic elsewhere cannot corrupt it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks to call Redis now.
    pub fn admit(&self) -> Admission<'_> {
        let mut inner = self.lock();
        match *inner {
            Inner::Closed { .. } => Admission::Call(Permit { breaker: self, probe: false, reported: false }),
            Inner::Open { until } => {
                let now = Instant::now();
                if now < until {
                    Admission::Reject(until - now)
                } else {
                    *inner = Inner::HalfOpen;
                    Admission::Call(Permit { breaker: self, probe: true, reported: false })
                }
            }
            Inner::HalfOpen => Admission::Reject(Duration::ZERO),
        }
    }

    fn record(&self, probe: bool, ok: bool) {
        let mut inner = self.lock();
        let open = |inner: &mut Inner| {
            *inner = Inner::Open { until: Instant::now() + self.options.cool_down };
            self.opened.fetch_add(1, Ordering::Relaxed);
        };
        match (*inner, probe, ok) {
            (_, true, true) => *inner = Inner::Closed { failures: 0 },
            (_, true, false) => open(&mut inner),
            (Inner::Closed { .. }, false, true) => *inner = Inner::Closed { failures: 0 },
            (Inner::Closed { failures }, false, false) => {
                let failures = failures + 1;
                if failures >= self.options.failures_to_open {
                    open(&mut inner);
                } else {
                    *inner = Inner::Closed { failures };
                }
            }
            // Calls that started before the breaker opened: the probe decides, not them.
            (Inner::Open { .. } | Inner::HalfOpen, false, _) => {}
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        match *self.lock() {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen => BreakerState::HalfOpen,
        }
    }

    /// How long until a probe may close it: the rest of the cool-down when open, zero when a
    /// probe is in flight or due, `None` when closed.
    pub fn until_probe(&self) -> Option<Duration> {
        match *self.lock() {
            Inner::Closed { .. } => None,
            Inner::Open { until } => Some(until.saturating_duration_since(Instant::now())),
            Inner::HalfOpen => Some(Duration::ZERO),
        }
    }

    /// How many times it has opened.
    pub fn times_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32, cool_ms: u64) -> Breaker {
        Breaker::new(BreakerOptions { failures_to_open: failures, cool_down: Duration::from_millis(cool_ms) })
    }

    fn call(b: &Breaker) -> Permit<'_> {
        match b.admit() {
            Admission::Call(p) => p,
            Admission::Reject(_) => panic!("expected a permit"),
        }
    }

    #[test]
    fn opens_after_consecutive_failures_only() {
        let b = breaker(3, 60_000);
        assert_eq!(b.until_probe(), None);
        call(&b).failure();
        call(&b).failure();
        call(&b).success(); // resets the count
        call(&b).failure();
        call(&b).failure();
        assert_eq!(b.state(), BreakerState::Closed);
        call(&b).failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.times_opened(), 1);
        assert!(b.until_probe().is_some_and(|d| d > Duration::from_secs(50)));
        match b.admit() {
            Admission::Reject(wait) => assert!(wait > Duration::from_secs(50)),
            Admission::Call(_) => panic!("an open breaker must not call"),
        }
    }

    #[test]
    fn one_probe_after_cool_down_closes_or_reopens() {
        let b = breaker(1, 0);
        call(&b).failure();
        assert_eq!(b.state(), BreakerState::Open);
        let probe = call(&b); // cool-down of zero: due at once
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(matches!(b.admit(), Admission::Reject(_)), "only one probe at a time");
        probe.failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.times_opened(), 2);
        call(&b).success();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let b = breaker(1, 0);
        call(&b).failure();
        drop(call(&b));
        assert_eq!(b.state(), BreakerState::Open);
        assert!(matches!(b.admit(), Admission::Call(_)));
    }

    #[test]
    fn late_results_of_calls_begun_before_opening_do_not_close_it() {
        let b = breaker(1, 60_000);
        let early = call(&b);
        call(&b).failure();
        early.success();
        assert_eq!(b.state(), BreakerState::Open);
    }
}
