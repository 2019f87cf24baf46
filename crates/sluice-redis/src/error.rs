//! Why a Redis store could not be built.

use thiserror::Error;

/// Options or policies the Redis store cannot work with. Found at construction, before any
/// request: a running store never fails for these reasons.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RedisStoreError {
    /// No URL given.
    #[error("no Redis URL given")]
    NoUrl,
    /// Several URLs for a single node.
    #[error("{0} Redis URLs given for a single node: set cluster = true or give one URL")]
    SeveralUrls(usize),
    /// A URL the Redis client does not accept.
    #[error("bad Redis URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// The client's complaint.
        reason: String,
    },
    /// Sentinel settings for a Redis Cluster, which has no Sentinel.
    #[error("Redis Cluster has no Sentinel: give the Sentinels or set cluster = true, not both")]
    SentinelAndCluster,
    /// A Sentinel master name that is empty or holds spaces or control characters.
    #[error("Sentinel master name {0:?}: give the name the Sentinels monitor it by (no spaces)")]
    BadMasterName(String),
    /// `on_error` spelled wrong.
    #[error("on_error must be fail-open, fail-closed or local (got {0:?})")]
    BadOnError(String),
    /// A zero timeout.
    #[error("timeout must be longer than zero")]
    ZeroTimeout,
    /// A breaker that would never close.
    #[error("breaker failures_to_open must be at least 1")]
    ZeroBreakerFailures,
    /// A name that cannot go into a Redis key.
    #[error("{field} {value:?} cannot be part of a Redis key: use 1 to 128 ASCII letters, digits and -_./")]
    BadName {
        /// Which name (`key_prefix`, `policy name`).
        field: &'static str,
        /// The name given.
        value: String,
    },
    /// Two policies with one name: their keys would collide.
    #[error("two policies are named {0:?}")]
    DuplicatePolicy(String),
    /// Parameters the store cannot represent exactly in microseconds, or too large for the
    /// script's arithmetic (Lua numbers are doubles, exact below 2^53).
    #[error("policy {policy:?}: {reason}")]
    Unsupported {
        /// The policy's name.
        policy: String,
        /// What is wrong and the bound.
        reason: String,
    },
}
