//! `curl …/metrics | promtool check metrics` passes on every admin listener `sluice serve`
//! runs: a gateway with every face and store feature that registers metric families (routes,
//! a shadow policy, the decision API, forward-auth, the memory store and its snapshot, Envoy's
//! rate-limit service beside it, a reload), the same on Redis (breaker, deny cache, failure
//! modes), and the default service. promtool is Debian's `prometheus` package; Redis is
//! started by the test.

mod ops_support;
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use ops_support::{Running, get, http, listening, redis_gateway, require};
use redis_support::RedisServer;
use support::TempDir;

const INSTALL: &str = "apt-get install prometheus (Debian's package provides promtool)";

/// `promtool check metrics` on `text`: whether it passed, and what it said.
fn promtool_check(text: &str) -> (bool, String) {
    require("promtool", "--version", INSTALL);
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child.stdin.take().expect("stdin is piped").write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

/// Scrapes `admin`'s `/metrics` as curl does (no `Accept`) and runs promtool on it; `families`
/// must be on the page (a family that is not there is not checked).
fn passes_promtool(admin: SocketAddr, families: &[&str]) {
    let page = get(admin, "/metrics");
    assert_eq!(page.status, 200);
    assert!(page.head.contains("content-type: text/plain; version=0.0.4"), "{}", page.head);
    for family in families {
        assert!(page.body.contains(&format!("# TYPE {family} ")), "no {family} on the page:\n{}", page.body);
    }
    for help in page.body.lines().filter(|l| l.starts_with("# HELP ")) {
        assert!(!help.ends_with(".."), "{help}");
    }
    let (ok, said) = promtool_check(&page.body);
    assert!(ok, "promtool check metrics failed:\n{said}\non:\n{}", page.body);
    assert!(said.trim().is_empty(), "promtool found something to say:\n{said}");
}

/// The families every gateway page has once a route decided and denied.
const GATEWAY: [&str; 12] = [
    "sluice_decisions_total",
    "sluice_requests_total",
    "sluice_decision_duration_seconds",
    "sluice_store_latency_seconds",
    "sluice_store_errors_total",
    "sluice_shed_total",
    "sluice_config_reloads_total",
    "sluice_decision_log_dropped_total",
    "sluice_in_flight",
    "sluice_max_in_flight",
    "sluice_store_ready",
    "process_cpu_seconds_total",
];

#[test]
fn promtool_passes_a_memory_gateway_with_every_face() {
    let dir = TempDir::new("promtool-memory");
    std::fs::create_dir_all(dir.dir().join("ratelimit")).unwrap();
    dir.write(
        "ratelimit/edge.yaml",
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n",
    );
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
key_secret = "the key secret of the promtool test"
decision_api = true

[admin]
listen = "127.0.0.1:0"

[store]
kind = "memory"
snapshot = "state"
snapshot_interval = "100ms"

[rls]
listen = "127.0.0.1:0"
descriptors = {descriptors:?}

[forward_auth]

[identity.jwt]
hs256_secret = "the HS256 secret of the promtool test"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[policy]]
name = "trial"
algorithm = "sliding-window"
limit = 1
window = "1h"
shadow = true

[[route]]
name = "hello"
path = "/api/hello"
limits = [{{ policy = "per-ip", key = "jwt:sub|ip" }}, {{ policy = "trial", key = "ip" }}]
"#,
        descriptors = dir.path("ratelimit"),
    );
    let path = dir.write("sluice.toml", &config);
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let (gateway, admin) = sluice.gateway_addresses();
    let admin = admin.expect("the admin listener");
    let rls = listening(&sluice.line_with("sluice rls listening on").replace(" on ", " on http://"));

    assert_eq!([get(gateway, "/api/hello").status, get(gateway, "/api/hello").status], [200, 429]);
    assert_eq!(get(gateway, "/elsewhere").status, 404);
    let check = r#"{"policy":"per-ip","key":"k"}"#;
    assert_eq!(http(gateway, "POST", "/v1/check", "Content-Type: application/json\r\n", check).status, 200);
    let asked = "X-Forwarded-Method: GET\r\nX-Forwarded-Uri: /api/hello\r\nX-Forwarded-For: 198.51.100.7\r\n";
    assert_eq!(http(gateway, "GET", "/v1/authz", asked, "").status, 200);
    let descriptor = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
    assert_eq!(http(rls, "POST", "/json", "Content-Type: application/json\r\n", descriptor).status, 200);
    let hangup = Command::new("kill").args(["-HUP", &sluice.child.id().to_string()]).status().unwrap();
    assert!(hangup.success());
    sluice.line_with("\"event\":\"reload\"");

    let mut families = GATEWAY.to_vec();
    families.extend([
        "sluice_keys",
        "sluice_evictions_total",
        "sluice_snapshot_writes_total",
        "process_resident_memory_bytes",
    ]);
    passes_promtool(admin, &families);
    // The rate-limit service's own port: its families, in the same two formats.
    passes_promtool(rls, &["sluice_rls_requests_total", "sluice_rls_descriptors_total"]);
}

#[test]
fn promtool_passes_a_redis_gateway_and_its_failure_modes() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("promtool-redis");
    let path = dir.write("sluice.toml", &redis_gateway(&redis.url(), "local"));
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let (gateway, admin) = sluice.gateway_addresses();
    let admin = admin.expect("the admin listener");
    let statuses: Vec<u16> = (0..3).map(|_| get(gateway, "/api/hello").status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    // Redis goes away: the local fallback decides, the breaker opens.
    redis.kill();
    for _ in 0..5 {
        get(gateway, "/api/hello");
    }
    let mut families = GATEWAY.to_vec();
    families.extend(["sluice_degraded_total", "sluice_breaker_open", "sluice_deny_cache_hits_total"]);
    passes_promtool(admin, &families);
}

#[test]
fn promtool_passes_the_default_service() {
    let env = [("PORT", "0"), ("ADMIN_PORT", "0"), ("RATE_LIMIT_CAPACITY", "1")];
    let sluice = Running::start(&["serve"], &env);
    let service = listening(&sluice.line_with("sluice listening on"));
    let admin = listening(&sluice.line_with("sluice admin listening on"));
    assert_eq!([get(service, "/api/hello").status, get(service, "/api/hello").status], [200, 429]);
    passes_promtool(admin, &["sluice_decisions_total", "sluice_requests_total", "sluice_keys"]);
}
