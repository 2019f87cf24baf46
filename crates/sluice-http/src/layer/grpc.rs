//! gRPC requests answered in gRPC's terms: a client library reads a status from `grpc-status`,
//! not from the HTTP status, and an HTTP 429 would reach the caller as `UNAVAILABLE` with the
//! `Retry-After` lost.

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::response::Answer;

/// True when the request is a gRPC call (`content-type: application/grpc`, alone or followed by
/// a `+proto`-like suffix, a `;` parameter, or gRPC-Web's `-web`), answered by [`grpc_answer`].
/// Another type that merely starts alike (`application/grpcx`) is plain HTTP, and its denial a 429.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes) else { return false };
    let Some((kind, rest)) = value.split_at_checked(16) else { return false };
    kind.eq_ignore_ascii_case(b"application/grpc")
        && (rest.is_empty() || rest.starts_with(b"+") || rest.starts_with(b";") || rest.starts_with(b"-web"))
}

/// sluice's answer as a gRPC "trailers-only" response: HTTP 200, no body, the status in
/// `grpc-status` and `grpc-message` (RFC 3986 percent-encoded), every other header kept as
/// response metadata (`retry-after`, the rate-limit headers). A denial is `RESOURCE_EXHAUSTED`
/// (8), as gRPC's own rate limiters answer; a refused request `INVALID_ARGUMENT` (3), a refused
/// token `UNAUTHENTICATED` (16), a store that cannot decide `UNAVAILABLE` (14).
pub(crate) fn grpc_answer(answer: Answer) -> Answer {
    let Answer { status, mut headers, .. } = answer;
    let (code, message) = grpc_status(status);
    headers.remove(CONTENT_LENGTH);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code));
    headers.insert("grpc-message", HeaderValue::from_static(message));
    Answer { status: StatusCode::OK, headers, body: bytes::Bytes::new() }
}

/// The gRPC status code of one of sluice's answers, and its message: printable ASCII without
/// `%`, which gRPC's percent-encoding leaves as it is.
fn grpc_status(status: StatusCode) -> (u16, &'static str) {
    match status {
        StatusCode::BAD_REQUEST => (3, "request refused by the rate limiter"),
        StatusCode::UNAUTHORIZED => (16, "token refused by the rate limiter"),
        StatusCode::SERVICE_UNAVAILABLE => (14, "the rate limiter cannot decide"),
        s if s.is_server_error() => (13, "the rate limiter cannot tell who sent this call"),
        _ => (8, "rate limit exceeded"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("SLUICE_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000),
        ))]
        /// Any content type an attacker sends: read without panicking, and taken as gRPC only
        /// when it is `application/grpc` (any case) alone or followed by `+`, `;` or `-web`.
        #[test]
        fn any_content_type_is_read_and_only_grpc_s_own_count(
            tail in prop::collection::vec(any::<u8>(), 0..24),
            prefixed in any::<bool>(),
            upper in any::<bool>(),
        ) {
            let kind = if upper { "APPLICATION/GRPC" } else { "application/grpc" };
            let mut value = if prefixed { kind.as_bytes().to_vec() } else { Vec::new() };
            value.extend_from_slice(&tail);
            let Ok(header) = HeaderValue::from_bytes(&value) else { return Ok(()) };
            let headers = HeaderMap::from_iter([(CONTENT_TYPE, header)]);
            let rest = value.get(16..);
            let expected = value.len() >= 16
                && value[..16].eq_ignore_ascii_case(b"application/grpc")
                && rest.is_some_and(|r| r.is_empty() || r[0] == b'+' || r[0] == b';' || r.starts_with(b"-web"));
            prop_assert_eq!(is_grpc(&headers), expected);
        }
    }

    #[test]
    fn grpc_calls_are_told_by_their_content_type_whatever_its_case_and_suffix() {
        let with = |v: &'static str| HeaderMap::from_iter([(CONTENT_TYPE, HeaderValue::from_static(v))]);
        assert!(is_grpc(&with("application/grpc")));
        assert!(is_grpc(&with("application/grpc+proto")));
        assert!(is_grpc(&with("Application/GRPC")));
        assert!(!is_grpc(&with("application/json")));
        assert!(is_grpc(&with("application/grpc;charset=utf-8")));
        assert!(is_grpc(&with("application/grpc-web+proto")));
        assert!(!is_grpc(&with("application/grp")));
        assert!(!is_grpc(&with("application/grpcx")), "a type that only starts alike is plain HTTP");
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_denial_becomes_resource_exhausted_with_its_metadata_and_no_body() {
        let mut denial = Answer::error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "slow down");
        denial.headers.insert("retry-after", HeaderValue::from_static("7"));
        let grpc = grpc_answer(denial);
        assert_eq!(grpc.status, StatusCode::OK);
        assert_eq!(grpc.headers["grpc-status"], "8");
        assert_eq!(grpc.headers["retry-after"], "7");
        assert_eq!(grpc.headers[CONTENT_TYPE], "application/grpc");
        assert!(grpc.headers.get(CONTENT_LENGTH).is_none() && grpc.body.is_empty());
        for (status, code) in [(400, "3"), (401, "16"), (503, "14"), (500, "13")] {
            let answer = Answer::error(StatusCode::from_u16(status).unwrap(), "e", "m");
            assert_eq!(grpc_answer(answer).headers["grpc-status"], code, "{status}");
            let (_, message) = grpc_status(StatusCode::from_u16(status).unwrap());
            assert!(message.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'%'), "{message}");
        }
    }
}
