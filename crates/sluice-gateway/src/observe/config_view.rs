//! The resolved configuration as JSON for `GET /config`, with secrets redacted.

use serde_json::{Value, json};
use sluice_config::{Config, OnDeny, OnError, REDACTED, SecretUrl, StoreConfig};
use sluice_core::{LeakMode, NANOS_PER_MILLI, Policy};

/// The configuration in force, as the gateway understood it: defaults filled in, durations in
/// milliseconds, policies by name. `server.key_secret` is redacted (only whether one is set
/// shows), and so is any password in a store URL.
///
/// ```
/// let c = sluice_config::parse("s.toml", "[server]\nkey_secret = \"0123456789abcdef-secret\"\n").unwrap();
/// let v = sluice_gateway::observe::config_json(&c);
/// assert_eq!(v["server"]["key_secret"], "<redacted>");
/// assert!(!v.to_string().contains("0123456789abcdef-secret"));
/// ```
pub fn config_json(c: &Config) -> Value {
    let s = &c.server;
    json!({
        "server": {
            "listen": s.listen.to_string(),
            "trusted_proxies": s.trusted_proxies.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "ipv6_prefix": s.ipv6_prefix,
            "headers": s.headers.iter().map(|h| h.name()).collect::<Vec<_>>(),
            "deny_status": s.deny_status,
            "on_deny": match s.on_deny { OnDeny::Respond => "respond", OnDeny::Drop => "drop" },
            "max_in_flight": s.max_in_flight,
            "user_header": s.user_header,
            "max_body_bytes": s.max_body_bytes,
            "key_secret": s.key_secret.as_ref().map(|_| REDACTED),
        },
        "decision_api": {
            "enabled": c.decision_api.enabled,
            "allow": c.decision_api.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "token": c.decision_api.token.as_ref().map(|_| REDACTED),
            "max_cost": c.decision_api.max_cost,
        },
        "upstream": c.upstream.as_ref().map(|u| json!({
            "url": SecretUrl::new(u.url.clone()).redacted(),
            "timeout_ms": u.timeout / NANOS_PER_MILLI,
        })),
        "policies": c.policies.iter().map(|p| policy_json(&p.name, &p.policy, p.shadow)).collect::<Vec<_>>(),
        "routes": c.routes.iter().map(|r| json!({
            "name": r.name,
            "path": r.path.to_string(),
            "methods": r.methods,
            "limits": r.limits.iter().map(|l| json!({
                "policy": c.policies.get(l.policy).map(|p| p.name.as_str()),
                "key": l.key.to_string(),
                "cost": l.cost,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "store": store_json(&c.store),
        "admin": c.admin.as_ref().map(|a| json!({ "listen": a.listen.to_string() })),
        "decision_log": {
            "sample": c.decision_log.sample,
            "denials_per_second": c.decision_log.denials_per_second,
        },
    })
}

/// A policy as `/config` shows it: its algorithm and parameters (durations in milliseconds,
/// rates per second), with its `name` and `shadow` flag.
pub fn policy_json(name: &str, p: &Policy, shadow: bool) -> Value {
    let mut v = policy_params(p);
    v["name"] = json!(name);
    v["shadow"] = json!(shadow);
    v
}

fn policy_params(p: &Policy) -> Value {
    let per_second = |interval: u64| 1e9 / interval as f64;
    match p {
        Policy::FixedWindow(_) | Policy::SlidingLog(_) | Policy::SlidingWindow(_) => json!({
            "algorithm": p.name(),
            "limit": p.limit(),
            "window_ms": p.window() / NANOS_PER_MILLI,
        }),
        Policy::TokenBucket(t) => json!({
            "algorithm": p.name(),
            "capacity": t.capacity(),
            "refill_per_second": per_second(t.interval()),
        }),
        Policy::LeakyBucket(l) => {
            let (mode, delay) = match l.mode() {
                LeakMode::Police => ("police", None),
                LeakMode::Shape { delay } => ("shape", Some(delay)),
            };
            json!({
                "algorithm": p.name(),
                "rate_per_second": per_second(l.interval()),
                "capacity": l.capacity(),
                "mode": mode,
                "delay": delay,
            })
        }
    }
}

fn store_json(s: &StoreConfig) -> Value {
    match s {
        StoreConfig::Memory { max_keys, shards, when_full } => json!({
            "kind": "memory",
            "max_keys": max_keys,
            "shards": shards,
            "when_full": when_full.name(),
        }),
        StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix } => json!({
            "kind": "redis",
            "urls": urls.iter().map(SecretUrl::redacted).collect::<Vec<_>>(),
            "cluster": cluster,
            "on_error": match on_error {
                OnError::FailOpen => "fail-open",
                OnError::FailClosed => "fail-closed",
                OnError::Local => "local",
            },
            "timeout_ms": timeout_ms,
            "key_prefix": key_prefix,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_routes_and_store_are_described() {
        let c = sluice_config::parse(
            "s.toml",
            r#"
[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 10
refill_per_second = 2

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 3
window = "15m"
shadow = true

[[route]]
path = "/api/*"
methods = ["POST"]
limits = [{ policy = "per-ip", key = "header:x-api-key|ip" }, { policy = "per-account", key = "json:/email" }]

[server]
key_secret = "a secret shared by the instances"

[store]
kind = "redis"
urls = ["redis://:pw@127.0.0.1:6379"]
on_error = "fail-closed"
"#,
        )
        .unwrap();
        let v = config_json(&c);
        assert_eq!(v["policies"][0]["refill_per_second"], 2.0);
        assert_eq!(v["policies"][1]["window_ms"], 900_000);
        assert_eq!(v["policies"][1]["shadow"], true);
        assert_eq!(v["routes"][0]["path"], "/api/*");
        assert_eq!(v["routes"][0]["limits"][0]["key"], "header:x-api-key|ip");
        assert_eq!(v["routes"][0]["limits"][1]["policy"], "per-account");
        assert_eq!(v["store"]["urls"][0], "redis://<redacted>@127.0.0.1:6379");
        assert_eq!(v["server"]["key_secret"], "<redacted>");
        assert!(!v.to_string().contains("a secret shared"));
        assert!(!v.to_string().contains(":pw@"));
    }
}
