//! The gateway's decision, applied to logged requests: route matching on the normalised path,
//! client identity through the trusted-proxy rules, keys and the store, all through
//! `sluice-http`'s pipeline on a memory store whose clock is the log's time.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use http::{HeaderMap, HeaderName, HeaderValue};
use sluice_config::{Config, CostFrom, KeySource, Route};
use sluice_core::{ManualClock, Nanos};
use sluice_http::enforce::PolicyInfo;
use sluice_http::lifecycle::{Asked, Counted, Face, Lifecycle, Unobserved};
use sluice_http::meter::{Meter, Slots};
use sluice_http::pipeline::{Limiter, Ruling};
use sluice_http::response::Answer;
use sluice_sim::{Judge, Judgement, LimitDecision, LimitInfo, LimitVerdict, LogRequest, RequestVerdict, RouteInfo};

/// Wakes the thread that waits in [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// [`block_on`] with a waker made for this thread.
pub(super) fn block_on_here<F: Future>(future: F) -> F::Output {
    block_on(future, &Waker::from(Arc::new(ThreadWaker(std::thread::current()))))
}

/// Runs `future` to completion on this thread. The memory store answers without awaiting, so a
/// decision is ready at the first poll; a future that does wait parks the thread until woken.
fn block_on<F: Future>(future: F, waker: &Waker) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// The body key parts of `route` (`json:/email`, `form:email`), which no access log can supply.
pub fn body_parts(route: &Route) -> Vec<String> {
    let parts: BTreeSet<String> = route
        .limits
        .iter()
        .flat_map(|l| l.key.parts.iter().flatten())
        .filter(|s| s.body_field().is_some())
        .map(|s| s.to_string())
        .collect();
    parts.into_iter().collect()
}

/// The routes of `config` as the report names them; a route keyed on the body is not simulable.
pub fn route_infos(config: &Config) -> Vec<RouteInfo> {
    config
        .routes
        .iter()
        .map(|r| {
            let body = body_parts(r);
            RouteInfo {
                name: r.name.clone(),
                path: r.path.to_string(),
                limits: r
                    .limits
                    .iter()
                    .map(|l| {
                        let p = &config.policies[l.policy];
                        LimitInfo {
                            policy: l.policy,
                            policy_name: p.name.clone(),
                            algorithm: p.policy.name().to_string(),
                            key: l.key.to_string(),
                            // A soft limit never denies either: its over-limit requests are
                            // reported as a shadow limit's ("would have denied").
                            shadow: p.shadow || p.soft,
                        }
                    })
                    .collect(),
                not_simulable: (!body.is_empty()).then(|| {
                    let (s, verb) = if body.len() == 1 { ("", "reads") } else { ("s", "read") };
                    format!(
                        "key part{s} {} {verb} the request body, which an access log does not record",
                        body.join(", ")
                    )
                }),
            }
        })
        .collect()
}

/// The headers some key part or the client identity of `config` reads, lower case.
fn headers_read(config: &Config) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for source in config.routes.iter().flat_map(|r| &r.limits).flat_map(|l| l.key.parts.iter().flatten()) {
        match source {
            KeySource::Header(name) => {
                names.insert(name.to_ascii_lowercase());
            }
            KeySource::User => {
                if let Some(h) = &config.server.user_header {
                    names.insert(h.to_ascii_lowercase());
                }
            }
            _ => {}
        }
    }
    if !config.server.trusted_proxies.is_empty() {
        names.insert(config.server.forwarded_header.name().to_string());
    }
    names
}

/// Decides logged requests as the gateway configured by `config` would.
pub struct ConfigJudge {
    /// The gateway's pipeline, on a memory store reading `clock`.
    limiter: Limiter,
    /// The store's clock, set to each request's time before it is decided.
    clock: Arc<ManualClock>,
    /// The configuration (its routes).
    config: Config,
    /// Per header of the log format: its name, when the configuration reads it (others are
    /// not copied into the request's headers).
    headers: Vec<Option<HeaderName>>,
    /// The current request's headers, reused.
    map: HeaderMap,
    /// The current request's limit decisions, reused.
    out: Vec<LimitDecision>,
    /// Wakes this thread if a decision ever waits.
    waker: Waker,
    /// Concurrency slots of requests still in flight, by when the log says each ended (and the
    /// order they came in): given back before a later request is decided.
    in_flight: BTreeMap<(Nanos, u64), Slots>,
    /// Requests judged so far: the tie-break of `in_flight`.
    judged: u64,
}

impl ConfigJudge {
    /// A judge for `config` deciding with `limiter` (built on a store reading `clock`); the log
    /// carries the headers `log_headers`.
    pub fn new(config: Config, limiter: Limiter, clock: Arc<ManualClock>, log_headers: &[String]) -> Self {
        let read = headers_read(&config);
        let headers = log_headers
            .iter()
            .map(|h| read.contains(h.as_str()).then(|| HeaderName::from_bytes(h.as_bytes()).ok()).flatten())
            .collect();
        Self {
            limiter,
            clock,
            config,
            headers,
            map: HeaderMap::new(),
            out: Vec::new(),
            waker: Waker::from(Arc::new(ThreadWaker(std::thread::current()))),
            in_flight: BTreeMap::new(),
            judged: 0,
        }
    }
}

impl Judge for ConfigJudge {
    fn judge(&mut self, r: &LogRequest, at: Nanos) -> Judgement<'_> {
        // Requests that ended by now give their slots back, each at the time it ended.
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > at {
                break;
            }
            let ((ended, _), slots) = entry.remove_entry();
            self.clock.set(ended);
            slots.release();
        }
        self.clock.set(at);
        self.map.clear();
        for (h, value) in r.headers() {
            // A value no HTTP request could carry (a control character) is absent, as it never
            // reached the gateway.
            if let (Some(Some(name)), Ok(v)) = (self.headers.get(h), HeaderValue::from_bytes(value)) {
                self.map.append(name.clone(), v);
            }
        }
        let client = self.limiter.client(r.peer, &self.map);
        // As the gateway: routes match, and `path` key parts read, the normalised path; a path
        // upstreams read differently is refused before any route. A log carries one value per
        // header: a keyed header cannot be repeated here.
        let asked = Asked { method: r.method(), path: r.path(), query: None, headers: &self.map, tls: None };
        let face = Judged { out: &mut self.out, sent: r.sent, took: r.took, request: PhantomData };
        let lifecycle = Lifecycle::new(&self.limiter, &Unobserved);
        self.judged += 1;
        match block_on(lifecycle.routed(&self.config.routes, &client, asked, face), &self.waker) {
            Ok(Logged { judgement, slots, .. }) => {
                if let (Some(slots), Some(took)) = (slots, r.took) {
                    self.in_flight.insert((at.saturating_add(took), self.judged), slots);
                }
                judgement
            }
            Err(never) => match never {},
        }
    }
}

/// The judge's face: what the gateway would have done, recorded instead of done. Nothing is
/// held for a shaping delay (the log's time is the clock's).
struct Judged<'j, 'r> {
    /// The decision of each of the route's limits, filled for the request decided.
    out: &'j mut Vec<LimitDecision>,
    /// The body bytes the log says were sent: what `response-bytes` limits are settled to.
    sent: Option<u64>,
    /// How long the log says the request was in flight: how long it holds its concurrency
    /// slots.
    took: Option<Nanos>,
    /// The request judged (its headers are the judge's, reused).
    request: PhantomData<Asked<'r>>,
}

impl<'j> Judged<'j, '_> {
    /// The judgement of a decided request: every limit's own verdict, and the request's.
    fn decided(self, at: Counted<'_>, ruling: &Ruling<'_>) -> Judgement<'j> {
        let route = match at {
            Counted::Route(i, _) => i,
            Counted::Named(_) => 0,
        };
        self.out.clear();
        let verdict = match &ruling.outcome {
            Err(_) => RequestVerdict::Unavailable,
            Ok(outcome) => {
                let policies = ruling.policies();
                for (i, (check, d)) in ruling.checks.iter().zip(&outcome.decisions).enumerate() {
                    let shadow = policies.get(check.policy).is_some_and(PolicyInfo::apart);
                    let verdict = match (outcome.not_evaluated.contains(&i), d.allowed, shadow) {
                        (true, _, _) => LimitVerdict::NotEvaluated,
                        (false, true, _) => LimitVerdict::Allowed,
                        (false, false, true) => LimitVerdict::ShadowDenied,
                        (false, false, false) => LimitVerdict::Denied,
                    };
                    let key_type = ruling.kinds.get(i).copied().unwrap_or("absent");
                    self.out.push(LimitDecision { key: check.key, key_type, verdict, decision: *d });
                }
                if outcome.allowed { RequestVerdict::Admitted } else { RequestVerdict::Denied }
            }
        };
        Judgement::Decided { route, verdict, limits: self.out.as_slice() }
    }
}

/// A judgement, what the log says of its response (for the meter), and the concurrency slots
/// it holds until the logged request ends.
struct Logged<'j> {
    judgement: Judgement<'j>,
    /// The body bytes sent.
    sent: Option<u64>,
    /// How long the request was in flight.
    took: Option<Nanos>,
    /// Slots held beyond the response: given back when the request ended, `took` after it came.
    slots: Option<Slots>,
}

impl<'j> Logged<'j> {
    fn of(judgement: Judgement<'j>) -> Self {
        Self { judgement, sent: None, took: None, slots: None }
    }
}

impl<'j, 'r> Face for Judged<'j, 'r> {
    type Request = Asked<'r>;
    type Response = Logged<'j>;
    type Error = Infallible;

    /// The judge never sleeps: a shaped request's delay is in its decision.
    const HOLDS_DELAY: bool = false;

    /// sluice's own answers before any decision are refusals (400).
    fn answer(&self, _: Answer) -> Logged<'j> {
        Logged::of(Judgement::Refused)
    }

    fn status(_: &Logged<'j>) -> u16 {
        0
    }

    /// A logged response is over: `response-bytes` limits are settled to the bytes the log
    /// says it sent (their reservation stands when it does not say), and costs read from the
    /// response's header or JSON keep their reservations (no log holds them). Concurrency slots
    /// are held until the request ended when the log says how long it took (the judge gives
    /// them back then), else given back at once.
    fn meter(mut logged: Logged<'j>, mut meter: Meter) -> Logged<'j> {
        if logged.took.is_some() {
            logged.slots = meter.hold_slots();
        }
        match logged.sent {
            Some(n) => meter.read_sent(n),
            None => meter.unmetered(),
        }
        logged
    }

    async fn pass_on(self, _: Asked<'r>, at: Counted<'_>, ruling: &Ruling<'_>) -> Result<Logged<'j>, Infallible> {
        let (sent, took) = (self.sent, self.took);
        Ok(Logged { sent, took, ..Logged::of(self.decided(at, ruling)) })
    }

    fn deny(self, at: Counted<'_>, ruling: &Ruling<'_>) -> Result<Logged<'j>, Infallible> {
        Ok(Logged::of(self.decided(at, ruling)))
    }

    fn unavailable(self, at: Counted<'_>, ruling: &Ruling<'_>) -> Result<Logged<'j>, Infallible> {
        Ok(Logged::of(self.decided(at, ruling)))
    }

    async fn unmatched(self, _: Asked<'r>) -> Result<Logged<'j>, Infallible> {
        Ok(Logged::of(Judgement::Unmatched))
    }

    /// No access log carries a body.
    fn body_unreadable(self, route: usize) -> Logged<'j> {
        Logged::of(Judgement::NotSimulable { route })
    }
}

/// What the simulation of `config` over a log carrying `log_headers` cannot do as the gateway
/// would, one sentence each.
pub fn warnings(config: &Config, log_headers: &[String]) -> Vec<String> {
    let carried = |name: &str| log_headers.iter().any(|h| h.eq_ignore_ascii_case(name));
    let mut out: Vec<String> = Vec::new();
    let mut push = |w: String| {
        if !out.contains(&w) {
            out.push(w);
        }
    };
    for route in config.routes.iter().filter(|r| body_parts(r).is_empty()) {
        for limit in &route.limits {
            let policy = &config.policies[limit.policy].name;
            for chain in &limit.key.parts {
                for (i, source) in chain.iter().enumerate() {
                    let header = match source {
                        KeySource::Header(h) => h.clone(),
                        KeySource::User => match &config.server.user_header {
                            Some(h) => h.to_ascii_lowercase(),
                            None => continue,
                        },
                        KeySource::Tls(_) => {
                            push(format!(
                                "route {}, policy {policy}: an access log carries no client certificate, so `{source}` is absent for every request",
                                route.name
                            ));
                            continue;
                        }
                        _ => continue,
                    };
                    if carried(&header) {
                        continue;
                    }
                    let then = match chain.get(i + 1) {
                        Some(next) => format!("it falls back to `{next}`"),
                        None => "as in the gateway, every request without it shares one \"absent\" key".into(),
                    };
                    push(format!(
                        "route {}, policy {policy}: the log carries no `{header}` header, so `{source}` is absent for every request; {then}",
                        route.name
                    ));
                }
            }
        }
    }
    let forwarded = config.server.forwarded_header.name();
    if !config.server.trusted_proxies.is_empty() && !carried(forwarded) {
        push(format!(
            "server.trusted_proxies is set but the log carries no `{forwarded}`: requests from trusted proxies are \
             keyed as the proxy (combined logs: --xff-last-field; JSON: xff=FIELD or header:{forwarded}=FIELD)"
        ));
    }
    if matches!(config.store, sluice_config::StoreConfig::Redis { .. }) {
        push("the configuration's store is Redis: simulated on the memory store (1000000 keys per policy)".into());
    }
    for route in &config.routes {
        for limit in &route.limits {
            let policy = &config.policies[limit.policy];
            let name = &policy.name;
            if policy.concurrency {
                push(format!(
                    "route {}, policy {name}: a request holds its slot for the time its log line says it took \
                     (JSON role `duration`, nginx's `$request_time`); a line that does not say gives it back at once",
                    route.name
                ));
            }
            match &limit.cost_from {
                Some(from @ (CostFrom::ResponseHeader(_) | CostFrom::ResponseJson(_))) => push(format!(
                    "route {}, policy {name}: a log holds no response header or body, so `{from}` is not read: each \
                     request costs its reservation ({})",
                    route.name, limit.cost
                )),
                // Settled to the logged size (`$body_bytes_sent`, `%b`, JSON `bytes=`); a file's
                // routes never read extensions (refused at load).
                Some(CostFrom::ResponseBytes | CostFrom::ResponseExtension) | None => {}
            }
        }
    }
    out
}
