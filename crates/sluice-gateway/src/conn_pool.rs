//! HTTP/1.1 connections to one upstream, kept by the worker thread that opened them.
//!
//! A gateway worker is a single-threaded runtime: a connection it opens is driven by a task on
//! that runtime, so the connections are its own and a pool needs no key, no checkout future and
//! no cross-thread handoff. A connection goes back to the pool when its response body has been
//! read to the end (HTTP/1.1 carries one exchange at a time); a response dropped before its end
//! takes the connection with it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::body::ReplayBody;
use crate::timer::within;

/// Idle connections kept per worker thread and upstream; beyond them, a connection is closed.
const MAX_IDLE: usize = 1024;

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be opened.
    #[error("cannot connect to the upstream: {0}")]
    Connect(#[from] std::io::Error),
    /// The exchange failed.
    #[error("the upstream exchange failed: {0}")]
    Http(#[from] hyper::Error),
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

/// A worker thread's connections to one upstream.
#[derive(Debug)]
pub struct ConnPool {
    /// `host:port` to connect to.
    authority: String,
    /// Connections ready for a request, most recently used last.
    idle: Mutex<Vec<Conn>>,
}

impl ConnPool {
    /// No connections yet to `authority`.
    pub fn new(authority: String) -> Self {
        Self { authority, idle: Mutex::new(Vec::new()) }
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
        let mut pooled = PooledBody { body, back: Some((Arc::clone(self), conn)) };
        if pooled.body.is_end_stream() {
            pooled.give_back();
        }
        Response::from_parts(parts, pooled)
    }
}

/// A response body from a pooled connection: the connection goes back to its pool at the end.
#[derive(Debug)]
pub struct PooledBody {
    /// The upstream's body, streamed.
    body: Incoming,
    /// The connection and its pool, until the body has ended.
    back: Option<(Arc<ConnPool>, Conn)>,
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some((pool, conn)) = self.back.take() {
            pool.checkin(conn);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.body.is_end_stream() => self.give_back(),
            // An error ends the connection with the exchange: it is not given back.
            Poll::Ready(Some(Err(_))) => self.back = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
