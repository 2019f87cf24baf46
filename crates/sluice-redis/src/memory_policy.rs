//! What Redis does when it reaches `maxmemory`, and whether that can loosen limits.
//!
//! Redis evicts keys to stay under `maxmemory` by its `maxmemory-policy`. The `allkeys-*`
//! policies may evict any key, and the `volatile-*` ones any key with an expiry set: every key
//! this store writes has one (it expires when its state is fresh again), so under either family
//! Redis may drop the state of a key that is still limited, which then starts over, fresh. Only
//! `noeviction` (Redis's default) never drops a key: once memory is full, writes fail with an
//! `OOM` error instead, so decisions fail and the store's [`crate::OnError`] applies (choose
//! `fail-closed` or `local` so that they never admit). Give sluice a Redis (or a database server
//! of its own) with `maxmemory-policy noeviction` and room for its keys.

/// True when Redis under `policy` may evict this store's keys, and so reset limits.
///
/// ```
/// use sluice_redis::policy_may_evict_limits;
/// assert!(!policy_may_evict_limits("noeviction"));
/// assert!(policy_may_evict_limits("allkeys-lru"));
/// assert!(policy_may_evict_limits("volatile-ttl")); // every sluice key has an expiry
/// ```
pub fn policy_may_evict_limits(policy: &str) -> bool {
    !policy.eq_ignore_ascii_case("noeviction")
}

/// The warning to log at start for `policy`, or `None` when it never evicts.
pub fn eviction_warning(policy: &str) -> Option<String> {
    policy_may_evict_limits(policy).then(|| {
        format!(
            "Redis maxmemory-policy is `{policy}`: when Redis reaches maxmemory it may evict rate-limit keys \
             that are still limited, resetting their limits; set `maxmemory-policy noeviction` (writes then \
             fail when memory is full, and on_error decides: fail-closed or local never admit)"
        )
    })
}
