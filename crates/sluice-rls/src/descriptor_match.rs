//! A request's descriptors resolved against the load in use: which limit each is under, who
//! decides it and what it reports; then `replaces` applied across them.

use std::collections::HashSet;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit as PbLimit;
use sluice_core::{AlgorithmKind, NANOS_PER_SEC, Nanos, Policy};
use sluice_http::headers::quota_window;
use sluice_store::{Check, KeyHash};
use tonic::Status;

use crate::descriptors::{Limit, Matched};
use crate::rate_limit::{Rule, Unit, policy};
use crate::snapshot::Snapshot;

/// A descriptor's own `limit` override: the `current_limit` it reports and the policy that
/// decides it (a fixed window of the unit; none for `requests_per_unit: 0`).
pub(crate) type Override = (PbLimit, Option<Policy>);

/// Who decides a descriptor: nobody, its rule alone, or the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decider {
    /// Nothing matched (or its limit was replaced): OK, no `current_limit`.
    NoLimit,
    /// `unlimited`: OK, `limit_remaining` 4294967295.
    Unlimited,
    /// Over the limit without asking the store (`requests_per_unit: 0`, or a cost no window
    /// could ever admit); OK when it costs nothing.
    Over,
    /// Decided by the store: the index of its check among the request's.
    Store(usize),
    /// Usage reported after the fact (a `stream_done` descriptor with its own `hits_addend`):
    /// charged by settling, into debt if need be, and OK whatever is left.
    Usage(Check),
}

/// What a descriptor with a limit reports.
pub(crate) struct Report {
    /// `current_limit`.
    pub limit: PbLimit,
    /// The limit's period (fixed windows report the time to the window's end).
    pub period: Nanos,
    /// `w` of the `ietf` fields: the time the whole quota takes to come back, as the gateway
    /// states it for the same policy ([`quota_window`]: a bucket's time to refill whole, not the
    /// period its rate is given per); the period for a limit without a policy.
    pub window: Nanos,
    /// True when the policy is a fixed window (or there is none).
    pub fixed: bool,
    /// `shadow_mode`: never over the limit.
    pub shadow: bool,
    /// The policy name (headers).
    pub name: String,
}

/// One descriptor of a request, resolved: everything its answer needs.
pub(crate) struct ResolvedDescriptor<'a> {
    /// Who decides it.
    pub decider: Decider,
    /// What it reports; none when no limit applies (nothing matched, `unlimited`, replaced).
    pub report: Option<Report>,
    /// What it costs (0 checks without charging).
    pub cost: u64,
    /// Its labels in the service's counters: the domain and the descriptor's path.
    pub label: (String, String),
    /// The configured limit it matched, whose `replaces` may drop others' (none for an
    /// override or no match).
    pub matched: Option<&'a Limit>,
}

impl ResolvedDescriptor<'_> {
    /// True when it denies the request whatever the store says: over without the store, at a
    /// cost, and not in shadow mode.
    pub fn over_without_store(&self) -> bool {
        self.decider == Decider::Over && self.cost > 0 && self.report.as_ref().is_some_and(|r| !r.shadow)
    }

    /// The index of its store check, if the store decides it.
    pub fn check(&self) -> Option<usize> {
        match self.decider {
            Decider::Store(c) => Some(c),
            _ => None,
        }
    }
}

/// The `limit` override of each descriptor of `request`, in order (none where it has none);
/// the first malformed one refuses the request.
pub(crate) fn overrides(request: &RateLimitRequest) -> Result<Vec<Option<Override>>, Status> {
    request.descriptors.iter().map(|d| d.limit.as_ref().map(override_limit).transpose()).collect()
}

/// Resolves every descriptor of `request` in `snap` (with `overrides`, one per descriptor as
/// [`overrides`] gives them); the store checks they need are pushed to `checks`.
pub(crate) fn resolve<'a>(
    snap: &'a Snapshot,
    request: &'a RateLimitRequest,
    overrides: Vec<Option<Override>>,
    checks: &mut Vec<Check>,
) -> Vec<ResolvedDescriptor<'a>> {
    let domain = request.domain.as_str();
    let known_domain = snap.descriptors.domain(domain).is_some();
    let default_cost = u64::from(request.hits_addend.max(1));
    request
        .descriptors
        .iter()
        .zip(overrides)
        .map(|(d, o)| {
            let cost = descriptor_cost(d, default_cost);
            let entries: Vec<(&str, &str)> = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
            if let Some(o) = o {
                let path = d.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>().join(".");
                let (decider, report) = overridden(snap, domain, o, &entries, cost, checks);
                let label = (domain_label(known_domain, domain), path);
                return ResolvedDescriptor { decider, report: Some(report), cost, label, matched: None };
            }
            match snap.descriptors.lookup(domain, &entries) {
                None => ResolvedDescriptor {
                    decider: Decider::NoLimit,
                    report: None,
                    cost,
                    label: (domain_label(known_domain, domain), "(none)".to_string()),
                    matched: None,
                },
                Some(m) => {
                    let reported = d.hits_addend.as_ref().map(|h| h.value).filter(|_| !d.is_negative_hits);
                    configured(snap, domain, m, &entries, (cost, reported), checks)
                }
            }
        })
        .collect()
}

/// A descriptor that carries its own `limit`: decided by the fixed window of that limit,
/// keyed by all its entries.
fn overridden(
    snap: &Snapshot,
    domain: &str,
    (limit, policy): Override,
    entries: &[(&str, &str)],
    cost: u64,
    checks: &mut Vec<Check>,
) -> (Decider, Report) {
    let period = Unit::from_proto(limit.unit).map_or(NANOS_PER_SEC, |u| u.seconds() * NANOS_PER_SEC);
    let index = policy.and_then(|p| snap.policy_index(&p));
    let decider = match index {
        None => Decider::Over,
        Some(pi) => store_decider(snap, pi, snap.key(pi, domain, entries), cost, checks),
    };
    let report = Report {
        limit,
        period,
        window: policy.as_ref().map_or(period, quota_window),
        fixed: true,
        shadow: false,
        name: index.map_or_else(String::new, |i| snap.policies[i].name.clone()),
    };
    (decider, report)
}

/// A descriptor that matched a configured limit `m`: unlimited, over (a zero limit), or the
/// store's check of its policy, keyed by the values the limit counts under.
fn configured<'a>(
    snap: &Snapshot,
    domain: &str,
    m: Matched<'a>,
    entries: &[(&str, &str)],
    (cost, reported): (u64, Option<u64>),
    checks: &mut Vec<Check>,
) -> ResolvedDescriptor<'a> {
    // A `stream_done` limit is charged only by reports; asked without one, it checks at no cost.
    let usage = m.limit.stream_done && reported.is_some();
    let cost = match (m.limit.stream_done, reported) {
        (true, Some(hits)) => hits,
        (true, None) => 0,
        (false, _) => cost,
    };
    let rate = &m.limit.rate;
    let limit = PbLimit {
        name: rate.name.clone(),
        requests_per_unit: rate.requests_per_unit,
        unit: rate.unit.to_proto() as i32,
    };
    let mut report = Report {
        limit,
        period: rate.period,
        window: rate.period,
        fixed: true,
        shadow: m.limit.shadow,
        name: String::new(),
    };
    let decider = match (rate.rule, snap.limit_policy[m.index]) {
        (Rule::Unlimited, _) => Decider::Unlimited,
        (Rule::Policy(p), Some(pi)) => {
            report.fixed = p.kind() == AlgorithmKind::FixedWindow;
            report.window = quota_window(&p);
            report.name = snap.policies[pi].name.clone();
            let counted: Vec<(&str, &str)> = entries.iter().zip(&m.values).map(|(&(k, _), &v)| (k, v)).collect();
            let key = snap.key(pi, domain, &counted);
            if usage {
                Decider::Usage(Check { policy: pi, key, cost })
            } else {
                store_decider(snap, pi, key, cost, checks)
            }
        }
        _ => Decider::Over,
    };
    ResolvedDescriptor {
        decider,
        report: (!matches!(rate.rule, Rule::Unlimited)).then_some(report),
        cost,
        label: (domain.to_string(), m.metric),
        matched: Some(m.limit),
    }
}

/// `replaces`: a limit named by another matched limit is dropped from this request.
pub(crate) fn apply_replaces(descriptors: &mut [ResolvedDescriptor<'_>]) {
    let replaced: HashSet<&str> =
        descriptors.iter().filter_map(|d| d.matched).flat_map(|l| l.rate.replaces.iter().map(String::as_str)).collect();
    for d in descriptors {
        if let Some(l) = d.matched
            && !l.rate.name.is_empty()
            && replaced.contains(l.rate.name.as_str())
        {
            d.decider = Decider::NoLimit;
            d.report = None;
        }
    }
}

/// The decider of a check of policy `pi`: over the limit when the cost exceeds what the policy
/// can ever admit (as envoyproxy/ratelimit answers it), else a check for the store.
fn store_decider(snap: &Snapshot, pi: usize, key: KeyHash, cost: u64, checks: &mut Vec<Check>) -> Decider {
    if snap.policies[pi].policy.check_charge(cost).is_err() {
        return Decider::Over;
    }
    checks.push(Check { policy: pi, key, cost });
    Decider::Store(checks.len() - 1)
}

/// A descriptor's cost: its own `hits_addend` (0 checks without charging), else the request's,
/// where 0 means 1 (the protocol cannot tell 0 from unset).
fn descriptor_cost(d: &RateLimitDescriptor, default: u64) -> u64 {
    if d.is_negative_hits {
        // Refunds are not supported: a negative descriptor is checked, never charged.
        return 0;
    }
    d.hits_addend.as_ref().map_or(default, |h| h.value)
}

/// The `current_limit` and policy of a `limit` override (a fixed window of the unit; none for
/// `requests_per_unit: 0`).
fn override_limit(o: &RateLimitOverride) -> Result<Override, Status> {
    let unit = Unit::from_proto(o.unit).ok_or_else(|| Status::invalid_argument("limit override has no unit"))?;
    let limit = PbLimit { name: String::new(), requests_per_unit: o.requests_per_unit, unit: unit.to_proto() as i32 };
    if o.requests_per_unit == 0 {
        return Ok((limit, None));
    }
    let p = policy(AlgorithmKind::FixedWindow, u64::from(o.requests_per_unit), unit.seconds() * NANOS_PER_SEC, None)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((limit, Some(p)))
}

fn domain_label(known: bool, domain: &str) -> String {
    if known { domain.to_string() } else { "(unknown)".to_string() }
}
