//! The rate-limit headers a client can follow, in the styles clients expect.

use http::HeaderMap;
use http::header::{CACHE_CONTROL, HeaderName, HeaderValue, RETRY_AFTER};
use sluice_config::HeaderStyle;
use sluice_core::{Decision, Nanos, ceil_secs};

/// The limit a response describes: its policy name, window, and decision.
#[derive(Debug, Clone, Copy)]
pub struct LimitView<'a> {
    /// Policy name (quoted in the `ietf` style).
    pub name: &'a str,
    /// Window length (for the buckets: the time to refill from empty).
    pub window: Nanos,
    /// The decision to describe.
    pub decision: Decision,
}

/// Whole seconds a denied client should wait: `retry_after` rounded up, at least 1.
pub fn retry_after_secs(d: &Decision) -> u64 {
    ceil_secs(d.retry_after).max(1)
}

static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Writes the rate-limit headers of `view` in each of `styles` (with both `draft-6` and `ietf`,
/// `RateLimit-Policy` takes the `ietf` form only). `unix_now` (seconds) is used by
/// `x-ratelimit`, whose reset is an absolute time.
///
/// ```
/// use sluice_config::HeaderStyle;
/// use sluice_core::{Decision, NANOS_PER_SEC};
/// use sluice_http::headers::{write_rate_limit_headers, LimitView};
/// let decision = Decision { allowed: true, limit: 100, remaining: 50, reset_after: 30 * NANOS_PER_SEC,
///                           retry_after: 0, delay: 0 };
/// let view = LimitView { name: "per-ip", window: 60 * NANOS_PER_SEC, decision };
/// let mut h = http::HeaderMap::new();
/// write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf, HeaderStyle::Draft6], &view, 1_700_000_000);
/// assert_eq!(h["ratelimit-policy"], "\"per-ip\";q=100;w=60");
/// assert_eq!(h["ratelimit"], "\"per-ip\";r=50;t=30");
/// assert_eq!(h["ratelimit-limit"], "100");
/// ```
pub fn write_rate_limit_headers(out: &mut HeaderMap, styles: &[HeaderStyle], view: &LimitView<'_>, unix_now: u64) {
    let d = &view.decision;
    let reset = ceil_secs(d.reset_after);
    let window = ceil_secs(view.window).max(1);
    for style in styles {
        match style {
            HeaderStyle::Draft6 => {
                out.insert(RATELIMIT_LIMIT.clone(), HeaderValue::from(d.limit));
                out.insert(RATELIMIT_REMAINING.clone(), HeaderValue::from(d.remaining));
                out.insert(RATELIMIT_RESET.clone(), HeaderValue::from(reset));
                // Both styles name a `RateLimit-Policy` header, in two syntaxes: with `ietf`
                // also configured, only its (current) form is sent.
                if !styles.contains(&HeaderStyle::Ietf)
                    && let Ok(v) = HeaderValue::from_str(&format!("{};w={window}", d.limit))
                {
                    out.append(RATELIMIT_POLICY.clone(), v);
                }
            }
            HeaderStyle::Ietf => {
                let name = sf_string(view.name);
                if let Ok(v) = HeaderValue::from_str(&format!("{name};q={};w={window}", d.limit)) {
                    out.append(RATELIMIT_POLICY.clone(), v);
                }
                if let Ok(v) = HeaderValue::from_str(&format!("{name};r={};t={reset}", d.remaining)) {
                    out.insert(RATELIMIT.clone(), v);
                }
            }
            HeaderStyle::XRateLimit => {
                out.insert(X_LIMIT.clone(), HeaderValue::from(d.limit));
                out.insert(X_REMAINING.clone(), HeaderValue::from(d.remaining));
                out.insert(X_RESET.clone(), HeaderValue::from(unix_now.saturating_add(reset)));
            }
        }
    }
}

/// Writes what every denial carries: `Retry-After` (whole seconds, at least 1) and
/// `Cache-Control: no-store` (RFC 6585: a 429 must not be cached).
pub fn write_denial_headers(out: &mut HeaderMap, retry_after_secs: u64) {
    out.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    out.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Writes everything a denial carries: the rate-limit headers of the limit that denied (when
/// known), `Retry-After` and `Cache-Control: no-store`. Returns the `Retry-After` seconds.
pub fn write_denied(out: &mut HeaderMap, styles: &[HeaderStyle], view: Option<&LimitView<'_>>, unix_now: u64) -> u64 {
    let secs = view.map_or(1, |v| retry_after_secs(&v.decision));
    if let Some(v) = view {
        write_rate_limit_headers(out, styles, v, unix_now);
    }
    write_denial_headers(out, secs);
    secs
}

/// A structured-field string: quoted, with `\` and `"` escaped and non-printable bytes dropped.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::NANOS_PER_SEC;

    fn view(remaining: u64, reset_ns: u64) -> LimitView<'static> {
        LimitView {
            name: "per\"ip",
            window: 60 * NANOS_PER_SEC,
            decision: Decision { allowed: true, limit: 10, remaining, reset_after: reset_ns, retry_after: 0, delay: 0 },
        }
    }

    #[test]
    fn draft6_and_x_styles() {
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Draft6, HeaderStyle::XRateLimit], &view(3, 1), 1000);
        assert_eq!(h["ratelimit-limit"], "10");
        assert_eq!(h["ratelimit-remaining"], "3");
        assert_eq!(h["ratelimit-reset"], "1");
        assert_eq!(h["ratelimit-policy"], "10;w=60");
        assert_eq!(h["x-ratelimit-reset"], "1001");
        assert_eq!(h["x-ratelimit-remaining"], "3");
    }

    #[test]
    fn ietf_quotes_names() {
        let mut h = HeaderMap::new();
        write_rate_limit_headers(&mut h, &[HeaderStyle::Ietf], &view(0, 2_500_000_000), 0);
        assert_eq!(h["ratelimit-policy"], "\"per\\\"ip\";q=10;w=60");
        assert_eq!(h["ratelimit"], "\"per\\\"ip\";r=0;t=3");
    }

    #[test]
    fn retry_after_rounds_up_to_at_least_one_second() {
        let mut d = view(0, 0).decision;
        d.retry_after = 1;
        assert_eq!(retry_after_secs(&d), 1);
        d.retry_after = 0;
        assert_eq!(retry_after_secs(&d), 1);
        d.retry_after = NANOS_PER_SEC + 1;
        assert_eq!(retry_after_secs(&d), 2);
    }
}
