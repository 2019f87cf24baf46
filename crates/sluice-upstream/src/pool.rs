//! Connections to one upstream, kept by the worker thread that opened them: HTTP/1.1 ones
//! here, and the one HTTP/2 connection of [`crate::multiplexed`].
//!
//! A gateway worker is a single-threaded runtime: a connection it opens is registered with that
//! runtime, so the connections are its own and a pool needs no key, no checkout future and no
//! cross-thread handoff. A connection goes back to the pool when its response body has been
//! read to the end (HTTP/1.1 carries one exchange at a time); a response dropped before its end
//! takes the connection with it.
//!
//! Two kinds are kept: the proxy's own connections ([`crate::h1`]) for requests without a body,
//! driven by the task that serves the client; and hyper's, each driven by a task of its own, for
//! requests with a body (hyper writes the body while it reads an early response).
//!
//! On both, a response body that waits longer than its request's idle timeout for its next bytes
//! fails (the client's connection is cut; the upstream's is closed): an upstream that stalls
//! mid-body does not hold a client, its slot in flight and a connection for ever. The wait is
//! timed on the sleep the connection keeps for its response heads, moved on, so a body registers
//! no timer of its own.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, Sleep};

use crate::deadline::within;
use crate::h1::body_decoder::Decoder;
use crate::h1::connection::{Connection, ExchangeError};
use crate::h1::request_head;
use crate::h1::response_head::Head;
use crate::socket::Connect;
use crate::timeouts::Timeouts;

/// Idle connections kept per worker thread and upstream; beyond them, a connection is closed.
const MAX_IDLE: usize = 1024;

/// How often each worker should close the idle connections the upstream has closed
/// ([`ConnPool::sweep`]).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be opened.
    #[error("cannot connect to the upstream: {0}")]
    Connect(#[from] std::io::Error),
    /// The exchange failed.
    #[error("the upstream exchange failed: {0}")]
    Http(#[from] hyper::Error),
    /// The proxy's own exchange failed.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// No response head came in time.
    #[error("the upstream did not answer in time")]
    Timeout,
}

/// A response body's next bytes did not come within its request's idle timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the upstream sent nothing of the response body for {0:?}")]
pub struct BodyStalled(pub Duration);

/// A request body hyper's client can send: bytes, failing with any error.
pub trait RequestBody: Body<Data = Bytes, Error: Into<BoxError>> + Send + Unpin + 'static {}

impl<B: Body<Data = Bytes, Error: Into<BoxError>> + Send + Unpin + 'static> RequestBody for B {}

/// Any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One of hyper's connections and the sleep that times its exchanges (moved on for each one).
#[derive(Debug)]
struct Conn<B> {
    sender: SendRequest<B>,
    sleep: Pin<Box<Sleep>>,
}

/// One of the proxy's own connections and the sleep that times its exchanges.
#[derive(Debug)]
struct RawConn<S> {
    conn: Connection<S>,
    sleep: Pin<Box<Sleep>>,
}

/// A worker thread's connections to one upstream, opened by `C`; requests with a body send a
/// `B`.
#[derive(Debug)]
pub struct ConnPool<C: Connect, B> {
    /// Opens new connections to the upstream.
    pub(crate) connector: C,
    /// hyper's connections ready for a request (with a body), most recently used last.
    idle: Mutex<Vec<Conn<B>>>,
    /// The proxy's own connections ready for a request without a body, most recently used last.
    raw_idle: Mutex<Vec<RawConn<C::Socket>>>,
    /// The HTTP/2 connection every request of this thread goes on, when the upstream is spoken
    /// to in HTTP/2 ([`crate::multiplexed`]).
    pub(crate) multiplexed: crate::multiplexed::Shared<B>,
}

impl<C: Connect, B: RequestBody> ConnPool<C, B> {
    /// No connections yet; they are opened by `connector`.
    pub fn new(connector: C) -> Self {
        Self {
            connector,
            idle: Mutex::new(Vec::new()),
            raw_idle: Mutex::new(Vec::new()),
            multiplexed: Default::default(),
        }
    }

    /// Opens a new connection, within `timeouts.connect`: past it, a [`SendError::Connect`] of
    /// kind `TimedOut` (nothing of the request was sent).
    pub(crate) async fn open(&self, timeouts: &Timeouts) -> Result<C::Socket, SendError> {
        match tokio::time::timeout(timeouts.connect, self.connector.connect()).await {
            Ok(opened) => Ok(opened?),
            Err(_) => Err(SendError::Connect(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {:?}", timeouts.connect),
            ))),
        }
    }

    /// Sends the request `parts` describe, which has no body, on one of the proxy's own
    /// connections (an idle one, or a new one), within `timeouts` (a [`Duration`] bounds each
    /// stage alike).
    /// An idle connection that loses the request before any byte of a response (the upstream
    /// closed it meanwhile) is replaced by a new one for a safe method (`GET`, `HEAD`, `OPTIONS`,
    /// `TRACE`); for another the upstream may have acted on it (a reset can come after the
    /// request arrived), and the client gets the 502.
    pub async fn send_bodiless<H>(
        self: &Arc<Self>,
        parts: &Parts,
        timeouts: impl Into<Timeouts>,
    ) -> Result<Response<PooledBody<C, B, H>>, SendError> {
        let timeouts = timeouts.into();
        let deadline = Instant::now() + timeouts.first_byte;
        let mut sleep = None;
        if let Some(mut raw) = self.checkout_raw() {
            raw.sleep.as_mut().reset(deadline);
            request_head::write(parts, raw.conn.head_buffer());
            let RawConn { conn, sleep: s } = &mut raw;
            match within(s, conn.exchange(&parts.method)).await {
                None => return Err(SendError::Timeout),
                Some(Ok(head)) => return Ok(self.raw_response(head, raw, timeouts.idle)),
                Some(Err(ExchangeError::Lost(_))) if parts.method.is_safe() => sleep = Some(raw.sleep),
                Some(Err(e)) => return Err(e.into()),
            }
        }
        let mut sleep = sleep.unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        let sent = within(&mut sleep, async {
            let mut conn = Connection::new(self.open(&timeouts).await?);
            request_head::write(parts, conn.head_buffer());
            let head = conn.exchange(&parts.method).await?;
            Ok::<_, SendError>((head, conn))
        });
        match sent.await {
            None => Err(SendError::Timeout),
            Some(Err(e)) => Err(e),
            Some(Ok((head, conn))) => Ok(self.raw_response(head, RawConn { conn, sleep }, timeouts.idle)),
        }
    }

    /// The response of `head`, its body read from `raw` (given back at the body's end), failing
    /// after `idle` without a byte.
    fn raw_response<H>(
        self: &Arc<Self>,
        head: Head,
        raw: RawConn<C::Socket>,
        idle: Duration,
    ) -> Response<PooledBody<C, B, H>> {
        let decoder = Decoder::new(head.framing);
        let inner = Inner::Raw { back: Some((Arc::clone(self), raw)), decoder, reusable: head.reusable };
        let mut body = PooledBody::new(inner, idle);
        if body.is_done() {
            body.give_back();
        }
        let mut res = Response::new(body);
        *res.status_mut() = head.status;
        *res.headers_mut() = head.headers;
        res
    }

    /// The most recently used idle connection of the proxy's own still open.
    fn checkout_raw(&self) -> Option<RawConn<C::Socket>> {
        let mut idle = self.raw_idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut raw) = idle.pop() {
            if !raw.conn.is_stale() {
                return Some(raw);
            }
        }
        None
    }

    fn checkin_raw(&self, raw: RawConn<C::Socket>) {
        let mut idle = self.raw_idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(raw);
        }
    }

    /// Closes the idle connections of the proxy's own that the upstream has closed (or written
    /// to): no task reads them while they wait, so without a sweep a socket the upstream closed
    /// would stay half-open until it was checked out. To be run every [`SWEEP_EVERY`] on each
    /// worker.
    pub fn sweep(&self) {
        self.raw_idle.lock().unwrap_or_else(|p| p.into_inner()).retain_mut(|raw| !raw.conn.is_stale());
    }

    /// Sends `req` (in origin form) on an idle connection, or on a new one, within `timeouts`. A
    /// request that an idle connection refused before sending anything (the upstream closed it
    /// meanwhile) is sent again on a new connection.
    pub async fn send<H>(
        self: &Arc<Self>,
        req: Request<B>,
        timeouts: impl Into<Timeouts>,
    ) -> Result<Response<PooledBody<C, B, H>>, SendError> {
        let timeouts = timeouts.into();
        let deadline = Instant::now() + timeouts.first_byte;
        let mut req = req;
        // A connection given back at its body's end is ready once its task has seen that end.
        if let Some(mut conn) = self.checkout() {
            conn.sleep.as_mut().reset(deadline);
            let Conn { sender, sleep } = &mut conn;
            match within(sleep, sender.ready()).await {
                None => return Err(SendError::Timeout),
                Some(Ok(())) => match within(sleep, sender.try_send_request(req)).await {
                    None => return Err(SendError::Timeout),
                    Some(Ok(res)) => return Ok(self.pooled(res, conn, timeouts.idle)),
                    Some(Err(mut e)) => match e.take_message() {
                        Some(back) => req = back,
                        None => return Err(SendError::Http(e.into_error())),
                    },
                },
                // Closed meanwhile: a new connection takes the request.
                Some(Err(_)) => {}
            }
            return self.send_new(req, conn.sleep, &timeouts).await;
        }
        self.send_new(req, Box::pin(tokio::time::sleep_until(deadline)), &timeouts).await
    }

    /// Sends `req` on a new connection, within `sleep`.
    async fn send_new<H>(
        self: &Arc<Self>,
        req: Request<B>,
        mut sleep: Pin<Box<Sleep>>,
        timeouts: &Timeouts,
    ) -> Result<Response<PooledBody<C, B, H>>, SendError> {
        let sent = within(&mut sleep, async {
            let mut sender = self.connect(timeouts).await?;
            let res = sender.send_request(req).await?;
            Ok::<_, SendError>((res, sender))
        });
        match sent.await {
            None => Err(SendError::Timeout),
            Some(Err(e)) => Err(e),
            Some(Ok((res, sender))) => Ok(self.pooled(res, Conn { sender, sleep }, timeouts.idle)),
        }
    }

    /// The most recently used idle connection still open.
    fn checkout(&self) -> Option<Conn<B>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(conn) = idle.pop() {
            if !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn checkin(&self, conn: Conn<B>) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    async fn connect(&self, timeouts: &Timeouts) -> Result<SendRequest<B>, SendError> {
        let stream = self.open(timeouts).await?;
        let (sender, conn) = http1::Builder::new().handshake(TokioIo::new(stream)).await?;
        // Driven on this worker's runtime; it ends when the upstream closes or every handle to
        // the connection is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn pooled<H>(
        self: &Arc<Self>,
        res: Response<Incoming>,
        conn: Conn<B>,
        idle: Duration,
    ) -> Response<PooledBody<C, B, H>> {
        let (parts, body) = res.into_parts();
        let mut pooled = PooledBody::new(Inner::Hyper { body, back: Some((Arc::clone(self), conn)) }, idle);
        if pooled.is_done() {
            pooled.give_back();
        }
        Response::from_parts(parts, pooled)
    }

    /// A response streamed on an HTTP/2 connection: its body's waits, `idle` at most, are timed
    /// on `sleep`.
    pub(crate) fn streamed<H>(
        &self,
        res: Response<Incoming>,
        sleep: Pin<Box<Sleep>>,
        idle: Duration,
    ) -> Response<PooledBody<C, B, H>> {
        let (parts, body) = res.into_parts();
        Response::from_parts(parts, PooledBody::new(Inner::Stream { body, sleep }, idle))
    }
}

/// A response body from a pooled connection: the connection goes back to its pool at the end.
/// `H`: what the body holds until it is dropped ([`PooledBody::hold`]).
#[derive(Debug)]
pub struct PooledBody<C: Connect, B, H = ()> {
    inner: Inner<C, B>,
    /// The longest a wait for the body's next bytes may last (its request's idle timeout).
    idle: Duration,
    /// Held until the body is dropped: a gateway's slot in flight, so that a request counts
    /// until its response's body is done with (sent whole, or dropped with the client's
    /// connection).
    held: Option<H>,
    /// A poll found no bytes since the last ones came: the connection's sleep is set to the
    /// idle deadline of this wait (set once per wait, so a wait is timed from its start).
    waiting: bool,
    /// The body waited past its idle timeout: failed, and ended.
    stalled: bool,
}

/// A connection `K` and the pool it goes back to, while a body reads from it.
type Back<C, B, K> = Option<(Arc<ConnPool<C, B>>, K)>;

/// The kinds of connection a body is read from.
#[derive(Debug)]
enum Inner<C: Connect, B> {
    /// hyper's: its task reads the body.
    Hyper {
        /// The upstream's body, streamed.
        body: Incoming,
        /// The connection and its pool, until the body has ended.
        back: Back<C, B, Conn<B>>,
    },
    /// The proxy's own: read here, by the task that polls the body.
    Raw {
        /// The connection and its pool, until the body has ended or failed.
        back: Back<C, B, RawConn<C::Socket>>,
        /// Where the body's framing stands.
        decoder: Decoder,
        /// Whether the response allows the connection another exchange.
        reusable: bool,
    },
    /// A stream of an HTTP/2 connection, which stays with the pool whatever the body does.
    Stream {
        /// The upstream's body, streamed.
        body: Incoming,
        /// Times the waits for the body's next bytes.
        sleep: Pin<Box<Sleep>>,
    },
}

/// Why a response body failed: the client's connection is cut (the body was not whole).
pub type BodyError = BoxError;

/// What a response body holds until it is dropped ([`PooledBody::hold`]), told how many body
/// bytes pass through it (a gateway's access log line counts them).
pub trait Held: Send + 'static {
    /// `n` more bytes of the body were read and passed on.
    fn sent(&mut self, n: u64) {
        let _ = n;
    }
}

impl Held for () {}

impl<C: Connect, B, H> PooledBody<C, B, H> {
    fn new(inner: Inner<C, B>, idle: Duration) -> Self {
        Self { inner, idle, held: None, waiting: false, stalled: false }
    }

    /// Keeps `held` (a request's slot in flight) until this body is dropped.
    pub fn hold(&mut self, held: H) {
        self.held = Some(held);
    }

    fn give_back(&mut self)
    where
        B: RequestBody,
    {
        match &mut self.inner {
            Inner::Hyper { back, .. } => {
                if let Some((pool, conn)) = back.take() {
                    pool.checkin(conn);
                }
            }
            Inner::Raw { back, reusable, .. } => {
                if let Some((pool, raw)) = back.take()
                    && *reusable
                    && raw.conn.is_clean()
                {
                    pool.checkin_raw(raw);
                }
            }
            Inner::Stream { .. } => {}
        }
    }
}

/// On a poll that found no bytes: true when the wait has passed `idle`. The first such poll
/// after bytes came moves `sleep` to the wait's deadline; later ones only poll it.
fn stalled(sleep: &mut Pin<Box<Sleep>>, waiting: &mut bool, idle: Duration, cx: &mut Context<'_>) -> bool {
    if !*waiting {
        sleep.as_mut().reset(Instant::now() + idle);
        *waiting = true;
    }
    sleep.as_mut().poll(cx).is_ready()
}

// Nothing of a body is pinned in place (its fields are polled through `Pin::new` on their own
// `Unpin` values, or not at all), so a held value need not be `Unpin` itself.
impl<C: Connect, B, H> Unpin for PooledBody<C, B, H> {}

impl<C: Connect, B: RequestBody, H: Held> Body for PooledBody<C, B, H> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = self.poll_upstream(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let (Some(data), Some(held)) = (frame.data_ref(), &mut self.held)
        {
            held.sent(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        self.hint()
    }
}

impl<C: Connect, B: RequestBody, H> PooledBody<C, B, H> {
    /// The next frame read from the upstream.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self;
        if this.stalled {
            return Poll::Ready(None);
        }
        let polled = match &mut this.inner {
            Inner::Hyper { body, back } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(None) => this.give_back(),
                    Poll::Ready(Some(Ok(_))) if body.is_end_stream() => this.give_back(),
                    // An error ends the connection with the exchange: it is not given back.
                    Poll::Ready(Some(Err(_))) => *back = None,
                    Poll::Pending => {
                        if let Some((_, conn)) = back
                            && stalled(&mut conn.sleep, &mut this.waiting, this.idle, cx)
                        {
                            *back = None;
                            this.stalled = true;
                            return Poll::Ready(Some(Err(BodyStalled(this.idle).into())));
                        }
                    }
                    _ => {}
                }
                polled.map_err(Into::into)
            }
            Inner::Stream { body, sleep } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                if polled.is_pending() && stalled(sleep, &mut this.waiting, this.idle, cx) {
                    this.stalled = true;
                    return Poll::Ready(Some(Err(BodyStalled(this.idle).into())));
                }
                polled.map_err(Into::into)
            }
            Inner::Raw { back, decoder, .. } => {
                let Some((_, raw)) = back.as_mut() else { return Poll::Ready(None) };
                match raw.conn.poll_body(decoder, cx) {
                    Poll::Pending => {
                        if stalled(&mut raw.sleep, &mut this.waiting, this.idle, cx) {
                            // The connection goes with the failed exchange.
                            *back = None;
                            this.stalled = true;
                            return Poll::Ready(Some(Err(BodyStalled(this.idle).into())));
                        }
                        Poll::Pending
                    }
                    Poll::Ready(Ok(Some(data))) => {
                        if decoder.is_done() {
                            this.give_back();
                        }
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    Poll::Ready(Ok(None)) => {
                        this.give_back();
                        Poll::Ready(None)
                    }
                    // The connection goes with the failed exchange.
                    Poll::Ready(Err(e)) => {
                        *back = None;
                        Poll::Ready(Some(Err(e.into())))
                    }
                }
            }
        };
        if polled.is_ready() {
            this.waiting = false;
        }
        polled
    }

    fn is_done(&self) -> bool {
        self.stalled
            || match &self.inner {
                Inner::Hyper { body, .. } | Inner::Stream { body, .. } => body.is_end_stream(),
                Inner::Raw { back, decoder, .. } => back.is_none() || decoder.is_done(),
            }
    }

    fn hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Hyper { body, .. } | Inner::Stream { body, .. } => body.size_hint(),
            Inner::Raw { decoder, .. } => decoder.exact_left().map_or_else(SizeHint::new, SizeHint::with_exact),
        }
    }
}
