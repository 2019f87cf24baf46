//! sluice-client against a real `sluice serve`: a client that waits as the server asks gets every
//! request through with far fewer 429s than one that retries at once.
//!
//! Each client gets its own seed service (the service limits per client IP, and both clients
//! share one address) with a bucket of capacity 1 refilled at 1 token per second, so that the
//! service's `Retry-After` (whole seconds, rounded up) says exactly when the next token comes.
//! Each client makes the same 3 sequential GETs with at most 5 attempts per request.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest_middleware::ClientWithMiddleware;
use sluice_client::{GiveUpReason, RetryMiddleware, RetryPolicy, RetryReport};

const REQUESTS: u32 = 3;
const MAX_ATTEMPTS: u32 = 5;

mod support;

use support::Serve;

fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().unwrap();
    reqwest_middleware::ClientBuilder::new(inner).with(RetryMiddleware::new(policy)).build()
}

/// What one client's run added up to.
#[derive(Debug, Default)]
struct Tally {
    attempts: u32,
    rate_limited: u32,
    successes: u32,
    reports: Vec<RetryReport>,
}

async fn run(client: &ClientWithMiddleware, url: &str) -> Tally {
    let mut t = Tally::default();
    for _ in 0..REQUESTS {
        let response = client.get(url).send().await.expect("a response from sluice serve");
        let report = response.extensions().get::<RetryReport>().cloned().expect("the middleware's report");
        t.attempts += report.attempts;
        t.rate_limited += report.rate_limited;
        t.successes += u32::from(response.status() == StatusCode::OK);
        t.reports.push(report);
    }
    t
}

#[tokio::test]
async fn honouring_retry_after_beats_retrying_at_once() {
    let honouring_server = Serve::seed("1", "1");
    let immediate_server = Serve::seed("1", "1");
    let honouring =
        client(RetryPolicy::builder().max_attempts(MAX_ATTEMPTS).deadline(Duration::from_secs(30)).build().unwrap());
    let immediate = client(
        RetryPolicy::builder()
            .follow_server(false)
            .base(Duration::ZERO)
            .cap(Duration::ZERO)
            .max_attempts(MAX_ATTEMPTS)
            .deadline(Duration::from_secs(30))
            .build()
            .unwrap(),
    );

    let h = run(&honouring, &honouring_server.hello()).await;
    let i = run(&immediate, &immediate_server.hello()).await;
    eprintln!("{REQUESTS} sequential GETs, at most {MAX_ATTEMPTS} attempts each, bucket of 1 at 1 per second:");
    eprintln!("{:<32} {:>8} {:>6} {:>10}", "client", "attempts", "429s", "successes");
    eprintln!("{:<32} {:>8} {:>6} {:>10}", "honours Retry-After", h.attempts, h.rate_limited, h.successes);
    eprintln!("{:<32} {:>8} {:>6} {:>10}", "retries at once", i.attempts, i.rate_limited, i.successes);

    // Every request got through, each refused one after exactly the second the server asked for.
    assert_eq!(h.successes, REQUESTS, "{h:?}");
    assert!(h.rate_limited < REQUESTS, "{h:?}");
    for r in &h.reports {
        assert_eq!(r.stop, GiveUpReason::Succeeded, "{r:?}");
        assert!(r.waits.iter().all(|w| *w == Duration::from_secs(1)), "{r:?}");
        assert_eq!(r.waits.len() as u32, r.rate_limited);
    }

    // Retrying at once burns every attempt on 429s and still fails.
    assert!(i.successes < REQUESTS, "{i:?}");
    assert!(i.rate_limited >= 3 * h.rate_limited.max(1), "honouring {h:?}, immediate {i:?}");
    for r in i.reports.iter().filter(|r| r.rate_limited > 0) {
        assert!(r.waits.iter().all(|w| w.is_zero()), "{r:?}");
    }
    assert!(i.reports.iter().any(|r| r.stop == GiveUpReason::AttemptsExhausted { attempts: MAX_ATTEMPTS }), "{i:?}");
}
