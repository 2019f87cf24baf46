//! What a call that went through the retry policy reports.

use std::time::Duration;

use thiserror::Error;

use crate::decision::GiveUpReason;

/// A boxed error, as tower middleware passes them on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a call went: attempts, what they met, how long was waited and why it stopped.
///
/// The integrations put it in the final response's extensions (`response.extensions()
/// .get::<RetryReport>()`) and in [`RetryError`] when the call ends in an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryReport {
    /// Attempts made, the original request included.
    pub attempts: u32,
    /// 429 responses received.
    pub rate_limited: u32,
    /// Responses with another retryable status (503 when configured).
    pub unavailable: u32,
    /// Attempts that ended in a connection error.
    pub connection_errors: u32,
    /// Every wait between attempts, in order.
    pub waits: Vec<Duration>,
    /// Why no further attempt was made: [`GiveUpReason::Succeeded`] for a success,
    /// [`GiveUpReason::NotRetryable`] for another final result.
    pub stop: GiveUpReason,
}

impl RetryReport {
    pub(crate) fn new() -> Self {
        Self {
            attempts: 0,
            rate_limited: 0,
            unavailable: 0,
            connection_errors: 0,
            waits: Vec::new(),
            stop: GiveUpReason::NotRetryable,
        }
    }

    /// The total time spent waiting between attempts.
    pub fn waited(&self) -> Duration {
        self.waits.iter().sum()
    }

    /// Retries made (attempts after the first).
    pub fn retries(&self) -> u32 {
        self.attempts.saturating_sub(1)
    }

    /// True when the call stopped on a retryable failure (out of attempts, time or budget, or
    /// not safe to repeat) rather than on a final result.
    pub fn gave_up(&self) -> bool {
        self.stop.is_give_up()
    }
}

/// A call whose last attempt ended in an error: the error, and the report of the attempts.
#[derive(Debug, Error)]
#[error("request failed after {} attempt(s): {}", report.attempts, report.stop)]
pub struct RetryError {
    /// How the call went.
    pub report: RetryReport,
    /// The last attempt's error.
    #[source]
    pub source: BoxError,
}

impl RetryError {
    /// The `RetryError` inside an error returned by a `reqwest-middleware` client, if the retry
    /// middleware produced it.
    #[cfg(feature = "reqwest")]
    pub fn from_middleware_error(err: &reqwest_middleware::Error) -> Option<&RetryError> {
        match err {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<RetryError>(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }
}
