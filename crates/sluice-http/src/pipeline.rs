//! The one decision pipeline every face calls: request facts → checks → decision → the parts
//! of the response (denial status, headers, body, shaping delay) and what the logs need.
//!
//! ```text
//! peer + headers ──Limiter::client──▶ Client (once per request)
//! RequestFacts + limits ──Limiter::checks──▶ Checks ──Limiter::decide──▶ Ruling { checks, kinds, timing, outcome }
//! Ruling::action ──▶ Admit { delay } (+ Ruling::write_headers) | Deny(Answer) | Unavailable(Answer)
//! ```
//!
//! The gateway, the tower layer, the decision API and the other faces of `sluice-gateway` differ
//! only in where the facts come from and what they do with the [`Action`].

use std::borrow::Cow;
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quanta::Instant;

use http::{HeaderMap, StatusCode};
use sluice_config::{Config, HeaderStyle, KeySource, PathRefusal, RouteLimit, request_path};
use sluice_core::{Clock, SystemClock};
use sluice_store::{Check, KeyHash, KeyHasher, Store, StoreError};
use smallvec::SmallVec;

use crate::body_key::BodyRefusal;
use crate::enforce::{Enforcer, Outcome, PolicyInfo};
use crate::headers::{LimitView, write_denied, write_rate_limit_headers};
use crate::identity::{Client, ClientIdentity};
use crate::jwt::{JwtVerifier, TokenMemo};
use crate::keys::{KeyBuilder, KeyKind, KeyRefusal, RequestFacts};
use crate::response::Answer;

/// Decides requests: who sent them, their keys, the store's decision, and the answer.
#[derive(Debug)]
pub struct Limiter {
    /// Decides checks against the store, shadow policies apart from enforced ones.
    enforcer: Enforcer,
    /// Builds and hashes keys from request facts.
    keys: KeyBuilder,
    /// Resolves the client behind trusted proxies.
    identity: ClientIdentity,
    /// Rate-limit header styles written on limited responses.
    styles: Vec<HeaderStyle>,
    /// The status of a denial (429, or e.g. 503 for nginx parity).
    deny_status: StatusCode,
    /// The wall clock, for `X-RateLimit-Reset` (absolute Unix seconds).
    clock: SystemClock,
    /// Publish each limit's key hash as its `pk` (partition key) in the `ietf` headers.
    partition_keys: bool,
    /// Tells this limiter's keys from another's in a worker thread's last `ip` key
    /// ([`Limiter::ip_key`]); never reused.
    id: u64,
}

/// How much of a request's time went where.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// From the start of key building to the store's answer, ns.
    pub decision_ns: u64,
    /// The store call(s), ns.
    pub store_ns: u64,
}

impl Timing {
    /// The timing of a decision that started at `start` and asked the store at `asked`, ending now.
    pub fn since(start: Instant, asked: Instant) -> Self {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // One clock read for both (each read is a good part of a self-answered request's cost:
        // quanta's counter, not the system clock's call).
        let now = Instant::now();
        Self {
            decision_ns: ns(now.saturating_duration_since(start)),
            store_ns: ns(now.saturating_duration_since(asked)),
        }
    }
}

/// What a face does with a request once it is decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Pass it on after `delay` (shaping; zero otherwise) and add the rate-limit headers to its
    /// response ([`Ruling::write_headers`]).
    Admit {
        /// How long to hold the request first.
        delay: Duration,
    },
    /// Deny it ([`Ruling::denial`] is sluice's answer); the request goes no further.
    Deny,
    /// The store could not decide and its failure mode does not admit: answer 503
    /// ([`Answer::limiter_unavailable`]).
    Unavailable,
}

/// One value per check of a request: inline up to two (most routes have one or two limits), on
/// the heap beyond. Read it as a slice.
pub type PerCheck<T> = SmallVec<[T; 2]>;

/// A request's checks, not yet decided.
#[derive(Debug, Clone)]
pub struct Checks {
    /// One check per limit decided, in the limits' order.
    checks: PerCheck<Check>,
    /// The kind of key of each check.
    kinds: PerCheck<KeyKind>,
    /// Where each check's limit stands in the face's list of limits (a route's), for counters.
    positions: PerCheck<usize>,
    /// When key building started (the decision's timing starts there).
    started: Instant,
}

impl Checks {
    /// Checks built by the caller (the decision API names its keys), each with its key kind.
    pub fn new(checks: Vec<Check>, kinds: Vec<KeyKind>) -> Self {
        let positions = (0..checks.len()).collect();
        Self {
            checks: SmallVec::from_vec(checks),
            kinds: SmallVec::from_vec(kinds),
            positions,
            started: Instant::now(),
        }
    }
}

/// Why a request is refused before any limit decides it (400): its path, a key it names or its
/// body is ambiguous, so deciding it would let the client choose what it is limited as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The path is read differently by different upstreams.
    #[error(transparent)]
    Path(#[from] PathRefusal),
    /// A header a key is built from is repeated.
    #[error(transparent)]
    Key(#[from] KeyRefusal),
    /// The body a key is read from cannot be keyed.
    #[error(transparent)]
    Body(#[from] BodyRefusal),
}

impl Refusal {
    /// Why requests are refused, as metrics name it (`sluice_refused_total{reason}`), in the
    /// order [`Refusal::reason`] indexes: the path, a keyed header (repeated, spelled with `_`,
    /// or not printable ASCII), a token that does not verify, a keyed body's content type, a
    /// keyed field also in the query, the keyed body itself.
    pub const REASONS: [&'static str; 6] = ["path", "header", "token", "content_type", "query", "body"];

    /// The position of this refusal's reason in [`Refusal::REASONS`].
    pub fn reason(&self) -> usize {
        match self {
            Refusal::Path(_) => 0,
            Refusal::Key(KeyRefusal::InvalidToken) => 2,
            Refusal::Key(_) => 1,
            Refusal::Body(BodyRefusal::ContentType) => 3,
            Refusal::Body(BodyRefusal::FieldInQuery) => 4,
            Refusal::Body(_) => 5,
        }
    }

    /// The 400 that answers it; 401 with `WWW-Authenticate: Bearer error="invalid_token"` for
    /// an invalid token; 415 for a keyed body whose content type the route does not read.
    pub fn answer(&self) -> Answer {
        match self {
            Refusal::Key(KeyRefusal::InvalidToken) => {
                let mut a = Answer::error(StatusCode::UNAUTHORIZED, "invalid_token", &self.to_string());
                a.headers.insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
                a
            }
            Refusal::Body(why @ BodyRefusal::ContentType) => {
                Answer::error(why.status(), "unsupported_media_type", &self.to_string())
            }
            _ => Answer::bad_request(&self.to_string()),
        }
    }
}

/// The path a request is routed and keyed by ([`sluice_config::request_path`]), or why it is
/// refused.
pub fn route_path(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    Ok(request_path(raw)?)
}

/// Every claim the routes of `config` read from tokens (key parts and plans), once each.
/// The claims (as JSON pointers) the `jwt:` parts and plans of `limits` read: the only ones a
/// verified token's cache entry keeps.
pub(crate) fn jwt_pointers<'a>(limits: impl Iterator<Item = &'a RouteLimit>) -> Vec<String> {
    let mut pointers: Vec<String> = Vec::new();
    let sources = limits.flat_map(|l| l.key.parts.iter().flatten().chain(l.plan.as_ref().map(|p| &p.by)));
    for source in sources {
        if let sluice_config::KeySource::Jwt(p) = source.base()
            && !pointers.contains(p)
        {
            pointers.push(p.clone());
        }
    }
    pointers
}

/// One request's decision: its checks, the key kinds, the time it took, the store's outcome.
#[derive(Debug)]
pub struct Ruling<'a> {
    /// The limiter that decided (for the policies and the response settings).
    limiter: &'a Limiter,
    /// One check per limit, in the limits' order.
    pub checks: PerCheck<Check>,
    /// The kind of key each check was decided on (same order), for logs.
    pub kinds: PerCheck<KeyKind>,
    /// Where each check's limit stands in the face's list of limits (same order).
    pub positions: PerCheck<usize>,
    /// Where the time went.
    pub timing: Timing,
    /// Every check's decision, or why the store could not decide.
    pub outcome: Result<Outcome, StoreError>,
}

impl Limiter {
    /// A limiter deciding with `enforcer`, keys from `keys`, clients resolved by `identity`;
    /// denials answer `deny_status` and limited responses carry headers in `styles`.
    pub fn new(
        enforcer: Enforcer,
        keys: KeyBuilder,
        identity: ClientIdentity,
        styles: Vec<HeaderStyle>,
        deny_status: StatusCode,
    ) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        Self { enforcer, keys, identity, styles, deny_status, clock: SystemClock::new(), partition_keys: false, id }
    }

    /// The same limiter, publishing (or not) each limit's key hash (the keyed 128-bit hash,
    /// never the raw key) as its partition key, `pk`, in the `ietf` headers. Off by default.
    pub fn with_partition_keys(self, on: bool) -> Self {
        Self { partition_keys: on, ..self }
    }

    /// The limiter of a configuration: its policies on `store`, its `[server]` identity and
    /// response settings, keys hashed by `hasher`.
    pub fn of_config(config: &Config, store: Arc<dyn Store>, hasher: KeyHasher) -> Self {
        let s = &config.server;
        #[cfg(feature = "jwt")]
        let jwt = config.identity.jwt.as_ref().map(|j| {
            let clock = Arc::new(SystemClock::new());
            let pointers = jwt_pointers(config.routes.iter().flat_map(|r| &r.limits));
            Arc::new(JwtVerifier::new(j, hasher.clone(), clock, pointers))
        });
        #[cfg(not(feature = "jwt"))]
        let jwt: Option<Arc<JwtVerifier>> = {
            if config.identity.jwt.is_some() {
                tracing::error!(
                    target: "sluice::config",
                    "[identity.jwt] is configured, but this build has no `jwt` feature: every request with a token is refused"
                );
            }
            None
        };
        Self::new(
            Enforcer::of_config(store, config),
            KeyBuilder::new(hasher, s.user_header.clone()).with_jwt(jwt),
            ClientIdentity::new(s.trusted_proxies.clone(), s.ipv6_prefix).with_header(s.forwarded_header),
            s.headers.clone(),
            StatusCode::from_u16(s.deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
        )
    }

    /// Who sent a request from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Client {
        self.identity.resolve(peer, headers)
    }

    /// The enforcer (store and policies).
    pub fn enforcer(&self) -> &Enforcer {
        &self.enforcer
    }

    /// The policies, indexed as checks refer to them.
    pub fn policies(&self) -> &[PolicyInfo] {
        self.enforcer.policies()
    }

    /// The key builder.
    pub fn keys(&self) -> &KeyBuilder {
        &self.keys
    }

    /// The status of a denial.
    pub fn deny_status(&self) -> StatusCode {
        self.deny_status
    }

    /// The checks of a request under `limits`: each limit's key built from `facts`. Built
    /// before anything is awaited, so the request need not be held across the store call. A
    /// request whose key is ambiguous (a keyed header in several lines) is refused (400).
    pub fn checks(&self, limits: &[RouteLimit], facts: &RequestFacts<'_>) -> Result<Checks, Refusal> {
        self.checks_of(limits, facts, |_| true)
    }

    /// [`Limiter::checks`] for the limits that `which` picks (e.g. those that need no body, to
    /// decide them before the body is read).
    pub fn checks_of(
        &self,
        limits: &[RouteLimit],
        facts: &RequestFacts<'_>,
        which: impl Fn(&RouteLimit) -> bool,
    ) -> Result<Checks, Refusal> {
        let started = Instant::now();
        let (mut checks, mut kinds, mut positions) = (PerCheck::new(), PerCheck::new(), PerCheck::new());
        // The request's token is verified at most once, whichever limits read it.
        let memo = TokenMemo::default();
        for (i, l) in limits.iter().enumerate().filter(|(_, l)| which(l)) {
            // Of the limits a plan chooses between, only the request's plan's applies.
            if let Some(choice) = &l.plan
                && !self.keys.plan_applies(choice, facts, &memo)?
            {
                continue;
            }
            let name = self.enforcer.policies().get(l.policy).map_or("", |p| p.name.as_str());
            let (key, kind) = match &l.key.parts[..] {
                [chain] if chain[..] == [KeySource::Ip] => (self.ip_key(l.policy, name, facts.client.grouped), "ip"),
                _ => self.keys.key_in(name, &l.key, facts, &memo)?,
            };
            checks.push(Check { policy: l.policy, key, cost: l.cost });
            kinds.push(kind);
            positions.push(i);
        }
        Ok(Checks { checks, kinds, positions, started })
    }

    /// The key of a limit keyed `ip` alone, on policy `policy` (called `name`), for the client
    /// address `grouped`: [`KeyBuilder::ip_key`], the same as [`KeyBuilder::key_in`] builds.
    /// The requests of one connection come from one address: each worker thread keeps the last
    /// key it hashed, for this limiter and policy (the keyed hash is a good part of a
    /// request's cost).
    fn ip_key(&self, policy: usize, name: &str, grouped: IpAddr) -> KeyHash {
        thread_local! {
            static LAST: Cell<Option<(u64, usize, IpAddr, KeyHash)>> = const { Cell::new(None) };
        }
        LAST.with(|last| match last.get() {
            Some((id, p, ip, key)) if id == self.id && p == policy && ip == grouped => key,
            _ => {
                let key = self.keys.ip_key(name, grouped);
                last.set(Some((self.id, policy, grouped, key)));
                key
            }
        })
    }

    /// Decides `checks` together (admitted only if every enforced limit admits).
    pub async fn decide(&self, checks: Checks) -> Ruling<'_> {
        let asked = Instant::now();
        let outcome = self.enforcer.decide(&checks.checks).await;
        self.ruling(checks, asked, outcome)
    }

    /// `checks` decided as [`Limiter::decide`] would, charging nothing: would the request be
    /// admitted now ([`Enforcer::peek`]).
    pub async fn peek(&self, checks: Checks) -> Ruling<'_> {
        let asked = Instant::now();
        let outcome = self.enforcer.peek(&checks.checks).await;
        self.ruling(checks, asked, outcome)
    }

    /// [`Limiter::decide`] when nothing needs awaiting ([`Enforcer::decide_at_once`]: the
    /// memory store): no future is made for it. The checks back when the store must be awaited.
    // The error is the checks, handed back as they came, not an error to report.
    #[allow(clippy::result_large_err)]
    pub fn decide_at_once(&self, checks: Checks) -> Result<Ruling<'_>, Checks> {
        let asked = Instant::now();
        match self.enforcer.decide_at_once(&checks.checks) {
            Some(outcome) => Ok(self.ruling(checks, asked, outcome)),
            None => Err(checks),
        }
    }

    /// Gives back everything `ruling` charged ([`Enforcer::charges`]): a later phase of the same
    /// request did not admit it, and a request that is not passed on is charged nothing. A
    /// failure to give back leaves the charges in place (the strict direction) and is logged.
    pub async fn refund(&self, ruling: &Ruling<'_>) {
        let Ok(outcome) = &ruling.outcome else { return };
        if let Err(e) = self.enforcer.refund(&ruling.checks, outcome).await {
            tracing::warn!(target: "sluice::store", error = %e, "a denied request's first charges could not be given back");
        }
    }

    /// Settles charges the store made ([`sluice_store::Store::settle`]): what the responses of
    /// admitted requests said they cost. A failure leaves the reservations as they were (at
    /// their estimate) and is logged.
    pub async fn settle(&self, settles: &[sluice_store::Settle]) {
        if let Err(e) = self.try_settle(settles).await {
            tracing::warn!(target: "sluice::store", error = %e, "a response's cost could not be settled");
        }
    }

    /// [`Limiter::settle`], with the store's error for a caller that answers it.
    pub async fn try_settle(&self, settles: &[sluice_store::Settle]) -> Result<(), sluice_store::StoreError> {
        let store = self.enforcer.store();
        match store.settle_at_once(settles) {
            Some(done) => done,
            None => store.settle(settles, None).await,
        }
    }

    /// The ruling of `checks`, asked of the store at `asked`.
    fn ruling(&self, checks: Checks, asked: Instant, outcome: Result<Outcome, StoreError>) -> Ruling<'_> {
        let Checks { checks, kinds, positions, started } = checks;
        let timing = Timing::since(started, asked);
        if let Err(e) = &outcome {
            tracing::debug!(target: "sluice::store", error = %e, "store could not decide");
        }
        Ruling { limiter: self, checks, kinds, positions, timing, outcome }
    }

    fn unix_now(&self) -> u64 {
        self.clock.now() / sluice_core::NANOS_PER_SEC
    }
}

impl Ruling<'_> {
    /// This ruling followed by `later`, decided after it admitted (the limits that needed the
    /// body, once it was read). The request is admitted only if both admitted; when `later`
    /// does not, the lifecycle gives back what this ruling charged first
    /// ([`Limiter::refund`]). The checks of both stay in the route's order.
    pub fn then(mut self, later: Ruling<'_>) -> Self {
        self.outcome = match (self.outcome, later.outcome) {
            (Ok(a), Ok(b)) => Ok(a.then(b)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        self.checks.extend(later.checks);
        self.kinds.extend(later.kinds);
        self.positions.extend(later.positions);
        self.timing.decision_ns += later.timing.decision_ns;
        self.timing.store_ns += later.timing.store_ns;
        self.in_route_order();
        self
    }

    /// Puts the checks, and all that is kept per check, back in the route's order. A limit that
    /// needs the body is decided after the others wherever the route lists it, while the
    /// `ietf` fields list the limits in the route's order.
    fn in_route_order(&mut self) {
        if self.positions.is_sorted() {
            return;
        }
        let mut order: Vec<usize> = (0..self.positions.len()).collect();
        order.sort_by_key(|&i| self.positions[i]);
        if let Ok(outcome) = &mut self.outcome
            && !outcome.reorder(&order)
        {
            return;
        }
        self.checks = order.iter().map(|&i| self.checks[i]).collect();
        self.kinds = order.iter().map(|&i| self.kinds[i]).collect();
        self.positions = order.iter().map(|&i| self.positions[i]).collect();
    }

    /// The policies, indexed as the checks refer to them.
    pub fn policies(&self) -> &[PolicyInfo] {
        self.limiter.policies()
    }

    /// Tells a request about to be passed on which soft limits it is over
    /// ([`crate::headers::mark_soft_limited`]), removing whatever its client sent instead.
    pub fn mark_soft_limited(&self, headers: &mut HeaderMap) {
        let over = self.outcome.as_ref().map_or(&[][..], |o| &o.soft_over[..]);
        let policies = self.policies();
        let names = over.iter().filter_map(|&i| policies.get(self.checks.get(i)?.policy)).map(|p| p.name.as_str());
        crate::headers::mark_soft_limited(headers, names);
    }

    /// True when every enforced limit admitted.
    pub fn allowed(&self) -> bool {
        self.outcome.as_ref().is_ok_and(|o| o.allowed)
    }

    /// The limit a response describes: the one that denied, or the one closest to denying.
    pub fn view(&self) -> Option<LimitView<'_>> {
        self.limiter.enforcer.view(&self.checks, self.outcome.as_ref().ok()?)
    }

    /// Every limit the response describes, in the route's order: each enforced limit's view
    /// (shadow limits are left out); none when the store could not decide.
    pub fn views(&self) -> impl Iterator<Item = LimitView<'_>> + Clone {
        let outcome = self.outcome.as_ref().ok();
        let enforcer = &self.limiter.enforcer;
        outcome.into_iter().flat_map(|o| enforcer.views(&self.checks, o, self.limiter.partition_keys))
    }

    /// The position in [`Ruling::views`] of the limit [`Ruling::view`] describes.
    pub fn described(&self) -> Option<usize> {
        self.limiter.enforcer.described(&self.checks, self.outcome.as_ref().ok()?)
    }

    /// What to do with the request: pass it on (after a shaping delay), or answer.
    pub fn action(&self) -> Action {
        let outcome = match &self.outcome {
            Ok(o) => o,
            Err(_) => return Action::Unavailable,
        };
        match outcome.allowed {
            true => Action::Admit { delay: Duration::from_nanos(outcome.delay()) },
            false => Action::Deny,
        }
    }

    /// The answer to a denied request: the deny status, `Retry-After`, the rate-limit headers
    /// and the JSON body. Built only when asked for: a face with an answer of its own (the
    /// decision API, the seed service, Envoy's) never pays for it.
    pub fn denial(&self) -> Answer {
        let l = self.limiter;
        Answer::denial(l.deny_status, self.views(), self.described(), &l.styles, l.unix_now())
    }

    /// Writes the rate-limit headers of an admitted request into its response's `headers`.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if let Some(i) = self.described() {
            write_rate_limit_headers(headers, &self.limiter.styles, self.views(), i, self.limiter.unix_now());
        }
    }

    /// Writes the headers of a denied request (the rate-limit headers of its limits, described by
    /// the one that denied, `Retry-After`, `Cache-Control: no-store`) into `headers`, for faces
    /// that write their own denial body (the decision API).
    pub fn write_denied_headers(&self, headers: &mut HeaderMap) {
        let l = self.limiter;
        write_denied(headers, &l.styles, self.views(), self.described(), l.unix_now());
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::ManualClock;
    use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};

    use super::*;
    use crate::jwt::TokenMemo;

    fn limiter(config: &Config, secret: &[u8]) -> Limiter {
        let clock = Arc::new(ManualClock::new(0));
        let named = config.policies.iter().map(|p| NamedPolicy { name: p.name.clone(), policy: p.policy });
        let store = Arc::new(MemoryStore::new(named.collect(), MemoryOptions::default(), clock));
        Limiter::of_config(config, store, KeyHasher::from_secret(secret))
    }

    #[test]
    fn a_remembered_ip_key_is_the_key_built_for_that_limiter_policy_and_address() {
        let config = sluice_config::parse(
            "t.toml",
            r#"
[[policy]]
name = "p"
algorithm = "fixed-window"
limit = 9
window = "1m"
[[policy]]
name = "q"
algorithm = "fixed-window"
limit = 9
window = "1m"
[[route]]
path = "/*"
limits = [{ policy = "p", key = "ip" }, { policy = "q", key = "ip" }, { policy = "p", key = "ip" }]
"#,
        )
        .unwrap();
        let limits = &config.routes[0].limits;
        let (a, b) = (limiter(&config, b"one secret"), limiter(&config, b"another secret"));
        let headers = HeaderMap::new();
        let mut seen = Vec::new();
        // Limiters, addresses and policies interleaved: each key must be the one built from
        // scratch, never a neighbour's remembered one.
        for (l, ip) in [(&a, "192.0.2.1"), (&a, "192.0.2.1"), (&b, "192.0.2.1"), (&a, "2001:db8::1"), (&a, "192.0.2.1")]
        {
            let ip: IpAddr = ip.parse().unwrap();
            let client = Client { ip, grouped: ip, peer_trusted: false };
            let facts = RequestFacts {
                method: "GET",
                path: "/",
                route: "/*",
                client: &client,
                headers: &headers,
                tls: None,
                body: None,
            };
            let checks = l.checks(limits, &facts).unwrap();
            for (check, limit) in checks.checks.iter().zip(limits) {
                let name = &config.policies[limit.policy].name;
                let built = l.keys().key_in(name, &limit.key, &facts, &TokenMemo::default()).unwrap().0;
                assert_eq!(check.key, built, "{ip} on {name}");
            }
            assert_eq!(checks.kinds[..], ["ip"; 3]);
            assert_ne!(checks.checks[0].key, checks.checks[1].key, "each policy its own key");
            seen.push(checks.checks[0].key);
        }
        assert_eq!(seen[0], seen[1]);
        assert_ne!(seen[0], seen[2], "another limiter's secret, another key");
        assert_ne!(seen[0], seen[3]);
        assert_eq!(seen[0], seen[4]);
    }
}
