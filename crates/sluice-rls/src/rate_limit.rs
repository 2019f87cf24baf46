//! A descriptor's `rate_limit`: envoyproxy/ratelimit's fields, and sluice's algorithms on top.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use sluice_core::{
    AlgorithmKind, FixedWindow, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, ParamError, Policy, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// A time unit of envoyproxy/ratelimit (a month is 30 days, a year 365, as there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// `second`
    Second,
    /// `minute`
    Minute,
    /// `hour`
    Hour,
    /// `day`
    Day,
    /// `week`
    Week,
    /// `month` (30 days)
    Month,
    /// `year` (365 days)
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day, Unit::Week, Unit::Month, Unit::Year];

    /// The unit's length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The unit of a configuration name, in any letter case (`second`, `MINUTE`, ...).
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.name().eq_ignore_ascii_case(name))
    }

    /// The configuration name.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit as the protocol numbers it.
    pub fn to_proto(self) -> PbUnit {
        match self {
            Unit::Second => PbUnit::Second,
            Unit::Minute => PbUnit::Minute,
            Unit::Hour => PbUnit::Hour,
            Unit::Day => PbUnit::Day,
            Unit::Week => PbUnit::Week,
            Unit::Month => PbUnit::Month,
            Unit::Year => PbUnit::Year,
        }
    }

    /// The unit the protocol numbers `n` (`RateLimitResponse.RateLimit.Unit`, which
    /// `envoy.type.v3.RateLimitUnit` of overrides numbers alike); none for UNKNOWN.
    pub fn from_proto(n: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.to_proto() as i32 == n)
    }

    /// The longest unit not longer than `period` (a second at least): what a response reports
    /// for a period that is no whole unit.
    pub fn within(period: Nanos) -> Unit {
        Unit::ALL.into_iter().rev().find(|u| u.seconds() * NANOS_PER_SEC <= period).unwrap_or(Unit::Second)
    }
}

/// What a limit does: the store decides it, or it is answered without the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// `unlimited: true`: OK, `limit_remaining` 4294967295, the store never asked.
    Unlimited,
    /// `requests_per_unit: 0`: every request that costs something is over the limit.
    Zero,
    /// A policy of the store.
    Policy(Policy),
}

/// A descriptor's `rate_limit` block, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// `requests_per_unit`, as responses report it.
    pub requests_per_unit: u32,
    /// The unit responses report (see [`Unit::within`] for a `window`).
    pub unit: Unit,
    /// The period the limit counts over: `unit` x `unit_multiplier`, or `window`.
    pub period: Nanos,
    /// What deciding it takes.
    pub rule: Rule,
    /// `name`, which `replaces` of other limits refer to.
    pub name: String,
    /// `replaces`: names of the limits this one drops from a request it applies to.
    pub replaces: Vec<String>,
}

/// Builds the policy of `algorithm` for `requests` per `period`; the buckets take `burst` as
/// their capacity (`requests` when not given) and refill `requests` per `period`.
///
/// ```
/// use sluice_core::{AlgorithmKind, NANOS_PER_SEC};
/// use sluice_rls::rate_limit::policy;
/// let p = policy(AlgorithmKind::TokenBucket, 10, 60 * NANOS_PER_SEC, Some(3)).unwrap();
/// assert_eq!(p.limit(), 3);
/// assert_eq!(p.window(), 18 * NANOS_PER_SEC); // 3 tokens at 10 a minute
/// ```
pub fn policy(
    algorithm: AlgorithmKind,
    requests: u64,
    period: Nanos,
    burst: Option<u64>,
) -> Result<Policy, ParamError> {
    let per_second = requests as f64 * NANOS_PER_SEC as f64 / period as f64;
    Ok(match algorithm {
        AlgorithmKind::FixedWindow => Policy::from(FixedWindow::new(requests, period)?),
        AlgorithmKind::SlidingLog => Policy::from(SlidingLog::new(requests, period)?),
        AlgorithmKind::SlidingWindow => Policy::from(SlidingWindow::new(requests, period)?),
        AlgorithmKind::TokenBucket => Policy::from(TokenBucket::new(burst.unwrap_or(requests), per_second)?),
        AlgorithmKind::LeakyBucket => {
            Policy::from(LeakyBucket::new(per_second, burst.unwrap_or(requests), LeakMode::Police)?)
        }
    })
}
