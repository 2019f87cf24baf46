//! What the client runs over: any async byte stream (TCP in production, scripted in-memory
//! streams in tests), and how a pool opens one.

use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connection's byte stream.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send + Debug + 'static {
    /// True when the peer has closed this idle stream, reset it, or sent bytes on it unasked:
    /// it must not carry a request. By default one read of a byte with a waker that wakes
    /// nothing (a byte read is lost, but the stream is not used again anyway).
    fn is_stale(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut buf = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        !matches!(Pin::new(self).poll_read(&mut cx, &mut buf), Poll::Pending)
    }
}

impl Socket for TcpStream {
    /// Costs no system call while the runtime has seen no event on the socket since its last
    /// read (a read that filled the buffer leaves the socket marked readable: then one read of a
    /// byte tells). Not through `poll_read_ready` (nor the default's `poll_read`): that spends
    /// the task's cooperative budget, and answers `Pending` — a healthy connection — once the
    /// budget is gone.
    fn is_stale(&mut self) -> bool {
        let mut probe = [0u8; 1];
        !matches!(self.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl Socket for tokio::io::DuplexStream {}

/// How a pool opens a new connection to its upstream.
pub trait Connect: Send + Sync + Debug + 'static {
    /// The stream a connection runs over.
    type Socket: Socket;

    /// A new stream to the upstream.
    fn connect(&self) -> impl Future<Output = io::Result<Self::Socket>> + Send;
}

/// TCP to `host:port`, without Nagle's delay (a request head is one write, sent at once).
#[derive(Debug, Clone)]
pub struct TcpConnect {
    /// `host:port` to connect to.
    authority: String,
}

impl TcpConnect {
    /// Connections to `authority` (`host:port`).
    pub fn new(authority: String) -> Self {
        Self { authority }
    }
}

impl Connect for TcpConnect {
    type Socket = TcpStream;

    async fn connect(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(&self.authority).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}
