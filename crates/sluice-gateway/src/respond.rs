//! The server's response body, and its JSON responses made from `sluice-http`'s [`Answer`]s.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{Either, Full};
use serde::Serialize;
use sluice_http::meter::Metered;
use sluice_http::response::Answer;
use sluice_upstream::pool::PooledBody;
use sluice_upstream::tls::AnyConnect;

use crate::access_log::Ending;
use crate::body::ReplayBody;

/// The body of every response the server sends: its own bytes, or the upstream's stream (which
/// holds the request's slot in flight until it is dropped, metered when a limit's cost is what
/// it says). The stream is boxed: unboxed, every response was as large as it (344 bytes), and
/// each of the five moves of a denial from the face that made it to hyper was a `memcpy` of
/// that size (bench/README.md); one allocation for a proxied response costs less.
pub type Body = Either<Full<Bytes>, Box<Metered<PooledBody<AnyConnect, ReplayBody, Ending>>>>;

/// Bytes as a [`Body`].
pub fn full(bytes: Bytes) -> Body {
    Either::Left(Full::new(bytes))
}

/// `answer` as a response of the server.
pub fn answer(answer: Answer) -> Response<Body> {
    answer.into_response(full)
}

/// A JSON response with `Content-Type` and `Content-Length`.
pub fn json<T: Serialize>(status: u16, payload: &T) -> Response<Body> {
    answer(Answer::json(status_code(status), payload))
}

/// `{"error": code, "message": message}`
pub fn error(status: u16, code: &str, message: &str) -> Response<Body> {
    answer(Answer::error(status_code(status), code, message))
}

/// A response with no body (`204`, a preflight's answer).
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut res = Response::new(full(Bytes::new()));
    *res.status_mut() = status;
    res
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The body of an admitted request that sluice answers itself (no upstream).
#[derive(Serialize)]
pub struct Allowed<'a> {
    /// Always `allowed`.
    pub status: &'static str,
    /// The route's name.
    pub route: &'a str,
}

/// The three [`sluice_http::lifecycle::Face`] methods of a face answering with the server's
/// responses: sluice's answers as [`answer`], the response's status, its headers for the
/// rate-limit fields. Written once for the gateway, forward-auth and the decision API.
macro_rules! server_responses {
    () => {
        fn answer(&self, answer: sluice_http::response::Answer) -> http::Response<$crate::respond::Body> {
            $crate::respond::answer(answer)
        }

        fn status(response: &http::Response<$crate::respond::Body>) -> u16 {
            response.status().as_u16()
        }

        fn headers_mut(response: &mut http::Response<$crate::respond::Body>) -> Option<&mut http::HeaderMap> {
            Some(response.headers_mut())
        }
    };
}
pub(crate) use server_responses;
