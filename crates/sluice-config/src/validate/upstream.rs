//! `[upstream]`: an `http://host:port` or `https://host:port` the HTTP client accepts, its
//! certificates, its protocol and its timeout.

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;

/// `[upstream]`.
pub(super) fn upstream(src: &Source<'_>, raw: toml::Spanned<RawUpstream>) -> Result<Upstream, ConfigError> {
    let span = raw.span();
    one(src, &span, "upstream", "url", raw.into_inner())
}

/// One upstream target: `u` read in the table `table` (`upstream`, `upstreams[2]`), whose URL
/// is the field `url_field` (`url`, `targets`).
pub(super) fn one(
    src: &Source<'_>,
    span: &std::ops::Range<usize>,
    table: &str,
    url_field: &str,
    u: RawUpstream,
) -> Result<Upstream, ConfigError> {
    let err = |field: &str, msg: String| {
        let field = if field == "url" { url_field } else { field };
        src.error(Some(src.field_line(span, field)), format!("{table}.{field}"), msg)
    };
    let (scheme, rest) = match (u.url.strip_prefix("http://"), u.url.strip_prefix("https://")) {
        (Some(rest), _) => ("http", rest),
        (_, Some(rest)) => ("https", rest),
        _ => return Err(err("url", format!("`{}` must start with http:// or https://", u.url))),
    };
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') || authority.contains('?') {
        return Err(err("url", format!("`{}` must be `{scheme}://host:port` with no path", u.url)));
    }
    if scheme == "http" {
        for (field, given) in
            [("ca", u.ca.is_some()), ("client_cert", u.client_cert.is_some()), ("client_key", u.client_key.is_some())]
        {
            if given {
                return Err(err(field, "applies only to an `https://` upstream".into()));
            }
        }
    }
    let pem = |field: &str, path: &str| super::server::pem_file(path).map_err(|m| err(field, m));
    if let Some(ca) = &u.ca {
        pem("ca", ca)?;
    }
    let client_cert = match (u.client_cert, u.client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            pem("client_cert", &cert)?;
            pem("client_key", &key)?;
            Some(TlsPair { cert: cert.into(), key: key.into() })
        }
        (Some(_), None) => return Err(err("client_cert", "needs `client_key`, its private key".into())),
        (None, Some(_)) => return Err(err("client_key", "needs `client_cert`, its certificate chain".into())),
    };
    // What the HTTP client would refuse at start (or on reload) is refused here, with the field.
    check_authority(authority).map_err(|why| err("url", format!("`{}`: {why}", u.url)))?;
    let timeout_ms = u.timeout_ms.unwrap_or(30_000);
    if timeout_ms == 0 {
        return Err(err("timeout_ms", "must be at least 1".into()));
    }
    let timeout = timeout_ms.saturating_mul(1_000_000);
    let stages = timeouts(u.timeouts.unwrap_or_default())
        .map_err(|(stage, m)| src.error(Some(src.field_line(span, stage)), format!("{table}.timeouts.{stage}"), m))?;
    Ok(Upstream {
        url: format!("{scheme}://{authority}"),
        ca: u.ca.map(Into::into),
        client_cert,
        http2: u.http2.unwrap_or(false),
        timeout,
        timeouts: stages.over(StageTimeouts::all(timeout)),
    })
}

/// A `timeouts` table (an upstream's or a route's): each stage a duration longer than 0;
/// `Err` names the stage.
pub(super) fn timeouts(t: RawTimeouts) -> Result<TimeoutsOverride, (&'static str, String)> {
    let stage = |name: &'static str, text: Option<String>| match text.as_deref().map(crate::parse_duration) {
        None => Ok(None),
        Some(Err(m)) => Err((name, m)),
        Some(Ok(0)) => Err((name, "must be longer than 0".to_string())),
        Some(Ok(n)) => Ok(Some(n)),
    };
    Ok(TimeoutsOverride {
        connect: stage("connect", t.connect)?,
        first_byte: stage("first_byte", t.first_byte)?,
        idle: stage("idle", t.idle)?,
    })
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
