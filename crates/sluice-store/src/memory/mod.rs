//! The embedded store: sharded, bounded, and atomic across a request's several limits.

mod counters;
mod holds;
mod layout;
mod options;
mod request;
mod shard;
mod slot;
mod snapshot;
mod storage;
mod summary;
mod table;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_core::{Clock, Decision, Nanos};

use crate::key::KeyHasher;
use crate::store::{
    Check, Hold, HoldFuture, KeyStats, NamedPolicy, Reported, Settle, SettleFuture, Store, StoreError, StoreFuture,
    Verdict, validate_checks,
};
use table::Table;

pub use options::{FoldSize, MAX_FOLD_DEPTH, MemoryOptions, WhenFull};
pub use shard::{FRESH_SCAN, LRU_SAMPLE};
pub use snapshot::{
    Boot, CONTINUE_WITHIN, Loaded, Moment, PolicyRestore, Restored, SNAPSHOT_VERSION, SnapshotError, UPTIME_RESOLUTION,
    Written,
};

/// Counters of one policy, from [`MemoryStore::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStats {
    /// The policy's name.
    pub name: String,
    /// Keys held now.
    pub keys: usize,
    /// Fresh entries dropped to make room (no decision changed).
    pub evicted_fresh: u64,
    /// Live entries evicted as least recently used (folded into the summary under
    /// [`WhenFull::Fold`], forgotten under [`WhenFull::Forget`]).
    pub evicted_lru: u64,
    /// Requests refused with [`StoreError::Full`].
    pub refused: u64,
    /// An estimate of the heap bytes the policy's table holds: slots, index and fold summary
    /// (not a sliding log's queues of timestamps). Bounded by `max_keys` and the summary's size.
    pub bytes: usize,
}

/// The embedded, in-process store.
///
/// Each policy has its own table of at most [`MemoryOptions::max_keys`] keys, split into shards
/// by the key hash; each shard is a mutex around a compact hash index. Raw keys never reach it:
/// it sees only [`crate::KeyHash`]es.
///
/// When a shard is full, fresh entries are dropped first (they decide as an absent key would);
/// then, by default ([`WhenFull::Fold`]), the least recently used key is evicted and its state
/// folded into a summary of fixed size, from which every key absent from the table starts: at
/// least as strict as the state it was evicted with, so no flood of new keys can reset a limit
/// (a key may start stricter than its own state when it shares summary cells with stricter
/// keys). [`WhenFull::Refuse`] refuses new keys instead; [`WhenFull::Forget`] evicts and forgets,
/// which can loosen limits.
///
/// A request's checks are decided together: the shards involved are locked in one global order
/// (so no two requests can deadlock, whatever the order of their keys), every check is decided,
/// and the request is charged to every check only if every check admits. Two checks of one
/// request on the same policy and key see each other: the second is decided after the first's
/// charge. When a request is denied, decision `i` is what check `i` would get after the checks
/// before it (those that admit) were charged; nothing is charged.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::{ManualClock, Policy, TokenBucket, FixedWindow, NANOS_PER_SEC};
/// use sluice_store::{Check, KeyHasher, MemoryOptions, MemoryStore, NamedPolicy};
///
/// let policies = vec![
///     NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(5, 1.0).unwrap()) },
///     NamedPolicy { name: "per-account".into(), policy: Policy::from(FixedWindow::new(1, 60 * NANOS_PER_SEC).unwrap()) },
/// ];
/// let store = MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(0)));
/// let h = KeyHasher::random();
/// let (ip, account) = (h.hash(&[b"203.0.113.7"]), h.hash(&[b"alice@example.com"]));
/// let request = [Check { policy: 0, key: ip, cost: 1 }, Check { policy: 1, key: account, cost: 1 }];
///
/// assert!(store.decide_now(&request).unwrap().allowed);
/// let again = store.decide_now(&request).unwrap();
/// assert!(!again.allowed); // the account limit denies ...
/// assert_eq!(again.tightest(), Some(1));
/// // ... and the IP limit was not charged: 4 tokens left, as after the first request.
/// assert_eq!(again.decisions[0].remaining, 3);
/// assert_eq!(store.decide_now(&request[..1]).unwrap().decisions[0].remaining, 3);
/// ```
pub struct MemoryStore {
    policies: Vec<NamedPolicy>,
    tables: Vec<Arc<Table>>,
    options: MemoryOptions,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("policies", &self.policies).field("options", &self.options).finish()
    }
}

impl MemoryStore {
    /// An empty store for `policies`, reading `clock` when a request gives no time.
    pub fn new(policies: Vec<NamedPolicy>, options: MemoryOptions, clock: Arc<dyn Clock>) -> Self {
        let tables = policies.iter().map(|p| Arc::new(Table::new(p.policy, &options))).collect();
        Self { policies, tables, options, clock }
    }

    /// Decides the checks of one request at `now`.
    pub fn decide_at(&self, checks: &[Check], now: Nanos) -> Result<Verdict, StoreError> {
        request::decide(&self.policies, &self.tables, checks, || now)
    }

    /// Decides the checks of one request at `now` charging nothing ([`Store::peek`]).
    pub fn peek_at(&self, checks: &[Check], now: Nanos) -> Result<Verdict, StoreError> {
        request::peek(&self.policies, &self.tables, checks, || now)
    }

    /// Decides a request with a single check at `now`: the same decision as [`Self::decide_at`]
    /// with one check, without allocating a [`Verdict`]. For the hot path of one limit per request.
    pub fn decide_one_at(&self, check: &Check, now: Nanos) -> Result<Decision, StoreError> {
        request::decide_single(&self.policies, &self.tables, check, || now).map(|(d, _)| d)
    }

    /// [`Self::decide_one_at`] at the store clock's `now`, read once the key's shard is locked
    /// (see [`Self::decide_now`]).
    pub fn decide_one_now(&self, check: &Check) -> Result<Decision, StoreError> {
        request::decide_single(&self.policies, &self.tables, check, || self.clock.now()).map(|(d, _)| d)
    }

    /// Decides the checks of one request at the store clock's `now`, read once every shard the
    /// request touches is locked: requests on a shard are decided at times that never go
    /// backwards, so one that waited for the lock is never decided at a time older than a charge
    /// already made (which would refuse it for a gap of nanoseconds).
    pub fn decide_now(&self, checks: &[Check]) -> Result<Verdict, StoreError> {
        request::decide(&self.policies, &self.tables, checks, || self.clock.now())
    }

    /// A store for a new list of policies (a configuration reload). A policy equal to one of this
    /// store's (same name and same algorithm and parameters) keeps its table, shared with this
    /// store, so its keys keep their state; any other starts empty. Each table is carried over at
    /// most once. The options and clock are this store's.
    pub fn rebuild(&self, policies: Vec<NamedPolicy>) -> MemoryStore {
        let mut taken = vec![false; self.policies.len()];
        let tables = policies
            .iter()
            .map(|p| {
                let old = (0..self.policies.len()).find(|&i| !taken[i] && self.policies[i] == *p);
                match old {
                    Some(i) => {
                        taken[i] = true;
                        Arc::clone(&self.tables[i])
                    }
                    None => Arc::new(Table::new(p.policy, &self.options)),
                }
            })
            .collect();
        MemoryStore { policies, tables, options: self.options, clock: Arc::clone(&self.clock) }
    }

    /// Per policy, in policy order: keys held and eviction counts.
    pub fn stats(&self) -> Vec<PolicyStats> {
        self.policies
            .iter()
            .zip(&self.tables)
            .map(|(p, t)| PolicyStats {
                name: p.name.clone(),
                keys: t.keys(),
                evicted_fresh: t.counters.evicted_fresh.load(Ordering::Relaxed),
                evicted_lru: t.counters.evicted_lru.load(Ordering::Relaxed),
                refused: t.counters.refused.load(Ordering::Relaxed),
                bytes: t.bytes(),
            })
            .collect()
    }

    /// The options the store was built with.
    pub fn options(&self) -> &MemoryOptions {
        &self.options
    }

    /// Writes the store's state to `path`, atomically, checksummed with a key derived from
    /// `secret` (see the module `snapshot` for what is written and why it is never looser):
    /// shard by shard, each locked only while it is encoded. Blocking I/O.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice_core::{FixedWindow, ManualClock, Policy, NANOS_PER_SEC as S};
    /// use sluice_store::{Check, KeyHasher, MemoryOptions, MemoryStore, Moment, NamedPolicy, Restored};
    ///
    /// let policies = vec![NamedPolicy { name: "login".into(), policy: Policy::from(FixedWindow::new(1, 60 * S).unwrap()) }];
    /// let secret = KeyHasher::from_secret(b"a long random secret shared by restarts");
    /// let path = std::env::temp_dir().join(format!("sluice-doc-snapshot-{}", std::process::id()));
    /// let old_clock = Arc::new(ManualClock::new(1_000 * S));
    /// let old = MemoryStore::new(policies.clone(), MemoryOptions::default(), old_clock.clone());
    /// let alice = [Check { policy: 0, key: secret.hash(&[b"alice"]), cost: 1 }];
    /// assert!(old.decide_now(&alice).unwrap().allowed);
    /// old.write_snapshot_at(&path, &secret, Moment { clock: 1_000 * S, wall: 5_000 * S, boot: None }).unwrap();
    ///
    /// // A new process, ten seconds later by the wall clock (its own clock reads 1,010 s).
    /// let clock = Arc::new(ManualClock::new(1_010 * S));
    /// let now = Moment { clock: 1_010 * S, wall: 5_010 * S, boot: None };
    /// let (store, restored) = MemoryStore::restore_at(policies, MemoryOptions::default(), clock, &path, &secret, now);
    /// let Restored::Loaded(loaded) = restored else { panic!("{restored:?}") };
    /// assert_eq!((loaded.elapsed, loaded.policies[0].keys), (10 * S, 1));
    /// let denied = store.decide_now(&alice).unwrap();
    /// assert!(!denied.allowed); // still spent until its window ends, at 1,020 s
    /// assert_eq!(denied.decisions[0].retry_after, 10 * S);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn write_snapshot(&self, path: &Path, secret: &KeyHasher) -> Result<Written, SnapshotError> {
        self.write_snapshot_at(path, secret, Moment::now(&*self.clock))
    }

    /// [`Self::write_snapshot`] recording `moment` as the time of writing (tests; `moment.clock`
    /// must be no later than the store's clock).
    pub fn write_snapshot_at(&self, path: &Path, secret: &KeyHasher, moment: Moment) -> Result<Written, SnapshotError> {
        snapshot::write(&self.tables, &self.policies, &*self.clock, path, secret, moment)
    }

    /// A store for `policies` holding the state of the snapshot at `path`, aged by the time
    /// that passed since it was written, with what became of it. A missing file, or one that is
    /// skipped (damaged, of another version or key secret, too large), gives an empty store;
    /// policies that are new or changed start empty. When `clock` and the writer's agree to
    /// within [`CONTINUE_WITHIN`], the store continues the writer's clock
    /// ([`Loaded::clock_offset`]) and states keep their exact times.
    pub fn restore(
        policies: Vec<NamedPolicy>,
        options: MemoryOptions,
        clock: Arc<dyn Clock>,
        path: &Path,
        secret: &KeyHasher,
    ) -> (MemoryStore, Restored) {
        let now = Moment::now(&*clock);
        Self::restore_at(policies, options, clock, path, secret, now)
    }

    /// [`Self::restore`] at `now` (tests; `now.clock` is the time states are rebuilt at).
    pub fn restore_at(
        policies: Vec<NamedPolicy>,
        options: MemoryOptions,
        clock: Arc<dyn Clock>,
        path: &Path,
        secret: &KeyHasher,
        now: Moment,
    ) -> (MemoryStore, Restored) {
        let mut store = MemoryStore::new(policies, options, clock);
        match snapshot::restore(&store.tables, &store.policies, path, secret, now) {
            Ok(None) => (store, Restored::Missing),
            Ok(Some(loaded)) => {
                if loaded.clock_offset != 0 {
                    store.clock = Arc::new(Offset { inner: store.clock, behind: loaded.clock_offset });
                }
                (store, Restored::Loaded(loaded))
            }
            Err(e) => {
                // What was read before the fault goes with the staging store.
                let MemoryStore { policies, options, clock, tables } = store;
                drop(tables);
                (MemoryStore::new(policies, options, clock), Restored::Skipped(e))
            }
        }
    }
}

/// A clock reading `behind` nanoseconds less than `inner`: a restored store continuing the clock
/// its snapshot was written by.
struct Offset {
    /// The clock given.
    inner: Arc<dyn Clock>,
    /// How much less this one reads (more when negative).
    behind: i64,
}

impl Clock for Offset {
    fn now(&self) -> Nanos {
        self.inner.now().saturating_add_signed(-self.behind)
    }
}

impl MemoryStore {
    /// The store's clock: what a request with no explicit time is decided at (after a restore,
    /// it may read up to a second off the clock the store was given: see
    /// [`Loaded::clock_offset`]).
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }
}

impl MemoryStore {
    /// [`Store::hold`], at the store's clock.
    fn hold_now(&self, check: &Check, life: Nanos) -> Result<Hold, StoreError> {
        validate_checks(&self.policies, std::slice::from_ref(check))?;
        let policy = &self.policies[check.policy].policy;
        let Some(interval) = holds::interval(policy) else {
            return Err(StoreError::Unsupported {
                store: "memory",
                what: "hold units of a policy other than a policing bucket",
            });
        };
        let table = &self.tables[check.policy];
        let bucket = (policy.limit(), interval);
        let (id, decision, at) = holds::hold(table, bucket, &check.key, check.cost, life, || self.clock.now());
        Ok(Hold { granted: decision.allowed, id, decision, at })
    }
}

impl Store for MemoryStore {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        let verdict = match at {
            Some(now) => self.decide_at(checks, now),
            None => self.decide_now(checks),
        };
        Box::pin(std::future::ready(verdict))
    }

    fn policies(&self) -> &[NamedPolicy] {
        &self.policies
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn decide_at_once(&self, checks: &[Check]) -> Option<Result<Reported, StoreError>> {
        Some(self.decide_now(checks).map(|verdict| Reported { verdict, degraded: None, answered: true }))
    }

    fn peek<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        let verdict = match at {
            Some(now) => self.peek_at(checks, now),
            None => request::peek(&self.policies, &self.tables, checks, || self.clock.now()),
        };
        Box::pin(std::future::ready(verdict))
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<Nanos>) -> SettleFuture<'a> {
        let settled = match at {
            Some(now) => request::settle(&self.policies, &self.tables, settles, || now),
            None => request::settle(&self.policies, &self.tables, settles, || self.clock.now()),
        };
        Box::pin(std::future::ready(settled))
    }

    fn settle_at_once(&self, settles: &[Settle]) -> Option<Result<(), StoreError>> {
        Some(request::settle(&self.policies, &self.tables, settles, || self.clock.now()))
    }

    fn now(&self) -> Option<Nanos> {
        Some(self.clock.now())
    }

    fn hold<'a>(&'a self, check: &'a Check, life: Nanos) -> HoldFuture<'a> {
        Box::pin(std::future::ready(self.hold_now(check, life)))
    }

    fn release<'a>(&'a self, check: &'a Check, id: u64, spent: u64) -> SettleFuture<'a> {
        let released = validate_checks(&self.policies, std::slice::from_ref(check)).map(|()| {
            holds::release(&self.tables[check.policy], &check.key, id, spent, || self.clock.now());
        });
        Box::pin(std::future::ready(released))
    }

    fn key_stats(&self) -> Vec<KeyStats> {
        self.stats()
            .into_iter()
            .map(|s| KeyStats {
                policy: s.name,
                keys: s.keys as u64,
                evicted_fresh: s.evicted_fresh,
                evicted_lru: s.evicted_lru,
            })
            .collect()
    }
}
