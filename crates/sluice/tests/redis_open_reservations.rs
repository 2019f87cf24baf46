//! Redis stops answering while requests hold reservations: a stream that reserved tokens and a
//! concurrency slot ends while Redis is frozen, so neither its settlement nor its release can
//! be made. The client still gets its whole stream; requests meanwhile get the failure mode's
//! answer (fail-closed: 503); and when Redis answers again, the charge was settled at most once
//! (its reservation stands, or the settlement landed late — never twice) and the slot comes
//! back within its lease.

#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use support::raw::{http, open_until, read_head, upstream};
use support::{Serve, TempDir};

/// An upstream streaming a completion: a first event at once, the usage (40 tokens) 1.5 s
/// later, then the end; anything else `done`.
fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    while let Some((_, target, _)) = read_head(&mut reader) {
        if target.starts_with("/v1/stream") {
            let chunk = |d: &str| format!("{:x}\r\n{d}\r\n", d.len());
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let first = chunk("data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n");
            if writer.write_all(format!("{head}{first}").as_bytes()).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(1_500));
            let last = chunk("data: {\"choices\":[],\"usage\":{\"total_tokens\":40}}\n\n");
            let _ = writer.write_all(format!("{last}{}0\r\n\r\n", chunk("data: [DONE]\n\n")).as_bytes());
            continue;
        }
        if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ndone").is_err() {
            return;
        }
    }
}

const LIMITS: &str = r#"
[[policy]]
name = "tokens"
algorithm = "token-bucket"
capacity = 1000
refill_per_second = 0.001
unit = "tokens"

[[policy]]
name = "in-flight"
algorithm = "concurrency"
max_in_flight = 1
lease = "3s"

[[route]]
path = "/v1/*"
limits = [
  { policy = "tokens", key = "ip", cost_from = "response-json:/usage/total_tokens" },
  { policy = "in-flight", key = "ip" },
]
"#;

#[test]
fn a_stream_ending_while_redis_is_frozen_keeps_its_reservation_and_its_slot_comes_back() {
    let redis = redis_support::RedisServer::start();
    let dir = TempDir::new("open-reservations");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n{}\n[upstream]\nurl = \"http://{}\"\n{LIMITS}{}timeout_ms = 200\n",
        support::SHARED_SECRET,
        upstream(answer),
        support::redis_store(&redis.url()),
    );
    let gw = Serve::gateway(&dir.write("gateway.toml", &config));
    let addr: SocketAddr = ([127, 0, 0, 1], gw.port).into();

    let (mut stream, _) = open_until(addr, b"GET /v1/stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "Hel");
    redis.pause();
    // The stream ends while Redis is frozen: the client gets all of it.
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("the stream ends");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("total_tokens\":40") && rest.contains("[DONE]"), "{rest}");
    // Meanwhile, fail-closed: 503, and the gateway stays up.
    let during = http(addr, "GET", "/v1/quick", b"");
    assert_eq!(during.status, 503, "{}", during.text());
    redis.resume();

    // The slot comes back within its lease (its release may have been lost), and the tokens
    // show the charge settled at most once: the reservation of 1 standing (1000 - 1 - 1 for
    // this request), or the settlement to 40 made late (1000 - 40 - 1).
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = loop {
        let r = http(addr, "GET", "/v1/quick", b"");
        if r.status == 200 || Instant::now() > deadline {
            break r;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(back.status, 200, "the slot never came back: {}", back.text());
    let left = back.remaining_of("tokens");
    assert!(left == 998 || left == 959, "the stream's charge was settled more than once, or refunded: {left} left");
}
