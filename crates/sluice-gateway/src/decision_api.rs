//! `POST /v1/check`: the decision service, for applications that ask instead of proxying; and
//! reservations: `POST /v1/reserve` decides as `/v1/check` and holds an admitted request's
//! charges under an id, `/v1/settle` settles them to what the request really cost, `/v1/refund`
//! gives them back ([`crate::reservations`]).

use std::convert::Infallible;
use std::net::IpAddr;
use std::time::Duration;

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
use sluice_store::{Check, Settle};

use crate::observe::{CHECK_API_ROUTE, Observed};
use crate::reservations::{Owner, Refused, Reservations};
use crate::respond::{self, Body};

/// The path of the decision API (also its `route` label in metrics and logs).
pub const PATH: &str = CHECK_API_ROUTE;
/// Decides as [`PATH`], and holds an admitted request's charges under a reservation id.
pub const RESERVE: &str = "/v1/reserve";
/// Settles a reservation to what the request really cost.
pub const SETTLE: &str = "/v1/settle";
/// Gives a reservation's charges back, in part or whole.
pub const REFUND: &str = "/v1/refund";
/// Every path the decision API serves.
pub const PATHS: [&str; 4] = [PATH, RESERVE, SETTLE, REFUND];
/// Reservations open at once, at most (beyond, `/v1/reserve` answers 503 and charges nothing).
pub const MAX_RESERVATIONS: usize = 100_000;
/// How long a reservation stays open; one never settled keeps its charge.
pub const RESERVATION_TTL: Duration = Duration::from_secs(600);

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
    /// Decide without charging (one check; `{"checks": [...], "peek": true}` for several).
    #[serde(default)]
    peek: bool,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CheckRequest {
    Many {
        checks: Vec<OneCheck>,
        #[serde(default)]
        peek: bool,
    },
    One(OneCheck),
}

/// Who the caller is, if it may use the API: the holder of the bearer token (compared in
/// constant time), or else an allowed peer.
fn caller(access: &DecisionApi, peer: IpAddr, headers: &HeaderMap) -> Option<Owner> {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let bearer = || {
        let token = access.token.as_ref()?;
        let mut lines = headers.get_all(AUTHORIZATION).iter();
        let (Some(line), None) = (lines.next(), lines.next()) else { return None };
        let given = line.as_bytes().strip_prefix(b"Bearer ")?;
        constant_time_eq(given, token.expose().as_bytes()).then_some(Owner::Token)
    };
    bearer().or_else(|| access.allow.iter().any(|net| net.contains(&peer)).then_some(Owner::Peer(peer)))
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
    /// `/v1/reserve`, admitted: the id that settles or refunds the charges.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation: Option<String>,
    /// How long the reservation stays open.
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_in_ms: Option<u64>,
}

/// `POST /v1/settle`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleRequest {
    /// The id `/v1/reserve` gave.
    reservation: String,
    /// What the request really cost (each of its checks).
    actual: u64,
}

/// `POST /v1/refund`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundRequest {
    /// The id `/v1/reserve` gave.
    reservation: String,
    /// How much to give back of each check's charge (default: all of it).
    amount: Option<u64>,
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
///
/// The same callers may reserve (`/v1/reserve`), settle and refund; a reservation is settled or
/// refunded only by the caller that made it (the token's holder, or the same address).
pub async fn handle(
    limiter: &Limiter,
    observed: &Observed,
    access: &DecisionApi,
    reservations: &Reservations,
    peer: IpAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(owner) = caller(access, peer, req.headers()) else {
        return respond::error(
            403,
            "forbidden",
            "The decision API answers only the peers it allows, or a request with its bearer token.",
        );
    };
    let path = match req.uri().path() {
        RESERVE => RESERVE,
        SETTLE => SETTLE,
        REFUND => REFUND,
        _ => PATH,
    };
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return respond::error(413, "body_too_large", "The check request is too large (64 KiB at most)."),
    };
    match path {
        SETTLE | REFUND => taken(limiter, observed, reservations, owner, path, &body).await,
        _ => {
            let reserve = (path == RESERVE).then_some((reservations, owner));
            decide(limiter, observed, access, reserve, &body).await
        }
    }
}

/// `/v1/settle` or `/v1/refund`: the caller's reservation taken and its charges settled.
async fn taken(
    limiter: &Limiter,
    observed: &Observed,
    reservations: &Reservations,
    owner: Owner,
    path: &str,
    body: &[u8],
) -> Response<Body> {
    let bad = |e: serde_json::Error| respond::error(400, "bad_request", &format!("Invalid request: {e}"));
    let taken = if path == SETTLE {
        let r: SettleRequest = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => return bad(e),
        };
        let taken = reservations.take(&r.reservation, owner, |_| Ok(()));
        taken.map(|charges| charges.into_iter().map(|c| Settle { actual: r.actual, ..c }).collect())
    } else {
        let r: RefundRequest = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => return bad(e),
        };
        let fits = |charges: &[Settle]| match r.amount {
            Some(n) if charges.iter().any(|c| n > c.check.cost) => Err(Refused::TooLarge),
            _ => Ok(()),
        };
        reservations.take(&r.reservation, owner, fits).map(|charges| {
            let back = |c: &Settle| r.amount.unwrap_or(c.check.cost);
            charges.into_iter().map(|c| Settle { actual: c.check.cost - back(&c), ..c }).collect::<Vec<_>>()
        })
    };
    let settles: Vec<Settle> = match taken {
        Ok(s) => s,
        Err(why) => {
            observed.observer().metrics().reservation_refused(why.reason());
            return match why {
                Refused::Unknown => respond::error(
                    404,
                    "unknown_reservation",
                    "No open reservation of that id for this caller (used, expired, or never made).",
                ),
                Refused::TooLarge => {
                    respond::error(400, "refund_too_large", "A refund cannot be larger than what was charged.")
                }
            };
        }
    };
    match limiter.try_settle(&settles).await {
        Ok(()) => {
            respond::json(200, &serde_json::json!({ "status": if path == SETTLE { "settled" } else { "refunded" } }))
        }
        Err(_) => respond::answer(Answer::limiter_unavailable()),
    }
}

/// `/v1/check` or `/v1/reserve`: the checks asked, decided.
async fn decide(
    limiter: &Limiter,
    observed: &Observed,
    access: &DecisionApi,
    reserve: Option<(&Reservations, Owner)>,
    body: &[u8],
) -> Response<Body> {
    let parsed: CheckRequest = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(e) => return respond::error(400, "bad_request", &format!("Invalid check request: {e}")),
    };
    let (asked, peek) = match parsed {
        CheckRequest::Many { checks, .. } if checks.iter().any(|c| c.peek) => {
            return respond::error(400, "bad_request", "`peek` goes beside `checks`, not in one of them.");
        }
        CheckRequest::Many { checks, peek } => (checks, peek),
        CheckRequest::One(c) => {
            let peek = c.peek;
            (vec![c], peek)
        }
    };
    if asked.is_empty() {
        return respond::error(400, "bad_request", "`checks` is empty.");
    }
    if peek && reserve.is_some() {
        return respond::error(
            400,
            "bad_request",
            "A peek charges nothing, so it holds nothing: reserve without `peek`.",
        );
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
    let face = Replied { asked: &asked, deny_status: limiter.deny_status(), limiter, reserve };
    if peek {
        // A question, not a decision: answered as a check would be, counted nowhere.
        let ruling = limiter.peek(Checks::new(checks, kinds)).await;
        let mut res = face.reply(&ruling, None);
        if !ruling.allowed() {
            ruling.write_denied_headers(res.headers_mut());
        }
        return res;
    }
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
    /// What decided (its enforcer says what a ruling charged).
    limiter: &'a Limiter,
    /// `/v1/reserve`: where an admitted request's charges are held, and for whom.
    reserve: Option<(&'a Reservations, Owner)>,
}

impl Replied<'_> {
    /// The decision as the API reports it: 200 when admitted, the deny status when denied;
    /// with the reservation that holds its charges, if one does.
    fn reply(&self, ruling: &Ruling<'_>, reservation: Option<String>) -> Response<Body> {
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
        let expires_in_ms = reservation.as_ref().zip(self.reserve).map(|(_, (r, _))| r.ttl().as_millis() as u64);
        respond::answer(Answer::json(status, &Reply { decision, checks, reservation, expires_in_ms }))
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
        let (Some((table, owner)), Ok(outcome)) = (self.reserve, &ruling.outcome) else {
            return Ok(self.reply(ruling, None));
        };
        // Held at their reserved cost (a failure mode's admission charged nothing: none held).
        let charges = self.limiter.enforcer().charges(&ruling.checks, outcome);
        let charges = charges.into_iter().map(|c| Settle { actual: c.check.cost, ..c }).collect();
        match table.hold(owner, charges) {
            Some(id) => Ok(self.reply(ruling, Some(id))),
            None => {
                // No id to give: nothing may stay charged that the caller cannot settle.
                self.limiter.refund(ruling).await;
                Ok(respond::error(503, "reservations_full", "Too many reservations are open; try again later."))
            }
        }
    }

    fn deny(self, _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        let mut res = self.reply(ruling, None);
        ruling.write_denied_headers(res.headers_mut());
        Ok(res)
    }
}
