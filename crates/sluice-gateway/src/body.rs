//! Reading a bounded prefix of a request body without losing the rest.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// A request body whose first bytes were read (to find a key) and are replayed before the rest.
#[derive(Debug)]
pub struct ReplayBody {
    /// The bytes already read, sent first.
    prefix: Option<Bytes>,
    /// Trailers met while reading a whole body, sent last.
    trailers: Option<HeaderMap>,
    /// What was not read, streamed after the prefix.
    rest: Option<Incoming>,
}

impl ReplayBody {
    /// The body as it came, nothing read.
    pub fn untouched(body: Incoming) -> Self {
        Self { prefix: None, trailers: None, rest: Some(body) }
    }

    /// The body itself again, when nothing of it was read yet.
    pub fn into_untouched(self) -> Option<Incoming> {
        match self {
            Self { prefix: None, trailers: None, rest } => rest,
            _ => None,
        }
    }
}

/// The result of [`read_prefix`].
#[derive(Debug)]
pub struct Prefix {
    /// The bytes read (at most about `max` plus one frame).
    pub bytes: Bytes,
    /// True when the whole body was read (it fit within `max`).
    pub complete: bool,
    /// The whole body, replayable: the prefix then whatever was not read.
    pub body: ReplayBody,
}

/// Why a body prefix could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The connection failed or the body was malformed.
    #[error("the request body could not be read: {0}")]
    Body(#[from] hyper::Error),
    /// No byte came for the idle timeout: a client trickling its body.
    #[error("the request body stalled")]
    Idle,
}

/// Reads at most `max` bytes of `body` (stopping at the first frame past it), failing when no
/// frame comes for `idle`.
pub async fn read_prefix(mut body: Incoming, max: usize, idle: std::time::Duration) -> Result<Prefix, ReadError> {
    let mut buf = BytesMut::new();
    let mut trailers = None;
    loop {
        if buf.len() > max {
            let bytes = buf.freeze();
            let replay = ReplayBody { prefix: Some(bytes.clone()), trailers: None, rest: Some(body) };
            return Ok(Prefix { bytes, complete: false, body: replay });
        }
        let frame = tokio::time::timeout(idle, body.frame()).await.map_err(|_| ReadError::Idle)?;
        match frame {
            None => break,
            Some(frame) => {
                let frame = frame?;
                match frame.into_data() {
                    Ok(data) => buf.extend_from_slice(&data),
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            trailers = Some(t);
                        }
                    }
                }
            }
        }
    }
    let bytes = buf.freeze();
    let complete = bytes.len() <= max;
    let replay = ReplayBody { prefix: Some(bytes.clone()), trailers, rest: None };
    Ok(Prefix { bytes, complete, body: replay })
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(p) = self.prefix.take()
            && !p.is_empty()
        {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        if let Some(rest) = self.rest.as_mut() {
            return Pin::new(rest).poll_frame(cx);
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.as_ref().is_none_or(|p| p.is_empty())
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self.rest.as_ref().map_or(SizeHint::with_exact(0), |r| r.size_hint());
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}
