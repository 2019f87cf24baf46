//! The tower integration, for hyper clients and any `Service<http::Request<B>>`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};

use crate::decision::{AttemptResult, RetryDecision};
use crate::policy::RetryPolicy;
use crate::report::{BoxError, RetryError};
use crate::retrier::Retrier;

/// A tower [`Layer`] that retries requests as a [`RetryPolicy`] says.
///
/// The request body type `B` must be `Clone`: every attempt sends a copy of the original
/// request, so the body must be replayable. Buffered bodies are (`http_body_util::Full<Bytes>`,
/// `Empty`, `String`); a streaming body (`hyper::body::Incoming`) is not, and must be collected
/// into bytes first. The inner service must be `Clone` (as hyper-util's client is) so that each
/// attempt can wait for it to be ready.
///
/// - The final response carries a [`RetryReport`](crate::RetryReport) in its extensions.
/// - Every error of the inner service counts as a connection error (the request may or may not
///   have been processed). A call that ends in an error returns a [`RetryError`] (boxed, as
///   tower errors are) with the report and the last error.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use sluice_client::{RetryLayer, RetryPolicy};
/// use tower::ServiceBuilder;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let hyper_client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
/// let client = ServiceBuilder::new().layer(RetryLayer::new(RetryPolicy::default())).service(hyper_client);
/// # drop(client);
/// # }
/// ```
///
/// Any service of `http` requests works; here a stand-in answers 429 with `Retry-After: 2` once,
/// and virtual time shows the layer waiting exactly that long:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
/// use http::{Request, Response, StatusCode};
/// use sluice_client::{ManualSleeper, Retrier, RetryLayer, RetryPolicy, RetryReport};
/// use sluice_core::ManualClock;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let calls = Arc::new(AtomicU32::new(0));
/// let counter = calls.clone();
/// let backend = tower::service_fn(move |_request: Request<String>| {
///     let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
///     async move {
///         let mut response = Response::new(());
///         if first {
///             *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
///             response.headers_mut().insert("retry-after", "2".parse().unwrap());
///         }
///         Ok::<_, std::convert::Infallible>(response)
///     }
/// });
/// let clock = Arc::new(ManualClock::new(0));
/// let retrier = Retrier::new(RetryPolicy::default())
///     .with_clock(clock.clone())
///     .with_sleeper(Arc::new(ManualSleeper::new(clock.clone())));
/// let mut client = ServiceBuilder::new().layer(RetryLayer::from(retrier)).service(backend);
///
/// let response = client.ready().await.unwrap().call(Request::new("hello".to_string())).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK);
/// let report = response.extensions().get::<RetryReport>().unwrap();
/// assert_eq!((report.attempts, report.rate_limited), (2, 1));
/// assert_eq!(report.waits, [Duration::from_secs(2)]);
/// assert_eq!(calls.load(Ordering::SeqCst), 2);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer {
    retrier: Retrier,
}

impl RetryLayer {
    /// The layer with `policy`, the real clock, tokio's timer and random jitter.
    pub fn new(policy: RetryPolicy) -> Self {
        Self { retrier: Retrier::new(policy) }
    }
}

impl From<Retrier> for RetryLayer {
    fn from(retrier: Retrier) -> Self {
        Self { retrier }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService { inner, retrier: self.retrier.clone() }
    }
}

/// The service [`RetryLayer`] wraps around an inner service.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    retrier: Retrier,
}

impl<S> RetryService<S> {
    /// Wraps `inner` with a retrier.
    pub fn new(inner: S, retrier: Retrier) -> Self {
        Self { inner, retrier }
    }
}

/// The future of a [`RetryService`] call.
pub type RetryFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send + 'static>>;

impl<S, B, R> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send,
    B: Clone + Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = RetryFuture<Response<R>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone left behind serves the next call; this call keeps the service made ready.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let retrier = self.retrier.clone();
        Box::pin(async move {
            let mut session = retrier.session(request.method());
            let mut first = true;
            loop {
                let copy = request.clone();
                let sent: Result<Response<R>, BoxError> = if first {
                    first = false;
                    inner.call(copy).await.map_err(Into::into)
                } else {
                    match inner.ready().await {
                        Ok(ready) => ready.call(copy).await.map_err(Into::into),
                        Err(e) => Err(e.into()),
                    }
                };
                let produced = match &sent {
                    Ok(response) => AttemptResult::Response { status: response.status(), headers: response.headers() },
                    Err(_) => AttemptResult::ConnectionError,
                };
                match session.record(&produced, true) {
                    RetryDecision::RetryAfter(wait) => {
                        drop(sent);
                        session.wait(wait).await;
                    }
                    RetryDecision::GiveUp(_) => {
                        let report = session.finish();
                        return match sent {
                            Ok(mut response) => {
                                response.extensions_mut().insert(report);
                                Ok(response)
                            }
                            Err(source) => Err(Box::new(RetryError { report, source }) as BoxError),
                        };
                    }
                }
            }
        })
    }
}
