//! The answer to Envoy: a status per descriptor (counted in the service's counters), the
//! overall code, and the rate-limit headers of the limit that denied or is closest to denying.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use http::HeaderMap;
use sluice_config::HeaderStyle;
use sluice_core::{Decision, NANOS_PER_SEC, Nanos};
use sluice_http::headers::{LimitView, write_denied, write_rate_limit_headers};

use crate::descriptor_match::{Decider, Report, ResolvedDescriptor};
use crate::metrics::{Metrics, Result as Outcome};

/// `limit_remaining` of an unlimited descriptor.
pub const UNLIMITED_REMAINING: u32 = u32::MAX;

/// The limit a response's headers describe: its decision, quota window and policy name.
type Described = (Decision, Nanos, String);

/// The response to a request of `descriptors` at `now`, `decisions` being the store's, one per
/// check; each descriptor is counted in `metrics`, headers are written in `styles`.
pub(crate) fn answer(
    descriptors: &[ResolvedDescriptor<'_>],
    decisions: &[Option<Decision>],
    now: Nanos,
    metrics: &Metrics,
    styles: &[HeaderStyle],
) -> RateLimitResponse {
    let mut statuses = Vec::with_capacity(descriptors.len());
    let mut over = false;
    let mut describe: Option<Described> = None;
    for desc in descriptors {
        let (status, decision) = descriptor_status(desc, decisions, now, metrics);
        if let (Some(d), Some(r)) = (decision, &desc.report)
            && !r.shadow
        {
            over |= !d.allowed;
            let tighter = describe.as_ref().is_none_or(|(t, ..)| d.tighter(*t) == d && d != *t);
            if tighter {
                describe = Some((d, r.window, r.name.clone()));
            }
        }
        statuses.push(status);
    }
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: headers(styles, describe.as_ref(), over, now),
        ..Default::default()
    }
}

/// One descriptor's status, and the decision it reports (none without a limit).
fn descriptor_status(
    desc: &ResolvedDescriptor<'_>,
    decisions: &[Option<Decision>],
    now: Nanos,
    metrics: &Metrics,
) -> (DescriptorStatus, Option<Decision>) {
    match (desc.decider, &desc.report) {
        (Decider::Unlimited, _) => {
            metrics.descriptor(&desc.label, Outcome::Unlimited, desc.cost);
            let s =
                DescriptorStatus { code: Code::Ok as i32, limit_remaining: UNLIMITED_REMAINING, ..Default::default() };
            (s, None)
        }
        (Decider::Over, Some(r)) => {
            let until = r.period - now % r.period;
            let allowed = desc.cost == 0;
            let d = Decision {
                allowed,
                limit: u64::from(r.limit.requests_per_unit),
                remaining: 0,
                reset_after: until,
                retry_after: if allowed { 0 } else { until },
                delay: 0,
            };
            (limited_status(metrics, r, &d, until, desc), Some(d))
        }
        (Decider::Store(c), Some(r)) => {
            let d = decisions[c].expect("every live check is decided");
            let until = match (r.fixed, d.allowed) {
                (true, _) => r.period - now % r.period,
                (false, true) => d.reset_after,
                (false, false) => d.retry_after,
            };
            (limited_status(metrics, r, &d, until, desc), Some(d))
        }
        // Reported usage: charged, OK whatever is left (Envoy does not wait for the answer).
        (Decider::Usage(_), _) => {
            metrics.descriptor(&desc.label, Outcome::Ok, desc.cost);
            (DescriptorStatus { code: Code::Ok as i32, ..Default::default() }, None)
        }
        // Nothing matched, or the limit was replaced.
        _ => {
            metrics.descriptor(&desc.label, Outcome::NoLimit, 0);
            (DescriptorStatus { code: Code::Ok as i32, ..Default::default() }, None)
        }
    }
}

/// The status of a descriptor under a limit, decided `d`, its limit back after `until`.
fn limited_status(
    metrics: &Metrics,
    r: &Report,
    d: &Decision,
    until: Nanos,
    desc: &ResolvedDescriptor<'_>,
) -> DescriptorStatus {
    let over = !d.allowed;
    let outcome = match (over, r.shadow) {
        (false, _) => Outcome::Ok,
        (true, false) => Outcome::OverLimit,
        (true, true) => Outcome::ShadowOverLimit,
    };
    metrics.descriptor(&desc.label, outcome, desc.cost);
    DescriptorStatus {
        code: if over && !r.shadow { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(r.limit.clone()),
        limit_remaining: if over { 0 } else { u32::try_from(d.remaining).unwrap_or(u32::MAX) },
        duration_until_reset: Some(duration(until)),
        ..Default::default()
    }
}

/// `response_headers_to_add`: the rate-limit headers of the limit that denied, or of the one
/// closest to denying, in the configured styles (sluice's header writer).
fn headers(styles: &[HeaderStyle], describe: Option<&Described>, over: bool, now: Nanos) -> Vec<HeaderValue> {
    let Some((decision, window, name)) = describe else { return Vec::new() };
    let view = LimitView { name, window: *window, decision: *decision, partition_key: None, unit: None };
    let views = std::slice::from_ref(&view);
    let mut map = HeaderMap::new();
    let unix = now / NANOS_PER_SEC;
    if over {
        write_denied(&mut map, styles, views, Some(0), unix);
    } else {
        write_rate_limit_headers(&mut map, styles, views, 0, unix);
    }
    map.iter()
        .map(|(k, v)| HeaderValue {
            key: k.as_str().to_string(),
            value: v.to_str().unwrap_or_default().to_string(),
            ..Default::default()
        })
        .collect()
}

fn duration(n: Nanos) -> PbDuration {
    PbDuration { seconds: (n / NANOS_PER_SEC) as i64, nanos: (n % NANOS_PER_SEC) as i32 }
}
