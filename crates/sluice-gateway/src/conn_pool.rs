//! HTTP/1.1 connections to one upstream, kept by the worker thread that opened them.
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
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::body::ReplayBody;
use crate::client_slots::Slot;
use crate::h1::body_decoder::Decoder;
use crate::h1::connection::{Connection, ExchangeError};
use crate::h1::request_head;
use crate::h1::response_head::Head;
use crate::timer::within;

/// Idle connections kept per worker thread and upstream; beyond them, a connection is closed.
const MAX_IDLE: usize = 1024;

/// How often each worker closes the idle connections the upstream has closed.
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

/// An open connection and the sleep that times its exchanges (moved on for each one: see
/// [`crate::timer`]).
#[derive(Debug)]
struct Conn {
    sender: SendRequest<ReplayBody>,
    sleep: Pin<Box<Sleep>>,
}

/// One of the proxy's own connections and the sleep that times its exchanges.
#[derive(Debug)]
struct RawConn {
    conn: Connection,
    sleep: Pin<Box<Sleep>>,
}

/// A worker thread's connections to one upstream.
#[derive(Debug)]
pub struct ConnPool {
    /// `host:port` to connect to.
    authority: String,
    /// hyper's connections ready for a request (with a body), most recently used last.
    idle: Mutex<Vec<Conn>>,
    /// The proxy's own connections ready for a request without a body, most recently used last.
    raw_idle: Mutex<Vec<RawConn>>,
}

impl ConnPool {
    /// No connections yet to `authority`.
    pub fn new(authority: String) -> Self {
        Self { authority, idle: Mutex::new(Vec::new()), raw_idle: Mutex::new(Vec::new()) }
    }

    /// Sends the request `parts` describe, which has no body, on one of the proxy's own
    /// connections (an idle one, or a new one), waiting at most `timeout` for the response head.
    /// An idle connection that loses the request before any byte of a response (the upstream
    /// closed it meanwhile) is replaced by a new one for a safe method (`GET`, `HEAD`, `OPTIONS`,
    /// `TRACE`); for another the upstream may have acted on it (a reset can come after the
    /// request arrived), and the client gets the 502.
    pub async fn send_bodiless(
        self: &Arc<Self>,
        parts: &Parts,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        let deadline = Instant::now() + timeout;
        let mut sleep = None;
        if let Some(mut raw) = self.checkout_raw() {
            raw.sleep.as_mut().reset(deadline);
            request_head::write(parts, raw.conn.head_buffer());
            let RawConn { conn, sleep: s } = &mut raw;
            match within(s, conn.exchange(&parts.method)).await {
                None => return Err(SendError::Timeout),
                Some(Ok(head)) => return Ok(self.raw_response(head, raw)),
                Some(Err(ExchangeError::Lost(_))) if parts.method.is_safe() => sleep = Some(raw.sleep),
                Some(Err(e)) => return Err(e.into()),
            }
        }
        let mut sleep = sleep.unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        let sent = within(&mut sleep, async {
            let mut conn = Connection::connect(&self.authority).await?;
            request_head::write(parts, conn.head_buffer());
            let head = conn.exchange(&parts.method).await?;
            Ok::<_, SendError>((head, conn))
        });
        match sent.await {
            None => Err(SendError::Timeout),
            Some(Err(e)) => Err(e),
            Some(Ok((head, conn))) => Ok(self.raw_response(head, RawConn { conn, sleep })),
        }
    }

    /// The response of `head`, its body read from `raw` (given back at the body's end).
    fn raw_response(self: &Arc<Self>, head: Head, raw: RawConn) -> Response<PooledBody> {
        let decoder = Decoder::new(head.framing);
        let mut body = PooledBody {
            inner: Inner::Raw { back: Some((Arc::clone(self), raw)), decoder, reusable: head.reusable },
            held: None,
        };
        if body.is_end_stream() {
            body.give_back();
        }
        let mut res = Response::new(body);
        *res.status_mut() = head.status;
        *res.headers_mut() = head.headers;
        res
    }

    /// The most recently used idle connection of the proxy's own still open.
    fn checkout_raw(&self) -> Option<RawConn> {
        let mut idle = self.raw_idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(raw) = idle.pop() {
            if !raw.conn.is_stale() {
                return Some(raw);
            }
        }
        None
    }

    fn checkin_raw(&self, raw: RawConn) {
        let mut idle = self.raw_idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(raw);
        }
    }

    /// Closes the idle connections of the proxy's own that the upstream has closed (or written
    /// to): no task reads them while they wait, so without a sweep a socket the upstream closed
    /// would stay half-open until it was checked out. Run every [`SWEEP_EVERY`] on each worker.
    pub fn sweep(&self) {
        self.raw_idle.lock().unwrap_or_else(|p| p.into_inner()).retain(|raw| !raw.conn.is_stale());
    }

    /// Sends `req` (in origin form) on an idle connection, or on a new one, waiting at most
    /// `timeout` for the response head. A request that an idle connection refused before sending
    /// anything (the upstream closed it meanwhile) is sent again on a new connection.
    pub async fn send(
        self: &Arc<Self>,
        req: Request<ReplayBody>,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, SendError> {
        let deadline = Instant::now() + timeout;
        let mut req = req;
        // A connection given back at its body's end is ready once its task has seen that end.
        if let Some(mut conn) = self.checkout() {
            conn.sleep.as_mut().reset(deadline);
            let Conn { sender, sleep } = &mut conn;
            match within(sleep, sender.ready()).await {
                None => return Err(SendError::Timeout),
                Some(Ok(())) => match within(sleep, sender.try_send_request(req)).await {
                    None => return Err(SendError::Timeout),
                    Some(Ok(res)) => return Ok(self.pooled(res, conn)),
                    Some(Err(mut e)) => match e.take_message() {
                        Some(back) => req = back,
                        None => return Err(SendError::Http(e.into_error())),
                    },
                },
                // Closed meanwhile: a new connection takes the request.
                Some(Err(_)) => {}
            }
            return self.send_new(req, conn.sleep).await;
        }
        self.send_new(req, Box::pin(tokio::time::sleep_until(deadline))).await
    }

    /// Sends `req` on a new connection, within `sleep`.
    async fn send_new(
        self: &Arc<Self>,
        req: Request<ReplayBody>,
        mut sleep: Pin<Box<Sleep>>,
    ) -> Result<Response<PooledBody>, SendError> {
        let sent = within(&mut sleep, async {
            let mut sender = self.connect().await?;
            let res = sender.send_request(req).await?;
            Ok::<_, SendError>((res, sender))
        });
        match sent.await {
            None => Err(SendError::Timeout),
            Some(Err(e)) => Err(e),
            Some(Ok((res, sender))) => Ok(self.pooled(res, Conn { sender, sleep })),
        }
    }

    /// The most recently used idle connection still open.
    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(conn) = idle.pop() {
            if !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn checkin(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    async fn connect(&self) -> Result<SendRequest<ReplayBody>, SendError> {
        let stream = TcpStream::connect(&self.authority).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::Builder::new().handshake(TokioIo::new(stream)).await?;
        // Driven on this worker's runtime; it ends when the upstream closes or every handle to
        // the connection is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn pooled(self: &Arc<Self>, res: Response<Incoming>, conn: Conn) -> Response<PooledBody> {
        let (parts, body) = res.into_parts();
        let mut pooled = PooledBody { inner: Inner::Hyper { body, back: Some((Arc::clone(self), conn)) }, held: None };
        if pooled.is_end_stream() {
            pooled.give_back();
        }
        Response::from_parts(parts, pooled)
    }
}

/// A response body from a pooled connection: the connection goes back to its pool at the end.
#[derive(Debug)]
pub struct PooledBody {
    inner: Inner,
    /// The request's slot in flight ([`PooledBody::hold`]): a request counts until its
    /// response's body is done with (sent whole, or dropped with the client's connection).
    held: Option<Slot>,
}

/// The two kinds of connection a body is read from.
#[derive(Debug)]
enum Inner {
    /// hyper's: its task reads the body.
    Hyper {
        /// The upstream's body, streamed.
        body: Incoming,
        /// The connection and its pool, until the body has ended.
        back: Option<(Arc<ConnPool>, Conn)>,
    },
    /// The proxy's own: read here, by the task that polls the body.
    Raw {
        /// The connection and its pool, until the body has ended or failed.
        back: Option<(Arc<ConnPool>, RawConn)>,
        /// Where the body's framing stands.
        decoder: Decoder,
        /// Whether the response allows the connection another exchange.
        reusable: bool,
    },
}

/// Why a response body failed: the client's connection is cut (the body was not whole).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl PooledBody {
    /// Keeps `slot` (a request in flight) until this body is dropped.
    pub fn hold(&mut self, slot: Slot) {
        self.held = Some(slot);
    }

    fn give_back(&mut self) {
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
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        match &mut this.inner {
            Inner::Hyper { body, back } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(None) => this.give_back(),
                    Poll::Ready(Some(Ok(_))) if body.is_end_stream() => this.give_back(),
                    // An error ends the connection with the exchange: it is not given back.
                    Poll::Ready(Some(Err(_))) => *back = None,
                    _ => {}
                }
                polled.map_err(Into::into)
            }
            Inner::Raw { back, decoder, .. } => {
                let Some((_, raw)) = back.as_mut() else { return Poll::Ready(None) };
                match raw.conn.poll_body(decoder, cx) {
                    Poll::Pending => Poll::Pending,
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
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Hyper { body, .. } => body.is_end_stream(),
            Inner::Raw { back, decoder, .. } => back.is_none() || decoder.is_done(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Hyper { body, .. } => body.size_hint(),
            Inner::Raw { decoder, .. } => decoder.exact_left().map_or_else(SizeHint::new, SizeHint::with_exact),
        }
    }
}
