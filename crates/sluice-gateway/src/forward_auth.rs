//! Forward-auth (`[forward_auth]`): a proxy that asks before it forwards — Caddy
//! `forward_auth`, Traefik `forwardAuth`, nginx `auth_request` — sends sluice a request naming
//! the original one, and sluice decides that original exactly as the gateway would: the same
//! path normalisation and refusals, the first matching route, the same keys and limits, the same
//! metrics and decision log lines.
//!
//! - The original's method comes from `X-Forwarded-Method` (Traefik, Caddy) or
//!   `X-Original-Method` (nginx recipes), its URI from `X-Forwarded-Uri` or `X-Original-URI`
//!   (only the path is read; the query string never chooses a route). Missing, written in
//!   several lines, or the two spellings naming different values: 400. Its path is refused
//!   (400) as the gateway refuses a target's: among others, a path starting with `//`, which an
//!   application's URL parser reads as a host (`//evil/api/items` is `/api/items` to Node), in
//!   the origin form or the absolute form (`http://host//evil/api/items`).
//! - Only trusted proxies (`server.trusted_proxies`) are answered (403 otherwise, nothing
//!   decided): whoever can ask names the client, and so could spend anyone's quota. The client
//!   is resolved from the forwarding chain as usual, with the proxy as the peer; the other
//!   headers (API keys, the user header) are read as the proxy sent them.
//! - Admitted: 200 with the rate-limit headers (for Caddy's `copy_headers`, Traefik's
//!   `authResponseHeaders`, nginx's `auth_request_set`), after the shaping delay if any. Denied:
//!   `forward_auth.deny_status`, `Retry-After`, `Cache-Control: no-store` and the JSON body;
//!   `on_deny = "drop"` does not apply (a dropped subrequest is a 5xx for the client). The store
//!   unable to decide: 503. An original no route matches: 200, unlimited (counted as unmatched).
//! - A route with a key read from the body (`json:`) cannot be decided: the proxy sends no body.
//!   Its originals are answered 500 `{"error":"not_decidable"}`, and each load of such a
//!   configuration logs a warning naming those routes ([`warn_undecidable`]).
//!
//! ```
//! use std::sync::Arc;
//! use http::HeaderMap;
//! use sluice_gateway::{forward_auth, gateway::Gateway, stores::MemoryStores};
//! let config = sluice_config::parse("gateway.toml", r#"
//! [server]
//! trusted_proxies = ["10.0.0.0/8"]
//! [forward_auth]
//! path = "/v1/authz"
//! [[policy]]
//! name = "per-ip"
//! algorithm = "fixed-window"
//! limit = 1
//! window = "1m"
//! [[route]]
//! path = "/api/*"
//! limits = [{ policy = "per-ip", key = "ip" }]
//! "#).unwrap();
//! let clock = Arc::new(sluice_core::ManualClock::new(0));
//! let gateway = Gateway::new(config, Box::new(MemoryStores::new(clock))).unwrap();
//! let loaded = gateway.config();
//! let mut asked = HeaderMap::new();
//! asked.insert("x-forwarded-method", "GET".parse().unwrap());
//! asked.insert("x-forwarded-uri", "/api/items?page=2".parse().unwrap());
//! asked.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
//! let ask = |peer: &str| {
//!     let answer = forward_auth::handle(&loaded.limiter, &loaded.observed, &loaded.config, peer.parse().unwrap(), &asked);
//!     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(answer).status()
//! };
//! assert_eq!(ask("198.51.100.1"), 403, "not a trusted proxy: nothing is decided");
//! assert_eq!(ask("10.0.0.2"), 200, "203.0.113.9's first request in this minute");
//! assert_eq!(ask("10.0.0.3"), 429, "and its second, through another proxy");
//! ```

use std::convert::Infallible;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, Method, Response, StatusCode};
use sluice_config::Config;

use sluice_http::body_key::needs_body;
use sluice_http::lifecycle::{Asked, Counted, Face, Lifecycle};
use sluice_http::pipeline::{Limiter, Ruling};
use sluice_http::response::Answer;

use crate::observe::{EVENT_TARGET, Observed};
use crate::respond::{self, Body};

/// The headers that name the original method: Traefik's and Caddy's, then nginx recipes'.
pub const METHOD_HEADERS: [HeaderName; 2] =
    [HeaderName::from_static("x-forwarded-method"), HeaderName::from_static("x-original-method")];

/// The headers that name the original URI (path and query): Traefik's and Caddy's, then nginx
/// recipes'.
pub const URI_HEADERS: [HeaderName; 2] =
    [HeaderName::from_static("x-forwarded-uri"), HeaderName::from_static("x-original-uri")];

/// Why the original request a proxy names cannot be read (400): deciding a request the proxy
/// did not clearly name would let someone choose what it is limited as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginalRefusal {
    /// Neither header of the pair is there.
    #[error("The proxy did not name the original request's {0} (send X-Forwarded-{1} or X-Original-{1}).")]
    Missing(&'static str, &'static str),
    /// A header of the pair is in several lines.
    #[error("`{0}` is sent in several lines: the original request is ambiguous.")]
    Repeated(HeaderName),
    /// Both headers of the pair are there, with different values.
    #[error("`{0}` and `{1}` name different original requests.")]
    Disagree(HeaderName, HeaderName),
    /// The method is not an HTTP method (a token).
    #[error("The original method is not an HTTP method.")]
    BadMethod,
    /// The URI is not a path (`/...`, with an optional query) nor an absolute URI.
    #[error("The original URI is not a request target like `/path?query`.")]
    BadUri,
}

/// The original request a proxy asks about, as its headers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Original<'h> {
    /// Its method, as sent (routes match it whatever its case).
    pub method: &'h str,
    /// Its path as sent, query string and fragment dropped; not yet normalised.
    pub path: &'h str,
}

impl<'h> Original<'h> {
    /// Reads the original method and URI from the headers of a forward-auth request.
    ///
    /// ```
    /// use sluice_gateway::forward_auth::{Original, OriginalRefusal};
    /// let mut h = http::HeaderMap::new();
    /// h.insert("x-original-method", "HEAD".parse().unwrap());
    /// h.insert("x-original-uri", "/api/a;x=1?b=%2F".parse().unwrap());
    /// assert_eq!(Original::from_headers(&h), Ok(Original { method: "HEAD", path: "/api/a;x=1" }));
    /// h.append("x-original-uri", "/other".parse().unwrap());
    /// assert!(matches!(Original::from_headers(&h), Err(OriginalRefusal::Repeated(_))));
    /// ```
    pub fn from_headers(headers: &'h HeaderMap) -> Result<Self, OriginalRefusal> {
        let method = one_of(headers, &METHOD_HEADERS)?.ok_or(OriginalRefusal::Missing("method", "Method"))?;
        let uri = one_of(headers, &URI_HEADERS)?.ok_or(OriginalRefusal::Missing("URI", "Uri"))?;
        let method = std::str::from_utf8(method).map_err(|_| OriginalRefusal::BadMethod)?;
        if Method::from_bytes(method.as_bytes()).is_err() {
            return Err(OriginalRefusal::BadMethod);
        }
        Ok(Self { method, path: uri_path(uri)? })
    }
}

/// The one value the pair `names` gives: each at most one line, and equal when both are there.
fn one_of<'h>(headers: &'h HeaderMap, names: &[HeaderName; 2]) -> Result<Option<&'h [u8]>, OriginalRefusal> {
    let mut found: Option<(&HeaderName, &[u8])> = None;
    for name in names {
        let mut lines = headers.get_all(name).iter();
        let Some(line) = lines.next() else { continue };
        if lines.next().is_some() {
            return Err(OriginalRefusal::Repeated(name.clone()));
        }
        match found {
            Some((first, value)) if value != line.as_bytes() => {
                return Err(OriginalRefusal::Disagree(first.clone(), name.clone()));
            }
            Some(_) => {}
            None => found = Some((name, line.as_bytes())),
        }
    }
    Ok(found.map(|(_, value)| value))
}

/// The path of a request target: origin form (`/path?query`) or absolute form
/// (`http://host/path?query`). Only visible ASCII, no spaces, as in a request line.
fn uri_path(uri: &[u8]) -> Result<&str, OriginalRefusal> {
    if uri.is_empty() || !uri.iter().all(|b| (0x21..0x7f).contains(b)) {
        return Err(OriginalRefusal::BadUri);
    }
    let text = std::str::from_utf8(uri).map_err(|_| OriginalRefusal::BadUri)?;
    let target = match text.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
            match rest.find(['/', '?', '#']) {
                Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
                _ => "/",
            }
        }
        _ if text.starts_with('/') => text,
        _ => return Err(OriginalRefusal::BadUri),
    };
    Ok(target.split(['?', '#']).next().unwrap_or("/"))
}

/// Decides the original request a forward-auth request names, from `peer` with `headers` (its
/// body is never read), by the routes and limits of `config`; counted and logged through
/// `observed` under the matched route's name. See the module's documentation for the answers.
pub async fn handle(
    limiter: &Limiter,
    observed: &Observed,
    config: &Config,
    peer: IpAddr,
    headers: &HeaderMap,
) -> Response<Body> {
    let client = limiter.client(peer, headers);
    if !client.peer_trusted {
        return respond::error(
            403,
            "forbidden",
            "Forward-auth answers only the trusted proxies (server.trusted_proxies).",
        );
    }
    let original = match Original::from_headers(headers) {
        Ok(o) => o,
        Err(why) => return respond::answer(Answer::bad_request(&why.to_string())),
    };
    let asked = Asked { method: original.method, path: original.path, query: None, headers, tls: None };
    let face = Asking { config };
    match Lifecycle::new(limiter, observed).routed(&config.routes, &client, asked, face).await {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

/// Forward-auth's face: an admitted original is answered 200 (with the rate-limit headers, for
/// the proxy to copy), a denial with `forward_auth.deny_status`, an original no route matches
/// 200 unlimited; bodies are never received.
struct Asking<'a> {
    /// The configuration (its `[forward_auth]` deny status).
    config: &'a Config,
}

impl<'a> Face for Asking<'a> {
    type Request = Asked<'a>;
    type Response = Response<Body>;
    type Error = Infallible;

    respond::server_responses!();

    async fn pass_on(self, _: Asked<'_>, at: Counted<'_>, _: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        Ok(respond::json(200, &respond::Allowed { status: "allowed", route: at.name() }))
    }

    fn deny(self, _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        let mut answer = ruling.denial();
        if let Some(status) = self.config.forward_auth.as_ref().and_then(|f| StatusCode::from_u16(f.deny_status).ok()) {
            answer.status = status;
        }
        Ok(respond::answer(answer))
    }

    async fn unmatched(self, _: Asked<'_>) -> Result<Response<Body>, Infallible> {
        Ok(respond::json(200, &Unlimited { status: "unlimited" }))
    }

    fn body_unreadable(self, _: usize) -> Response<Body> {
        respond::error(
            500,
            "not_decidable",
            "This route keys a limit on the request body, which forward-auth does not receive.",
        )
    }
}

/// The body of an original that no route limits.
#[derive(serde::Serialize)]
struct Unlimited {
    /// Always `unlimited`.
    status: &'static str,
}

/// The routes of `config` that forward-auth cannot decide (a key read from the body), when
/// `[forward_auth]` is on; empty otherwise.
pub fn undecidable(config: &Config) -> Vec<&str> {
    if config.forward_auth.is_none() {
        return Vec::new();
    }
    config.routes.iter().filter(|r| needs_body(&r.limits)).map(|r| r.name.as_str()).collect()
}

/// Logs a warning (a service event) naming the routes forward-auth will answer 500, if any. The
/// gateway may still decide them; a proxy asking about them gets `not_decidable`.
pub fn warn_undecidable(config: &Config) {
    let routes = undecidable(config);
    if routes.is_empty() {
        return;
    }
    tracing::warn!(
        target: EVENT_TARGET,
        event = "forward_auth_undecidable",
        routes = ?routes,
        "forward-auth cannot decide routes keyed on the request body ({}): proxies asking about them get 500 not_decidable",
        routes.join(", ")
    );
}
