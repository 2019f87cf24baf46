//! Shared helpers for the gateway tests: a gateway on port 0 in this process, a real HTTP
//! client, and an upstream server that counts, echoes, holds and streams.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC};
use sluice_gateway::gateway::Gateway;
use sluice_gateway::stores::MemoryStores;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Where the manual clocks of these tests start: a plausible Unix time, in nanoseconds.
pub const T0: u64 = 1_700_000_000 * NANOS_PER_SEC;

/// How long any single request may take before the test fails instead of hanging.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A gateway serving on 127.0.0.1 (random port) until dropped.
pub struct TestGateway {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The handler, for `reload` and `in_flight`.
    pub gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Parses a configuration, panicking with the error (tests write valid ones).
pub fn config(toml: &str) -> sluice_config::Config {
    sluice_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("test config does not parse: {e}"))
}

/// A gateway over `toml` whose store reads a manual clock that never moves unless told.
pub async fn start(toml: &str) -> (TestGateway, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let gw = start_with_clock(toml, clock.clone()).await;
    (gw, clock)
}

/// A gateway over `toml` whose store reads `clock`.
pub async fn start_with_clock(toml: &str, clock: Arc<dyn Clock>) -> TestGateway {
    let gateway = Gateway::new(config(toml), Box::new(MemoryStores::new(clock))).expect("gateway builds");
    let gateway = Arc::new(gateway);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(sluice_gateway::serve::serve(
        listener,
        gateway.clone(),
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    TestGateway { addr, gateway, stop: Some(stop) }
}

/// A response read to its end.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// A header as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().expect("header is text"))
    }

    /// All values of a header.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_string()).collect()
    }

    /// A numeric header (panics when absent or not a number).
    pub fn num(&self, name: &str) -> u64 {
        let v = self.header(name).unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers));
        v.parse().unwrap_or_else(|_| panic!("{name}: {v:?} is not a number"))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A pooled HTTP/1.1 client aimed at one address.
#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
}

impl Client {
    /// A client for the server at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self { inner: HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new()), addr }
    }

    /// A request to `path` with `headers` and `body`.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Bytes) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Full::new(body)).expect("request builds")
    }

    /// Sends a request and returns the response head with its body still streaming.
    pub async fn send_streaming(&self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.inner.request(req)).await {
            Ok(Ok(res)) => res,
            Ok(Err(e)) => panic!("request failed: {e:?}"),
            Err(_) => panic!("no response within {REQUEST_TIMEOUT:?}"),
        }
    }

    /// Sends a request and reads the whole response.
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Resp {
        let res = self.send_streaming(req).await;
        let (parts, body) = res.into_parts();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, body.collect())
            .await
            .expect("body within the timeout")
            .expect("body reads")
            .to_bytes();
        Resp { status: parts.status.as_u16(), headers: parts.headers, body }
    }

    /// `GET path` with headers.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.send(self.request("GET", path, headers, Bytes::new())).await
    }

    /// `POST path` with headers and a body.
    pub async fn post(&self, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Resp {
        self.send(self.request("POST", path, headers, body.into())).await
    }
}

/// FNV-1a (64 bit): a checksum both ends of a transfer can compute.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `len` bytes of a repeatable, non-constant pattern.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31) ^ (i >> 11)) as u8).collect()
}

/// What the test upstream has seen, and the levers that hold or release it.
#[derive(Clone)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests received (every path).
    pub hits: Arc<AtomicUsize>,
    /// Requests waiting on `/hold`.
    pub held: Arc<AtomicUsize>,
    /// Each permit added releases one held request.
    pub release: Arc<Semaphore>,
    /// The second half of the next `/stream` response, sent when the test says so.
    pub stream_gate: Arc<Mutex<Option<oneshot::Receiver<()>>>>,
}

impl Upstream {
    /// Waits until `n` requests are held on `/hold`.
    pub async fn wait_held(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        while self.held.load(Ordering::SeqCst) < n {
            assert!(tokio::time::Instant::now() < deadline, "upstream never held {n} requests");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Arms `/stream`: it sends its first chunk, then waits for the returned sender.
    pub fn arm_stream(&self) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel();
        *self.stream_gate.lock().unwrap() = Some(rx);
        tx
    }
}

/// A response body fed through a channel, one frame per message.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

/// Starts the test upstream (axum) on 127.0.0.1, random port. By the last path segment:
/// - `/hold`: waits for a permit of `release`, then answers 200 `held`;
/// - `/stream`: answers `first-chunk`, then `second-chunk` once the armed gate opens;
/// - `/big?len=N`: answers N bytes of [`pattern`];
/// - `/hop`: answers with hop-by-hop headers a proxy must drop;
/// - `/cors`: answers with its own CORS grant to `https://app.example`, exposing `X-Upstream`;
/// - anything else: reads the whole body and echoes `{method, path, headers, len, fnv}`.
pub async fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let up = Upstream {
        addr: listener.local_addr().unwrap(),
        hits: Arc::new(AtomicUsize::new(0)),
        held: Arc::new(AtomicUsize::new(0)),
        release: Arc::new(Semaphore::new(0)),
        stream_gate: Arc::new(Mutex::new(None)),
    };
    let state = up.clone();
    let app = axum::Router::new().fallback(move |req: Request<axum::body::Body>| {
        let state = state.clone();
        async move { upstream_answer(state, req).await }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    up
}

async fn upstream_answer(state: Upstream, req: Request<axum::body::Body>) -> Response<axum::body::Body> {
    state.hits.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_string();
    match path.rsplit('/').next().unwrap_or_default() {
        "hold" => {
            state.held.fetch_add(1, Ordering::SeqCst);
            let permit = state.release.acquire().await.expect("semaphore open");
            permit.forget();
            Response::new(axum::body::Body::from("held"))
        }
        "stream" => {
            let gate = state.stream_gate.lock().unwrap().take();
            let (tx, rx) = mpsc::channel(2);
            tokio::spawn(async move {
                let _ = tx.send(Bytes::from_static(b"first-chunk")).await;
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                let _ = tx.send(Bytes::from_static(b"second-chunk")).await;
            });
            Response::new(axum::body::Body::new(ChannelBody(rx)))
        }
        "big" => {
            let len =
                req.uri().query().and_then(|q| q.strip_prefix("len=")).and_then(|n| n.parse().ok()).unwrap_or(1024);
            Response::new(axum::body::Body::from(pattern(len)))
        }
        "cors" => Response::builder()
            .header("access-control-allow-origin", "https://app.example")
            .header("access-control-expose-headers", "X-Upstream")
            .body(axum::body::Body::from("cors"))
            .unwrap(),
        "hop" => Response::builder()
            .header("connection", "x-upstream-hop")
            .header("x-upstream-hop", "secret")
            .header("keep-alive", "timeout=99")
            .header("x-upstream-e2e", "kept")
            .body(axum::body::Body::from("hop"))
            .unwrap(),
        _ => {
            let method = req.method().to_string();
            let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in req.headers() {
                headers.entry(k.to_string()).or_default().push(String::from_utf8_lossy(v.as_bytes()).into_owned());
            }
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let echo = serde_json::json!({
                "method": method,
                "path": path,
                "headers": headers,
                "len": body.len(),
                "fnv": format!("{:016x}", fnv1a(&body)),
            });
            Response::builder()
                .header("content-type", "application/json")
                .header("x-upstream", "echo")
                .body(axum::body::Body::from(echo.to_string()))
                .unwrap()
        }
    }
}
