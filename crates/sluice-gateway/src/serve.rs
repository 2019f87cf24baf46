//! The accept loop shared by every HTTP face: HTTP/1.1 and HTTP/2 connections, in TLS when the
//! listener has it ([`crate::tls`]), graceful shutdown.
//!
//! HTTP/2 is spoken where the client asks for it: by ALPN on a TLS listener, and on a plaintext
//! one with `[server] h2c = true`, to a client that opens with HTTP/2's preface (prior
//! knowledge). Every stream is a request to the same handler as an HTTP/1.1 request. The
//! connection's bounds ([`Protocols`]) hold streams, header lists and frames; hyper's HTTP/2
//! (the h2 crate) sends GOAWAY to a client that resets streams faster than it may (rapid
//! reset, CVE-2023-44487) or sends headers past the bound across CONTINUATION frames.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_config::Http2Limits;
use tokio::net::TcpListener;

use crate::balance::{Balance, Inbox, Live};
use crate::respond::Body;
use crate::timer::ConnTimer;
use crate::tls::Certificates;

/// How long a client may take to send a request's headers before the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A handler's refusal to answer: the connection is closed without a response
/// (`on_deny = "drop"`).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("connection dropped by policy")]
pub struct Dropped;

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request from `peer`.
    fn handle(
        self: Arc<Self>,
        peer: SocketAddr,
        req: Request<Incoming>,
    ) -> impl Future<Output = Result<Response<Body>, Dropped>> + Send;
}

/// Serves `handler` on `listener` until `shutdown` completes, then stops accepting and lets
/// in-flight requests finish (for at most `drain`).
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    serve_on(listener, None, Protocols::default(), handler, shutdown, drain, None).await
}

/// Which HTTP versions a listener speaks beyond HTTP/1.1, and HTTP/2's bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protocols {
    /// HTTP/2 with prior knowledge on a plaintext listener (`[server] h2c`).
    pub h2c: bool,
    /// The bounds of one HTTP/2 connection (`[server.http2]`).
    pub http2: Http2Limits,
}

impl Protocols {
    /// A server's protocols as its configuration asks.
    pub fn of(server: &sluice_config::Server) -> Self {
        Self { h2c: server.h2c, http2: server.http2 }
    }
}

/// One per-core worker's share of the balance: its index, and where other workers hand it
/// connections ([`crate::balance`]).
struct Worker {
    /// The live connections of every worker.
    balance: Arc<Balance>,
    /// This worker's index.
    index: usize,
    /// The connections handed to it.
    inbox: Inbox,
}

/// [`serve`], each connection in TLS first when `tls` is given; as one of several per-core
/// workers when `worker` is given.
async fn serve_on<H: Handler>(
    listener: TcpListener,
    tls: Option<Arc<Certificates>>,
    protocols: Protocols,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
    mut worker: Option<Worker>,
) -> std::io::Result<()> {
    let drain_set = Arc::new(Drain::default());
    let mut shutdown = std::pin::pin!(shutdown);
    let connections = Connections { tls, protocols, handler, drain_set: drain_set.clone() };
    // This worker's index (0 for a lone runtime), for the log of a handed connection lost.
    let index = worker.as_ref().map_or(0, |w| w.index);
    loop {
        let handed = async {
            match worker.as_mut() {
                Some(w) => w.inbox.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(w) = &worker else {
                    connections.serve(stream, peer, None);
                    continue;
                };
                let to = w.balance.place(w.index);
                if to == w.index {
                    connections.serve(stream, peer, Some(w.balance.serve(w.index)));
                    continue;
                }
                // Out of this worker's reactor, into the other's, counted there from now on (a
                // worker busy in a long poll is not handed every connection meanwhile); served
                // here if that worker has stopped.
                let std = match stream.into_std() {
                    Ok(std) => std,
                    Err(e) => {
                        tracing::warn!(error = %e, "a connection could not be handed to another worker");
                        continue;
                    }
                };
                if let Err((std, peer, _)) = w.balance.hand(to, (std, peer, w.balance.serve(to))) {
                    w.balance.retire(to);
                    adopt(&connections, w.index, std, peer, w.balance.serve(w.index));
                }
            }
            Some((std, peer, live)) = handed => adopt(&connections, index, std, peer, live),
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    // Connections handed here while it stopped are served and drained, not dropped unanswered;
    // a worker handing one from now on serves it itself.
    if let Some(w) = worker.as_mut() {
        w.inbox.close();
        while let Ok((std, peer, live)) = w.inbox.try_recv() {
            adopt(&connections, index, std, peer, live);
        }
    }
    let _ = tokio::time::timeout(drain, drain_all(&drain_set)).await;
    Ok(())
}

/// `std`, a connection another worker accepted (or this one, when handing it failed), served
/// on the runtime of worker `index` (this one) as `live`.
fn adopt<H: Handler>(
    connections: &Connections<H>,
    index: usize,
    std: std::net::TcpStream,
    peer: SocketAddr,
    live: Live,
) {
    match tokio::net::TcpStream::from_std(std) {
        Ok(stream) => connections.serve(stream, peer, Some(live)),
        Err(e) => tracing::warn!(error = %e, worker = index, "a handed connection could not be served"),
    }
}

/// What every connection of one accept loop is served with.
struct Connections<H> {
    /// TLS on every connection, or plaintext.
    tls: Option<Arc<Certificates>>,
    /// HTTP/2 with prior knowledge, and HTTP/2's bounds.
    protocols: Protocols,
    /// What answers the requests.
    handler: Arc<H>,
    /// The connections to wait for when the server stops.
    drain_set: Arc<Drain>,
}

impl<H: Handler> Connections<H> {
    /// Serves `stream`, from `peer`, on a task of this runtime until it closes, counted as one
    /// of this worker's live connections for as long (`live`).
    fn serve(&self, stream: tokio::net::TcpStream, peer: SocketAddr, live: Option<Live>) {
        let _ = stream.set_nodelay(true);
        let handler = self.handler.clone();
        // The handler's own future, not one wrapping it: every layer of future is one
        // more copy of the request's whole state as it is moved into place.
        let service = service_fn(move |req| Arc::clone(&handler).handle(peer, req));
        let ticket = self.drain_set.enter();
        let protocols = self.protocols;
        match &self.tls {
            None if protocols.h2c => {
                tokio::spawn(async move {
                    let _live = live;
                    // The first bytes say which: HTTP/2's preface, or an HTTP/1.1 request.
                    let sniffed = tokio::time::timeout(HEADER_READ_TIMEOUT, opens_with_preface(&stream));
                    match sniffed.await {
                        Ok(Some(true)) => watched_h2(stream, service, &protocols, ticket).await,
                        Ok(Some(false)) => watched_h1(stream, service, ticket).await,
                        _ => {}
                    }
                });
            }
            None => {
                tokio::spawn(async move {
                    let _live = live;
                    watched_h1(stream, service, ticket).await
                });
            }
            Some(certificates) => {
                // The certificate of the moment: a reload serves the next connection.
                let acceptor = certificates.acceptor();
                tokio::spawn(async move {
                    let _live = live;
                    // A client that never finishes its handshake is closed as one that
                    // never sends its headers.
                    let handshake = crate::tls::handshake(&acceptor, stream);
                    let Ok(Some(stream)) = tokio::time::timeout(HEADER_READ_TIMEOUT, handshake).await else {
                        return;
                    };
                    // The client certificate the handshake verified, given to every
                    // request of the connection for `tls:` key parts.
                    let cert = crate::tls::peer_certificate(stream.get_ref().1);
                    let service = service_fn(move |mut req: Request<Incoming>| {
                        if let Some(cert) = &cert {
                            req.extensions_mut().insert(cert.clone());
                        }
                        service.call(req)
                    });
                    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                        watched_h2(stream, service, &protocols, ticket).await
                    } else {
                        watched_h1(stream, service, ticket).await
                    }
                });
            }
        }
    }
}

/// How every connection is served: HTTP/1.1, keep-alive, one sleep per connection for every
/// request's header read timeout.
/// HTTP/2's connection preface, which a client with prior knowledge sends first.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client's first bytes are HTTP/2's preface (read without taking them); `None`
/// when it closed first. Decided at the first byte that differs, so an HTTP/1.1 request shorter
/// than the preface is not kept waiting.
async fn opens_with_preface(stream: &tokio::net::TcpStream) -> Option<bool> {
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = stream.peek(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        if buf[..n] != PREFACE[..n] {
            return Some(false);
        }
        if n == PREFACE.len() {
            return Some(true);
        }
        // Part of the preface: wait for more (peek returns at once while bytes are queued).
        stream.readable().await.ok()?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `stream` served as HTTP/1.1 until it closes or the server drains.
async fn watched_h1<S, F>(stream: S, service: F, ticket: DrainPlace)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: hyper::service::Service<Request<Incoming>, Response = Response<Body>, Error = Dropped>,
{
    let conn = http1_builder().serve_connection(TokioIo::new(stream), service).with_upgrades();
    Watched { conn: Box::pin(conn), ticket, closing: false, registered: false }.await
}

/// `stream` served as HTTP/2 until it closes or the server drains (a GOAWAY, then the streams
/// in flight finish).
async fn watched_h2<S, F>(stream: S, service: F, protocols: &Protocols, ticket: DrainPlace)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: hyper::service::HttpService<Incoming, ResBody = Body> + Clone + Send + 'static,
    F::Future: Send + 'static,
    F::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = http2_builder(&protocols.http2).serve_connection(TokioIo::new(stream), service);
    Watched { conn: Box::pin(conn), ticket, closing: false, registered: false }.await
}

/// HTTP/2 with `limits`; resets and error resets bounded as hyper's defaults are (written out,
/// so that an upgrade of hyper cannot loosen them unnoticed); a ping every 20 s, the connection
/// closed when one goes unanswered for 20 s (a peer gone without a word).
fn http2_builder(limits: &Http2Limits) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(ConnTimer::default())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_header_list_size(limits.max_header_list_size)
        .max_frame_size(limits.max_frame_size)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_ERROR_RESETS)
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Streams a client may open and reset before the gateway has taken them, after which it gets
/// GOAWAY: the rapid-reset bound (CVE-2023-44487).
pub const MAX_PENDING_RESETS: usize = 20;
/// Streams the gateway may reset for a client's protocol errors on one connection before
/// GOAWAY (RUSTSEC-2024-0003).
pub const MAX_ERROR_RESETS: usize = 1024;

fn http1_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.timer(ConnTimer::default()).header_read_timeout(HEADER_READ_TIMEOUT).writev(false).keep_alive(true);
    builder
}

/// The connections of one accept loop, and the word that they should finish. A connection
/// reads the word as one atomic load each time it is polled (a watch channel would be polled,
/// registering its waiter, every time); its waker is kept once, to be woken with the word.
#[derive(Debug, Default)]
struct Drain {
    /// Set when the loop stops accepting: finish the request in progress, then close.
    closing: AtomicBool,
    /// The live connections' wakers.
    conns: Mutex<Conns>,
    /// Told when the last connection ends.
    idle: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Conns {
    /// A slot per connection (its waker once it has been polled); free slots are reused.
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
    live: usize,
}

impl Drain {
    fn conns(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection in.
    fn enter(self: &Arc<Self>) -> DrainPlace {
        let mut conns = self.conns();
        conns.live += 1;
        let slot = match conns.free.pop() {
            Some(slot) => slot,
            None => {
                conns.wakers.push(None);
                conns.wakers.len() - 1
            }
        };
        DrainPlace { drain: self.clone(), slot }
    }
}

/// Tells every connection to finish and waits until they all have.
async fn drain_all(drain: &Drain) {
    drain.closing.store(true, Ordering::SeqCst);
    for waker in drain.conns().wakers.iter().flatten() {
        waker.wake_by_ref();
    }
    loop {
        let idle = drain.idle.notified();
        let mut idle = std::pin::pin!(idle);
        idle.as_mut().enable();
        if drain.conns().live == 0 {
            return;
        }
        idle.await;
    }
}

/// A connection's place in its [`Drain`], given back when the connection ends.
#[derive(Debug)]
struct DrainPlace {
    drain: Arc<Drain>,
    slot: usize,
}

impl Drop for DrainPlace {
    fn drop(&mut self) {
        let mut conns = self.drain.conns();
        conns.wakers[self.slot] = None;
        conns.free.push(self.slot);
        conns.live -= 1;
        if conns.live == 0 {
            self.drain.idle.notify_waiters();
        }
    }
}

/// A connection that finishes gracefully once its [`Drain`] says so.
struct Watched<C> {
    conn: Pin<Box<C>>,
    ticket: DrainPlace,
    /// Told already.
    closing: bool,
    /// Its waker is in the drain's list.
    registered: bool,
}

/// A connection that can be asked to finish what it has begun and take nothing new: hyper's
/// HTTP/1.1 connection (with upgrades: a relayed WebSocket outlives it) and HTTP/2's.
trait Graceful: Future {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S> Graceful for http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::ResBody: 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, E> Graceful for http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S::ResBody: 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self);
    }
}

impl<C: Graceful> Future for Watched<C> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if !this.closing {
            if !this.registered {
                this.ticket.drain.conns().wakers[this.ticket.slot] = Some(cx.waker().clone());
                this.registered = true;
            }
            // Read after the waker is in the list: a word sent meanwhile wakes this task again.
            if this.ticket.drain.closing.load(Ordering::SeqCst) {
                this.closing = true;
                this.conn.as_mut().graceful_shutdown();
            }
        }
        this.conn.as_mut().poll(cx).map(|_| ())
    }
}

/// Listening sockets on one address, one per worker thread, sharing the port (`SO_REUSEPORT`
/// where the system has it) so that the kernel spreads new connections across the workers.
pub struct Listeners {
    /// One socket per worker thread, all on one port.
    sockets: Vec<std::net::TcpListener>,
    /// The address bound (the port chosen when 0 was asked).
    addr: SocketAddr,
    /// TLS on every connection (`[server.tls]`), or plaintext.
    tls: Option<Arc<Certificates>>,
    /// HTTP/2 with prior knowledge, and HTTP/2's bounds.
    protocols: Protocols,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listeners")
            .field("addr", &self.addr)
            .field("sockets", &self.sockets.len())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Listeners {
    /// Binds `count` sockets (at least 1) to `addr`; port 0 picks one free port for all.
    pub fn bind(addr: SocketAddr, count: usize) -> std::io::Result<Self> {
        let first = bind_one(addr)?;
        let addr = first.local_addr()?;
        let mut sockets = vec![first];
        for _ in 1..count.max(1) {
            match bind_one(addr) {
                Ok(s) => sockets.push(s),
                // No port sharing here: the workers share the first socket instead.
                Err(_) => sockets.push(sockets[0].try_clone()?),
            }
        }
        Ok(Self { sockets, addr, tls: None, protocols: Protocols::default() })
    }

    /// The same sockets, every connection in TLS first, with the certificate `tls` holds.
    pub fn with_tls(self, tls: Arc<Certificates>) -> Self {
        Self { tls: Some(tls), ..self }
    }

    /// The same sockets, speaking HTTP/2 as `protocols` say (on TLS, by ALPN, always).
    pub fn with_protocols(self, protocols: Protocols) -> Self {
        Self { protocols, ..self }
    }

    /// The address bound (with the port chosen, if 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn bind_one(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        // Dual stack where the host allows it: IPv4 clients arrive as mapped addresses.
        let _ = socket.set_only_v6(false);
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// Serves `handler` with one single-threaded runtime per listening socket (thread per core: no
/// work stealing, no cross-thread wake-ups on the request path) until `shutdown` completes; then
/// every worker stops accepting and drains its connections (for at most `drain`).
pub async fn serve_per_core<H: Handler>(
    listeners: Listeners,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    let (tls, protocols) = (listeners.tls, listeners.protocols);
    let (balance, inboxes) = Balance::new(listeners.sockets.len());
    for ((i, socket), inbox) in listeners.sockets.into_iter().enumerate().zip(inboxes) {
        let worker = Worker { balance: balance.clone(), index: i, inbox };
        let handler = handler.clone();
        let tls = tls.clone();
        let mut stopped = stopped.clone();
        let worker = std::thread::Builder::new().name(format!("sluice-worker-{i}")).spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async move {
                let listener = TcpListener::from_std(socket)?;
                let until = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                serve_on(listener, tls, protocols, handler, until, drain, Some(worker)).await
            })
        })?;
        workers.push(worker);
    }
    shutdown.await;
    let _ = stop.send(true);
    let mut result = Ok(());
    for w in workers {
        let joined = tokio::task::spawn_blocking(move || w.join()).await;
        if let Ok(Ok(Err(e))) = joined {
            result = Err(e);
        }
    }
    result
}

/// Completes on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called, not
/// when the future is first polled, so a signal that arrives right after start-up is not lost.
pub fn termination() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            match (term, int) {
                (Some(mut term), Some(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (Some(mut one), None) | (None, Some(mut one)) => {
                    one.recv().await;
                }
                (None, None) => std::future::pending().await,
            }
        }
    }
    #[cfg(not(unix))]
    {
        async move {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The service_fn's error type must be an error; [`Dropped`] is one. This alias documents it.
pub type ServiceResult = Result<Response<Body>, Dropped>;
