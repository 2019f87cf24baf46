//! Scripted in-memory upstreams: a socket that returns the given chunks, waits, stalls or resets
//! as told, and records what was written to it; a connector that hands them out in order.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use proptest::prelude::*;
use proptest::sample::select;
use sluice_upstream::pool::{BoxError, ConnPool, PooledBody};
use sluice_upstream::socket::{Connect, Socket};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What a scripted socket does on the reads it is asked for, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Returns these bytes (over several reads if the reader's buffer is smaller).
    Read(Vec<u8>),
    /// Returns nothing for this long (on the runtime's clock: tests run with time paused).
    Wait(Duration),
    /// Never returns anything again (and never ends).
    Stall,
    /// Fails the read: the peer reset the connection.
    Reset,
    /// Returns nothing until this many requests (request lines) were written in all: the
    /// upstream answers only what it was asked.
    Await(usize),
}

/// A socket whose reads follow a script; the end of the script is the peer's close.
#[derive(Debug)]
pub struct Scripted {
    steps: VecDeque<Step>,
    /// The wait of the current `Wait` step, once started.
    wait: Option<Pin<Box<Sleep>>>,
    /// Everything written to the socket.
    pub written: Arc<Mutex<Vec<u8>>>,
    /// The most bytes one write takes (short writes).
    max_write: usize,
    /// Woken by a write, for an `Await` step.
    reader: Option<std::task::Waker>,
}

impl Scripted {
    /// A socket that reads `steps`.
    pub fn new(steps: Vec<Step>) -> Self {
        Self { steps: steps.into(), wait: None, written: Arc::default(), max_write: usize::MAX, reader: None }
    }

    /// A socket that reads `wire` in pieces of `piece` bytes, then closes.
    pub fn pieces(wire: &[u8], piece: usize) -> Self {
        Self::new(wire.chunks(piece.max(1)).map(|c| Step::Read(c.to_vec())).collect())
    }

    /// The same, taking at most `max` bytes per write.
    pub fn short_writes(mut self, max: usize) -> Self {
        self.max_write = max;
        self
    }
}

impl AsyncRead for Scripted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            match this.steps.front_mut() {
                None => return Poll::Ready(Ok(())),
                Some(Step::Read(bytes)) => {
                    let n = bytes.len().min(buf.remaining());
                    buf.put_slice(&bytes[..n]);
                    bytes.drain(..n);
                    if bytes.is_empty() {
                        this.steps.pop_front();
                    }
                    return Poll::Ready(Ok(()));
                }
                Some(Step::Wait(d)) => {
                    let d = *d;
                    let wait = this.wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(d)));
                    if wait.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.wait = None;
                    this.steps.pop_front();
                }
                Some(Step::Stall) => return Poll::Pending,
                Some(Step::Await(n)) => {
                    if requests_in(&this.written.lock().unwrap()) < *n {
                        this.reader = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    this.steps.pop_front();
                }
                Some(Step::Reset) => {
                    this.steps.pop_front();
                    return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
                }
            }
        }
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.max_write);
        self.written.lock().unwrap().extend_from_slice(&buf[..n]);
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Socket for Scripted {}

/// Request lines in `written`.
pub fn requests_in(written: &[u8]) -> usize {
    const LINE_END: &[u8] = b" HTTP/1.1\r\n";
    written.windows(LINE_END.len()).filter(|w| *w == LINE_END).count()
}

/// Hands out scripted sockets in order; a connection past the last one is refused.
#[derive(Debug, Clone, Default)]
pub struct Scripts {
    sockets: Arc<Mutex<VecDeque<Scripted>>>,
    /// Connections opened so far.
    pub opened: Arc<AtomicUsize>,
}

impl Scripts {
    /// Connections that read `sockets`, in order.
    pub fn new(sockets: Vec<Scripted>) -> Self {
        Self { sockets: Arc::new(Mutex::new(sockets.into())), opened: Arc::default() }
    }

    /// Connections opened so far.
    pub fn opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
    }
}

impl Connect for Scripts {
    type Socket = Scripted;

    async fn connect(&self) -> io::Result<Scripted> {
        let next = self.sockets.lock().unwrap().pop_front();
        let socket = next.ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(socket)
    }
}

/// The request body of hyper's path in these tests: bytes known at once.
pub type ReqBody = http_body_util::Full<Bytes>;

/// The upstream timeout of the tests: to connect, for a response head, and between a body's
/// bytes.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The response to a request without a body read whole through sluice's pool and exchange, on a
/// pool whose only connection reads `socket`.
pub async fn through_sluice(method: &str, socket: Scripted) -> Result<Whole, String> {
    let scripts = Scripts::new(vec![socket]);
    let res = pool(&scripts).send_bodiless(&parts(method, "/x"), TIMEOUT).await.map_err(|e| e.to_string())?;
    whole(res).await.map_err(|e| e.to_string())
}

/// A pool over `scripts`.
pub fn pool(scripts: &Scripts) -> Arc<ConnPool<Scripts, ReqBody>> {
    Arc::new(ConnPool::new(scripts.clone()))
}

/// A response as both clients are compared: its status, fields and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

/// Reads a pooled response whole: `Err` with the body's error when it fails.
pub async fn whole(res: http::Response<PooledBody<Scripts, ReqBody>>) -> Result<Whole, BoxError> {
    let (parts, body) = res.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    Ok(Whole { status: parts.status.as_u16(), headers: parts.headers, body })
}

/// The head of a request without a body, for `send_bodiless`.
pub fn parts(method: &str, path: &str) -> http::request::Parts {
    let req = http::Request::builder().method(method).uri(path).header("host", "up").body(()).unwrap();
    req.into_parts().0
}

/// Runs `fut` on a current-thread runtime with time paused (waits pass at once, in order).
pub fn paused<T>(fut: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(fut)
}

/// `wire` read in the given pieces once the request came, then the upstream's close.
pub fn script(wire: &[u8], cuts: &[usize]) -> Scripted {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut steps = vec![Step::Await(1)];
    let mut at = 0;
    for cut in cuts.into_iter().chain([wire.len()]) {
        if cut > at {
            steps.push(Step::Read(wire[at..cut].to_vec()));
            steps.push(Step::Wait(Duration::from_millis(1)));
            at = cut;
        }
    }
    Scripted::new(steps)
}

/// A response made of plausible pieces: a version, an interim response or not, fields among
/// which some frame the body or are hop-by-hop, and a body framed one of several ways (some
/// wrong).
pub fn response() -> impl Strategy<Value = (String, Vec<u8>)> {
    let fields = proptest::collection::vec(
        select(vec![
            "X-A: b",
            "Set-Cookie: a=1",
            "Set-Cookie: b=2",
            "Connection: close",
            "Connection: keep-alive",
            "Connection: x-hop",
            "X-Hop: 1",
            "Keep-Alive: timeout=5",
            "Trailer: X-T",
            "Cache-Control: no-store",
        ]),
        0..5,
    );
    (
        select(vec!["HTTP/1.1", "HTTP/1.0"]),
        select(vec![200u16, 201, 204, 304, 404, 500]),
        any::<bool>(),
        fields,
        0..6u8,
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(1..16usize, 1..8),
        any::<bool>(),
        select(vec!["GET", "HEAD"]),
    )
        .prop_map(|(version, status, interim, fields, framing, body, sizes, extras, method)| {
            let mut wire = Vec::new();
            if interim {
                wire.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            wire.extend_from_slice(format!("{version} {status} X\r\n").as_bytes());
            for f in fields {
                wire.extend_from_slice(format!("{f}\r\n").as_bytes());
            }
            let chunked = |wire: &mut Vec<u8>| {
                let mut rest = &body[..];
                for size in sizes.iter().cycle() {
                    if rest.is_empty() {
                        break;
                    }
                    let (chunk, after) = rest.split_at((*size).min(rest.len()));
                    let ext = if extras { ";x=y" } else { "" };
                    wire.extend_from_slice(format!("{:x}{ext}\r\n", chunk.len()).as_bytes());
                    wire.extend_from_slice(chunk);
                    wire.extend_from_slice(b"\r\n");
                    rest = after;
                }
                wire.extend_from_slice(if extras { b"0\r\nX-T: 1\r\n\r\n" } else { b"0\r\n\r\n" });
            };
            match framing {
                0 => {
                    wire.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                    wire.extend_from_slice(&body);
                }
                // A length that does not match the body: longer (cut short) or shorter (bytes
                // left over).
                1 => {
                    let claimed = if extras { body.len() + 3 } else { body.len() / 2 };
                    wire.extend_from_slice(format!("Content-Length: {claimed}\r\n\r\n").as_bytes());
                    wire.extend_from_slice(&body);
                }
                2 => {
                    wire.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                    chunked(&mut wire);
                }
                3 => {
                    wire.extend_from_slice(b"\r\n");
                    wire.extend_from_slice(&body);
                }
                4 => {
                    wire.extend_from_slice(
                        format!("Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n", body.len()).as_bytes(),
                    );
                    chunked(&mut wire);
                }
                _ => {
                    wire.extend_from_slice(b"Transfer-Encoding: gzip\r\n\r\n");
                    wire.extend_from_slice(&body);
                }
            }
            (method.to_owned(), wire)
        })
}
