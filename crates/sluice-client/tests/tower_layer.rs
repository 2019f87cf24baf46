//! The tower layer around hyper-util's client, against a real local HTTP server, with virtual
//! time.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluice_client::{BoxError, GiveUpReason, ManualSleeper, Retrier, RetryError, RetryLayer, RetryPolicy, RetryReport};
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC};
use support::{Reply, TestServer, closed_port_url};
use tower::{Service, ServiceBuilder, ServiceExt};

const START_SECS: u64 = 1_749_988_800;

type HyperClient = Client<HttpConnector, Full<Bytes>>;

fn client(
    policy: RetryPolicy,
) -> (impl Service<Request<Full<Bytes>>, Response = Response<Incoming>, Error = BoxError>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(START_SECS * NANOS_PER_SEC));
    let retrier = Retrier::new(policy)
        .with_clock(clock.clone())
        .with_random(Arc::new(|| u64::MAX))
        .with_sleeper(Arc::new(ManualSleeper::new(clock.clone())));
    let hyper_client: HyperClient = Client::builder(TokioExecutor::new()).build_http();
    (ServiceBuilder::new().layer(RetryLayer::from(retrier)).service(hyper_client), clock)
}

fn request(method: Method, url: &str, client_id: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(url)
        .header("x-client", client_id)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

fn report(response: &Response<Incoming>) -> RetryReport {
    response.extensions().get::<RetryReport>().expect("the final response carries a RetryReport").clone()
}

#[tokio::test]
async fn waits_as_told_and_replays_the_body() {
    let server = TestServer::start(|n| if n <= 2 { Reply::limited("retry-after", "3") } else { Reply::ok() }).await;
    let (mut svc, clock) = client(RetryPolicy::default());
    let response =
        svc.ready().await.unwrap().call(request(Method::POST, &server.url("/"), "t", "payload")).await.unwrap();
    assert_eq!(response.status(), 200);
    let r = report(&response);
    assert_eq!((r.attempts, r.rate_limited), (3, 2));
    assert_eq!(r.waits, [Duration::from_secs(3), Duration::from_secs(3)]);
    assert_eq!(clock.now(), (START_SECS + 6) * NANOS_PER_SEC);
    let seen = server.seen("t");
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.method == Method::POST && s.body == "payload"));
    // The response body is the final response's, intact.
    assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "{}");
}

#[tokio::test]
async fn non_idempotent_requests_are_not_retried_on_503() {
    let server = TestServer::start(|_| Reply::status(503)).await;
    let (mut svc, _) = client(RetryPolicy::builder().retry_503().max_attempts(4).build().unwrap());
    let post = svc.ready().await.unwrap().call(request(Method::POST, &server.url("/"), "p", "x")).await.unwrap();
    assert_eq!(post.status(), 503);
    assert_eq!(report(&post).stop, GiveUpReason::NotIdempotent { method: Method::POST });
    assert_eq!(server.seen("p").len(), 1);

    let put = svc.ready().await.unwrap().call(request(Method::PUT, &server.url("/"), "u", "x")).await.unwrap();
    assert_eq!(report(&put).stop, GiveUpReason::AttemptsExhausted { attempts: 4 });
    assert_eq!(server.seen("u").len(), 4);
}

#[tokio::test]
async fn connection_errors_end_in_a_retry_error_with_the_report() {
    let url = closed_port_url().await;
    let (mut svc, _) = client(RetryPolicy::builder().max_attempts(3).build().unwrap());
    let err = svc.ready().await.unwrap().call(request(Method::GET, &url, "c", "")).await.unwrap_err();
    let retry = err.downcast_ref::<RetryError>().expect("a RetryError");
    assert_eq!((retry.report.attempts, retry.report.connection_errors), (3, 3));
    assert_eq!(retry.report.stop, GiveUpReason::AttemptsExhausted { attempts: 3 });
    assert!(retry.source.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|e| e.is_connect()));
    assert!(err.to_string().contains("3 attempt(s)"), "{err}");
}
