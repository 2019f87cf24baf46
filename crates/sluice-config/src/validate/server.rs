//! `[server]`: listening, trusted proxies and client identity, denials, in-flight bounds,
//! request bodies, the key secret.

use sluice_core::Nanos;

use super::address::{addr, ip_net};
use crate::defaults::{DEFAULT_IPV6_PREFIX, DEFAULT_LISTEN};
use crate::duration::parse_duration;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;
use crate::secret::read_secret;

/// `[server]`, and `server.decision_api` (the switch, which `[decision_api]` reads).
pub(super) fn server(
    src: &Source<'_>,
    raw: Option<toml::Spanned<RawServer>>,
) -> Result<(Server, Option<bool>), ConfigError> {
    let (span, s) = match raw {
        Some(s) => (s.span(), s.into_inner()),
        None => (0..0, RawServer::default()),
    };
    let err = |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("server.{field}"), msg);
    let listen = addr(src, &span, "server", "listen", s.listen.as_deref().unwrap_or(DEFAULT_LISTEN))?;
    let mut trusted_proxies = Vec::new();
    for p in &s.trusted_proxies {
        trusted_proxies.push(ip_net(p).map_err(|m| err("trusted_proxies", m))?);
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
    check_deny_status(deny_status).map_err(|m| err("deny_status", m))?;
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
    if let Some(n) = s.workers
        && !(1..=1024).contains(&n)
    {
        return Err(err("workers", format!("{n} worker threads: give 1 to 1024, or leave it out for one per core")));
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
    let tunnel_idle_timeout = duration("tunnel_idle_timeout", s.tunnel_idle_timeout.as_deref(), "5m")?;
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
    let tls = match s.tls {
        None => None,
        Some(t) => {
            let tls_span = t.span();
            let t = t.into_inner();
            let pem = |span: &std::ops::Range<usize>, field: String, key: &str, path: &str| {
                pem_file(path).map_err(|msg| src.error(Some(src.field_line(span, key)), format!("{field}.{key}"), msg))
            };
            pem(&tls_span, "server.tls".into(), "cert", &t.cert)?;
            pem(&tls_span, "server.tls".into(), "key", &t.key)?;
            let mut by_name = Vec::new();
            for (i, pair) in t.certificates.into_iter().enumerate() {
                let span = pair.span();
                let pair = pair.into_inner();
                let field = format!("server.tls.certificates[{i}]");
                pem(&span, field.clone(), "cert", &pair.cert)?;
                pem(&span, field, "key", &pair.key)?;
                by_name.push(TlsPair { cert: pair.cert.into(), key: pair.key.into() });
            }
            if let Some(ca) = &t.client_ca {
                pem(&tls_span, "server.tls".into(), "client_ca", ca)?;
            }
            let client_auth_optional = match (t.client_auth.as_deref(), &t.client_ca) {
                (None | Some("required"), _) => false,
                (Some("optional"), Some(_)) => true,
                (Some("optional"), None) => {
                    let line = src.field_line(&tls_span, "client_auth");
                    return Err(src.error(
                        Some(line),
                        "server.tls.client_auth",
                        "applies only with `client_ca` (the certificates a client's must chain to)",
                    ));
                }
                (Some(other), _) => {
                    let line = src.field_line(&tls_span, "client_auth");
                    return Err(src.error(
                        Some(line),
                        "server.tls.client_auth",
                        format!("`{other}` is neither `required` nor `optional`"),
                    ));
                }
            };
            Some(TlsFiles {
                cert: t.cert.into(),
                key: t.key.into(),
                by_name,
                client_ca: t.client_ca.map(Into::into),
                client_auth_optional,
            })
        }
    };
    let cors = s.cors.map(|c| super::cors::cors(src, c)).transpose()?;
    let http2 = match s.http2 {
        None => Http2Limits::default(),
        Some(h) => {
            let h2_span = h.span();
            let h = h.into_inner();
            let err = |field: &str, msg: String| {
                src.error(Some(src.field_line(&h2_span, field)), format!("server.http2.{field}"), msg)
            };
            let d = Http2Limits::default();
            let within =
                |field: &str, v: Option<u32>, default: u32, range: std::ops::RangeInclusive<u32>, why: &str| {
                    let v = v.unwrap_or(default);
                    if range.contains(&v) {
                        Ok(v)
                    } else {
                        Err(err(field, format!("{v} is outside {}..={} ({why})", range.start(), range.end())))
                    }
                };
            Http2Limits {
                max_concurrent_streams: within(
                    "max_concurrent_streams",
                    h.max_concurrent_streams,
                    d.max_concurrent_streams,
                    1..=10_000,
                    "streams open at once on one connection",
                )?,
                max_header_list_size: within(
                    "max_header_list_size",
                    h.max_header_list_size,
                    d.max_header_list_size,
                    1024..=1024 * 1024,
                    "bytes of one request's headers",
                )?,
                max_frame_size: within(
                    "max_frame_size",
                    h.max_frame_size,
                    d.max_frame_size,
                    16_384..=16_777_215,
                    "RFC 9113's bounds of SETTINGS_MAX_FRAME_SIZE",
                )?,
            }
        }
    };
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
        tls,
        h2c: s.h2c.unwrap_or(false),
        workers: s.workers,
        http2,
        tunnel_idle_timeout,
        cors,
    };
    Ok((server, s.decision_api))
}

/// `server.max_in_flight_per_client` when it is not set: a tenth of `max_in_flight`, not below
/// 64 nor above `max_in_flight` (see [`Server::max_in_flight_per_client`]).
fn default_in_flight_per_client(max_in_flight: usize) -> usize {
    (max_in_flight / 10).max(max_in_flight.min(64))
}

/// Checks that `path` can be read and holds a PEM section (`-----BEGIN ...`); or says why not.
/// What it holds is read by the TLS code, which names the file again if it cannot use it.
pub(super) fn pem_file(path: &str) -> Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    if !text.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("{path} holds no PEM section (-----BEGIN ...)"));
    }
    Ok(())
}
