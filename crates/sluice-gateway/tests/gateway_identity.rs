//! Client identity through a real gateway: forwarding headers from untrusted peers are ignored,
//! trusted chains are walked right to left, malformed headers fall back to the peer, and IPv6
//! clients are grouped by prefix. Every request here comes from 127.0.0.1; who the gateway
//! thinks the client is shows in which limit it is charged to.

mod common;

use common::{Client, start};

const UNTRUSTED: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 3
refill_per_second = 0.001

[[route]]
path = "/api/*"
limits = [{ policy = "per-ip", key = "ip" }]
"#;

fn trusted() -> String {
    format!("[server]\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]\nipv6_prefix = 56\n{UNTRUSTED}")
}

async fn status(c: &Client, headers: &[(&str, &str)]) -> u16 {
    c.get("/api/thing", headers).await.status
}

#[tokio::test]
async fn an_untrusted_peer_cannot_escape_its_limit_with_forwarding_headers() {
    let (gw, _clock) = start(UNTRUSTED).await;
    let c = Client::new(gw.addr);
    let spoofs: [&[(&str, &str)]; 6] = [
        &[("x-forwarded-for", "198.51.100.1")],
        &[("x-forwarded-for", "198.51.100.2, 198.51.100.3")],
        &[("forwarded", "for=198.51.100.4")],
        &[("x-real-ip", "198.51.100.5")],
        &[("forwarded", "for=\"[2001:db8::1]\""), ("x-forwarded-for", "198.51.100.6")],
        &[],
    ];
    let mut statuses = Vec::new();
    for h in spoofs {
        statuses.push(status(&c, h).await);
    }
    // All six are the peer 127.0.0.1: three admitted, then denied whatever the headers claim.
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
}

#[tokio::test]
async fn a_trusted_peers_chain_is_resolved_right_to_left_and_the_leftmost_entry_is_ignored() {
    let (gw, _clock) = start(&trusted()).await;
    let c = Client::new(gw.addr);
    // The client 203.0.113.9 writes a different address on the left each time: still one client.
    let mut statuses = Vec::new();
    for i in 0..4 {
        let xff = format!("192.0.2.{i}, 203.0.113.9");
        statuses.push(status(&c, &[("x-forwarded-for", &xff)]).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Trusted hops (10.0.0.0/8) on the right are skipped: the client is still 203.0.113.9.
    assert_eq!(status(&c, &[("x-forwarded-for", "192.0.2.99, 203.0.113.9, 10.1.2.3")]).await, 429);
    // The same chain split over several header lines is one list.
    assert_eq!(status(&c, &[("x-forwarded-for", "192.0.2.98"), ("x-forwarded-for", "203.0.113.9")]).await, 429);
    // The proxies write X-Forwarded-For (the default): a `Forwarded` header the client sent
    // itself names nobody, and the request is charged to the proxy.
    assert_eq!(status(&c, &[("forwarded", "for=198.51.100.77")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "198.51.100.77")]).await, 200);
    // Another client behind the same proxy has its own limit, and the peer itself is untouched.
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.9, 203.0.113.10")]).await, 200);
    assert_eq!(status(&c, &[]).await, 200);
}

#[tokio::test]
async fn malformed_forwarding_headers_fall_back_to_the_peer_and_are_still_limited() {
    let (gw, _clock) = start(&trusted()).await;
    let c = Client::new(gw.addr);
    let bad: [(&str, &str); 8] = [
        ("x-forwarded-for", "not-an-ip"),
        ("x-forwarded-for", "203.0.113.9, , 203.0.113.10"),
        ("x-forwarded-for", "[2001:db8::1"),
        ("x-forwarded-for", "203.0.113.9:99999"),
        ("forwarded", "for=unknown"),
        ("forwarded", "for=_hidden, for=203.0.113.11"),
        ("forwarded", "for"),
        ("x-forwarded-for", "203.0.113.12 203.0.113.13"),
    ];
    let mut statuses = Vec::new();
    for (k, v) in bad {
        statuses.push(status(&c, &[(k, v)]).await);
    }
    // A malformed chain is charged to the proxy (the peer 127.0.0.1), never to an address it
    // names; garbage left of a valid client does not move it (the second request is charged to
    // 203.0.113.10). `Forwarded` is not the configured header: those are the proxy's too.
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429, 429]);
    // Bytes that are not text do not break the server either.
    let req = http::Request::builder()
        .uri(format!("http://{}/api/thing", gw.addr))
        .header("x-forwarded-for", http::HeaderValue::from_bytes(b"\xff\xfe1.2.3.4").unwrap())
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(c.send(req).await.status, 429);
    // 203.0.113.10 was charged once, 203.0.113.11 (named only in a `Forwarded`) never.
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.10")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.10")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.10")]).await, 429);
    for _ in 0..3 {
        assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.11")]).await, 200);
    }
}

#[tokio::test]
async fn ipv6_clients_in_one_prefix_share_a_limit_and_other_prefixes_do_not() {
    let (gw, _clock) = start(&trusted()).await;
    let c = Client::new(gw.addr);
    // 2001:db8:aa:100::/56 spans 2001:db8:aa:100:: to 2001:db8:aa:1ff:ffff:...
    let same_56 = ["2001:db8:aa:100::1", "2001:db8:aa:1ff::2", "2001:db8:aa:142:abcd::3", "2001:db8:aa:180::4"];
    let mut statuses = Vec::new();
    for ip in same_56 {
        statuses.push(status(&c, &[("x-forwarded-for", ip)]).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // The next /56 up, and a bracketed form with a port, are other clients.
    assert_eq!(status(&c, &[("x-forwarded-for", "2001:db8:aa:200::1")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "[2001:db8:ab:100::1]:443")]).await, 200);
    // An IPv4-mapped address is the IPv4 client.
    assert_eq!(status(&c, &[("x-forwarded-for", "::ffff:203.0.113.50")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.50")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "203.0.113.50")]).await, 200);
    assert_eq!(status(&c, &[("x-forwarded-for", "::ffff:203.0.113.50")]).await, 429);
}

#[tokio::test]
async fn with_forwarded_configured_only_rfc7239_is_read() {
    let config = trusted().replace("ipv6_prefix = 56", "ipv6_prefix = 56\nforwarded_header = \"forwarded\"");
    let (gw, _clock) = start(&config).await;
    let c = Client::new(gw.addr);
    let mut statuses = Vec::new();
    for i in 0..4 {
        // The client writes what it likes on the left and in X-Forwarded-For: one client.
        let fwd = format!("for=192.0.2.{i};proto=https, for=\"203.0.113.9:4711\"");
        statuses.push(status(&c, &[("forwarded", &fwd), ("x-forwarded-for", &format!("198.51.100.{i}"))]).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Garbage left of the client does not move it; an unreadable rightmost element keys the proxy.
    assert_eq!(status(&c, &[("forwarded", "nonsense, for=203.0.113.9")]).await, 429);
    assert_eq!(status(&c, &[("forwarded", "for=203.0.113.9, for=unknown")]).await, 200);
}
