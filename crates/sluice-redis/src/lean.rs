//! One pipelined connection to a single Redis node, without a driver task: the request that is
//! next in line to be answered reads the socket itself, hands itself its reply and wakes the one
//! after it; every request writes what is pending, its own bytes and any queued behind them.
//! Replies come back in the order requests were written, so a request's place in line is its
//! ticket. A request dropped before its answer (a timeout) leaves its ticket behind: its reply
//! is read and thrown away. Any I/O or protocol error breaks the connection for every request
//! on it; the store then discards it and the next call connects again.
//!
//! The socket is any `AsyncRead + AsyncWrite + Unpin` (TCP in production; the tests drive the
//! connection through scripted in-memory sockets, `lean/tests.rs`). Only the reader waits for
//! the socket: the others write with no waker of their own to leave, and a write the socket
//! refuses wakes the reader, which then waits for it.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::resp::{MAX_REPLY, Malformed, frame_len};

#[cfg(test)]
mod tests;

/// Bytes of the read buffer to begin with; it grows for a longer reply, up to [`MAX_REPLY`].
const READ_BUFFER: usize = 16 << 10;

pub(crate) struct LeanConn<S = TcpStream> {
    state: Mutex<State<S>>,
}

/// A request waiting for its reply.
#[derive(Default)]
struct Waiter {
    /// Who to wake when its reply is in (or it is the next to read the socket).
    waker: Option<Waker>,
    /// It gave up waiting: its reply is read and dropped.
    abandoned: bool,
}

struct State<S> {
    /// The socket; used only under the lock, like everything else here.
    stream: S,
    /// Requests written into the buffer and not yet onto the socket.
    out: Vec<u8>,
    /// Bytes read; `start..end` are not consumed yet.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The ticket of `waiting[0]`, the request whose reply comes next.
    first: u64,
    waiting: VecDeque<Waiter>,
    /// Why the connection is unusable, once it is.
    broken: Option<(io::ErrorKind, String)>,
    /// The ticket of the request that writes the batch being gathered in `out`, if one is.
    batch: Option<u64>,
    /// The waker of the request reading the socket, while it waits. A socket keeps one waker
    /// per direction: a write the socket refused from another request left a waker that wakes
    /// nobody in its place, so that write wakes the reader to leave its own again.
    reader: Option<Waker>,
}

impl LeanConn<TcpStream> {
    /// Connects, with `TCP_NODELAY` (a request must not wait for the one before it to be
    /// answered).
    pub async fn connect(host: &str, port: u16) -> io::Result<Self> {
        let stream = TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        Ok(Self::new(stream, READ_BUFFER))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> LeanConn<S> {
    /// A connection over `stream`, reading into a buffer of `read_buffer` bytes to begin with.
    fn new(stream: S, read_buffer: usize) -> Self {
        let state = State {
            stream,
            out: Vec::with_capacity(4096),
            input: vec![0; read_buffer.max(1)],
            start: 0,
            end: 0,
            first: 0,
            waiting: VecDeque::new(),
            broken: None,
            batch: None,
            reader: None,
        };
        Self { state: Mutex::new(state) }
    }

    fn lock(&self) -> MutexGuard<'_, State<S>> {
        // A panic under the lock (none is expected) leaves at worst a broken stream, which the
        // next I/O error reports.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends the request `encode` writes and gives its reply, one whole RESP value, to `decode`.
    pub async fn request<T>(
        &self,
        encode: impl FnOnce(&mut Vec<u8>),
        decode: impl FnOnce(&[u8]) -> T,
    ) -> io::Result<T> {
        let (ticket, batch) = {
            let mut st = self.lock();
            if let Some(e) = st.error() {
                return Err(e);
            }
            let was_empty = st.out.is_empty();
            encode(&mut st.out);
            st.waiting.push_back(Waiter::default());
            let ticket = st.first + st.waiting.len() as u64 - 1;
            let alone = st.waiting.len() == 1;
            let batch = !alone && was_empty && st.batch.is_none();
            if alone {
                // Nothing else in flight: written at once.
                self.flush_or_break(&mut st);
            } else if batch {
                st.batch = Some(ticket);
            }
            (ticket, batch)
        };
        let mut guard = Ticket { conn: self, ticket, answered: false };
        if batch {
            // Others are in flight: the requests made before the runtime next polls its
            // driver go out in the same write (one system call, and one read for Redis).
            tokio::task::yield_now().await;
            let mut st = self.lock();
            st.batch = None;
            self.flush_or_break(&mut st);
        }
        let mut decode = Some(decode);
        let out = poll_fn(|cx| self.poll_reply(cx, ticket, &mut decode)).await;
        guard.answered = true;
        out
    }

    fn poll_reply<T>(
        &self,
        cx: &mut Context<'_>,
        ticket: u64,
        decode: &mut Option<impl FnOnce(&[u8]) -> T>,
    ) -> Poll<io::Result<T>> {
        let mut st = self.lock();
        loop {
            if let Some(e) = st.error() {
                return Poll::Ready(Err(e));
            }
            let place = (ticket - st.first) as usize;
            if st.waiting.iter().take(place).any(|s| !s.abandoned) {
                // Someone before us reads; they wake us when our turn comes.
                if let Err(e) = self.flush(&mut st, None) {
                    self.break_with(&mut st, e);
                    continue;
                }
                st.waiting[place].waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if let Err(e) = self.flush(&mut st, Some(cx)) {
                self.break_with(&mut st, e);
                continue;
            }
            match st.next_frame() {
                Err(e) => {
                    self.break_with(&mut st, io::Error::new(io::ErrorKind::InvalidData, e));
                    continue;
                }
                Ok(Some((from, to))) => {
                    st.first += 1;
                    let slot = st.waiting.pop_front().unwrap_or_default();
                    if slot.abandoned {
                        continue;
                    }
                    st.reader = None;
                    let decode = decode.take().expect("a reply is decoded once");
                    let out = decode(&st.input[from..to]);
                    // The next request in line reads now.
                    if let Some(w) = st.waiting.iter_mut().find(|s| !s.abandoned).and_then(|s| s.waker.take()) {
                        w.wake();
                    }
                    return Poll::Ready(Ok(out));
                }
                Ok(None) => {}
            }
            if let Err(e) = st.make_room() {
                self.break_with(&mut st, io::Error::new(io::ErrorKind::InvalidData, e));
                continue;
            }
            let st = &mut *st;
            let mut buf = ReadBuf::new(&mut st.input[st.end..]);
            // tokio's TCP read clears the socket's readiness after a short read only if no event
            // came since the one it read on, so a reply that arrived meanwhile is not missed.
            match Pin::new(&mut st.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => match buf.filled().len() {
                    0 => {
                        let closed = io::Error::new(io::ErrorKind::ConnectionReset, "connection closed by Redis");
                        self.break_with(st, closed);
                    }
                    n => st.end += n,
                },
                Poll::Ready(Err(e)) => self.break_with(st, e),
                Poll::Pending => {
                    if !st.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        st.reader = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// Writes what is pending until the socket takes no more. With `cx` (the reader), waits for
    /// the socket to take more; without, leaves the rest to the reader, woken if it waits.
    fn flush(&self, st: &mut State<S>, cx: Option<&mut Context<'_>>) -> io::Result<()> {
        if st.batch.is_some() {
            // Its writer comes soon.
            return Ok(());
        }
        let reads = cx.is_some();
        let mut cx = Context::from_waker(cx.map_or(Waker::noop(), |cx| cx.waker()));
        let mut written = 0;
        let result = loop {
            if written == st.out.len() {
                break Ok(());
            }
            match Pin::new(&mut st.stream).poll_write(&mut cx, &st.out[written..]) {
                Poll::Ready(Ok(0)) => break Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => break Err(e),
                Poll::Pending => {
                    if !reads && let Some(reader) = st.reader.take() {
                        reader.wake();
                    }
                    break Ok(());
                }
            }
        };
        st.out.drain(..written);
        result
    }

    fn flush_or_break(&self, st: &mut State<S>) {
        if st.broken.is_none()
            && let Err(e) = self.flush(st, None)
        {
            self.break_with(st, e);
        }
    }

    /// Marks the connection unusable and wakes every waiting request, which sees why: the
    /// reader too, which a socket that failed another request's write need not wake.
    fn break_with(&self, st: &mut State<S>, e: io::Error) {
        if st.broken.is_none() {
            st.broken = Some((e.kind(), e.to_string()));
        }
        for w in st.waiting.iter_mut().filter_map(|s| s.waker.take()).chain(st.reader.take()) {
            w.wake();
        }
    }

    /// Whether the connection failed.
    pub fn is_broken(&self) -> bool {
        self.lock().broken.is_some()
    }
}

impl<S> State<S> {
    fn error(&self) -> Option<io::Error> {
        self.broken.as_ref().map(|(kind, why)| io::Error::new(*kind, why.clone()))
    }

    /// The bounds of the next complete reply in the input, consumed.
    fn next_frame(&mut self) -> Result<Option<(usize, usize)>, Malformed> {
        let Some(len) = frame_len(&self.input[self.start..self.end])? else { return Ok(None) };
        let from = self.start;
        self.start += len;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(Some((from, from + len)))
    }

    /// Room to read into after `end`: the unconsumed bytes moved to the front, or a larger
    /// buffer for a reply longer than it.
    fn make_room(&mut self) -> Result<(), Malformed> {
        if self.end < self.input.len() {
            return Ok(());
        }
        if self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return Ok(());
        }
        if self.input.len() >= MAX_REPLY {
            return Err(Malformed("a reply longer than 16 MiB"));
        }
        let larger = (self.input.len() * 2).min(MAX_REPLY);
        self.input.resize(larger, 0);
        Ok(())
    }
}

/// A request's place in line; dropped unanswered (a timeout), its reply will be thrown away and
/// the next request in line takes over the reading.
struct Ticket<'a, S: AsyncRead + AsyncWrite + Unpin> {
    conn: &'a LeanConn<S>,
    ticket: u64,
    answered: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Drop for Ticket<'_, S> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let mut st = self.conn.lock();
        if st.batch == Some(self.ticket) {
            st.batch = None;
            self.conn.flush_or_break(&mut st);
        }
        // Already popped (its decode panicked): nothing to mark, but the next in line is woken all the same.
        if let Some(place) = self.ticket.checked_sub(st.first)
            && let Some(slot) = st.waiting.get_mut(place as usize)
        {
            slot.abandoned = true;
            slot.waker = None;
        }
        if let Some(w) = st.waiting.iter_mut().find(|s| !s.abandoned).and_then(|s| s.waker.take()) {
            w.wake();
        }
    }
}
