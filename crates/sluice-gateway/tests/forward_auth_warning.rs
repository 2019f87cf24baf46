//! The warning a configuration earns when forward-auth cannot decide one of its routes, read
//! from the gateway's own log format.
//!
//! Alone in its test binary on purpose: `tracing` caches per call site whether anyone listens,
//! and a scoped subscriber in one test races with other tests' threads hitting the same call
//! site with none. With one test in the process, nothing else can reach it first.

mod common;

use std::sync::Arc;

use common::*;
use sluice_gateway::gateway::Gateway;
use sluice_gateway::observe::json_lines;

/// A forward-auth face and a route keyed on the body, which a subrequest does not carry.
const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1"]

[forward_auth]
path = "/v1/authz"

[[policy]]
name = "per-account"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
name = "reset"
path = "/api/password-reset"
methods = ["POST"]
limits = [{ policy = "per-account", key = "json:/email" }]
"#;

#[test]
fn loading_a_configuration_warns_of_routes_forward_auth_cannot_decide() {
    // The gateway's log format, written to a file of this test's own.
    let path = std::env::temp_dir().join(format!("sluice-forward-auth-warn-{}.log", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let subscriber = json_lines(move || file.try_clone().unwrap(), "warn".parse().unwrap());
    let clock = Arc::new(sluice_core::ManualClock::new(T0));
    tracing::subscriber::with_default(subscriber, || {
        let stores = Box::new(sluice_gateway::stores::MemoryStores::new(clock.clone()));
        let gateway = Gateway::new(config(CONFIG), stores).unwrap();
        let quiet = CONFIG.replace(r#"key = "json:/email""#, r#"key = "header:x-email""#);
        gateway.reload(config(&quiet)).unwrap();
    });
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let warnings: Vec<_> = lines.iter().filter(|l| l["event"] == "forward_auth_undecidable").collect();
    assert_eq!(warnings.len(), 1, "once for the first load, not for the reload without it: {text}");
    assert_eq!(warnings[0]["level"], "WARN");
    assert_eq!(warnings[0]["target"], "sluice::event");
    assert!(warnings[0]["message"].as_str().unwrap().contains("reset"), "{text}");
}
