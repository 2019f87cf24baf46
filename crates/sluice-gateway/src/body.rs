//! A client's request body as the gateway reads and forwards it: watched for stalls and broken
//! framing, and replayable after a bounded prefix was read.

use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sluice_http::body_key::BodyRefusal;
use sluice_http::response::Answer;
use tokio::time::{Instant, Sleep};

use crate::observe::BodyErrors;

/// Why a client's request body was cut. The client's doing, never the upstream's: answered 400
/// or 408, counted in `sluice_request_body_errors_total`.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// Its framing is broken: a bad chunk-size line, a chunk extension holding a line break, a
    /// bare LF where CRLF belongs.
    #[error("the request body is malformed: {0}")]
    Malformed(#[source] hyper::Error),
    /// The client closed (or reset) its connection inside the body.
    #[error("the client's connection ended inside the request body: {0}")]
    Incomplete(#[source] hyper::Error),
    /// No byte came for `body_idle_timeout`: a client trickling its body.
    #[error("the request body stalled")]
    Stalled,
}

impl ClientBodyError {
    /// What the client is answered when nothing was sent to it yet: 400, or 408 for a stall,
    /// and the connection closed (what is left of the body is not read).
    pub fn answer(&self) -> Answer {
        let mut a = match self {
            Self::Malformed(_) | Self::Incomplete(_) => Answer::bad_request(&BodyRefusal::Unreadable.to_string()),
            // The client may send it again, faster; nothing was admitted.
            Self::Stalled => {
                Answer::error(StatusCode::REQUEST_TIMEOUT, "request_timeout", "The request body came too slowly.")
            }
        };
        a.headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        a
    }

    /// The client body error that `e` (an upstream exchange's error) comes from, if any: hyper's
    /// client reports a failed request body as its own error, caused by the body's.
    pub fn cause_of<'e>(e: &'e (dyn StdError + 'static)) -> Option<&'e Self> {
        let mut at = Some(e);
        while let Some(e) = at {
            if let Some(found) = e.downcast_ref::<Self>() {
                return Some(found);
            }
            at = e.source();
        }
        None
    }

    /// Sorts an error hyper's server gave for a request body: broken framing (hyper's decoder
    /// says invalid data or input), or a connection that ended.
    fn of_hyper(e: hyper::Error) -> Self {
        let io_kind = e.source().and_then(|s| s.downcast_ref::<io::Error>()).map(io::Error::kind);
        match io_kind {
            Some(io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput) => Self::Malformed(e),
            _ => Self::Incomplete(e),
        }
    }
}

/// How the gateway watches the request bodies of one configuration: the longest pause between
/// a body's bytes (`body_idle_timeout`), and the counters of bodies cut.
#[derive(Debug, Clone)]
pub struct BodyWatch {
    /// The longest a body may wait for its next bytes.
    idle: Duration,
    /// Counts bodies cut, by reason.
    errors: Arc<BodyErrors>,
}

impl BodyWatch {
    /// Bodies cut after `idle` without a byte, counted in `errors`.
    pub fn new(idle: Duration, errors: Arc<BodyErrors>) -> Self {
        Self { idle, errors }
    }

    /// `body`, watched.
    pub fn watch(&self, body: Incoming) -> ClientBody {
        ClientBody { body, watch: self.clone(), stall: None, moved: false, failed: false }
    }
}

/// A client's request body, failing with a [`ClientBodyError`] when its framing breaks or when
/// no byte comes for the idle timeout, whoever reads it: the keyed-body read, or hyper's client
/// streaming it upstream (which then aborts the upstream request and closes that connection).
///
/// The idle time counts from the first poll that finds nothing after a frame, so a body only
/// registers a timer when it has to wait for the client, and the time the upstream takes to
/// accept bytes is not the client's.
#[derive(Debug)]
pub struct ClientBody {
    /// The body as hyper's server reads it.
    body: Incoming,
    /// The idle timeout and the counters.
    watch: BodyWatch,
    /// The deadline of the current wait for bytes, made at the first wait.
    stall: Option<Pin<Box<Sleep>>>,
    /// A frame came since the deadline was last set.
    moved: bool,
    /// The body failed already (counted once, ended).
    failed: bool,
}

impl ClientBody {
    fn fail(&mut self, e: ClientBodyError) -> ClientBodyError {
        self.failed = true;
        match &e {
            ClientBodyError::Malformed(_) => self.watch.errors.malformed(),
            ClientBodyError::Incomplete(_) => self.watch.errors.incomplete(),
            ClientBodyError::Stalled => self.watch.errors.stalled(),
        }
        e
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.moved = true;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(this.fail(ClientBodyError::of_hyper(e))))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.moved || this.stall.is_none() {
                    let deadline = Instant::now() + this.watch.idle;
                    match &mut this.stall {
                        Some(stall) => stall.as_mut().reset(deadline),
                        None => this.stall = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    this.moved = false;
                }
                match this.stall.as_mut().map(|stall| stall.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Some(Err(this.fail(ClientBodyError::Stalled)))),
                    _ => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body whose first bytes were read (to find a key) and are replayed before the rest.
#[derive(Debug)]
pub struct ReplayBody {
    /// The bytes already read, sent first.
    prefix: Option<Bytes>,
    /// Trailers met while reading a whole body, sent last.
    trailers: Option<HeaderMap>,
    /// What was not read, streamed after the prefix.
    rest: Option<ClientBody>,
}

impl ReplayBody {
    /// The body as it came, nothing read.
    pub fn untouched(body: ClientBody) -> Self {
        Self { prefix: None, trailers: None, rest: Some(body) }
    }

    /// No body (a request sent again to another target: only a bodiless one is).
    pub fn empty() -> Self {
        Self { prefix: None, trailers: None, rest: None }
    }

    /// The body itself again, when nothing of it was read yet.
    pub fn into_untouched(self) -> Option<ClientBody> {
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

/// Reads at most `max` bytes of `body` (stopping at the first frame past it); fails as the body
/// does (broken, or stalled for its idle timeout).
pub async fn read_prefix(mut body: ClientBody, max: usize) -> Result<Prefix, ClientBodyError> {
    let mut buf = BytesMut::new();
    let mut trailers = None;
    loop {
        if buf.len() > max {
            let bytes = buf.freeze();
            let replay = ReplayBody { prefix: Some(bytes.clone()), trailers: None, rest: Some(body) };
            return Ok(Prefix { bytes, complete: false, body: replay });
        }
        match body.frame().await {
            None => break,
            Some(frame) => match frame?.into_data() {
                Ok(data) => buf.extend_from_slice(&data),
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        trailers = Some(t);
                    }
                }
            },
        }
    }
    let bytes = buf.freeze();
    let complete = bytes.len() <= max;
    let replay = ReplayBody { prefix: Some(bytes.clone()), trailers, rest: None };
    Ok(Prefix { bytes, complete, body: replay })
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
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
