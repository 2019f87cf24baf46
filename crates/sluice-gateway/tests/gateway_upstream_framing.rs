//! The proxy reads an upstream's responses as their framing says and nothing else: chunked,
//! length and close-delimited bodies, interim and bodiless responses come through whole; a
//! response that could be read two ways, or is malformed, is a 502 and its connection dropped;
//! bytes an upstream sends past a response never reach the next client; a connection the
//! upstream closed while idle is not used again, and a request lost on one is sent again only
//! when its method is safe.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{Client, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A scripted HTTP/1.1 upstream: the response to each request is chosen by its path, written
/// as raw bytes. It counts connections and requests.
struct Scripted {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    /// Connections the proxy closed after the upstream closed its side (`/half-close`).
    closed_after: Arc<AtomicUsize>,
}

/// What the upstream does with a request.
enum Act {
    /// Writes these bytes and keeps the connection.
    Reply(Vec<u8>),
    /// Writes these bytes and closes the connection `after` later.
    ReplyThenClose(Vec<u8>, Duration),
    /// Writes the first bytes, then the second after a pause.
    ReplyTwice(Vec<u8>, Duration, Vec<u8>),
    /// Writes these bytes, and the tail before the next response on the connection.
    ReplyWithTail(Vec<u8>, Vec<u8>),
    /// Closes without an answer, unless the request is the first on its connection.
    VanishIfReused,
    /// Writes these bytes, closes its side of the connection, and counts the proxy closing its.
    ReplyThenHalfClose(Vec<u8>),
}

fn act(path: &str) -> Act {
    let ok = |body: &str| format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes();
    match path {
        "/chunked" => Act::Reply(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n".to_vec(),
        ),
        "/until-close" => Act::ReplyThenClose(b"HTTP/1.1 200 OK\r\n\r\nall until the close".to_vec(), Duration::ZERO),
        "/interim" => Act::Reply(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone".to_vec(),
        ),
        "/no-content" => Act::Reply(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n".to_vec()),
        "/length" => Act::Reply(ok("hello")),
        // The head of `/length`'s response, as an upstream answers a HEAD.
        "/length-head" => Act::Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".to_vec()),
        "/both" => Act::Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec()),
        "/two-lengths" => Act::Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc".to_vec()),
        "/gzip" => Act::Reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz".to_vec()),
        "/upgrade" => Act::Reply(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec()),
        "/garbage" => Act::Reply(b"<html>not http</html>\r\n\r\n".to_vec()),
        "/huge-head" => Act::Reply(format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n", "a".repeat(70_000)).into_bytes()),
        "/cut-short" => Act::ReplyThenClose(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this".to_vec(), Duration::ZERO),
        // The first bytes of a body, then nothing for a minute (the connection held open).
        "/stall" => Act::ReplyThenClose(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst bytes".to_vec(), Duration::from_secs(60)),
        "/smuggle" => Act::Reply([ok("ok"), ok("secret")].concat()),
        // A second response begun in the same write, finished only when the next request comes.
        "/smuggle-split" => Act::ReplyWithTail([ok("ok"), b"HTTP/1.1 200 OK\r\nContent-Le".to_vec()].concat(), b"ngth: 6\r\n\r\nsecret".to_vec()),
        "/smuggle-later" => Act::ReplyTwice(ok("ok"), Duration::from_millis(30), ok("secret")),
        "/quiet-close" => Act::ReplyThenClose(ok("bye"), Duration::from_millis(10)),
        "/vanish" => Act::VanishIfReused,
        "/half-close" => Act::ReplyThenHalfClose(ok("bye")),
        _ => Act::Reply(ok("fine")),
    }
}

async fn scripted() -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let closed_after = Arc::new(AtomicUsize::new(0));
    let (c, r, closed) = (connections.clone(), requests.clone(), closed_after.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let (r, closed) = (r.clone(), closed.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut served = 0;
                let mut tail: Option<Vec<u8>> = None;
                loop {
                    // A request head, up to its blank line (bodies are not read: only `/stall`
                    // gets one, and its connection carries nothing after it).
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    r.fetch_add(1, Ordering::SeqCst);
                    served += 1;
                    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    if let Some(tail) = tail.take()
                        && stream.write_all(&tail).await.is_err()
                    {
                        return;
                    }
                    match act(&path) {
                        Act::Reply(bytes) => {
                            if stream.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                        Act::ReplyThenClose(bytes, after) => {
                            let _ = stream.write_all(&bytes).await;
                            tokio::time::sleep(after).await;
                            return;
                        }
                        Act::ReplyTwice(first, pause, second) => {
                            let _ = stream.write_all(&first).await;
                            tokio::time::sleep(pause).await;
                            let _ = stream.write_all(&second).await;
                        }
                        Act::ReplyWithTail(bytes, rest) => {
                            if stream.write_all(&bytes).await.is_err() {
                                return;
                            }
                            tail = Some(rest);
                        }
                        Act::ReplyThenHalfClose(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                            let _ = stream.shutdown().await;
                            let mut rest = [0u8; 64];
                            if matches!(stream.read(&mut rest).await, Ok(0)) {
                                closed.fetch_add(1, Ordering::SeqCst);
                            }
                            return;
                        }
                        Act::VanishIfReused if served > 1 => return,
                        Act::VanishIfReused => {
                            if stream.write_all(&act("/").reply_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Scripted { addr, connections, requests, closed_after }
}

impl Act {
    fn reply_bytes(self) -> Vec<u8> {
        match self {
            Act::Reply(b) => b,
            _ => unreachable!("only plain replies are asked for"),
        }
    }
}

fn config(up: &Scripted) -> String {
    format!(
        "[upstream]\nurl = \"http://{}\"\ntimeout_ms = 3000\n\n[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 100000\nrefill_per_second = 1\n\n[[route]]\npath = \"/*\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n",
        up.addr
    )
}

#[tokio::test]
async fn chunked_close_delimited_interim_and_bodiless_responses_come_through_whole() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);

    let res = c.get("/chunked", &[]).await;
    assert_eq!((res.status, res.text().as_str()), (200, "hello world"));
    assert_eq!(res.header("x-up"), Some("1"));
    assert!(res.header("ratelimit-limit").is_some() || res.header("ratelimit").is_some(), "{:?}", res.headers);

    let res = c.get("/until-close", &[]).await;
    assert_eq!((res.status, res.text().as_str()), (200, "all until the close"));

    let res = c.get("/interim", &[]).await;
    assert_eq!((res.status, res.text().as_str()), (201, "done"), "the interim responses are skipped");

    let res = c.get("/no-content", &[]).await;
    assert_eq!((res.status, res.body.len()), (204, 0));

    let before = up.connections.load(Ordering::SeqCst);
    let head = c.send(c.request("HEAD", "/length-head", &[], Bytes::new())).await;
    assert_eq!((head.status, head.header("content-length"), head.body.len()), (200, Some("5"), 0));
    let res = c.get("/length", &[]).await;
    assert_eq!(res.text(), "hello", "the connection after a HEAD reads the next response right");
    assert_eq!(up.connections.load(Ordering::SeqCst), before, "kept after the HEAD and its bodiless response");
}

#[tokio::test]
async fn ambiguous_or_malformed_responses_are_a_502_and_their_connection_is_dropped() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    for path in ["/both", "/two-lengths", "/gzip", "/upgrade", "/garbage", "/huge-head"] {
        let res = c.get(path, &[]).await;
        assert_eq!(res.status, 502, "{path}: {}", res.text());
        assert_eq!(res.json()["error"], "bad_gateway", "{path}");
        // The next request is answered right, on a new connection: the one that carried the
        // bad response (the only one) was dropped.
        let before = up.connections.load(Ordering::SeqCst);
        let res = c.get("/", &[]).await;
        assert_eq!((res.status, res.text().as_str()), (200, "fine"), "after {path}");
        assert_eq!(up.connections.load(Ordering::SeqCst), before + 1, "{path}: its connection was reused");
    }
}

#[tokio::test]
async fn a_body_cut_short_cuts_the_client_off_instead_of_ending_cleanly() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    let res = c.send_streaming(c.request("GET", "/cut-short", &[], Bytes::new())).await;
    assert_eq!(res.status(), 200);
    let body = http_body_util::BodyExt::collect(res.into_body()).await;
    assert!(body.is_err(), "9 of 100 bytes must not read as a whole body");
    assert_eq!(c.get("/", &[]).await.text(), "fine");
}

#[tokio::test]
async fn an_upstream_that_stalls_inside_a_body_is_cut_at_its_timeout() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up).replace("timeout_ms = 3000", "timeout_ms = 200")).await;
    let c = Client::new(gw.addr);
    // Without a body (the proxy's own exchange), and with one (hyper's client).
    for body in [Bytes::new(), Bytes::from_static(b"abc")] {
        let method = if body.is_empty() { "GET" } else { "POST" };
        let res = c.send_streaming(c.request(method, "/stall", &[], body)).await;
        assert_eq!(res.status(), 200, "{method}");
        // Far beyond the 200 ms the upstream has between bytes; the upstream holds on for 60 s.
        let read = tokio::time::timeout(Duration::from_secs(20), http_body_util::BodyExt::collect(res.into_body()));
        let body = read.await.unwrap_or_else(|_| panic!("{method}: the stalled body was not cut"));
        assert!(body.is_err(), "{method}: 11 of 100 bytes must not read as a whole body");
    }
    assert_eq!(c.get("/", &[]).await.text(), "fine");
}

#[tokio::test]
async fn bytes_an_upstream_sends_past_a_response_never_reach_the_next_client() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    for path in ["/smuggle", "/smuggle-split", "/smuggle-later"] {
        assert_eq!(c.get(path, &[]).await.text(), "ok", "{path}");
        // Give the late bytes time to arrive on the idle connection.
        tokio::time::sleep(Duration::from_millis(60)).await;
        for i in 0..5 {
            let res = c.get("/", &[]).await;
            assert_eq!((res.status, res.text().as_str()), (200, "fine"), "{path}, request {i} after it");
        }
    }
    assert_eq!(up.requests.load(Ordering::SeqCst), 18);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/quiet-close", &[]).await.text(), "bye");
    // The upstream closes that connection 10 ms after its answer, saying nothing beforehand.
    tokio::time::sleep(Duration::from_millis(80)).await;
    // A POST without a body goes on the proxy's own connections and is never sent again: it
    // must not be sent on the closed one.
    let res = c.post("/", &[], Bytes::new()).await;
    assert_eq!((res.status, res.text().as_str()), (200, "fine"));
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_lost_on_a_reused_connection_is_sent_again_only_when_safe() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/", &[]).await.status, 200);
    // On the kept connection the upstream takes the request and closes without an answer.
    let res = c.get("/vanish", &[]).await;
    assert_eq!((res.status, res.text().as_str()), (200, "fine"), "a GET is sent again on a new connection");
    assert_eq!((up.connections.load(Ordering::SeqCst), up.requests.load(Ordering::SeqCst)), (2, 3));
    let res = c.post("/vanish", &[], Bytes::new()).await;
    assert_eq!(res.status, 502, "a POST may have been acted on: not sent twice");
    assert_eq!(up.requests.load(Ordering::SeqCst), 4, "the POST reached the upstream once");
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_closed_without_waiting_for_traffic() {
    let up = scripted().await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/half-close", &[]).await.text(), "bye");
    // No request follows: the worker's sweep closes sluice's side (no socket left half-open).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while up.closed_after.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the proxy kept a connection the upstream closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
