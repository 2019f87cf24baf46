//! A reqwest client with the retry middleware on virtual time: a manual clock that the sleeper
//! moves, and a random source that always draws the top value (full jitter gives the ceiling).

use std::sync::Arc;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use sluice_client::{ManualSleeper, Retrier, RetryMiddleware, RetryPolicy, RetryReport};
use sluice_core::{ManualClock, NANOS_PER_SEC};

/// 2025-06-15T12:00:00Z, where the harness's clock starts.
pub const START_SECS: u64 = 1_749_988_800;

pub struct Harness {
    pub client: ClientWithMiddleware,
    pub clock: Arc<ManualClock>,
    pub sleeper: Arc<ManualSleeper>,
}

pub fn harness(policy: RetryPolicy) -> Harness {
    let clock = Arc::new(ManualClock::new(START_SECS * NANOS_PER_SEC));
    harness_on(policy, clock)
}

pub fn harness_on(policy: RetryPolicy, clock: Arc<ManualClock>) -> Harness {
    let sleeper = Arc::new(ManualSleeper::new(clock.clone()));
    let retrier =
        Retrier::new(policy).with_clock(clock.clone()).with_random(Arc::new(|| u64::MAX)).with_sleeper(sleeper.clone());
    let client = ClientBuilder::new(plain_client()).with(RetryMiddleware::from(retrier)).build();
    Harness { client, clock, sleeper }
}

/// A reqwest client that ignores proxy settings in the environment: the server is local.
pub fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("a plain HTTP client")
}

pub fn report(response: &reqwest::Response) -> RetryReport {
    response.extensions().get::<RetryReport>().expect("the final response carries a RetryReport").clone()
}
