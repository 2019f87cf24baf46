//! The policy together with a clock, a random source and a sleeper: what the integrations run.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use sluice_core::{Clock, Nanos, SystemClock};

use crate::decision::{Attempt, AttemptResult, GiveUpReason, RetryDecision};
use crate::policy::RetryPolicy;
use crate::random::{RandomSource, SplitMix64};
use crate::report::RetryReport;
use crate::sleeper::{Sleeper, TokioSleeper};

/// A [`RetryPolicy`] with its clock (wall-clock Unix nanoseconds, for deadlines and HTTP-dates),
/// random source (for jitter) and sleeper. Cheap to clone; clones share everything, the retry
/// budget included.
///
/// Defaults: [`SystemClock`], [`SplitMix64::from_entropy`], [`TokioSleeper`]. Tests and
/// simulations inject a `ManualClock`, a seeded generator and a
/// [`ManualSleeper`](crate::ManualSleeper).
#[derive(Clone)]
pub struct Retrier {
    policy: Arc<RetryPolicy>,
    clock: Arc<dyn Clock>,
    rng: Arc<dyn RandomSource>,
    sleeper: Arc<dyn Sleeper>,
}

impl std::fmt::Debug for Retrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrier").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl Retrier {
    /// The policy with the real clock, an entropy-seeded generator and tokio's timer.
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
            clock: Arc::new(SystemClock::new()),
            rng: Arc::new(SplitMix64::from_entropy()),
            sleeper: Arc::new(TokioSleeper),
        }
    }

    /// Uses `clock` for `now` (Unix nanoseconds).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses `rng` for jitter.
    pub fn with_random(mut self, rng: Arc<dyn RandomSource>) -> Self {
        self.rng = rng;
        self
    }

    /// Uses `sleeper` to wait between attempts.
    pub fn with_sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Starts one call: counts it as an original request in the budget and fixes its deadline.
    pub fn session(&self, method: &Method) -> Session {
        if let Some(budget) = self.policy.budget() {
            budget.deposit();
        }
        let start = self.clock.now();
        let deadline = self.policy.deadline().map(|d| start.saturating_add(nanos(d)));
        Session { retrier: self.clone(), method: method.clone(), index: 0, deadline, report: RetryReport::new() }
    }
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One call in progress: feed it what each attempt produced, wait when told, then take the report.
#[derive(Debug)]
pub struct Session {
    retrier: Retrier,
    method: Method,
    index: u32,
    deadline: Option<Nanos>,
    report: RetryReport,
}

impl Session {
    /// Records how the latest attempt ended and decides what follows: the policy's
    /// [`decide`](RetryPolicy::decide), then, for a retry, whether the request can be sent again
    /// (`can_replay`) and whether the budget has a retry left (only then is one spent).
    pub fn record(&mut self, result: &AttemptResult<'_>, can_replay: bool) -> RetryDecision {
        self.report.attempts += 1;
        match result {
            AttemptResult::Response { status, .. } if status.as_u16() == 429 => self.report.rate_limited += 1,
            AttemptResult::Response { status, .. } if self.retrier.policy.retries_status(*status) => {
                self.report.unavailable += 1
            }
            AttemptResult::ConnectionError => self.report.connection_errors += 1,
            _ => {}
        }
        let attempt = Attempt {
            index: self.index,
            method: &self.method,
            result: *result,
            now: self.retrier.clock.now(),
            deadline: self.deadline,
        };
        let decision = match self.retrier.policy.decide(&attempt, self.retrier.rng.as_ref()) {
            RetryDecision::RetryAfter(_) if !can_replay => RetryDecision::GiveUp(GiveUpReason::BodyNotReplayable),
            RetryDecision::RetryAfter(wait) => match self.retrier.policy.budget() {
                Some(budget) if !budget.try_withdraw() => RetryDecision::GiveUp(GiveUpReason::BudgetExhausted),
                _ => RetryDecision::RetryAfter(wait),
            },
            give_up => give_up,
        };
        match &decision {
            RetryDecision::RetryAfter(_) => self.index += 1,
            RetryDecision::GiveUp(reason) => self.report.stop = reason.clone(),
        }
        decision
    }

    /// Waits `wait` with the retrier's sleeper and records it.
    pub async fn wait(&mut self, wait: Duration) {
        self.retrier.sleeper.sleep(wait).await;
        self.report.waits.push(wait);
    }

    /// The report so far.
    pub fn report(&self) -> &RetryReport {
        &self.report
    }

    /// Ends the call and returns its report.
    pub fn finish(self) -> RetryReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::RetryBudget;
    use crate::sleeper::ManualSleeper;
    use http::{HeaderMap, StatusCode};
    use sluice_core::{ManualClock, NANOS_PER_SEC};

    fn retrier(policy: RetryPolicy) -> (Retrier, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_749_988_800 * NANOS_PER_SEC));
        let r = Retrier::new(policy)
            .with_clock(clock.clone())
            .with_random(Arc::new(|| u64::MAX))
            .with_sleeper(Arc::new(ManualSleeper::new(clock.clone())));
        (r, clock)
    }

    #[tokio::test]
    async fn session_counts_waits_and_stops_on_success() {
        let (r, clock) = retrier(RetryPolicy::default());
        let start = clock.now();
        let h = HeaderMap::new();
        let mut s = r.session(&Method::GET);
        let limited = AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &h };
        for expected in [100u64, 200, 400] {
            let RetryDecision::RetryAfter(wait) = s.record(&limited, true) else { panic!("should retry") };
            assert_eq!(wait, Duration::from_millis(expected));
            s.wait(wait).await;
        }
        let ok = AttemptResult::Response { status: StatusCode::OK, headers: &h };
        assert_eq!(s.record(&ok, true), RetryDecision::GiveUp(GiveUpReason::Succeeded));
        let report = s.finish();
        assert_eq!(report.attempts, 4);
        assert_eq!(report.rate_limited, 3);
        assert_eq!(report.waited(), Duration::from_millis(700));
        assert!(!report.gave_up());
        assert_eq!(clock.now() - start, 700 * 1_000_000);
    }

    #[tokio::test]
    async fn deadline_is_measured_from_the_first_attempt() {
        let policy = RetryPolicy::builder().deadline(Duration::from_secs(10)).jitter(crate::Jitter::None).build();
        let (r, clock) = retrier(policy.unwrap());
        let h = HeaderMap::new();
        let mut s = r.session(&Method::GET);
        clock.advance(9_950 * 1_000_000); // the first attempt took 9.95 s
        let limited = AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &h };
        let d = s.record(&limited, true);
        assert!(
            matches!(d, RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { left, .. }) if left == Duration::from_millis(50)),
            "{d:?}"
        );
        assert!(s.finish().gave_up());
    }

    #[test]
    fn unreplayable_bodies_and_the_budget_stop_retries() {
        let h = HeaderMap::new();
        let limited = AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &h };
        let (r, _) = retrier(RetryPolicy::builder().budget(RetryBudget::new(0.1, 1).unwrap()).build().unwrap());
        let mut s = r.session(&Method::GET);
        assert_eq!(s.record(&limited, false), RetryDecision::GiveUp(GiveUpReason::BodyNotReplayable));
        // The refused replay spent nothing: the one retry in hand is still there.
        let mut s = r.session(&Method::GET);
        assert!(matches!(s.record(&limited, true), RetryDecision::RetryAfter(_)));
        assert_eq!(s.record(&limited, true), RetryDecision::GiveUp(GiveUpReason::BudgetExhausted));
        assert_eq!(s.report().attempts, 2);
    }
}
