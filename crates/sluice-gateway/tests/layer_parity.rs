//! The gateway and the tower layer share one decision pipeline: the same requests, against the
//! same limits at the same time, get the same status, rate-limit headers and denial body from
//! both — the gateway on its own socket, the layer in an axum app on another. Both list the two
//! limits in the `ietf` fields and time a denial's `Retry-After` by the limit that denied.

mod common;
mod fields;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use common::{Client, Resp, T0, config, start_with_clock};
use fields::{names, service_limits};
use sluice_core::{ManualClock, NANOS_PER_SEC};
use sluice_gateway::stores::{memory_options, named_policies};
use sluice_http::layer::RateLimitLayer;
use sluice_store::MemoryStore;
use tokio::net::TcpListener;

/// Two limits on one route (the tightest differs with the API key), draft-6 and ietf headers.
const TOML: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]
headers = ["draft-6", "ietf"]
user_header = "x-user-id"

[[policy]]
name = "per-ip"
algorithm = "sliding-window"
limit = 4
window = "10s"

[[policy]]
name = "per-key"
algorithm = "token-bucket"
capacity = 2
refill_per_second = 0.5

[[route]]
name = "hello"
path = "/hello"
limits = [
  { policy = "per-ip", key = "ip" },
  { policy = "per-key", key = "header:x-api-key|user|ip" },
]
"#;

/// An axum app with the layer built from the same configuration's route, its store reading
/// `clock`.
async fn layered_app(clock: Arc<ManualClock>) -> SocketAddr {
    let cfg = config(TOML);
    let store = MemoryStore::new(named_policies(&cfg), memory_options(&cfg.store), clock);
    let mut builder = RateLimitLayer::builder(Arc::new(store))
        .trusted_proxies(cfg.server.trusted_proxies.clone())
        .headers(cfg.server.headers.clone())
        .user_header("x-user-id")
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()));
    for l in &cfg.routes[0].limits {
        builder = builder.limit_with_cost(&cfg.policies[l.policy].name, l.key.clone(), l.cost);
    }
    let app = Router::new().route("/hello", get(|| async { "from the app" }).post(|| async { "posted" }));
    let app = app.layer(builder.build().expect("the layer builds"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    addr
}

/// The parts of a response that the pipeline writes.
fn limited_parts(r: &Resp) -> Vec<(String, String)> {
    let names = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit-policy",
        "ratelimit",
        "retry-after",
        "cache-control",
    ];
    let mut parts: Vec<(String, String)> =
        names.iter().flat_map(|n| r.header_all(n).into_iter().map(move |v| (n.to_string(), v))).collect();
    parts.push(("status".into(), r.status.to_string()));
    if r.status != 200 {
        parts.push(("content-type".into(), r.header("content-type").unwrap_or("").into()));
        parts.push(("body".into(), r.text()));
    }
    parts
}

#[tokio::test]
async fn the_same_requests_get_the_same_answers_from_the_gateway_and_the_layer() {
    let gw_clock = Arc::new(ManualClock::new(T0));
    let app_clock = Arc::new(ManualClock::new(T0));
    let gw = start_with_clock(TOML, gw_clock.clone()).await;
    let app = layered_app(app_clock.clone()).await;
    let (to_gw, to_app) = (Client::new(gw.addr), Client::new(app));

    // (method, headers, seconds to wait before): spending a key, another key from the same
    // address, the user header from the trusted proxy, a second address, waiting for refills.
    let a = ("x-forwarded-for", "198.51.100.1");
    let b = ("x-forwarded-for", "198.51.100.2");
    type Step<'a> = (&'a str, Vec<(&'a str, &'a str)>, u64);
    let steps: Vec<Step> = vec![
        ("GET", vec![a, ("x-api-key", "k1")], 0),
        ("GET", vec![a, ("x-api-key", "k1")], 0),
        ("GET", vec![a, ("x-api-key", "k1")], 0),
        ("POST", vec![a, ("x-api-key", "k2")], 0),
        ("GET", vec![a, ("x-user-id", "alice")], 0),
        ("GET", vec![a, ("x-user-id", "alice")], 0),
        ("GET", vec![b], 0),
        ("GET", vec![b], 0),
        ("GET", vec![b], 0),
        ("GET", vec![a, ("x-api-key", "k1")], 2),
        ("GET", vec![a, ("x-api-key", "k3")], 7),
        ("GET", vec![b], 1),
        ("GET", vec![a, ("x-api-key", "k1")], 1),
    ];
    let mut statuses = Vec::new();
    for (i, (method, headers, wait)) in steps.iter().enumerate() {
        gw_clock.advance(wait * NANOS_PER_SEC);
        app_clock.advance(wait * NANOS_PER_SEC);
        let send = |c: &Client| {
            let req = c.request(method, "/hello", headers, bytes::Bytes::new());
            let c = c.clone();
            async move { c.send(req).await }
        };
        let (from_gw, from_app) = (send(&to_gw).await, send(&to_app).await);
        assert_eq!(limited_parts(&from_gw), limited_parts(&from_app), "step {i}: {method} {headers:?}");
        // ietf: both limits, in the route's order, on every response of either face.
        for field in ["ratelimit-policy", "ratelimit"] {
            assert_eq!(names(&from_gw.headers, field), ["per-ip", "per-key"], "step {i}: {field}");
        }
        if from_gw.status == 429 {
            // Retry-After is the `t` of the limit that denied, an exhausted one.
            let exhausted: Vec<u64> =
                service_limits(&from_gw.headers).iter().filter(|l| l.1 == 0).map(|l| l.2).collect();
            assert!(exhausted.contains(&from_gw.num("retry-after")), "step {i}: {exhausted:?}");
        }
        statuses.push(from_gw.status);
        if from_gw.status == 200 {
            assert_eq!(from_app.text(), if *method == "GET" { "from the app" } else { "posted" });
        }
    }
    // The sequence exercises both outcomes and both limits: k1's bucket (step 2), the address's
    // window (steps 5, 9, 10: denied requests charge nothing), b's bucket (step 8), a new window
    // weighing the last one (steps 11, 12).
    assert_eq!(statuses, [200, 200, 429, 200, 200, 429, 200, 200, 429, 429, 429, 200, 200]);
}
