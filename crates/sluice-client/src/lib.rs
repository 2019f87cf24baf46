//! # sluice-client
//!
//! The client's half of the rate-limit contract, for Rust HTTP clients: when a server says
//! "too many requests", wait as long as it asked, otherwise back off exponentially with jitter,
//! and stop when another attempt no longer makes sense. Clients that retry at once in a loop
//! turn a rate limit into an outage.
//!
//! Add it to a `reqwest` client in three lines:
//!
//! ```
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(sluice_client::RetryMiddleware::new(sluice_client::RetryPolicy::default()))
//!     .build();
//! # drop(client);
//! ```
//!
//! For hyper (or any tower `Service<http::Request<B>>` with a cloneable body) there is
//! [`RetryLayer`].
//!
//! ## The contract
//!
//! After each attempt, [`RetryPolicy::decide`] (a pure function) answers
//! [`RetryDecision::RetryAfter`] or [`RetryDecision::GiveUp`] with a reason:
//!
//! 1. **What is retried.** A `429 Too Many Requests` always, for every method: the server did
//!    not process the request. A `503` (when configured with
//!    [`retry_503`](RetryPolicyBuilder::retry_503)) or a connection error only for idempotent
//!    methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), since the request may have been
//!    processed; POST and PATCH only if the caller opts in. Anything else is final.
//! 2. **How long to wait.** A valid `Retry-After` exactly as given, no jitter added and never
//!    shortened: delay-seconds or an HTTP-date in all three formats RFC 9110 makes recipients
//!    accept (IMF-fixdate, RFC 850 with its two-digit-year rule, asctime); a past date means now.
//!    Without one, `RateLimit-Reset` (draft 6) or the `t` of an exhausted policy in `RateLimit`
//!    (current draft). A value outside the grammar (negative, fractional, garbage) is ignored.
//!    Without any of these, exponential backoff: `min(cap, base * 2^retry)`, with full jitter
//!    (uniform in `[0, that]`) by default, or equal jitter, or none.
//! 3. **When to stop.** After `max_attempts` attempts; when a wait would reach the overall
//!    deadline (at once, without waiting, reporting the wait asked for and the time left); when
//!    the optional [`RetryBudget`] says retries are already at their share of requests (Google
//!    SRE's 10%); when the body cannot be sent again.
//!
//! Every final response carries a [`RetryReport`] in its extensions (attempts, 429s received,
//! waits, why it stopped); a call that ends in an error returns a [`RetryError`] with the same
//! report.
//!
//! ## Deterministic by injection
//!
//! The clock ([`sluice_core::Clock`], Unix nanoseconds), the random source ([`RandomSource`])
//! and the sleeper ([`Sleeper`]) are injected through [`Retrier`], so a test or a simulation
//! runs with a `ManualClock`, a seeded [`SplitMix64`] and a [`ManualSleeper`] and waits no real
//! time:
//!
//! ```
//! use std::time::Duration;
//! use http::{HeaderMap, HeaderValue, Method, StatusCode};
//! use sluice_client::{Attempt, GiveUpReason, AttemptResult, RetryDecision, RetryPolicy};
//!
//! let policy = RetryPolicy::builder().deadline(Duration::from_secs(60)).build().unwrap();
//! let now = 1_700_000_000_000_000_000; // Unix nanoseconds
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after", HeaderValue::from_static("Tue, 14 Nov 2023 22:13:50 GMT"));
//! let attempt = Attempt {
//!     index: 0,
//!     method: &Method::POST,
//!     result: AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &headers },
//!     now,
//!     deadline: Some(now + 60_000_000_000),
//! };
//! let no_jitter_needed = || 0u64;
//! // 1_700_000_000 s is 22:13:20: the server asked for 30 s, and a 429 is safe to repeat.
//! assert_eq!(policy.decide(&attempt, &no_jitter_needed), RetryDecision::RetryAfter(Duration::from_secs(30)));
//!
//! // The same 429 asking for two minutes would pass the deadline: give up now and say why.
//! let mut later = HeaderMap::new();
//! later.insert("retry-after", HeaderValue::from_static("120"));
//! let attempt = Attempt { result: AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers: &later }, ..attempt };
//! assert!(matches!(
//!     policy.decide(&attempt, &no_jitter_needed),
//!     RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { .. })
//! ));
//! ```

mod budget;
mod decision;
mod http_date;
mod layer;
mod middleware;
mod policy;
mod random;
mod report;
mod retrier;
mod server_hint;
mod sleeper;

pub use budget::{BudgetError, RetryBudget};
pub use decision::{Attempt, AttemptResult, DelaySource, GiveUpReason, RetryDecision, is_idempotent};
pub use layer::{RetryFuture, RetryLayer, RetryService};
pub use middleware::RetryMiddleware;
pub use policy::{Jitter, PolicyError, RetryPolicy, RetryPolicyBuilder};
pub use random::{RandomSource, SplitMix64};
pub use report::{BoxError, RetryError, RetryReport};
pub use retrier::{Retrier, Session};
pub use server_hint::{RetryAfter, server_delay};
pub use sleeper::{ManualSleeper, SleepFuture, Sleeper, TokioSleeper};
