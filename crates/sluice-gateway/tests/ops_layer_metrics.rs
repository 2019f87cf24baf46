//! The tower layer, observed: an axum app with sluice's layer and the gateway's
//! `FaceObserver` serves sluice's metrics on its own `/metrics`; after a known sequence they
//! show exactly its decisions, under the gateway's names and labels, with decision lines like
//! the gateway's. Store failures and a failure mode's answers are counted; no request can
//! make a new label value.

mod common;
mod ops_support;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use common::{Client, T0};
use ops_support::{Logs, Mode, Samples, Shared};
use proptest::prelude::*;
use sluice_config::{KeySource, KeySpec};
use sluice_core::{Clock, FixedWindow, ManualClock, NANOS_PER_SEC, Policy};
use sluice_gateway::observe::{FaceObserver, Observer, Scrape, ThreadRandom};
use sluice_http::layer::RateLimitLayer;
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};
use tokio::net::TcpListener;
use tower::ServiceExt;

const LOG: sluice_config::DecisionLog = sluice_config::DecisionLog { sample: 0.0, denials_per_second: 100.0 };

fn per_ip(limit: u64) -> Vec<NamedPolicy> {
    let policy = Policy::from(FixedWindow::new(limit, 60 * NANOS_PER_SEC).unwrap());
    vec![NamedPolicy { name: "per-ip".into(), policy }]
}

fn memory(limit: u64, clock: &Arc<ManualClock>) -> MemoryStore {
    MemoryStore::new(per_ip(limit), MemoryOptions::default(), clock.clone() as Arc<dyn Clock>)
}

fn ip() -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Ip]] }
}

/// An axum app: `/hello` behind the layer (route name `api`), `/metrics` beside it, unlimited,
/// rendering the observer's families and what `store` reads now.
async fn app(store: Arc<dyn Store>, observer: Arc<Observer>) -> SocketAddr {
    let face = Arc::new(FaceObserver::new(&observer, store.as_ref(), &LOG));
    let layer = RateLimitLayer::builder(store.clone())
        .limit("per-ip", ip())
        .route_name("api")
        .observe(face)
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
        .build()
        .expect("the layer builds");
    let metrics = move || {
        let (store, observer) = (store.clone(), observer.clone());
        async move { observer.metrics().render(Scrape::of(store.as_ref(), 0)) }
    };
    let router = Router::new()
        .route("/hello", get(|| async { "hello" }))
        .layer(layer)
        .route("/metrics", get(metrics))
        .into_make_service_with_connect_info::<SocketAddr>();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

fn observer(clock: &Arc<ManualClock>) -> Arc<Observer> {
    Arc::new(Observer::with_sources(clock.clone(), Arc::new(ThreadRandom)))
}

async fn scrape(client: &Client) -> Samples {
    let r = client.get("/metrics", &[]).await;
    assert_eq!(r.status, 200);
    Samples::parse(&r.text())
}

#[tokio::test(flavor = "current_thread")]
async fn an_axum_app_with_the_layer_and_the_gateways_observer_exports_its_decisions() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let observer = observer(&clock);
    let addr = app(Arc::new(memory(3, &clock)), observer.clone()).await;
    let client = Client::new(addr);

    assert_eq!(hellos(&client, 5).await, [200, 200, 200, 429, 429]);

    let m = scrape(&client).await;
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "allowed"), 3.0);
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "denied"), 2.0);
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "error"), 0.0);
    assert_eq!(m.requests("api", "allowed"), 3.0);
    assert_eq!(m.requests("api", "denied"), 2.0);
    assert_eq!(m.value("sluice_decision_duration_seconds_count", &[("store", "memory")]), 5.0);
    assert_eq!(m.value("sluice_store_latency_seconds_count", &[("store", "memory")]), 5.0);
    assert_eq!(m.value("sluice_keys", &[("policy", "per-ip")]), 1.0);
    // The metrics route is not limited, and no request path became a label.
    assert_eq!(m.label_values("sluice_decisions_total", "route"), ["api".to_string()].into());

    // Two denial lines, like the gateway's: the route's name, the status sent, a hash only.
    let lines = logs.decisions();
    assert_eq!(lines.len(), 2, "{}", logs.text());
    for l in &lines {
        assert_eq!(
            (l["route"].as_str(), l["decision"].as_str(), l["status"].as_u64()),
            (Some("api"), Some("denied"), Some(429))
        );
        assert_eq!(
            (l["key_type"].as_str(), l["policy"].as_str(), l["store"].as_str()),
            (Some("ip"), Some("per-ip"), Some("memory"))
        );
        assert!(l.get("degraded").is_none());
    }
    assert!(!logs.text().contains("127.0.0.1"), "a raw address reached the log");
    // The status page's most denied keys saw them.
    let top = observer.top_denied().top(5);
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].denials, top[0].key.to_hex()), (2, lines[0]["key_hash"].as_str().unwrap().to_owned()));
}

/// `n` sequential GETs of `/hello`; their statuses.
async fn hellos(client: &Client, n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(client.get("/hello", &[]).await.status);
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn store_errors_and_fail_open_answers_are_counted_and_marked_through_the_layer() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let observer = observer(&clock);
    let store = Arc::new(Shared::new(memory(3, &clock), memory(3, &clock)));
    let addr = app(store.clone(), observer).await;
    let client = Client::new(addr);

    assert_eq!(hellos(&client, 1).await, [200]);
    store.set(Mode::FailOpen);
    assert_eq!(hellos(&client, 4).await, [200; 4], "fail-open admits beyond the limit");
    store.set(Mode::FailClosed);
    assert_eq!(hellos(&client, 2).await, [503; 2]);

    let m = scrape(&client).await;
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "allowed"), 1.0);
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "allowed_degraded"), 4.0);
    assert_eq!(m.decisions("api", "per-ip", "fixed-window", "error"), 2.0);
    assert_eq!(m.requests("api", "allowed_degraded"), 4.0);
    assert_eq!(m.requests("api", "error"), 2.0);
    // Every store error counts, whatever the failure mode did with it.
    assert_eq!(m.value("sluice_store_errors_total", &[("store", "redis"), ("kind", "timeout")]), 6.0);
    assert_eq!(m.value("sluice_degraded_total", &[("store", "redis"), ("mode", "fail-open")]), 4.0);
    assert_eq!(m.value("sluice_degraded_total", &[("store", "redis"), ("mode", "local")]), 0.0);

    let lines = logs.decisions();
    let degraded: Vec<_> = lines.iter().filter(|l| l["degraded"] == "fail-open").collect();
    assert_eq!(degraded.len(), 4, "{}", logs.text());
    assert_eq!((degraded[0]["decision"].as_str(), degraded[0]["error"].as_str()), (Some("allowed"), Some("timeout")));
    assert_eq!(degraded[0]["status"], 200);
    let errors: Vec<_> = lines.iter().filter(|l| l["decision"] == "error").collect();
    assert_eq!((errors.len(), errors[0]["status"].as_u64()), (2, Some(503)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever path a client sends, the layer reports its decisions under its one route name:
    /// no label value comes from a request, so the metrics stay bounded.
    #[test]
    fn no_path_makes_a_new_label_value(paths in proptest::collection::vec("/[a-zA-Z0-9%./;_~-]{0,40}", 1..20)) {
        // Every test of this file writes through its own subscriber: a callsite first reached on
        // a thread without one could be cached as uninteresting for the others.
        let (_logs, _guard) = Logs::capture();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let clock = Arc::new(ManualClock::new(T0));
            let observer = observer(&clock);
            let store: Arc<dyn Store> = Arc::new(memory(5, &clock));
            let face = Arc::new(FaceObserver::new(&observer, store.as_ref(), &LOG));
            let layer = RateLimitLayer::builder(store.clone()).limit("per-ip", ip()).route_name("api").observe(face).build().unwrap();
            let service = tower::ServiceBuilder::new().layer(layer).service_fn(|_req: http::Request<String>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("ok"))))
            });
            let mut decided = 0;
            for p in &paths {
                // The peer where the layer looks for it by default.
                let peer = SocketAddr::from(([192, 0, 2, 1], 40000));
                let Ok(req) = http::Request::builder().uri(p.as_str()).extension(peer).body(String::new()) else {
                    continue;
                };
                let res = service.clone().oneshot(req).await.unwrap();
                decided += usize::from(res.status() != 400);
            }
            let m = Samples::parse(&observer.metrics().render(Scrape::of(store.as_ref(), 0)));
            let routes = m.label_values("sluice_decisions_total", "route");
            prop_assert!(routes.len() <= 1 && routes.iter().all(|r| r == "api"), "{:?}", routes);
            let counted = m.get("sluice_requests_total", &[("route", "api"), ("outcome", "allowed")]).unwrap_or(0.0)
                + m.get("sluice_requests_total", &[("route", "api"), ("outcome", "denied")]).unwrap_or(0.0);
            prop_assert_eq!(counted as usize, decided);
            Ok(())
        })?;
    }
}
