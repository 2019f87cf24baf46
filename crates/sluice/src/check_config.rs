//! `sluice check-config FILE`: validate and show what the gateway would enforce.

use std::fmt::Write;
use std::path::PathBuf;

use sluice_config::{Config, StoreConfig, format_duration};
use sluice_core::Policy;

/// Arguments of `sluice check-config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The TOML configuration to check.
    pub file: PathBuf,
}

/// Runs `sluice check-config`: prints the resolved configuration, or the error (exit 1).
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = sluice_config::load(&args.file)?;
    print!("{}", describe(&config));
    // What serving would find at start: a snapshot it cannot write.
    sluice_gateway::stores::check_snapshot(&config)?;
    // Certificates and keys that do not parse, or do not go together.
    if let Some(files) = &config.server.tls {
        sluice_gateway::tls::acceptor(files).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    }
    if config.passes_unrouted_unlimited() {
        eprintln!("warning: {UNROUTED_UNLIMITED}");
    }
    if let Some(rls) = &config.rls {
        let d = sluice_rls::load_dir(&rls.descriptors)?;
        println!("rls: {} (charge: {}), domains: {}", rls.listen, rls.charge.name(), d.domain_names().join(", "));
    }
    println!("{}: OK", args.file.display());
    Ok(())
}

/// The warning for a configuration that lets requests no route matches through unlimited.
pub const UNROUTED_UNLIMITED: &str = "requests that no route matches are let through unlimited \
     (proxied to the upstream, or `unlimited` to forward-auth): a new or misspelt path escapes every limit. \
     Add a last route `path = \"/*\"` with a per-client limit (docs/src/getting-started.md: \"Requests no route names\").";

fn policy_text(p: &Policy) -> String {
    match p {
        Policy::FixedWindow(_) | Policy::SlidingWindow(_) if p.calendar_windows().is_some() => {
            let c = p.calendar_windows().expect("checked");
            format!(
                "{} limit={} window={} align=calendar timezone={}",
                p.name(),
                p.limit(),
                c.period().name(),
                c.zone().name()
            )
        }
        Policy::FixedWindow(_) | Policy::SlidingLog(_) | Policy::SlidingWindow(_) => {
            format!("{} limit={} window={}", p.name(), p.limit(), format_duration(p.window()))
        }
        Policy::TokenBucket(t) => {
            format!("token-bucket capacity={} refill_per_second={}", t.capacity(), 1e9 / t.interval() as f64)
        }
        Policy::LeakyBucket(l) => format!(
            "leaky-bucket rate_per_second={} capacity={} mode={}",
            1e9 / l.interval() as f64,
            l.capacity(),
            match l.mode() {
                sluice_core::LeakMode::Police => "police".to_string(),
                sluice_core::LeakMode::Shape { delay } => format!("shape delay={delay}"),
            }
        ),
    }
}

/// A human-readable summary of a configuration.
pub fn describe(c: &Config) -> String {
    let mut out = String::new();
    let s = &c.server;
    let _ = writeln!(out, "listen: {}", s.listen);
    if let Some(n) = s.workers {
        let _ = writeln!(out, "workers: {n} (not one per core)");
    }
    if let Some(t) = &s.tls {
        let _ = writeln!(
            out,
            "tls: certificate {}, key {} (TLS 1.2 and 1.3; HTTP/2 and HTTP/1.1 by ALPN)",
            t.cert.display(),
            t.key.display()
        );
    } else if s.h2c {
        let _ = writeln!(out, "h2c: HTTP/2 with prior knowledge beside HTTP/1.1");
    }
    let _ = writeln!(
        out,
        "trusted proxies: {}",
        if s.trusted_proxies.is_empty() {
            "none (forwarding headers ignored)".to_string()
        } else {
            s.trusted_proxies.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
        }
    );
    let _ = writeln!(out, "forwarding header read: {}", s.forwarded_header.name());
    let _ = writeln!(out, "ipv6 prefix: /{}", s.ipv6_prefix);
    let _ = writeln!(out, "headers: {}", s.headers.iter().map(|h| h.name()).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "deny: status {} (on_deny: {})", s.deny_status, s.on_deny.name());
    let _ = writeln!(
        out,
        "upstream: {}",
        c.upstream.as_ref().map_or("none (sluice answers)".into(), |u| format!(
            "{}{}",
            sluice_config::SecretUrl::new(u.url.clone()),
            if u.http2 { " (HTTP/2)" } else { "" }
        ))
    );
    for g in &c.upstreams {
        let balance = match &g.balance {
            sluice_config::Balance::RoundRobin => "round-robin".to_string(),
            sluice_config::Balance::LeastRequests => "least-requests".to_string(),
            sluice_config::Balance::Hash(key) => format!("hash on {key}"),
        };
        let eject = match g.eject.after {
            0 => "never ejected".to_string(),
            n => format!(
                "ejected after {n} failures in a row for {}{}",
                sluice_config::format_duration(g.eject.base),
                if g.eject.on_5xx { ", 5xx counting" } else { "" }
            ),
        };
        let targets: Vec<String> =
            g.targets.iter().map(|t| sluice_config::SecretUrl::new(t.url.clone()).to_string()).collect();
        let _ = writeln!(out, "upstream {}: {} ({balance}; {eject})", g.name, targets.join(", "));
    }
    if let Some(a) = &c.access_log {
        let to = match &a.to {
            sluice_config::LogDestination::Stdout => "stdout".to_string(),
            sluice_config::LogDestination::File(p) => p.display().to_string(),
        };
        let format = match a.format {
            sluice_config::AccessLogFormat::Combined => "combined",
            sluice_config::AccessLogFormat::Json => "json",
        };
        let client = match a.client {
            sluice_config::ClientInLog::Address => "addresses",
            sluice_config::ClientInLog::Hash => "no address (client hashes)",
        };
        let _ = writeln!(out, "access log: {to}, {format}, {client}");
    }
    let _ = writeln!(
        out,
        "key secret: {}",
        if s.key_secret.is_some() { "set (<redacted>)" } else { "none (random per process)" }
    );
    let _ = match &c.store {
        StoreConfig::Memory { max_keys, shards, when_full, snapshot } => {
            let snapshot = snapshot.as_ref().map_or(String::new(), |s| {
                format!(", snapshot {} every {}", s.path.display(), sluice_config::format_duration(s.interval))
            });
            writeln!(
                out,
                "store: memory, {max_keys} keys per policy, {shards} shards, when full: {}{snapshot}",
                when_full.name()
            )
        }
        StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix, sentinel } => writeln!(
            out,
            "store: redis {} (cluster: {cluster}), on error: {}, timeout {timeout_ms} ms, prefix {key_prefix}",
            match sentinel {
                Some(s) => format!(
                    "primary {:?} named by the Sentinels {}",
                    s.master,
                    s.urls.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", ")
                ),
                None => urls.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", "),
            },
            on_error.name()
        ),
    };
    let _ = writeln!(out, "policies:");
    for p in &c.policies {
        // A concurrency policy is kept as a sliding log of leases: say what was written.
        let what = match p.concurrency {
            true => {
                format!("concurrency max_in_flight={} lease={}", p.policy.limit(), format_duration(p.policy.window()))
            }
            false => policy_text(&p.policy),
        };
        let enforce = match (p.shadow, p.soft) {
            (true, _) => " (shadow)",
            (false, true) => " (soft)",
            (false, false) => "",
        };
        let lease = if p.lease { " (quota leases)" } else { "" };
        let _ = writeln!(out, "  {}: {what}{enforce}{lease}", p.name);
    }
    let _ = writeln!(out, "routes:");
    for r in &c.routes {
        let methods = r.methods.as_ref().map_or("any method".to_string(), |m| m.join(","));
        let exact = if r.path.exact { ", exact: no format suffix" } else { "" };
        let to = r.upstream.map_or(String::new(), |i| format!(", to upstream {}", c.upstreams[i].name));
        let _ = writeln!(out, "  {} [{}] ({methods}{exact}{to})", r.path, r.name);
        for l in &r.limits {
            let when = match &l.plan {
                Some(p) => match &p.plan {
                    Some(plan) => format!(" when {} = {plan}", p.by),
                    None => format!(" when {} is none of {}", p.by, p.named.join(", ")),
                },
                None => String::new(),
            };
            let _ = writeln!(out, "    - {} by {} (cost {}){when}", c.policies[l.policy].name, l.key, l.cost);
        }
    }
    if let Some(j) = &c.identity.jwt {
        let algorithms: Vec<&str> = j.keys.iter().map(|k| k.algorithm.name()).collect();
        let from = match &j.token {
            sluice_config::TokenSource::Header(h) => format!("header {h}"),
            sluice_config::TokenSource::Cookie(name) => format!("cookie {name}"),
        };
        let _ = writeln!(
            out,
            "jwt: {} key(s) ({}), from the {from}, issuer {}, audience {}, on invalid token: {}",
            j.keys.len(),
            algorithms.join(", "),
            j.issuer.as_deref().unwrap_or("any"),
            j.audience.as_deref().unwrap_or("any"),
            j.on_invalid_token.name()
        );
    }
    if let Some(fa) = &c.forward_auth {
        let _ = writeln!(out, "forward auth: {} (trusted proxies only; denials answer {})", fa.path, fa.deny_status);
        for r in sluice_gateway::forward_auth::undecidable(c) {
            let _ = writeln!(out, "  route {r}: keyed on the body; forward-auth answers 500 not_decidable");
        }
    }
    let d = &c.decision_api;
    let on = d.enabled.unwrap_or(c.upstream.is_none() && c.upstreams.is_empty());
    let _ = writeln!(
        out,
        "decision api (POST /v1/check): {}",
        if !on {
            "off".to_string()
        } else {
            format!(
                "on, from {}{}, max cost {}",
                d.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
                if d.token.is_some() { " or with the bearer token (<redacted>)" } else { "" },
                d.max_cost.map_or("the policy's limit".to_string(), |m| m.to_string())
            )
        }
    );
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sentinel_store_shows_the_primary_s_name_and_the_sentinels_without_passwords() {
        let text = "[server]\nkey_secret = \"an operator's long random secret, 0123456789\"\n[store]\nkind = \"redis\"\n\
                    on_error = \"fail-closed\"\n\
                    sentinel = { master = \"mymaster\", urls = [\"redis://:pw@10.0.0.5:26379\", \"redis://:pw@10.0.0.6:26379\"] }\n";
        let out = super::describe(&sluice_config::parse("s.toml", text).unwrap());
        let shown = "store: redis primary \"mymaster\" named by the Sentinels redis://<redacted>@10.0.0.5:26379, \
                     redis://<redacted>@10.0.0.6:26379 (cluster: false), on error: fail-closed";
        assert!(out.contains(shown) && !out.contains(":pw@"), "{out}");
    }

    /// A policy is shown as it was written: a concurrency limit as one (it is kept as a sliding
    /// log of leases), with its enforcement and quota leases named.
    #[test]
    fn policies_are_shown_as_written() {
        let text = r#"
[server]
key_secret = "an operator's long random secret, 0123456789"
[store]
kind = "redis"
url = "redis://127.0.0.1:6379"
on_error = "fail-closed"
[[policy]]
name = "sockets"
algorithm = "concurrency"
max_in_flight = 5
[[policy]]
name = "tier"
algorithm = "token-bucket"
capacity = 10
refill_per_second = 2
lease = "auto"
enforce = "soft"
"#;
        let out = super::describe(&sluice_config::parse("p.toml", text).unwrap());
        assert!(out.contains("  sockets: concurrency max_in_flight=5 lease=10m\n"), "{out}");
        assert!(out.contains("  tier: token-bucket capacity=10 refill_per_second=2 (soft) (quota leases)\n"), "{out}");
        assert!(!out.contains("sliding-log"), "{out}");
    }
}
