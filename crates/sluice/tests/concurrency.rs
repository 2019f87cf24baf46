//! `algorithm = "concurrency"` through the binary: a key holds at most `max_in_flight` requests
//! at once, each from its admission until its response ends or its client leaves, however long
//! that is (its slots renewed while it lives); on Redis, the slots of an instance killed
//! mid-request come back when their lease ends.

#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use support::raw::{Resp, http, open_until, read_head, upstream};
use support::{Serve, TempDir};

/// An upstream whose `/stream/...` answers a first chunk and then nothing for a minute (a long
/// stream), and anything else `done` at once.
fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    while let Some((_, target, _)) = read_head(&mut reader) {
        if target.starts_with("/stream/") {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            if writer.write_all(format!("{head}6\r\nfirst\n\r\n").as_bytes()).is_err() {
                return;
            }
            thread::sleep(Duration::from_secs(60));
            return;
        }
        if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ndone").is_err() {
            return;
        }
    }
}

fn config(upstream: SocketAddr, lease: &str, rest: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
headers = ["ietf"]
{rest}
[upstream]
url = "http://{upstream}"

[[policy]]
name = "in-flight"
algorithm = "concurrency"
max_in_flight = 2
lease = "{lease}"

[[route]]
path = "/*"
limits = [{{ policy = "in-flight", key = "ip" }}]
"#
    )
}

/// A stream opened through `gateway`, read to its first chunk: it holds its slot while open.
fn open_stream(gateway: SocketAddr) -> TcpStream {
    let (c, seen) = open_until(gateway, b"GET /stream/a HTTP/1.1\r\nHost: t\r\n\r\n", "first");
    assert!(seen.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&seen));
    c
}

/// Asks `/quick` until it is admitted (at most 10 s): a slot given back is seen at once on the
/// memory store, shortly on Redis.
fn admitted_again(gateway: SocketAddr, within: Duration) -> Resp {
    let deadline = Instant::now() + within;
    loop {
        let r = http(gateway, "GET", "/quick", b"");
        if r.status == 200 || Instant::now() > deadline {
            return r;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn two_at_once(gateway: SocketAddr) {
    // Requests that end give their slot back: any number, one after another.
    for _ in 0..5 {
        assert_eq!(http(gateway, "GET", "/quick", b"").status, 200);
    }
    let first = open_stream(gateway);
    let _second = open_stream(gateway);
    let third = http(gateway, "GET", "/quick", b"");
    assert_eq!(third.status, 429, "two streams hold both slots: {}", third.text());
    assert_eq!(third.header("retry-after"), Some("1"), "a slot comes back when a request ends, not a lease");
    assert_eq!(
        third.header("ratelimit-policy"),
        Some(r#""in-flight";q=2;qu="concurrent-requests";w=600"#),
        "the unit and the lease"
    );
    // A client that leaves mid-stream gives its slot back.
    drop(first);
    assert_eq!(admitted_again(gateway, Duration::from_secs(10)).status, 200);
}

#[test]
fn a_key_holds_at_most_max_in_flight_requests_until_they_end() {
    let dir = TempDir::new("concurrency");
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(upstream(answer), "10m", "")));
    two_at_once(([127, 0, 0, 1], gw.port).into());
}

#[cfg(feature = "external-programs")]
#[test]
fn on_redis_a_killed_instances_slots_come_back_when_their_lease_ends() {
    let redis = redis_support::RedisServer::start();
    let dir = TempDir::new("concurrency-redis");
    let up = upstream(answer);
    let store = support::redis_store(&redis.url());
    let gw = Serve::gateway(&dir.write("a.toml", &format!("{}{store}", config(up, "10m", support::SHARED_SECRET))));
    two_at_once(([127, 0, 0, 1], gw.port).into());
    drop(gw);

    // An instance with a short lease is killed holding both slots: another instance sharing the
    // Redis sees them held until the lease ends, then free.
    // Apart from the keys above (whose last slot may still be being given back).
    let short = format!("{}{store}key_prefix = \"killed-\"\n", config(up, "2s", support::SHARED_SECRET));
    let killed = Serve::gateway(&dir.write("b.toml", &short));
    let killed_addr: SocketAddr = ([127, 0, 0, 1], killed.port).into();
    let streams = [open_stream(killed_addr), open_stream(killed_addr)];
    let other = Serve::gateway(&dir.write("c.toml", &short));
    let other_addr: SocketAddr = ([127, 0, 0, 1], other.port).into();
    let started = Instant::now();
    drop(killed);
    drop(streams);
    assert_eq!(http(other_addr, "GET", "/quick", b"").status, 429, "the killed instance's slots are still held");
    let back = admitted_again(other_addr, Duration::from_secs(10));
    assert_eq!(back.status, 200, "the slots came back with their lease");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(4), "the lease is 2 s; waited {waited:?}");
}

/// Streams living three times their lease of 1 s keep their slots (renewed every third of it),
/// and give them back when they end.
fn renewed_while_they_live(gateway: SocketAddr) {
    let first = open_stream(gateway);
    let _second = open_stream(gateway);
    thread::sleep(Duration::from_secs(3));
    let third = http(gateway, "GET", "/quick", b"");
    assert_eq!(third.status, 429, "streams older than their lease still hold their slots: {}", third.text());
    drop(first);
    assert_eq!(admitted_again(gateway, Duration::from_secs(10)).status, 200);
}

#[test]
fn a_stream_longer_than_its_lease_keeps_its_slot() {
    let dir = TempDir::new("concurrency-renewed");
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(upstream(answer), "1s", "")));
    renewed_while_they_live(([127, 0, 0, 1], gw.port).into());
}

#[cfg(feature = "external-programs")]
#[test]
fn on_redis_a_stream_longer_than_its_lease_keeps_its_slot() {
    let redis = redis_support::RedisServer::start();
    let dir = TempDir::new("concurrency-renewed-redis");
    let store = support::redis_store(&redis.url());
    let config = format!("{}{store}", config(upstream(answer), "1s", support::SHARED_SECRET));
    let gw = Serve::gateway(&dir.write("gateway.toml", &config));
    renewed_while_they_live(([127, 0, 0, 1], gw.port).into());
}

#[test]
fn check_config_refuses_what_a_concurrency_limit_cannot_do() {
    let dir = TempDir::new("concurrency-bad");
    let up = upstream(answer);
    let fa = "trusted_proxies = [\"127.0.0.1/32\"]\n[forward_auth]\n";
    let err = support::refused_config(&dir.write("fa.toml", &config(up, "10m", fa)));
    assert!(err.contains("fa.toml") && err.contains("forward_auth: route[0] limits requests in flight"), "{err}");
    let settled = config(up, "10m", "").replace("key = \"ip\" }", "key = \"ip\", cost_from = \"response-bytes\" }");
    let err = support::refused_config(&dir.write("cost.toml", &settled));
    assert!(err.contains("route[0].limits[0].cost_from: policy `in-flight` counts requests in flight"), "{err}");
    let zero = config(up, "10m", "").replace("max_in_flight = 2", "max_in_flight = 0");
    let err = support::refused_config(&dir.write("zero.toml", &zero));
    assert!(err.contains("policy[0].max_in_flight: 0: a concurrency limit holds 1 to"), "{err}");
    let window = config(up, "10m", "").replace("lease = \"10m\"", "window = \"10m\"");
    let err = support::refused_config(&dir.write("window.toml", &window));
    assert!(err.contains("policy[0].window: does not apply to concurrency (it takes max_in_flight, lease)"), "{err}");
}
