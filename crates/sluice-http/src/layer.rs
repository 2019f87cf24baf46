//! A tower [`Layer`] that rate-limits any axum or hyper service with sluice's policies.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use ipnet::IpNet;
use sluice_config::{HeaderStyle, KeySpec};
use sluice_core::{Clock, SystemClock};
use sluice_store::{Check, KeyHasher, Store};
use tower::{Layer, Service};

use crate::enforce::{Enforcer, PolicyInfo};
use crate::headers::{retry_after_secs, write_denial_headers, write_denied, write_rate_limit_headers};
use crate::identity::ClientIdentity;
use crate::keys::{RequestFacts, key_for};

/// How the layer finds the socket peer of a request.
pub type PeerFn = Arc<dyn Fn(&http::Extensions) -> Option<IpAddr> + Send + Sync>;

/// An error building the layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// A limit names a policy the store does not have.
    #[error("no policy named `{0}` in the store")]
    UnknownPolicy(String),
    /// The layer does not read bodies: `json:` key parts need the gateway.
    #[error("key `{0}` reads the body; the tower layer supports header, ip, user, method, path and const parts")]
    BodyKey(String),
}

/// Builds a [`RateLimitLayer`].
pub struct RateLimitLayerBuilder {
    store: Arc<dyn Store>,
    limits: Vec<(String, KeySpec, u64)>,
    trusted: Vec<IpNet>,
    forwarded: sluice_config::ForwardedHeader,
    ipv6_prefix: u8,
    headers: Vec<HeaderStyle>,
    deny_status: u16,
    hasher: KeyHasher,
    user_header: Option<String>,
    peer: PeerFn,
}

impl RateLimitLayerBuilder {
    /// Adds a limit: the store's policy `policy`, keyed by `key`, each request costing 1.
    pub fn limit(mut self, policy: &str, key: KeySpec) -> Self {
        self.limits.push((policy.to_string(), key, 1));
        self
    }

    /// Proxies whose forwarding headers are believed.
    pub fn trusted_proxies(mut self, nets: Vec<IpNet>) -> Self {
        self.trusted = nets;
        self
    }

    /// The forwarding header the trusted proxies write (default `X-Forwarded-For`).
    pub fn forwarded_header(mut self, header: sluice_config::ForwardedHeader) -> Self {
        self.forwarded = header;
        self
    }

    /// Rate-limit header styles (default: draft-6).
    pub fn headers(mut self, styles: Vec<HeaderStyle>) -> Self {
        self.headers = styles;
        self
    }

    /// The status of a denial (default 429).
    pub fn deny_status(mut self, status: u16) -> Self {
        self.deny_status = status;
        self
    }

    /// The secret keying the key hash (default: random, per process).
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.hasher = KeyHasher::from_secret(secret);
        self
    }

    /// The header with the authenticated user id (believed only from trusted proxies).
    pub fn user_header(mut self, name: &str) -> Self {
        self.user_header = Some(name.to_ascii_lowercase());
        self
    }

    /// How to find the socket peer in a request's extensions. The default looks for a
    /// `SocketAddr` extension; with axum, pass
    /// `|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())`. Requests without a peer
    /// share one key (the strict direction).
    pub fn peer(mut self, f: impl Fn(&http::Extensions) -> Option<IpAddr> + Send + Sync + 'static) -> Self {
        self.peer = Arc::new(f);
        self
    }

    /// Checks the limits against the store's policies and builds the layer.
    pub fn build(self) -> Result<RateLimitLayer, LayerError> {
        let policies: Vec<PolicyInfo> = self
            .store
            .policies()
            .iter()
            .map(|p| PolicyInfo { name: p.name.clone(), policy: p.policy, shadow: false })
            .collect();
        let mut limits = Vec::new();
        for (name, key, cost) in self.limits {
            let policy = policies.iter().position(|p| p.name == name).ok_or(LayerError::UnknownPolicy(name))?;
            if key.needs_body() {
                return Err(LayerError::BodyKey(key.to_string()));
            }
            limits.push((policy, key, cost));
        }
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                enforcer: Enforcer::new(self.store, self.hasher, policies),
                limits,
                identity: ClientIdentity::new(self.trusted, self.ipv6_prefix).with_header(self.forwarded),
                headers: self.headers,
                deny_status: StatusCode::from_u16(self.deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                user_header: self.user_header,
                peer: self.peer,
                clock: SystemClock::new(),
            }),
        })
    }
}

struct Shared {
    enforcer: Enforcer,
    limits: Vec<(usize, KeySpec, u64)>,
    identity: ClientIdentity,
    headers: Vec<HeaderStyle>,
    deny_status: StatusCode,
    user_header: Option<String>,
    peer: PeerFn,
    clock: SystemClock,
}

/// Rate-limits the wrapped service: a request passes only if every limit admits it; a denial
/// answers with the deny status, `Retry-After`, `Cache-Control: no-store`, the rate-limit
/// headers and a JSON body, without calling the service. Shaping delays are honoured.
///
/// ```
/// use std::sync::Arc;
/// use sluice_config::{KeySource, KeySpec};
/// use sluice_core::{SystemClock, TokenBucket};
/// use sluice_http::layer::RateLimitLayer;
/// use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
///
/// let store = MemoryStore::new(
///     vec![NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(10, 1.0).unwrap().into() }],
///     MemoryOptions::default(),
///     Arc::new(SystemClock::new()),
/// );
/// let layer = RateLimitLayer::builder(Arc::new(store))
///     .limit("per-ip", KeySpec { parts: vec![vec![KeySource::Ip]] })
///     .build()
///     .unwrap();
/// // let app = axum::Router::new().route("/", get(handler)).layer(layer);
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl RateLimitLayer {
    /// Starts a layer over `store` (whose policies the limits name).
    pub fn builder(store: Arc<dyn Store>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            store,
            limits: Vec::new(),
            trusted: Vec::new(),
            forwarded: sluice_config::ForwardedHeader::XForwardedFor,
            ipv6_prefix: 56,
            headers: vec![HeaderStyle::Draft6],
            deny_status: 429,
            hasher: KeyHasher::random(),
            user_header: None,
            peer: Arc::new(|ext| ext.get::<SocketAddr>().map(|a| a.ip())),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit { inner, shared: self.shared.clone() }
    }
}

/// The service [`RateLimitLayer`] produces.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B, R> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: From<Bytes> + Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let peer = (shared.peer)(req.extensions()).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let client = shared.identity.client_ip(peer, req.headers());
        let normal_path = sluice_config::normalize_path(req.uri().path()).into_owned();
        let facts = RequestFacts {
            method: req.method().as_str(),
            path: &normal_path,
            route: &normal_path,
            client: shared.identity.group(client),
            peer_trusted: shared.identity.is_trusted(peer),
            headers: req.headers(),
            user_header: shared.user_header.as_deref(),
            json: None,
        };
        let enforcer = &shared.enforcer;
        let checks: Vec<Check> = shared
            .limits
            .iter()
            .map(|(policy, key, cost)| Check {
                policy: *policy,
                key: key_for(enforcer.hasher(), &enforcer.policies()[*policy].name, key, &facts).0,
                cost: *cost,
            })
            .collect();
        Box::pin(async move {
            let outcome = match shared.enforcer.decide(&checks).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(target: "sluice::store", error = %e, "store could not decide");
                    let mut res = Response::new(R::from(Bytes::from_static(
                        br#"{"error":"limiter_unavailable","message":"The rate limiter is unavailable; retry shortly."}"#,
                    )));
                    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    write_denial_headers(res.headers_mut(), 1);
                    return Ok(res);
                }
            };
            let view = shared.enforcer.view(&checks, &outcome);
            let unix_now = shared.clock.now() / 1_000_000_000;
            if !outcome.allowed {
                let secs = view.map_or(1, |v| retry_after_secs(&v.decision));
                let mut res = Response::new(R::from(crate::respond::denial_body(secs)));
                *res.status_mut() = shared.deny_status;
                res.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json; charset=utf-8"),
                );
                write_denied(res.headers_mut(), &shared.headers, view.as_ref(), unix_now);
                return Ok(res);
            }
            let delay = outcome.delay();
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_nanos(delay)).await;
            }
            let mut res = inner.call(req).await?;
            if let Some(v) = &view {
                write_rate_limit_headers(res.headers_mut(), &shared.headers, v, unix_now);
            }
            Ok(res)
        })
    }
}
