//! The bodies the layer can answer in: the response body type of the wrapped service, made from
//! sluice's own answers (a denial's JSON, a refusal's, or nothing for gRPC).

use bytes::Bytes;

/// A response body the layer can make its own answers in (a denial, a refusal, a 503): the
/// wrapped service's response body type. Implemented for the bodies of axum (`axum` feature),
/// tonic (`tonic` feature), `http-body-util` (`Full`, `BoxBody`, `UnsyncBoxBody`), `Bytes`,
/// `String` and `Vec<u8>`; another body type implements it in one line.
///
/// ```
/// use bytes::Bytes;
/// use sluice_http::layer::AnswerBody;
/// assert_eq!(String::from_answer(Bytes::from_static(b"{}")), "{}");
/// ```
pub trait AnswerBody: Sized {
    /// The body holding `bytes`.
    fn from_answer(bytes: Bytes) -> Self;
}

impl AnswerBody for Bytes {
    fn from_answer(bytes: Bytes) -> Self {
        bytes
    }
}

impl AnswerBody for Vec<u8> {
    fn from_answer(bytes: Bytes) -> Self {
        bytes.into()
    }
}

impl AnswerBody for String {
    fn from_answer(bytes: Bytes) -> Self {
        // sluice's answers are JSON, always UTF-8.
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl AnswerBody for http_body_util::Full<Bytes> {
    fn from_answer(bytes: Bytes) -> Self {
        http_body_util::Full::new(bytes)
    }
}

impl<E: 'static> AnswerBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn from_answer(bytes: Bytes) -> Self {
        use http_body_util::BodyExt;
        http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed()
    }
}

impl<E: 'static> AnswerBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_answer(bytes: Bytes) -> Self {
        use http_body_util::BodyExt;
        http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
    }
}

#[cfg(feature = "axum")]
impl AnswerBody for axum::body::Body {
    fn from_answer(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }
}

#[cfg(feature = "tonic")]
impl AnswerBody for tonic::body::Body {
    fn from_answer(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            tonic::body::Body::empty()
        } else {
            tonic::body::Body::new(http_body_util::Full::new(bytes))
        }
    }
}
