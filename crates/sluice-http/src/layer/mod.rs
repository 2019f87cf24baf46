//! A tower [`Layer`] that rate-limits any axum or hyper service with sluice's policies.

use std::future::Future;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use ipnet::IpNet;
use sluice_config::{HeaderStyle, KeySource, KeySpec, RouteLimit};
use sluice_store::{KeyHasher, Store};
use tower::{Layer, Service};

use crate::enforce::{Enforcer, PolicyInfo};
use crate::identity::ClientIdentity;
use crate::jwt::JwtVerifier;
use crate::keys::KeyBuilder;
use crate::lifecycle::{Counted, Face, Lifecycle};
use crate::pipeline::{Limiter, Ruling, jwt_pointers};
use crate::response::Answer;
use crate::store_health::StoreHealth;

mod body;
mod grpc;

pub use body::AnswerBody;

/// What a request really cost, as the inner service says it: put in the response's extensions,
/// it settles the limits added with `cost_from = "response-extension"`
/// ([`RateLimitLayerBuilder::limit_settled`]) when the response head reaches the layer.
///
/// ```
/// use sluice_http::layer::UsedCost;
/// let mut res = http::Response::new(());
/// res.extensions_mut().insert(UsedCost(1234));
/// assert_eq!(res.extensions().get::<UsedCost>(), Some(&UsedCost(1234)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsedCost(pub u64);

/// How the layer finds the socket peer of a request.
pub type PeerFn = Arc<dyn Fn(&http::Extensions) -> Option<IpAddr> + Send + Sync>;

/// Where the layer finds a request's socket peer unless told ([`RateLimitLayerBuilder::peer`]):
/// a `SocketAddr` extension (hyper servers that put one there), with the `axum` feature axum's
/// `ConnectInfo<SocketAddr>` (`into_make_service_with_connect_info`), and with the `tonic`
/// feature tonic's `TcpConnectInfo`.
pub fn default_peer(ext: &http::Extensions) -> Option<IpAddr> {
    if let Some(addr) = ext.get::<SocketAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = ext.get::<tonic::transport::server::TcpConnectInfo>().and_then(|c| c.remote_addr()) {
        return Some(addr.ip());
    }
    None
}

/// The route name the layer reports its decisions under when none is given.
pub const DEFAULT_ROUTE_NAME: &str = "layer";

pub use crate::lifecycle::Observe;

/// An error building the layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayerError {
    /// A limit's key is not a key (the text the configuration file would refuse, or no part).
    #[error("the key of the limit on `{policy}`: {error}")]
    Key {
        /// The policy the limit names.
        policy: String,
        /// What is wrong with the key, as the configuration file would say it.
        error: String,
    },
    /// The status of a denial is not a 4xx or a 5xx.
    #[error("deny status: {0}")]
    DenyStatus(String),
    /// The store is shared between processes and no key secret is given: each process would
    /// hash keys with its own random secret, keep its own buckets, and the limit would be
    /// multiplied by the number of processes.
    #[error("the {0} store is shared between processes: give every process the same .key_secret(...)")]
    SharedStoreNeedsSecret(&'static str),
    /// A limit names a policy the store does not have.
    #[error("no policy named `{0}` in the store")]
    UnknownPolicy(String),
    /// A key reads a bearer token's claim (`jwt:`) and no verifier is given (`.jwt(...)`, with
    /// the `jwt` feature).
    #[error("key `{0}` reads a bearer token's claim: give the layer .jwt(...) to verify tokens (the `jwt` feature)")]
    JwtWithoutVerifier(String),
    /// The layer does not read bodies: `json:` key parts need the gateway.
    #[error("key `{0}` reads the body; the tower layer supports header, ip, user, method, path and const parts")]
    BodyKey(String),
    /// A cost that the policy can never admit (above its limit), or 0 (it would never charge).
    #[error("cost {cost} under policy `{policy}` must be from 1 to the policy's limit {limit}")]
    Cost {
        /// The policy.
        policy: String,
        /// The cost asked.
        cost: u64,
        /// The policy's limit.
        limit: u64,
    },
    /// A limit on requests in flight whose store policy is not a sliding log (of leases).
    #[error("`{0}` limits requests in flight: its store policy must be a sliding log (max in flight, lease)")]
    NotALease(String),
}

/// What a limit's key can be written as: the configuration file's text, one part (`"ip"`,
/// `"header:x-api-key|ip"`) or several (`["header:x-api-key", "path"]`), or a [`KeySpec`].
/// Read by the same parser as the file ([`KeySpec::parse`]).
pub trait IntoKey {
    /// The key, or what is wrong with it.
    fn into_key(self) -> Result<KeySpec, String>;
}

impl IntoKey for &str {
    fn into_key(self) -> Result<KeySpec, String> {
        KeySpec::parse(&[self])
    }
}

impl IntoKey for String {
    fn into_key(self) -> Result<KeySpec, String> {
        KeySpec::parse(&[self])
    }
}

impl<const N: usize> IntoKey for [&str; N] {
    fn into_key(self) -> Result<KeySpec, String> {
        KeySpec::parse(&self)
    }
}

impl IntoKey for &[&str] {
    fn into_key(self) -> Result<KeySpec, String> {
        KeySpec::parse(self)
    }
}

impl IntoKey for KeySpec {
    fn into_key(self) -> Result<KeySpec, String> {
        // Built by hand, it must still say what it keys on: no key would put every client in
        // one bucket without saying so.
        match self.parts.iter().any(Vec::is_empty) || self.parts.is_empty() {
            true => Err("key must name at least one part, and each part at least one source".into()),
            false => Ok(self),
        }
    }
}

/// A limit as the builder was asked for it.
#[derive(Debug)]
struct AskedLimit {
    /// The store policy's name.
    policy: String,
    /// The key, or what is wrong with it.
    key: Result<KeySpec, String>,
    /// What a request costs (or reserves, with `cost_from`).
    cost: u64,
    /// Where the response says what the request really cost.
    cost_from: Option<sluice_config::CostFrom>,
    /// Counts requests in flight (released when the response body ends).
    in_flight: bool,
}

/// Builds a [`RateLimitLayer`].
pub struct RateLimitLayerBuilder {
    /// The store whose policies the limits name.
    store: Arc<dyn Store>,
    /// Every limit as asked, resolved against the store in `build`.
    limits: Vec<AskedLimit>,
    /// Proxies whose forwarding header is believed (none by default: the peer is the client).
    trusted: Vec<IpNet>,
    /// The forwarding header those proxies write.
    forwarded: sluice_config::ForwardedHeader,
    /// IPv6 clients are grouped by this prefix (default /56).
    ipv6_prefix: u8,
    /// Rate-limit header styles (default draft-6).
    headers: Vec<HeaderStyle>,
    /// The status of a denial (default 429).
    deny_status: u16,
    /// The keyed hash (random secret per process unless given).
    hasher: KeyHasher,
    /// True once a key secret is given.
    secret_given: bool,
    /// The header with an authenticated user id, believed only from trusted proxies.
    user_header: Option<String>,
    /// Finds the socket peer of a request.
    peer: PeerFn,
    /// `[identity.jwt]`: how bearer tokens are verified for `jwt:` parts (none by default).
    #[cfg(feature = "jwt")]
    jwt: Option<sluice_config::Jwt>,
    /// The name decisions are reported under (a bounded label, never a request's path).
    route: String,
    /// Told of every decision, if set.
    observer: Option<Arc<dyn Observe>>,
}

impl RateLimitLayerBuilder {
    /// Adds a limit: the store's policy `policy`, keyed by `key` (`"ip"`,
    /// `"header:x-api-key|ip"`, as a route's limit writes it), each request costing 1. A key
    /// that is not one is refused by [`RateLimitLayerBuilder::build`].
    pub fn limit(self, policy: &str, key: impl IntoKey) -> Self {
        self.limit_with_cost(policy, key, 1)
    }

    /// Adds a limit whose every request costs `cost` (an expensive endpoint spends more).
    pub fn limit_with_cost(mut self, policy: &str, key: impl IntoKey, cost: u64) -> Self {
        self.limits.push(AskedLimit {
            policy: policy.to_string(),
            key: key.into_key(),
            cost,
            cost_from: None,
            in_flight: false,
        });
        self
    }

    /// Adds a limit whose requests reserve `estimate` when admitted and are settled to what
    /// their response says they cost (`cost_from`: the tokens an LLM API reports in a response
    /// header, at a JSON pointer of its body or of its stream's last event, or the bytes of the
    /// body), when the inner service's response head arrives or its body ends (the body's type
    /// meters it: [`AnswerBody::metered`]). A limit spent by settled costs denies the next
    /// request, never the one in flight; a response that does not say keeps its reservation.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use sluice_config::CostFrom;
    /// # use sluice_core::{ManualClock, Policy, TokenBucket};
    /// # use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};
    /// use sluice_http::layer::RateLimitLayer;
    /// # let tokens = NamedPolicy { name: "tokens".into(), policy: Policy::from(TokenBucket::new(10_000, 100.0).unwrap()) };
    /// # let store: Arc<dyn Store> = Arc::new(MemoryStore::new(vec![tokens], MemoryOptions::default(), Arc::new(ManualClock::new(0))));
    /// let usage = CostFrom::parse("response-header:x-usage-tokens").unwrap();
    /// let layer = RateLimitLayer::builder(store).limit_settled("tokens", "header:x-api-key", 1, usage).build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn limit_settled(
        mut self,
        policy: &str,
        key: impl IntoKey,
        estimate: u64,
        cost_from: sluice_config::CostFrom,
    ) -> Self {
        let (policy, key) = (policy.to_string(), key.into_key());
        self.limits.push(AskedLimit { policy, key, cost: estimate, cost_from: Some(cost_from), in_flight: false });
        self
    }

    /// Adds a limit on requests in flight: a request holds a slot of `policy` from its admission
    /// until the inner service's response body ends (or is dropped: the client left). `policy`
    /// is a sliding log in the store: its limit is the most requests in flight per key, its
    /// window the lease (the longest a slot is held, after which a slot never given back —
    /// an instance killed mid-request, on a shared store — comes back).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use sluice_core::{NANOS_PER_SEC, Policy, SlidingLog};
    /// # use sluice_core::ManualClock;
    /// use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};
    /// use sluice_http::layer::RateLimitLayer;
    /// let streams = NamedPolicy { name: "streams".into(), policy: SlidingLog::new(4, 600 * NANOS_PER_SEC).unwrap().into() };
    /// # let store: Arc<dyn Store> = Arc::new(MemoryStore::new(vec![streams], MemoryOptions::default(), Arc::new(ManualClock::new(0))));
    /// let layer = RateLimitLayer::builder(store).limit_in_flight("streams", "header:x-api-key").build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn limit_in_flight(mut self, policy: &str, key: impl IntoKey) -> Self {
        let (policy, key) = (policy.to_string(), key.into_key());
        self.limits.push(AskedLimit { policy, key, cost: 1, cost_from: None, in_flight: true });
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

    /// The status of a denial (default 429): a 4xx or a 5xx, or the build is refused.
    pub fn deny_status(mut self, status: u16) -> Self {
        self.deny_status = status;
        self
    }

    /// The secret keying the key hash (default: random, per process). Required with a store
    /// shared between processes (Redis): every process must give the same one.
    pub fn key_secret(mut self, secret: &[u8]) -> Self {
        self.hasher = KeyHasher::from_secret(secret);
        self.secret_given = true;
        self
    }

    /// Verifies bearer tokens as `jwt` says, so `jwt:CLAIM` key parts read verified claims
    /// (without it a limit with a `jwt:` part does not build). The token cache is the layer's own.
    #[cfg(feature = "jwt")]
    pub fn jwt(mut self, jwt: sluice_config::Jwt) -> Self {
        self.jwt = Some(jwt);
        self
    }

    /// The header with the authenticated user id (believed only from trusted proxies).
    pub fn user_header(mut self, name: &str) -> Self {
        self.user_header = Some(name.to_owned());
        self
    }

    /// How to find the socket peer in a request's extensions. The default ([`default_peer`])
    /// reads a `SocketAddr` extension and, with the `axum` feature, axum's `ConnectInfo`. When a limit keys on the
    /// client (`ip`, `user`) and a request has no peer, it is answered 500 `no_client_address`
    /// (logged at the first such request): every client in one bucket would be a limit nobody
    /// asked for.
    pub fn peer(mut self, f: impl Fn(&http::Extensions) -> Option<IpAddr> + Send + Sync + 'static) -> Self {
        self.peer = Arc::new(f);
        self
    }

    /// The name this layer's decisions are reported under to the observer (default
    /// [`DEFAULT_ROUTE_NAME`]): a fixed name per layer, so metrics labels stay bounded.
    pub fn route_name(mut self, name: &str) -> Self {
        self.route = name.to_owned();
        self
    }

    /// Tells `observer` of every decision (metrics, decision logs). Without one, the layer
    /// still logs a store failure when it starts (with its cause) and when it ends, and counts
    /// failures ([`RateLimitLayer::store_failures`]); with one, the observer does.
    pub fn observe(mut self, observer: Arc<dyn Observe>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Checks the limits against the store's policies and builds the layer.
    pub fn build(self) -> Result<RateLimitLayer, LayerError> {
        sluice_config::check_deny_status(self.deny_status).map_err(LayerError::DenyStatus)?;
        if self.store.shared() && !self.secret_given {
            return Err(LayerError::SharedStoreNeedsSecret(self.store.kind()));
        }
        let mut infos: Vec<PolicyInfo> =
            self.store.policies().iter().map(|p| PolicyInfo::enforced(&p.name, p.policy)).collect();
        let mut limits = Vec::new();
        for AskedLimit { policy: name, key, cost, cost_from, in_flight } in self.limits {
            let key = key.map_err(|error| LayerError::Key { policy: name.clone(), error })?;
            let Some(policy) = infos.iter().position(|p| p.name == name) else {
                return Err(LayerError::UnknownPolicy(name));
            };
            if in_flight {
                if !matches!(infos[policy].policy, sluice_core::Policy::SlidingLog(_)) {
                    return Err(LayerError::NotALease(name));
                }
                infos[policy].concurrency = true;
                infos[policy].unit = Some("concurrent-requests".into());
            }
            let limit = infos[policy].policy.limit();
            if sluice_core::check_cost(cost, limit).is_err() {
                return Err(LayerError::Cost { policy: name, cost, limit });
            }
            if key.needs_body() {
                return Err(LayerError::BodyKey(key.to_string()));
            }
            limits.push(RouteLimit { policy, key, cost, cost_from, plan: None });
        }
        let enforcer = Enforcer::new(self.store, infos);
        #[cfg(feature = "jwt")]
        let verifier = self.jwt.as_ref().map(|j| {
            let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::SystemClock::new());
            Arc::new(JwtVerifier::new(j, self.hasher.clone(), clock, jwt_pointers(limits.iter())))
        });
        #[cfg(not(feature = "jwt"))]
        let verifier: Option<Arc<JwtVerifier>> = None;
        // A `jwt:` part with no verifier would always be absent: every client would fall back
        // to the next source, or share one bucket, without a word.
        if verifier.is_none()
            && let Some(limit) = limits.iter().find(|l| !jwt_pointers(std::iter::once(*l)).is_empty())
        {
            return Err(LayerError::JwtWithoutVerifier(limit.key.to_string()));
        }
        let limiter = Limiter::new(
            enforcer,
            KeyBuilder::new(self.hasher, self.user_header).with_jwt(verifier),
            ClientIdentity::new(self.trusted, self.ipv6_prefix).with_header(self.forwarded),
            self.headers,
            StatusCode::from_u16(self.deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
        );
        let (peer, route, observer) = (self.peer, self.route, self.observer);
        let reads_client = limits.iter().flat_map(|l| l.key.parts.iter().flatten()).any(|s| {
            // The user header is believed only from trusted proxies: it needs the peer too.
            matches!(s.base(), KeySource::Ip | KeySource::User)
        });
        let no_peer = NoPeer { refuses: reads_client, told: AtomicBool::new(false) };
        let watched = Watched { store: limiter.enforcer().store().kind(), health: StoreHealth::default() };
        Ok(RateLimitLayer { shared: Arc::new(Shared { limiter, limits, peer, route, observer, watched, no_peer }) })
    }
}

/// What every clone of the layer and its services share.
struct Shared {
    /// The decision pipeline (store, keys, identity, response settings).
    limiter: Limiter,
    /// The limits every request must pass, resolved to the store's policy indices.
    limits: Vec<RouteLimit>,
    /// Finds the socket peer in a request's extensions (where depends on the server).
    peer: PeerFn,
    /// The name decisions are reported under.
    route: String,
    /// Told of every decision, if set.
    observer: Option<Arc<dyn Observe>>,
    /// The store's health, told of every decision when no observer is (one is told instead).
    watched: Watched,
    /// What is done with a request that has no peer.
    no_peer: NoPeer,
}

/// The layer's own observer, when it is given none: a store failure is never silent.
struct Watched {
    /// The store's kind, in the log lines.
    store: &'static str,
    /// Failures counted, and logged when a run starts and ends.
    health: StoreHealth,
}

impl Observe for Watched {
    fn decided(&self, _: Counted<'_>, ruling: &Ruling<'_>, _: u16) {
        self.health.saw(self.store, &ruling.outcome);
    }
}

/// A request whose socket peer the layer cannot find (the server put none where
/// [`RateLimitLayerBuilder::peer`] looks).
struct NoPeer {
    /// True when a limit keys on the client: such a request is refused, not put in one bucket
    /// with every other. Otherwise no limit needs the peer.
    refuses: bool,
    /// Set once the first refusal is logged.
    told: AtomicBool,
}

impl NoPeer {
    /// The answer to a request without a peer (500), logged the first time.
    fn refusal(&self) -> Answer {
        let message = "The rate limiter cannot tell who sent this request: the server put no peer address in it \
                       (with axum, serve the app with into_make_service_with_connect_info::<SocketAddr>(), or tell \
                       the layer where the peer is with .peer(...)).";
        if !self.told.swap(true, Ordering::Relaxed) {
            tracing::error!(target: "sluice::layer", "{message} Such requests are answered 500.");
        }
        Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "no_client_address", message)
    }
}

/// Rate-limits the wrapped service: a request passes only if every limit admits it; a denial
/// answers with the deny status, `Retry-After`, `Cache-Control: no-store`, the rate-limit
/// headers and a JSON body, without calling the service. Shaping delays are honoured.
///
/// ```
/// use std::sync::Arc;
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
///     .limit("per-ip", "ip")
///     .build()
///     .unwrap();
/// // Keys read as a route's limits write them; a key that is not one is refused.
/// # let store = MemoryStore::new(
/// #     vec![NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(10, 1.0).unwrap().into() }],
/// #     MemoryOptions::default(),
/// #     Arc::new(SystemClock::new()),
/// # );
/// let refused = RateLimitLayer::builder(Arc::new(store)).limit("per-ip", "cookie:sid").build();
/// assert!(refused.unwrap_err().to_string().contains("unknown key part `cookie`"));
/// // let app = axum::Router::new().route("/", get(handler)).layer(layer);
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    /// The limiter and limits, shared by every service the layer wraps.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shared;
        let limits: Vec<String> = s
            .limits
            .iter()
            .map(|l| {
                let policy = s.limiter.policies().get(l.policy).map_or("?", |p| p.name.as_str());
                format!("{policy} by {} (cost {})", l.key, l.cost)
            })
            .collect();
        f.debug_struct("RateLimitLayer")
            .field("route", &s.route)
            .field("limits", &limits)
            .field("store", &s.limiter.enforcer().store().kind())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("store", &self.store.kind())
            .field("limits", &self.limits)
            .field("trusted", &self.trusted)
            .field("deny_status", &self.deny_status)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// Starts a layer over `store` (whose policies the limits name).
    pub fn builder(store: Arc<dyn Store>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            store,
            limits: Vec::new(),
            trusted: Vec::new(),
            forwarded: sluice_config::ForwardedHeader::XForwardedFor,
            ipv6_prefix: sluice_config::DEFAULT_IPV6_PREFIX,
            headers: vec![HeaderStyle::Draft6],
            deny_status: 429,
            hasher: KeyHasher::random(),
            secret_given: false,
            user_header: None,
            peer: Arc::new(default_peer),
            #[cfg(feature = "jwt")]
            jwt: None,
            route: DEFAULT_ROUTE_NAME.to_owned(),
            observer: None,
        }
    }
}

impl RateLimitLayer {
    /// The store failures this layer has seen (its store could not decide, or a failure mode
    /// answered), when it was built without an observer; 0 with one (the observer counts them).
    pub fn store_failures(&self) -> u64 {
        self.shared.watched.health.failures()
    }

    /// True from a store failure until the store decides again (without an observer, as
    /// [`RateLimitLayer::store_failures`]).
    pub fn store_failing(&self) -> bool {
        self.shared.watched.health.failing()
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
    /// The wrapped service, called only for admitted requests.
    inner: S,
    /// The layer's limiter and limits.
    shared: Arc<Shared>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let layer = RateLimitLayer { shared: self.shared.clone() };
        f.debug_struct("RateLimit").field("inner", &self.inner).field("layer", &layer).finish()
    }
}

impl<S, B, R> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    R: AnswerBody + Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let limiter = &shared.limiter;
            let grpc = grpc::is_grpc(req.headers());
            let peer = match (shared.peer)(req.extensions()) {
                Some(peer) => peer,
                None if shared.no_peer.refuses => {
                    let refusal = shared.no_peer.refusal();
                    let refusal = if grpc { grpc::grpc_answer(refusal) } else { refusal };
                    return Ok(refusal.into_response(R::from_answer));
                }
                // No limit reads the client: the address is never used.
                None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            };
            let client = limiter.client(peer, req.headers());
            let observer: &dyn Observe = shared.observer.as_deref().unwrap_or(&shared.watched);
            let lifecycle = Lifecycle::new(limiter, observer);
            let (head, body) = req.into_parts();
            let face = Inner { service: inner, body, grpc, response: PhantomData };
            lifecycle.limited(&shared.route, &shared.limits, &client, head, face).await
        })
    }
}

/// The layer's face: an admitted request is passed on to the wrapped service. It keeps the
/// request's body while the lifecycle reads its head (a body need not be `Sync`).
struct Inner<S, B, R> {
    /// The wrapped service.
    service: S,
    /// The request's body, joined to its head again when it is passed on.
    body: B,
    /// True for a gRPC call: sluice's answers are given in gRPC's terms ([`grpc::grpc_answer`]).
    grpc: bool,
    /// The service's response body.
    response: PhantomData<fn() -> R>,
}

impl<S, B, R> Face for Inner<S, B, R>
where
    S: Service<Request<B>, Response = Response<R>> + Send,
    S::Future: Send,
    R: AnswerBody,
{
    type Request = http::request::Parts;
    type Response = Response<R>;
    type Error = S::Error;

    fn answer(&self, answer: Answer) -> Response<R> {
        let answer = if self.grpc { grpc::grpc_answer(answer) } else { answer };
        answer.into_response(R::from_answer)
    }

    fn status(response: &Response<R>) -> u16 {
        response.status().as_u16()
    }

    fn request_headers(request: &mut http::request::Parts) -> Option<&mut http::HeaderMap> {
        Some(&mut request.headers)
    }

    fn headers_mut(response: &mut Response<R>) -> Option<&mut http::HeaderMap> {
        Some(response.headers_mut())
    }

    fn reported_cost(response: &Response<R>) -> Option<u64> {
        response.extensions().get::<UsedCost>().map(|u| u.0)
    }

    fn meter(response: Response<R>, meter: crate::meter::Meter) -> Response<R> {
        response.map(|body| body.metered(meter))
    }

    async fn pass_on(
        mut self,
        head: http::request::Parts,
        _: Counted<'_>,
        _: &Ruling<'_>,
    ) -> Result<Response<R>, S::Error> {
        self.service.call(Request::from_parts(head, self.body)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytes::Bytes;

    use sluice_core::{ManualClock, TokenBucket};
    use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
    use tower::ServiceExt;

    use super::*;

    /// Remembers what it is told: (route, allowed, status).
    #[derive(Default)]
    struct Recording(Mutex<Vec<(String, bool, u16)>>);

    impl Observe for Recording {
        fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
            self.0.lock().unwrap().push((at.name().to_owned(), ruling.allowed(), status));
        }
    }

    fn layer(name: Option<&str>, observer: Arc<Recording>) -> RateLimitLayer {
        let bucket = TokenBucket::new(1, 0.001).unwrap().into();
        let store = MemoryStore::new(
            vec![NamedPolicy { name: "one".into(), policy: bucket }],
            MemoryOptions::default(),
            Arc::new(ManualClock::new(0)),
        );
        let b = RateLimitLayer::builder(Arc::new(store)).limit("one", KeySpec { parts: vec![vec![KeySource::Ip]] });
        let b = match name {
            Some(n) => b.route_name(n),
            None => b,
        };
        b.observe(observer).build().unwrap()
    }

    async fn call(layer: &RateLimitLayer, fail: bool) -> Result<u16, &'static str> {
        let service =
            tower::ServiceBuilder::new().layer(layer.clone()).service_fn(move |_req: Request<()>| async move {
                if fail {
                    Err("the service failed")
                } else {
                    Ok(Response::new(http_body_util::Full::new(Bytes::new())))
                }
            });
        let req = Request::builder().uri("/anything/at/all").extension(peer()).body(()).unwrap();
        service.oneshot(req).await.map(|r| r.status().as_u16())
    }

    /// The socket peer, where the layer looks for it by default.
    fn peer() -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], 40000))
    }

    #[tokio::test]
    async fn the_observer_hears_every_decision_with_its_status_under_the_layers_name() {
        let seen = Arc::new(Recording::default());
        let named = layer(Some("api"), seen.clone());
        assert_eq!(call(&named, false).await, Ok(200));
        assert_eq!(call(&named, false).await, Ok(429));
        let unnamed = layer(None, seen.clone());
        assert_eq!(call(&unnamed, true).await, Err("the service failed"));
        // A refused path is not decided, so not told.
        let refused = tower::ServiceBuilder::new().layer(unnamed.clone()).service_fn(|_req: Request<()>| async {
            Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(Bytes::new())))
        });
        let res = refused.oneshot(Request::builder().uri("/a%2Fb").extension(peer()).body(()).unwrap()).await.unwrap();
        assert_eq!(res.status(), 400);
        let got = seen.0.lock().unwrap().clone();
        assert_eq!(
            got,
            [("api".to_owned(), true, 200), ("api".to_owned(), false, 429), (DEFAULT_ROUTE_NAME.to_owned(), true, 0)]
        );
    }
}
