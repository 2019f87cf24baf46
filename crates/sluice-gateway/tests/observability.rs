//! Metrics, decision logs and the admin listener, against a real gateway and a real admin
//! listener on port 0, through a real HTTP client. Logs are captured in-process: each test runs
//! on a single-threaded runtime, so a thread-local JSON subscriber sees every line the servers
//! write.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sluice_config::{Config, KeySource, KeySpec};
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC, Nanos};
use sluice_gateway::admin::serve_admin;
use sluice_gateway::error::GatewayError;
use sluice_gateway::gateway::Gateway;
use sluice_gateway::observe::{Observer, SampleSource, ThreadRandom, json_lines};
use sluice_gateway::stores::StoreBuilder;
use sluice_gateway::stores::{MemoryStores, memory_options, named_policies};
use sluice_http::identity::Client as ClientId;
use sluice_http::keys::{KeyBuilder, RequestFacts};
use sluice_store::{Check, KeyHasher, KeyStats, MemoryStore, NamedPolicy, Store, StoreError, StoreFuture};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const T0: Nanos = 1_700_000_000 * NANOS_PER_SEC;

// ---------------------------------------------------------------------------------------------
// Harness: a gateway and its admin listener, a client, captured logs.

/// Log output captured in memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Installs a JSON-lines subscriber (the gateway's format) for this thread.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let sink = logs.clone();
        let guard = tracing::subscriber::set_default(json_lines(move || sink.clone(), "info".parse().unwrap()));
        (logs, guard)
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("logs are UTF-8")
    }

    /// Every line, parsed (each must be one JSON object).
    fn lines(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
            .collect()
    }

    /// Lines of `target`.
    fn of(&self, target: &str) -> Vec<serde_json::Value> {
        self.lines().into_iter().filter(|l| l["target"] == target).collect()
    }
}

struct Harness {
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    admin: SocketAddr,
    client: HyperClient<HttpConnector, Full<Bytes>>,
    stops: Vec<oneshot::Sender<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
    }
}

struct Resp {
    status: u16,
    content_type: String,
    body: String,
}

impl Resp {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn config(toml: &str) -> Config {
    sluice_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("test config: {e}"))
}

async fn listen() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let a = l.local_addr().unwrap();
    (l, a)
}

impl Harness {
    async fn start(toml: &str, observer: Observer, factory: Box<dyn StoreBuilder>) -> Self {
        let gateway = Arc::new(Gateway::with_observer(config(toml), factory, Arc::new(observer)).expect("gateway"));
        let (listener, addr) = listen().await;
        let (admin_listener, admin) = listen().await;
        let (stop_gw, gw_stopped) = oneshot::channel::<()>();
        let (stop_admin, admin_stopped) = oneshot::channel::<()>();
        tokio::spawn(sluice_gateway::serve::serve(
            listener,
            gateway.clone(),
            async move {
                let _ = gw_stopped.await;
            },
            Duration::from_secs(5),
        ));
        tokio::spawn(serve_admin(admin_listener, gateway.clone(), async move {
            let _ = admin_stopped.await;
        }));
        let client = HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        Self { gateway, addr, admin, client, stops: vec![stop_gw, stop_admin] }
    }

    /// A memory-store gateway whose store reads `store_clock`.
    async fn memory(toml: &str, observer: Observer, store_clock: Arc<ManualClock>) -> Self {
        Self::start(toml, observer, Box::new(MemoryStores::new(store_clock))).await
    }

    async fn send(&self, to: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut b = Request::builder().method(method).uri(format!("http://{to}{path}"));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .expect("request timed out")
            .expect("request failed");
        let status = res.status().as_u16();
        let content_type =
            res.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        Resp { status, content_type, body: String::from_utf8_lossy(&body).into_owned() }
    }

    async fn get(&self, path: &str) -> Resp {
        self.send(self.addr, "GET", path, &[], "").await
    }

    async fn admin(&self, path: &str) -> Resp {
        self.send(self.admin, "GET", path, &[], "").await
    }

    async fn metrics(&self) -> Metrics {
        let accept = [("accept", "application/openmetrics-text;version=1.0.0")];
        let r = self.send(self.admin, "GET", "/metrics", &accept, "").await;
        assert_eq!(r.status, 200);
        assert!(r.content_type.starts_with("application/openmetrics-text"), "{}", r.content_type);
        Metrics::parse(&r.body)
    }
}

// ---------------------------------------------------------------------------------------------
// The exposition, parsed.

struct Metrics {
    text: String,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Metrics {
    fn parse(text: &str) -> Self {
        assert!(text.ends_with("# EOF\n"), "exposition must end with # EOF");
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {l}"));
                let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {l}"));
                let (name, labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once("=\"").unwrap_or_else(|| panic!("bad label in {l}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels, value)
            })
            .collect();
        Self { text: text.to_owned(), samples }
    }

    /// The value of the series `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.iter().find(|(n, l, _)| n == name && *l == want).map(|s| s.2)
    }

    /// Like `get`, failing with the exposition when the series is absent.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }

    /// The sum of every series of `name` whose labels include `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|s| s.2)
            .sum()
    }
}

fn decisions(m: &Metrics, route: &str, policy: &str, algorithm: &str, outcome: &str) -> f64 {
    m.value(
        "sluice_decisions_total",
        &[("route", route), ("policy", policy), ("algorithm", algorithm), ("outcome", outcome)],
    )
}

fn requests(m: &Metrics, route: &str, outcome: &str) -> f64 {
    m.value("sluice_requests_total", &[("route", route), ("outcome", outcome)])
}

/// An observer whose decision log cap reads `clock` and whose sampling draws `random`.
fn observer(clock: Arc<ManualClock>, random: Arc<dyn SampleSource>) -> Observer {
    Observer::with_sources(clock, random)
}

// ---------------------------------------------------------------------------------------------
// Exact counts.

const SEQUENCE: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 3
window = "1m"

[[policy]]
name = "watch"
algorithm = "fixed-window"
limit = 1
window = "1m"
shadow = true

[[policy]]
name = "per-user"
algorithm = "sliding-log"
limit = 2
window = "1m"

[[route]]
name = "search"
path = "/api/search"
limits = [{ policy = "per-ip", key = "ip" }, { policy = "watch", key = "ip" }]

[[route]]
name = "login"
path = "/login"
methods = ["POST"]
limits = [{ policy = "per-user", key = "header:x-user" }]

[decision_log]
sample = 0.0
"#;

#[tokio::test]
async fn after_a_known_sequence_metrics_show_exactly_the_expected_counts() {
    let (_logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let h = Harness::memory(SEQUENCE, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await;

    // Before any traffic every series of the configuration exists, at zero.
    let m = h.metrics().await;
    assert_eq!(decisions(&m, "search", "per-ip", "fixed-window", "allowed"), 0.0);
    assert_eq!(decisions(&m, "/v1/check", "per-user", "sliding-log", "denied"), 0.0);
    assert_eq!(m.value("sluice_config_reloads_total", &[("result", "refused")]), 0.0);

    let statuses = |v: Vec<Resp>| v.into_iter().map(|r| r.status).collect::<Vec<_>>();
    let mut search = Vec::new();
    for _ in 0..4 {
        search.push(h.get("/api/search").await);
    }
    assert_eq!(statuses(search), [200, 200, 200, 429]);
    let mut login = Vec::new();
    for _ in 0..3 {
        login.push(h.send(h.addr, "POST", "/login", &[("x-user", "alice")], "").await);
    }
    assert_eq!(statuses(login), [200, 200, 429]);
    assert_eq!(h.get("/nowhere").await.status, 404);
    let mut api = Vec::new();
    for _ in 0..3 {
        api.push(h.send(h.addr, "POST", "/v1/check", &[], r#"{"policy":"per-user","key":"k-1"}"#).await);
    }
    assert_eq!(statuses(api), [200, 200, 429]);

    let m = h.metrics().await;
    // Each limit's own decision. The shadow limit admits the first search and would deny the
    // next two; the fourth, denied by the enforced limit, is not charged to it (as if enforced:
    // all or nothing) and not counted for it.
    assert_eq!(decisions(&m, "search", "per-ip", "fixed-window", "allowed"), 3.0);
    assert_eq!(decisions(&m, "search", "per-ip", "fixed-window", "denied"), 1.0);
    assert_eq!(decisions(&m, "search", "watch", "fixed-window", "allowed"), 1.0);
    assert_eq!(decisions(&m, "search", "watch", "fixed-window", "shadow_denied"), 2.0);
    assert_eq!(decisions(&m, "search", "watch", "fixed-window", "denied"), 0.0);
    assert_eq!(decisions(&m, "login", "per-user", "sliding-log", "allowed"), 2.0);
    assert_eq!(decisions(&m, "login", "per-user", "sliding-log", "denied"), 1.0);
    assert_eq!(decisions(&m, "/v1/check", "per-user", "sliding-log", "allowed"), 2.0);
    assert_eq!(decisions(&m, "/v1/check", "per-user", "sliding-log", "denied"), 1.0);
    assert_eq!(decisions(&m, "/v1/check", "per-ip", "fixed-window", "allowed"), 0.0);
    // Nothing else was counted: 4 searches x 2 limits (less the shadow one not decided) + 3
    // logins + 3 checks.
    assert_eq!(m.sum("sluice_decisions_total", &[]), 13.0);
    assert_eq!(m.sum("sluice_decisions_total", &[("outcome", "error")]), 0.0);

    assert_eq!(requests(&m, "search", "allowed"), 3.0);
    assert_eq!(requests(&m, "search", "denied"), 1.0);
    assert_eq!(requests(&m, "login", "allowed"), 2.0);
    assert_eq!(requests(&m, "login", "denied"), 1.0);
    assert_eq!(requests(&m, "/v1/check", "denied"), 1.0);
    assert_eq!(requests(&m, "unmatched", "unlimited"), 1.0);

    // Memory store: keys per policy (one IP; alice and the API key "k-1" under per-user).
    assert_eq!(m.value("sluice_keys", &[("policy", "per-ip")]), 1.0);
    assert_eq!(m.value("sluice_keys", &[("policy", "watch")]), 1.0);
    assert_eq!(m.value("sluice_keys", &[("policy", "per-user")]), 2.0);
    assert_eq!(m.value("sluice_evictions_total", &[("policy", "per-ip"), ("reason", "lru")]), 0.0);

    assert_eq!(m.value("sluice_in_flight", &[]), 0.0);
    assert_eq!(m.value("sluice_shed_total", &[]), 0.0);
    assert_eq!(m.value("sluice_store_ready", &[("store", "memory")]), 1.0);
    assert_eq!(m.value("sluice_decision_log_dropped_total", &[]), 0.0);
    // No label value is a raw path outside the configuration, an IP or a key.
    assert!(!m.text.contains("/nowhere") && !m.text.contains("127.0.0.1") && !m.text.contains("alice"));
}

#[tokio::test]
async fn the_histograms_exist_and_count_every_decision() {
    let (_logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let h = Harness::memory(SEQUENCE, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await;
    for _ in 0..5 {
        h.get("/api/search").await;
    }
    h.send(h.addr, "POST", "/login", &[("x-user", "bob")], "").await;
    h.get("/unrouted").await; // no decision

    let m = h.metrics().await;
    for name in ["sluice_decision_duration_seconds", "sluice_store_latency_seconds"] {
        assert!(m.text.contains(&format!("# TYPE {name} histogram")), "{name} is a histogram");
        let store = [("store", "memory")];
        assert_eq!(m.value(&format!("{name}_count"), &store), 6.0, "{name}: one per decided request");
        let inf = m.value(&format!("{name}_bucket"), &[("store", "memory"), ("le", "+Inf")]);
        assert_eq!(inf, 6.0);
        assert!(m.value(&format!("{name}_sum"), &store) > 0.0);
        // Cumulative buckets never decrease.
        let mut buckets: Vec<(f64, f64)> = m
            .samples
            .iter()
            .filter(|(n, l, _)| *n == format!("{name}_bucket") && l["le"] != "+Inf")
            .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap(), *v))
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.len() >= 10);
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert!(buckets.last().unwrap().1 <= inf);
    }
}

// ---------------------------------------------------------------------------------------------
// Decision log lines.

const RESET: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]
key_secret = "a shared secret of the test, 32+"

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 1
window = "15m"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 100
refill_per_second = 1

[[policy]]
name = "per-api-key"
algorithm = "fixed-window"
limit = 100
window = "1h"

[[route]]
name = "password-reset"
path = "/api/password-reset"
methods = ["POST"]
limits = [
  { policy = "per-account", key = "json:/email" },
  { policy = "per-ip", key = "ip" },
  { policy = "per-api-key", key = "header:x-api-key" },
]

[decision_log]
sample = 1.0
denials_per_second = 100
"#;

#[tokio::test]
async fn a_denial_line_names_its_policy_and_carries_no_raw_ip_email_or_api_key() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let h = Harness::memory(RESET, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await;
    let headers = [
        ("x-forwarded-for", "203.0.113.77"),
        ("x-api-key", "sk_live_9f8e7d6c5b4a"),
        ("content-type", "application/json"),
    ];
    let body = r#"{"email": "Victim.Person@Example.com"}"#;
    let first = h.send(h.addr, "POST", "/api/password-reset", &headers, body).await;
    let second = h.send(h.addr, "POST", "/api/password-reset", &headers, body).await;
    assert_eq!((first.status, second.status), (200, 429));

    let lines = logs.of("sluice::decision");
    assert_eq!(lines.len(), 2, "sample = 1: both decisions are logged: {lines:?}");
    let denial = &lines[1];
    assert_eq!(denial["decision"], "denied");
    assert_eq!(denial["policy"], "per-account", "the line names the limit that denied");
    assert_eq!(denial["algorithm"], "sliding-log");
    assert_eq!(denial["route"], "password-reset");
    assert_eq!(denial["key_type"], "json");
    assert_eq!(denial["limit"], 1);
    assert_eq!(denial["remaining"], 0);
    assert_eq!(denial["retry_after_ms"], 15 * 60 * 1000, "the manual store clock did not move");
    assert_eq!(denial["status"], 429);
    assert_eq!(denial["store"], "memory");
    assert_eq!(denial["shadow"], false);
    assert_eq!(denial["level"], "INFO");
    assert!(denial["timestamp"].as_str().is_some_and(|t| t.starts_with("20")), "{denial}");
    assert!(denial["store_latency_us"].is_u64());
    assert_eq!(lines[0]["decision"], "allowed");
    assert_eq!(lines[0]["status"], 200);

    // The key hash is the keyed hash the store saw (so an operator holding the secret can find
    // an account's lines), 128 bits in hex.
    let hasher = KeyHasher::from_secret(b"a shared secret of the test, 32+");
    let json = sluice_http::body_key::KeyedBody::Json(serde_json::from_str(body).unwrap());
    let ip = "203.0.113.77".parse().unwrap();
    let client = ClientId { ip, grouped: ip, peer_trusted: true };
    let facts = RequestFacts {
        method: "POST",
        path: "/api/password-reset",
        route: "password-reset",
        client: &client,
        headers: &http::HeaderMap::new(),
        tls: None,
        body: Some(&json),
    };
    let spec = KeySpec { parts: vec![vec![KeySource::Json("/email".into())]] };
    let expected = KeyBuilder::new(hasher, None).key("per-account", &spec, &facts).unwrap().0.to_hex();
    assert_eq!(denial["key_hash"], expected.as_str());
    assert_eq!(expected.len(), 32);

    // Nothing the client sent that identifies it reaches the log, in any case.
    let all = logs.text().to_lowercase();
    for raw in ["203.0.113.77", "victim.person@example.com", "victim.person", "sk_live_9f8e7d6c5b4a", "9f8e7d6c5b4a"] {
        assert!(!all.contains(raw), "{raw} leaked into the logs:\n{all}");
    }
}

#[tokio::test]
async fn ten_thousand_denials_in_one_second_log_no_more_lines_than_the_cap_allows() {
    let (logs, _guard) = Logs::capture();
    let log_clock = Arc::new(ManualClock::new(T0));
    let store_clock = Arc::new(ManualClock::new(T0));
    let toml = r#"
[[policy]]
name = "tiny"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
name = "flood"
path = "/flood"
limits = [{ policy = "tiny", key = "ip" }]

[decision_log]
sample = 0.0
denials_per_second = 50
"#;
    let h = Harness::memory(toml, observer(log_clock.clone(), Arc::new(ThreadRandom)), store_clock).await;
    assert_eq!(h.get("/flood").await.status, 200);
    // 10,000 denials, 100 us apart on the cap's clock: the last comes 0.9999 s after the first.
    let mut denied = 0;
    for _ in 0..10_000 {
        denied += usize::from(h.get("/flood").await.status == 429);
        log_clock.advance(100_000);
    }
    assert_eq!(denied, 10_000);

    // The cap holds one second's worth (50) and refills one line per 20 ms: 49 more by 0.9999 s.
    let lines = logs.of("sluice::decision");
    assert_eq!(lines.len(), 50 + 49);
    assert!(lines.iter().all(|l| l["decision"] == "denied" && l["policy"] == "tiny"));
    let m = h.metrics().await;
    assert_eq!(m.value("sluice_decision_log_dropped_total", &[]), (10_000 - 99) as f64);
    assert_eq!(decisions(&m, "flood", "tiny", "fixed-window", "denied"), 10_000.0);
}

/// Replays a fixed cycle of draws.
#[derive(Debug)]
struct Cycle(Vec<u64>, Mutex<usize>);

impl SampleSource for Cycle {
    fn next_u64(&self) -> u64 {
        let mut i = self.1.lock().unwrap();
        *i += 1;
        self.0[(*i - 1) % self.0.len()]
    }
}

#[tokio::test]
async fn admitted_decisions_are_sampled_by_the_injected_draws() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let toml = r#"
[[policy]]
name = "roomy"
algorithm = "token-bucket"
capacity = 1000
refill_per_second = 1

[[route]]
path = "/api/hello"
limits = [{ policy = "roomy", key = "ip" }]

[decision_log]
sample = 0.25
"#;
    // A quarter of the range: of the cycle below, the first draw is sampled, the next three not.
    let draws = vec![0, 1 << 62, u64::MAX / 2, u64::MAX];
    let h = Harness::memory(toml, observer(clock.clone(), Arc::new(Cycle(draws, Mutex::new(0)))), clock).await;
    for _ in 0..20 {
        assert_eq!(h.get("/api/hello").await.status, 200);
    }
    let lines = logs.of("sluice::decision");
    assert_eq!(lines.len(), 5);
    // Requests 1, 5, 9, ... were sampled: their remaining allowance tells which.
    let remaining: Vec<u64> = lines.iter().map(|l| l["remaining"].as_u64().unwrap()).collect();
    assert_eq!(remaining, [999, 995, 991, 987, 983]);
    assert!(lines.iter().all(|l| l["decision"] == "allowed" && l["route"] == "/api/hello" && l["key_type"] == "ip"));
}

// ---------------------------------------------------------------------------------------------
// Readiness, store failures, the admin endpoints, reloads, shedding.

/// A real memory store behind a switch: when off, it reports itself unready and cannot decide.
struct Switchable {
    inner: MemoryStore,
    up: AtomicBool,
}

impl Store for Switchable {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        if self.up.load(Ordering::SeqCst) {
            self.inner.decide(checks, at)
        } else {
            Box::pin(std::future::ready(Err(StoreError::Unavailable("switched off".into()))))
        }
    }

    fn policies(&self) -> &[NamedPolicy] {
        self.inner.policies()
    }

    fn kind(&self) -> &'static str {
        "switchable"
    }

    fn key_stats(&self) -> Vec<KeyStats> {
        self.inner.key_stats()
    }

    fn ready(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }
}

struct SwitchStores(Arc<Switchable>);

impl StoreBuilder for SwitchStores {
    fn build(&self, _config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        Ok(self.0.clone())
    }
}

const HELLO: &str = r#"
[server]
key_secret = "never shown on the admin listener"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 1

[[route]]
name = "hello"
path = "/api/hello"
limits = [{ policy = "per-ip", key = "ip" }]

[decision_log]
sample = 0.0
"#;

#[tokio::test]
async fn readyz_turns_unready_when_the_store_cannot_serve_and_failures_are_counted_and_logged() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = config(HELLO);
    let store = Arc::new(Switchable {
        inner: MemoryStore::new(named_policies(&cfg), memory_options(&cfg.store), clock.clone() as Arc<dyn Clock>),
        up: AtomicBool::new(true),
    });
    let obs = observer(clock.clone(), Arc::new(ThreadRandom));
    let h = Harness::start(HELLO, obs, Box::new(SwitchStores(store.clone()))).await;

    let ready = h.admin("/readyz").await;
    assert_eq!((ready.status, ready.json()["status"].as_str()), (200, Some("ready")));
    assert_eq!(h.get("/api/hello").await.status, 200);

    store.up.store(false, Ordering::SeqCst);
    let unready = h.admin("/readyz").await;
    assert_eq!(unready.status, 503);
    assert_eq!(unready.json()["status"], "unready");
    assert_eq!(unready.json()["store"], "switchable");
    assert_eq!(h.admin("/healthz").await.status, 200, "alive even when not ready");
    for _ in 0..3 {
        let r = h.get("/api/hello").await;
        assert_eq!((r.status, r.json()["error"].as_str()), (503, Some("limiter_unavailable")));
    }
    let m = h.metrics().await;
    assert_eq!(m.value("sluice_store_ready", &[("store", "switchable")]), 0.0);
    assert_eq!(m.value("sluice_store_errors_total", &[("store", "switchable"), ("kind", "unavailable")]), 3.0);
    assert_eq!(decisions(&m, "hello", "per-ip", "token-bucket", "error"), 3.0);
    assert_eq!(decisions(&m, "hello", "per-ip", "token-bucket", "allowed"), 1.0);
    assert_eq!(requests(&m, "hello", "error"), 3.0);
    assert_eq!(m.value("sluice_decision_duration_seconds_count", &[("store", "switchable")]), 4.0);

    store.up.store(true, Ordering::SeqCst);
    assert_eq!(h.admin("/readyz").await.status, 200);
    assert_eq!(h.get("/api/hello").await.status, 200);

    // One event when failures start, one when they end; a capped decision line per failure.
    let events: Vec<String> =
        logs.of("sluice::event").iter().map(|e| e["event"].as_str().unwrap().to_owned()).collect();
    assert_eq!(events, ["store_failure", "store_recovered"]);
    let failure = &logs.of("sluice::event")[0];
    assert_eq!((failure["kind"].as_str(), failure["level"].as_str()), (Some("unavailable"), Some("WARN")));
    let errors: Vec<_> = logs.of("sluice::decision").into_iter().filter(|l| l["decision"] == "error").collect();
    assert_eq!(errors.len(), 3);
    assert_eq!(errors[0]["error"], "unavailable");
    assert_eq!(errors[0]["status"], 503);
    assert_eq!(errors[0]["policy"], "per-ip");
}

#[tokio::test]
async fn the_admin_listener_serves_config_without_secrets_and_refuses_the_rest() {
    let (_logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let h = Harness::memory(HELLO, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await;

    let c = h.admin("/config").await;
    assert_eq!(c.status, 200);
    assert!(!c.body.contains("never shown"), "the key secret leaked: {}", c.body);
    let v = c.json();
    assert_eq!(v["server"]["key_secret"], "<redacted>");
    assert_eq!(v["routes"][0]["name"], "hello");
    assert_eq!(v["routes"][0]["limits"][0]["policy"], "per-ip");
    assert_eq!(v["policies"][0]["capacity"], 5);
    assert_eq!(v["decision_log"]["sample"], 0.0);

    assert_eq!(h.admin("/nothing-here").await.status, 404);
    let post = h.send(h.admin, "POST", "/metrics", &[], "").await;
    assert_eq!(post.status, 405);
    // Admin paths are not served on the client listener.
    assert_eq!(h.get("/metrics").await.status, 404);
    // Process metrics, where /proc exists.
    if std::path::Path::new("/proc/self/stat").exists() {
        let m = h.metrics().await;
        assert!(m.value("process_resident_memory_bytes", &[]) > 0.0);
        assert!(m.value("process_open_fds", &[]) >= 3.0);
        assert!(m.get("process_cpu_seconds_total", &[]).is_some());
        assert!(m.value("process_start_time_seconds", &[]) > 1.0e9);
    }
}

#[tokio::test]
async fn reloads_are_counted_and_logged_by_result() {
    let (logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    let h = Harness::memory(HELLO, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await;

    let renamed = HELLO.replace("name = \"hello\"", "name = \"greeting\"");
    h.gateway.reload(config(&renamed)).expect("a valid reload applies");
    let new_secret = HELLO.replace("never shown on the admin listener", "another secret entirely, 32 bytes");
    assert!(h.gateway.reload(config(&new_secret)).is_err(), "the key secret cannot change on reload");
    assert_eq!(h.get("/api/hello").await.status, 200);

    let m = h.metrics().await;
    assert_eq!(m.value("sluice_config_reloads_total", &[("result", "ok")]), 1.0);
    assert_eq!(m.value("sluice_config_reloads_total", &[("result", "refused")]), 1.0);
    // After the reload, the route's decisions count under its new name.
    assert_eq!(decisions(&m, "greeting", "per-ip", "token-bucket", "allowed"), 1.0);
    assert_eq!(decisions(&m, "hello", "per-ip", "token-bucket", "allowed"), 0.0);

    let reloads: Vec<_> = logs.of("sluice::event").into_iter().filter(|e| e["event"] == "reload").collect();
    assert_eq!(reloads.len(), 2);
    assert_eq!(reloads[0]["result"], "ok");
    assert_eq!(reloads[1]["result"], "refused");
    assert!(reloads[1]["error"].as_str().unwrap().contains("key_secret"));
    assert!(!logs.text().contains("another secret entirely"));
}

#[tokio::test]
async fn shed_requests_and_requests_in_flight_are_counted() {
    let (_logs, _guard) = Logs::capture();
    let clock = Arc::new(ManualClock::new(T0));
    // Shaping holds the second request for a second (of real time): one request in flight.
    let toml = r#"
[server]
max_in_flight = 1

[[policy]]
name = "paced"
algorithm = "leaky-bucket"
rate_per_second = 1
capacity = 5
mode = "shape"

[[route]]
path = "/paced"
limits = [{ policy = "paced", key = "const:all" }]
"#;
    let h = Arc::new(Harness::memory(toml, observer(clock.clone(), Arc::new(ThreadRandom)), clock).await);
    assert_eq!(h.get("/paced").await.status, 200);
    let held = {
        let h = h.clone();
        tokio::spawn(async move { h.get("/paced").await.status })
    };
    // Wait (bounded) until the held request is in flight, then observe it and be shed.
    for _ in 0..200 {
        if h.gateway.in_flight() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let m = h.metrics().await;
    assert_eq!(m.value("sluice_in_flight", &[]), 1.0);
    let shed = h.get("/paced").await;
    assert_eq!(shed.status, 503);
    assert_eq!(shed.json()["error"], "overloaded");
    assert_eq!(held.await.unwrap(), 200);

    let m = h.metrics().await;
    assert_eq!(m.value("sluice_shed_total", &[]), 1.0);
    assert_eq!(m.value("sluice_in_flight", &[]), 0.0);
    assert_eq!(requests(&m, "/paced", "allowed"), 2.0);
}
