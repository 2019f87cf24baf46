//! The responses sluice writes itself: denials, refusals, errors. Each face turns an [`Answer`]
//! into its own response type, so every face answers alike.

use std::borrow::Borrow;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use serde::Serialize;
use sluice_config::HeaderStyle;

use crate::headers::{LimitView, denied_retry_after_secs, number, write_denial_headers, write_denied};
use sluice_core::decimal;

/// A response sluice writes itself: a status, headers and a JSON body.
///
/// ```
/// use sluice_config::HeaderStyle;
/// use sluice_core::{Decision, NANOS_PER_SEC, Policy, TokenBucket};
/// use sluice_http::headers::LimitView;
/// use sluice_http::response::Answer;
/// let bucket: Policy = TokenBucket::new(5, 1.0).unwrap().into();
/// let decision = Decision { allowed: false, limit: 5, remaining: 0, reset_after: 5 * NANOS_PER_SEC,
///                           retry_after: 2 * NANOS_PER_SEC + 1, delay: 0 };
/// let views = [LimitView::new("per-ip", &bucket, decision)];
/// let a = Answer::denial(http::StatusCode::TOO_MANY_REQUESTS, &views, Some(0), &[HeaderStyle::Ietf], 0);
/// assert_eq!(a.headers["retry-after"], "3");
/// assert_eq!(a.headers["ratelimit"], r#""per-ip";r=0;t=3"#);
/// assert_eq!(a.headers["cache-control"], "no-store");
/// let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
/// assert_eq!(body["retry_after_seconds"], 3);
/// let res: http::Response<String> = a.into_response(|b| String::from_utf8_lossy(&b).into_owned());
/// assert_eq!(res.status(), 429);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// `Content-Type` and `Content-Length`, and for denials `Retry-After`, `Cache-Control` and
    /// the rate-limit headers.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Bytes,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
struct DenialBody {
    error: &'static str,
    message: &'static str,
    retry_after_seconds: u64,
}

/// A JSON body that differs from one response to the next only in one number (a denial's
/// retry seconds), wherever it appears: serialised once, with a sentinel in the number's
/// place, and written for each response by joining the parts around the number — no
/// serialisation, one allocation.
///
/// ```
/// use sluice_http::response::JsonTemplate;
/// #[derive(serde::Serialize)]
/// struct Denied { error: &'static str, retry: u64, again: u64 }
/// let t = JsonTemplate::new(|n| Denied { error: "over", retry: n, again: n });
/// assert_eq!(&t.render(7)[..], br#"{"error":"over","retry":7,"again":7}"#);
/// assert_eq!(&t.render(u64::MAX)[..], format!(r#"{{"error":"over","retry":{0},"again":{0}}}"#, u64::MAX).as_bytes());
/// ```
#[derive(Debug, Clone)]
pub struct JsonTemplate {
    /// The serialised text, split where the number goes (one more part than numbers).
    parts: Box<[Box<[u8]>]>,
}

/// What the template serialises in the number's place, then looks for.
const SENTINEL: u64 = u64::MAX;

impl JsonTemplate {
    /// The template of the bodies `make` builds around its number. `make` must put its number
    /// in numeric fields only, and nowhere else write the sentinel's digits (20 of them).
    pub fn new<T: Serialize>(make: impl Fn(u64) -> T) -> Self {
        let text = serde_json::to_vec(&make(SENTINEL)).unwrap_or_else(|_| b"{}".to_vec());
        let sentinel = SENTINEL.to_string();
        let mut parts = Vec::new();
        let mut rest = &text[..];
        while let Some(at) = rest.windows(sentinel.len()).position(|w| w == sentinel.as_bytes()) {
            parts.push(rest[..at].into());
            rest = &rest[at + sentinel.len()..];
        }
        parts.push(rest.into());
        Self { parts: parts.into() }
    }

    /// The body for `n`.
    pub fn render(&self, n: u64) -> Bytes {
        let mut buf = [0u8; 20];
        let digits = decimal(n, &mut buf);
        let len = self.parts.iter().map(|p| p.len()).sum::<usize>() + digits.len() * (self.parts.len() - 1);
        let mut out = Vec::with_capacity(len);
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(digits);
            }
            out.extend_from_slice(part);
        }
        Bytes::from(out)
    }
}

impl Answer {
    /// `payload` as JSON with `status`, `Content-Type` and `Content-Length`.
    pub fn json<T: Serialize>(status: StatusCode, payload: &T) -> Self {
        Self::json_with_room(status, payload, 8)
    }

    /// [`Answer::json`] with room for `headers` headers.
    fn json_with_room<T: Serialize>(status: StatusCode, payload: &T, headers: usize) -> Self {
        let body = Bytes::from(serde_json::to_vec(payload).unwrap_or_else(|_| b"{}".to_vec()));
        Self::json_bytes(status, body, headers)
    }

    /// `body`, JSON already, with `status`, `Content-Type`, `Content-Length` and room for
    /// `headers` headers.
    pub fn json_bytes(status: StatusCode, body: Bytes, headers: usize) -> Self {
        let mut headers = HeaderMap::with_capacity(headers);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        headers.insert(CONTENT_LENGTH, number(body.len() as u64));
        Self { status, headers, body }
    }

    /// `{"error": code, "message": message}`.
    pub fn error(status: StatusCode, code: &str, message: &str) -> Self {
        Self::json(status, &ErrorBody { error: code, message })
    }

    /// A refused request (400): `message` says what is wrong with it.
    pub fn bad_request(message: &str) -> Self {
        Self::error(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A denial of a request limited by `views` (every limit that applies, in the route's order;
    /// `described` is the one that denied, when known): `status` (429 unless configured),
    /// `Retry-After` (the described limit's wait in whole seconds, rounded up, at least 1; the
    /// same number as its `t` in the `ietf` `RateLimit`), `Cache-Control: no-store`, the
    /// rate-limit headers in `styles` (`unix_now` for the absolute `X-RateLimit-Reset`), and a
    /// body that names no key, IP or policy (those go to the logs only).
    pub fn denial<'a, I>(
        status: StatusCode,
        views: I,
        described: Option<usize>,
        styles: &[HeaderStyle],
        unix_now: u64,
    ) -> Self
    where
        I: IntoIterator + Clone,
        I::Item: Borrow<LimitView<'a>>,
    {
        static BODY: std::sync::LazyLock<JsonTemplate> = std::sync::LazyLock::new(|| {
            JsonTemplate::new(|retry_after_seconds| DenialBody {
                error: "rate_limit_exceeded",
                message: "Too many requests: retry after the number of seconds in Retry-After.",
                retry_after_seconds,
            })
        });
        let body = BODY.render(denied_retry_after_secs(views.clone(), described));
        // Room for every header of the three styles with the denial's own: no map regrowth.
        let mut a = Self::json_bytes(status, body, 16);
        write_denied(&mut a.headers, styles, views, described, unix_now);
        a
    }

    /// The store cannot decide (fail-closed, or full and refusing): 503, the limiter is
    /// unavailable, not the client's quota; retry in a second.
    pub fn limiter_unavailable() -> Self {
        Self::busy("limiter_unavailable", "The rate limiter is unavailable; retry shortly.")
    }

    /// Too many requests in flight: 503, retry in a second.
    pub fn overloaded() -> Self {
        Self::busy("overloaded", "The service is overloaded; retry shortly.")
    }

    fn busy(code: &str, message: &str) -> Self {
        let mut a = Self::error(StatusCode::SERVICE_UNAVAILABLE, code, message);
        write_denial_headers(&mut a.headers, 1);
        a
    }

    /// The response, its body made by `body` from the JSON bytes.
    pub fn into_response<B>(self, body: impl FnOnce(Bytes) -> B) -> Response<B> {
        let mut res = Response::new(body(self.body));
        *res.status_mut() = self.status;
        *res.headers_mut() = self.headers;
        res
    }
}
