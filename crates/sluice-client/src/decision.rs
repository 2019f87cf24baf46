//! The inputs and the answer of the retry decision.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use sluice_core::Nanos;

use crate::x_ratelimit::ResetForm;

/// What an attempt produced, as far as the retry decision cares: a response (its status and
/// headers) or the kind of error that stood in for one.
#[derive(Debug, Clone, Copy)]
pub enum AttemptResult<'a> {
    /// A response arrived.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers (`Retry-After`, `RateLimit`, `RateLimit-Reset`, `X-RateLimit-Reset` and the
        /// `-Remaining` fields beside them).
        headers: &'a HeaderMap,
    },
    /// No response: the connection failed, was reset or timed out. The request may or may not
    /// have been processed.
    ConnectionError,
    /// An error that another attempt would not cure (an invalid URL, a failing middleware).
    OtherError,
}

/// One finished attempt, everything the decision needs.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// Which attempt this was, from 0 (the original request); also the number of retries so far.
    pub index: u32,
    /// The request's method.
    pub method: &'a Method,
    /// What it produced.
    pub result: AttemptResult<'a>,
    /// Wall-clock time, Unix nanoseconds (needed to read an HTTP-date).
    pub now: Nanos,
    /// The overall deadline, Unix nanoseconds; `None` for no deadline.
    pub deadline: Option<Nanos>,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryDecision {
    /// Send the request again after this wait.
    RetryAfter(Duration),
    /// Stop and hand the last attempt's result to the caller.
    GiveUp(GiveUpReason),
}

/// Where a wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelaySource {
    /// `Retry-After: <seconds>`.
    RetryAfterSeconds,
    /// `Retry-After: <HTTP-date>`.
    RetryAfterDate,
    /// `RateLimit-Reset` (draft 6).
    RateLimitReset,
    /// The `t` parameter of `RateLimit` (draft 10).
    RateLimit,
    /// `X-RateLimit-Reset`, read in the form its magnitude gave.
    XRateLimitReset(ResetForm),
    /// The policy's own exponential backoff with jitter.
    Backoff,
}

impl fmt::Display for DelaySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DelaySource::RetryAfterSeconds => "Retry-After (seconds)",
            DelaySource::RetryAfterDate => "Retry-After (date)",
            DelaySource::RateLimitReset => "RateLimit-Reset",
            DelaySource::RateLimit => "RateLimit t",
            DelaySource::XRateLimitReset(form) => return write!(f, "X-RateLimit-Reset ({form})"),
            DelaySource::Backoff => "backoff",
        })
    }
}

/// Why no further attempt is made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// The attempt succeeded (a 2xx): the call is done.
    Succeeded,
    /// What the attempt produced is not something the policy retries: a status outside the
    /// retry set (a 404, a 500), or an error another attempt would not cure.
    NotRetryable,
    /// A 503 or a connection error on a method that is not idempotent: the request may have been
    /// processed, so sending it again could repeat its effect.
    NotIdempotent {
        /// The method.
        method: Method,
    },
    /// `max_attempts` attempts were made.
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
    },
    /// Waiting as required would reach or pass the overall deadline.
    DeadlineWouldPass {
        /// The wait that was required.
        wait: Duration,
        /// Time left until the deadline.
        left: Duration,
        /// Who required the wait: the server (its header) or the backoff.
        source: DelaySource,
    },
    /// The server asked for a wait longer than the policy's
    /// [`max_server_wait`](crate::RetryPolicyBuilder::max_server_wait): rather than retry before
    /// the server's time (and meet another refusal), the call stops now.
    ServerWaitTooLong {
        /// The wait the server asked for.
        wait: Duration,
        /// The longest wait the policy accepts from a server.
        max: Duration,
        /// The header that asked for it.
        source: DelaySource,
    },
    /// The retry budget has no token left: retries are already at their share of requests.
    BudgetExhausted,
    /// The request's body is a stream that cannot be sent twice.
    BodyNotReplayable,
}

impl GiveUpReason {
    /// True when the call stopped although the last attempt met a retryable failure.
    pub fn is_give_up(&self) -> bool {
        !matches!(self, GiveUpReason::Succeeded | GiveUpReason::NotRetryable)
    }
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::Succeeded => f.write_str("the request succeeded"),
            GiveUpReason::NotRetryable => f.write_str("the result is not retryable"),
            GiveUpReason::NotIdempotent { method } => {
                write!(f, "{method} is not idempotent and the request may have been processed")
            }
            GiveUpReason::AttemptsExhausted { attempts } => write!(f, "all {attempts} attempts were used"),
            GiveUpReason::DeadlineWouldPass { wait, left, source } => write!(
                f,
                "waiting {:.3}s ({source}) would pass the deadline ({:.3}s left)",
                wait.as_secs_f64(),
                left.as_secs_f64()
            ),
            GiveUpReason::ServerWaitTooLong { wait, max, source } => write!(
                f,
                "the server asked for a wait of {:.3}s ({source}), more than the {:.3}s accepted",
                wait.as_secs_f64(),
                max.as_secs_f64()
            ),
            GiveUpReason::BudgetExhausted => f.write_str("the retry budget is exhausted"),
            GiveUpReason::BodyNotReplayable => f.write_str("the request body cannot be sent again"),
        }
    }
}

/// True for the methods RFC 9110 §9.2.2 defines as idempotent.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}
