//! Quota leases for hot keys, over any shared [`Store`]: an instance takes `k` units of a key's
//! budget from the store in one call, admits that key's requests from them in memory, and gives
//! back what it did not spend when the lease ends.
//!
//! **Fixed windows.** A lease is a charge of `k` to the window, made only when the window has
//! room for it; giving back is a settlement of that charge. The store's count includes every
//! unit any lease may still spend: a unit is counted when it is leased, so whatever the
//! instances do with their units, the window admits at most its limit. A lease ends no later
//! than its window: the store says how long the window has left when the lease is taken, and
//! the instance stops spending that long after it *sent* the request (the store read its clock
//! later). An instance that dies holding a lease loses its units until the window ends:
//! under-admission, never over.
//!
//! **Buckets** (a token bucket, a leaky bucket that polices). A charge would not do: the bucket
//! refills while the instance holds the units, and could admit them again beside the lease. A
//! lease is a *hold* instead ([`Store::hold`]): the store sets the units apart from what every
//! other decision of the key sees, they do not refill while held, and giving back releases the
//! hold and charges what was spent, then. The tokens in the bucket plus the units held never
//! exceed the capacity, grow only by the refill, and every admission, from the store or from a
//! lease, takes one: at most `capacity + rate x (b - a)` in any interval `[a, b]`, the
//! bucket's own bound. A hold lives [`LeaseOptions::life`] at most; one its instance never
//! gave back (it died) counts as wholly spent then.
//!
//! **Which policies.** Fixed windows and policing buckets; `lease = "auto"` on another policy
//! is refused by the configuration: sliding logs and windows cannot be leased exactly, and a
//! shaping bucket delays what a lease would admit at once (docs/src/scaling.md).
//!
//! **When.** A key takes leases once its local rate reaches `min_rate`; each lease covers about
//! `cover` of that rate, within what the window holds. A key that sees no request for `idle`
//! gives its lease's unspent units back when [`LeasedStore::return_idle`] runs (the gateway runs
//! it on a timer): a burst that stops does not keep its last lease until the window ends. A request whose every check has a
//! leased key with units is admitted without the store; any other request goes to the store as
//! it is, which counts the leased units too. A denial always comes from the store.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::{FixedWindow, ManualClock, Policy, NANOS_PER_SEC};
//! use sluice_store::{Check, KeyHash, LeaseOptions, LeasedStore, MemoryOptions, MemoryStore, NamedPolicy, Store};
//! use sluice_store::conformance::block_on;
//! let clock = Arc::new(ManualClock::new(0));
//! let policy = NamedPolicy { name: "hot".into(), policy: Policy::from(FixedWindow::new(100, NANOS_PER_SEC).unwrap()) };
//! let shared = Arc::new(MemoryStore::new(vec![policy], MemoryOptions::default(), clock.clone()));
//! // Every key leased at once, each lease covering a second of the key's rate so far.
//! let options = LeaseOptions { min_rate: 0.0, cover: NANOS_PER_SEC, ..LeaseOptions::default() };
//! let instance = LeasedStore::new(shared.clone(), vec![true], options, clock.clone());
//! let request = [Check { policy: 0, key: KeyHash([7; 16]), cost: 1 }];
//! let admitted = (0..100).filter(|_| block_on(instance.decide(&request, None)).unwrap().allowed).count();
//! assert_eq!(admitted, 100);
//! assert!(instance.store_calls() <= 10, "a few leases, growing with the rate: {}", instance.store_calls());
//! // Beyond the limit: denied by the store, one call a request.
//! let calls = instance.store_calls();
//! assert!(!block_on(instance.decide(&request, None)).unwrap().allowed);
//! assert!(!block_on(instance.decide(&request, None)).unwrap().allowed);
//! assert!(instance.store_calls() - calls <= 3);
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use sluice_core::{Clock, Decision, LeakMode, NANOS_PER_SEC, Nanos, Policy};

use crate::key::KeyHash;
use crate::store::{
    Check, KeyStats, LeaseStats, NamedPolicy, Reported, ReportedFuture, Settle, SettleFuture, Store, StoreError,
    StoreFuture, Verdict,
};

/// When keys take leases, and how large.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseOptions {
    /// Requests a second, on this instance, at which a key takes leases (below it, every
    /// request goes to the store).
    pub min_rate: f64,
    /// How much of a key's local traffic one lease covers (its size: rate × cover, at least 1).
    pub cover: Nanos,
    /// Keys whose rates and leases are tracked at most; beyond, new keys go to the store.
    pub max_keys: usize,
    /// A request whose every key the store last had no room for is denied here until that
    /// key's window ends, without asking the store. Off for a gateway (the store may meanwhile
    /// get units back from another instance's lease, and admit again); on for a region that
    /// leases its share of a limit held in another region, where nothing may cross regions per
    /// request. Either way never an admission beyond the limit: only more denials.
    pub deny_when_full: bool,
    /// A lease whose key has seen no request for this long is given back by
    /// [`LeasedStore::return_idle`] (else a key whose traffic stops holds its units until its
    /// window ends: an hour-long window could lose a lease's worth for the hour).
    pub idle: Nanos,
    /// How long a bucket's lease lives at most ([`Store::hold`]): units it has not given back
    /// by then count as spent. Longer than `idle`, so that a quiet key's lease is given back
    /// before that.
    pub life: Nanos,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            min_rate: 50.0,
            cover: NANOS_PER_SEC / 10,
            max_keys: 10_000,
            deny_when_full: false,
            idle: NANOS_PER_SEC,
            life: 2 * NANOS_PER_SEC,
        }
    }
}

/// A lease held by this instance.
#[derive(Debug, Clone)]
struct Lease {
    /// The charge the store made for it, or the units it holds (its cost: the units granted).
    check: Check,
    /// When the store made it (what giving units back names).
    charged_at: Nanos,
    /// A bucket's lease: the store's id of its hold ([`Store::hold`]); `None` for a window's
    /// lease, which is a charge.
    hold: Option<u64>,
    /// When the key's limit is whole again, as the store said when the lease was taken (this
    /// instance's clock).
    reset_at: Nanos,
    /// Units not yet spent.
    left: u64,
    /// On this instance's clock: spend nothing from then on.
    expires: Nanos,
    /// The limit, and what the store said was left beside the lease when it was taken.
    limit: u64,
    remaining: u64,
}

/// The keys of leased policies, by policy and key hash.
type Book = HashMap<(usize, KeyHash), Entry, BuildHasherDefault<KeyBits>>;

/// Hashes a book's key by its key hash's own bits: a keyed hash already, which a client cannot
/// steer (so no flood of colliding keys), and a lookup needs no second hash. Measured with
/// callgrind, 100,000 local decisions over 1,000 leased keys: 1,157 instructions a decision,
/// against 2,067 with std's SipHash (a decision looks a key up three times or more).
#[derive(Default)]
struct KeyBits(u64);

impl Hasher for KeyBits {
    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_le_bytes(first);
    }

    fn write_usize(&mut self, n: usize) {
        // The policy (and the key's length): spread over the bits, then mixed with the key's.
        self.0 = self.0.rotate_left(29) ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A key of a leased policy: its local rate, and its lease.
#[derive(Debug, Default)]
struct Entry {
    /// Start of the current second of the rate (this instance's clock).
    second: Nanos,
    /// When its last request came.
    seen: Nanos,
    /// Requests in the current second and in the one before.
    this: u64,
    last: u64,
    lease: Option<Lease>,
    /// A lease is being taken (one at a time per key).
    taking: bool,
    /// Requests waiting for that lease rather than asking the store on their own.
    waiters: Vec<Waker>,
    /// The store had no room for a lease: none is asked again before then (its window's
    /// end), so a denied hot key costs the store one call a request, not two.
    full_until: Nanos,
    /// The store could not answer a lease (down, or unable to hold units): none is asked again
    /// before then, so an outage costs one store call a request, not two.
    quiet_until: Nanos,
}

impl Entry {
    fn saw(&mut self, now: Nanos) {
        self.seen = now;
        let elapsed = now.saturating_sub(self.second);
        if elapsed >= NANOS_PER_SEC {
            self.last = if elapsed < 2 * NANOS_PER_SEC { self.this } else { 0 };
            self.this = 0;
            self.second = now - elapsed % NANOS_PER_SEC;
        }
        self.this += 1;
    }

    /// Requests a second: the last whole second, or this one if it is already busier.
    fn rate(&self) -> f64 {
        self.last.max(self.this) as f64
    }

    fn live(&self, now: Nanos) -> Option<&Lease> {
        self.lease.as_ref().filter(|l| now < l.expires)
    }
}

/// A shared store whose hot keys of fixed-window and bucket policies are decided from leases
/// (see the module documentation).
pub struct LeasedStore {
    inner: Arc<dyn Store>,
    /// Per policy: leased (`lease = "auto"` on a fixed window or a policing bucket).
    leased: Vec<bool>,
    options: LeaseOptions,
    /// This instance's clock: rates and lease expiries.
    clock: Arc<dyn Clock>,
    book: Mutex<Book>,
    /// Calls to the shared store: decisions, leases taken, units given back.
    store_calls: AtomicU64,
    /// Requests admitted from leases.
    local: AtomicU64,
}

impl std::fmt::Debug for LeasedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedStore").field("leased", &self.leased).field("options", &self.options).finish()
    }
}

impl LeasedStore {
    /// `inner` with leases for the policies `leased` marks (by index; a policy [`leasable`]
    /// refuses is never leased, whatever it says), timed on `clock`.
    pub fn new(inner: Arc<dyn Store>, leased: Vec<bool>, options: LeaseOptions, clock: Arc<dyn Clock>) -> Self {
        let leased = inner
            .policies()
            .iter()
            .enumerate()
            .map(|(i, p)| leased.get(i).copied().unwrap_or(false) && leasable(&p.policy))
            .collect();
        Self {
            inner,
            leased,
            options,
            clock,
            book: Mutex::new(Book::default()),
            store_calls: AtomicU64::new(0),
            local: AtomicU64::new(0),
        }
    }

    /// How it leases.
    pub fn options(&self) -> &LeaseOptions {
        &self.options
    }

    /// Calls made to the shared store so far.
    pub fn store_calls(&self) -> u64 {
        self.store_calls.load(Ordering::Relaxed)
    }

    /// Requests admitted from leases so far.
    pub fn admitted_locally(&self) -> u64 {
        self.local.load(Ordering::Relaxed)
    }

    /// Units held unspent by this instance's live leases: counted by the store, admitted by no
    /// one yet (what other instances cannot have meanwhile).
    pub fn held(&self) -> u64 {
        let now = self.clock.now();
        self.book().values().filter_map(|e| e.live(now)).map(|l| l.left).sum()
    }

    /// Gives back the unspent units of every lease whose key has seen no request for
    /// [`LeaseOptions::idle`] (the key leases again when its traffic comes back), and forgets
    /// such keys (so the book holds the keys of the last `idle`, not every key ever seen up to
    /// `max_keys`; a key the store had no room for is kept until its window ends). A gateway
    /// calls it every `idle` or so; the simulator as its log's time passes. Returns the units
    /// given back.
    pub async fn return_idle(&self) -> u64 {
        let now = self.clock.now();
        let idle: Vec<Lease> = {
            let mut book = self.book();
            let quiet = |e: &Entry| !e.taking && now.saturating_sub(e.seen) >= self.options.idle;
            let leases = book
                .values_mut()
                .filter(|e| quiet(e))
                .filter_map(|e| e.lease.take())
                .filter(|l| now < l.expires && (l.left > 0 || l.hold.is_some()))
                .collect();
            book.retain(|_, e| !quiet(e) || now < e.full_until);
            leases
        };
        let mut returned = 0;
        for lease in &idle {
            self.give_back(lease).await;
            returned += lease.left;
        }
        returned
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the request's leased checks in their keys' rates; then, if every check is leased
    /// and its lease has the units, spends them and answers. Else: the checks whose keys are
    /// hot and need a lease (each marked as taking one), on a first look.
    fn try_local(&self, checks: &[Check], now: Nanos, look: Look) -> Result<Verdict, Vec<usize>> {
        let mut book = self.book();
        let mut all_leased = !checks.is_empty();
        for c in checks {
            if !self.leased.get(c.policy).copied().unwrap_or(false) {
                all_leased = false;
                continue;
            }
            let full = book.len() >= self.options.max_keys;
            match book.get_mut(&(c.policy, c.key)) {
                Some(e) if look == Look::AfterWait => e.seen = now,
                Some(e) => e.saw(now),
                None if !full => {
                    let mut e = Entry { second: now, ..Entry::default() };
                    e.saw(now);
                    book.insert((c.policy, c.key), e);
                }
                None => all_leased = false,
            }
        }
        let enough = |c: &Check, book: &Book| {
            book.get(&(c.policy, c.key)).and_then(|e| e.live(now)).is_some_and(|l| l.left >= c.cost)
        };
        if all_leased && checks.iter().all(|c| enough(c, &book)) {
            let mut decisions = Vec::with_capacity(checks.len());
            let mut at_each = Vec::with_capacity(checks.len());
            for c in checks {
                let lease = book.get_mut(&(c.policy, c.key)).and_then(|e| e.lease.as_mut()).expect("checked above");
                lease.left -= c.cost;
                decisions.push(Decision {
                    allowed: true,
                    limit: lease.limit,
                    remaining: lease.remaining + lease.left,
                    reset_after: lease.reset_at.saturating_sub(now),
                    retry_after: 0,
                    delay: 0,
                });
                at_each.push(lease.charged_at);
            }
            let at = at_each[0];
            let at_each = if at_each.iter().all(|&t| t == at) { Vec::new() } else { at_each };
            return Ok(Verdict { allowed: true, decisions, at, at_each });
        }
        let mut wanted = Vec::new();
        // A second look (after a take, or a wait) marks nothing: it takes no lease, and a key
        // marked as taking one would wait for it for ever.
        for (i, c) in checks.iter().enumerate().filter(|_| look == Look::First) {
            if !self.leased.get(c.policy).copied().unwrap_or(false) || enough(c, &book) {
                continue;
            }
            if let Some(e) = book.get_mut(&(c.policy, c.key))
                && !e.taking
                && now >= e.full_until
                && now >= e.quiet_until
                && e.rate() >= self.options.min_rate
            {
                e.taking = true;
                wanted.push(i);
            }
        }
        Err(wanted)
    }

    /// Takes a lease for `check`'s key (giving back what the one before did not spend), sized
    /// to its local rate; nothing when the window has no room.
    async fn take(&self, check: &Check, now: Nanos) {
        let (old, want) = {
            let mut book = self.book();
            let Some(e) = book.get_mut(&(check.policy, check.key)) else { return };
            let per_second = e.rate().max(1.0);
            let want = (per_second * self.options.cover as f64 / NANOS_PER_SEC as f64).ceil() as u64;
            (e.lease.take(), want.max(check.cost))
        };
        // A lease that ended with its window has nothing the store would take back. A bucket's
        // hold is released by the call that takes the next.
        let mut releasing = None;
        if let Some(old) = old.filter(|l| now < l.expires) {
            match old.hold {
                Some(id) => releasing = Some((id, old.check.cost - old.left)),
                None => self.give_back(&old).await,
            }
        }
        let limit = self.inner.policies()[check.policy].policy.limit();
        let mut size = want.min(limit);
        let mut lease = None;
        let mut full_until = 0;
        let mut quiet_until = 0;
        // At most twice: the size wanted, then what the window (or bucket) still holds.
        for _ in 0..2 {
            self.store_calls.fetch_add(1, Ordering::Relaxed);
            let Some((granted, d)) = self.ask(check, size, now, releasing.take()).await else {
                quiet_until = now.saturating_add(self.options.idle);
                break;
            };
            if let Some(l) = granted {
                lease = Some(l);
                break;
            }
            if d.remaining < check.cost || d.remaining >= size {
                full_until = now.saturating_add(d.retry_after);
                break;
            }
            size = d.remaining;
        }
        // The key was forgotten meanwhile: its lease goes back at once.
        let orphan = {
            let mut book = self.book();
            match book.get_mut(&(check.policy, check.key)) {
                Some(e) => {
                    e.lease = lease;
                    e.full_until = full_until;
                    e.quiet_until = quiet_until;
                    None
                }
                None => lease,
            }
        };
        if let Some(l) = orphan {
            self.give_back(&l).await;
        }
    }

    /// Whether another request is taking a lease for a key of `checks`, every one of them
    /// leased (a request with a limit that is not could not be admitted from leases anyway:
    /// waiting would only delay it).
    fn being_taken(&self, checks: &[Check]) -> bool {
        if !checks.iter().all(|c| self.leased.get(c.policy).copied().unwrap_or(false)) {
            return false;
        }
        let book = self.book();
        checks.iter().any(|c| book.get(&(c.policy, c.key)).is_some_and(|e| e.taking))
    }

    /// Asks the store for a lease of `size` units of `check`'s key, asked at `now`: a charge
    /// of a window, a hold of a bucket (with the release of the key's last hold, `releasing`:
    /// its id and units spent, in the same call). The lease when granted, and the store's
    /// decision; `None` when the store could not answer.
    async fn ask(
        &self,
        check: &Check,
        size: u64,
        now: Nanos,
        releasing: Option<(u64, u64)>,
    ) -> Option<(Option<Lease>, Decision)> {
        let charge = Check { cost: size, ..*check };
        let policy = &self.inner.policies()[check.policy].policy;
        if holdable(policy) {
            let h = match releasing {
                Some((id, spent)) => self.inner.renew(&charge, self.options.life, id, spent).await,
                None => self.inner.hold(&charge, self.options.life).await,
            };
            let h = h.ok()?;
            let lease = h.granted.then(|| Lease {
                check: charge,
                charged_at: h.at,
                hold: Some(h.id),
                reset_at: now.saturating_add(h.decision.reset_after),
                left: size,
                // The store's life began when it read its clock, no earlier than `now`.
                expires: now.saturating_add(self.options.life),
                limit: h.decision.limit,
                remaining: h.decision.remaining,
            });
            return Some((lease, h.decision));
        }
        let v = self.inner.decide(std::slice::from_ref(&charge), None).await.ok()?;
        let d = v.decisions[0];
        // Spend nothing past the window's end on the store's clock: `now` is when this instance
        // asked, no later than when the store read its clock.
        let lease = v.allowed.then(|| Lease {
            check: charge,
            charged_at: v.charged_at(0),
            hold: None,
            reset_at: now.saturating_add(d.reset_after),
            left: size,
            expires: now.saturating_add(d.reset_after),
            limit: d.limit,
            remaining: d.remaining,
        });
        Some((lease, d))
    }

    /// Gives back a lease's unspent units: a window's, a settlement of its charge to what was
    /// spent (a window that ended meanwhile is left alone by the store); a bucket's, the release
    /// of its hold, which charges what was spent (also when nothing is left: the hold's units
    /// stay out of the bucket until then).
    async fn give_back(&self, lease: &Lease) {
        if let Some(id) = lease.hold {
            self.store_calls.fetch_add(1, Ordering::Relaxed);
            // A hold not released ends with its life, counted as wholly spent: the strict
            // direction.
            let _ = self.inner.release(&lease.check, id, lease.check.cost - lease.left).await;
            return;
        }
        if lease.left == 0 {
            return;
        }
        let settle =
            [Settle { check: lease.check, charged_at: lease.charged_at, actual: lease.check.cost - lease.left }];
        self.store_calls.fetch_add(1, Ordering::Relaxed);
        // Units that could not be given back stay counted until their window ends: the strict
        // direction.
        let _ = self.inner.settle(&settle, None).await;
    }

    async fn decide_now(&self, checks: &[Check]) -> Result<Reported, StoreError> {
        let now = self.clock.now();
        match self.try_local(checks, now, Look::First) {
            Ok(verdict) => {
                self.local.fetch_add(1, Ordering::Relaxed);
                return Ok(Reported { verdict, degraded: None, answered: true });
            }
            Err(wanted) => {
                // try_local marked every wanted key as taking: each is freed once its take ends,
                // and every one not yet freed if this request is dropped on the way (a guard
                // made only when a key's take begins would leave the later ones marked for ever,
                // and requests waiting for them waiting for ever).
                let mut taking = wanted
                    .iter()
                    .map(|&i| Taking { store: self, key: (checks[i].policy, checks[i].key) })
                    .collect::<Vec<_>>()
                    .into_iter();
                for &i in &wanted {
                    self.take(&checks[i], now).await;
                    drop(taking.next());
                }
                // A request that finds another taking the lease it needs waits for it, rather
                // than asking the store on its own: one store call, not one a request that
                // comes meanwhile (the wait is that call's, which it would have made itself).
                let waited = wanted.is_empty() && self.being_taken(checks);
                if waited {
                    Taken { store: self, checks }.await;
                }
                let look = if waited { Look::AfterWait } else { Look::AfterTake };
                if (waited || !wanted.is_empty())
                    // The clock read again: a lease that ran out while the others were taken
                    // is not spent.
                    && let Ok(verdict) = self.try_local(checks, self.clock.now(), look)
                {
                    self.local.fetch_add(1, Ordering::Relaxed);
                    return Ok(Reported { verdict, degraded: None, answered: true });
                }
            }
        }
        if self.options.deny_when_full
            && let Some(verdict) = self.full_here(checks, now)
        {
            return Ok(Reported { verdict, degraded: None, answered: true });
        }
        self.store_calls.fetch_add(1, Ordering::Relaxed);
        self.inner.decide_reported(checks, None).await
    }

    /// A denial of `checks` made here ([`LeaseOptions::deny_when_full`]): when every one is a
    /// leased key the store had no room for, until its window's end.
    fn full_here(&self, checks: &[Check], now: Nanos) -> Option<Verdict> {
        let book = self.book();
        let mut decisions = Vec::with_capacity(checks.len());
        for c in checks {
            let until = book.get(&(c.policy, c.key)).map(|e| e.full_until).filter(|&t| now < t)?;
            let limit = self.inner.policies().get(c.policy)?.policy.limit();
            let wait = until - now;
            decisions.push(Decision {
                allowed: false,
                limit,
                remaining: 0,
                reset_after: wait,
                retry_after: wait,
                delay: 0,
            });
        }
        (!decisions.is_empty()).then(|| Verdict { allowed: false, decisions, at: now, at_each: Vec::new() })
    }
}

/// Which look at the leases a request takes ([`LeasedStore::try_local`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Its first: it counts in its keys' rates, and may take leases.
    First,
    /// After it took leases: counted again (the simulator's replay does the same, so its
    /// predictions hold), and takes none.
    AfterTake,
    /// After it waited for another request's lease: not counted again (a replay, one request
    /// at a time, never waits), and takes none.
    AfterWait,
}

/// Ends a key's taking of a lease when its [`LeasedStore::take`] ends, or when the request is
/// dropped before (in the middle of a store call, or while another key's lease is taken): the
/// key may take one again, and the requests waiting for it go on.
struct Taking<'a> {
    store: &'a LeasedStore,
    key: (usize, KeyHash),
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        let waiters = match self.store.book().get_mut(&self.key) {
            Some(e) => {
                e.taking = false;
                std::mem::take(&mut e.waiters)
            }
            None => Vec::new(),
        };
        waiters.into_iter().for_each(Waker::wake);
    }
}

/// Ready once no leased key of `checks` is having a lease taken.
struct Taken<'a> {
    store: &'a LeasedStore,
    checks: &'a [Check],
}

impl Future for Taken<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut book = self.store.book();
        let mut pending = false;
        for c in self.checks {
            if let Some(e) = book.get_mut(&(c.policy, c.key))
                && e.taking
            {
                if !e.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    e.waiters.push(cx.waker().clone());
                }
                pending = true;
            }
        }
        if pending { Poll::Pending } else { Poll::Ready(()) }
    }
}

/// Whether `policy` can be leased exactly here: a fixed window (calendar windows too), or a
/// bucket that polices ([`holdable`]).
pub fn leasable(policy: &Policy) -> bool {
    matches!(policy, Policy::FixedWindow(_)) || holdable(policy)
}

/// Whether `policy` is a bucket whose units a store can hold for a lease ([`Store::hold`]): a
/// token bucket, or a leaky bucket that polices (one that shapes delays requests, and a lease
/// admits at once).
pub fn holdable(policy: &Policy) -> bool {
    match policy {
        Policy::TokenBucket(_) => true,
        Policy::LeakyBucket(b) => b.mode() == LeakMode::Police,
        _ => false,
    }
}

impl Store for LeasedStore {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        match at {
            // An explicit time (tests, the simulator) is the store's to keep: no lease.
            Some(_) => self.inner.decide(checks, at),
            None => Box::pin(async move { self.decide_now(checks).await.map(|r| r.verdict) }),
        }
    }

    fn decide_reported<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> ReportedFuture<'a> {
        match at {
            Some(_) => self.inner.decide_reported(checks, at),
            None => Box::pin(self.decide_now(checks)),
        }
    }

    fn policies(&self) -> &[NamedPolicy] {
        self.inner.policies()
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn peek<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
        self.inner.peek(checks, at)
    }

    fn key_stats(&self) -> Vec<KeyStats> {
        self.inner.key_stats()
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn ready(&self) -> bool {
        self.inner.ready()
    }

    fn breaker_open(&self) -> Option<bool> {
        self.inner.breaker_open()
    }

    fn deny_cache_hits(&self) -> Option<u64> {
        self.inner.deny_cache_hits()
    }

    fn lease_stats(&self) -> Option<LeaseStats> {
        Some(LeaseStats {
            admitted_locally: self.admitted_locally(),
            store_calls: self.store_calls(),
            held: self.held(),
        })
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<Nanos>) -> SettleFuture<'a> {
        self.inner.settle(settles, at)
    }

    fn now(&self) -> Option<Nanos> {
        self.inner.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::block_on;
    use crate::{MemoryOptions, MemoryStore};
    use proptest::prelude::*;
    use sluice_core::{FixedWindow, LeakyBucket, ManualClock, TokenBucket};

    const WINDOW: Nanos = NANOS_PER_SEC;

    fn shared(limit: u64, clock: &Arc<ManualClock>) -> Arc<MemoryStore> {
        let policies = vec![
            NamedPolicy { name: "hot".into(), policy: Policy::from(FixedWindow::new(limit, WINDOW).unwrap()) },
            NamedPolicy { name: "bucket".into(), policy: Policy::from(TokenBucket::new(limit, 1.0).unwrap()) },
        ];
        Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock.clone()))
    }

    fn instance(store: &Arc<MemoryStore>, clock: &Arc<ManualClock>, min_rate: f64) -> LeasedStore {
        let options = LeaseOptions { min_rate, ..LeaseOptions::default() };
        LeasedStore::new(store.clone(), vec![true, true], options, clock.clone())
    }

    /// An instance that denies a full key itself ([`LeaseOptions::deny_when_full`]).
    fn region(store: &Arc<MemoryStore>, clock: &Arc<ManualClock>, min_rate: f64) -> LeasedStore {
        let options = LeaseOptions { min_rate, deny_when_full: true, ..LeaseOptions::default() };
        LeasedStore::new(store.clone(), vec![true, true], options, clock.clone())
    }

    fn key(k: u8) -> KeyHash {
        KeyHash([k; 16])
    }

    #[test]
    fn a_cold_key_goes_to_the_store_and_a_hot_one_is_leased() {
        let clock = Arc::new(ManualClock::new(0));
        let store = shared(1_000, &clock);
        let leased = instance(&store, &clock, 50.0);
        let hot = [Check { policy: 0, key: key(1), cost: 1 }];
        // Ten requests, a second apart: never 50 a second, never leased.
        for _ in 0..10 {
            assert!(block_on(leased.decide(&hot, None)).unwrap().allowed);
            clock.advance(WINDOW);
        }
        assert_eq!((leased.store_calls(), leased.admitted_locally()), (10, 0));
        // 400 a second for two seconds: leased once the rate shows; in the second second each
        // lease covers a tenth of a second (40 requests).
        let mut calls_before = 0;
        for i in 0..800 {
            if i == 400 {
                calls_before = leased.store_calls();
            }
            assert!(block_on(leased.decide(&hot, None)).unwrap().allowed);
            clock.advance(WINDOW / 400);
        }
        let second = leased.store_calls() - calls_before;
        assert!(second <= 25, "{second} store calls for the second second's 400 requests");
        assert!(leased.admitted_locally() > 700, "{}", leased.admitted_locally());
    }

    #[test]
    fn a_shaping_leaky_bucket_is_never_leased() {
        let clock = Arc::new(ManualClock::new(0));
        let shaping = LeakyBucket::new(100.0, 1_000, LeakMode::Shape { delay: 0 }).unwrap();
        let policies = vec![NamedPolicy { name: "shaped".into(), policy: Policy::from(shaping) }];
        let store = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock.clone()));
        let options = LeaseOptions { min_rate: 0.0, ..LeaseOptions::default() };
        let leased = LeasedStore::new(store, vec![true], options, clock.clone());
        let bucket = [Check { policy: 0, key: key(2), cost: 1 }];
        for _ in 0..100 {
            block_on(leased.decide(&bucket, None)).unwrap();
        }
        assert_eq!((leased.store_calls(), leased.admitted_locally()), (100, 0));
    }

    #[test]
    fn a_hot_bucket_is_leased_and_its_held_units_are_nobody_elses() {
        let clock = Arc::new(ManualClock::new(0));
        // 100 tokens, one a second (policy 1).
        let store = shared(100, &clock);
        let a = instance(&store, &clock, 0.0);
        let b = instance(&store, &clock, 0.0);
        let bucket = [Check { policy: 1, key: key(3), cost: 1 }];
        let by_a = (0..60).filter(|_| block_on(a.decide(&bucket, None)).unwrap().allowed).count() as u64;
        assert_eq!(by_a, 60);
        assert!(a.admitted_locally() > 40, "most from leases: {}", a.admitted_locally());
        let held = a.held();
        assert!(held > 0, "a holds units");
        // b gets what neither a's admissions nor a's hold took.
        let by_b = (0..100).filter(|_| block_on(b.decide(&bucket, None)).unwrap().allowed).count() as u64;
        assert_eq!(by_a + by_b + a.held() + b.held(), 100, "the bucket's capacity exactly");
        // Ten seconds later: the holds ended with their life (two seconds), their units counted
        // as spent; ten tokens came back, and no more.
        clock.advance(10 * NANOS_PER_SEC);
        assert_eq!(a.held(), 0);
        let c = instance(&store, &clock, 1_000.0); // never leases: every request to the store
        let by_c = (0..100).filter(|_| block_on(c.decide(&bucket, None)).unwrap().allowed).count() as u64;
        assert_eq!(by_c, 10);
    }

    #[test]
    fn a_store_that_cannot_lease_is_asked_once_a_request_and_a_lease_again_after_idle() {
        let clock = Arc::new(ManualClock::new(0));
        let store = Scripted::new(shared(1_000, &clock), false, false);
        let options = LeaseOptions { min_rate: 0.0, ..LeaseOptions::default() };
        let leased = LeasedStore::new(store, vec![true, true], options, clock.clone());
        let bucket = [Check { policy: 1, key: key(9), cost: 1 }];
        for _ in 0..100 {
            assert!(block_on(leased.decide(&bucket, None)).unwrap().allowed);
        }
        // One lease asked for and refused, then every request on its own.
        assert_eq!((leased.store_calls(), leased.admitted_locally()), (101, 0));
        clock.advance(options.idle);
        block_on(leased.decide(&bucket, None)).unwrap();
        assert_eq!(leased.store_calls(), 103, "asked again after idle");
    }

    /// A shared store whose holds never answer while `stall` is set, and which cannot hold
    /// units at all without `holds` (as a Redis store whose scripts are older than holds).
    struct Scripted {
        inner: Arc<MemoryStore>,
        stall: std::sync::atomic::AtomicBool,
        holds: bool,
    }

    impl Scripted {
        fn new(inner: Arc<MemoryStore>, stall: bool, holds: bool) -> Arc<Self> {
            Arc::new(Self { inner, stall: stall.into(), holds })
        }
    }

    impl Store for Scripted {
        fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
            self.inner.decide(checks, at)
        }
        fn policies(&self) -> &[NamedPolicy] {
            self.inner.policies()
        }
        fn kind(&self) -> &'static str {
            "scripted"
        }
        fn hold<'a>(&'a self, check: &'a Check, life: Nanos) -> crate::store::HoldFuture<'a> {
            if !self.holds {
                let unsupported = StoreError::Unsupported { store: "scripted", what: "hold a bucket's units" };
                return Box::pin(std::future::ready(Err(unsupported)));
            }
            if self.stall.load(Ordering::Relaxed) {
                Box::pin(std::future::pending())
            } else {
                self.inner.hold(check, life)
            }
        }
        fn release<'a>(&'a self, check: &'a Check, id: u64, spent: u64) -> SettleFuture<'a> {
            self.inner.release(check, id, spent)
        }
    }

    #[test]
    fn requests_wait_for_the_lease_being_taken_and_a_take_dropped_midway_frees_the_key() {
        let clock = Arc::new(ManualClock::new(0));
        let store = Scripted::new(shared(1_000, &clock), true, true);
        let options = LeaseOptions { min_rate: 0.0, ..LeaseOptions::default() };
        // The window (policy 0) is not leased here; the bucket is.
        let leased = LeasedStore::new(store.clone(), vec![false, true], options, clock.clone());
        let bucket = [Check { policy: 1, key: key(8), cost: 1 }];
        let mut cx = Context::from_waker(Waker::noop());
        // The first request takes a lease, and the store does not answer.
        let mut first = leased.decide(&bucket, None);
        assert!(first.as_mut().poll(&mut cx).is_pending());
        assert_eq!(leased.store_calls(), 1);
        // The second waits for it, asking the store nothing.
        let mut second = leased.decide(&bucket, None);
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert_eq!(leased.store_calls(), 1, "a request waiting for the lease asks nothing");
        // A request with a limit that is not leased could not be admitted from leases: it does
        // not wait, and goes to the store at once.
        let mixed = [bucket[0], Check { policy: 0, key: key(8), cost: 1 }];
        let mut third = leased.decide(&mixed, None);
        assert!(matches!(third.as_mut().poll(&mut cx), Poll::Ready(Ok(v)) if v.allowed), "it did not wait");
        assert_eq!(leased.store_calls(), 2);
        // The first is dropped (its client went away) in the middle of its call: the second goes
        // on, to the store on its own, and the key is free to take a lease again.
        drop(first);
        match second.as_mut().poll(&mut cx) {
            Poll::Ready(v) => assert!(v.unwrap().allowed),
            Poll::Pending => panic!("still waiting for a take that was dropped"),
        }
        store.stall.store(false, Ordering::Relaxed);
        assert!(block_on(leased.decide(&bucket, None)).unwrap().allowed);
        assert_eq!(leased.admitted_locally(), 1, "a lease was taken again, and spent");
    }

    #[test]
    fn a_request_dropped_while_taking_the_first_of_two_leases_frees_both_keys() {
        let clock = Arc::new(ManualClock::new(0));
        let store = Scripted::new(shared(1_000, &clock), true, true);
        let options = LeaseOptions { min_rate: 0.0, ..LeaseOptions::default() };
        let leased = LeasedStore::new(store.clone(), vec![true, true], options, clock.clone());
        let (bucket, window) = (Check { policy: 1, key: key(10), cost: 1 }, Check { policy: 0, key: key(11), cost: 1 });
        let mut cx = Context::from_waker(Waker::noop());
        // Both keys want a lease; the bucket's is taken first, and the store does not answer.
        let (pair, single) = ([bucket, window], [window]);
        let mut both = leased.decide_reported(&pair, None);
        assert!(both.as_mut().poll(&mut cx).is_pending());
        drop(both);
        // The window's key was never reached: it must be free too, not waited for for ever.
        store.stall.store(false, Ordering::Relaxed);
        let mut alone = leased.decide(&single, None);
        assert!(
            matches!(alone.as_mut().poll(&mut cx), Poll::Ready(Ok(ref v)) if v.allowed),
            "a request on the second key waits for a take nobody makes"
        );
    }

    #[test]
    fn a_hold_given_back_charges_what_was_spent_and_one_never_given_back_all_of_it() {
        let clock = Arc::new(ManualClock::new(0));
        let store = shared(100, &clock);
        let bucket = [Check { policy: 1, key: key(4), cost: 1 }];
        let c = instance(&store, &clock, 1_000.0); // the store's view, request by request
        // a spends 10 of its lease and goes quiet: after `idle` it gives the rest back.
        let options = LeaseOptions { min_rate: 0.0, cover: 20 * NANOS_PER_SEC, ..LeaseOptions::default() };
        let a = LeasedStore::new(store.clone(), vec![true, true], options, clock.clone());
        for _ in 0..10 {
            assert!(block_on(a.decide(&bucket, None)).unwrap().allowed);
        }
        assert!(a.held() > 0);
        clock.advance(NANOS_PER_SEC);
        assert!(block_on(a.return_idle()) > 0);
        assert_eq!(a.held(), 0);
        // The 10 spent are charged when given back, a second after they were admitted: the
        // bucket was full meanwhile, so that second refilled nothing (the price of a lease).
        let left = (0..200).filter(|_| block_on(c.decide(&bucket, None)).unwrap().allowed).count();
        assert_eq!(left, 90);
        // An instance that dies holding units: they count as spent when its hold's life ends.
        clock.advance(100 * NANOS_PER_SEC);
        let dead = LeasedStore::new(store.clone(), vec![true, true], options, clock.clone());
        for _ in 0..10 {
            assert!(block_on(dead.decide(&bucket, None)).unwrap().allowed);
        }
        let held = dead.held();
        assert!(held > 0);
        drop(dead);
        clock.advance(options.life);
        let after = (0..200).filter(|_| block_on(c.decide(&bucket, None)).unwrap().allowed).count() as u64;
        // The whole hold charged at its end; the bucket was full all along, so nothing refilled.
        assert_eq!(after, 100 - 10 - held);
    }

    #[test]
    fn leased_units_are_counted_and_a_window_ends_every_lease() {
        let clock = Arc::new(ManualClock::new(0));
        let store = shared(100, &clock);
        let a = instance(&store, &clock, 0.0);
        let b = instance(&store, &clock, 0.0);
        let hot = [Check { policy: 0, key: key(3), cost: 1 }];
        // a takes 60, holding a lease's unspent units; b then gets the rest, from the store and
        // its own leases: all but what a still holds.
        let by_a = (0..60).filter(|_| block_on(a.decide(&hot, None)).unwrap().allowed).count() as u64;
        assert!(a.held() > 0, "a holds a lease");
        let by_b = (0..100).filter(|_| block_on(b.decide(&hot, None)).unwrap().allowed).count() as u64;
        assert_eq!((by_a, by_a + by_b + a.held() + b.held()), (60, 100), "the window's limit exactly");
        // The next window: a's old lease has expired; what it held is the store's again.
        clock.advance(WINDOW);
        let next = (0..150).filter(|_| block_on(a.decide(&hot, None)).unwrap().allowed).count();
        assert_eq!(next, 100);
    }

    #[test]
    fn denying_a_full_key_here_asks_the_store_nothing_until_its_window_ends() {
        let clock = Arc::new(ManualClock::new(0));
        let store = shared(100, &clock);
        let here = region(&store, &clock, 0.0);
        let hot = [Check { policy: 0, key: key(4), cost: 1 }];
        let admitted = (0..100).filter(|_| block_on(here.decide(&hot, None)).unwrap().allowed).count();
        assert_eq!(admitted, 100);
        // The window is spent: one call finds no room for a lease (and one denial from the
        // store), then every denial is made here, saying when the window ends.
        clock.advance(WINDOW / 4);
        let calls = here.store_calls();
        for _ in 0..50 {
            let v = block_on(here.decide(&hot, None)).unwrap();
            assert!(!v.allowed);
            assert_eq!(v.decisions[0].retry_after, WINDOW * 3 / 4);
        }
        assert!(here.store_calls() - calls <= 3, "{} store calls for 50 denials", here.store_calls() - calls);
        // The next window: leased again.
        clock.advance(WINDOW * 3 / 4);
        assert!(block_on(here.decide(&hot, None)).unwrap().allowed);
        // Without the option, a denied hot key asks the store each time.
        let store = shared(10, &clock);
        let gateway = instance(&store, &clock, 0.0);
        let warm = [Check { policy: 0, key: key(5), cost: 1 }];
        for _ in 0..10 {
            block_on(gateway.decide(&warm, None)).unwrap();
        }
        let calls = gateway.store_calls();
        for _ in 0..50 {
            assert!(!block_on(gateway.decide(&warm, None)).unwrap().allowed);
        }
        assert!(gateway.store_calls() - calls >= 50);
    }

    #[test]
    fn a_quiet_key_gives_its_lease_back_after_idle_and_another_instance_spends_it() {
        let clock = Arc::new(ManualClock::new(0));
        let policies = vec![NamedPolicy {
            name: "hourly".into(),
            policy: Policy::from(FixedWindow::new(1_000, 3_600 * NANOS_PER_SEC).unwrap()),
        }];
        let store: Arc<MemoryStore> = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock.clone()));
        let options = LeaseOptions { min_rate: 0.0, cover: NANOS_PER_SEC, ..LeaseOptions::default() };
        let a = LeasedStore::new(store.clone(), vec![true], options, clock.clone());
        let b = LeasedStore::new(store.clone(), vec![true], options, clock.clone());
        let hot = [Check { policy: 0, key: key(6), cost: 1 }];
        // a: a burst of 300 in a second, leasing at that rate, then nothing.
        for _ in 0..300 {
            assert!(block_on(a.decide(&hot, None)).unwrap().allowed);
            clock.advance(NANOS_PER_SEC / 300);
        }
        let held = a.held();
        assert!(held > 0, "a holds a lease sized to its burst");
        // Not yet idle: nothing given back.
        assert_eq!(block_on(a.return_idle()), 0);
        clock.advance(NANOS_PER_SEC);
        assert_eq!(block_on(a.return_idle()), held);
        assert_eq!(a.held(), 0);
        // b gets the whole rest of the hour's 1,000: nothing is stranded with a.
        let by_b = (0..1_000).filter(|_| block_on(b.decide(&hot, None)).unwrap().allowed).count() as u64;
        assert_eq!(300 + by_b + b.held(), 1_000);
    }

    #[test]
    fn the_book_forgets_quiet_keys_so_new_keys_still_lease_past_max_keys() {
        let clock = Arc::new(ManualClock::new(0));
        let store = shared(1_000_000, &clock);
        let options = LeaseOptions { min_rate: 0.0, max_keys: 10, ..LeaseOptions::default() };
        let leased = LeasedStore::new(store.clone(), vec![true, true], options, clock.clone());
        // Ten keys fill the book; a second later they are quiet and forgotten.
        for k in 0..10 {
            block_on(leased.decide(&[Check { policy: 0, key: key(k), cost: 1 }], None)).unwrap();
        }
        clock.advance(NANOS_PER_SEC);
        block_on(leased.return_idle());
        // Ten new keys lease (min_rate 0: from their first request), both requests of each
        // admitted from its lease; with the book still full, every one would go to the store.
        let before = leased.admitted_locally();
        for k in 10..20 {
            let check = [Check { policy: 0, key: key(k), cost: 1 }];
            block_on(leased.decide(&check, None)).unwrap();
            block_on(leased.decide(&check, None)).unwrap();
        }
        assert_eq!(leased.admitted_locally() - before, 20, "new keys lease once quiet ones are forgotten");
    }

    /// What a run did: per instance, a request's key and cost, time moved, or the instance
    /// dying (its leases lost).
    #[derive(Debug, Clone)]
    enum Step {
        Ask { instance: usize, key: u8, cost: u64 },
        Advance(Nanos),
        Die(usize),
        ReturnIdle(usize),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            20 => (0usize..4, 0u8..3, 1u64..4).prop_map(|(instance, key, cost)| Step::Ask { instance, key, cost }),
            2 => (0..WINDOW / 2).prop_map(Step::Advance),
            1 => (0usize..4).prop_map(Step::Die),
            2 => (0usize..4).prop_map(Step::ReturnIdle),
        ];
        proptest::collection::vec(step, 1..600)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Four instances sharing one store, any interleaving of requests, time and deaths:
        /// no window of any key admits more than its limit, counting every admission wherever
        /// it was decided.
        #[test]
        fn no_window_admits_beyond_its_limit_across_instances(
            limit in 1u64..40,
            min_rate in prop_oneof![Just(0.0), Just(5.0)],
            deny_when_full: bool,
            steps in steps(),
        ) {
            let clock = Arc::new(ManualClock::new(0));
            let store = shared(limit, &clock);
            let make = if deny_when_full { region } else { instance };
            let mut instances: Vec<LeasedStore> = (0..4).map(|_| make(&store, &clock, min_rate)).collect();
            let mut admitted: HashMap<(u8, Nanos), u64> = HashMap::new();
            for step in steps {
                match step {
                    Step::Ask { instance, key: k, cost } => {
                        let checks = [Check { policy: 0, key: key(k), cost: cost.min(limit) }];
                        let v = block_on(instances[instance].decide(&checks, None)).unwrap();
                        if v.allowed {
                            let window = clock.now() / WINDOW;
                            *admitted.entry((k, window)).or_default() += cost.min(limit);
                        }
                    }
                    Step::Advance(d) => clock.advance(d),
                    Step::Die(i) => instances[i] = make(&store, &clock, min_rate),
                    Step::ReturnIdle(i) => {
                        block_on(instances[i].return_idle());
                    }
                }
            }
            for ((k, w), n) in admitted {
                prop_assert!(n <= limit, "key {k}, window {w}: {n} admitted, limit {limit}");
            }
        }

        /// The same for a token bucket held by leases: in any interval `[a, b]`, the units
        /// admitted by every instance together are at most `capacity + (b - a) / interval`, the
        /// bucket's own bound.
        #[test]
        fn no_interval_admits_beyond_the_bucket_across_instances(
            capacity in 1u64..40,
            per_second in prop_oneof![Just(2.0), Just(10.0), Just(50.0)],
            min_rate in prop_oneof![Just(0.0), Just(5.0)],
            life in prop_oneof![Just(WINDOW / 4), Just(2 * WINDOW)],
            steps in steps(),
        ) {
            let clock = Arc::new(ManualClock::new(0));
            let bucket = TokenBucket::new(capacity, per_second).unwrap();
            let interval = bucket.interval();
            let policies = vec![NamedPolicy { name: "bucket".into(), policy: Policy::from(bucket) }];
            let store = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock.clone()));
            let options = LeaseOptions { min_rate, life, ..LeaseOptions::default() };
            let make = || LeasedStore::new(store.clone(), vec![true], options, clock.clone());
            let mut instances: Vec<LeasedStore> = (0..4).map(|_| make()).collect();
            let mut admitted: HashMap<u8, Vec<(Nanos, u64)>> = HashMap::new();
            for step in steps {
                match step {
                    Step::Ask { instance, key: k, cost } => {
                        let cost = cost.min(capacity);
                        let checks = [Check { policy: 0, key: key(k), cost }];
                        if block_on(instances[instance].decide(&checks, None)).unwrap().allowed {
                            admitted.entry(k).or_default().push((clock.now(), cost));
                        }
                    }
                    Step::Advance(d) => clock.advance(d),
                    Step::Die(i) => instances[i] = make(),
                    Step::ReturnIdle(i) => {
                        block_on(instances[i].return_idle());
                    }
                }
            }
            for (k, times) in admitted {
                for i in 0..times.len() {
                    let mut sum = 0;
                    for &(t, cost) in &times[i..] {
                        sum += cost;
                        let bound = capacity + (t - times[i].0) / interval;
                        prop_assert!(sum <= bound, "key {k}: {sum} admitted from {} to {t}, bound {bound}", times[i].0);
                    }
                }
            }
        }
    }
}
