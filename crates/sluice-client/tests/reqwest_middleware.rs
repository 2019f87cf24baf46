//! The reqwest middleware against a real local HTTP server, with virtual time.

mod support;

use std::sync::Arc;
use std::time::Duration;

use reqwest_middleware::ClientBuilder;
use sluice_client::{
    DelaySource, GiveUpReason, ManualSleeper, Retrier, RetryBudget, RetryError, RetryMiddleware, RetryPolicy,
    SplitMix64,
};
use sluice_core::{Algorithm, Clock, ManualClock, NANOS_PER_SEC, TokenBucket};
use support::client::{START_SECS, harness, harness_on, plain_client, report};
use support::{Reply, TestServer, closed_port_url, three_formats};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test]
async fn retry_after_seconds_are_waited_exactly() {
    let server = TestServer::start(|n| if n <= 3 { Reply::limited("retry-after", "2") } else { Reply::ok() }).await;
    let h = harness(RetryPolicy::default());
    let response = h.client.get(server.url("/")).header("x-client", "a").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let r = report(&response);
    assert_eq!((r.attempts, r.rate_limited), (4, 3));
    assert_eq!(r.waits, [secs(2), secs(2), secs(2)]);
    assert_eq!(r.stop, GiveUpReason::Succeeded);
    assert!(!r.gave_up());
    assert_eq!(h.sleeper.waits(), r.waits);
    assert_eq!(h.clock.now(), (START_SECS + 6) * NANOS_PER_SEC);
    assert_eq!(server.seen("a").len(), 4);
}

#[tokio::test]
async fn retry_after_dates_in_all_three_formats_are_waited_exactly() {
    for (i, format) in ["imf-fixdate", "rfc850", "asctime"].into_iter().enumerate() {
        let clock = Arc::new(ManualClock::new(START_SECS * NANOS_PER_SEC));
        let server_clock = clock.clone();
        // The server names the second 5 s after its (virtual) now.
        let server = TestServer::start(move |n| {
            if n == 1 {
                let at = server_clock.now() / NANOS_PER_SEC + 5;
                Reply::limited("retry-after", three_formats(at)[i].clone())
            } else {
                Reply::ok()
            }
        })
        .await;
        let h = harness_on(RetryPolicy::default(), clock);
        let response = h.client.get(server.url("/")).header("x-client", format).send().await.unwrap();
        assert_eq!(response.status(), 200, "{format}");
        assert_eq!(report(&response).waits, [secs(5)], "{format}");
    }
}

#[tokio::test]
async fn a_past_date_means_retry_now() {
    let server = TestServer::start(|n| {
        if n == 1 { Reply::limited("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT") } else { Reply::ok() }
    })
    .await;
    let h = harness(RetryPolicy::default());
    let response = h.client.get(server.url("/")).send().await.unwrap();
    assert_eq!(report(&response).waits, [Duration::ZERO]);
}

#[tokio::test]
async fn malformed_retry_after_falls_back_to_backoff() {
    // The random source always draws the top value, so full jitter gives the ceiling:
    // 100 ms, 200 ms, 400 ms for the first three retries.
    for garbage in ["-5", "soon", "1.5", "Sunday, 06-Nov-1994 08:49:37 GMT"] {
        let server =
            TestServer::start(move |n| if n <= 3 { Reply::limited("retry-after", garbage) } else { Reply::ok() }).await;
        let h = harness(RetryPolicy::default());
        let response = h.client.get(server.url("/")).send().await.unwrap();
        let r = report(&response);
        assert_eq!(
            r.waits,
            [Duration::from_millis(100), Duration::from_millis(200), Duration::from_millis(400)],
            "{garbage}"
        );
    }
}

#[tokio::test]
async fn ratelimit_headers_inform_the_wait_when_retry_after_is_absent() {
    let server = TestServer::start(|n| match n {
        1 => Reply::limited("ratelimit", "\"default\";r=0;t=4"),
        2 => Reply::limited("ratelimit-reset", "3"),
        _ => Reply::ok(),
    })
    .await;
    let h = harness(RetryPolicy::default());
    let response = h.client.get(server.url("/")).send().await.unwrap();
    assert_eq!(report(&response).waits, [secs(4), secs(3)]);
}

#[tokio::test]
async fn a_wait_beyond_the_deadline_gives_up_at_once_and_says_why() {
    let server = TestServer::start(|_| Reply::limited("retry-after", "3600")).await;
    let h = harness(RetryPolicy::builder().deadline(secs(60)).build().unwrap());
    let response = h.client.get(server.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 429, "the caller gets the server's last answer");
    let r = report(&response);
    assert_eq!(r.attempts, 1);
    assert!(r.waits.is_empty());
    assert_eq!(
        r.stop,
        GiveUpReason::DeadlineWouldPass { wait: secs(3600), left: secs(60), source: DelaySource::RetryAfterSeconds }
    );
    assert_eq!(h.clock.now(), START_SECS * NANOS_PER_SEC, "no time was spent waiting");
    // Huge values neither overflow nor panic.
    let server = TestServer::start(|_| Reply::limited("retry-after", "184467440737095516160000")).await;
    let response = h.client.get(server.url("/")).send().await.unwrap();
    assert!(matches!(report(&response).stop, GiveUpReason::DeadlineWouldPass { .. }));
}

#[tokio::test]
async fn post_is_retried_on_429_but_not_on_503() {
    let server = TestServer::start(|n| if n == 1 { Reply::limited("retry-after", "1") } else { Reply::ok() }).await;
    let h = harness(RetryPolicy::builder().retry_503().build().unwrap());
    let response = h.client.post(server.url("/")).header("x-client", "p").body("order=1").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let seen = server.seen("p");
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.method == "POST" && s.body == "order=1"), "the body is sent again unchanged");

    let unavailable = TestServer::start(|_| Reply::status(503)).await;
    let response = h.client.post(unavailable.url("/")).header("x-client", "p").body("x").send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(report(&response).stop, GiveUpReason::NotIdempotent { method: http::Method::POST });
    assert_eq!(unavailable.seen("p").len(), 1, "a POST that met a 503 is not sent again");

    let response = h.client.get(unavailable.url("/")).header("x-client", "g").send().await.unwrap();
    let r = report(&response);
    assert_eq!((r.attempts, r.unavailable), (5, 5));
    assert_eq!(r.stop, GiveUpReason::AttemptsExhausted { attempts: 5 });
    assert_eq!(unavailable.seen("g").len(), 5);
}

#[tokio::test]
async fn connection_errors_end_in_a_retry_error_with_the_report() {
    let url = closed_port_url().await;
    let h = harness(RetryPolicy::builder().max_attempts(3).build().unwrap());
    let err = h.client.get(&url).send().await.unwrap_err();
    let retry = RetryError::from_middleware_error(&err).expect("the retry middleware's error");
    assert_eq!((retry.report.attempts, retry.report.connection_errors), (3, 3));
    assert_eq!(retry.report.stop, GiveUpReason::AttemptsExhausted { attempts: 3 });
    assert_eq!(retry.report.waits, [Duration::from_millis(100), Duration::from_millis(200)]);
    let source = retry.source.downcast_ref::<reqwest_middleware::Error>().expect("the last error");
    assert!(source.is_connect());

    let err = h.client.post(&url).body("x").send().await.unwrap_err();
    let retry = RetryError::from_middleware_error(&err).unwrap();
    assert_eq!(retry.report.attempts, 1);
    assert_eq!(retry.report.stop, GiveUpReason::NotIdempotent { method: http::Method::POST });
}

#[tokio::test]
async fn the_budget_bounds_retries_across_calls() {
    let server = TestServer::start(|_| Reply::limited("retry-after", "0")).await;
    let policy = RetryPolicy::builder().max_attempts(100).budget(RetryBudget::new(0.1, 2).unwrap()).build().unwrap();
    let h = harness(policy);
    let mut retries = 0;
    for _ in 0..30 {
        let response = h.client.get(server.url("/")).header("x-client", "b").send().await.unwrap();
        retries += report(&response).retries();
    }
    // 2 in hand (spent by the first call), then one earned per 10 calls: calls 11 and 21.
    assert_eq!(retries, 4);
    assert_eq!(server.seen("b").len() as u32, 30 + retries);
    let last = h.client.get(server.url("/")).header("x-client", "b").send().await.unwrap();
    assert_eq!(report(&last).stop, GiveUpReason::BudgetExhausted);
}

/// A server limited by a real token bucket (capacity 1, one token per second) on the shared
/// virtual clock: the client that waits as told gets through with one 429 per request; the
/// client that retries at once burns its attempts on 429s and fails.
#[tokio::test]
async fn honouring_retry_after_beats_retrying_at_once() {
    async fn run(follow_server: bool) -> (u32, u32) {
        let clock = Arc::new(ManualClock::new(START_SECS * NANOS_PER_SEC));
        let bucket = TokenBucket::new(1, 1.0).unwrap();
        let state = Arc::new(std::sync::Mutex::new(Default::default()));
        let server_clock = clock.clone();
        let server = TestServer::start(move |_| {
            let d = bucket.check(&mut state.lock().unwrap(), server_clock.now(), 1).unwrap();
            if d.allowed {
                Reply::ok()
            } else {
                Reply::limited("retry-after", d.retry_after.div_ceil(NANOS_PER_SEC).max(1).to_string())
            }
        })
        .await;
        let policy = RetryPolicy::builder()
            .follow_server(follow_server)
            .base(Duration::ZERO)
            .cap(Duration::ZERO)
            .max_attempts(5)
            .build()
            .unwrap();
        let sleeper = Arc::new(ManualSleeper::new(clock.clone()));
        let retrier = Retrier::new(policy)
            .with_clock(clock.clone())
            .with_random(Arc::new(SplitMix64::seeded(1)))
            .with_sleeper(sleeper);
        let client = ClientBuilder::new(plain_client()).with(RetryMiddleware::from(retrier)).build();
        let (mut through, mut limited) = (0, 0);
        for _ in 0..10 {
            let response = client.get(server.url("/")).send().await.unwrap();
            through += u32::from(response.status() == 200);
            limited += report(&response).rate_limited;
        }
        (through, limited)
    }
    let (honouring_ok, honouring_429) = run(true).await;
    let (eager_ok, eager_429) = run(false).await;
    assert_eq!((honouring_ok, honouring_429), (10, 9), "one 429 per request after the first, then exactly on time");
    assert_eq!((eager_ok, eager_429), (1, 45), "the eager client never lets time pass");
}
