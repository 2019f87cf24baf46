//! The bodies the layer can answer in: the response body type of the wrapped service, made from
//! sluice's own answers (a denial's JSON, a refusal's, or nothing for gRPC).

use bytes::Bytes;

use crate::meter::{Meter, Metered};

/// A response body the layer can make its own answers in (a denial, a refusal, a 503): the
/// wrapped service's response body type. Implemented for the bodies of axum (`axum` feature),
/// tonic (`tonic` feature), `http-body-util` (`Full`, `BoxBody`, `UnsyncBoxBody`), `Bytes`,
/// `String` and `Vec<u8>`; another body type implements it in one line (and
/// [`AnswerBody::metered`] for limits whose cost its body says).
///
/// ```
/// use bytes::Bytes;
/// use sluice_http::layer::AnswerBody;
/// assert_eq!(String::from_answer(Bytes::from_static(b"{}")), "{}");
/// ```
pub trait AnswerBody: Sized {
    /// The body holding `bytes`.
    fn from_answer(bytes: Bytes) -> Self;

    /// This body, its data seen by `meter` as it goes out (limits whose `cost_from` reads the
    /// response's body). By default not metered: those limits keep their reservations.
    fn metered(self, meter: Meter) -> Self {
        meter.unmetered();
        self
    }
}

/// A body that is all there: read whole, at once.
macro_rules! whole {
    () => {
        fn metered(self, meter: Meter) -> Self {
            meter.read_whole(self.as_ref());
            self
        }
    };
}

impl AnswerBody for Bytes {
    fn from_answer(bytes: Bytes) -> Self {
        bytes
    }

    whole!();
}

impl AnswerBody for Vec<u8> {
    fn from_answer(bytes: Bytes) -> Self {
        bytes.into()
    }

    whole!();
}

impl AnswerBody for String {
    fn from_answer(bytes: Bytes) -> Self {
        // sluice's answers are JSON, always UTF-8.
        String::from_utf8_lossy(&bytes).into_owned()
    }

    whole!();
}

impl AnswerBody for http_body_util::Full<Bytes> {
    fn from_answer(bytes: Bytes) -> Self {
        http_body_util::Full::new(bytes)
    }

    /// `Full` holds its one frame until it is polled: taken out, read, and put back.
    fn metered(mut self, meter: Meter) -> Self {
        use http_body::Body;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let bytes = match std::pin::Pin::new(&mut self).poll_frame(&mut cx) {
            std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
            _ => Bytes::new(),
        };
        meter.read_whole(&bytes);
        http_body_util::Full::new(bytes)
    }
}

impl<E: 'static> AnswerBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn from_answer(bytes: Bytes) -> Self {
        use http_body_util::BodyExt;
        http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed()
    }

    fn metered(self, meter: Meter) -> Self {
        use http_body_util::BodyExt;
        attached(self, meter).boxed()
    }
}

impl<E: 'static> AnswerBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_answer(bytes: Bytes) -> Self {
        use http_body_util::BodyExt;
        http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
    }

    fn metered(self, meter: Meter) -> Self {
        use http_body_util::BodyExt;
        attached(self, meter).boxed_unsync()
    }
}

#[cfg(feature = "axum")]
impl AnswerBody for axum::body::Body {
    fn from_answer(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }

    fn metered(self, meter: Meter) -> Self {
        axum::body::Body::new(attached(self, meter))
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

    fn metered(self, meter: Meter) -> Self {
        tonic::body::Body::new(attached(self, meter))
    }
}

/// `body` with `meter` attached.
fn attached<B>(body: B, meter: Meter) -> Metered<B> {
    let mut metered = Metered::new(body);
    metered.attach(meter);
    metered
}
