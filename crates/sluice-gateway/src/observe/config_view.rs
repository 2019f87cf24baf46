//! The resolved configuration as JSON for `GET /config`, with secrets redacted.

use serde_json::{Value, json};
use sluice_config::{
    Config, Jwt, JwtKeyMaterial, OnDeny, OnError, OnInvalidToken, REDACTED, Rls, RlsCharge, SecretUrl, StoreConfig,
    TokenSource,
};
use sluice_core::{LeakMode, NANOS_PER_MILLI, Policy};
use sluice_http::enforce::PolicyInfo;
use sluice_store::WhenFull;

/// The configuration in force, as the gateway understood it: defaults filled in, durations in
/// milliseconds, policies by name. Every field the file accepts shows (under the name it has
/// here when it differs: `window` as `window_ms`, `key_secret_file` as `key_secret`), which
/// `tests/config_view.rs` checks against the fields the file's parser accepts. `server.key_secret` and `identity.jwt`'s HS256 secret are
/// redacted (only whether one is set shows), and so is any password in a store URL; of the JWT
/// keys only their algorithm and `kid` show.
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
            "forwarded_header": s.forwarded_header.name(),
            "ipv6_prefix": s.ipv6_prefix,
            "headers": s.headers.iter().map(|h| h.name()).collect::<Vec<_>>(),
            "deny_status": s.deny_status,
            "on_deny": match s.on_deny { OnDeny::Respond => "respond", OnDeny::Drop => "drop" },
            "max_in_flight": s.max_in_flight,
            "max_in_flight_per_client": s.max_in_flight_per_client,
            "user_header": s.user_header,
            "max_body_bytes": s.max_body_bytes,
            "underscore_headers": s.underscore_headers.name(),
            "body_timeout_ms": s.body_timeout / NANOS_PER_MILLI,
            "body_idle_timeout_ms": s.body_idle_timeout / NANOS_PER_MILLI,
            "max_body_reads_per_client": s.max_body_reads_per_client,
            "key_secret": s.key_secret.as_ref().map(|_| REDACTED),
            "tls": s.tls.as_ref().map(|t| json!({
                "cert": t.cert.display().to_string(),
                "key": t.key.display().to_string(),
                "certificates": t.by_name.iter().map(|p| json!({
                    "cert": p.cert.display().to_string(),
                    "key": p.key.display().to_string(),
                })).collect::<Vec<_>>(),
                "client_ca": t.client_ca.as_ref().map(|p| p.display().to_string()),
                "client_auth": if t.client_auth_optional { "optional" } else { "required" },
            })),
            "h2c": s.h2c,
            "workers": s.workers,
            "tunnel_idle_timeout_ms": s.tunnel_idle_timeout / NANOS_PER_MILLI,
            "http2": {
                "max_concurrent_streams": s.http2.max_concurrent_streams,
                "max_header_list_size": s.http2.max_header_list_size,
                "max_frame_size": s.http2.max_frame_size,
            },
            "cors": s.cors.as_ref().map(|c| json!({
                "allow_origins": origins(&c.allow_origins),
                "preflight": match c.preflight {
                    sluice_config::Preflight::Pass => "pass",
                    sluice_config::Preflight::Answer => "answer",
                },
                "max_age_ms": c.max_age / NANOS_PER_MILLI,
            })),
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
            "timeouts": stages(&u.timeouts),
            "ca": u.ca.as_ref().map(|p| p.display().to_string()),
            "client_cert": u.client_cert.as_ref().map(|p| p.cert.display().to_string()),
            "client_key": u.client_cert.as_ref().map(|p| p.key.display().to_string()),
            "http2": u.http2,
        })),
        "upstreams": c.upstreams.iter().map(|g| json!({
            "name": g.name,
            "targets": g.targets.iter().map(|t| SecretUrl::new(t.url.clone()).redacted()).collect::<Vec<_>>(),
            "balance": match &g.balance {
                sluice_config::Balance::RoundRobin => "round-robin".to_string(),
                sluice_config::Balance::LeastRequests => "least-requests".to_string(),
                sluice_config::Balance::Hash(_) => "hash".to_string(),
            },
            "hash_key": match &g.balance {
                sluice_config::Balance::Hash(key) => Some(key.to_string()),
                _ => None,
            },
            "ca": g.targets[0].ca.as_ref().map(|p| p.display().to_string()),
            "client_cert": g.targets[0].client_cert.as_ref().map(|p| p.cert.display().to_string()),
            "client_key": g.targets[0].client_cert.as_ref().map(|p| p.key.display().to_string()),
            "http2": g.targets[0].http2,
            "timeout_ms": g.targets[0].timeout / NANOS_PER_MILLI,
            "timeouts": stages(&g.targets[0].timeouts),
            "eject_after": g.eject.after,
            "eject_for_ms": g.eject.base / NANOS_PER_MILLI,
            "eject_on_5xx": g.eject.on_5xx,
            "health_check": g.health_check.as_ref().map(|h| json!({
                "path": h.path,
                "interval_ms": h.interval / NANOS_PER_MILLI,
                "timeout_ms": h.timeout / NANOS_PER_MILLI,
                "healthy_after": h.healthy_after,
                "unhealthy_after": h.unhealthy_after,
            })),
        })).collect::<Vec<_>>(),
        "policies": c.policies.iter().map(|p| {
            let mut v = policy_json(&PolicyInfo::of_config(p));
            if p.lease {
                v["lease"] = json!("auto");
            }
            v
        }).collect::<Vec<_>>(),
        "routes": c.routes.iter().map(|r| json!({
            "name": r.name,
            "path": r.path.to_string(),
            "exact": r.path.exact,
            "methods": r.methods,
            "loosen": r.loosen.names(),
            "upgrades": if r.websocket { vec!["websocket"] } else { vec![] },
            "cors": r.cors.as_ref().map(|o| json!({ "allow_origins": origins(o) })),
            "upstream": r.upstream.map(|i| c.upstreams[i].name.clone()),
            // The stages this route bounds in place of its upstream's (null: the upstream's).
            "timeouts": {
                "connect_ms": r.timeouts.connect.map(|n| n / NANOS_PER_MILLI),
                "first_byte_ms": r.timeouts.first_byte.map(|n| n / NANOS_PER_MILLI),
                "idle_ms": r.timeouts.idle.map(|n| n / NANOS_PER_MILLI),
            },
            "limits": r.limits.iter().map(|l| {
                let mut v = json!({
                    "policy": c.policies.get(l.policy).map(|p| p.name.as_str()),
                    "key": l.key.to_string(),
                    "cost": l.cost,
                });
                if let Some(from) = &l.cost_from {
                    v["cost_from"] = json!(from.to_string());
                }
                if let Some(plan) = &l.plan {
                    // One limit per plan (and one for the rest): which requests this one gets.
                    v["policy_by"] = json!(plan.by.to_string());
                    v["plan"] = plan.plan.as_ref().map_or(json!({ "default": true }), |p| json!(p));
                }
                v
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "store": store_json(&c.store),
        "identity": { "jwt": c.identity.jwt.as_ref().map(jwt_json) },
        "admin": c.admin.as_ref().map(|a| json!({ "listen": a.listen.to_string() })),
        "decision_log": {
            "sample": c.decision_log.sample,
            "denials_per_second": c.decision_log.denials_per_second,
        },
        "rls": c.rls.as_ref().map(rls_json),
        "forward_auth": c.forward_auth.as_ref().map(|f| json!({ "path": f.path, "deny_status": f.deny_status })),
        "access_log": c.access_log.as_ref().map(|a| json!({
            "path": match &a.to {
                sluice_config::LogDestination::Stdout => "-".to_string(),
                sluice_config::LogDestination::File(p) => p.display().to_string(),
            },
            "format": match a.format {
                sluice_config::AccessLogFormat::Combined => "combined",
                sluice_config::AccessLogFormat::Json => "json",
            },
            "client": match a.client {
                sluice_config::ClientInLog::Address => "address",
                sluice_config::ClientInLog::Hash => "hash",
            },
        })),
    })
}

fn rls_json(r: &Rls) -> Value {
    json!({
        "listen": r.listen.to_string(),
        "descriptors": r.descriptors.display().to_string(),
        "charge": match r.charge {
            RlsCharge::AllOrNothing => "all-or-nothing",
            RlsCharge::Independent => "independent",
        },
        // `null`: the directory is reloaded on SIGHUP only.
        "watch_interval_ms": r.watch_interval.map(|i| i / NANOS_PER_MILLI),
    })
}

fn jwt_json(j: &Jwt) -> Value {
    let (header, cookie) = match &j.token {
        TokenSource::Header(h) => (Some(h.as_str()), None),
        TokenSource::Cookie(c) => (None, Some(c.as_str())),
    };
    json!({
        "keys": j.keys.iter().map(|k| json!({
            "algorithm": k.algorithm.name(),
            "kid": k.kid,
            // Public keys are not secret, but they say nothing an operator needs here.
            "secret": matches!(k.material, JwtKeyMaterial::Secret(_)).then_some(REDACTED),
        })).collect::<Vec<_>>(),
        "jwks_file": j.jwks_file.as_ref().map(|f| f.display().to_string()),
        "header": header,
        "cookie": cookie,
        "issuer": j.issuer,
        "audience": j.audience,
        "leeway_ms": j.leeway / NANOS_PER_MILLI,
        "on_invalid_token": match j.on_invalid_token {
            OnInvalidToken::Fallback => "fallback",
            OnInvalidToken::Reject => "reject",
        },
        "cache_entries": j.cache_entries,
    })
}

/// A policy as `/config` shows it: its algorithm and parameters (durations in milliseconds,
/// rates per second), with its `name`, what it does to a request over it (`enforce`: `hard`,
/// `soft` or `shadow`), the `shadow` flag and the `unit` it counts when not requests.
pub fn policy_json(p: &PolicyInfo) -> Value {
    // A concurrency limit is kept as a sliding log of leases: shown as configured.
    let mut v = if p.concurrency {
        json!({
            "algorithm": "concurrency",
            "max_in_flight": p.policy.limit(),
            "lease_ms": p.policy.window() / NANOS_PER_MILLI,
        })
    } else {
        policy_params(&p.policy)
    };
    v["name"] = json!(p.name);
    v["shadow"] = json!(p.shadow);
    v["enforce"] = json!(match (p.shadow, p.soft) {
        (true, _) => "shadow",
        (false, true) => "soft",
        (false, false) => "hard",
    });
    // Requests, the default unit, go unsaid (as in the `ietf` headers).
    if let Some(unit) = &p.unit {
        v["unit"] = json!(unit);
    }
    v
}

fn policy_params(p: &Policy) -> Value {
    let per_second = |interval: u64| 1e9 / interval as f64;
    match p {
        Policy::FixedWindow(_) | Policy::SlidingWindow(_) if p.calendar_windows().is_some() => {
            let c = p.calendar_windows().expect("checked");
            json!({
                "algorithm": p.name(),
                "limit": p.limit(),
                "window": c.period().name(),
                "align": "calendar",
                "timezone": c.zone().name(),
            })
        }
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
        StoreConfig::Memory { max_keys, shards, when_full, snapshot } => json!({
            "kind": "memory",
            "max_keys": max_keys,
            "shards": shards,
            "when_full": when_full.name(),
            // The summary's size as used (its width derived from `max_keys` unless given);
            // `null` when nothing is folded.
            "fold_width": match when_full {
                WhenFull::Fold(size) => Some(size.cells_per_row(*max_keys)),
                _ => None,
            },
            "fold_depth": match when_full {
                WhenFull::Fold(size) => Some(size.depth),
                _ => None,
            },
            "snapshot": snapshot.as_ref().map(|s| json!({
                "path": s.path.display().to_string(),
                "interval_ms": s.interval / NANOS_PER_MILLI,
            })),
        }),
        StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix, sentinel } => json!({
            "kind": "redis",
            "urls": urls.iter().map(SecretUrl::redacted).collect::<Vec<_>>(),
            "sentinel": sentinel.as_ref().map(|s| json!({
                "master": s.master,
                "urls": s.urls.iter().map(SecretUrl::redacted).collect::<Vec<_>>(),
            })),
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

/// An `allow_origins` list as the file writes it.
fn origins(o: &sluice_config::Origins) -> Vec<String> {
    match o {
        sluice_config::Origins::Any => vec!["*".into()],
        sluice_config::Origins::List(list) => list.clone(),
    }
}

/// An upstream's timeouts in force, stage by stage.
fn stages(t: &sluice_config::StageTimeouts) -> Value {
    json!({
        "connect_ms": t.connect / NANOS_PER_MILLI,
        "first_byte_ms": t.first_byte / NANOS_PER_MILLI,
        "idle_ms": t.idle / NANOS_PER_MILLI,
    })
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
        assert_eq!(v["identity"]["jwt"], Value::Null);
    }

    #[test]
    fn jwt_identity_and_plan_limits_are_described_with_the_secret_redacted() {
        let c = sluice_config::parse(
            "s.toml",
            r#"
[identity.jwt]
hs256_secret = "the HS256 secret of the test"
audience = "api"
on_invalid_token = "reject"

[[policy]]
name = "free"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[policy]]
name = "anonymous"
algorithm = "fixed-window"
limit = 1
window = "1m"

[[route]]
path = "/api"
limits = [{ key = "jwt:sub|ip", policy_by = "jwt:plan", policies = { free = "free" }, default_policy = "anonymous" }]
"#,
        )
        .unwrap();
        let v = config_json(&c);
        let jwt = &v["identity"]["jwt"];
        assert_eq!(jwt["keys"][0]["algorithm"], "HS256");
        assert_eq!(jwt["keys"][0]["secret"], REDACTED);
        assert_eq!(jwt["header"], "authorization");
        assert_eq!(jwt["on_invalid_token"], "reject");
        assert_eq!(jwt["leeway_ms"], 30_000);
        assert!(!v.to_string().contains("the HS256 secret"));
        let limits = &v["routes"][0]["limits"];
        assert_eq!(limits[0]["policy"], "free");
        assert_eq!(limits[0]["plan"], "free");
        assert_eq!(limits[0]["policy_by"], "jwt:plan");
        assert_eq!(limits[1]["policy"], "anonymous");
        assert_eq!(limits[1]["plan"]["default"], true);
        assert_eq!(limits[1]["key"], "jwt:sub|ip");
    }
}
