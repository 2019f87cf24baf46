//! The `reqwest-middleware` integration.

use std::future::Future;
use std::pin::Pin;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::decision::{AttemptResult, RetryDecision};
use crate::policy::RetryPolicy;
use crate::report::RetryError;
use crate::retrier::Retrier;

/// Retries requests of a [`reqwest_middleware::ClientWithMiddleware`] as a [`RetryPolicy`] says.
///
/// - The final response carries a [`RetryReport`](crate::RetryReport) in its extensions, whether
///   it is a success or the last 429 of a call that gave up.
/// - A call whose last attempt failed without a response returns
///   `reqwest_middleware::Error::Middleware` holding a [`RetryError`] (the report and the last
///   error); [`RetryError::from_middleware_error`] finds it.
/// - Connection errors, timeouts and send failures count as connection errors; other errors
///   (an invalid URL, another middleware's error) are final.
/// - A request whose body is a stream (`reqwest::Request::try_clone` gives `None`) is sent
///   once; if it meets a retryable failure the report says
///   [`BodyNotReplayable`](crate::GiveUpReason::BodyNotReplayable).
///
/// ```
/// use sluice_client::{RetryMiddleware, RetryPolicy};
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryPolicy::default()))
///     .build();
/// # drop(client);
/// ```
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    retrier: Retrier,
}

impl RetryMiddleware {
    /// The middleware with `policy`, the real clock, tokio's timer and random jitter.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { retrier: Retrier::new(policy) }
    }

    /// The retrier in use.
    pub fn retrier(&self) -> &Retrier {
        &self.retrier
    }

    async fn run(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let mut session = self.retrier.session(req.method());
        loop {
            let spare = req.try_clone();
            let sent = next.clone().run(req, extensions).await;
            let produced = match &sent {
                Ok(response) => AttemptResult::Response { status: response.status(), headers: response.headers() },
                Err(reqwest_middleware::Error::Reqwest(e)) if e.is_connect() || e.is_timeout() || e.is_request() => {
                    AttemptResult::ConnectionError
                }
                Err(_) => AttemptResult::OtherError,
            };
            let decision = session.record(&produced, spare.is_some());
            match (decision, spare) {
                (RetryDecision::RetryAfter(wait), Some(again)) => {
                    drop(sent);
                    session.wait(wait).await;
                    req = again;
                }
                _ => {
                    let report = session.finish();
                    return match sent {
                        Ok(mut response) => {
                            response.extensions_mut().insert(report);
                            Ok(response)
                        }
                        Err(source) => {
                            Err(reqwest_middleware::Error::middleware(RetryError { report, source: Box::new(source) }))
                        }
                    };
                }
            }
        }
    }
}

impl From<Retrier> for RetryMiddleware {
    fn from(retrier: Retrier) -> Self {
        Self { retrier }
    }
}

impl Middleware for RetryMiddleware {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        req: Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'async_trait>>
    where
        Self: 'async_trait,
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
    {
        Box::pin(self.run(req, extensions, next))
    }
}
