//! `[[upstreams]]`: named services of one or more targets, how a target is picked, and when a
//! failing one is taken out.

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::parse_duration;
use crate::raw::*;

/// Every `[[upstreams]]` entry, names unique.
pub(super) fn upstreams(
    src: &Source<'_>,
    raw: Vec<toml::Spanned<RawUpstreams>>,
) -> Result<Vec<UpstreamGroup>, ConfigError> {
    let mut out: Vec<UpstreamGroup> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let span = r.span();
        let u = r.into_inner();
        let table = format!("upstreams[{i}]");
        let err =
            |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("{table}.{field}"), msg);
        if u.name.is_empty() || out.iter().any(|g| g.name == u.name) {
            return Err(err("name", format!("`{}` must be a name no other `[[upstreams]]` has", u.name)));
        }
        if u.targets.is_empty() {
            return Err(err(
                "targets",
                "lists no target: at least one `http://host:port` or `https://host:port`".into(),
            ));
        }
        let mut targets = Vec::with_capacity(u.targets.len());
        for t in &u.targets {
            let one = RawUpstream {
                url: t.clone(),
                ca: u.ca.clone(),
                client_cert: u.client_cert.clone(),
                client_key: u.client_key.clone(),
                http2: u.http2,
                timeout_ms: u.timeout_ms,
                timeouts: u.timeouts.clone(),
            };
            let target = super::upstream::one(src, &span, &table, "targets", one)?;
            if targets.iter().any(|seen: &Upstream| seen.url == target.url) {
                return Err(err("targets", format!("`{t}` is listed twice")));
            }
            targets.push(target);
        }
        let balance = match (u.balance.as_deref().unwrap_or("round-robin"), u.hash_key) {
            ("round-robin", None) => Balance::RoundRobin,
            ("least-requests", None) => Balance::LeastRequests,
            ("hash", Some(key)) => {
                let texts = match key {
                    RawKey::One(s) => vec![s],
                    RawKey::Parts(v) => v,
                };
                let spec = KeySpec::parse(&texts).map_err(|m| err("hash_key", m))?;
                let head_only = spec.parts.iter().flatten().all(|s| {
                    matches!(
                        s.base(),
                        KeySource::Ip
                            | KeySource::Header(_)
                            | KeySource::Method
                            | KeySource::Path
                            | KeySource::Route
                            | KeySource::Const(_)
                    )
                });
                if !head_only {
                    return Err(err(
                        "hash_key",
                        "reads what every request carries in its head: ip, header:NAME, method, path, route, const:"
                            .into(),
                    ));
                }
                Balance::Hash(spec)
            }
            ("hash", None) => {
                return Err(err(
                    "balance",
                    "`hash` needs `hash_key`, the key part requests are hashed on (e.g. `header:x-user|ip`)".into(),
                ));
            }
            (_, Some(_)) => return Err(err("hash_key", "applies to `balance = \"hash\"`".into())),
            (other, None) => {
                return Err(err(
                    "balance",
                    format!("`{other}` is not a balance: `round-robin`, `least-requests` or `hash`"),
                ));
            }
        };
        let base = parse_duration(u.eject_for.as_deref().unwrap_or("5s")).map_err(|m| err("eject_for", m))?;
        if base == 0 {
            return Err(err("eject_for", "must be longer than 0 (turn ejection off with `eject_after = 0`)".into()));
        }
        let eject = Ejection { after: u.eject_after.unwrap_or(3), base, on_5xx: u.eject_on_5xx.unwrap_or(false) };
        let health_check = match u.health_check {
            None => None,
            Some(h) => {
                let herr = |field: &str, msg: String| {
                    src.error(Some(src.field_line(&span, "health_check")), format!("{table}.health_check.{field}"), msg)
                };
                if !h.path.starts_with('/') || h.path.contains(['\r', '\n', ' ']) {
                    return Err(herr("path", format!("`{}` is not a path (`/health`)", h.path)));
                }
                let duration = |field: &str, text: Option<&str>, default: &str| {
                    parse_duration(text.unwrap_or(default)).map_err(|m| herr(field, m)).and_then(|n| match n {
                        0 => Err(herr(field, "must be longer than 0".into())),
                        n => Ok(n),
                    })
                };
                let interval = duration("interval", h.interval.as_deref(), "5s")?;
                let timeout = duration("timeout", h.timeout.as_deref(), "2s")?;
                let count = |field: &str, v: Option<u32>| match v.unwrap_or(2) {
                    0 => Err(herr(field, "must be at least 1".into())),
                    n => Ok(n),
                };
                Some(HealthCheck {
                    path: h.path,
                    interval,
                    timeout,
                    healthy_after: count("healthy_after", h.healthy_after)?,
                    unhealthy_after: count("unhealthy_after", h.unhealthy_after)?,
                })
            }
        };
        out.push(UpstreamGroup { name: u.name, targets, balance, eject, health_check });
    }
    Ok(out)
}
