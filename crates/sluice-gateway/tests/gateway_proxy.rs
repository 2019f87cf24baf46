//! Reverse proxying: bodies forwarded intact both ways (also past a bounded JSON key read),
//! streamed responses, hop-by-hop headers, `X-Forwarded-For`, rate-limit headers on upstream
//! responses, 502/504 JSON, and a deny path that never reaches the upstream.

mod common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use common::{Client, Upstream, fnv1a, pattern, start, upstream};
use http_body_util::BodyExt;

fn proxy_config(upstream: &Upstream, extra: &str) -> String {
    format!(
        r#"
[server]
max_body_bytes = 1024
headers = ["draft-6"]

[upstream]
url = "http://{}"
timeout_ms = 5000

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 50
refill_per_second = 0.001

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 50
window = "15m"

[[policy]]
name = "tiny"
algorithm = "fixed-window"
limit = 2
window = "1h"

[[route]]
path = "/upload"
limits = [{{ policy = "per-ip", key = "ip" }}]

[[route]]
path = "/account"
methods = ["POST"]
limits = [{{ policy = "per-account", key = "json:/email" }}, {{ policy = "per-ip", key = "ip" }}]

[[route]]
path = "/tiny"
limits = [{{ policy = "tiny", key = "ip" }}]

[[route]]
path = "/limited/*"
limits = [{{ policy = "per-ip", key = "ip" }}]
{extra}
"#,
        upstream.addr
    )
}

/// A JSON document of about `len` bytes whose `email` field comes first.
fn big_json(len: usize) -> Vec<u8> {
    let mut doc = br#"{"email":"big@example.com","pad":""#.to_vec();
    let fill = len.saturating_sub(doc.len() + 2);
    doc.extend((0..fill).map(|i| b'a' + (i % 26) as u8));
    doc.extend_from_slice(br#""}"#);
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_megabyte_bodies_are_forwarded_intact_on_plain_and_json_keyed_routes() {
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "")).await;
    let c = Client::new(gw.addr);
    let five_mb = 5 * 1024 * 1024;

    let raw = pattern(five_mb);
    let res = c.post("/upload", &[("content-type", "application/octet-stream")], raw.clone()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let echo = res.json();
    assert_eq!(echo["len"], five_mb);
    assert_eq!(echo["fnv"], format!("{:016x}", fnv1a(&raw)));

    // On a route whose key reads `json:/email`, only max_body_bytes (1 KiB) are read for the
    // key, and the whole 5 MB still reaches the upstream, byte for byte.
    let doc = big_json(five_mb);
    let res = c.post("/account", &[("content-type", "application/json")], doc.clone()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let echo = res.json();
    assert_eq!(echo["len"], doc.len());
    assert_eq!(echo["fnv"], format!("{:016x}", fnv1a(&doc)));
    assert_eq!(echo["headers"]["content-length"][0], doc.len().to_string());

    // A small JSON body (read whole for the key) is forwarded intact too.
    let small = br#"{"email": "Small@Example.com"}"#.to_vec();
    let res = c.post("/account", &[("content-type", "application/json")], small.clone()).await;
    let echo = res.json();
    assert_eq!(echo["len"], small.len());
    assert_eq!(echo["fnv"], format!("{:016x}", fnv1a(&small)));
    assert_eq!(up.hits.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_streamed_responses_come_back_intact_and_as_they_are_produced() {
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "")).await;
    let c = Client::new(gw.addr);

    let len = 5 * 1024 * 1024;
    let res = c.get(&format!("/limited/big?len={len}"), &[]).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body.len(), len);
    assert_eq!(fnv1a(&res.body), fnv1a(&pattern(len)));

    // The upstream sends its first chunk and then waits for the test: a proxy that buffered
    // the response would never hand the first chunk over.
    let gate = up.arm_stream();
    let res = c.send_streaming(c.request("GET", "/limited/stream", &[], Bytes::new())).await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("ratelimit-remaining"));
    let mut body = res.into_body();
    let mut seen = Vec::new();
    while seen.len() < b"first-chunk".len() {
        let frame = tokio::time::timeout(common::REQUEST_TIMEOUT, body.frame())
            .await
            .expect("the first chunk arrives before the upstream finishes")
            .expect("body not over")
            .expect("frame reads");
        if let Ok(data) = frame.into_data() {
            seen.extend_from_slice(&data);
        }
    }
    assert_eq!(seen, b"first-chunk");
    gate.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(&rest[..], b"second-chunk");
}

#[tokio::test]
async fn hop_by_hop_headers_are_dropped_and_the_client_is_forwarded() {
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "")).await;
    let c = Client::new(gw.addr);
    let res = c
        .get(
            "/limited/echo",
            &[
                ("connection", "x-client-hop"),
                ("x-client-hop", "secret"),
                ("proxy-authorization", "Basic c2VjcmV0"),
                ("x-end-to-end", "kept"),
                ("x-forwarded-for", "192.0.2.77"),
            ],
        )
        .await;
    assert_eq!(res.status, 200);
    let seen = &res.json()["headers"];
    assert!(seen.get("x-client-hop").is_none(), "{seen}");
    assert!(seen.get("proxy-authorization").is_none(), "{seen}");
    assert_eq!(seen["x-end-to-end"][0], "kept");
    // The peer (127.0.0.1) is not a trusted proxy: what it claims is dropped, and the upstream
    // is told the peer.
    assert_eq!(seen["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));
    // Without one, the header is created.
    let res = c.get("/limited/echo", &[]).await;
    assert_eq!(res.json()["headers"]["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));
    // Behind a trusted proxy, a chain sent as several header lines is kept whole, in order, and
    // the client sluice resolved (the first untrusted hop from the right) is appended.
    let trusted = proxy_config(&up, "").replacen("[server]\n", "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n", 1);
    let (behind, _clock) = start(&trusted).await;
    let res = Client::new(behind.addr)
        .get("/limited/echo", &[("x-forwarded-for", "192.0.2.77, 192.0.2.78"), ("x-forwarded-for", "192.0.2.79")])
        .await;
    assert_eq!(
        res.json()["headers"]["x-forwarded-for"],
        serde_json::json!(["192.0.2.77, 192.0.2.78, 192.0.2.79, 192.0.2.79"])
    );

    let res = c.get("/limited/hop", &[]).await;
    assert_eq!(res.status, 200);
    assert!(res.header("x-upstream-hop").is_none(), "{:?}", res.headers);
    assert!(res.header("keep-alive").is_none(), "{:?}", res.headers);
    assert_eq!(res.header("x-upstream-e2e"), Some("kept"));
    assert_eq!(res.text(), "hop");
}

#[tokio::test]
async fn upstream_responses_carry_rate_limit_headers_and_the_deny_path_never_reaches_the_upstream() {
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "")).await;
    let c = Client::new(gw.addr);
    let first = c.get("/tiny", &[]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-upstream"), Some("echo"));
    assert_eq!((first.num("ratelimit-limit"), first.num("ratelimit-remaining")), (2, 1));
    let second = c.get("/tiny", &[]).await;
    assert_eq!((second.status, second.num("ratelimit-remaining")), (200, 0));
    for _ in 0..5 {
        let denied = c.post("/tiny", &[], Bytes::from(vec![b'x'; 10_000])).await;
        assert_eq!(denied.status, 429);
        assert!(denied.header("x-upstream").is_none());
        assert_eq!(denied.json()["error"], "rate_limit_exceeded");
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 2, "denied requests reached the upstream");
}

#[tokio::test]
async fn requests_matching_no_route_are_proxied_unlimited() {
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "")).await;
    let c = Client::new(gw.addr);
    for _ in 0..4 {
        let res = c.get("/elsewhere", &[]).await;
        assert_eq!(res.status, 200);
        assert_eq!(res.json()["path"], "/elsewhere");
        assert!(res.header("ratelimit-limit").is_none());
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn an_upstream_that_is_down_gives_a_502_json_answer() {
    // A port that was just free: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let toml = format!(
        "[upstream]\nurl = \"http://{dead}\"\n\n[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\n\
         capacity = 5\nrefill_per_second = 0.001\n\n[[route]]\npath = \"/api/*\"\n\
         limits = [{{ policy = \"p\", key = \"ip\" }}]\n"
    );
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let res = c.get("/api/x", &[]).await;
    assert_eq!(res.status, 502);
    assert_eq!(res.json()["error"], "bad_gateway");
    assert!(res.header("content-type").unwrap().starts_with("application/json"));
    // The request was admitted (and charged) before the upstream failed: headers say so.
    assert_eq!(res.num("ratelimit-remaining"), 4);
}

#[tokio::test]
async fn an_upstream_that_does_not_answer_in_time_gives_a_504() {
    let up = upstream().await;
    let toml = proxy_config(&up, "").replace("timeout_ms = 5000", "timeout_ms = 1000");
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let timed_out = || async {
        let res = c.get("/limited/hold", &[]).await;
        assert_eq!(res.status, 504);
        assert_eq!(res.json()["error"], "gateway_timeout");
    };
    // On a new connection.
    timed_out().await;
    // On a reused one: answered in time, the connection goes back to the pool with its timer,
    // which each next exchange moves on instead of starting another.
    for _ in 0..3 {
        assert_eq!(c.get("/limited/echo", &[]).await.status, 200);
    }
    timed_out().await;
    up.release.add_permits(2);
    // The connection that timed out is gone; the next request is answered on another.
    assert_eq!(c.get("/limited/echo", &[]).await.status, 200);
}

#[tokio::test]
async fn a_chunked_body_on_a_json_keyed_route_is_keyed_and_forwarded_intact() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream().await;
    let (gw, _clock) = start(&proxy_config(&up, "").replace("limit = 50", "limit = 1")).await;
    // The key field arrives in the first chunk; the body (3 KiB) is longer than max_body_bytes.
    let doc = big_json(3 * 1024);
    let send = |doc: Vec<u8>| async move {
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let mut req =
            b"POST /account HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for chunk in doc.chunks(700) {
            req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            req.extend_from_slice(chunk);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
        s.write_all(&req).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(common::REQUEST_TIMEOUT, s.read_to_end(&mut answer)).await.unwrap().unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let answer = send(doc.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("\"len\":{}", doc.len())), "{answer}");
    assert!(answer.contains(&format!("{:016x}", fnv1a(&doc))), "{answer}");
    // A small chunked body is read whole, so its email is the key: limit 1 per account.
    let small = br#"{"email": "chunked@example.com"}"#.to_vec();
    assert!(send(small.clone()).await.starts_with("HTTP/1.1 200"));
    assert!(send(small).await.starts_with("HTTP/1.1 429"));
    assert_eq!(up.hits.load(Ordering::SeqCst), 2);
}
