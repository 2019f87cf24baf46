//! `POST /v1/check`: the decision service, for applications that ask instead of proxying.

use std::time::Instant;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use sluice_config::Config;
use sluice_core::ceil_millis;
use sluice_store::Check;

use crate::enforce::Enforcer;
use crate::gateway::store_failure;
use crate::headers::{write_denied, write_rate_limit_headers};
use crate::observe::{CHECK_API_ROUTE, Observed, Timing};
use crate::respond::{self, Body};

/// The path of the decision API.
pub const PATH: &str = "/v1/check";

/// Largest request body the decision API reads.
const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneCheck {
    policy: String,
    key: String,
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

/// Decides `{"policy", "key", "cost"}` or `{"checks": [...]}` (decided together): 200 when
/// admitted, 429 (the configured deny status) when denied, with the decision in the body and the
/// rate-limit headers. Keys are hashed with the policy name before they reach the store.
/// Decisions are counted and logged through `observed` under the route `/v1/check`.
pub async fn handle(
    enforcer: &Enforcer,
    config: &Config,
    observed: &Observed,
    req: Request<Incoming>,
    unix_now: u64,
) -> Response<Body> {
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
    let started = Instant::now();
    let mut checks = Vec::with_capacity(asked.len());
    for c in &asked {
        let Some(policy) = enforcer.policy_index(&c.policy) else {
            return respond::error(400, "unknown_policy", &format!("No policy named `{}`.", c.policy));
        };
        let limit = enforcer.policies()[policy].policy.limit();
        if c.cost > limit {
            return respond::error(400, "cost_too_large", &format!("Cost {} exceeds the limit {limit}.", c.cost));
        }
        let key = enforcer.hasher().hash(&[c.policy.as_bytes(), b"api", c.key.as_bytes()]);
        checks.push(Check { policy, key, cost: c.cost });
    }
    let store_asked = Instant::now();
    let result = enforcer.decide(&checks).await;
    let timing = Timing::since(started, store_asked);
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            observed.failed(None, CHECK_API_ROUTE, &checks, enforcer.policies(), &e, timing, "api", 503);
            return store_failure(&e);
        }
    };
    observed.decided(None, &checks, enforcer.policies(), &outcome, timing);
    let logged = observed.pick(&outcome);
    let per_check: Vec<_> = outcome
        .decisions
        .iter()
        .zip(&asked)
        .map(|(d, c)| {
            serde_json::json!({
                "policy": c.policy,
                "allowed": d.allowed,
                "limit": d.limit,
                "remaining": d.remaining,
                "reset_after_ms": ceil_millis(d.reset_after),
                "retry_after_ms": ceil_millis(d.retry_after),
                "delay_ms": ceil_millis(d.delay),
            })
        })
        .collect();
    let view = enforcer.view(&checks, &outcome);
    let (status, summary) = match &view {
        Some(v) => (if outcome.allowed { 200 } else { config.server.deny_status }, v.decision),
        None => (200, outcome.decisions[0]),
    };
    let payload = serde_json::json!({
        "allowed": outcome.allowed,
        "limit": summary.limit,
        "remaining": summary.remaining,
        "reset_after_ms": ceil_millis(summary.reset_after),
        "retry_after_ms": if outcome.allowed { 0 } else { ceil_millis(summary.retry_after) },
        "delay_ms": ceil_millis(outcome.delay()),
        "checks": per_check,
    });
    if let Some((i, verdict)) = logged {
        let d = &outcome.decisions[i];
        observed.line(CHECK_API_ROUTE, enforcer.policies(), &checks[i], d, verdict, "api", timing, status).emit();
    }
    let mut res = respond::json(status, &payload);
    if outcome.allowed {
        if let Some(v) = &view {
            write_rate_limit_headers(res.headers_mut(), &config.server.headers, v, unix_now);
        }
    } else {
        write_denied(res.headers_mut(), &config.server.headers, view.as_ref(), unix_now);
    }
    res
}
