//! Raw structs to the validated model, one field at a time, each error located.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;

use ipnet::IpNet;
use sluice_core::{
    CostError, check_cost,
    ALGORITHM_NAMES, AlgorithmKind, FixedWindow, LeakMode, LeakyBucket, NANOS_PER_MILLI, Nanos, Policy, SlidingLog,
    SlidingWindow, TokenBucket,
};
use sluice_store::{FoldSize, MAX_FOLD_DEPTH, WhenFull};

use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::path::{PathPattern, PathShape, normalize_path, request_path};
use crate::raw::*;
use crate::secret::{SecretUrl, read_secret};

/// The largest sliding-log limit: its state holds one timestamp per admitted unit of cost.
pub const MAX_SLIDING_LOG_LIMIT: u64 = 100_000;

/// Default listen address of a config without `server.listen`.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";

/// The prefix IPv6 clients are grouped by when nothing sets it (`server.ipv6_prefix`, the tower
/// layer, the default service, the rate-limit service): a /56 is what one subscriber is commonly
/// delegated, so one household or server is one client however many addresses it rotates through.
///
/// ```
/// let cfg = sluice_config::parse("s.toml", "").unwrap();
/// assert_eq!(cfg.server.ipv6_prefix, sluice_config::DEFAULT_IPV6_PREFIX);
/// assert_eq!(sluice_config::DEFAULT_IPV6_PREFIX, 56);
/// ```
pub const DEFAULT_IPV6_PREFIX: u8 = 56;

pub(crate) fn validate(src: &Source<'_>, raw: RawConfig) -> Result<Config, ConfigError> {
    let (server, decision_api_switch) = server(src, raw.server)?;
    let identity = crate::identity::identity(src, raw.identity)?;
    let upstream = raw.upstream.map(|u| upstream(src, u)).transpose()?;
    let mut policies = Vec::with_capacity(raw.policy.len());
    let mut by_name = HashMap::new();
    for (i, p) in raw.policy.into_iter().enumerate() {
        let span = p.span();
        let pc = policy(src, i, &span, p.into_inner())?;
        if by_name.insert(pc.name.clone(), i).is_some() {
            let line = src.field_line(&span, "name");
            return Err(src.error(
                Some(line),
                format!("policy[{i}].name"),
                format!("duplicate policy name `{}`", pc.name),
            ));
        }
        policies.push(pc);
    }
    let routes = raw
        .route
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let span = r.span();
            route(src, i, &span, r.into_inner(), &by_name, &policies, (&server, &identity))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let store_span = raw.store.as_ref().map(|s| s.span());
    let store = store(src, raw.store)?;
    if matches!(store, StoreConfig::Redis { .. }) && server.key_secret.is_none() {
        let span = store_span.unwrap_or(0..0);
        return Err(src.error(
            Some(src.field_line(&span, "kind")),
            "server.key_secret",
            "a Redis store is shared by every instance that uses it: set server.key_secret (or key_secret_file, or \
             key_secret_env naming a variable) to the same long random secret on each, or they hash one client to \
             different keys and each instance grants the full limit",
        ));
    }
    if matches!(store, StoreConfig::Memory { snapshot: Some(_), .. }) && server.key_secret.is_none() {
        let span = store_span.unwrap_or(0..0);
        return Err(src.error(
            Some(src.field_line(&span, "snapshot")),
            "server.key_secret",
            "a snapshot is read by the next process, which must hash every client to the same key: set \
             server.key_secret (or key_secret_file, or key_secret_env naming a variable) to a long random secret \
             kept across restarts; without one each process draws its own and the snapshot fits no key",
        ));
    }
    let decision_api = decision_api(src, raw.decision_api, decision_api_switch)?;
    let admin = raw
        .admin
        .map(|a| {
            let span = a.span();
            let listen = a.into_inner().listen.unwrap_or_else(|| "127.0.0.1:9090".into());
            addr(src, &span, "admin", "listen", &listen).map(|listen| Admin { listen })
        })
        .transpose()?;
    let decision_log = decision_log(src, raw.decision_log)?;
    let rls = raw.rls.map(|r| rls(src, r)).transpose()?;
    let forward_auth = raw.forward_auth.map(|f| forward_auth(src, f, &server)).transpose()?;
    Ok(Config {
        server,
        upstream,
        policies,
        routes,
        store,
        admin,
        decision_log,
        decision_api,
        rls,
        identity,
        forward_auth,
    })
}

fn addr(src: &Source<'_>, span: &Range<usize>, table: &str, field: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse().map_err(|_| {
        src.error(
            Some(src.field_line(span, field)),
            format!("{table}.{field}"),
            format!("`{v}` is not an address with a port, like `0.0.0.0:8080` or `[::1]:8080`"),
        )
    })
}

fn server(src: &Source<'_>, raw: Option<toml::Spanned<RawServer>>) -> Result<(Server, Option<bool>), ConfigError> {
    let (span, s) = match raw {
        Some(s) => (s.span(), s.into_inner()),
        None => (0..0, RawServer::default()),
    };
    let err = |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("server.{field}"), msg);
    let listen = addr(src, &span, "server", "listen", s.listen.as_deref().unwrap_or(DEFAULT_LISTEN))?;
    let mut trusted_proxies = Vec::new();
    for p in &s.trusted_proxies {
        let net = p
            .parse::<IpNet>()
            .or_else(|_| p.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| err("trusted_proxies", format!("`{p}` is not an address or CIDR block like `10.0.0.0/8`")))?;
        trusted_proxies.push(net.trunc());
    }
    let forwarded_header = match s.forwarded_header.as_deref() {
        None => ForwardedHeader::default(),
        Some(name) => ForwardedHeader::parse(name).ok_or_else(|| {
            let [xff, fwd] = ForwardedHeader::ALL.map(ForwardedHeader::name);
            err("forwarded_header", format!("`{name}` is neither `{xff}` nor `{fwd}`"))
        })?,
    };
    let ipv6_prefix = s.ipv6_prefix.unwrap_or(DEFAULT_IPV6_PREFIX);
    if ipv6_prefix > 128 {
        return Err(err("ipv6_prefix", format!("{ipv6_prefix} is not a prefix length (0 to 128)")));
    }
    let headers = match s.headers {
        None => vec![HeaderStyle::Draft6],
        Some(list) => list
            .iter()
            .map(|h| match h.as_str() {
                "draft-6" => Ok(HeaderStyle::Draft6),
                "ietf" => Ok(HeaderStyle::Ietf),
                "x-ratelimit" => Ok(HeaderStyle::XRateLimit),
                other => Err(err("headers", format!("unknown header style `{other}` (draft-6, ietf, x-ratelimit)"))),
            })
            .collect::<Result<_, _>>()?,
    };
    let deny_status = s.deny_status.unwrap_or(429);
    if !(400..=599).contains(&deny_status) {
        return Err(err("deny_status", format!("{deny_status} is not a 4xx or 5xx status")));
    }
    let on_deny = match s.on_deny.as_deref().unwrap_or("respond") {
        "respond" => OnDeny::Respond,
        "drop" => OnDeny::Drop,
        other => return Err(err("on_deny", format!("`{other}` is neither `respond` nor `drop`"))),
    };
    let max_in_flight = s.max_in_flight.unwrap_or(10_000);
    if max_in_flight == 0 {
        return Err(err("max_in_flight", "must be at least 1".into()));
    }
    let max_in_flight_per_client =
        s.max_in_flight_per_client.unwrap_or_else(|| default_in_flight_per_client(max_in_flight));
    if max_in_flight_per_client == 0 {
        return Err(err("max_in_flight_per_client", "must be at least 1".into()));
    }
    let user_header = s.user_header.map(|h| h.to_ascii_lowercase());
    let max_body_bytes = s.max_body_bytes.unwrap_or(64 * 1024);
    let duration = |field: &str, text: Option<&str>, default: &str| -> Result<Nanos, ConfigError> {
        let n = parse_duration(text.unwrap_or(default)).map_err(|m| err(field, m))?;
        if n == 0 {
            return Err(err(field, "must be longer than 0".into()));
        }
        Ok(n)
    };
    let body_timeout = duration("body_timeout", s.body_timeout.as_deref(), "10s")?;
    let body_idle_timeout = duration("body_idle_timeout", s.body_idle_timeout.as_deref(), "5s")?;
    let max_body_reads_per_client = s.max_body_reads_per_client.unwrap_or(4);
    if max_body_reads_per_client == 0 {
        return Err(err("max_body_reads_per_client", "must be at least 1".into()));
    }
    let underscore_headers = match s.underscore_headers.as_deref().unwrap_or("drop") {
        "drop" => UnderscoreHeaders::Drop,
        "forward" => UnderscoreHeaders::Forward,
        other => return Err(err("underscore_headers", format!("`{other}` is neither `drop` nor `forward`"))),
    };
    let key_secret =
        read_secret(src, &span, "server", "key_secret", (s.key_secret, s.key_secret_file, s.key_secret_env))?;
    let server = Server {
        listen,
        trusted_proxies,
        forwarded_header,
        ipv6_prefix,
        headers,
        deny_status,
        on_deny,
        max_in_flight,
        max_in_flight_per_client,
        user_header,
        max_body_bytes,
        body_timeout,
        body_idle_timeout,
        max_body_reads_per_client,
        underscore_headers,
        key_secret,
    };
    Ok((server, s.decision_api))
}

/// `server.max_in_flight_per_client` when it is not set: a tenth of `max_in_flight`, not below
/// 64 nor above `max_in_flight` (see [`Server::max_in_flight_per_client`]).
fn default_in_flight_per_client(max_in_flight: usize) -> usize {
    (max_in_flight / 10).max(max_in_flight.min(64))
}

fn decision_api(
    src: &Source<'_>,
    raw: Option<toml::Spanned<RawDecisionApi>>,
    enabled: Option<bool>,
) -> Result<DecisionApi, ConfigError> {
    let (span, d) = match raw {
        Some(d) => (d.span(), d.into_inner()),
        None => (0..0, RawDecisionApi::default()),
    };
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("decision_api.{field}"), msg);
    let allow = match d.allow {
        None => vec!["127.0.0.0/8".parse().expect("a CIDR"), "::1/128".parse().expect("a CIDR")],
        Some(list) => list
            .iter()
            .map(|p| {
                p.parse::<IpNet>()
                    .or_else(|_| p.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map(|n| n.trunc())
                    .map_err(|_| err("allow", format!("`{p}` is not an address or CIDR block like `10.0.0.0/8`")))
            })
            .collect::<Result<_, _>>()?,
    };
    let token = read_secret(src, &span, "decision_api", "token", (d.token, d.token_file, d.token_env))?;
    if d.max_cost == Some(0) {
        return Err(err("max_cost", "must be at least 1".into()));
    }
    Ok(DecisionApi { enabled, allow, token, max_cost: d.max_cost })
}

fn upstream(src: &Source<'_>, raw: toml::Spanned<RawUpstream>) -> Result<Upstream, ConfigError> {
    let span = raw.span();
    let u = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("upstream.{field}"), msg);
    let rest = u.url.strip_prefix("http://").ok_or_else(|| {
        err("url", format!("`{}` must start with http:// (TLS to the upstream is not supported)", u.url))
    })?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || authority.contains('?') {
        return Err(err("url", format!("`{}` must be `http://host:port` with no path", u.url)));
    }
    // What the HTTP client would refuse at start (or on reload) is refused here, with the field.
    check_authority(authority).map_err(|why| err("url", format!("`{}`: {why}", u.url)))?;
    let timeout_ms = u.timeout_ms.unwrap_or(30_000);
    if timeout_ms == 0 {
        return Err(err("timeout_ms", "must be at least 1".into()));
    }
    Ok(Upstream { url: format!("http://{authority}"), timeout: timeout_ms * 1_000_000 })
}

/// `host`, `host:port`, `[ipv6]` or `[ipv6]:port`, with a hostname or IPv4 address as host.
fn check_authority(authority: &str) -> Result<(), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, after) = rest.split_once(']').ok_or("an IPv6 address needs its closing `]`")?;
            if inside.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("`{inside}` is not an IPv6 address"));
            }
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or(format!("unexpected `{after}` after the address"))?),
            };
            (None, port)
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(authority), None),
        },
    };
    if let Some(host) = host
        && (host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
    {
        return Err(format!("`{host}` is not a host name or address (write IPv6 addresses in brackets)"));
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("`{port}` is not a port number (0 to 65535)"));
    }
    Ok(())
}

fn policy(src: &Source<'_>, i: usize, span: &Range<usize>, p: RawPolicy) -> Result<PolicyConfig, ConfigError> {
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(span, field)), format!("policy[{i}].{field}"), msg);
    if p.name.is_empty() {
        return Err(err("name", "must not be empty".into()));
    }
    let present: [(&str, bool); 7] = [
        ("limit", p.limit.is_some()),
        ("window", p.window.is_some()),
        ("capacity", p.capacity.is_some()),
        ("refill_per_second", p.refill_per_second.is_some()),
        ("rate_per_second", p.rate_per_second.is_some()),
        ("mode", p.mode.is_some()),
        ("delay", p.delay.is_some()),
    ];
    let Some(kind) = AlgorithmKind::parse(&p.algorithm) else {
        let known = ALGORITHM_NAMES.join(", ");
        return Err(err("algorithm", format!("unknown algorithm `{}` ({known})", p.algorithm)));
    };
    let allowed: &[&str] = match kind {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingLog | AlgorithmKind::SlidingWindow => &["limit", "window"],
        AlgorithmKind::TokenBucket => &["capacity", "refill_per_second"],
        AlgorithmKind::LeakyBucket => &["rate_per_second", "capacity", "mode", "delay"],
    };
    if let Some((field, _)) = present.iter().find(|(f, there)| *there && !allowed.contains(f)) {
        return Err(err(field, format!("does not apply to {} (it takes {})", p.algorithm, allowed.join(", "))));
    }
    let need = |field: &str| err(field, format!("{} needs `{field}`", p.algorithm));
    let param = |field: &str, e: sluice_core::ParamError| err(field, e.to_string());
    let windowed = || -> Result<(u64, u64), ConfigError> {
        let limit = p.limit.ok_or_else(|| need("limit"))?;
        let text = p.window.as_deref().ok_or_else(|| need("window"))?;
        let window = parse_duration(text).map_err(|m| err("window", m))?;
        Ok((limit, window))
    };
    let policy: Policy = match kind {
        AlgorithmKind::FixedWindow => {
            let (l, w) = windowed()?;
            FixedWindow::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::SlidingLog => {
            let (l, w) = windowed()?;
            if l > MAX_SLIDING_LOG_LIMIT {
                return Err(err(
                    "limit",
                    format!(
                        "{l} is too large for a sliding log, which keeps one timestamp per admitted request \
                         (at most {MAX_SLIDING_LOG_LIMIT}); use sliding-window for large limits"
                    ),
                ));
            }
            SlidingLog::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::SlidingWindow => {
            let (l, w) = windowed()?;
            SlidingWindow::new(l, w).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::TokenBucket => {
            let c = p.capacity.ok_or_else(|| need("capacity"))?;
            let r = p.refill_per_second.ok_or_else(|| need("refill_per_second"))?;
            TokenBucket::new(c, r).map_err(|e| param(field_of(&e), e))?.into()
        }
        AlgorithmKind::LeakyBucket => {
            let r = p.rate_per_second.ok_or_else(|| need("rate_per_second"))?;
            let c = p.capacity.ok_or_else(|| need("capacity"))?;
            let mode = match p.mode.as_deref().unwrap_or("police") {
                "police" if p.delay.is_some() => {
                    return Err(err("delay", "applies only to mode = \"shape\"".into()));
                }
                "police" => LeakMode::Police,
                "shape" => LeakMode::Shape { delay: p.delay.unwrap_or(0) },
                other => return Err(err("mode", format!("`{other}` is neither `police` nor `shape`"))),
            };
            LeakyBucket::new(r, c, mode).map_err(|e| param(field_of(&e), e))?.into()
        }
    };
    Ok(PolicyConfig { name: p.name, policy, shadow: p.shadow })
}

fn field_of(e: &sluice_core::ParamError) -> &'static str {
    match e {
        sluice_core::ParamError::Zero { field }
        | sluice_core::ParamError::BadRate { field, .. }
        | sluice_core::ParamError::TooLarge { field } => field,
        sluice_core::ParamError::DelayTooLarge { .. } => "delay",
    }
}

fn route(
    src: &Source<'_>,
    i: usize,
    span: &Range<usize>,
    r: RawRoute,
    policies: &HashMap<String, usize>,
    configured: &[PolicyConfig],
    (server, identity): (&Server, &Identity),
) -> Result<Route, ConfigError> {
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(span, field)), format!("route[{i}].{field}"), msg);
    if !r.path.starts_with('/') {
        return Err(err("path", format!("`{}` must start with `/`", r.path)));
    }
    if let Err(why) = request_path(&r.path) {
        return Err(err("path", format!("`{}`: {why} Routes name paths as clients send them.", r.path)));
    }
    let shape = match r.path.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('/') => {
            let norm = normalize_path(prefix);
            PathShape::Prefix(if norm == "/" { norm.into_owned() } else { format!("{norm}/") })
        }
        Some(_) => return Err(err("path", format!("`{}`: a prefix must end in `/*`, like `/api/*`", r.path))),
        None if r.path.contains('*') => return Err(err("path", format!("`{}`: `*` only at the end", r.path))),
        None => PathShape::Path(normalize_path(&r.path).into_owned()),
    };
    let path = PathPattern { shape, exact: r.exact };
    let methods = r.methods.map(|ms| ms.iter().map(|m| m.to_ascii_uppercase()).collect::<Vec<_>>());
    if let Some(ms) = &methods
        && let Some(bad) = ms.iter().find(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return Err(err("methods", format!("`{bad}` is not an HTTP method")));
    }
    let route_cost = r.cost.unwrap_or(1);
    // No policy yet: the route's own cost is only bounded below (each limit checks its policy's).
    check_cost(route_cost, u64::MAX).map_err(|_| err("cost", CostError::ZERO.into()))?;
    let mut limits = Vec::with_capacity(r.limits.len());
    for (j, l) in r.limits.into_iter().enumerate() {
        let at = format!("route[{i}].limits[{j}]");
        let lerr = |field: &str, msg: String| {
            let path = if field.is_empty() { at.clone() } else { format!("{at}.{field}") };
            src.error(Some(src.field_line(span, if field.is_empty() { "limits" } else { field })), path, msg)
        };
        let texts = match l.key {
            RawKey::One(s) => vec![s],
            RawKey::Parts(v) => v,
        };
        if texts.is_empty() {
            return Err(lerr("", "key must name at least one part".into()));
        }
        let parts = texts.iter().map(|t| key_part(t)).collect::<Result<Vec<_>, _>>().map_err(|m| lerr("", m))?;
        let key = KeySpec { parts };
        let needs_source = |s: &KeySource| -> Result<(), ConfigError> {
            match s.base() {
                KeySource::User if server.user_header.is_none() => {
                    Err(lerr("", format!("key part `{s}` needs `server.user_header`")))
                }
                KeySource::Jwt(_) if identity.jwt.is_none() => {
                    Err(lerr("", format!("key part `{s}` needs `[identity.jwt]`")))
                }
                _ => Ok(()),
            }
        };
        key.parts.iter().flatten().try_for_each(needs_source)?;
        let cost = l.cost.unwrap_or(route_cost);
        check_cost(cost, u64::MAX).map_err(|e| lerr("", e.to_string()))?;
        let choices = match (l.policy, l.policy_by) {
            (Some(_), Some(_)) => {
                return Err(lerr(
                    "policy_by",
                    "give `policy`, or `policy_by` with `policies` and `default_policy`, not both".into(),
                ));
            }
            (Some(name), None) => {
                for (field, there) in
                    [("policies", l.policies.is_some()), ("default_policy", l.default_policy.is_some())]
                {
                    if there {
                        return Err(lerr(field, "applies only with `policy_by` (and without `policy`)".into()));
                    }
                }
                vec![(name, None)]
            }
            (None, None) => {
                return Err(lerr("", "needs `policy`, or `policy_by` with `policies` and `default_policy`".into()));
            }
            (None, Some(by)) => {
                let by = plan_source(&by, server).map_err(|m| lerr("policy_by", m))?;
                needs_source(&by)?;
                let plans = l.policies.ok_or_else(|| {
                    lerr(
                        "policy_by",
                        "needs `policies`, a table of plan = policy, like `{ free = \"search-free\" }`".into(),
                    )
                })?;
                if plans.is_empty() {
                    return Err(lerr("policies", "must name at least one plan".into()));
                }
                if plans.keys().any(String::is_empty) {
                    return Err(lerr("policies", "a plan name must not be empty".into()));
                }
                let default = l.default_policy.ok_or_else(|| {
                    lerr(
                        "policy_by",
                        "needs `default_policy`: the policy of requests with no plan, or one `policies` does not name"
                            .into(),
                    )
                })?;
                let named: Vec<String> = plans.keys().cloned().collect();
                let mut choices: Vec<(String, Option<PlanChoice>)> = plans
                    .into_iter()
                    .map(|(plan, policy)| {
                        (policy, Some(PlanChoice { by: by.clone(), plan: Some(plan), named: named.clone() }))
                    })
                    .collect();
                choices.push((default, Some(PlanChoice { by, plan: None, named })));
                choices
            }
        };
        for (name, plan) in choices {
            let field = match &plan {
                None => String::new(),
                Some(PlanChoice { plan: Some(p), .. }) => format!("policies.{p}"),
                Some(PlanChoice { plan: None, .. }) => "default_policy".to_string(),
            };
            let policy = *policies.get(&name).ok_or_else(|| lerr(&field, format!("no policy named `{name}`")))?;
            configured[policy].policy.check_cost(cost).map_err(|e| {
                let limit = e.capacity;
                lerr(&field, format!("cost {cost} exceeds policy `{name}`'s limit {limit}: no request could pass"))
            })?;
            limits.push(RouteLimit { policy, key: key.clone(), cost, plan });
        }
    }
    let mut loosen = Loosen::default();
    for name in &r.loosen {
        match name.as_str() {
            "content-type" => loosen.content_type = true,
            "query" => loosen.query = true,
            other => {
                let known = Loosen::NAMES.join(", ");
                return Err(err("loosen", format!("`{other}` is not a refusal a route can waive ({known})")));
            }
        }
    }
    if (loosen.content_type || loosen.query) && !limits.iter().any(|l| l.key.needs_body()) {
        return Err(err(
            "loosen",
            "`content-type` and `query` waive refusals of body key parts (json:, form:), and no limit here has one"
                .into(),
        ));
    }
    Ok(Route { name: r.name.unwrap_or_else(|| r.path.clone()), path, methods, limits, loosen })
}

/// Parses one key part: sources separated by `|`, tried in order.
fn key_part(text: &str) -> Result<Vec<KeySource>, String> {
    text.split('|')
        .map(|s| {
            let s = s.trim();
            if let Some(inner) = s.strip_prefix("email(").and_then(|r| r.strip_suffix(')')) {
                let inner = key_part(inner)?;
                return match inner.as_slice() {
                    [
                        one @ (KeySource::Header(_)
                        | KeySource::Json(_)
                        | KeySource::Form(_)
                        | KeySource::User
                        | KeySource::Jwt(_)),
                    ] => Ok(KeySource::Email(Box::new(one.clone()))),
                    _ => Err(format!("`{s}`: email(...) takes one header:, json:, form:, jwt: or user part")),
                };
            }
            let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
            let need_arg = |what: &str| {
                if arg.is_empty() { Err(format!("key part `{s}` needs {what}")) } else { Ok(arg.to_string()) }
            };
            match kind {
                "ip" => Ok(KeySource::Ip),
                "user" => Ok(KeySource::User),
                "method" => Ok(KeySource::Method),
                "path" => Ok(KeySource::Path),
                "route" => Ok(KeySource::Route),
                "header" => {
                    Ok(KeySource::Header(need_arg("a header name, like `header:x-api-key`")?.to_ascii_lowercase()))
                }
                "json" => {
                    let p = need_arg("a JSON pointer, like `json:/email`")?;
                    if !p.starts_with('/') {
                        return Err(format!("`{p}` is not a JSON pointer (it starts with `/`)"));
                    }
                    Ok(KeySource::Json(p))
                }
                "form" => {
                    let name = need_arg("a form field name, like `form:email`")?;
                    if name.bytes().any(|b| !b.is_ascii_graphic() || b"&=;%+".contains(&b)) {
                        return Err(format!(
                            "`{name}` is not a form field name (printable ASCII without `&`, `=`, `;`, `%` or `+`)"
                        ));
                    }
                    Ok(KeySource::Form(name))
                }
                "const" => Ok(KeySource::Const(need_arg("a value, like `const:global`")?)),
                "jwt" => Ok(KeySource::Jwt(claim_pointer(&need_arg("a claim, like `jwt:sub` or `jwt:/tenant/id`")?))),
                other => Err(format!(
                    "unknown key part `{other}` (ip, header:NAME, user, json:/pointer, form:FIELD, jwt:CLAIM, method, \
                     path, route, const:VALUE, email(...))"
                )),
            }
        })
        .collect()
}

/// The JSON pointer of a `jwt:` claim: `/...` as written, a bare name as the top-level member
/// of that name (`sub` is `/sub`; `~` and `/` in it escaped as RFC 6901 says).
fn claim_pointer(claim: &str) -> String {
    if claim.starts_with('/') { claim.to_owned() } else { format!("/{}", claim.replace('~', "~0").replace('/', "~1")) }
}

/// The source of `policy_by`: one source a client cannot set for itself. A header is believed
/// only from trusted proxies (so it needs some), as the user header is.
fn plan_source(text: &str, server: &Server) -> Result<KeySource, String> {
    let chain = key_part(text)?;
    match chain.as_slice() {
        [by @ (KeySource::Jwt(_) | KeySource::User)] => Ok(by.clone()),
        [by @ KeySource::Header(_)] if server.trusted_proxies.is_empty() => Err(format!(
            "`{by}` is believed only from trusted proxies (a client must not choose its own quota): set \
             `server.trusted_proxies`, or read the plan from a verified token (`jwt:plan`)"
        )),
        [by @ KeySource::Header(_)] => Ok(by.clone()),
        _ => Err(format!(
            "`{text}`: the plan comes from one of jwt:CLAIM, user, or header:NAME (believed from trusted proxies only)"
        )),
    }
}

fn store(src: &Source<'_>, raw: Option<toml::Spanned<RawStore>>) -> Result<StoreConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(StoreConfig::Memory {
            max_keys: 1_000_000,
            shards: 64,
            when_full: WhenFull::default(),
            snapshot: None,
        });
    };
    let span = raw.span();
    let s = raw.into_inner();
    let err = |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("store.{field}"), msg);
    match s.kind.as_deref().unwrap_or("memory") {
        "memory" => {
            for (field, there) in [
                ("url", s.url.is_some()),
                ("urls", s.urls.is_some()),
                ("on_error", s.on_error.is_some()),
                ("key_prefix", s.key_prefix.is_some()),
                ("timeout_ms", s.timeout_ms.is_some()),
            ] {
                if there {
                    return Err(err(field, "applies only to kind = \"redis\"".into()));
                }
            }
            let snapshot = snapshot(src, &s).map_err(|(field, msg)| err(field, msg))?;
            let max_keys = s.max_keys.unwrap_or(1_000_000);
            if max_keys == 0 {
                return Err(err("max_keys", "must be at least 1".into()));
            }
            let shards = s.shards.unwrap_or(64);
            if !shards.is_power_of_two() {
                return Err(err("shards", format!("{shards} is not a power of two")));
            }
            let when_full = when_full(&s).map_err(|(field, msg)| err(field, msg))?;
            Ok(StoreConfig::Memory { max_keys, shards, when_full, snapshot })
        }
        "redis" => {
            for (field, there) in
                [("snapshot", s.snapshot.is_some()), ("snapshot_interval", s.snapshot_interval.is_some())]
            {
                if there {
                    return Err(err(field, "applies only to kind = \"memory\" (Redis keeps its own state)".into()));
                }
            }
            let urls = match (s.url, s.urls) {
                (Some(u), None) => vec![u],
                (None, Some(us)) if !us.is_empty() => us,
                (None, _) => return Err(err("url", "kind = \"redis\" needs `url` (or `urls` for a cluster)".into())),
                (Some(_), Some(_)) => return Err(err("urls", "give `url` or `urls`, not both".into())),
            };
            let urls: Vec<SecretUrl> = urls.into_iter().map(SecretUrl::new).collect();
            if let Some(bad) =
                urls.iter().find(|u| !(u.expose().starts_with("redis://") || u.expose().starts_with("rediss://")))
            {
                return Err(err("url", format!("`{bad}` must start with redis://")));
            }
            const MODES: &str = "choose what sluice does when Redis is slow or down:\n  \
                on_error = \"fail-closed\"  answer 503 with Retry-After: nothing passes unlimited (logins, password resets)\n  \
                on_error = \"fail-open\"    admit every request: the limit is off until Redis is back (cheap reads)\n  \
                on_error = \"local\"        fall back to an in-memory limiter per instance: each instance grants the full limit";
            let on_error = match s.on_error.as_deref() {
                Some("fail-open") => OnError::FailOpen,
                Some("fail-closed") => OnError::FailClosed,
                Some("local") => OnError::Local,
                Some(other) => return Err(err("on_error", format!("`{other}` is not a failure mode; {MODES}"))),
                None => {
                    let line = src.field_line(&span, "kind");
                    return Err(src.error(
                        Some(line),
                        "store.on_error",
                        format!("is required with kind = \"redis\"; {MODES}"),
                    ));
                }
            };
            let timeout_ms = s.timeout_ms.unwrap_or(50);
            if timeout_ms == 0 {
                return Err(err("timeout_ms", "must be at least 1".into()));
            }
            Ok(StoreConfig::Redis {
                urls,
                cluster: s.cluster,
                on_error,
                timeout_ms,
                key_prefix: s.key_prefix.unwrap_or_else(|| "sluice".into()),
            })
        }
        other => Err(err("kind", format!("unknown store `{other}` (memory, redis)"))),
    }
}

/// `snapshot` and `snapshot_interval` of a memory store, or the field at fault and why.
fn snapshot(src: &Source<'_>, s: &RawStore) -> Result<Option<Snapshot>, (&'static str, String)> {
    let Some(path) = s.snapshot.as_deref() else {
        if s.snapshot_interval.is_some() {
            return Err(("snapshot_interval", "needs `snapshot`, the file to write".into()));
        }
        return Ok(None);
    };
    if path.is_empty() || path.ends_with('/') {
        return Err(("snapshot", format!("`{path}` names no file")));
    }
    let interval =
        parse_duration(s.snapshot_interval.as_deref().unwrap_or("10s")).map_err(|m| ("snapshot_interval", m))?;
    if interval < 100 * NANOS_PER_MILLI {
        return Err(("snapshot_interval", "must be at least 100ms (each write is the whole state)".into()));
    }
    Ok(Some(Snapshot { path: src.beside(path), interval }))
}

/// `when_full`, `fold_width` and `fold_depth` of a memory store, or the field at fault and why.
/// `evict-lru`, the old default, is a deprecated spelling of `fold`: it evicts without loosening.
fn when_full(s: &RawStore) -> Result<WhenFull, (&'static str, String)> {
    let other_than_fold = match s.when_full.as_deref().unwrap_or("fold") {
        "fold" | "evict-lru" => None,
        "refuse" => Some(WhenFull::Refuse),
        "forget" => Some(WhenFull::Forget),
        other => return Err(("when_full", format!("`{other}` is not fold, refuse or forget"))),
    };
    if let Some(when_full) = other_than_fold {
        for (field, there) in [("fold_width", s.fold_width.is_some()), ("fold_depth", s.fold_depth.is_some())] {
            if there {
                return Err((field, "applies only to when_full = \"fold\"".into()));
            }
        }
        return Ok(when_full);
    }
    let mut size = FoldSize::default();
    if let Some(width) = s.fold_width {
        if width == 0 {
            return Err(("fold_width", "must be at least 1".into()));
        }
        size.width = Some(width);
    }
    if let Some(depth) = s.fold_depth {
        if !(1..=MAX_FOLD_DEPTH).contains(&depth) {
            return Err(("fold_depth", format!("{depth} is not between 1 and {MAX_FOLD_DEPTH}")));
        }
        size.depth = depth;
    }
    Ok(WhenFull::Fold(size))
}

fn rls(src: &Source<'_>, raw: toml::Spanned<RawRls>) -> Result<Rls, ConfigError> {
    let span = raw.span();
    let r = raw.into_inner();
    let listen = addr(src, &span, "rls", "listen", r.listen.as_deref().unwrap_or("0.0.0.0:8081"))?;
    let charge = match r.charge.as_deref().unwrap_or("all-or-nothing") {
        "all-or-nothing" => RlsCharge::AllOrNothing,
        "independent" => RlsCharge::Independent,
        other => {
            let line = Some(src.field_line(&span, "charge"));
            return Err(src.error(
                line,
                "rls.charge",
                format!("`{other}` is neither `all-or-nothing` nor `independent`"),
            ));
        }
    };
    let watch_interval = match parse_duration(r.watch_interval.as_deref().unwrap_or("2s")) {
        Ok(0) => None,
        Ok(n) if n < 100 * NANOS_PER_MILLI => {
            let line = Some(src.field_line(&span, "watch_interval"));
            return Err(src.error(line, "rls.watch_interval", "must be at least 100ms, or 0s for SIGHUP only"));
        }
        Ok(n) => Some(n),
        Err(m) => return Err(src.error(Some(src.field_line(&span, "watch_interval")), "rls.watch_interval", m)),
    };
    Ok(Rls { listen, descriptors: r.descriptors.into(), charge, watch_interval })
}

/// The decision API's path (`sluice_gateway::decision_api::PATH`), which it answers first.
const DECISION_API_PATH: &str = "/v1/check";

fn forward_auth(
    src: &Source<'_>,
    raw: toml::Spanned<RawForwardAuth>,
    server: &Server,
) -> Result<ForwardAuth, ConfigError> {
    let span = raw.span();
    let f = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("forward_auth.{field}"), msg);
    let path = f.path.unwrap_or_else(|| "/v1/authz".into());
    // Compared with the request's path as sent: only its normal form can be asked for.
    match request_path(&path) {
        Ok(normal) if normal == path.as_str() => {}
        Ok(normal) => return Err(err("path", format!("write `{path}` in its normal form, `{normal}`"))),
        Err(_) => return Err(err("path", format!("`{path}` is not a path like `/v1/authz`"))),
    }
    if path == DECISION_API_PATH || path == "/" {
        return Err(err("path", format!("`{path}` is taken; use another path, like `/v1/authz`")));
    }
    if server.trusted_proxies.is_empty() {
        return Err(err(
            "path",
            "forward-auth answers only trusted proxies (anyone else could spend any client's quota by naming it): \
             list the proxies' addresses in server.trusted_proxies"
                .into(),
        ));
    }
    let deny_status = f.deny_status.unwrap_or(server.deny_status);
    if !(400..=599).contains(&deny_status) {
        return Err(err("deny_status", format!("{deny_status} is not a 4xx or 5xx status")));
    }
    Ok(ForwardAuth { path, deny_status })
}

fn decision_log(src: &Source<'_>, raw: Option<toml::Spanned<RawDecisionLog>>) -> Result<DecisionLog, ConfigError> {
    let Some(raw) = raw else {
        return Ok(DecisionLog { sample: 0.01, denials_per_second: 100.0 });
    };
    let span = raw.span();
    let d = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("decision_log.{field}"), msg);
    let sample = d.sample.unwrap_or(0.01);
    if !(0.0..=1.0).contains(&sample) {
        return Err(err("sample", format!("{sample} is not a share between 0 and 1")));
    }
    let denials_per_second = d.denials_per_second.unwrap_or(100.0);
    if !(denials_per_second.is_finite() && denials_per_second >= 0.0) {
        return Err(err("denials_per_second", format!("{denials_per_second} is not a rate (0 or more)")));
    }
    Ok(DecisionLog { sample, denials_per_second })
}

#[cfg(test)]
mod tests {
    use super::check_authority;

    #[test]
    fn upstream_authorities_the_http_client_accepts() {
        for ok in ["127.0.0.1:9000", "api.internal:80", "localhost", "[::1]:8080", "[2001:db8::1]", "my_host-1.lan:1"] {
            assert_eq!(check_authority(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:notaport",
            "exa mple:80",
            "host:",
            "host:70000",
            ":80",
            "::1:80",
            "[::1",
            "[::1]x",
            "[nope]:80",
            "user@host:80",
        ] {
            assert!(check_authority(bad).is_err(), "{bad}");
        }
    }
}
