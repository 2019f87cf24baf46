//! What an operator chooses: where Redis is, how long to wait, and what to do when it fails.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sluice_store::MemoryOptions;

use crate::error::RedisStoreError;

/// What a decision does when Redis cannot give one (an error, a timeout, or an open breaker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnError {
    /// Admit the request. Availability first: an outage lets all traffic through. The verdict is
    /// flagged ([`crate::Source::FailOpen`]) and counted, so callers know it was not a decision.
    FailOpen,
    /// Refuse to decide: [`sluice_store::StoreError::Unavailable`] or `Timeout`, which the
    /// gateway answers with 503 and a `Retry-After` (the limiter is unavailable, not the client's
    /// quota spent). Protection first: an outage stops the protected traffic.
    FailClosed,
    /// Decide with an in-memory store of the same policies in this process. Limits hold per
    /// instance instead of globally (N instances admit up to N times a limit), and the local state
    /// starts empty when the fallback starts.
    Local,
}

impl OnError {
    /// The configuration spelling: `fail-open`, `fail-closed` or `local`.
    pub fn as_str(&self) -> &'static str {
        match self {
            OnError::FailOpen => "fail-open",
            OnError::FailClosed => "fail-closed",
            OnError::Local => "local",
        }
    }
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnError {
    type Err = RedisStoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail-open" => Ok(OnError::FailOpen),
            "fail-closed" => Ok(OnError::FailClosed),
            "local" => Ok(OnError::Local),
            other => Err(RedisStoreError::BadOnError(other.to_string())),
        }
    }
}

/// The circuit breaker: after `failures_to_open` consecutive failed calls it opens, and for
/// `cool_down` every decision takes the failure path at once, without calling Redis. Then one
/// call probes Redis (the others still take the failure path); its success closes the breaker,
/// its failure opens it for another `cool_down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerOptions {
    /// Consecutive failures that open the breaker (at least 1).
    pub failures_to_open: u32,
    /// How long the breaker stays open before a probe.
    pub cool_down: Duration,
}

impl Default for BreakerOptions {
    /// 3 failures, 1 s.
    fn default() -> Self {
        Self { failures_to_open: 3, cool_down: Duration::from_secs(1) }
    }
}

/// Everything [`crate::RedisStore::new`] needs besides the policies.
///
/// ```
/// use std::time::Duration;
/// use sluice_redis::{OnError, RedisOptions};
/// let mut o = RedisOptions::single("redis://127.0.0.1:6379", "fail-closed".parse().unwrap());
/// o.timeout = Duration::from_millis(50);
/// assert_eq!(o.on_error, OnError::FailClosed);
/// assert!(o.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// One URL (`redis://host:port/db`, `rediss://` for TLS is not enabled) for a single node,
    /// the seed nodes of a Cluster, or the Sentinels of [`RedisOptions::sentinel`].
    pub urls: Vec<String>,
    /// True for Redis Cluster.
    pub cluster: bool,
    /// The name of the primary (Sentinel's `master`) that the Sentinels at `urls` watch: the
    /// store decides on the primary they name and follows a failover to the next one. The URLs'
    /// user, password and database are the primary's (a Sentinel that asks for a password is
    /// given the same). `None`: `urls` are Redis itself.
    pub sentinel: Option<String>,
    /// What a decision does when Redis fails.
    pub on_error: OnError,
    /// The bound on every call to Redis, connecting included.
    pub timeout: Duration,
    /// The first part of every stored key (`prefix:policy:fingerprint:{hash}`).
    pub key_prefix: String,
    /// The circuit breaker.
    pub breaker: BreakerOptions,
    /// Entries of the local deny cache (0 turns it off).
    pub deny_cache_entries: usize,
    /// The in-memory store used by [`OnError::Local`].
    pub local: MemoryOptions,
    /// Added to every key's expiry when the caller passes its own time (`at: Some(..)`): Redis
    /// expires keys on its own clock, which does not follow a caller's simulated time.
    pub explicit_time_grace: Duration,
}

impl RedisOptions {
    /// A single Redis node, failing as `on_error` says (there is no default: admitting
    /// everything and refusing everything are both a choice to make), with the other defaults:
    /// 50 ms, prefix `sluice`.
    pub fn single(url: impl Into<String>, on_error: OnError) -> Self {
        Self::with_urls(vec![url.into()], false, on_error)
    }

    /// A Redis Cluster reached through these seed nodes, failing as `on_error` says, with the
    /// same defaults.
    pub fn cluster(urls: impl IntoIterator<Item = impl Into<String>>, on_error: OnError) -> Self {
        Self::with_urls(urls.into_iter().map(Into::into).collect(), true, on_error)
    }

    /// The primary named `master` of the Sentinels at `urls` (`redis://host:26379`, their user,
    /// password and database those of the primary), failing as `on_error` says, with the same
    /// defaults.
    pub fn sentinel(
        master: impl Into<String>,
        urls: impl IntoIterator<Item = impl Into<String>>,
        on_error: OnError,
    ) -> Self {
        let mut options = Self::with_urls(urls.into_iter().map(Into::into).collect(), false, on_error);
        options.sentinel = Some(master.into());
        options
    }

    fn with_urls(urls: Vec<String>, cluster: bool, on_error: OnError) -> Self {
        Self {
            urls,
            cluster,
            sentinel: None,
            on_error,
            timeout: Duration::from_millis(50),
            key_prefix: "sluice".to_string(),
            breaker: BreakerOptions::default(),
            deny_cache_entries: 100_000,
            local: MemoryOptions::default(),
            explicit_time_grace: Duration::from_secs(600),
        }
    }

    /// Checks the options without connecting anywhere.
    pub fn validate(&self) -> Result<(), RedisStoreError> {
        if self.urls.is_empty() {
            return Err(RedisStoreError::NoUrl);
        }
        if !self.cluster && self.sentinel.is_none() && self.urls.len() > 1 {
            return Err(RedisStoreError::SeveralUrls(self.urls.len()));
        }
        if let Some(master) = &self.sentinel {
            if self.cluster {
                return Err(RedisStoreError::SentinelAndCluster);
            }
            if master.is_empty() || master.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err(RedisStoreError::BadMasterName(master.clone()));
            }
        }
        if self.timeout.is_zero() {
            return Err(RedisStoreError::ZeroTimeout);
        }
        if self.breaker.failures_to_open == 0 {
            return Err(RedisStoreError::ZeroBreakerFailures);
        }
        crate::plan::check_name("key_prefix", &self.key_prefix)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_error_round_trips_its_configuration_spelling() {
        for mode in [OnError::FailOpen, OnError::FailClosed, OnError::Local] {
            assert_eq!(mode.as_str().parse::<OnError>(), Ok(mode));
        }
        assert_eq!("fail_open".parse::<OnError>(), Err(RedisStoreError::BadOnError("fail_open".into())));
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let ok = RedisOptions::single("redis://127.0.0.1:6379", OnError::FailClosed);
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(RedisOptions { urls: vec![], ..ok.clone() }.validate(), Err(RedisStoreError::NoUrl));
        let two = vec!["redis://a".to_string(), "redis://b".to_string()];
        assert_eq!(RedisOptions { urls: two.clone(), ..ok.clone() }.validate(), Err(RedisStoreError::SeveralUrls(2)));
        assert_eq!(RedisOptions::cluster(two, OnError::FailClosed).validate(), Ok(()));
        assert_eq!(
            RedisOptions { timeout: Duration::ZERO, ..ok.clone() }.validate(),
            Err(RedisStoreError::ZeroTimeout)
        );
        let no_breaker = BreakerOptions { failures_to_open: 0, ..BreakerOptions::default() };
        assert_eq!(
            RedisOptions { breaker: no_breaker, ..ok.clone() }.validate(),
            Err(RedisStoreError::ZeroBreakerFailures)
        );
        let sentinels = RedisOptions::sentinel("mymaster", ["redis://a", "redis://b"], OnError::FailClosed);
        assert_eq!(sentinels.validate(), Ok(()));
        assert_eq!(
            RedisOptions { cluster: true, ..sentinels.clone() }.validate(),
            Err(RedisStoreError::SentinelAndCluster)
        );
        let unnamed = RedisOptions { sentinel: Some("my master".into()), ..sentinels };
        assert_eq!(unnamed.validate(), Err(RedisStoreError::BadMasterName("my master".into())));
        let braces = RedisOptions { key_prefix: "a{b}".into(), ..ok };
        assert!(matches!(braces.validate(), Err(RedisStoreError::BadName { field: "key_prefix", .. })));
    }
}
