//! JSON responses sluice writes itself.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use serde::Serialize;

/// The body of every response the gateway sends: its own JSON, or the upstream's stream.
pub type Body = Either<Full<Bytes>, Incoming>;

/// A JSON response with `Content-Type` and `Content-Length`.
pub fn json<T: Serialize>(status: u16, payload: &T) -> Response<Body> {
    let body = serde_json::to_vec(payload).unwrap_or_else(|_| b"{}".to_vec());
    let len = body.len();
    let mut res = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    res
}

/// The body of an admitted request that sluice answers itself (no upstream).
#[derive(Serialize)]
pub struct Allowed<'a> {
    /// Always `allowed`.
    pub status: &'static str,
    /// The route's name.
    pub route: &'a str,
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

/// `{"error": code, "message": message}`
pub fn error(status: u16, code: &str, message: &str) -> Response<Body> {
    json(status, &ErrorBody { error: code, message })
}

/// The body of a denial. It names no key, IP or policy: those go to the logs only.
pub fn denial(status: u16, retry_after_secs: u64) -> Response<Body> {
    json(status, &denial_payload(retry_after_secs))
}

/// The JSON bytes of a denial's body, for faces with their own body type (the tower layer).
pub fn denial_body(retry_after_secs: u64) -> Bytes {
    Bytes::from(serde_json::to_vec(&denial_payload(retry_after_secs)).unwrap_or_default())
}

fn denial_payload(retry_after_seconds: u64) -> DenialBody {
    DenialBody {
        error: "rate_limit_exceeded",
        message: "Too many requests: retry after the number of seconds in Retry-After.",
        retry_after_seconds,
    }
}
