//! The Redis store: a request's checks decided by one script call per slot, bounded by a
//! timeout and a breaker, with the operator's failure mode and a local deny cache.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{Decision, Nanos, SystemClock};
use sluice_store::{
    Check, Degraded, Hold, HoldFuture, KeyStats, MemoryStore, NamedPolicy, Reported, ReportedFuture, Settle,
    SettleFuture, Store, StoreError, StoreFuture, Verdict, validate_checks, validate_settles,
};

use crate::breaker::{Admission, Breaker, BreakerState};
use crate::connection::{Conn, Connector, breaks_connection};
use crate::deny_cache::{CacheClock, DenyCache};
use crate::error::RedisStoreError;
use crate::join::join_all;
use crate::options::{OnError, RedisOptions};
use crate::plan::{ScriptPolicy, plan};
use crate::script::{HOLD_SOURCE, ScriptCall, eval, hold_sha};
use crate::slot::key_slot;
use crate::stats::{Counters, RedisStats, bump};

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Redis decided (and charged, when admitted).
    Redis,
    /// The local deny cache repeated an earlier denial by Redis; Redis was not called.
    DenyCache,
    /// Redis could not decide and `fail-open` admitted without a decision.
    FailOpen,
    /// Redis could not decide and the local in-memory fallback decided.
    Local,
}

impl Source {
    /// `redis`, `deny-cache`, `fail-open` or `local`, for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::DenyCache => "deny-cache",
            Source::FailOpen => "fail-open",
            Source::Local => "local",
        }
    }
}

/// A verdict and where it came from ([`RedisStore::decide_detailed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcedVerdict {
    /// The verdict.
    pub verdict: Verdict,
    /// Where it came from.
    pub source: Source,
}

/// Rate-limit state in Redis or a Redis Cluster, shared by every instance pointed at it.
///
/// Each request is one `EVALSHA` of one script (per Cluster slot its keys fall in), which reads
/// every check's state, decides them all on the server's clock and charges them all only if all
/// admit. See the crate documentation for the key layout, failure modes and the exactness bounds.
pub struct RedisStore {
    policies: Vec<NamedPolicy>,
    plans: Vec<ScriptPolicy>,
    options: RedisOptions,
    connector: Connector,
    /// Shared with the stores [`RedisStore::rebuild`] makes: an outage does not end with a
    /// reload, so neither does the breaker's count of it.
    breaker: Arc<Breaker>,
    /// Shared with the stores [`RedisStore::rebuild`] makes: a key Redis denied stays denied
    /// across a reload, also while Redis is down.
    deny: Option<Arc<DenyCache>>,
    /// Per policy, the deny cache's id of its stored state (its key head): the same id in every
    /// store that shares the cache, whatever the policy's position.
    cached_as: Vec<usize>,
    local: Option<MemoryStore>,
    /// Shared with the stores [`RedisStore::rebuild`] makes, so counters never go backwards.
    counters: Arc<Counters>,
    /// Where this store's local clock starts: the deny cache's times are read on it, so the
    /// stores that share the cache share it too.
    epoch: Instant,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("urls", &self.options.urls)
            .field("cluster", &self.options.cluster)
            .field("on_error", &self.options.on_error)
            .field("policies", &self.policies.len())
            .finish_non_exhaustive()
    }
}

/// Why one attempt to reach Redis failed.
enum Failure {
    Error(String),
    Timeout,
}

impl RedisStore {
    /// Validates the options and policies and prepares the store. Nothing connects yet: the first
    /// decision does, so a store can be built while Redis is down (its failure mode applies).
    pub fn new(policies: Vec<NamedPolicy>, options: RedisOptions) -> Result<Self, RedisStoreError> {
        options.validate()?;
        let mut plans = Vec::with_capacity(policies.len());
        for (i, p) in policies.iter().enumerate() {
            if policies[..i].iter().any(|q| q.name == p.name) {
                return Err(RedisStoreError::DuplicatePolicy(p.name.clone()));
            }
            plans.push(plan(&options.key_prefix, p)?);
        }
        let connector = Connector::new(&options)?;
        let local = (options.on_error == OnError::Local)
            .then(|| MemoryStore::new(policies.clone(), options.local, Arc::new(SystemClock::new())));
        let deny = (options.deny_cache_entries > 0).then(|| Arc::new(DenyCache::new(options.deny_cache_entries)));
        Ok(Self {
            breaker: Arc::new(Breaker::new(options.breaker)),
            cached_as: cache_ids(deny.as_deref(), &plans),
            deny,
            policies,
            plans,
            connector,
            local,
            counters: Arc::new(Counters::default()),
            epoch: Instant::now(),
            options,
        })
    }

    /// A store for a new list of policies (a configuration reload) on the same Redis with the
    /// same options. What this store knows of Redis carries over, shared: the breaker (an
    /// outage is not over because the configuration changed), the deny cache (a key Redis
    /// denied stays denied, also while Redis is down; a denial applies to a policy whose stored
    /// state is the same, i.e. same name and parameters, wherever it now stands), the counters,
    /// and under [`OnError::Local`] the fallback's state of unchanged policies
    /// ([`MemoryStore::rebuild`]). Connections are made anew.
    pub fn rebuild(&self, policies: Vec<NamedPolicy>) -> Result<Self, RedisStoreError> {
        let fresh = Self::new(policies, self.options.clone())?;
        Ok(Self {
            breaker: Arc::clone(&self.breaker),
            cached_as: cache_ids(self.deny.as_deref(), &fresh.plans),
            deny: self.deny.clone(),
            local: self.local.as_ref().map(|l| l.rebuild(fresh.policies.clone())),
            counters: Arc::clone(&self.counters),
            epoch: self.epoch,
            ..fresh
        })
    }

    /// The options the store was built with.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// The counters, the breaker's state and the deny cache's size.
    pub fn stats(&self) -> RedisStats {
        let entries = self.deny.as_deref().map_or(0, DenyCache::len);
        self.counters.snapshot(self.breaker.state(), self.breaker.times_opened(), entries)
    }

    /// The breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// What a `fail-closed` refusal should tell clients to wait (`Retry-After`): the rest of the
    /// breaker's cool-down, or zero when the breaker is closed (a single failed call); callers
    /// round up to at least one second.
    pub fn unavailable_retry_after(&self) -> Duration {
        self.breaker.until_probe().unwrap_or(Duration::ZERO)
    }

    /// The Redis key that holds `check`'s state (`prefix:policy:fingerprint:{hash}`), or `None`
    /// for an unknown policy. For operators and tests: the store computes it itself.
    pub fn stored_key(&self, check: &Check) -> Option<String> {
        self.plans.get(check.policy).map(|p| p.key(&check.key))
    }

    /// The fallback store of [`OnError::Local`].
    pub fn local_store(&self) -> Option<&MemoryStore> {
        self.local.as_ref()
    }

    /// Connects if needed and sends `PING`, within the timeout and outside the breaker: for a
    /// start-up check or a readiness probe.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.query_once(&redis::cmd("PING")).await.map(drop)
    }

    /// Redis's `maxmemory-policy` (`CONFIG GET`, within the timeout and outside the breaker).
    /// Anything but `noeviction` may evict keys that are still limited: see
    /// [`crate::policy_may_evict_limits`]. Managed services often refuse `CONFIG`: an error
    /// then, which a caller may ignore.
    pub async fn maxmemory_policy(&self) -> Result<String, StoreError> {
        let reply = self.query_once(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy")).await?;
        let unreadable = |why: String| StoreError::Unavailable(format!("redis: CONFIG GET maxmemory-policy: {why}"));
        let pairs: std::collections::HashMap<String, String> =
            redis::from_redis_value(&reply).map_err(|e| unreadable(e.to_string()))?;
        pairs.get("maxmemory-policy").cloned().ok_or_else(|| unreadable("no such parameter in the reply".into()))
    }

    /// For a start-up log line: the warning of [`crate::eviction_warning`] for Redis's
    /// `maxmemory-policy`, or `None` when it never evicts or cannot be read.
    pub async fn eviction_warning(&self) -> Option<String> {
        self.maxmemory_policy().await.ok().and_then(|p| crate::eviction_warning(&p))
    }

    /// One command, connecting if needed, within the timeout and outside the breaker.
    async fn query_once(&self, cmd: &redis::Cmd) -> Result<redis::Value, StoreError> {
        let attempt = async {
            let mut conn = self.connector.get(&self.counters).await?;
            conn.query(cmd).await
        };
        match tokio::time::timeout(self.options.timeout, attempt).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                if breaks_connection(&e) {
                    self.connector.discard();
                }
                Err(StoreError::Unavailable(format!("redis: {e}")))
            }
            Err(_) => {
                self.connector.discard();
                Err(self.timeout_error())
            }
        }
    }

    fn timeout_error(&self) -> StoreError {
        StoreError::Timeout(u64::try_from(self.options.timeout.as_millis()).unwrap_or(u64::MAX))
    }

    /// Decides `checks` together, and says where the verdict came from. `at` passes an explicit
    /// time in nanoseconds, which must be a whole number of microseconds; `None` uses the Redis
    /// server's clock.
    pub async fn decide_detailed(&self, checks: &[Check], at: Option<Nanos>) -> Result<SourcedVerdict, StoreError> {
        self.decide_sourced(checks, at).await.map(|(v, _)| v)
    }

    /// [`RedisStore::decide_detailed`], with the error a failure mode answered for (`fail-open`,
    /// `local`): the verdict is then not Redis's, and the error is reported, not absorbed.
    async fn decide_sourced(
        &self,
        checks: &[Check],
        at: Option<Nanos>,
    ) -> Result<(SourcedVerdict, Option<StoreError>), StoreError> {
        self.validate(checks, at)?;
        if checks.is_empty() {
            let verdict = Verdict::at(true, Vec::new(), 0);
            return Ok((SourcedVerdict { verdict, source: Source::Redis }, None));
        }
        let (clock, start) = match at {
            Some(t) => (CacheClock::Explicit, t),
            None => (CacheClock::Local, self.local_now()),
        };
        if let Some(verdict) = self.cached_denial(checks, clock, start) {
            bump(&self.counters.deny_cache_hits);
            return Ok((SourcedVerdict { verdict, source: Source::DenyCache }, None));
        }
        let permit = match self.breaker.admit() {
            Admission::Call(p) => p,
            Admission::Reject(wait) => {
                bump(&self.counters.breaker_rejections);
                let why = format!("redis circuit breaker open (next probe in {} ms)", wait.as_millis());
                return self.on_failure(checks, at, StoreError::Unavailable(why));
            }
        };
        match tokio::time::timeout(self.options.timeout, self.call(checks, at, false)).await {
            Ok(Ok(verdict)) => {
                permit.success();
                if let Some(cache) = &self.deny {
                    for (i, (c, d)) in checks.iter().zip(&verdict.decisions).enumerate() {
                        // A key named again in the request was decided after its earlier
                        // checks' tentative charges, which a denied request never made: only a
                        // key's first check is a denial on its stored state.
                        let first = !checks[..i].iter().any(|e| e.policy == c.policy && e.key == c.key);
                        if first {
                            cache.insert(self.cached_as[c.policy], &c.key, c.cost, clock, start, d);
                        }
                    }
                }
                Ok((SourcedVerdict { verdict, source: Source::Redis }, None))
            }
            Ok(Err(Failure::Error(e))) => {
                permit.failure();
                bump(&self.counters.redis_errors);
                self.on_failure(checks, at, StoreError::Unavailable(e))
            }
            Ok(Err(Failure::Timeout)) | Err(_) => {
                permit.failure();
                bump(&self.counters.timeouts);
                self.connector.discard();
                self.on_failure(checks, at, self.timeout_error())
            }
        }
    }

    fn local_now(&self) -> Nanos {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn validate(&self, checks: &[Check], at: Option<Nanos>) -> Result<(), StoreError> {
        validate_checks(&self.policies, checks)?;
        validate_time(at)
    }

    /// A verdict from the deny cache if any check has a cached denial. The checks without one
    /// were not consulted: they are reported as not denying, with nothing remaining.
    fn cached_denial(&self, checks: &[Check], clock: CacheClock, now: Nanos) -> Option<Verdict> {
        let cache = self.deny.as_ref()?;
        let found: Vec<Option<Decision>> =
            checks.iter().map(|c| cache.lookup(self.cached_as[c.policy], &c.key, c.cost, clock, now)).collect();
        if found.iter().all(Option::is_none) {
            return None;
        }
        let decisions = checks
            .iter()
            .zip(found)
            .map(|(c, d)| {
                d.unwrap_or(Decision {
                    allowed: true,
                    limit: self.plans[c.policy].limit,
                    remaining: 0,
                    reset_after: 0,
                    retry_after: 0,
                    delay: 0,
                })
            })
            .collect();
        Some(Verdict::at(false, decisions, 0))
    }

    /// The failure path: the operator's choice. A verdict it gives comes with the error it
    /// answered for.
    fn on_failure(
        &self,
        checks: &[Check],
        at: Option<Nanos>,
        error: StoreError,
    ) -> Result<(SourcedVerdict, Option<StoreError>), StoreError> {
        match self.options.on_error {
            OnError::FailOpen => {
                bump(&self.counters.fail_open);
                let verdict = Verdict::admitted_undecided(checks, |p| self.plans[p].limit);
                Ok((SourcedVerdict { verdict, source: Source::FailOpen }, Some(error)))
            }
            OnError::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(error)
            }
            OnError::Local => {
                bump(&self.counters.local);
                let Some(local) = &self.local else { return Err(error) };
                let verdict = match at {
                    Some(t) => local.decide_at(checks, t)?,
                    None => local.decide_now(checks)?,
                };
                Ok((SourcedVerdict { verdict, source: Source::Local }, Some(error)))
            }
        }
    }

    /// Decides `checks` charging nothing ([`Store::peek`]): one script call per slot group,
    /// within the timeout and through the breaker; a failure is an error (no failure mode
    /// answers a question), and the deny cache is neither read nor filled.
    pub async fn peek_checks(&self, checks: &[Check], at: Option<Nanos>) -> Result<Verdict, StoreError> {
        self.validate(checks, at)?;
        if checks.is_empty() {
            return Ok(Verdict::at(true, Vec::new(), 0));
        }
        self.guarded(self.call(checks, at, true)).await
    }

    /// `call` through the breaker and within the timeout, each failure counted and turned into
    /// the store's error (no failure mode answers: for what is not a decision).
    async fn guarded<T>(&self, call: impl Future<Output = Result<T, Failure>>) -> Result<T, StoreError> {
        let permit = match self.breaker.admit() {
            Admission::Call(p) => p,
            Admission::Reject(wait) => {
                bump(&self.counters.breaker_rejections);
                let why = format!("redis circuit breaker open (next probe in {} ms)", wait.as_millis());
                return Err(StoreError::Unavailable(why));
            }
        };
        match tokio::time::timeout(self.options.timeout, call).await {
            Ok(Ok(done)) => {
                permit.success();
                Ok(done)
            }
            Ok(Err(Failure::Error(e))) => {
                permit.failure();
                bump(&self.counters.redis_errors);
                Err(StoreError::Unavailable(e))
            }
            Ok(Err(Failure::Timeout)) | Err(_) => {
                permit.failure();
                bump(&self.counters.timeouts);
                self.connector.discard();
                Err(self.timeout_error())
            }
        }
    }

    /// One script call per slot group (one in all on a single node), concurrently; charging
    /// nothing when `peek`.
    async fn call(&self, checks: &[Check], at: Option<Nanos>, peek: bool) -> Result<Verdict, Failure> {
        let conn = self.connector.get(&self.counters).await.map_err(|e| self.failure(e))?;
        let mut calls = self.script_calls(checks, |c| c, at);
        for call in &mut calls {
            call.peek = peek;
        }
        let results = self
            .run_each(&conn, &calls, |call, mut conn| async move { call.run(&mut conn, &self.counters).await })
            .await;
        let mut decisions = vec![None; checks.len()];
        // Each slot's node reads its own clock: every check keeps the time it was decided at.
        let mut times = vec![0; checks.len()];
        for (call, result) in calls.iter().zip(results) {
            let (at, group) = result.map_err(|e| self.failure(e))?;
            for (&i, d) in call.indices.iter().zip(group) {
                decisions[i] = Some(d);
                times[i] = at * 1000;
            }
        }
        let decisions: Vec<Decision> = decisions.into_iter().flatten().collect();
        if decisions.len() != checks.len() {
            return Err(Failure::Error("redis: a script reply is missing decisions".into()));
        }
        let at = times.first().copied().unwrap_or(0);
        let at_each = if times.iter().all(|&t| t == at) { Vec::new() } else { times };
        Ok(Verdict { allowed: decisions.iter().all(|d| d.allowed), decisions, at, at_each })
    }

    /// The script calls of `items`, whose checks `check` gives: one per slot group on a
    /// Cluster, one in all on a single node.
    fn script_calls<'a, T>(
        &'a self,
        items: &'a [T],
        check: impl Fn(&T) -> &Check,
        at: Option<Nanos>,
    ) -> Vec<ScriptCall<'a, T>> {
        let (now, grace_ms) = self.time_args(at);
        let call = |indices: Vec<usize>| ScriptCall { plans: &self.plans, items, indices, now, grace_ms, peek: false };
        if !self.options.cluster {
            return vec![call((0..items.len()).collect())];
        }
        let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            let c = check(item);
            by_slot.entry(key_slot(self.plans[c.policy].key(&c.key).as_bytes())).or_default().push(i);
        }
        by_slot.into_values().map(call).collect()
    }

    /// `run` on every call, concurrently, each with its own handle on `conn`: the results in the
    /// calls' order.
    async fn run_each<'c, T, R, F>(
        &self,
        conn: &Conn,
        calls: &'c [ScriptCall<'c, T>],
        run: impl Fn(&'c ScriptCall<'c, T>, Conn) -> F,
    ) -> Vec<redis::RedisResult<R>>
    where
        F: Future<Output = redis::RedisResult<R>>,
    {
        if let [one] = calls {
            return vec![run(one, conn.clone()).await];
        }
        join_all(calls.iter().map(|call| run(call, conn.clone())).collect()).await
    }

    /// Settles charges this store's script made: one call of the settlement script per slot
    /// group (one in all on a single node), within the timeout and through the breaker. Only
    /// Redis's own charges: a verdict a failure mode gave is never settled (see
    /// [`Store::settle`]). A key given units back is forgotten by the deny cache.
    pub async fn settle_charges(&self, settles: &[Settle], at: Option<Nanos>) -> Result<(), StoreError> {
        validate_settles(&self.policies, settles)?;
        validate_time(at)?;
        // A charge settled at what it reserved changes nothing: no call for it (the memory
        // store makes none either, so neither counts a key's ended holds on it).
        let changed: Vec<Settle>;
        let settles = if settles.iter().all(|s| s.actual != s.check.cost) {
            settles
        } else {
            changed = settles.iter().filter(|s| s.actual != s.check.cost).copied().collect();
            &changed
        };
        if settles.is_empty() {
            return Ok(());
        }
        self.guarded(self.settle_call(settles, at)).await?;
        if let Some(cache) = &self.deny {
            for s in settles.iter().filter(|s| s.actual < s.check.cost) {
                cache.forget(self.cached_as[s.check.policy], &s.check.key);
            }
        }
        Ok(())
    }

    /// One settlement script call per slot group, concurrently.
    async fn settle_call(&self, settles: &[Settle], at: Option<Nanos>) -> Result<(), Failure> {
        let conn = self.connector.get(&self.counters).await.map_err(|e| self.failure(e))?;
        let calls = self.script_calls(settles, |s| &s.check, at);
        let results = self
            .run_each(&conn, &calls, |call, mut conn| async move { call.run(&mut conn, &self.counters).await })
            .await;
        for result in results {
            result.map_err(|e| self.failure(e))?;
        }
        Ok(())
    }

    /// Sets `check.cost` units of `check`'s key apart for a quota lease that lives `life`
    /// ([`Store::hold`], whose rules the hold script follows: `scripts/hold.lua`), at `at` (an
    /// explicit time, as for [`RedisStore::decide_detailed`]) or on the Redis server's clock.
    /// One call on the key's node, within the timeout and through the breaker; a failure is an
    /// error (no failure mode holds units). Only a policing bucket's units are held: any other
    /// policy is [`StoreError::Unsupported`]. `life` is rounded up to whole microseconds, and
    /// bounded by [`crate::MAX_SPAN_MICROS`].
    pub async fn hold_at(&self, check: &Check, life: Nanos, at: Option<Nanos>) -> Result<Hold, StoreError> {
        self.hold_call_at(check, life, at, None).await
    }

    /// [`Store::renew`]: the release of hold `id` (`spent` of it admitted) and a new hold of
    /// `check.cost` units, in one call of the hold script, at `at` or on the server's clock.
    pub async fn renew_at(
        &self,
        check: &Check,
        life: Nanos,
        (id, spent): (u64, u64),
        at: Option<Nanos>,
    ) -> Result<Hold, StoreError> {
        let hold = self.hold_call_at(check, life, at, Some((id, spent))).await?;
        if let Some(cache) = &self.deny {
            cache.forget(self.cached_as[check.policy], &check.key);
        }
        Ok(hold)
    }

    /// A hold, after the release of `releasing` (id, spent) when given.
    async fn hold_call_at(
        &self,
        check: &Check,
        life: Nanos,
        at: Option<Nanos>,
        releasing: Option<(u64, u64)>,
    ) -> Result<Hold, StoreError> {
        let plan = self.holding(check, at, "hold units of a policy other than a policing bucket")?;
        let life_us = life.div_ceil(1000).min(crate::plan::MAX_SPAN_MICROS);
        let mut op = vec![
            if releasing.is_some() { "renew" } else { "hold" }.to_string(),
            plan.args[1].clone(),
            plan.args[2].clone(),
            check.cost.to_string(),
            life_us.to_string(),
        ];
        if let Some((id, spent)) = releasing {
            op.extend([id.to_string(), spent.min(plan.limit).to_string()]);
        }
        let reply = self.guarded(self.hold_call(check, at, &op, 6)).await?;
        let [now, granted, id, remaining, reset_after, retry_after] = reply[..] else {
            return Err(StoreError::Unavailable("redis: the hold script answered the wrong number of values".into()));
        };
        let granted = granted == 1;
        let decision = Decision {
            allowed: granted,
            limit: plan.limit,
            remaining,
            reset_after: reset_after.saturating_mul(1000),
            retry_after: retry_after.saturating_mul(1000),
            delay: 0,
        };
        Ok(Hold { granted, id, decision, at: now.saturating_mul(1000) })
    }

    /// Ends hold `id` of `check`'s key, of which `spent` units were admitted ([`Store::release`]:
    /// the spent units, at most the hold's, are charged now; a hold that ended already is left
    /// alone), at `at` or on the Redis server's clock: one call of the hold script on the key's
    /// node, within the timeout and through the breaker. The deny cache forgets the key (units
    /// came back).
    pub async fn release_at(&self, check: &Check, id: u64, spent: u64, at: Option<Nanos>) -> Result<(), StoreError> {
        let plan = self.holding(check, at, "release a hold of a policy other than a policing bucket")?;
        let spent = spent.min(check.cost).min(plan.limit);
        let op = ["release".to_string(), plan.args[1].clone(), plan.args[2].clone(), id.to_string(), spent.to_string()];
        self.guarded(self.hold_call(check, at, &op, 2)).await?;
        if let Some(cache) = &self.deny {
            cache.forget(self.cached_as[check.policy], &check.key);
        }
        Ok(())
    }

    /// The plan of a check that may hold units: a valid check, a valid time, a policing bucket.
    fn holding(&self, check: &Check, at: Option<Nanos>, what: &'static str) -> Result<&ScriptPolicy, StoreError> {
        self.validate(std::slice::from_ref(check), at)?;
        let plan = &self.plans[check.policy];
        if !plan.polices() {
            return Err(StoreError::Unsupported { store: self.kind(), what });
        }
        Ok(plan)
    }

    /// One call of the hold script for `check`'s key with `op` (its arguments after the time):
    /// the `len` non-negative integers it answers.
    async fn hold_call(
        &self,
        check: &Check,
        at: Option<Nanos>,
        op: &[String],
        len: usize,
    ) -> Result<Vec<u64>, Failure> {
        let mut conn = self.connector.get(&self.counters).await.map_err(|e| self.failure(e))?;
        let key = self.plans[check.policy].key(&check.key);
        // The holds' hash: the key's name and `:h`, whose `{hash}` tag (the first) is the key's,
        // so a Cluster keeps both in the key's slot.
        let holds = format!("{key}:h");
        let (now, grace_ms) = self.time_args(at);
        let command = |name: &str, script: &str| {
            let mut cmd = redis::cmd(name);
            cmd.arg(script).arg(2).arg(&key).arg(&holds);
            match now {
                Some(us) => cmd.arg(us),
                None => cmd.arg(""),
            };
            cmd.arg(grace_ms).arg(op);
            cmd
        };
        let reply =
            eval(&mut conn, &self.counters, (hold_sha(), HOLD_SOURCE), command).await.map_err(|e| self.failure(e))?;
        let unexpected = |what: String| Failure::Error(format!("redis: unexpected hold script reply: {what}"));
        let redis::Value::Array(items) = reply else {
            return Err(unexpected(format!("{reply:?}")));
        };
        let values: Vec<u64> = items
            .iter()
            .map(|v| match v {
                redis::Value::Int(n) if *n >= 0 => Ok(*n as u64),
                other => Err(unexpected(format!("{other:?}"))),
            })
            .collect::<Result<_, _>>()?;
        if values.len() != len {
            return Err(unexpected(format!("{} values, not {len}", values.len())));
        }
        Ok(values)
    }

    /// The time arguments of a script call: now in microseconds (`None`: the server's clock) and
    /// the milliseconds added to every expiry.
    fn time_args(&self, at: Option<Nanos>) -> (Option<u64>, u64) {
        match at {
            Some(t) => (Some(t / 1000), u64::try_from(self.options.explicit_time_grace.as_millis()).unwrap_or(0)),
            None => (None, 0),
        }
    }

    fn failure(&self, e: redis::RedisError) -> Failure {
        if breaks_connection(&e) {
            self.connector.discard();
        }
        if e.is_timeout() { Failure::Timeout } else { Failure::Error(format!("redis: {e}")) }
    }
}

/// An explicit time the scripts can take: whole microseconds below 2^52.
fn validate_time(at: Option<Nanos>) -> Result<(), StoreError> {
    if let Some(t) = at
        && (!t.is_multiple_of(1000) || t / 1000 > crate::plan::MAX_SPAN_MICROS * 4)
    {
        return Err(StoreError::Unavailable(format!(
            "explicit time {t} ns: the Redis store takes whole microseconds below 2^52 us"
        )));
    }
    Ok(())
}

/// Per plan, the id `cache` gives its key head (none without a cache).
fn cache_ids(cache: Option<&DenyCache>, plans: &[ScriptPolicy]) -> Vec<usize> {
    cache.map_or_else(Vec::new, |c| plans.iter().map(|p| c.id_of(&p.key_head)).collect())
}

impl Store for RedisStore {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        Box::pin(async move { self.decide_detailed(checks, at).await.map(|o| o.verdict) })
    }

    fn policies(&self) -> &[NamedPolicy] {
        &self.policies
    }

    fn shared(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    /// Unready only under `fail-closed` while the breaker is not closed (Redis kept failing):
    /// `fail-open` and `local` still serve without Redis.
    fn ready(&self) -> bool {
        self.options.on_error != OnError::FailClosed || self.breaker_state() == BreakerState::Closed
    }

    fn breaker_open(&self) -> Option<bool> {
        Some(self.breaker_state() != BreakerState::Closed)
    }

    fn deny_cache_hits(&self) -> Option<u64> {
        Some(self.stats().deny_cache_hits)
    }

    fn peek<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        Box::pin(self.peek_checks(checks, at))
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<Nanos>) -> SettleFuture<'a> {
        Box::pin(self.settle_charges(settles, at))
    }

    fn hold<'a>(&'a self, check: &'a Check, life: Nanos) -> HoldFuture<'a> {
        Box::pin(self.hold_at(check, life, None))
    }

    fn release<'a>(&'a self, check: &'a Check, id: u64, spent: u64) -> SettleFuture<'a> {
        Box::pin(self.release_at(check, id, spent, None))
    }

    fn renew<'a>(&'a self, check: &'a Check, life: Nanos, id: u64, spent: u64) -> HoldFuture<'a> {
        Box::pin(self.renew_at(check, life, (id, spent), None))
    }

    /// The keys of the `local` fallback (none while Redis decides): what an outage costs in
    /// memory, per policy.
    fn key_stats(&self) -> Vec<KeyStats> {
        self.local.as_ref().map(Store::key_stats).unwrap_or_default()
    }

    /// A `fail-open` or `local` verdict comes with the error it answered for
    /// ([`Degraded`], mode [`Source::as_str`]): every error is reported, whatever the mode.
    fn decide_reported<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> ReportedFuture<'a> {
        Box::pin(async move {
            let (sourced, error) = self.decide_sourced(checks, at).await?;
            let degraded = error.map(|error| Degraded { mode: sourced.source.as_str(), error });
            // Only a reply from Redis says Redis decides again: not a cached denial, not a
            // failure mode's verdict, not a request with nothing to ask.
            let answered = sourced.source == Source::Redis && !checks.is_empty();
            Ok(Reported { verdict: sourced.verdict, degraded, answered })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{CostError, FixedWindow, NANOS_PER_SEC, Policy};
    use sluice_store::KeyHash;

    fn named(name: &str) -> NamedPolicy {
        NamedPolicy { name: name.into(), policy: Policy::from(FixedWindow::new(2, NANOS_PER_SEC).unwrap()) }
    }

    #[test]
    fn construction_rejects_what_would_collide_or_cannot_connect() {
        let o = RedisOptions::single("redis://127.0.0.1:1", OnError::FailClosed);
        let dup = RedisStore::new(vec![named("a"), named("a")], o.clone());
        assert_eq!(dup.err(), Some(RedisStoreError::DuplicatePolicy("a".into())));
        let bad = RedisStore::new(vec![named("a")], RedisOptions::single("http://example", OnError::FailClosed));
        assert!(matches!(bad.err(), Some(RedisStoreError::BadUrl { .. })));
        assert!(RedisStore::new(vec![named("a")], o).is_ok(), "nothing connects at construction");
    }

    #[tokio::test]
    async fn bad_requests_are_errors_before_any_call() {
        let s = RedisStore::new(vec![named("a")], RedisOptions::single("redis://127.0.0.1:1", OnError::FailClosed))
            .unwrap();
        let k = KeyHash([3; 16]);
        let unknown = s.decide(&[Check { policy: 4, key: k, cost: 1 }], None).await;
        assert_eq!(unknown, Err(StoreError::UnknownPolicy { index: 0, policy: 4 }));
        let costly = s.decide(&[Check { policy: 0, key: k, cost: 3 }], None).await;
        assert_eq!(costly, Err(StoreError::Cost { index: 0, source: CostError { cost: 3, capacity: 2 } }));
        let sub_micro = s.decide(&[Check { policy: 0, key: k, cost: 1 }], Some(1_500)).await;
        assert!(matches!(sub_micro, Err(StoreError::Unavailable(m)) if m.contains("microseconds")));
        assert_eq!(s.stats().redis_calls, 0);
        assert_eq!(s.stats().connects, 0);
    }

    /// Nothing listens on port 1: every decision takes the failure path. Its policy, a bucket of
    /// 2 that refills one token in 11 days, never refills during the test.
    fn unreachable(on_error: OnError) -> RedisStore {
        let mut o = RedisOptions::single("redis://127.0.0.1:1", OnError::FailClosed);
        o.on_error = on_error;
        let bucket = Policy::from(sluice_core::TokenBucket::new(2, 0.000_001).unwrap());
        RedisStore::new(vec![NamedPolicy { name: "a".into(), policy: bucket }], o).unwrap()
    }

    #[tokio::test]
    async fn failure_modes_report_the_error_they_answered_for() {
        let checks = [Check { policy: 0, key: KeyHash([5; 16]), cost: 1 }];
        let open = unreachable(OnError::FailOpen);
        let r = open.decide_reported(&checks, None).await.expect("fail-open answers");
        assert!(r.verdict.allowed);
        let d = r.degraded.expect("reported, not absorbed");
        assert_eq!(d.mode, "fail-open");
        assert!(matches!(d.error, StoreError::Unavailable(_) | StoreError::Timeout(_)), "{:?}", d.error);
        // `decide` gives the same verdict, without the report.
        assert!(open.decide(&checks, None).await.unwrap().allowed);

        let local = unreachable(OnError::Local);
        for expect in [true, true, false] {
            let r = local.decide_reported(&checks, None).await.expect("local answers");
            assert_eq!((r.verdict.allowed, r.degraded.map(|d| d.mode)), (expect, Some("local")));
        }
        // The fallback's keys are the store's keys now.
        assert_eq!(local.key_stats()[0].keys, 1);
        assert!(unreachable(OnError::FailOpen).key_stats().is_empty(), "no fallback, no keys");

        let closed = unreachable(OnError::FailClosed);
        assert!(closed.decide_reported(&checks, None).await.is_err(), "fail-closed refuses");
        // A request no store may decide is refused before any failure mode.
        let bad = [Check { policy: 7, key: KeyHash([5; 16]), cost: 1 }];
        assert!(matches!(open.decide_reported(&bad, None).await, Err(StoreError::UnknownPolicy { .. })));
    }
}
