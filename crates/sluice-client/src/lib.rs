//! # sluice-client
//!
//! The client's half of the rate-limit contract, for Rust HTTP clients: when a server says
//! "too many requests", wait as long as it asked, otherwise back off exponentially with jitter,
//! and stop when another attempt no longer makes sense. Clients that retry at once in a loop
//! turn a rate limit into an outage.
//!
//! Add it to a `reqwest` client in three lines (reqwest 0.13 and reqwest-middleware 0.5,
//! re-exported here as [`reqwest`] and [`reqwest_middleware`]: build with these and the
//! versions always meet):
//!
//! ```
//! # #[cfg(feature = "reqwest")] {
//! use sluice_client::{reqwest, reqwest_middleware};
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(sluice_client::RetryMiddleware::new(sluice_client::RetryPolicy::default()))
//!     .build();
//! # drop(client);
//! # }
//! ```
//!
//! For hyper (or any tower `Service<http::Request<B>>` with a cloneable body) there is
//! [`RetryLayer`]. The `reqwest` feature (on by default) brings the middleware; without it
//! (`default-features = false`) the crate is the policy and the tower layer alone, and reqwest
//! is not compiled.
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
//! 2. **How long to wait.** As long as the server asked, no jitter added and never shortened,
//!    from the first of the headers below that asks for a wait; a past time means now. Without
//!    one, exponential backoff: `min(cap, base * 2^retry)`, with full jitter (uniform in
//!    `[0, that]`) by default, or equal jitter, or none.
//! 3. **When to stop.** After `max_attempts` attempts; when a wait would reach the overall
//!    deadline (at once, without waiting, reporting the wait asked for and the time left); when a
//!    server asks for more than [`max_server_wait`](RetryPolicyBuilder::max_server_wait) (10
//!    minutes by default, deadline or not); when the optional [`RetryBudget`] says retries are
//!    already at their share of requests (Google SRE's 10%); when the body cannot be sent again.
//!
//! ## The headers read
//!
//! In order of precedence. A header that is absent, malformed (it is then ignored, never an
//! error and never a long wait) or that says quota is left hands over to the next:
//!
//! | header | form | the wait |
//! |---|---|---|
//! | `Retry-After` | delay-seconds (`120`) or an HTTP-date in any of RFC 9110's three formats (IMF-fixdate, RFC 850 with its two-digit-year rule, asctime) | the seconds, or until the date (a past date: now) |
//! | `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10) | a structured-field List of policies, `"per-ip";r=0;t=30, "burst";r=5;t=2`, over one or more lines | the longest `t` among policies with `r=0`; none if no policy has `r=0`; a field that does not parse, or with any member lacking `r` or with a non-integer or negative `r`/`t`, is ignored whole |
//! | `RateLimit-Reset` (draft 6) | delay-seconds | the seconds, unless `RateLimit-Remaining` is a positive integer |
//! | `X-RateLimit-Reset` | `1*DIGIT ["." 1*DIGIT]`, its form told by magnitude: below 10^9 seconds from now; from 10^9 to below 10^11 a Unix time in seconds (GitHub); from 10^11 to below 10^14 a Unix time in milliseconds; 10^14 and above ignored | the seconds, or until the time (a past time: now), unless `X-RateLimit-Remaining` is a positive integer |
//!
//! `RateLimit-Remaining: 0` and `X-RateLimit-Remaining: 0` (or no Remaining at all) make the
//! Reset beside them the wait; a positive Remaining says that limit is not why the request was
//! refused. See [`server_delay`] and [`x_ratelimit_reset`]. GitHub's headers, for one:
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use sluice_client::{DelaySource, ResetForm, server_delay};
//!
//! let now = 1_750_000_000 * 1_000_000_000; // the injected clock, Unix nanoseconds
//! let mut github = HeaderMap::new();
//! github.insert("x-ratelimit-limit", HeaderValue::from_static("60"));
//! github.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
//! github.insert("x-ratelimit-reset", HeaderValue::from_static("1750000042"));
//! let source = DelaySource::XRateLimitReset(ResetForm::UnixSeconds);
//! assert_eq!(server_delay(&github, now), Some((42_000_000_000, source)));
//! ```
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
#[cfg(feature = "reqwest")]
mod middleware;
mod policy;
mod random;
mod report;
mod retrier;
mod retry_after;
mod server_hint;
mod service_limit;
mod sleeper;
mod x_ratelimit;

pub use budget::{BudgetError, RetryBudget};
pub use decision::{Attempt, AttemptResult, DelaySource, GiveUpReason, RetryDecision, is_idempotent};
pub use layer::{RetryFuture, RetryLayer, RetryService};
#[cfg(feature = "reqwest")]
pub use middleware::RetryMiddleware;
pub use policy::{Jitter, PolicyError, RetryPolicy, RetryPolicyBuilder};
pub use random::{RandomSource, SplitMix64};
pub use report::{BoxError, RetryError, RetryReport};
/// The reqwest this crate's middleware is built for.
#[cfg(feature = "reqwest")]
pub use reqwest;
/// The reqwest-middleware this crate's middleware is built for.
#[cfg(feature = "reqwest")]
pub use reqwest_middleware;
pub use retrier::{Retrier, Session};
pub use retry_after::RetryAfter;
pub use server_hint::server_delay;
pub use sleeper::{ManualSleeper, SleepFuture, Sleeper, TokioSleeper};
pub use x_ratelimit::{IGNORED_FROM, ResetForm, UNIX_MILLIS_FROM, UNIX_SECONDS_FROM, x_ratelimit_reset};
