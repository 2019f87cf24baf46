//! Values a configuration takes when it does not say, and bounds it must stay within: shared
//! by the file's validation and by the faces built without a file (the tower layer, the
//! default service).

/// Default listen address of a config without `server.listen`.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";

/// The prefix IPv6 clients are grouped by when nothing sets it (`server.ipv6_prefix`, the tower
/// layer, the default service, the rate-limit service): a /56 is what one subscriber is commonly
/// delegated, so one household or server is one client however many addresses it rotates through.
///
/// ```
/// let cfg = sluice_config::parse("s.toml", "").unwrap();
/// assert_eq!(cfg.server.ipv6_prefix, sluice_config::DEFAULT_IPV6_PREFIX);
/// assert_eq!(sluice_config::DEFAULT_IPV6_PREFIX, 56);
/// ```
pub const DEFAULT_IPV6_PREFIX: u8 = 56;

/// The largest sliding-log limit: its state holds one timestamp per admitted unit of cost.
pub const MAX_SLIDING_LOG_LIMIT: u64 = 100_000;

/// How long a concurrency slot is held at most (`lease`): a request still running then stops
/// counting, and a slot an instance never gave back (killed mid-request) comes back.
pub const DEFAULT_LEASE: &str = "10m";
