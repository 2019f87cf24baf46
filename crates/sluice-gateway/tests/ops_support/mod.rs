//! What the operations tests of the gateway crate share: captured JSON log lines, the metrics
//! exposition parsed, and a store whose failure mode answers as a shared store's does.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use sluice_core::Nanos;
use sluice_store::{
    Check, Degraded, KeyStats, MemoryStore, NamedPolicy, Reported, ReportedFuture, Store, StoreError, StoreFuture,
    Verdict,
};

/// Log output captured in memory.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

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
    /// Installs the gateway's JSON-lines subscriber for this thread (tests run on a
    /// single-threaded runtime, so it sees every line the servers write).
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let sink = logs.clone();
        let subscriber = sluice_gateway::observe::json_lines(move || sink.clone(), "info".parse().unwrap());
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).expect("logs are UTF-8")
    }

    /// The decision lines (target `sluice::decision`).
    pub fn decisions(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .filter(|l| l["target"] == "sluice::decision")
            .collect()
    }
}

/// The `Accept` header of Prometheus' scrapes: `/metrics` answers OpenMetrics to it.
pub const OPENMETRICS: &[(&str, &str)] = &[("accept", "application/openmetrics-text;version=1.0.0")];

/// A parsed exposition: (name, labels, value) per sample.
pub struct Samples {
    /// The text, for failure messages.
    pub text: String,
    /// Every sample.
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Samples {
    /// Parses an OpenMetrics text.
    pub fn parse(text: &str) -> Self {
        assert!(text.ends_with("# EOF\n"), "an exposition ends with # EOF");
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample {l}"));
                let (name, labels) = series.split_once('{').map_or((series, ""), |(n, r)| (n, r.trim_end_matches('}')));
                let labels = labels
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once("=\"").unwrap_or_else(|| panic!("bad label in {l}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels, value.parse().unwrap_or_else(|_| panic!("bad value in {l}")))
            })
            .collect();
        Self { text: text.to_owned(), samples }
    }

    /// The value of `name` with exactly `labels`, if exported.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.iter().find(|(n, l, _)| n == name && *l == want).map(|s| s.2)
    }

    /// Like `get`, failing with the exposition when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }

    /// `sluice_decisions_total` of one route, policy, algorithm and outcome.
    pub fn decisions(&self, route: &str, policy: &str, algorithm: &str, outcome: &str) -> f64 {
        let labels = [("route", route), ("policy", policy), ("algorithm", algorithm), ("outcome", outcome)];
        self.value("sluice_decisions_total", &labels)
    }

    /// `sluice_requests_total` of one route and outcome.
    pub fn requests(&self, route: &str, outcome: &str) -> f64 {
        self.value("sluice_requests_total", &[("route", route), ("outcome", outcome)])
    }

    /// Every value the label `label` takes in the samples of `name`.
    pub fn label_values(&self, name: &str, label: &str) -> std::collections::BTreeSet<String> {
        self.samples.iter().filter(|(n, ..)| n == name).filter_map(|(_, l, _)| l.get(label).cloned()).collect()
    }
}

/// How a [`Shared`] store answers now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// The shared store decides.
    Up = 0,
    /// It cannot; `fail-open` admits every check unchecked and reports the error.
    FailOpen = 1,
    /// It cannot; the in-process fallback decides and the error is reported.
    Local = 2,
    /// It cannot and says so (`fail-closed`).
    FailClosed = 3,
}

/// A shared store stand-in with a failure mode, reporting as `sluice_redis::RedisStore` does
/// (`decide_reported`): its state in `inner`, its fallback's in `local`.
pub struct Shared {
    /// The "shared" state.
    pub inner: MemoryStore,
    /// The fallback of [`Mode::Local`].
    pub local: MemoryStore,
    /// The current [`Mode`].
    pub mode: AtomicU8,
}

impl Shared {
    /// A store of `policies` (both the shared state and the fallback), up.
    pub fn new(inner: MemoryStore, local: MemoryStore) -> Self {
        Self { inner, local, mode: AtomicU8::new(Mode::Up as u8) }
    }

    /// Switches the failure mode.
    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            0 => Mode::Up,
            1 => Mode::FailOpen,
            2 => Mode::Local,
            _ => Mode::FailClosed,
        }
    }

    fn report(&self, checks: &[Check], at: Option<Nanos>) -> Result<Reported, StoreError> {
        let down = || StoreError::Timeout(50);
        let decide = |s: &MemoryStore| match at {
            Some(t) => s.decide_at(checks, t),
            None => s.decide_now(checks),
        };
        match self.mode() {
            Mode::Up => Ok(Reported { verdict: decide(&self.inner)?, degraded: None, answered: true }),
            Mode::FailOpen => {
                let verdict = Verdict::admitted_undecided(checks, |p| self.inner.policies()[p].policy.limit());
                Ok(Reported { verdict, degraded: Some(Degraded { mode: "fail-open", error: down() }), answered: false })
            }
            Mode::Local => {
                let verdict = decide(&self.local)?;
                Ok(Reported { verdict, degraded: Some(Degraded { mode: "local", error: down() }), answered: false })
            }
            Mode::FailClosed => Err(down()),
        }
    }
}

impl Store for Shared {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        let r = self.report(checks, at).map(|r| r.verdict);
        Box::pin(std::future::ready(r))
    }

    fn decide_reported<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> ReportedFuture<'a> {
        Box::pin(std::future::ready(self.report(checks, at)))
    }

    fn policies(&self) -> &[NamedPolicy] {
        self.inner.policies()
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn key_stats(&self) -> Vec<KeyStats> {
        self.local.key_stats()
    }

    fn ready(&self) -> bool {
        self.mode() != Mode::FailClosed
    }

    fn breaker_open(&self) -> Option<bool> {
        Some(self.mode() != Mode::Up)
    }
}

/// Serves the admin endpoints of `source` on 127.0.0.1 (random port) for the rest of the test.
pub async fn admin(source: Arc<dyn sluice_gateway::admin::Inspect>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the admin listener");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sluice_gateway::admin::serve_inspected(listener, source, std::future::pending()));
    addr
}

/// A gateway over `toml` on `store` (reporting to `observer`), serving on 127.0.0.1, with its
/// admin listener: (gateway, its address, the admin address).
pub async fn gateway_on(
    toml: &str,
    store: Arc<dyn Store>,
    observer: Arc<sluice_gateway::observe::Observer>,
) -> (Arc<sluice_gateway::gateway::Gateway>, std::net::SocketAddr, std::net::SocketAddr) {
    struct Fixed(Arc<dyn Store>);
    impl sluice_gateway::stores::StoreBuilder for Fixed {
        fn build(
            &self,
            _config: &sluice_config::Config,
            _previous: Option<&Arc<dyn Store>>,
        ) -> Result<Arc<dyn Store>, sluice_gateway::error::GatewayError> {
            Ok(self.0.clone())
        }
    }
    let config = sluice_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("test config: {e}"));
    let gateway = sluice_gateway::gateway::Gateway::with_observer(config, Box::new(Fixed(store)), observer);
    let gateway = Arc::new(gateway.expect("the gateway builds"));
    let addr = serve_on(gateway.clone()).await;
    let admin = admin(gateway.clone()).await;
    (gateway, addr, admin)
}

/// Serves `handler` (the gateway, the seed service) on 127.0.0.1 (random port) for the rest of
/// the test.
pub async fn serve_on<H: sluice_gateway::serve::Handler>(handler: Arc<H>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    let drain = std::time::Duration::from_secs(1);
    tokio::spawn(async move { sluice_gateway::serve::serve(listener, handler, std::future::pending(), drain).await });
    addr
}

/// Two routes, three policies (one shadow), a secret that must never show: what the status
/// page tests count.
pub const STATUS_CONFIG: &str = r#"
[server]
key_secret = "the status page never shows this secret"
max_in_flight = 500

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 3
window = "1m"

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 5
window = "15m"

[[policy]]
name = "watch"
algorithm = "token-bucket"
capacity = 1
refill_per_second = 0.001
shadow = true

[[route]]
name = "hello"
path = "/api/hello"
limits = [{ policy = "per-ip", key = "ip" }]

[[route]]
name = "search"
path = "/api/search"
methods = ["GET"]
limits = [{ policy = "watch", key = "ip" }, { policy = "per-account", key = "header:x-account|ip" }]

[decision_log]
sample = 0.0
"#;

/// The memory store of the configuration `toml`, reading `clock`.
pub fn memory_store(toml: &str, clock: &Arc<sluice_core::ManualClock>) -> MemoryStore {
    let cfg = sluice_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("test config: {e}"));
    let clock: Arc<dyn sluice_core::Clock> = clock.clone();
    MemoryStore::new(
        sluice_gateway::stores::named_policies(&cfg),
        sluice_gateway::stores::memory_options(&cfg.store),
        clock,
    )
}
