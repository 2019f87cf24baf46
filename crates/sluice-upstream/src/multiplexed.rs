//! HTTP/2 to the upstream (`[upstream] http2 = true`): a worker thread's requests go as streams
//! of one connection, hyper's HTTP/2 client, instead of one exchange at a time per pooled
//! connection.
//!
//! The connection is opened on the first request and kept in the pool; a request that finds it
//! closed (the upstream sent GOAWAY, or went away) opens the next one. Over TLS the connector
//! asks for `h2` by ALPN and refuses an upstream that does not agree (see
//! [`crate::tls::TlsConnect::http2`]); over TCP it is HTTP/2 with prior knowledge (h2c).
//!
//! Timeouts are those of HTTP/1.1 ([`Timeouts`]): the connection opened within `connect`, the
//! response head within `first_byte`, then each next piece of the body within `idle`
//! ([`crate::pool::PooledBody`]), timed on a sleep the body keeps.

use std::sync::Arc;

use http::{Request, Response};
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;

use crate::deadline::within;
use crate::pool::{ConnPool, PooledBody, RequestBody, SendError};
use crate::socket::Connect;
use crate::timeouts::Timeouts;

/// A pool's HTTP/2 connection, once opened.
#[derive(Debug)]
pub(crate) struct Shared<B> {
    /// The connection every request goes on; `None` before the first.
    kept: std::sync::Mutex<Option<SendRequest<B>>>,
    /// Held while a connection is opened: requests that find none meanwhile wait for that one
    /// rather than each opening its own.
    opening: tokio::sync::Mutex<()>,
}

impl<B> Default for Shared<B> {
    fn default() -> Self {
        Self { kept: std::sync::Mutex::new(None), opening: tokio::sync::Mutex::new(()) }
    }
}

impl<C: Connect, B: RequestBody> ConnPool<C, B> {
    /// Sends `req` as a stream of this thread's HTTP/2 connection to the upstream (opened when
    /// there is none, or when the one kept is closed), within `timeouts`. `req`'s target must be in absolute form (`scheme://authority/path`): HTTP/2 carries
    /// them as `:scheme` and `:authority`. A request the kept connection refused before sending
    /// anything (it was closing) goes on a new one.
    pub async fn send_multiplexed<H>(
        self: &Arc<Self>,
        req: Request<B>,
        timeouts: impl Into<Timeouts>,
    ) -> Result<Response<PooledBody<C, B, H>>, SendError> {
        let timeouts = timeouts.into();
        let mut sleep = Box::pin(tokio::time::sleep_until(Instant::now() + timeouts.first_byte));
        let mut req = req;
        if let Some(mut sender) = self.kept_stream_sender() {
            match within(&mut sleep, sender.try_send_request(req)).await {
                None => return Err(SendError::Timeout),
                Some(Ok(res)) => return Ok(self.streamed(res, sleep, timeouts.idle)),
                Some(Err(mut e)) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(SendError::Http(e.into_error())),
                },
            }
        }
        let sent = within(&mut sleep, async {
            let mut sender = {
                let _opening = self.multiplexed.opening.lock().await;
                match self.kept_stream_sender() {
                    Some(opened_meanwhile) => opened_meanwhile,
                    None => self.open_multiplexed(&timeouts).await?,
                }
            };
            sender.ready().await?;
            Ok::<_, SendError>(sender.send_request(req).await?)
        });
        match sent.await {
            None => Err(SendError::Timeout),
            Some(Err(e)) => Err(e),
            Some(Ok(res)) => Ok(self.streamed(res, sleep, timeouts.idle)),
        }
    }

    /// A handle to the kept connection, unless there is none or it is closed.
    fn kept_stream_sender(&self) -> Option<SendRequest<B>> {
        let kept = self.multiplexed.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.as_ref().filter(|s| !s.is_closed() && s.is_ready()).cloned()
    }

    /// A new HTTP/2 connection, kept for the requests that follow (in place of a closed one).
    async fn open_multiplexed(&self, timeouts: &Timeouts) -> Result<SendRequest<B>, SendError> {
        let stream = self.open(timeouts).await?;
        let (sender, conn) = http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(stream)).await?;
        // Driven on this worker's runtime, as HTTP/1.1 connections are; it ends when the
        // upstream closes or every handle is dropped.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        *self.multiplexed.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender.clone());
        Ok(sender)
    }
}
