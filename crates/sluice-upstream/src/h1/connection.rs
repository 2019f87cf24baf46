//! One connection to the upstream, driven by the task that uses it: a request head written, the
//! response head and body read from it.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::Method;
use tokio::io::AsyncWriteExt;

use super::body_decoder::{Decoder, FramingError, Step};
use super::response_head::{self, Head, HeadError, Parsed};
use crate::socket::Socket;

/// Room made in the read buffer before a read, at first: a response head and a small body.
const READ_CHUNK: usize = 8 * 1024;

/// The most room made before a read: a large body is read in up to this much at a time.
const MAX_READ_CHUNK: usize = 256 * 1024;

/// A connection to the upstream over `S`.
#[derive(Debug)]
pub struct Connection<S> {
    /// The socket (a TCP one is registered with the runtime of the thread that opened it).
    io: S,
    /// Bytes read and not yet used: the start of a response head, or of its body.
    buf: BytesMut,
    /// The request head being sent (kept for its capacity).
    out: Vec<u8>,
    /// The upstream has closed its side: what is in `buf` is all there is.
    closed: bool,
    /// Room made before the next read: doubled each time a read fills all there was (a large
    /// body), up to [`MAX_READ_CHUNK`], so that it takes fewer system calls; back to
    /// [`READ_CHUNK`] for each exchange.
    read_chunk: usize,
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The connection ended before any byte of a response came: the upstream closed it while it
    /// was idle, or reset it. Whether the request reached the upstream is unknown.
    #[error("the upstream closed the connection before answering: {0}")]
    Lost(io::Error),
    /// The connection failed after part of the response came.
    #[error("the upstream connection failed: {0}")]
    Io(io::Error),
    /// The response head was refused.
    #[error(transparent)]
    Head(#[from] HeadError),
}

/// Why a response body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyReadError {
    /// The bytes are not the body its framing announced.
    #[error(transparent)]
    Framing(#[from] FramingError),
    /// The connection failed.
    #[error("the upstream connection failed inside a response body: {0}")]
    Io(#[from] io::Error),
}

impl<S: Socket> Connection<S> {
    /// A connection over `io`, open and unused.
    pub fn new(io: S) -> Self {
        Self { io, buf: BytesMut::new(), out: Vec::new(), closed: false, read_chunk: READ_CHUNK }
    }

    /// The buffer the next request head is written into, empty.
    pub fn head_buffer(&mut self) -> &mut Vec<u8> {
        self.out.clear();
        &mut self.out
    }

    /// Sends the head in [`Connection::head_buffer`] and reads the final response head, skipping
    /// interim ones. `method`: the request's (see [`response_head::parse`]).
    pub async fn exchange(&mut self, method: &Method) -> Result<Head, ExchangeError> {
        // A connection is reused only once its last response ended at its last byte.
        self.buf.clear();
        // Each response starts small: one large body does not make every later read large.
        self.read_chunk = READ_CHUNK;
        // Flushed for streams that buffer (a no-op on TCP).
        if let Err(e) = async {
            self.io.write_all(&self.out).await?;
            self.io.flush().await
        }
        .await
        {
            return Err(ExchangeError::Lost(e));
        }
        let mut answered = false;
        loop {
            if !self.buf.is_empty() {
                match response_head::parse(&mut self.buf, method)? {
                    Parsed::Final(head) => return Ok(head),
                    // The final head may be in the buffer already.
                    Parsed::Interim => continue,
                    Parsed::Partial => {}
                }
            }
            let read = poll_fn(|cx| self.poll_fill(cx)).await;
            match read {
                Ok(0) if !answered => return Err(ExchangeError::Lost(io::ErrorKind::UnexpectedEof.into())),
                Ok(0) => return Err(ExchangeError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => answered = true,
                Err(e) if !answered => return Err(ExchangeError::Lost(e)),
                Err(e) => return Err(ExchangeError::Io(e)),
            }
        }
    }

    /// The next piece of the body `decoder` decodes: `None` at its end.
    pub fn poll_body(
        &mut self,
        decoder: &mut Decoder,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, BodyReadError>> {
        loop {
            match decoder.step(&mut self.buf, self.closed)? {
                Step::Data(data) => return Poll::Ready(Ok(Some(data))),
                Step::End => return Poll::Ready(Ok(None)),
                Step::More => {
                    if ready!(self.poll_fill(cx))? == 0 {
                        self.closed = true;
                    }
                }
            }
        }
    }

    /// True when the connection can carry another exchange after a response that allowed it:
    /// open, and nothing read beyond that response's end (bytes the upstream sent unasked would
    /// be taken for the next response).
    pub fn is_clean(&self) -> bool {
        self.buf.is_empty() && !self.closed
    }

    /// True when the upstream has closed this idle connection, reset it, or sent bytes on it
    /// unasked, as far as the runtime has seen: it must not carry a request (see
    /// [`Socket::is_stale`]).
    pub fn is_stale(&mut self) -> bool {
        self.io.is_stale()
    }

    /// Reads what the socket has into the buffer: 0 when the upstream has closed.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < self.read_chunk / 4 {
            self.buf.reserve(self.read_chunk);
        }
        let room = self.buf.capacity() - self.buf.len();
        let read = ready!(tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf));
        if matches!(read, Ok(n) if n == room) {
            self.read_chunk = (self.read_chunk * 2).min(MAX_READ_CHUNK);
        }
        Poll::Ready(read)
    }
}
