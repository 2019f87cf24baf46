//! CORS for sluice's own answers (`[server.cors]`, a route's `cors`): browser code on an allowed
//! origin can read a 429's `Retry-After` and rate-limit headers — without them a page sees an
//! opaque failure and cannot tell its user when to come back. Preflights are passed on or
//! answered, and never charged unless their route lists `OPTIONS`.
//!
//! What the upstream answers is its own business: its CORS headers pass untouched, and when it
//! allowed the origin, sluice's rate-limit header names are added to the ones it exposes.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use sluice_config::{Config, Origins, Preflight};

use crate::respond::{self, Body};

/// The headers of sluice's that a page may read.
const EXPOSED: &str = "Retry-After, RateLimit, RateLimit-Policy, RateLimit-Limit, RateLimit-Remaining, \
RateLimit-Reset, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-Request-Id";

/// What a request with an `Origin` asks of CORS, under the configuration in force.
#[derive(Debug, Clone)]
pub struct Asked {
    /// `Access-Control-Allow-Origin` for it: its origin, or `*`; `None` when it is not allowed.
    allow: Option<HeaderValue>,
    /// A preflight that is not charged: its method and headers asked for.
    preflight: Option<(HeaderValue, Option<HeaderValue>)>,
    /// The route of the request the page means (a preflight's: the method it names).
    route: Option<usize>,
}

/// Whether any CORS is configured (the server's, or a route's).
pub fn configured(config: &Config) -> bool {
    config.server.cors.is_some() || config.routes.iter().any(|r| r.cors.is_some())
}

impl Asked {
    /// What `req` asks, when CORS is configured and it has one `Origin`.
    pub fn of<B>(config: &Config, req: &Request<B>) -> Option<Self> {
        let mut origins = req.headers().get_all(header::ORIGIN).iter();
        let (Some(origin), None) = (origins.next(), origins.next()) else { return None };
        let preflight_method = (req.method() == Method::OPTIONS)
            .then(|| req.headers().get(header::ACCESS_CONTROL_REQUEST_METHOD))
            .flatten();
        let path = sluice_http::pipeline::route_path(req.uri().path()).ok();
        // The route of the request the page means: a preflight names its method.
        let method = preflight_method.and_then(|m| m.to_str().ok()).unwrap_or(req.method().as_str());
        let found = path.as_deref().and_then(|p| sluice_config::find_route(&config.routes, method, p));
        let (route_index, route) = (found.map(|(i, _)| i), found.map(|(_, r)| r));
        let allowed = match (route.and_then(|r| r.cors.as_ref()), &config.server.cors) {
            (Some(own), _) => own,
            (None, Some(server)) => &server.allow_origins,
            (None, None) => return None,
        };
        let allow = match allowed {
            Origins::Any => Some(HeaderValue::from_static("*")),
            list if list.allows(origin.as_bytes()) => Some(origin.clone()),
            _ => None,
        };
        // A preflight is charged only where a route lists OPTIONS itself.
        let charged = path.as_deref().is_some_and(|p| {
            sluice_config::find_route(&config.routes, "OPTIONS", p)
                .is_some_and(|(_, r)| r.methods.as_ref().is_some_and(|m| m.iter().any(|m| m == "OPTIONS")))
        });
        let preflight = match preflight_method {
            Some(m) if !charged => {
                Some((m.clone(), req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned()))
            }
            _ => None,
        };
        Some(Self { allow, preflight, route: route_index })
    }

    /// The route of the request the page means, by position.
    pub fn route(&self) -> Option<usize> {
        self.route
    }

    /// Whether it is a preflight that is not charged (passed on, or answered).
    pub fn uncharged_preflight(&self) -> bool {
        self.preflight.is_some()
    }

    /// Whether a preflight is answered by sluice rather than passed on (`preflight = "answer"`,
    /// or no upstream to pass it to).
    pub fn answered_here(config: &Config) -> bool {
        (config.upstream.is_none() && config.upstreams.is_empty())
            || config.server.cors.as_ref().is_some_and(|c| c.preflight == Preflight::Answer)
    }

    /// sluice's answer to an uncharged preflight: 204, the origin (when allowed), the method
    /// and headers it asked for, for `max_age`.
    pub fn preflight_answer(&self, config: &Config) -> Response<Body> {
        let mut res = respond::empty(StatusCode::NO_CONTENT);
        if let (Some(allow), Some((method, asked_headers))) = (&self.allow, &self.preflight) {
            let h = res.headers_mut();
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow.clone());
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, method.clone());
            if let Some(asked) = asked_headers {
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
            }
            let max_age = config.server.cors.as_ref().map_or(600, |c| c.max_age / 1_000_000_000);
            h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(max_age));
        }
        res.headers_mut().append(header::VARY, HeaderValue::from_static("Origin"));
        res
    }

    /// Writes the CORS headers of sluice's own answer: the origin, when allowed, and the
    /// headers it may read.
    pub fn own_answer(&self, headers: &mut HeaderMap) {
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(allow) = &self.allow {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow.clone());
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED));
        }
    }

    /// Adds sluice's header names to what an upstream that allowed the origin exposes.
    pub fn upstream_answer(&self, headers: &mut HeaderMap) {
        if self.allow.is_none() || !headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
            return;
        }
        let exposed = match headers.get(header::ACCESS_CONTROL_EXPOSE_HEADERS).map(|v| v.as_bytes()) {
            Some(b"*") => return,
            Some(theirs) if !theirs.is_empty() => {
                let mut all = theirs.to_vec();
                all.extend_from_slice(b", ");
                all.extend_from_slice(EXPOSED.as_bytes());
                HeaderValue::from_bytes(&all).unwrap_or(HeaderValue::from_static(EXPOSED))
            }
            _ => HeaderValue::from_static(EXPOSED),
        };
        headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, exposed);
    }
}
