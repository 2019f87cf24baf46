//! What a denial looks like as configured: shadow policies that never deny, `on_deny = "drop"`,
//! `deny_status`, header styles, and `max_in_flight` shedding.

mod common;

use std::time::Duration;

use common::{Client, start, upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limited(server: &str, capacity: u64) -> String {
    format!(
        r#"
[server]
{server}

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = {capacity}
refill_per_second = 0.001

[[route]]
path = "/api/*"
limits = [{{ policy = "per-ip", key = "ip" }}]
"#
    )
}

#[tokio::test]
async fn a_shadow_policy_never_denies_while_an_enforced_one_does() {
    let toml = r#"
[[policy]]
name = "enforced"
algorithm = "token-bucket"
capacity = 3
refill_per_second = 0.001

[[policy]]
name = "observed"
algorithm = "fixed-window"
limit = 1
window = "1h"
shadow = true

[[route]]
path = "/both"
limits = [{ policy = "observed", key = "ip" }, { policy = "enforced", key = "ip" }]

[[route]]
path = "/shadow-only"
limits = [{ policy = "observed", key = "const:everyone" }]
"#;
    let (gw, _clock) = start(toml).await;
    let c = Client::new(gw.addr);
    // `observed` would deny from the second request on; only `enforced` (3) decides.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let res = c.get("/both", &[]).await;
        if res.status == 200 {
            // The headers describe the enforced limit, not the shadow one.
            assert_eq!(res.num("ratelimit-limit"), 3);
        }
        statuses.push(res.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    for _ in 0..5 {
        assert_eq!(c.get("/shadow-only", &[]).await.status, 200);
    }
}

#[tokio::test]
async fn on_deny_drop_closes_the_connection_without_a_response() {
    let (gw, _clock) = start(&limited("on_deny = \"drop\"", 1)).await;
    let addr = gw.addr;
    let raw = move |path: &'static str| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(common::REQUEST_TIMEOUT, s.read_to_end(&mut got)).await;
        // A reset is as good as a close: either way, no response.
        let _ = read.expect("the server closes the connection");
        String::from_utf8_lossy(&got).into_owned()
    };
    assert!(raw("/api/x").await.starts_with("HTTP/1.1 200"));
    for _ in 0..3 {
        let answer = raw("/api/x").await;
        assert!(answer.is_empty(), "a dropped denial answered: {answer:?}");
    }
    // Requests outside the limited routes are still answered.
    assert!(raw("/other").await.starts_with("HTTP/1.1 404"));
}

#[tokio::test]
async fn deny_status_is_honoured() {
    let (gw, _clock) = start(&limited("deny_status = 503", 1)).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/api/x", &[]).await.status, 200);
    let res = c.get("/api/x", &[]).await;
    assert_eq!(res.status, 503);
    assert_eq!(res.json()["error"], "rate_limit_exceeded");
    assert!(res.num("retry-after") >= 1);
    assert_eq!(res.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn header_styles_are_sent_as_configured() {
    let (gw, _clock) = start(&limited("headers = [\"draft-6\", \"ietf\", \"x-ratelimit\"]", 4)).await;
    let c = Client::new(gw.addr);
    let res = c.get("/api/x", &[]).await;
    assert_eq!(res.status, 200);
    // draft-6
    assert_eq!(res.num("ratelimit-limit"), 4);
    assert_eq!(res.num("ratelimit-remaining"), 3);
    let reset = res.num("ratelimit-reset");
    assert!(reset >= 1, "reset {reset}");
    // Both styles name RateLimit-Policy, in two syntaxes: with ietf configured, only its form is
    // sent (one syntax a client can parse); the bucket refills in 4000 s.
    let policies = res.header_all("ratelimit-policy");
    assert_eq!(policies, vec!["\"per-ip\";q=4;w=4000".to_string()]);
    // ietf
    assert_eq!(res.header("ratelimit"), Some(format!("\"per-ip\";r=3;t={reset}").as_str()));
    // x-ratelimit: the reset is a Unix time.
    assert_eq!(res.num("x-ratelimit-limit"), 4);
    assert_eq!(res.num("x-ratelimit-remaining"), 3);
    let unix_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let x_reset = res.num("x-ratelimit-reset");
    assert!(x_reset > unix_now - 60 && x_reset <= unix_now + reset + 60, "x-ratelimit-reset {x_reset}");

    // One style only: the others are absent.
    let (gw, _clock) = start(&limited("headers = [\"x-ratelimit\"]", 4)).await;
    let res = Client::new(gw.addr).get("/api/x", &[]).await;
    assert_eq!(res.num("x-ratelimit-remaining"), 3);
    for absent in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-policy", "ratelimit"] {
        assert!(res.header(absent).is_none(), "{absent} sent");
    }
    // Default: draft-6 only.
    let (gw, _clock) = start(&limited("", 4)).await;
    let res = Client::new(gw.addr).get("/api/x", &[]).await;
    assert_eq!(res.num("ratelimit-limit"), 4);
    assert_eq!(res.header("ratelimit-policy"), Some("4;w=4000"));
    assert!(res.header("ratelimit").is_none() && res.header("x-ratelimit-limit").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_in_flight_requests_are_shed_at_once_with_503() {
    let up = upstream().await;
    let toml = format!("[upstream]\nurl = \"http://{}\"\n{}", up.addr, limited("max_in_flight = 2", 100));
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let held: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.get("/api/hold", &[]).await })
        })
        .collect();
    up.wait_held(2).await;
    assert_eq!(gw.gateway.in_flight(), 2);
    for _ in 0..3 {
        let shed = c.get("/api/other", &[]).await;
        assert_eq!(shed.status, 503);
        assert_eq!(shed.json()["error"], "overloaded");
        assert!(shed.num("retry-after") >= 1);
    }
    // Shed requests were never decided (no charge) and never proxied.
    assert_eq!(up.hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    up.release.add_permits(2);
    for h in held {
        let res = h.await.unwrap();
        assert_eq!((res.status, res.text().as_str()), (200, "held"));
    }
    // Capacity is back once they are done.
    let deadline = tokio::time::Instant::now() + common::REQUEST_TIMEOUT;
    while gw.gateway.in_flight() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "in-flight count never drained");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let res = c.get("/api/other", &[]).await;
    assert_eq!(res.status, 200);
    // 100 tokens, two held requests and this one charged: the shed ones cost nothing.
    assert_eq!(res.num("ratelimit-remaining"), 97);
}
