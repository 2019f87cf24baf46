//! HTTP/2 to the upstream ([`ConnPool::send_multiplexed`]) against hyper's HTTP/2 server over
//! in-memory sockets, with time paused: requests are streams of one connection; the upstream
//! reads `:scheme`, `:authority`, the path and the body as sent; a response head that does not
//! come in time is a timeout, a body that stalls is cut at the idle timeout (the connection
//! serves on); a connection the upstream closes (GOAWAY) is replaced by the next request.

mod common;

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::{ReqBody, TIMEOUT, paused};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_upstream::pool::{BodyStalled, ConnPool, PooledBody, SendError};
use sluice_upstream::socket::Connect;
use sluice_upstream::timeouts::Timeouts;
use tokio::io::DuplexStream;
use tokio::sync::Notify;

/// A body that sends `hello` and then nothing, for ever.
struct HelloThenStall(bool);

impl Body for HelloThenStall {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Pending;
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"hello")))))
    }
}

type Answer = http_body_util::Either<Full<Bytes>, HelloThenStall>;

/// The upstream: `/stall` sends a head and `hello`, then stalls; `/silent` never answers; any
/// other path answers what it read: `METHOD scheme://authority/path body`.
async fn answer(req: http::Request<Incoming>) -> Result<http::Response<Answer>, Infallible> {
    match req.uri().path() {
        "/stall" => return Ok(http::Response::new(Answer::Right(HelloThenStall(false)))),
        "/silent" => std::future::pending::<()>().await,
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let read = format!("{} {:?} {} {}", parts.method, parts.version, parts.uri, String::from_utf8_lossy(&body));
    Ok(http::Response::new(Answer::Left(Full::new(Bytes::from(read)))))
}

/// Connections to an in-memory hyper HTTP/2 server; `close` tells every open one to go away.
#[derive(Debug, Clone, Default)]
struct H2Upstream {
    opened: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

impl Connect for H2Upstream {
    type Socket = DuplexStream;

    async fn connect(&self) -> io::Result<DuplexStream> {
        let (client, server) = tokio::io::duplex(1 << 16);
        self.opened.fetch_add(1, Ordering::SeqCst);
        // A connection takes a while to open, as over a network: requests come meanwhile.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let close = Arc::clone(&self.close);
        tokio::spawn(async move {
            let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(server), hyper::service::service_fn(answer));
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                () = close.notified() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
        Ok(client)
    }
}

type Pool = Arc<ConnPool<H2Upstream, ReqBody>>;

fn request(method: &str, target: &str, body: &'static [u8]) -> http::Request<ReqBody> {
    http::Request::builder().method(method).uri(target).body(Full::new(Bytes::from_static(body))).unwrap()
}

async fn text(res: http::Response<PooledBody<H2Upstream, ReqBody>>) -> String {
    String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[test]
fn requests_are_streams_of_one_connection_read_as_sent() {
    paused(async {
        let up = H2Upstream::default();
        let pool: Pool = Arc::new(ConnPool::new(up.clone()));
        // Ten at once: the first opens the connection, the others wait for it.
        let mut sent = tokio::task::JoinSet::new();
        for i in 0..10 {
            let pool = Arc::clone(&pool);
            sent.spawn(async move {
                let target = format!("https://api.example/items/{i}?q=1");
                let req = http::Request::post(target).body(Full::new(Bytes::from(format!("body {i}")))).unwrap();
                (i, text(pool.send_multiplexed(req, TIMEOUT).await.unwrap()).await)
            });
        }
        let answers = sent.join_all().await;
        assert_eq!(answers.len(), 10);
        for (i, a) in answers {
            assert_eq!(a, format!("POST HTTP/2.0 https://api.example/items/{i}?q=1 body {i}"));
        }
        let get = pool.send_multiplexed(request("GET", "http://up/x", b""), TIMEOUT).await.unwrap();
        assert_eq!(text(get).await, "GET HTTP/2.0 http://up/x ");
        assert_eq!(up.opened.load(Ordering::SeqCst), 1, "one connection for every request");
    });
}

#[test]
fn a_head_not_in_time_is_a_timeout_and_a_stalled_body_is_cut_at_the_idle_timeout() {
    paused(async {
        let up = H2Upstream::default();
        let idle = Duration::from_secs(5);
        let pool: Pool = Arc::new(ConnPool::new(up.clone()));
        let start = tokio::time::Instant::now();
        let silent = pool.send_multiplexed::<()>(request("GET", "http://up/silent", b""), TIMEOUT).await;
        assert!(matches!(silent, Err(SendError::Timeout)), "{silent:?}");
        assert_eq!(tokio::time::Instant::now() - start, TIMEOUT);

        let start = tokio::time::Instant::now();
        let timeouts = Timeouts { idle, ..TIMEOUT.into() };
        let res = pool.send_multiplexed::<()>(request("GET", "http://up/stall", b""), timeouts).await.unwrap();
        let mut body = res.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "hello");
        let cut = body.frame().await.unwrap().unwrap_err();
        assert!(cut.downcast_ref::<BodyStalled>().is_some(), "{cut}");
        assert_eq!(tokio::time::Instant::now() - start, idle, "timed from the last bytes");
        assert!(body.frame().await.is_none(), "a cut body ends");

        // The connection serves on: a stalled stream is one stream.
        let ok = pool.send_multiplexed(request("GET", "http://up/ok", b""), TIMEOUT).await.unwrap();
        assert_eq!(text(ok).await, "GET HTTP/2.0 http://up/ok ");
        assert_eq!(up.opened.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_connection_the_upstream_closes_is_replaced_by_the_next_request() {
    paused(async {
        let up = H2Upstream::default();
        let pool: Pool = Arc::new(ConnPool::new(up.clone()));
        let first = pool.send_multiplexed(request("GET", "http://up/1", b""), TIMEOUT).await.unwrap();
        assert_eq!(text(first).await, "GET HTTP/2.0 http://up/1 ");
        up.close.notify_waiters();
        // Let the GOAWAY reach the client's connection task.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let second = pool.send_multiplexed(request("GET", "http://up/2", b""), TIMEOUT).await.unwrap();
        assert_eq!(text(second).await, "GET HTTP/2.0 http://up/2 ");
        assert_eq!(up.opened.load(Ordering::SeqCst), 2);
    });
}
