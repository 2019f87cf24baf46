//! The contract every store meets: decide a request's limits together.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sluice_core::{CostError, Decision, Nanos, Policy};
use thiserror::Error;

use crate::key::KeyHash;

/// A policy with the name configuration gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPolicy {
    /// The policy's name (`per-ip`, `per-account`, ...).
    pub name: String,
    /// The validated algorithm and parameters.
    pub policy: Policy,
}

/// One limit to apply to a request: which policy (an index into the store's policies), which
/// key, and how much the request costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// Index of the policy in the list the store was built with.
    pub policy: usize,
    /// The hashed key.
    pub key: KeyHash,
    /// The request's cost under this policy.
    pub cost: u64,
}

/// The answer to a request's checks, decided together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True when every check admits; then every check was charged. When false, none was
    /// (except where a store documents otherwise, and then only in the strict direction).
    pub allowed: bool,
    /// One decision per check, in the order of the checks.
    pub decisions: Vec<Decision>,
    /// When the store decided, on its clock (or the explicit time it was given): the time a
    /// settlement of these charges names ([`Settle::charged_at`]). 0 when nothing was decided.
    pub at: Nanos,
    /// Per check, when the store decided its checks at different times (a Redis Cluster: each
    /// slot's node reads its own clock); empty when every check was decided at `at`.
    pub at_each: Vec<Nanos>,
}

impl Verdict {
    /// What a failure mode that admits without deciding (fail-open) answers: every check allowed,
    /// as if it had been charged its cost from a full limit; `limit` gives a policy's limit.
    ///
    /// ```
    /// use sluice_store::{Check, KeyHash, Verdict};
    /// let checks = [Check { policy: 0, key: KeyHash([1; 16]), cost: 2 }];
    /// let v = Verdict::admitted_undecided(&checks, |_| 10);
    /// assert!(v.allowed && v.decisions[0].remaining == 8 && v.decisions[0].retry_after == 0);
    /// ```
    pub fn admitted_undecided(checks: &[Check], limit: impl Fn(usize) -> u64) -> Verdict {
        let decisions = checks
            .iter()
            .map(|c| {
                let limit = limit(c.policy);
                Decision {
                    allowed: true,
                    limit,
                    remaining: limit.saturating_sub(c.cost),
                    reset_after: 0,
                    retry_after: 0,
                    delay: 0,
                }
            })
            .collect();
        Verdict { allowed: true, decisions, at: 0, at_each: Vec::new() }
    }

    /// A verdict whose every check was decided at `at`.
    pub fn at(allowed: bool, decisions: Vec<Decision>, at: Nanos) -> Verdict {
        Verdict { allowed, decisions, at, at_each: Vec::new() }
    }

    /// When check `index` was decided: what a settlement of its charge names.
    pub fn charged_at(&self, index: usize) -> Nanos {
        self.at_each.get(index).copied().unwrap_or(self.at)
    }

    /// Index of the decision closest to denying (see [`Decision::tighter`]): the limit that
    /// denied, or the one to describe in response headers. `None` when there were no checks.
    pub fn tightest(&self) -> Option<usize> {
        (0..self.decisions.len())
            .reduce(|a, b| if self.decisions[a].tighter(self.decisions[b]) == self.decisions[a] { a } else { b })
    }
}

/// What became of one charge a store admitted: the check as it was charged (its `cost` is what
/// was reserved), when, and what the request really used. `actual` below the cost gives the
/// difference back ([`sluice_core::Algorithm::refund`]); above it, charges the rest
/// ([`sluice_core::Algorithm::overrun`]); 0 is a refund of the whole charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// The check as decided: policy, key, and the cost it was charged.
    pub check: Check,
    /// When it was charged ([`Verdict::charged_at`]).
    pub charged_at: Nanos,
    /// What the request really used.
    pub actual: u64,
}

/// What a store answered when asked to set a bucket's units apart for a lease
/// ([`Store::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// Whether the units were set apart (the bucket had room for them beside every hold).
    pub granted: bool,
    /// The store's name for the hold, which [`Store::release`] names (0 when refused).
    pub id: u64,
    /// The bucket's decision at the units: its capacity, what it leaves to others beside every
    /// hold, and, when refused, how long until the units could be there.
    pub decision: Decision,
    /// When the store decided, on its clock.
    pub at: Nanos,
}

/// What an instance's quota leases did, read when metrics are scraped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseStats {
    /// Requests admitted from leases, without the shared store.
    pub admitted_locally: u64,
    /// Calls made to the shared store: decisions, leases taken, units given back.
    pub store_calls: u64,
    /// Units held now, unspent, by live leases.
    pub held: u64,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StoreError {
    /// A check whose cost its policy can never admit.
    #[error("check {index}: {source}")]
    Cost {
        /// Index of the offending check.
        index: usize,
        /// The cost and the capacity.
        source: CostError,
    },
    /// A check naming a policy the store does not have.
    #[error("check {index}: no policy with index {policy}")]
    UnknownPolicy {
        /// Index of the offending check.
        index: usize,
        /// The policy index it named.
        policy: usize,
    },
    /// The store is full and configured to refuse new keys.
    #[error("store is full ({max_keys} keys) and refuses new keys")]
    Full {
        /// The configured bound.
        max_keys: usize,
    },
    /// The store did not answer in time.
    #[error("store timed out after {0} ms")]
    Timeout(u64),
    /// The store could not be reached or answered with an error.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store does not do what it was asked (a store that cannot settle charges).
    #[error("the {store} store cannot {what}")]
    Unsupported {
        /// The store's kind.
        store: &'static str,
        /// What it was asked.
        what: &'static str,
    },
}

impl StoreError {
    /// A short name for the kind of error, for metrics labels and log fields.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Cost { .. } => "cost",
            StoreError::UnknownPolicy { .. } => "unknown_policy",
            StoreError::Full { .. } => "full",
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Unsupported { .. } => "unsupported",
        }
    }
}

/// Keys held by one policy of a store that keeps keys itself (the memory store), for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStats {
    /// The policy's name.
    pub policy: String,
    /// Keys held now.
    pub keys: u64,
    /// Entries dropped to make room that equalled a fresh state (no decision changed).
    pub evicted_fresh: u64,
    /// Live entries evicted as least recently used.
    pub evicted_lru: u64,
}

/// Rejects a request that no store may decide: a check naming a policy not in `policies`
/// ([`StoreError::UnknownPolicy`]) or costing more than its policy's limit can ever admit
/// ([`StoreError::Cost`]), reported for the first such check. Every store calls it before it
/// reads or charges anything, so a bad request charges nothing, whichever store decides it.
///
/// ```
/// use sluice_core::{FixedWindow, Policy, NANOS_PER_SEC};
/// use sluice_store::{Check, KeyHash, NamedPolicy, StoreError, validate_checks};
///
/// let policies = [NamedPolicy { name: "a".into(), policy: Policy::from(FixedWindow::new(2, NANOS_PER_SEC).unwrap()) }];
/// let check = |policy, cost| Check { policy, key: KeyHash([1; 16]), cost };
/// assert_eq!(validate_checks(&policies, &[check(0, 2)]), Ok(()));
/// assert!(matches!(validate_checks(&policies, &[check(0, 1), check(0, 3)]), Err(StoreError::Cost { index: 1, .. })));
/// assert_eq!(validate_checks(&policies, &[check(1, 1)]), Err(StoreError::UnknownPolicy { index: 0, policy: 1 }));
/// ```
pub fn validate_checks(policies: &[NamedPolicy], checks: &[Check]) -> Result<(), StoreError> {
    for (index, c) in checks.iter().enumerate() {
        let Some(p) = policies.get(c.policy) else {
            return Err(StoreError::UnknownPolicy { index, policy: c.policy });
        };
        p.policy.check_charge(c.cost).map_err(|source| StoreError::Cost { index, source })?;
    }
    Ok(())
}

/// Rejects settlements no store may apply: a check naming a policy not in `policies`, or a
/// reserved cost above its policy's limit (no check could have charged it). Every store calls it
/// before it changes anything.
pub fn validate_settles(policies: &[NamedPolicy], settles: &[Settle]) -> Result<(), StoreError> {
    for (index, s) in settles.iter().enumerate() {
        let Some(p) = policies.get(s.check.policy) else {
            return Err(StoreError::UnknownPolicy { index, policy: s.check.policy });
        };
        p.policy.check_charge(s.check.cost).map_err(|source| StoreError::Cost { index, source })?;
    }
    Ok(())
}

/// A boxed future returned by [`Store::settle`].
pub type SettleFuture<'a> = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>;

/// A boxed future returned by [`Store::hold`].
pub type HoldFuture<'a> = Pin<Box<dyn Future<Output = Result<Hold, StoreError>> + Send + 'a>>;

/// A boxed future returned by [`Store::decide`].
pub type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<Verdict, StoreError>> + Send + 'a>>;

/// How a verdict was reached when the store could not decide and its failure mode answered
/// instead: which mode, and the error it answered for.
#[derive(Debug, Clone, PartialEq)]
pub struct Degraded {
    /// The failure mode that gave the verdict: `fail-open` (admitted without a decision) or
    /// `local` (decided by an in-process fallback).
    pub mode: &'static str,
    /// Why the store could not decide.
    pub error: StoreError,
}

/// A verdict, and whether a failure mode gave it ([`Store::decide_reported`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The verdict, as [`Store::decide`] returns it.
    pub verdict: Verdict,
    /// `Some` when the store could not decide and its failure mode answered; `None` for a
    /// verdict the store reached itself.
    pub degraded: Option<Degraded>,
    /// True when the store itself decided this request just now (always, for a store without a
    /// cache or a failure mode). False when a failure mode answered (`degraded`), or when the
    /// verdict repeats an earlier denial held locally without asking the store (a deny cache):
    /// such a verdict says nothing of whether the store can decide now, so it must not be
    /// taken for the end of an outage.
    pub answered: bool,
}

/// A boxed future returned by [`Store::decide_reported`].
pub type ReportedFuture<'a> = Pin<Box<dyn Future<Output = Result<Reported, StoreError>> + Send + 'a>>;

/// Shared, atomic rate-limit state.
///
/// `decide` applies every check of one request together: the request is admitted only if every
/// check admits, and then it is charged to every check. `at` passes an explicit time (tests, the
/// simulator, the conformance suite); `None` uses the store's own clock.
pub trait Store: Send + Sync {
    /// Decides the checks of one request together.
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a>;

    /// The policies this store was built with, indexed as [`Check::policy`] expects.
    fn policies(&self) -> &[NamedPolicy];

    /// A short name for metrics and logs: `memory`, `redis`, ...
    fn kind(&self) -> &'static str;

    /// Decides the checks of one request as [`Store::decide`] would, at the same time, and
    /// charges nothing: would it be admitted now, and what would each check say. A peek of a
    /// shaped policy reports the delay the request would get. By default the store cannot
    /// ([`StoreError::Unsupported`]).
    fn peek<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        let _ = (checks, at);
        let store = self.kind();
        Box::pin(std::future::ready(Err(StoreError::Unsupported { store, what: "peek" })))
    }

    /// Per policy, the keys held and evictions so far (stores that hold keys themselves);
    /// empty by default. Read when metrics are scraped, never per request.
    fn key_stats(&self) -> Vec<KeyStats> {
        Vec::new()
    }

    /// True when other processes decide on the same state (Redis): they must then hash keys
    /// with the same secret, or each would keep its own buckets and the limit would be
    /// multiplied by the number of processes. False by default (an in-process store).
    fn shared(&self) -> bool {
        false
    }

    /// False when the store cannot decide and its failure mode does not allow serving anyway
    /// (a shared store unreachable under `fail-closed`); true by default.
    fn ready(&self) -> bool {
        true
    }

    /// Whether the store's circuit breaker is open; `None` when it has none.
    fn breaker_open(&self) -> Option<bool> {
        None
    }

    /// Requests denied from a local deny cache without asking the shared store; `None` when it
    /// has none.
    fn deny_cache_hits(&self) -> Option<u64> {
        None
    }

    /// What quota leases did ([`crate::LeasedStore`]); `None` for a store without them.
    fn lease_stats(&self) -> Option<LeaseStats> {
        None
    }

    /// Like [`Store::decide`], and says whether a failure mode gave the verdict: a store that
    /// absorbs its own errors (a shared store under `fail-open` or `local`) reports them here,
    /// so that callers count every error and tell such verdicts from decisions. The default,
    /// for stores without a failure mode, reports none.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice_core::{ManualClock, Policy, TokenBucket};
    /// use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, Store};
    /// let policy = NamedPolicy { name: "p".into(), policy: Policy::from(TokenBucket::new(1, 1.0).unwrap()) };
    /// let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(ManualClock::new(0)));
    /// let checks = [Check { policy: 0, key: KeyHash([1; 16]), cost: 1 }];
    /// let r = sluice_store::conformance::block_on(store.decide_reported(&checks, None)).unwrap();
    /// assert!(r.verdict.allowed);
    /// assert_eq!(r.degraded, None);
    /// assert!(r.answered);
    /// ```
    fn decide_reported<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> ReportedFuture<'a> {
        let decided = self.decide(checks, at);
        Box::pin(async move { decided.await.map(|verdict| Reported { verdict, degraded: None, answered: true }) })
    }

    /// [`Store::decide_reported`] at the store's own time, answered at once when the store
    /// needs nothing awaited (an in-process store); `None` when it must be awaited (a shared
    /// store: ask [`Store::decide_reported`]). The default is `None`. A store that answers here
    /// answers as `decide_reported` would: the caller may take either path.
    ///
    /// Why: a request of the in-process store is then decided without the boxed futures of
    /// `decide_reported` (two allocations, and their polls, on every request of every face).
    fn decide_at_once(&self, checks: &[Check]) -> Option<Result<Reported, StoreError>> {
        let _ = checks;
        None
    }

    /// Settles charges this store admitted (see [`Settle`]), all in one call; `at` as for
    /// [`Store::decide`]. Only charges the store itself decided: a verdict a failure mode gave
    /// (`fail-open` charged nothing; `local` charged another store) is never settled here. A
    /// charge is settled once: the store keeps no record of it. The default, for a store that
    /// cannot, is [`StoreError::Unsupported`]: the charges stay as they were, the strict
    /// direction.
    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<Nanos>) -> SettleFuture<'a> {
        let _ = (settles, at);
        let kind = self.kind();
        Box::pin(std::future::ready(Err(StoreError::Unsupported { store: kind, what: "settle charges" })))
    }

    /// [`Store::settle`] at the store's own time, done at once when the store needs nothing
    /// awaited (an in-process store), without the boxed future; `None` when it must be awaited.
    /// The default is `None`.
    fn settle_at_once(&self, settles: &[Settle]) -> Option<Result<(), StoreError>> {
        let _ = settles;
        None
    }

    /// The store's own time, when this process keeps it (the memory store's clock); `None` when
    /// another process does (Redis's), and a caller who must name a time uses its own.
    fn now(&self) -> Option<Nanos> {
        None
    }

    /// Sets `check.cost` units of a policing bucket (a token bucket, or a leaky bucket that
    /// polices) apart for a quota lease that lives `life` from now on the store's clock: held
    /// units are taken out of what every other decision of the key sees, and do not refill
    /// while held. Granted when the bucket has room for them beside every hold (`max(tat, now)
    /// + (units + held) x interval - now <= capacity x interval`). A hold not released by its end
    /// counts as wholly spent then (`tat = max(tat, end) + units x interval`): an instance
    /// that dies holding one under-admits, never over. The default, for a store that cannot,
    /// is [`StoreError::Unsupported`].
    ///
    /// Why not a charge, as a fixed window's lease is: a charge refills while the lease holds
    /// it, and a bucket that refilled beside units still unspent would admit them twice.
    fn hold<'a>(&'a self, check: &'a Check, life: Nanos) -> HoldFuture<'a> {
        let _ = (check, life);
        let kind = self.kind();
        Box::pin(std::future::ready(Err(StoreError::Unsupported { store: kind, what: "hold a bucket's units" })))
    }

    /// [`Store::release`] of hold `id` of `check`'s key, `spent` of it admitted, then
    /// [`Store::hold`] of `check.cost` units of the same key for `life`: what a lease that ran
    /// out does to take the next. One call where the store can (Redis: one script); the
    /// default makes the two.
    fn renew<'a>(&'a self, check: &'a Check, life: Nanos, id: u64, spent: u64) -> HoldFuture<'a> {
        Box::pin(async move {
            self.release(check, id, spent).await?;
            self.hold(check, life).await
        })
    }

    /// Ends hold `id` of `check.cost` units of `check`'s key, of which `spent` were admitted:
    /// the units leave the hold and the spent ones are charged now (`tat = max(tat, now) +
    /// spent x interval`). A hold that ended already (counted as spent) is left alone. The
    /// default, for a store that cannot, is [`StoreError::Unsupported`].
    fn release<'a>(&'a self, check: &'a Check, id: u64, spent: u64) -> SettleFuture<'a> {
        let _ = (check, id, spent);
        let kind = self.kind();
        Box::pin(std::future::ready(Err(StoreError::Unsupported { store: kind, what: "release a hold" })))
    }
}

impl<S: Store + ?Sized> Store for Arc<S> {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        (**self).decide(checks, at)
    }

    fn policies(&self) -> &[NamedPolicy] {
        (**self).policies()
    }

    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn key_stats(&self) -> Vec<KeyStats> {
        (**self).key_stats()
    }

    fn shared(&self) -> bool {
        (**self).shared()
    }

    fn ready(&self) -> bool {
        (**self).ready()
    }

    fn breaker_open(&self) -> Option<bool> {
        (**self).breaker_open()
    }

    fn deny_cache_hits(&self) -> Option<u64> {
        (**self).deny_cache_hits()
    }

    fn decide_reported<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> ReportedFuture<'a> {
        (**self).decide_reported(checks, at)
    }

    fn decide_at_once(&self, checks: &[Check]) -> Option<Result<Reported, StoreError>> {
        (**self).decide_at_once(checks)
    }

    fn peek<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        (**self).peek(checks, at)
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<Nanos>) -> SettleFuture<'a> {
        (**self).settle(settles, at)
    }

    fn settle_at_once(&self, settles: &[Settle]) -> Option<Result<(), StoreError>> {
        (**self).settle_at_once(settles)
    }

    fn now(&self) -> Option<Nanos> {
        (**self).now()
    }

    fn hold<'a>(&'a self, check: &'a Check, life: Nanos) -> HoldFuture<'a> {
        (**self).hold(check, life)
    }

    fn release<'a>(&'a self, check: &'a Check, id: u64, spent: u64) -> SettleFuture<'a> {
        (**self).release(check, id, spent)
    }

    fn renew<'a>(&'a self, check: &'a Check, life: Nanos, id: u64, spent: u64) -> HoldFuture<'a> {
        (**self).renew(check, life, id, spent)
    }
}
