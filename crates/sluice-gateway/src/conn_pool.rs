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

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::body::ReplayBody;

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
}

/// A worker thread's connections to one upstream.
#[derive(Debug)]
pub struct ConnPool {
    /// `host:port` to connect to.
    authority: String,
    /// Connections ready for a request, most recently used last.
    idle: Mutex<Vec<SendRequest<ReplayBody>>>,
}

impl ConnPool {
    /// No connections yet to `authority`.
    pub fn new(authority: String) -> Self {
        Self { authority, idle: Mutex::new(Vec::new()) }
    }

    /// Sends `req` (in origin form) on an idle connection, or on a new one. A request that an
    /// idle connection refused before sending anything (the upstream closed it meanwhile) is
    /// sent again on a new connection.
    pub async fn send(self: &Arc<Self>, req: Request<ReplayBody>) -> Result<Response<PooledBody>, SendError> {
        let mut req = req;
        // A connection given back at its body's end is ready once its task has seen that end.
        if let Some(mut sender) = self.checkout()
            && sender.ready().await.is_ok()
        {
            match sender.try_send_request(req).await {
                Ok(res) => return Ok(self.pooled(res, sender)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(SendError::Http(e.into_error())),
                },
            }
        }
        let mut sender = self.connect().await?;
        let res = sender.send_request(req).await?;
        Ok(self.pooled(res, sender))
    }

    /// The most recently used idle connection still open.
    fn checkout(&self) -> Option<SendRequest<ReplayBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn checkin(&self, sender: SendRequest<ReplayBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(sender);
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

    fn pooled(self: &Arc<Self>, res: Response<Incoming>, sender: SendRequest<ReplayBody>) -> Response<PooledBody> {
        let (parts, body) = res.into_parts();
        let mut pooled = PooledBody { body, back: Some((Arc::clone(self), sender)) };
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
    back: Option<(Arc<ConnPool>, SendRequest<ReplayBody>)>,
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some((pool, sender)) = self.back.take() {
            pool.checkin(sender);
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
