//! # sluice-redis
//!
//! The Redis store of sluice: rate-limit state shared by every instance pointed at one Redis or
//! one Redis Cluster, behind the same [`sluice_store::Store`] trait as the in-memory store.
//!
//! - **One round trip per request.** All of a request's checks go into one `EVALSHA` of one Lua
//!   script (`scripts/decide.lua`), which reads every key, decides every check and charges them
//!   all only if all admit: atomic, all or nothing. On a Cluster, keys are hash-tagged by key
//!   hash; checks whose keys fall in different slots are decided per slot, concurrently, one call
//!   per slot. A request is admitted only if every slot group admits; a group that admitted was
//!   charged even if another denied, so a Cluster can over-count a denied request, never admit
//!   beyond a limit (errors go the strict way). `NOSCRIPT` (a restart, `SCRIPT FLUSH`) is answered
//!   by sending the script again.
//! - **Settlements in one more round trip.** [`RedisStore::settle_charges`] (the store's
//!   [`sluice_store::Store::settle`]) gives a request's charges back, in part or whole, or
//!   charges what it used beyond its reservation, with one call of a second script
//!   (`scripts/settle.lua`; both scripts begin with `scripts/common.lua`) per slot group,
//!   by the core's `refund` and `overrun` rules in microseconds. A verdict names the time Redis
//!   decided at (on a Cluster, each slot's node's own time, kept per check), which is what a
//!   settlement names.
//! - **Holds for quota leases.** [`RedisStore::hold_at`] and [`RedisStore::release_at`] (the
//!   store's [`sluice_store::Store::hold`] and [`sluice_store::Store::release`]) set a policing
//!   bucket's units apart for a lease and give them back, with a third script
//!   (`scripts/hold.lua`), one call on the key's slot; the decision and settlement scripts see
//!   the units held. A key without holds keeps its state as a single number; the layout of one
//!   with holds is in `scripts/common.lua`.
//! - **Exactly the core's decisions.** The script implements the five algorithms of sluice-core
//!   rule for rule, in microseconds (Lua numbers are doubles: nanoseconds since the epoch do not
//!   fit in 2^53, microseconds do for 285 years). Time comes from the Redis server (`TIME`), so
//!   instance clocks do not matter; `at: Some(t)` passes an explicit time instead (tests, the
//!   conformance suite), which must be a whole number of microseconds. Windows must be whole
//!   microseconds; bucket intervals (1 / rate) are rounded up to whole microseconds, so Redis
//!   decides exactly as the core for every policy whose interval is a whole number of microseconds
//!   (rates like 1, 2, 4, 5, 8, 10, 1000 per second) and, for others, as the core would with the
//!   slightly slower rate. Limits are bounded by 2^40 and windows and bucket spans by 2^50 us
//!   (35 years), checked when the store is built; products that could exceed 2^53 (the sliding
//!   window's weighted count) are computed exactly by long multiplication.
//! - **Bounded memory.** Every key expires when its state would be fresh again, so Redis holds
//!   only active keys; the sliding log holds at most `limit` entries per key. Keys are
//!   `prefix:policy:fingerprint:{hash}`: the fingerprint changes with the policy's algorithm or
//!   parameters, so a reload never reads state written under others, and the hash is the keyed
//!   [`sluice_store::KeyHash`]: no raw key reaches Redis. A bucket key with holds has a second
//!   key, its name and `:h` (the same `{hash}` tag: the same Cluster slot), which lives as long
//!   as the state does.
//! - **Redis must not evict.** Under a `maxmemory-policy` other than `noeviction` (the Redis
//!   default), Redis may evict keys that are still limited, which resets their limits (every
//!   key has an expiry, so `volatile-*` policies pick them too). [`RedisStore::eviction_warning`]
//!   reads the policy, for a warning at start; see [`policy_may_evict_limits`].
//! - **Failure modes** ([`OnError`]): `fail-open` admits and flags the verdict
//!   ([`Source::FailOpen`]), `fail-closed` returns [`sluice_store::StoreError::Unavailable`] or
//!   `Timeout` (503 with `Retry-After` at the gateway), `local` decides with an in-memory store of
//!   the same policies. Every call is bounded by a timeout, and a circuit breaker opens after
//!   consecutive failures: while open, decisions take the failure path at once, without waiting;
//!   after a cool-down one probe tries Redis and closes the breaker on success.
//! - **A deny cache.** When Redis denies a key until some time, later requests of at least that
//!   cost for that key are denied locally until then, without calling Redis: denied traffic under
//!   attack costs Redis nothing. It only ever denies, and only what Redis would deny. A cached
//!   denial repeats the `remaining` Redis gave and counts `retry_after` down; a request's other
//!   checks, not consulted, are reported as not denying with nothing remaining. Only a key's
//!   first check in a request is cached (a later one was decided after charges that a denied
//!   request never made). [`Source::DenyCache`] marks such verdicts; they say nothing of whether
//!   Redis answers now (`Reported::answered` is false), so a cached denial never ends an outage.
//! - **Redis Sentinel** ([`RedisOptions::sentinel`]): the Sentinels name the primary (a task
//!   per store asks them all every 500 ms and after a failed call; the highest configuration
//!   epoch wins), and the store follows a failover to the promoted replica, on the same
//!   connections as a single node. Writes the replica had not received are lost in a failover
//!   (Redis replicates asynchronously): each is a charge forgotten, in the lenient direction.
//! - **Reloads keep what the process knows.** [`RedisStore::rebuild`] makes a store for new
//!   policies that shares the deny cache, the breaker and the counters (and the `local`
//!   fallback's unchanged tables): a key denied before an outage stays denied after a reload
//!   during it.
//!
//! ```
//! use std::time::Duration;
//! use sluice_core::{Policy, TokenBucket};
//! use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
//! use sluice_store::{Check, KeyHasher, NamedPolicy};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policies = vec![NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(2, 1.0)?) }];
//! // Port 1: nothing listens there, so this example shows the failure path.
//! let mut options = RedisOptions::single("redis://127.0.0.1:1", OnError::Local);
//! options.timeout = Duration::from_millis(50);
//! let store = RedisStore::new(policies, options)?;
//!
//! let key = KeyHasher::from_secret(b"shared by every instance").hash(&[b"ip", b"203.0.113.7"]);
//! let request = [Check { policy: 0, key, cost: 1 }];
//! for expect_admitted in [true, true, false] {
//!     let outcome = store.decide_detailed(&request, None).await?;
//!     // Redis is unreachable: the in-memory fallback decides, with the same policy.
//!     assert_eq!(outcome.source, Source::Local);
//!     assert_eq!(outcome.verdict.allowed, expect_admitted);
//! }
//! assert_eq!(store.stats().local, 3);
//! # Ok(()) }
//! ```

mod breaker;
mod connection;
mod deny_cache;
mod error;
mod join;
mod lean;
mod memory_policy;
mod options;
mod plan;
mod resp;
mod script;
mod sentinel;
mod settle;
mod slot;
mod stats;
mod store;

pub use breaker::BreakerState;
pub use error::RedisStoreError;
pub use memory_policy::{eviction_warning, policy_may_evict_limits};
pub use options::{BreakerOptions, OnError, RedisOptions};
pub use plan::{MAX_LIMIT, MAX_SPAN_MICROS};
pub use script::{HOLD_SOURCE, SCRIPT_SOURCE, SETTLE_SOURCE, hold_sha, script_sha, settle_sha};
pub use slot::key_slot;
pub use stats::RedisStats;
pub use store::{RedisStore, Source, SourcedVerdict};
