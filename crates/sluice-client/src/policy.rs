//! The retry policy and its pure decision function.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use sluice_core::Nanos;
use thiserror::Error;

use crate::budget::{BudgetError, RetryBudget};
use crate::decision::{Attempt, AttemptResult, DelaySource, GiveUpReason, RetryDecision, is_idempotent};
use crate::random::{RandomSource, uniform_inclusive};
use crate::server_hint::server_delay;

/// How the backoff delay is spread (AWS's "Exponential Backoff and Jitter" names). After the
/// attempt with index `i` (0 = the original request) the ceiling is `min(cap, base * 2^i)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform in `[0, ceiling]`: spreads clients the most (the default).
    #[default]
    Full,
    /// `ceiling / 2` plus uniform in `[0, ceiling / 2]`: never shorter than half the ceiling.
    Equal,
    /// Exactly `ceiling`.
    None,
}

/// A policy that cannot be built.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PolicyError {
    /// `max_attempts` must count at least the original request.
    #[error("max_attempts must be at least 1")]
    ZeroAttempts,
    /// The cap is below the base delay.
    #[error("cap ({cap:?}) must not be below the base delay ({base:?})")]
    CapBelowBase {
        /// The base delay.
        base: Duration,
        /// The cap.
        cap: Duration,
    },
    /// The retry budget's ratio or allowance is not usable (lets `?` carry a [`BudgetError`]
    /// where a policy is being built).
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// When and how long to wait before sending a request again.
///
/// Built with [`RetryPolicy::builder`]; [`RetryPolicy::default`] is: base 100 ms, cap 30 s, 5
/// attempts, a 5-minute deadline, full jitter, retry 429 (any method) and connection errors
/// (idempotent methods), follow the server's `Retry-After` and rate-limit headers but accept no
/// server wait over 10 minutes, no budget.
///
/// The heart is [`RetryPolicy::decide`], a pure function of one finished attempt.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    base: Duration,
    cap: Duration,
    max_attempts: u32,
    deadline: Option<Duration>,
    /// Bounds what a server can make the client wait, deadline or not: the wait comes from the
    /// server's headers, and one header's form is a guess.
    max_server_wait: Duration,
    jitter: Jitter,
    retry_statuses: Vec<StatusCode>,
    retry_connection_errors: bool,
    retry_non_idempotent: bool,
    follow_server: bool,
    budget: Option<Arc<RetryBudget>>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
            max_attempts: 5,
            deadline: Some(Duration::from_secs(300)),
            max_server_wait: DEFAULT_MAX_SERVER_WAIT,
            jitter: Jitter::Full,
            retry_statuses: Vec::new(),
            retry_connection_errors: true,
            retry_non_idempotent: false,
            follow_server: true,
            budget: None,
        }
    }
}

/// The longest server wait a default policy accepts. Ten minutes is the threshold that
/// draft-ietf-httpapi-ratelimit-headers-10 (§8.5.1) gives as an example of a reset beyond which
/// a client may act on its own instead of waiting.
const DEFAULT_MAX_SERVER_WAIT: Duration = Duration::from_secs(600);

/// Builds a [`RetryPolicy`]; starts from the defaults.
#[derive(Debug, Clone, Default)]
pub struct RetryPolicyBuilder {
    policy: RetryPolicy,
}

impl RetryPolicyBuilder {
    /// The first backoff ceiling (before any doubling).
    pub fn base(mut self, base: Duration) -> Self {
        self.policy.base = base;
        self
    }

    /// The largest backoff ceiling. It bounds the policy's own backoff, not a wait the server
    /// asks for: that one is honoured as given, bounded by the deadline and by
    /// [`max_server_wait`](Self::max_server_wait).
    pub fn cap(mut self, cap: Duration) -> Self {
        self.policy.cap = cap;
        self
    }

    /// Attempts in all, the original request included (1 = never retry).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.policy.max_attempts = attempts;
        self
    }

    /// The longest a call may take from its first attempt; a wait that would reach it is not
    /// started.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.policy.deadline = Some(deadline);
        self
    }

    /// No overall deadline: a call is bounded by the number of attempts, each backoff by the
    /// cap and each server wait by [`max_server_wait`](Self::max_server_wait).
    pub fn no_deadline(mut self) -> Self {
        self.policy.deadline = None;
        self
    }

    /// The longest wait a server may ask for (default 10 minutes). A longer one ends the call at
    /// once with [`GiveUpReason::ServerWaitTooLong`]: retrying before the server's time would
    /// only meet another refusal. A server cannot make the client sleep for a year, deadline or
    /// not; `Duration::MAX` trusts every server.
    pub fn max_server_wait(mut self, max: Duration) -> Self {
        self.policy.max_server_wait = max;
        self
    }

    /// The jitter applied to backoff delays.
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.policy.jitter = jitter;
        self
    }

    /// Also retry 503 Service Unavailable (nginx `limit_req` answers 503 by default). Like a
    /// connection error, a 503 does not say the request was left unprocessed, so only idempotent
    /// methods are retried unless [`retry_non_idempotent`](Self::retry_non_idempotent) is set.
    pub fn retry_503(self) -> Self {
        self.retry_status(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// Also retry this status (treated like 503: idempotent methods only unless opted in).
    /// 429 is always retried and needs no call.
    pub fn retry_status(mut self, status: StatusCode) -> Self {
        if status != StatusCode::TOO_MANY_REQUESTS && !self.policy.retry_statuses.contains(&status) {
            self.policy.retry_statuses.push(status);
        }
        self
    }

    /// Whether to retry connection errors (idempotent methods only unless opted in). Default on.
    pub fn retry_connection_errors(mut self, retry: bool) -> Self {
        self.policy.retry_connection_errors = retry;
        self
    }

    /// Retry non-idempotent methods (POST, PATCH) on 503s and connection errors too: only for
    /// requests the caller knows are safe to repeat (an idempotency key, say).
    pub fn retry_non_idempotent(mut self, retry: bool) -> Self {
        self.policy.retry_non_idempotent = retry;
        self
    }

    /// Whether to wait as the server's `Retry-After` and rate-limit headers say (default) or to
    /// ignore them and always use the backoff. Ignoring them is only useful to measure what it
    /// costs.
    pub fn follow_server(mut self, follow: bool) -> Self {
        self.policy.follow_server = follow;
        self
    }

    /// Bound retries to a share of requests (see [`RetryBudget`]).
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.policy.budget = Some(Arc::new(budget));
        self
    }

    /// Share an existing budget (several clients under one budget).
    pub fn shared_budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.policy.budget = Some(budget);
        self
    }

    /// Checks and returns the policy.
    pub fn build(self) -> Result<RetryPolicy, PolicyError> {
        let p = self.policy;
        if p.max_attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if p.cap < p.base {
            return Err(PolicyError::CapBelowBase { base: p.base, cap: p.cap });
        }
        Ok(p)
    }
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RetryPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::default()
    }

    /// Attempts in all, the original request included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The overall deadline, if any.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The longest wait accepted from a server.
    pub fn max_server_wait(&self) -> Duration {
        self.max_server_wait
    }

    /// True for a status retried besides 429 (503 when configured).
    pub fn retries_status(&self, status: StatusCode) -> bool {
        self.retry_statuses.contains(&status)
    }

    /// The retry budget, if any.
    pub fn budget(&self) -> Option<&Arc<RetryBudget>> {
        self.budget.as_ref()
    }

    /// The backoff ceiling after attempt `index` failed: `min(cap, base * 2^index)`, in
    /// nanoseconds, without overflow.
    pub fn backoff_ceiling(&self, index: u32) -> Nanos {
        let cap = nanos(self.cap);
        if index >= 64 {
            return cap;
        }
        let doubled = u128::from(nanos(self.base)) << index;
        u64::try_from(doubled.min(u128::from(cap))).unwrap_or(cap)
    }

    /// The backoff wait after attempt `index` failed, jitter applied.
    pub fn backoff(&self, index: u32, rng: &dyn RandomSource) -> Nanos {
        let ceiling = self.backoff_ceiling(index);
        match self.jitter {
            Jitter::Full => uniform_inclusive(rng, ceiling),
            Jitter::Equal => {
                let half = ceiling / 2;
                (ceiling - half) + uniform_inclusive(rng, half)
            }
            Jitter::None => ceiling,
        }
    }

    /// Decides what follows one finished attempt. Pure: the same inputs (and random draws) give
    /// the same answer; nothing is read from a clock and nothing is spent from the budget (the
    /// integrations do that when this says retry).
    ///
    /// In order:
    /// 1. A 429 is retryable for every method (the server did not process the request). A
    ///    configured status (503) or a connection error is retryable for idempotent methods
    ///    only, unless non-idempotent retries are allowed. A success (2xx) is
    ///    [`GiveUpReason::Succeeded`]; anything else [`GiveUpReason::NotRetryable`].
    /// 2. After `max_attempts` attempts: [`GiveUpReason::AttemptsExhausted`].
    /// 3. The wait: the server's, exactly as asked (a past time is zero), from the first of
    ///    `Retry-After`, `RateLimit` (its longest `t` with `r=0`), `RateLimit-Reset` and
    ///    `X-RateLimit-Reset` that asks for one (see [`server_delay`]); without one, the
    ///    jittered backoff.
    /// 4. If the wait would reach or pass the deadline: [`GiveUpReason::DeadlineWouldPass`],
    ///    saying how long the wait was, how much time was left, and who asked for the wait.
    /// 5. If a server's wait is longer than [`max_server_wait`](Self::max_server_wait):
    ///    [`GiveUpReason::ServerWaitTooLong`].
    pub fn decide(&self, attempt: &Attempt<'_>, rng: &dyn RandomSource) -> RetryDecision {
        let headers = match attempt.result {
            AttemptResult::Response { status, .. } if status.is_success() => {
                return RetryDecision::GiveUp(GiveUpReason::Succeeded);
            }
            AttemptResult::Response { status, headers } if status == StatusCode::TOO_MANY_REQUESTS => Some(headers),
            AttemptResult::Response { status, headers } if self.retry_statuses.contains(&status) => {
                if let Some(reason) = self.unsafe_to_repeat(attempt) {
                    return RetryDecision::GiveUp(reason);
                }
                Some(headers)
            }
            AttemptResult::ConnectionError if self.retry_connection_errors => {
                if let Some(reason) = self.unsafe_to_repeat(attempt) {
                    return RetryDecision::GiveUp(reason);
                }
                None
            }
            _ => return RetryDecision::GiveUp(GiveUpReason::NotRetryable),
        };
        let attempts = attempt.index.saturating_add(1);
        if attempts >= self.max_attempts {
            return RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted { attempts });
        }
        let hinted = headers.filter(|_| self.follow_server).and_then(|h| server_delay(h, attempt.now));
        let (wait, source) = hinted.unwrap_or_else(|| (self.backoff(attempt.index, rng), DelaySource::Backoff));
        if let Some(deadline) = attempt.deadline {
            let left = deadline.saturating_sub(attempt.now);
            if wait >= left {
                return RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass {
                    wait: Duration::from_nanos(wait),
                    left: Duration::from_nanos(left),
                    source,
                });
            }
        }
        let wait = Duration::from_nanos(wait);
        if source != DelaySource::Backoff && wait > self.max_server_wait {
            return RetryDecision::GiveUp(GiveUpReason::ServerWaitTooLong { wait, max: self.max_server_wait, source });
        }
        RetryDecision::RetryAfter(wait)
    }

    fn unsafe_to_repeat(&self, attempt: &Attempt<'_>) -> Option<GiveUpReason> {
        (!self.retry_non_idempotent && !is_idempotent(attempt.method))
            .then(|| GiveUpReason::NotIdempotent { method: attempt.method.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue, Method};
    use sluice_core::NANOS_PER_SEC;

    const NOW: Nanos = 1_749_988_800 * NANOS_PER_SEC;

    /// A random source that always draws the top value.
    const TOP: fn() -> u64 = || u64::MAX;

    fn attempt<'a>(index: u32, method: &'a Method, result: AttemptResult<'a>, deadline: Option<Nanos>) -> Attempt<'a> {
        Attempt { index, method, result, now: NOW, deadline }
    }

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    fn status(code: u16, headers: &HeaderMap) -> AttemptResult<'_> {
        AttemptResult::Response { status: StatusCode::from_u16(code).unwrap(), headers }
    }

    #[test]
    fn builder_rejects_nonsense() {
        assert_eq!(RetryPolicy::builder().max_attempts(0).build().unwrap_err(), PolicyError::ZeroAttempts);
        assert!(matches!(
            RetryPolicy::builder().base(Duration::from_secs(2)).cap(Duration::from_secs(1)).build(),
            Err(PolicyError::CapBelowBase { .. })
        ));
    }

    #[test]
    fn backoff_doubles_to_the_cap_without_overflow() {
        let p = RetryPolicy::builder()
            .base(Duration::from_millis(100))
            .cap(Duration::from_secs(1))
            .jitter(Jitter::None)
            .build()
            .unwrap();
        let ms: Vec<u64> = (0..6).map(|i| p.backoff_ceiling(i) / 1_000_000).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.backoff_ceiling(63), NANOS_PER_SEC);
        assert_eq!(p.backoff_ceiling(u32::MAX), NANOS_PER_SEC);
        let huge = RetryPolicy::builder().base(Duration::MAX).cap(Duration::MAX).build().unwrap();
        assert_eq!(huge.backoff_ceiling(40), u64::MAX);
    }

    #[test]
    fn retry_after_is_followed_exactly_without_jitter() {
        let p = RetryPolicy::default();
        let h = with("retry-after", "7");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_secs(7)));
        let h = with("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::ZERO), "a past date means now");
    }

    #[test]
    fn ignoring_the_server_falls_back_to_backoff() {
        let p = RetryPolicy::builder().follow_server(false).jitter(Jitter::None).build().unwrap();
        let h = with("retry-after", "7");
        let d = p.decide(&attempt(1, &Method::GET, status(429, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_millis(200)));
    }

    #[test]
    fn a_wait_beyond_the_deadline_gives_up_now_and_says_why() {
        let p = RetryPolicy::default();
        let h = with("retry-after", "60");
        let deadline = Some(NOW + 30 * NANOS_PER_SEC);
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), deadline), &TOP);
        assert_eq!(
            d,
            RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass {
                wait: Duration::from_secs(60),
                left: Duration::from_secs(30),
                source: DelaySource::RetryAfterSeconds,
            })
        );
        let h = with("retry-after", "99999999999999999999999");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), deadline), &TOP);
        assert!(matches!(d, RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { .. })));
        // Past the deadline already: even an immediate retry is refused.
        let h = with("retry-after", "0");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), Some(NOW)), &TOP);
        assert!(matches!(d, RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { .. })));
    }

    #[test]
    fn a_server_cannot_make_the_client_wait_a_year() {
        let p = RetryPolicy::builder().no_deadline().build().unwrap();
        assert_eq!(p.max_server_wait(), Duration::from_secs(600));
        let a_year_from_now = (NOW / NANOS_PER_SEC + 365 * 86_400).to_string();
        for (name, value) in [
            ("retry-after", "31536000"),
            ("retry-after", "99999999999999999999999"),
            ("ratelimit", "\"day\";r=0;t=31536000"),
            ("ratelimit-reset", "31536000"),
            ("x-ratelimit-reset", a_year_from_now.as_str()),
            ("x-ratelimit-reset", "90000000000"),
        ] {
            let h = with(name, value);
            let d = p.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP);
            assert!(
                matches!(d, RetryDecision::GiveUp(GiveUpReason::ServerWaitTooLong { max, .. }) if max == Duration::from_secs(600)),
                "{name}: {value} gave {d:?}"
            );
        }
        // Exactly the maximum is still waited for.
        let h = with("retry-after", "600");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_secs(600)));
        // Raising the maximum trusts the server further.
        let trusting = RetryPolicy::builder().no_deadline().max_server_wait(Duration::MAX).build().unwrap();
        let h = with("retry-after", "31536000");
        let d = trusting.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_secs(31_536_000)));
    }

    #[test]
    fn the_deadline_speaks_before_the_server_wait_maximum_and_backoff_is_not_bound_by_it() {
        let p = RetryPolicy::builder().max_server_wait(Duration::from_secs(10)).build().unwrap();
        let h = with("retry-after", "3600");
        let d = p.decide(&attempt(0, &Method::GET, status(429, &h), Some(NOW + 60 * NANOS_PER_SEC)), &TOP);
        assert!(matches!(d, RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { .. })), "{d:?}");
        // The backoff answers to the cap alone.
        let slow = RetryPolicy::builder()
            .base(Duration::from_secs(20))
            .cap(Duration::from_secs(40))
            .jitter(Jitter::None)
            .max_server_wait(Duration::from_secs(1))
            .build()
            .unwrap();
        let none = HeaderMap::new();
        let d = slow.decide(&attempt(0, &Method::GET, status(429, &none), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_secs(20)));
    }

    #[test]
    fn method_safety() {
        let p = RetryPolicy::builder().retry_503().build().unwrap();
        let h = HeaderMap::new();
        let post_503 = p.decide(&attempt(0, &Method::POST, status(503, &h), None), &TOP);
        assert_eq!(post_503, RetryDecision::GiveUp(GiveUpReason::NotIdempotent { method: Method::POST }));
        let post_conn = p.decide(&attempt(0, &Method::POST, AttemptResult::ConnectionError, None), &TOP);
        assert_eq!(post_conn, RetryDecision::GiveUp(GiveUpReason::NotIdempotent { method: Method::POST }));
        for m in [Method::POST, Method::PATCH, Method::GET] {
            let d = p.decide(&attempt(0, &m, status(429, &h), None), &TOP);
            assert!(matches!(d, RetryDecision::RetryAfter(_)), "429 is retried for {m}");
        }
        for m in [Method::GET, Method::PUT, Method::DELETE, Method::HEAD] {
            let d = p.decide(&attempt(0, &m, status(503, &h), None), &TOP);
            assert!(matches!(d, RetryDecision::RetryAfter(_)), "503 is retried for {m}");
        }
        let opted_in = RetryPolicy::builder().retry_503().retry_non_idempotent(true).build().unwrap();
        let d = opted_in.decide(&attempt(0, &Method::POST, status(503, &h), None), &TOP);
        assert!(matches!(d, RetryDecision::RetryAfter(_)));
    }

    #[test]
    fn only_configured_statuses_are_retried() {
        let p = RetryPolicy::default();
        let h = with("retry-after", "1");
        for code in [404, 500, 502, 503] {
            let d = p.decide(&attempt(0, &Method::GET, status(code, &h), None), &TOP);
            assert_eq!(d, RetryDecision::GiveUp(GiveUpReason::NotRetryable), "{code}");
        }
        for code in [200, 201, 204] {
            let d = p.decide(&attempt(0, &Method::GET, status(code, &h), None), &TOP);
            assert_eq!(d, RetryDecision::GiveUp(GiveUpReason::Succeeded), "{code}: a success is a success");
        }
        let d = p.decide(&attempt(0, &Method::GET, AttemptResult::OtherError, None), &TOP);
        assert_eq!(d, RetryDecision::GiveUp(GiveUpReason::NotRetryable));
        let no_conn = RetryPolicy::builder().retry_connection_errors(false).build().unwrap();
        let d = no_conn.decide(&attempt(0, &Method::GET, AttemptResult::ConnectionError, None), &TOP);
        assert_eq!(d, RetryDecision::GiveUp(GiveUpReason::NotRetryable));
        let gateway = RetryPolicy::builder().retry_status(StatusCode::BAD_GATEWAY).build().unwrap();
        let d = gateway.decide(&attempt(0, &Method::GET, status(502, &h), None), &TOP);
        assert_eq!(d, RetryDecision::RetryAfter(Duration::from_secs(1)));
    }

    #[test]
    fn attempts_are_counted_from_the_original_request() {
        let p = RetryPolicy::builder().max_attempts(3).build().unwrap();
        let h = HeaderMap::new();
        assert!(matches!(
            p.decide(&attempt(1, &Method::GET, status(429, &h), None), &TOP),
            RetryDecision::RetryAfter(_)
        ));
        assert_eq!(
            p.decide(&attempt(2, &Method::GET, status(429, &h), None), &TOP),
            RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 3 })
        );
        let once = RetryPolicy::builder().max_attempts(1).build().unwrap();
        assert_eq!(
            once.decide(&attempt(0, &Method::GET, status(429, &h), None), &TOP),
            RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 1 })
        );
    }

    #[test]
    fn equal_jitter_stays_in_the_upper_half() {
        let p = RetryPolicy::builder()
            .base(Duration::from_millis(100))
            .cap(Duration::from_secs(10))
            .jitter(Jitter::Equal)
            .build()
            .unwrap();
        let ceiling = p.backoff_ceiling(3);
        assert_eq!(ceiling, 800_000_000);
        assert_eq!(p.backoff(3, &|| 0u64), 400_000_000);
        assert_eq!(p.backoff(3, &|| u64::MAX), 800_000_000);
    }
}
