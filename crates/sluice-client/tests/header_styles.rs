//! Each rate-limit header style a real API sends, end to end: a local hyper server answers 429
//! with the headers, the reqwest middleware retries, and the manual sleeper records the waits.

mod support;

use std::sync::Arc;
use std::time::Duration;

use sluice_client::{DelaySource, GiveUpReason, ResetForm, RetryPolicy, RetryReport};
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC};
use support::client::{START_SECS, harness, harness_on, report};
use support::{Reply, TestServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The first backoff ceiling of the default policy (the random source draws the top value).
const BACKOFF: Duration = Duration::from_millis(100);

/// One call to a server that answers 429 with `headers` the first time and 200 after.
async fn one_refusal(policy: RetryPolicy, headers: Vec<(&'static str, String)>) -> (u16, RetryReport, Duration) {
    let server = TestServer::start(move |n| if n == 1 { Reply::limited_with(&headers) } else { Reply::ok() }).await;
    let h = harness(policy);
    let response = h.client.get(server.url("/")).send().await.unwrap();
    let r = report(&response);
    assert_eq!(h.sleeper.waits(), r.waits, "the sleeper waited what the report says");
    let elapsed = Duration::from_nanos(h.clock.now() - START_SECS * NANOS_PER_SEC);
    (response.status().as_u16(), r, elapsed)
}

async fn waits(headers: &[(&'static str, &str)]) -> Vec<Duration> {
    let headers = headers.iter().map(|&(k, v)| (k, v.to_string())).collect();
    let (status, r, elapsed) = one_refusal(RetryPolicy::default(), headers).await;
    assert_eq!(status, 200);
    assert_eq!(elapsed, r.waited(), "virtual time moved by the waits alone");
    r.waits
}

fn at(offset_secs: u64) -> String {
    (START_SECS + offset_secs).to_string()
}

#[tokio::test]
async fn github_style_unix_seconds_with_remaining_zero() {
    let reset = at(7);
    let github = [
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", reset.as_str()),
        ("x-ratelimit-used", "60"),
        ("x-ratelimit-resource", "core"),
    ];
    assert_eq!(waits(&github).await, [Duration::from_secs(7)]);
}

#[tokio::test]
async fn every_form_of_x_ratelimit_reset() {
    let millis = ((START_SECS + 2) * 1_000 + 500).to_string();
    let past = (START_SECS - 100).to_string();
    for (value, expected) in [
        ("4", Duration::from_secs(4)),
        ("1.5", ms(1_500)),
        ("0.25", ms(250)),
        (millis.as_str(), ms(2_500)),
        (past.as_str(), Duration::ZERO),
        ("soon", BACKOFF),
        ("-4", BACKOFF),
        ("4, 5", BACKOFF),
    ] {
        assert_eq!(waits(&[("x-ratelimit-reset", value)]).await, [expected], "X-RateLimit-Reset: {value}");
    }
}

#[tokio::test]
async fn remaining_decides_whether_the_reset_is_the_wait() {
    let reset = at(9);
    for (family, remaining, reset, expected) in [
        ("x", "0", reset.as_str(), Duration::from_secs(9)),
        ("x", "12", reset.as_str(), BACKOFF),
        ("draft-6", "0", "9", Duration::from_secs(9)),
        ("draft-6", "12", "9", BACKOFF),
    ] {
        let (remaining_name, reset_name) = match family {
            "x" => ("x-ratelimit-remaining", "x-ratelimit-reset"),
            _ => ("ratelimit-remaining", "ratelimit-reset"),
        };
        let got = waits(&[(remaining_name, remaining), (reset_name, reset)]).await;
        assert_eq!(got, [expected], "{family}: remaining {remaining}");
    }
}

#[tokio::test]
async fn a_far_future_reset_is_never_slept() {
    let in_a_year = at(365 * 86_400);
    for value in [in_a_year.as_str(), "90000000000", "99999999999999"] {
        let headers = vec![("x-ratelimit-remaining", "0".to_string()), ("x-ratelimit-reset", value.to_string())];
        // With the default five-minute deadline: give up at once, saying so.
        let (status, r, elapsed) = one_refusal(RetryPolicy::default(), headers.clone()).await;
        assert_eq!(status, 429, "{value}: the caller gets the server's answer");
        assert!(matches!(r.stop, GiveUpReason::DeadlineWouldPass { .. }), "{value}: {:?}", r.stop);
        assert_eq!((r.attempts, elapsed), (1, Duration::ZERO), "{value}");
        // With no deadline at all, the server-wait maximum still refuses.
        let (status, r, elapsed) = one_refusal(RetryPolicy::builder().no_deadline().build().unwrap(), headers).await;
        assert_eq!(status, 429);
        assert!(
            matches!(
                r.stop,
                GiveUpReason::ServerWaitTooLong { max, source: DelaySource::XRateLimitReset(_), .. }
                    if max == Duration::from_secs(600)
            ),
            "{value}: {:?}",
            r.stop
        );
        assert_eq!(elapsed, Duration::ZERO);
    }
    // The form is reported: a 13-digit value was read as milliseconds.
    let far_ms = ((START_SECS + 3_600) * 1_000).to_string();
    let headers = vec![("x-ratelimit-reset", far_ms)];
    let (_, r, _) = one_refusal(RetryPolicy::builder().no_deadline().build().unwrap(), headers).await;
    assert_eq!(
        r.stop,
        GiveUpReason::ServerWaitTooLong {
            wait: Duration::from_secs(3_600),
            max: Duration::from_secs(600),
            source: DelaySource::XRateLimitReset(ResetForm::UnixMillis),
        }
    );
}

#[tokio::test]
async fn the_ratelimit_list_waits_for_the_longest_exhausted_policy() {
    let several = r#""per-ip";r=0;t=30, "burst";r=5;t=2, "per-user";r=0;t=12"#;
    assert_eq!(waits(&[("ratelimit", several)]).await, [Duration::from_secs(30)]);
    // Split over two field lines.
    assert_eq!(
        waits(&[("ratelimit", r#""per-ip";r=0;t=3"#), ("ratelimit", r#""per-user";r=0;t=8"#)]).await,
        [Duration::from_secs(8)]
    );
    // No policy exhausted: no wait from the server.
    assert_eq!(waits(&[("ratelimit", r#""per-ip";r=1;t=30, "burst";r=5;t=2"#)]).await, [BACKOFF]);
    for malformed in [r#""per-ip";r=0;t=30, "burst";t=2"#, r#""per-ip";r=0;t=30;"#, r#"per-ip;r=0;t=30"#] {
        assert_eq!(waits(&[("ratelimit", malformed)]).await, [BACKOFF], "{malformed}");
    }
}

/// One server that drops a header from each 429 in turn: the waits show which header won.
#[tokio::test]
async fn precedence_from_retry_after_down_to_x_ratelimit_reset() {
    let clock = Arc::new(ManualClock::new(START_SECS * NANOS_PER_SEC));
    let server_clock = clock.clone();
    let server = TestServer::start(move |n| {
        let x_reset = (server_clock.now() / NANOS_PER_SEC + 4).to_string();
        let all = [
            ("retry-after", "1".to_string()),
            ("ratelimit", r#""p";r=0;t=2"#.to_string()),
            ("ratelimit-remaining", "0".to_string()),
            ("ratelimit-reset", "3".to_string()),
            ("x-ratelimit-remaining", "0".to_string()),
            ("x-ratelimit-reset", x_reset),
        ];
        // Each 429 leaves out the header that won the one before.
        match n {
            1 => Reply::limited_with(&all),
            2 => Reply::limited_with(&all[1..]),
            3 => Reply::limited_with(&all[2..]),
            4 => Reply::limited_with(&all[4..]),
            _ => Reply::ok(),
        }
    })
    .await;
    let h = harness_on(RetryPolicy::default(), clock);
    let response = h.client.get(server.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let r = report(&response);
    // Retry-After, then RateLimit's t, then RateLimit-Reset, then X-RateLimit-Reset.
    assert_eq!(r.waits, [1, 2, 3, 4].map(Duration::from_secs));
    assert_eq!(h.clock.now(), (START_SECS + 10) * NANOS_PER_SEC);
}
