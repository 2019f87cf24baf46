//! `POST /v1/check`: the decision service, for applications that ask instead of proxying.

use std::convert::Infallible;
use std::net::IpAddr;

use http::header::AUTHORIZATION;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use sluice_config::DecisionApi;
use sluice_core::{Decision, ceil_millis};
use sluice_http::lifecycle::{Counted, Face, Lifecycle};
use sluice_http::pipeline::{Checks, Limiter, Ruling};
use sluice_http::response::Answer;
use sluice_store::Check;

use crate::observe::{CHECK_API_ROUTE, Observed};
use crate::respond::{self, Body};

/// The path of the decision API (also its `route` label in metrics and logs).
pub const PATH: &str = CHECK_API_ROUTE;

/// Largest request body the decision API reads.
const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneCheck {
    /// The policy's name.
    policy: String,
    /// The caller's key (hashed before it reaches the store).
    key: String,
    /// What this check costs (default 1).
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CheckRequest {
    Many { checks: Vec<OneCheck> },
    One(OneCheck),
}

/// Whether the caller may use the API: an allowed peer, or the bearer token (compared in
/// constant time).
fn allowed(access: &DecisionApi, peer: IpAddr, headers: &HeaderMap) -> bool {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    if access.allow.iter().any(|net| net.contains(&peer)) {
        return true;
    }
    let Some(token) = &access.token else { return false };
    let mut lines = headers.get_all(AUTHORIZATION).iter();
    let (Some(line), None) = (lines.next(), lines.next()) else { return false };
    let Some(given) = line.as_bytes().strip_prefix(b"Bearer ") else { return false };
    constant_time_eq(given, token.expose().as_bytes())
}

/// Equal bytes, in a time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A decision as the API reports it (durations in milliseconds, rounded up).
#[derive(Serialize)]
struct DecisionReply {
    /// Admitted.
    allowed: bool,
    /// The limit's size.
    limit: u64,
    /// What is left of it.
    remaining: u64,
    /// Until the key is back to a fresh state.
    reset_after_ms: u64,
    /// When denied: until the same request would be admitted.
    retry_after_ms: u64,
    /// Shaping: how long to hold the request.
    delay_ms: u64,
}

impl DecisionReply {
    fn of(d: &Decision) -> Self {
        Self {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after_ms: ceil_millis(d.reset_after),
            retry_after_ms: ceil_millis(d.retry_after),
            delay_ms: ceil_millis(d.delay),
        }
    }
}

/// One check's decision.
#[derive(Serialize)]
struct CheckReply<'a> {
    /// The policy checked.
    policy: &'a str,
    /// Its decision.
    #[serde(flatten)]
    decision: DecisionReply,
}

/// The answer: the request's decision (described by the limit that denied, or the one closest
/// to denying), then every check's.
#[derive(Serialize)]
struct Reply<'a> {
    /// The request's decision.
    #[serde(flatten)]
    decision: DecisionReply,
    /// Every check's, in the order asked.
    checks: Vec<CheckReply<'a>>,
}

/// Decides `{"policy", "key", "cost"}` or `{"checks": [...]}` (decided together): 200 when
/// admitted, the configured deny status when denied, with the decision in the body and the
/// rate-limit headers; 503 when the store cannot decide. Keys are hashed apart from request keys
/// before they reach the store. Decisions are counted and logged through `observed` under the
/// route `/v1/check`.
///
/// Only peers in `access.allow` (loopback by default) or requests bearing `access.token` are
/// answered (403 otherwise): anyone who can call it could spend any key's quota. A check may
/// cost at most `access.max_cost` (default: its policy's limit).
pub async fn handle(
    limiter: &Limiter,
    observed: &Observed,
    access: &DecisionApi,
    peer: IpAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    if !allowed(access, peer, req.headers()) {
        return respond::error(
            403,
            "forbidden",
            "The decision API answers only the peers it allows, or a request with its bearer token.",
        );
    }
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return respond::error(413, "body_too_large", "The check request is too large (64 KiB at most)."),
    };
    let parsed: CheckRequest = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => return respond::error(400, "bad_request", &format!("Invalid check request: {e}")),
    };
    let asked = match parsed {
        CheckRequest::Many { checks } => checks,
        CheckRequest::One(c) => vec![c],
    };
    if asked.is_empty() {
        return respond::error(400, "bad_request", "`checks` is empty.");
    }
    let mut checks = Vec::with_capacity(asked.len());
    for c in &asked {
        let Some(policy) = limiter.enforcer().policy_index(&c.policy) else {
            return respond::error(400, "unknown_policy", &format!("No policy named `{}`.", c.policy));
        };
        let limit = limiter.policies()[policy].policy.limit();
        let most = access.max_cost.map_or(limit, |m| m.min(limit));
        if sluice_core::check_charge(c.cost, most).is_err() {
            return respond::error(
                400,
                "cost_too_large",
                &format!("Cost {} exceeds the largest allowed, {most}.", c.cost),
            );
        }
        if sluice_core::check_cost(c.cost, most).is_err() {
            return respond::error(400, "bad_request", "A check costs at least 1.");
        }
        checks.push(Check { policy, key: limiter.keys().named(&c.policy, &c.key), cost: c.cost });
    }
    let kinds = vec!["api"; checks.len()];
    let face = Replied { asked: &asked, deny_status: limiter.deny_status() };
    let lifecycle = Lifecycle::new(limiter, observed);
    match lifecycle.checked(Counted::Named(CHECK_API_ROUTE), Checks::new(checks, kinds), (), face).await {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

/// The decision API's face: admitted or denied, the answer is the decision in JSON.
struct Replied<'a> {
    /// The checks as asked (their policies name the replies).
    asked: &'a [OneCheck],
    /// The status of a denial.
    deny_status: StatusCode,
}

impl Replied<'_> {
    /// The decision as the API reports it: 200 when admitted, the deny status when denied.
    fn reply(&self, ruling: &Ruling<'_>) -> Response<Body> {
        let Ok(outcome) = &ruling.outcome else { return respond::answer(Answer::limiter_unavailable()) };
        let checks = outcome
            .decisions
            .iter()
            .zip(self.asked)
            .map(|(d, c)| CheckReply { policy: &c.policy, decision: DecisionReply::of(d) })
            .collect();
        let view = ruling.view();
        let mut decision = DecisionReply::of(&view.map_or(outcome.decisions[0], |v| v.decision));
        decision.allowed = outcome.allowed;
        decision.retry_after_ms = if outcome.allowed { 0 } else { decision.retry_after_ms };
        decision.delay_ms = ceil_millis(outcome.delay());
        let status = if outcome.allowed || view.is_none() { StatusCode::OK } else { self.deny_status };
        respond::answer(Answer::json(status, &Reply { decision, checks }))
    }
}

impl Face for Replied<'_> {
    type Request = ();
    type Response = Response<Body>;
    type Error = Infallible;

    /// Shaping is the caller's to do: the reply says how long (`delay_ms`), at once.
    const HOLDS_DELAY: bool = false;

    respond::server_responses!();

    async fn pass_on(self, _: (), _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        Ok(self.reply(ruling))
    }

    fn deny(self, _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        let mut res = self.reply(ruling);
        ruling.write_denied_headers(res.headers_mut());
        Ok(res)
    }
}
