//! # The store conformance suite
//!
//! One suite that every [`Store`] runs: it asserts that the store decides, at explicit times,
//! exactly as the core algorithms do, for each of the five algorithms, and that a request's
//! several checks are decided together (all admitted and charged, or none charged). The memory
//! store runs it in this crate's tests; other stores (Redis) run it in theirs.
//!
//! ## The semantics it checks
//!
//! [`Reference`] is the specification, written with nothing but the core's [`Policy::check`]:
//! the checks of a request are decided in order, each against its key's state as left by the
//! checks before it in the same request (so a request naming one policy and key twice sees its
//! own first charge); the request is admitted if every check admits, and only then is every
//! charge kept. A denied request reports, for each check, what that check would get after the
//! checks before it were charged, and charges nothing. Before any of that, a check naming an
//! unknown policy is [`StoreError::UnknownPolicy`] and a cost above the policy's limit is
//! [`StoreError::Cost`], for the first such check, and nothing is charged.
//!
//! ## Constraints on time, and the one tolerance
//!
//! Every request passes an explicit time (`at: Some(t)`); times never go backwards within one
//! store. Every time is a whole number of microseconds, and every policy's window and token
//! interval (`1 / rate`) is a whole number of microseconds, so that a store that counts in
//! microseconds (the Redis store does: Lua numbers are doubles, exact only up to 2^53) can
//! match the core to the nanosecond. One value is not a whole number of microseconds even then:
//! the sliding window counter's `retry_after`, which solves for the moment the previous window's
//! weight has faded enough. For a denial by a sliding window, a store may report that value
//! rounded up to the next whole microsecond (later, never earlier: the strict direction). Every
//! other field must be equal.
//!
//! ## Using it
//!
//! Give [`run_all`] a factory: a closure that takes the policies and returns a future of a
//! store **with no state** (for a shared server, a fresh key prefix per call). A store whose
//! future is ready at once (the memory store) can be driven by [`block_on`]; an asynchronous one
//! runs the suite from its own runtime (`conformance::run_all(factory).await` in a
//! `#[tokio::test]`).
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::ManualClock;
//! use sluice_store::{conformance, MemoryOptions, MemoryStore};
//!
//! conformance::block_on(conformance::run_all(|policies| {
//!     std::future::ready(MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(0))))
//! }));
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use sluice_core::{
    CalendarWindows, CostError, Decision, FixedWindow, LeakMode, LeakyBucket, NANOS_PER_MILLI, NANOS_PER_SEC, Nanos,
    Period, Policy, SlidingLog, SlidingWindow, State, TokenBucket, Zone,
};

use crate::key::{KeyHash, KeyHasher};
use crate::store::{Check, NamedPolicy, Settle, Store, StoreError, Verdict};

/// A nanosecond count of one microsecond.
pub const NANOS_PER_MICRO: Nanos = 1_000;

/// The time the scenarios start at: a realistic Unix time (late 2023), in whole microseconds.
pub const T0: Nanos = 1_700_000_000 * NANOS_PER_SEC;

/// Makes an empty store for a list of policies. Implemented by every
/// `FnMut(Vec<NamedPolicy>) -> impl Future<Output = impl Store>`.
pub trait StoreFactory {
    /// The store made.
    type Store: Store;

    /// A store with no state for `policies`.
    fn make(&mut self, policies: Vec<NamedPolicy>) -> impl Future<Output = Self::Store>;
}

impl<F, Fut, S> StoreFactory for F
where
    F: FnMut(Vec<NamedPolicy>) -> Fut,
    Fut: Future<Output = S>,
    S: Store,
{
    type Store = S;

    fn make(&mut self, policies: Vec<NamedPolicy>) -> impl Future<Output = S> {
        self(policies)
    }
}

/// Runs a future to completion on the current thread, parking while it is pending. Enough for a
/// store whose futures complete by themselves (the memory store's are ready at once); a store
/// that needs a runtime's reactor runs the suite inside that runtime instead.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => thread::park(),
        }
    }
}

/// The specification of a store, on the core alone: see the module docs.
///
/// ```
/// use sluice_core::{FixedWindow, Policy, NANOS_PER_SEC};
/// use sluice_store::{conformance::Reference, Check, KeyHash, NamedPolicy};
/// let p = NamedPolicy { name: "a".into(), policy: Policy::from(FixedWindow::new(1, NANOS_PER_SEC).unwrap()) };
/// let mut r = Reference::new(&[p]);
/// let k = KeyHash([1; 16]);
/// let twice = [Check { policy: 0, key: k, cost: 1 }, Check { policy: 0, key: k, cost: 1 }];
/// let v = r.decide(&twice, 0).unwrap();
/// assert!(!v.allowed && v.decisions[0].allowed && !v.decisions[1].allowed);
/// // Nothing was charged: a single check still passes.
/// assert!(r.decide(&twice[..1], 0).unwrap().allowed);
/// ```
#[derive(Debug, Clone)]
pub struct Reference {
    policies: Vec<Policy>,
    states: HashMap<(usize, KeyHash), State>,
}

impl Reference {
    /// No key seen yet, for `policies`.
    pub fn new(policies: &[NamedPolicy]) -> Self {
        Self { policies: policies.iter().map(|p| p.policy).collect(), states: HashMap::new() }
    }

    /// Decides a request at `now` as a conforming store must.
    pub fn decide(&mut self, checks: &[Check], now: Nanos) -> Result<Verdict, StoreError> {
        for (index, c) in checks.iter().enumerate() {
            let Some(p) = self.policies.get(c.policy) else {
                return Err(StoreError::UnknownPolicy { index, policy: c.policy });
            };
            if c.cost > p.limit() {
                return Err(StoreError::Cost { index, source: CostError { cost: c.cost, capacity: p.limit() } });
            }
        }
        let mut work: Vec<((usize, KeyHash), State)> = Vec::new();
        let mut decisions = Vec::with_capacity(checks.len());
        for (index, c) in checks.iter().enumerate() {
            let id = (c.policy, c.key);
            let policy = self.policies[c.policy];
            let at = match work.iter().position(|(k, _)| *k == id) {
                Some(i) => i,
                None => {
                    let s = self.states.get(&id).cloned().unwrap_or_else(|| policy.fresh_state());
                    work.push((id, s));
                    work.len() - 1
                }
            };
            let d = policy.check(&mut work[at].1, now, c.cost).map_err(|source| StoreError::Cost { index, source })?;
            decisions.push(d);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        if allowed {
            self.states.extend(work);
        }
        Ok(Verdict::at(allowed, decisions, now))
    }

    /// Settles charges at `now` as a conforming store must: each with the core's
    /// [`Policy::settle`] on its key's state (a key never seen is fresh).
    pub fn settle(&mut self, settles: &[Settle], now: Nanos) {
        for s in settles {
            let policy = self.policies[s.check.policy];
            let state = self.states.entry((s.check.policy, s.check.key)).or_insert_with(|| policy.fresh_state());
            policy.settle(state, s.charged_at, s.check.cost, s.actual, now);
        }
    }
}

/// A zone whose clocks change twice in the scenarios' first days: UTC+2, UTC+3 from
/// `T0 + 1 day` (its midnight skipped by an hour), UTC+2 again from `T0 + 3 days`.
pub fn changing_zone() -> &'static Zone {
    let t0 = (T0 / NANOS_PER_SEC) as i64;
    let changes = vec![(t0 + 86_400 + 7_000, 3 * 3_600), (t0 + 3 * 86_400 + 50_000, 2 * 3_600)];
    Zone::new("Conformance/Changing", 2 * 3_600, changes).expect("a valid zone").interned()
}

/// The policies the per-algorithm scenarios use: two parameter sets per algorithm (three for the
/// leaky bucket: police, shape, shape with a free burst; and calendar days and months for the
/// fixed and sliding windows, in [`changing_zone`]), every window and token interval a whole number of
/// microseconds.
pub fn policies() -> Vec<NamedPolicy> {
    let ms = NANOS_PER_MILLI;
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.to_string(), policy };
    let valid = "conformance parameters are valid";
    vec![
        named("fw-3-per-1s", FixedWindow::new(3, NANOS_PER_SEC).expect(valid).into()),
        named("fw-10-per-250ms", FixedWindow::new(10, 250 * ms).expect(valid).into()),
        named(
            "fw-4-per-day",
            FixedWindow::calendar(4, CalendarWindows::new(Period::Day, changing_zone())).expect(valid).into(),
        ),
        named(
            "fw-6-per-month",
            FixedWindow::calendar(6, CalendarWindows::new(Period::Month, changing_zone())).expect(valid).into(),
        ),
        named("log-4-per-2s", SlidingLog::new(4, 2 * NANOS_PER_SEC).expect(valid).into()),
        named("log-10-per-500ms", SlidingLog::new(10, 500 * ms).expect(valid).into()),
        named("sw-5-per-1s", SlidingWindow::new(5, NANOS_PER_SEC).expect(valid).into()),
        named("sw-20-per-300ms", SlidingWindow::new(20, 300 * ms).expect(valid).into()),
        named(
            "sw-5-per-day",
            SlidingWindow::calendar(5, CalendarWindows::new(Period::Day, changing_zone())).expect(valid).into(),
        ),
        named(
            "sw-9-per-month",
            SlidingWindow::calendar(9, CalendarWindows::new(Period::Month, changing_zone())).expect(valid).into(),
        ),
        named("tb-5-at-4ps", TokenBucket::new(5, 4.0).expect(valid).into()),
        named("tb-50-at-1000ps", TokenBucket::new(50, 1000.0).expect(valid).into()),
        named("lb-police-2ps-3", LeakyBucket::new(2.0, 3, LeakMode::Police).expect(valid).into()),
        named("lb-shape-10ps-4-d1", LeakyBucket::new(10.0, 4, LeakMode::Shape { delay: 1 }).expect(valid).into()),
        named("lb-shape-5ps-6", LeakyBucket::new(5.0, 6, LeakMode::Shape { delay: 0 }).expect(valid).into()),
    ]
}

/// Runs every scenario, each on a new store.
pub async fn run_all(mut make: impl StoreFactory) {
    fixed_window(&mut make).await;
    sliding_log(&mut make).await;
    sliding_window(&mut make).await;
    token_bucket(&mut make).await;
    leaky_bucket(&mut make).await;
    all_or_nothing(&mut make).await;
    same_key_twice(&mut make).await;
    mixed_requests(&mut make).await;
    errors_charge_nothing(&mut make).await;
    empty_request(&mut make).await;
    settlements(&mut make).await;
    peeks(&mut make).await;
}

/// Fixed window: a boundary burst, then generated single-check traffic, as the core decides.
pub async fn fixed_window(make: &mut impl StoreFactory) {
    for_algorithm(make, "fixed-window", 0xf1).await;
}

/// Sliding log: generated single-check traffic, as the core decides.
pub async fn sliding_log(make: &mut impl StoreFactory) {
    for_algorithm(make, "sliding-log", 0x10).await;
}

/// Sliding window counter: generated single-check traffic, as the core decides (with the
/// `retry_after` tolerance of the module docs).
pub async fn sliding_window(make: &mut impl StoreFactory) {
    for_algorithm(make, "sliding-window", 0x5e).await;
}

/// Token bucket: generated single-check traffic, as the core decides.
pub async fn token_bucket(make: &mut impl StoreFactory) {
    for_algorithm(make, "token-bucket", 0x7b).await;
}

/// Leaky bucket, policing and shaping (with its `delay`): generated traffic, as the core decides.
pub async fn leaky_bucket(make: &mut impl StoreFactory) {
    for_algorithm(make, "leaky-bucket", 0x1b).await;
}

/// Every configured policy of `algorithm`, alone in a store: a burst at a window boundary, then
/// generated traffic over three keys.
async fn for_algorithm(make: &mut impl StoreFactory, algorithm: &str, seed: u64) {
    let chosen: Vec<NamedPolicy> = policies().into_iter().filter(|p| p.policy.name() == algorithm).collect();
    assert!(!chosen.is_empty(), "no conformance policy for {algorithm}");
    for (n, p) in chosen.into_iter().enumerate() {
        let scenario = format!("{algorithm} ({})", p.name);
        let store = make.make(vec![p.clone()]).await;
        let mut reference = Reference::new(std::slice::from_ref(&p));
        let mut rng = SplitMix(seed.wrapping_mul(31).wrapping_add(n as u64));
        let limit = p.policy.limit();
        let window = p.policy.window();
        // The last microsecond of a window, then the first of the next, each with a burst one
        // above the limit.
        let edge = match p.policy {
            Policy::FixedWindow(f) => f.bounds(T0).1,
            Policy::SlidingWindow(f) => f.bounds(T0).1,
            _ => T0 - T0 % window + window,
        } - NANOS_PER_MICRO;
        for now in [edge, edge + NANOS_PER_MICRO] {
            for _ in 0..=limit {
                let checks = [Check { policy: 0, key: key(0), cost: 1 }];
                expect_same(&store, &mut reference, &checks, now, &scenario).await;
            }
        }
        let mut now = edge + NANOS_PER_MICRO;
        for _ in 0..400 {
            now += step(&mut rng, window);
            let cost = cost(&mut rng, limit);
            let checks = [Check { policy: 0, key: key(rng.below(3) as u8 + 1), cost }];
            expect_same(&store, &mut reference, &checks, now, &scenario).await;
        }
    }
}

/// Two limits on one request: a denial by either charges neither; admission charges both.
pub async fn all_or_nothing(make: &mut impl StoreFactory) {
    let valid = "valid parameters";
    let per_ip =
        NamedPolicy { name: "per-ip".into(), policy: FixedWindow::new(3, 60 * NANOS_PER_SEC).expect(valid).into() };
    let per_account = NamedPolicy { name: "per-account".into(), policy: TokenBucket::new(1, 1.0).expect(valid).into() };
    let store = make.make(vec![per_ip, per_account]).await;
    let (ip, account) = (key(1), key(2));
    let both = [Check { policy: 0, key: ip, cost: 1 }, Check { policy: 1, key: account, cost: 1 }];
    let now = T0;
    let v = verdict(&store, &both, now, "all-or-nothing: first").await;
    assert!(v.allowed && v.decisions.iter().all(|d| d.allowed), "all-or-nothing: a first request is admitted: {v:?}");
    assert_eq!((v.decisions[0].remaining, v.decisions[1].remaining), (2, 0), "all-or-nothing: both charged");

    // The account bucket is empty: denied, and the IP window is not charged.
    let v = verdict(&store, &both, now, "all-or-nothing: second").await;
    assert!(!v.allowed, "all-or-nothing: the account limit denies: {v:?}");
    assert!(v.decisions[0].allowed && !v.decisions[1].allowed, "all-or-nothing: which limit denied: {v:?}");
    assert_eq!(v.decisions[1].retry_after, NANOS_PER_SEC, "all-or-nothing: retry when one token is back");
    for expect_remaining in [1, 0] {
        let ip_only = [Check { policy: 0, key: ip, cost: 1 }];
        let v = verdict(&store, &ip_only, now, "all-or-nothing: ip alone").await;
        assert!(v.allowed, "all-or-nothing: the denied request charged the IP limit: {v:?}");
        assert_eq!(v.decisions[0].remaining, expect_remaining, "all-or-nothing: IP charges");
    }

    // Now the IP window is spent: the account bucket (refilled) must not be charged either.
    let later = now + NANOS_PER_SEC;
    let v = verdict(&store, &both, later, "all-or-nothing: ip spent").await;
    assert!(!v.allowed && !v.decisions[0].allowed && v.decisions[1].allowed, "all-or-nothing: {v:?}");
    let account_only = [Check { policy: 1, key: account, cost: 1 }];
    let v = verdict(&store, &account_only, later, "all-or-nothing: account alone").await;
    assert!(v.allowed, "all-or-nothing: the denied request charged the account limit: {v:?}");
}

/// One policy and key named twice in one request: the second check sees the first's charge.
pub async fn same_key_twice(make: &mut impl StoreFactory) {
    let limit = NamedPolicy {
        name: "three".into(),
        policy: FixedWindow::new(3, NANOS_PER_SEC).expect("valid parameters").into(),
    };
    let store = make.make(vec![limit]).await;
    let k = key(7);
    let twice = |a, b| [Check { policy: 0, key: k, cost: a }, Check { policy: 0, key: k, cost: b }];
    let v = verdict(&store, &twice(1, 1), T0, "same key twice: 1+1").await;
    assert!(v.allowed, "same key twice: 1+1 of 3 is admitted: {v:?}");
    assert_eq!((v.decisions[0].remaining, v.decisions[1].remaining), (2, 1), "same key twice: charges accumulate");

    // One unit left: 1 then 1 more is denied as a whole, and charges nothing.
    let v = verdict(&store, &twice(1, 1), T0, "same key twice: over").await;
    assert!(!v.allowed && v.decisions[0].allowed && !v.decisions[1].allowed, "same key twice: {v:?}");
    let one = [Check { policy: 0, key: k, cost: 1 }];
    let v = verdict(&store, &one, T0, "same key twice: after denial").await;
    assert!(v.allowed && v.decisions[0].remaining == 0, "same key twice: the denial charged: {v:?}");
}

/// Generated requests of one to four checks over every algorithm at once, with repeated keys
/// and policies, as [`Reference`] decides them.
pub async fn mixed_requests(make: &mut impl StoreFactory) {
    let all = policies();
    let store = make.make(all.clone()).await;
    let mut reference = Reference::new(&all);
    let mut rng = SplitMix(0x6d69_7865_6473);
    let window = all.iter().map(|p| p.policy.window()).max().unwrap_or(NANOS_PER_SEC);
    let mut now = T0;
    for _ in 0..600 {
        now += step(&mut rng, window);
        let checks = mixed_checks(&mut rng, &all);
        expect_same(&store, &mut reference, &checks, now, "mixed requests").await;
    }
}

/// A request with an unknown policy or an impossible cost is an error for the first bad check,
/// and charges none of its checks.
pub async fn errors_charge_nothing(make: &mut impl StoreFactory) {
    let two = NamedPolicy { name: "two".into(), policy: TokenBucket::new(2, 1.0).expect("valid parameters").into() };
    let store = make.make(vec![two]).await;
    let k = key(9);
    let ok = Check { policy: 0, key: k, cost: 1 };
    let too_big = [ok, Check { policy: 0, key: k, cost: 3 }];
    let got = store.decide(&too_big, Some(T0)).await;
    let want = Err(StoreError::Cost { index: 1, source: CostError { cost: 3, capacity: 2 } });
    assert_eq!(got, want, "errors: a cost above capacity");
    let unknown = [ok, Check { policy: 5, key: k, cost: 1 }];
    let got = store.decide(&unknown, Some(T0)).await;
    assert_eq!(got, Err(StoreError::UnknownPolicy { index: 1, policy: 5 }), "errors: an unknown policy");
    let v = verdict(&store, &[ok, ok], T0, "errors: after").await;
    assert!(v.allowed && v.decisions[1].remaining == 0, "errors: a failed request charged: {v:?}");
}

/// A request with no checks is admitted with no decisions.
pub async fn empty_request(make: &mut impl StoreFactory) {
    let store = make.make(policies()).await;
    let v = verdict(&store, &[], T0, "empty request").await;
    assert!(v.allowed && v.decisions.is_empty(), "empty request: {v:?}");
}

/// Settlements, for every policy: generated single-check requests over two keys, each admitted
/// one settled later — given back in part or whole, or charged beyond what it reserved — in the
/// same window, the next, or later; every decision after it as the core decides. The verdict
/// names the time it was decided at, which is what a settlement names.
pub async fn settlements(make: &mut impl StoreFactory) {
    for (n, p) in policies().into_iter().enumerate() {
        let scenario = format!("settlements ({})", p.name);
        let store = make.make(vec![p.clone()]).await;
        let mut reference = Reference::new(std::slice::from_ref(&p));
        let mut rng = SplitMix(0x5e771e ^ n as u64);
        let (limit, window) = (p.policy.limit(), p.policy.window());
        let mut open: Vec<Settle> = Vec::new();
        let mut now = T0;
        for _ in 0..250 {
            now += step(&mut rng, window);
            if !open.is_empty() && rng.below(3) == 0 {
                let s = open.swap_remove(rng.below(open.len() as u64) as usize);
                let actual = match rng.below(4) {
                    0 => 0,
                    1 => rng.below(s.check.cost + 1),
                    2 => s.check.cost + 1 + rng.below(2 * limit),
                    _ => s.check.cost,
                };
                let settle = [Settle { actual, ..s }];
                reference.settle(&settle, now);
                if let Err(e) = store.settle(&settle, Some(now)).await {
                    panic!("{scenario}: the store could not settle {settle:?}: {e}");
                }
                continue;
            }
            let key_a = key(rng.below(2) as u8 + 1);
            let checks = [Check { policy: 0, key: key_a, cost: cost(&mut rng, limit) }];
            let Some(v) = expect_same(&store, &mut reference, &checks, now, &scenario).await else {
                panic!("{scenario}: the store failed where the core decides");
            };
            assert_eq!(v.charged_at(0), now, "{scenario}: the verdict names the time it was decided at");
            if v.allowed {
                open.push(Settle { check: checks[0], charged_at: v.charged_at(0), actual: 0 });
            }
        }
    }
}

/// One to four checks of any of `all`'s policies, on three keys, at costs up to each limit.
fn mixed_checks(rng: &mut SplitMix, all: &[NamedPolicy]) -> Vec<Check> {
    let n = 1 + rng.below(4) as usize;
    (0..n)
        .map(|_| {
            let policy = rng.below(all.len() as u64) as usize;
            Check { policy, key: key(rng.below(3) as u8 + 1), cost: cost(rng, all[policy].policy.limit()) }
        })
        .collect()
}

/// A peek before every request of generated traffic (one to four checks, every algorithm):
/// it says what the decision at the same time then says, and charges nothing (every decision
/// still agrees with a reference that was never peeked).
pub async fn peeks(make: &mut impl StoreFactory) {
    let all = policies();
    let store = make.make(all.clone()).await;
    let mut reference = Reference::new(&all);
    let mut rng = SplitMix(0x7065_656b);
    let window = all.iter().map(|p| p.policy.window()).max().unwrap_or(NANOS_PER_SEC);
    let mut now = T0;
    for step_no in 0..400 {
        now += step(&mut rng, window);
        let checks = mixed_checks(&mut rng, &all);
        let what = format!("peeks, step {step_no}: {checks:?}");
        let peeked = match store.peek(&checks, Some(now)).await {
            Ok(v) => v,
            Err(e) => panic!("{what}: the store could not peek: {e}"),
        };
        let again = store.peek(&checks, Some(now)).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(peeked, again, "{what}: a peek changed what the next one sees");
        let Some(decided) = expect_same(&store, &mut reference, &checks, now, &what).await else {
            panic!("{what}: the store failed where the core decides");
        };
        assert_eq!(peeked.allowed, decided.allowed, "{what}: the peek said otherwise: {peeked:?} vs {decided:?}");
        assert_eq!(peeked.decisions, decided.decisions, "{what}: the peek's decisions");
    }
}

/// The key for index `i`: fixed across runs.
pub fn key(i: u8) -> KeyHash {
    KeyHasher::from_secret(b"sluice conformance").hash(&[&[i]])
}

async fn verdict<S: Store>(store: &S, checks: &[Check], at: Nanos, what: &str) -> Verdict {
    match store.decide(checks, Some(at)).await {
        Ok(v) => {
            assert_eq!(v.decisions.len(), checks.len(), "{what}: one decision per check");
            v
        }
        Err(e) => panic!("{what}: the store failed: {e}"),
    }
}

/// Decides `checks` on the store and the reference and asserts they agree; the store's verdict
/// when it decided.
async fn expect_same<S: Store>(
    store: &S,
    reference: &mut Reference,
    checks: &[Check],
    at: Nanos,
    what: &str,
) -> Option<Verdict> {
    let want = reference.decide(checks, at);
    let got = store.decide(checks, Some(at)).await;
    let agree = match (&got, &want) {
        (Ok(g), Ok(w)) => {
            g.allowed == w.allowed
                && g.decisions.len() == w.decisions.len()
                && g.decisions
                    .iter()
                    .zip(&w.decisions)
                    .zip(checks)
                    .all(|((g, w), c)| same_decision(g, w, &reference.policies[c.policy]))
        }
        (g, w) => g == w,
    };
    assert!(
        agree,
        "{what}: at t0 + {} us, checks {checks:?}:\n  store:     {got:?}\n  reference: {want:?}",
        (at - T0) / NANOS_PER_MICRO
    );
    got.ok()
}

/// Equal, except that a sliding window's denial may round `retry_after` up to whole microseconds.
fn same_decision(got: &Decision, want: &Decision, policy: &Policy) -> bool {
    if got == want {
        return true;
    }
    let rounded_up = want.retry_after.div_ceil(NANOS_PER_MICRO).saturating_mul(NANOS_PER_MICRO);
    matches!(policy, Policy::SlidingWindow(_))
        && !want.allowed
        && (want.retry_after..=rounded_up).contains(&got.retry_after)
        && Decision { retry_after: want.retry_after, ..*got } == *want
}

/// A time step in whole microseconds: often none, often small, sometimes across windows.
fn step(rng: &mut SplitMix, window: Nanos) -> Nanos {
    let window_us = (window / NANOS_PER_MICRO).max(1);
    let us = match rng.below(20) {
        0..=4 => 0,
        5..=9 => 1 + rng.below(1_000),
        10..=14 => 1 + rng.below(window_us / 4 + 1),
        15..=17 => 1 + rng.below(window_us),
        _ => window_us + rng.below(2 * window_us),
    };
    us * NANOS_PER_MICRO
}

/// A request cost: mostly 1, sometimes more, now and then the whole limit.
fn cost(rng: &mut SplitMix, limit: u64) -> u64 {
    match rng.below(20) {
        0 => limit,
        1..=4 => 1 + rng.below(limit.min(5)),
        _ => 1,
    }
}

/// SplitMix64: a small deterministic generator, so every run and every store sees the same traffic.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` (n >= 1).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
