//! CORS for sluice's own answers (`[server.cors]`, a route's `cors`): an allowed origin's 429
//! carries `Access-Control-Allow-Origin` and the headers a page may read; another origin's
//! does not; a preflight is never charged unless its route lists `OPTIONS` (answered by
//! sluice, or passed on to the upstream); a route's own origins replace the server's; an
//! upstream that allowed the origin has sluice's header names added to what it exposes.

mod common;

use bytes::Bytes;
use common::{Client, start, upstream};

const PAGE: &str = "https://app.example";

fn config(upstream: Option<std::net::SocketAddr>, preflight: &str) -> String {
    let upstream = upstream.map_or(String::new(), |a| format!("[upstream]\nurl = \"http://{a}\"\n"));
    format!(
        r#"[server]
headers = ["ietf"]

[server.cors]
allow_origins = ["{PAGE}", "http://localhost:3000"]
preflight = "{preflight}"
max_age = "5m"

{upstream}
[[policy]]
name = "one"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[policy]]
name = "options-too"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api/*"
limits = [{{ policy = "one", key = "ip" }}]

[[route]]
path = "/open/*"
cors = {{ allow_origins = ["*"] }}
limits = [{{ policy = "one", key = "ip" }}]

[[route]]
path = "/charged/*"
methods = ["GET", "OPTIONS"]
limits = [{{ policy = "options-too", key = "ip" }}]
"#
    )
}

fn preflight(origin: &str) -> Vec<(&str, &str)> {
    vec![
        ("origin", origin),
        ("access-control-request-method", "POST"),
        ("access-control-request-headers", "x-api-key, content-type"),
    ]
}

#[tokio::test]
async fn an_allowed_origin_reads_a_429_and_another_does_not() {
    let (gw, _) = start(&config(None, "pass")).await;
    let client = Client::new(gw.addr);
    let admitted = client.get("/api/x", &[("origin", PAGE)]).await;
    assert_eq!(admitted.status, 200);
    assert_eq!(admitted.header("access-control-allow-origin"), Some(PAGE));
    let denied = client.get("/api/x", &[("origin", "HTTPS://APP.EXAMPLE")]).await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.header("access-control-allow-origin"),
        Some("HTTPS://APP.EXAMPLE"),
        "origins compare in any case"
    );
    let exposed = denied.header("access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    for name in ["retry-after", "ratelimit", "ratelimit-policy", "x-request-id"] {
        assert!(exposed.split(", ").any(|n| n == name), "{name} not exposed: {exposed}");
    }
    assert!(denied.header_all("vary").iter().any(|v| v.contains("Origin")), "caches must key on the origin");

    // Another origin, or none: no CORS grant (the browser keeps the answer from the page).
    let other = client.get("/api/x", &[("origin", "https://evil.example")]).await;
    assert_eq!(other.status, 429);
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert_eq!(client.get("/api/x", &[]).await.header("access-control-allow-origin"), None);
    // A 400 (an ambiguous path) carries it too.
    let refused = client.get("/api/a%2Fb", &[("origin", PAGE)]).await;
    assert_eq!((refused.status, refused.header("access-control-allow-origin")), (400, Some(PAGE)));

    // A route's own origins replace the server's.
    let open = client.get("/open/x", &[("origin", "https://anyone.example")]).await;
    assert_eq!(open.header("access-control-allow-origin"), Some("*"));
}

#[tokio::test]
async fn preflights_are_answered_and_never_charged_unless_the_route_lists_options() {
    let (gw, _) = start(&config(None, "answer")).await;
    let client = Client::new(gw.addr);
    for _ in 0..5 {
        let req = client.request("OPTIONS", "/api/x", &preflight(PAGE), Bytes::new());
        let answer = client.send(req).await;
        assert_eq!(answer.status, 204);
        assert_eq!(answer.header("access-control-allow-origin"), Some(PAGE));
        assert_eq!(answer.header("access-control-allow-methods"), Some("POST"));
        assert_eq!(answer.header("access-control-allow-headers"), Some("x-api-key, content-type"));
        assert_eq!(answer.header("access-control-max-age"), Some("300"));
    }
    // Five preflights, and the limit of one is still whole.
    assert_eq!(client.get("/api/x", &[("origin", PAGE)]).await.status, 200);
    // An origin not allowed gets an answer that grants nothing.
    let req = client.request("OPTIONS", "/api/x", &preflight("https://evil.example"), Bytes::new());
    let refused = client.send(req).await;
    assert_eq!((refused.status, refused.header("access-control-allow-origin")), (204, None));

    // A route that lists OPTIONS charges its preflights like any request.
    let req = client.request("OPTIONS", "/charged/x", &preflight(PAGE), Bytes::new());
    assert_eq!(client.send(req).await.status, 200);
    let req = client.request("OPTIONS", "/charged/x", &preflight(PAGE), Bytes::new());
    assert_eq!(client.send(req).await.status, 429);
}

#[tokio::test]
async fn preflights_pass_to_the_upstream_uncharged_and_its_grant_exposes_sluice_s_headers() {
    let up = upstream().await;
    let (gw, _) = start(&config(Some(up.addr), "pass")).await;
    let client = Client::new(gw.addr);
    for _ in 0..3 {
        let req = client.request("OPTIONS", "/api/x", &preflight(PAGE), Bytes::new());
        let passed = client.send(req).await;
        assert_eq!(passed.status, 200, "the upstream answers its preflights");
        assert_eq!(passed.json()["method"], "OPTIONS");
    }
    assert_eq!(up.hits.load(std::sync::atomic::Ordering::SeqCst), 3);
    let admitted = client.get("/api/cors", &[("origin", PAGE)]).await;
    assert_eq!(admitted.status, 200, "preflights passed on are not charged");
    // The upstream's grant stands; what it exposes gains sluice's headers.
    assert_eq!(admitted.header("access-control-allow-origin"), Some(PAGE));
    let exposed = admitted.header("access-control-expose-headers").unwrap_or_default();
    assert!(exposed.starts_with("X-Upstream, Retry-After, RateLimit"), "{exposed}");
    // An upstream answer without a grant is passed as it is.
    let (gw, _) = start(&config(Some(up.addr), "pass")).await;
    let plain = Client::new(gw.addr).get("/api/x", &[("origin", PAGE)]).await;
    assert_eq!((plain.status, plain.header("access-control-allow-origin")), (200, None));
}
