//! The exchange and the pool over scripted in-memory sockets: responses split at every byte,
//! each framing, interim and bodiless responses, malformed framing refused, an upstream that
//! stalls inside a body cut at the idle timeout, and a connection reused only after a response
//! read to its end.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{Scripted, Scripts, Step, TIMEOUT, Whole, parts, paused, pool, through_sluice, whole};
use http_body_util::BodyExt;
use sluice_upstream::h1::connection::ExchangeError;
use sluice_upstream::h1::response_head::HeadError;
use sluice_upstream::pool::{BodyStalled, ConnPool, SendError};
use sluice_upstream::socket::Connect;
use sluice_upstream::timeouts::Timeouts;

/// A response head of `status` with `fields`, as the client passes it on.
fn expect(status: u16, fields: &[(&str, &str)], body: &[u8]) -> Whole {
    let mut headers = http::HeaderMap::new();
    for (k, v) in fields {
        headers.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    Whole { status, headers, body: body.to_vec() }
}

/// The responses every framing and kind of head gives, with the request method they answer.
fn corpus() -> Vec<(&'static str, &'static [u8], Whole)> {
    vec![
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\nhello",
            expect(200, &[("content-length", "5"), ("x-up", "1")], b"hello"),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5;x=y;z=\"q\"\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n",
            expect(200, &[("x-up", "1")], b"hello world"),
        ),
        (
            "GET",
            b"HTTP/1.1 200 OK\r\nX-Up: 1\r\n\r\nall until the close",
            expect(200, &[("x-up", "1")], b"all until the close"),
        ),
        (
            "GET",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone",
            expect(201, &[("content-length", "4")], b"done"),
        ),
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", expect(200, &[("content-length", "5")], b"")),
        ("GET", b"HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n", expect(204, &[("x-a", "b")], b"")),
        (
            "GET",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"v1\"\r\n\r\n",
            expect(304, &[("content-length", "10"), ("etag", "\"v1\"")], b""),
        ),
        (
            "GET",
            b"HTTP/1.0 404 Not Found\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nno",
            expect(404, &[("content-length", "2")], b"no"),
        ),
    ]
}

#[test]
fn every_response_reads_the_same_however_its_bytes_are_split() {
    paused(async {
        for (method, wire, want) in corpus() {
            let name = String::from_utf8_lossy(wire);
            assert_eq!(through_sluice(method, Scripted::pieces(wire, wire.len())).await.as_ref(), Ok(&want), "{name}");
            assert_eq!(
                through_sluice(method, Scripted::pieces(wire, 1)).await.as_ref(),
                Ok(&want),
                "byte by byte: {name}"
            );
            for cut in 1..wire.len() {
                let split = Scripted::new(vec![
                    Step::Read(wire[..cut].to_vec()),
                    Step::Wait(Duration::from_millis(1)),
                    Step::Read(wire[cut..].to_vec()),
                ]);
                assert_eq!(through_sluice(method, split).await.as_ref(), Ok(&want), "cut at {cut}: {name}");
            }
        }
    });
}

#[test]
fn the_request_head_reaches_the_upstream_whole_through_short_writes() {
    paused(async {
        let socket = Scripted::pieces(b"HTTP/1.1 204 No Content\r\n\r\n", 64).short_writes(3);
        let written = socket.written.clone();
        through_sluice("GET", socket).await.unwrap();
        assert_eq!(&written.lock().unwrap()[..], b"GET /x HTTP/1.1\r\nhost: up\r\n\r\n");
    });
}

#[test]
fn malformed_heads_are_refused() {
    let huge = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\nContent-Length: 0\r\n\r\n", "a".repeat(70_000));
    let cases: Vec<(&[u8], HeadError)> = vec![
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            HeadError::Ambiguous,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc", HeadError::BadLength),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz", HeadError::Ambiguous),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", HeadError::Upgrade),
        (b"<html>not http</html>\r\n\r\n", HeadError::Malformed),
        (huge.as_bytes(), HeadError::TooLarge),
    ];
    paused(async {
        for (wire, why) in cases {
            for piece in [wire.len(), 7] {
                let scripts = Scripts::new(vec![Scripted::pieces(wire, piece)]);
                match pool(&scripts).send_bodiless::<()>(&parts("GET", "/x"), TIMEOUT).await {
                    Err(SendError::Exchange(ExchangeError::Head(e))) => assert_eq!(e, why),
                    other => panic!("{:?}: {other:?}", String::from_utf8_lossy(&wire[..wire.len().min(60)])),
                }
            }
        }
    });
}

#[test]
fn a_body_whose_framing_breaks_or_ends_early_is_an_error_never_an_end() {
    paused(async {
        for wire in [
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        ] {
            let got = through_sluice("GET", Scripted::pieces(wire, 9)).await;
            assert!(got.is_err(), "{:?}: {got:?}", String::from_utf8_lossy(wire));
        }
        let reset =
            Scripted::new(vec![Step::Read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel".to_vec()), Step::Reset]);
        assert!(through_sluice("GET", reset).await.is_err());
    });
}

/// The idle timeout of the requests whose bodies stall.
const STALL_IDLE: Duration = Duration::from_secs(7);

/// How a stalled body fails (through hyper's client or the proxy's own exchange), and the
/// connections opened for it and one more request.
async fn stall(hyper: bool) -> (Result<Whole, String>, usize) {
    let head: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    let again = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let scripts = Scripts::new(vec![
        Scripted::new(vec![Step::Await(1), Step::Read(head.to_vec()), Step::Stall]),
        Scripted::new(vec![Step::Await(1), Step::Read(again)]),
    ]);
    let pool = pool(&scripts);
    // The request's own idle timeout, shorter than its wait for the head.
    let timeouts = Timeouts { idle: STALL_IDLE, ..TIMEOUT.into() };
    let send = || async {
        if hyper {
            let req = http::Request::post("/x").header("host", "up").body(Bytes::from_static(b"abc").into()).unwrap();
            pool.send(req, timeouts).await
        } else {
            pool.send_bodiless(&parts("GET", "/x"), timeouts).await
        }
    };
    // Far beyond the idle timeout: without one, the body would wait for ever.
    let start = tokio::time::Instant::now();
    let read = tokio::time::timeout(TIMEOUT * 100, async { whole(send().await.unwrap()).await }).await;
    let read = read.expect("a stalled body failed within its idle timeout");
    assert_eq!(tokio::time::Instant::now() - start, STALL_IDLE, "cut at the request's idle timeout");
    let failed = read.map_err(|e| {
        assert!(e.downcast_ref::<BodyStalled>().is_some(), "{e}");
        e.to_string()
    });
    // The stalled connection is not used again.
    assert_eq!(whole(send().await.unwrap()).await.unwrap().body, b"ok");
    (failed, scripts.opened())
}

#[test]
fn an_upstream_that_stalls_inside_a_body_is_cut_at_the_idle_timeout() {
    paused(async {
        for hyper in [false, true] {
            let start = tokio::time::Instant::now();
            let (failed, opened) = stall(hyper).await;
            assert!(failed.is_err(), "hyper: {hyper}");
            assert_eq!(tokio::time::Instant::now() - start, STALL_IDLE, "timed from the last bytes, hyper: {hyper}");
            assert_eq!(opened, 2, "hyper: {hyper}");
        }
    });
}

#[test]
fn a_slow_body_that_keeps_coming_is_not_cut() {
    // Each pause is under the idle timeout; all of them together are well over it.
    let pause = TIMEOUT * 2 / 3;
    let steps = |head: &[u8]| {
        let mut steps = vec![Step::Await(1), Step::Read(head.to_vec())];
        for piece in ["one ", "two ", "three"] {
            steps.push(Step::Wait(pause));
            steps.push(Step::Read(format!("{:x}\r\n{piece}\r\n", piece.len()).into_bytes()));
        }
        steps.push(Step::Wait(pause));
        steps.push(Step::Read(b"0\r\n\r\n".to_vec()));
        steps
    };
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    paused(async {
        let scripts = Scripts::new(vec![Scripted::new(steps(head)), Scripted::new(steps(head))]);
        let pool = pool(&scripts);
        let res = pool.send_bodiless(&parts("GET", "/x"), TIMEOUT).await.unwrap();
        assert_eq!(whole(res).await.unwrap().body, b"one two three");
        let req = http::Request::post("/x").header("host", "up").body(Bytes::from_static(b"abc").into()).unwrap();
        let res = pool.send(req, TIMEOUT).await.unwrap();
        assert_eq!(whole(res).await.unwrap().body, b"one two three", "through hyper's client");
    });
}

#[test]
fn no_head_in_time_is_a_timeout() {
    paused(async {
        let scripts = Scripts::new(vec![Scripted::new(vec![Step::Stall])]);
        let sent = pool(&scripts).send_bodiless::<()>(&parts("GET", "/x"), TIMEOUT).await;
        assert!(matches!(sent, Err(SendError::Timeout)), "{sent:?}");
    });
}

/// Connections opened for two requests without a body when the first is answered `first`
/// (and read as `read` says) and the second `ok`.
async fn opened_for_two(first: &[u8], read_whole: bool) -> usize {
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let scripts = Scripts::new(vec![
        Scripted::new(vec![Step::Await(1), Step::Read(first.to_vec()), Step::Await(2), Step::Read(ok.clone())]),
        Scripted::new(vec![Step::Await(1), Step::Read(ok)]),
    ]);
    let pool = pool(&scripts);
    let res = pool.send_bodiless::<()>(&parts("GET", "/x"), TIMEOUT).await.unwrap();
    if read_whole {
        let _ = res.into_body().collect().await;
    } else {
        let mut body = res.into_body();
        body.frame().await.unwrap().unwrap();
        drop(body);
    }
    let res = pool.send_bodiless(&parts("GET", "/y"), TIMEOUT).await.unwrap();
    assert_eq!(whole(res).await.unwrap().body, b"ok");
    scripts.opened()
}

#[test]
fn a_connection_is_reused_only_after_a_response_read_to_its_end() {
    paused(async {
        assert_eq!(opened_for_two(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", true).await, 1, "read whole");
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        assert_eq!(opened_for_two(chunked, true).await, 1, "chunked, read whole");
        assert_eq!(opened_for_two(b"HTTP/1.1 204 No Content\r\n\r\n", true).await, 1, "no body");
        assert_eq!(
            opened_for_two(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", false).await,
            2,
            "dropped before its end"
        );
        let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(opened_for_two(close, true).await, 2, "Connection: close");
        assert_eq!(opened_for_two(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", true).await, 2, "HTTP/1.0");
        let extra = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n";
        assert_eq!(opened_for_two(extra, true).await, 2, "bytes past the response's end");
    });
}

#[test]
fn hyper_connections_are_reused_after_a_body_read_to_its_end() {
    paused(async {
        let ok = |body: &str| format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes();
        let scripts = Scripts::new(vec![Scripted::new(vec![
            Step::Await(1),
            Step::Read(ok("first")),
            Step::Await(2),
            Step::Read(ok("second")),
        ])]);
        let pool = pool(&scripts);
        for want in ["first", "second"] {
            let req = http::Request::put("/x").header("host", "up").body(Bytes::from_static(b"abc").into()).unwrap();
            let res = pool.send(req, TIMEOUT).await.unwrap();
            assert_eq!(whole(res).await.unwrap().body, want.as_bytes());
        }
        assert_eq!(scripts.opened(), 1);
    });
}

#[test]
fn a_request_lost_on_an_idle_connection_is_sent_again_only_when_safe() {
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    for (method, retried) in [("GET", true), ("HEAD", true), ("DELETE", false)] {
        paused(async {
            let scripts = Scripts::new(vec![
                Scripted::new(vec![Step::Await(1), Step::Read(ok.clone()), Step::Await(2), Step::Reset]),
                Scripted::new(vec![Step::Await(1), Step::Read(ok.clone())]),
            ]);
            let pool = pool(&scripts);
            let first = pool.send_bodiless(&parts(method, "/x"), TIMEOUT).await.unwrap();
            whole(first).await.unwrap();
            let second = pool.send_bodiless::<()>(&parts(method, "/x"), TIMEOUT).await;
            match second {
                Ok(_) => assert!(retried, "{method} sent twice"),
                Err(SendError::Exchange(ExchangeError::Lost(_))) => assert!(!retried, "{method} not sent again"),
                Err(e) => panic!("{method}: {e}"),
            }
            assert_eq!(scripts.opened(), if retried { 2 } else { 1 }, "{method}");
        });
    }
}

/// A connector whose connections never open (an address that drops every SYN).
#[derive(Debug, Clone)]
struct Blackhole;

impl Connect for Blackhole {
    type Socket = Scripted;

    async fn connect(&self) -> std::io::Result<Scripted> {
        std::future::pending().await
    }
}

#[test]
fn a_connection_not_opened_within_the_connect_timeout_is_a_connect_error_then() {
    paused(async {
        let pool: std::sync::Arc<ConnPool<Blackhole, common::ReqBody>> = std::sync::Arc::new(ConnPool::new(Blackhole));
        let connect = Duration::from_secs(2);
        let timeouts = Timeouts { connect, ..TIMEOUT.into() };
        for path in ["bodiless", "hyper", "http2"] {
            let start = tokio::time::Instant::now();
            let sent = match path {
                "bodiless" => pool.send_bodiless::<()>(&parts("GET", "/x"), timeouts).await.err(),
                "hyper" => {
                    let req = http::Request::post("/x").header("host", "up").body(Bytes::from_static(b"a").into());
                    pool.send::<()>(req.unwrap(), timeouts).await.err()
                }
                _ => {
                    let req = http::Request::get("http://up/x").body(Bytes::new().into()).unwrap();
                    pool.send_multiplexed::<()>(req, timeouts).await.err()
                }
            };
            match sent {
                Some(SendError::Connect(e)) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{path}: {e}"),
                other => panic!("{path}: {other:?}"),
            }
            assert_eq!(tokio::time::Instant::now() - start, connect, "{path}: at the connect timeout, not the head's");
        }
    });
}
