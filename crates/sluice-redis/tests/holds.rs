//! Holds (a policing bucket's units set apart for a quota lease: `Store::hold`, `Store::release`)
//! over a real Redis, at explicit times: the rules of `scripts/hold.lua` and of the decision and
//! settlement scripts beside holds, to the microsecond, and against a model of those rules for
//! generated traffic, and against the memory store deciding the same traffic. Then on the
//! server's clock through the `Store` trait, on a Redis Cluster
//! and on the primary Redis Sentinel names.
//!
//! The bucket: 10 tokens, one every 100 ms (tau = 1 s).

mod support;

use std::time::Duration;

use std::sync::Arc;

use sluice_core::{FixedWindow, LeakMode, LeakyBucket, ManualClock, NANOS_PER_SEC, Nanos, Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, key_slot};
use sluice_store::{Check, Hold, KeyHasher, MemoryOptions, MemoryStore, NamedPolicy, Settle, Store, StoreError};
use support::{RedisCluster, RedisServer, SentinelSet};

const T: Nanos = 1_700_000_000 * NANOS_PER_SEC;
const MS: Nanos = 1_000_000;
/// The bucket's interval.
const TICK: Nanos = 100 * MS;
/// The id of a key's first hold at `T`: its time in microseconds (ids grow with the time).
const ID: u64 = T / 1_000;

/// `at` in microseconds: the id of a hold granted then, unless the key's last id is later.
fn us(at: Nanos) -> u64 {
    at / 1_000
}

fn policies() -> Vec<NamedPolicy> {
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    vec![
        named("bucket", TokenBucket::new(10, 10.0).unwrap().into()),
        named("window", FixedWindow::new(10, NANOS_PER_SEC).unwrap().into()),
        named("shaper", LeakyBucket::new(10.0, 10, LeakMode::Shape { delay: 0 }).unwrap().into()),
        named("police", LeakyBucket::new(10.0, 10, LeakMode::Police).unwrap().into()),
    ]
}

fn store_on(mut options: RedisOptions) -> RedisStore {
    options.deny_cache_entries = 0;
    options.timeout = Duration::from_secs(5);
    RedisStore::new(policies(), options).expect("valid store")
}

fn store(server: &RedisServer) -> RedisStore {
    store_on(RedisOptions::single(server.url(), OnError::FailClosed))
}

/// A key of the bucket of its own, `cost` units.
fn check(name: &str, cost: u64) -> Check {
    Check { policy: 0, key: KeyHasher::from_secret(b"holds").hash(&[name.as_bytes()]), cost }
}

fn with_cost(c: Check, cost: u64) -> Check {
    Check { cost, ..c }
}

/// (allowed, remaining, reset_after, retry_after) of a decision of `c` at `at`, charging it.
async fn decide(s: &RedisStore, c: Check, at: Nanos) -> (bool, u64, Nanos, Nanos) {
    let v = s.decide_detailed(&[c], Some(at)).await.expect("Redis decides").verdict;
    let d = v.decisions[0];
    assert_eq!(v.at, at);
    (d.allowed, d.remaining, d.reset_after, d.retry_after)
}

/// The same, charging nothing.
async fn peek(s: &RedisStore, c: Check, at: Nanos) -> (bool, u64, Nanos, Nanos) {
    let v = s.peek_checks(&[c], Some(at)).await.expect("Redis decides");
    let d = v.decisions[0];
    (d.allowed, d.remaining, d.reset_after, d.retry_after)
}

/// (granted, id, remaining, reset_after, retry_after) of a hold of `c` for `life` at `at`.
async fn hold(s: &RedisStore, c: Check, life: Nanos, at: Nanos) -> (bool, u64, u64, Nanos, Nanos) {
    let h: Hold = s.hold_at(&c, life, Some(at)).await.expect("Redis holds");
    assert_eq!((h.at, h.decision.limit, h.decision.delay), (at, 10, 0));
    assert_eq!(h.granted, h.decision.allowed);
    (h.granted, h.id, h.decision.remaining, h.decision.reset_after, h.decision.retry_after)
}

#[tokio::test]
async fn a_hold_is_granted_up_to_the_boundary_and_others_see_what_it_leaves() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("boundary", 4);
    // 4 of 10 held: 6 left beside them.
    assert_eq!(hold(&s, k, 5 * NANOS_PER_SEC, T).await, (true, ID, 6, 0, 0));
    // Others see 10 - 4: a request of 1 leaves 5, then one of 5 fits exactly (0.1 + 0.5 + 0.4
    // = tau), then nothing fits until a token comes back (100 ms).
    assert_eq!(decide(&s, with_cost(k, 1), T).await, (true, 5, TICK, 0));
    assert_eq!(decide(&s, with_cost(k, 5), T).await, (true, 0, 6 * TICK, 0));
    assert_eq!(decide(&s, with_cost(k, 1), T).await, (false, 0, 6 * TICK, TICK));
    // A hold of 1 more does not fit either (refused: id 0), and waits as a request would.
    assert_eq!(hold(&s, with_cost(k, 1), 5 * NANOS_PER_SEC, T).await, (false, 0, 0, 6 * TICK, TICK));
    // 100 ms later it fits exactly: the key's second id.
    assert_eq!(hold(&s, with_cost(k, 1), 5 * NANOS_PER_SEC, T + TICK).await, (true, us(T + TICK), 0, 5 * TICK, 0));
    // 5 held now: a request of 6 cannot fit beside them, whatever the bucket: it waits for the
    // first hold's end (T + 5 s).
    assert_eq!(decide(&s, with_cost(k, 6), T + TICK).await, (false, 0, 5 * TICK, 49 * TICK));
    // At T + 1 s the bucket has refilled (tat T + 0.6 s) but for the held 5: 5 left.
    assert_eq!(peek(&s, with_cost(k, 5), T + NANOS_PER_SEC).await, (true, 0, 5 * TICK, 0));
    assert!(!peek(&s, with_cost(k, 6), T + NANOS_PER_SEC).await.0);

    // The state of a key with holds, and its holds' hash (the same `{hash}` tag).
    let key = s.stored_key(&k).unwrap();
    let tat = (T + 6 * TICK) / 1000;
    let (first_end, last_end) = ((T + 5 * NANOS_PER_SEC) / 1000, (T + TICK + 5 * NANOS_PER_SEC) / 1000);
    assert_eq!(server.cli(&["GET", &key]), format!("{tat}:5:{}:{first_end}:{last_end}", us(T + TICK)));
    let fields: Vec<String> = server.cli(&["HGETALL", &format!("{key}:h")]).lines().map(String::from).collect();
    assert_eq!(fields, [ID.to_string(), format!("4:{first_end}"), us(T + TICK).to_string(), format!("1:{last_end}")]);
}

#[tokio::test]
async fn a_hold_not_released_is_charged_whole_at_its_end() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("unreleased", 4);
    assert!(hold(&s, k, NANOS_PER_SEC, T).await.0);
    // Before its end the 4 are held, not spent: at T + 0.9 s 6 are left.
    assert_eq!(peek(&s, with_cost(k, 1), T + 9 * TICK).await, (true, 5, TICK, 0));
    // It ends at T + 1 s, spent: tat = T + 1 s + 4 x 100 ms. At T + 1.2 s, 0.2 s of it remain
    // (2 tokens), with nothing held: a request of 1 leaves 7.
    assert_eq!(peek(&s, with_cost(k, 1), T + 12 * TICK).await, (true, 7, 3 * TICK, 0));
    assert_eq!(decide(&s, with_cost(k, 1), T + 12 * TICK).await, (true, 7, 3 * TICK, 0));
    // Reaped and written: the hash is gone, the state keeps the key's last id.
    let key = s.stored_key(&k).unwrap();
    assert_eq!(server.cli(&["GET", &key]), format!("{}:0:{ID}:0:0", (T + 15 * TICK) / 1000));
    assert_eq!(server.cli(&["EXISTS", &format!("{key}:h")]), "0");
    // A release of it now (late) does nothing: it was counted as spent at its end.
    s.release_at(&k, ID, 4, Some(T + 12 * TICK)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 12 * TICK).await, (true, 6, 4 * TICK, 0));
    // And its id is not given again: ids grow with the time of their grant.
    assert_eq!(hold(&s, with_cost(k, 1), NANOS_PER_SEC, T + 12 * TICK).await.1, us(T + 12 * TICK));
}

#[tokio::test]
async fn a_release_charges_only_what_was_spent_and_only_once() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("release", 5);
    assert_eq!(hold(&s, k, 10 * NANOS_PER_SEC, T).await, (true, ID, 5, 0, 0));
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 4, TICK, 0));
    // 2 of the 5 spent: tat = T + 0.5 s + 0.2 s, nothing held.
    s.release_at(&k, ID, 2, Some(T + 5 * TICK)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 7, 3 * TICK, 0));
    // Released twice, or an unknown id: nothing.
    s.release_at(&k, ID, 5, Some(T + 5 * TICK)).await.unwrap();
    s.release_at(&k, 9, 5, Some(T + 5 * TICK)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 7, 3 * TICK, 0));
    // Spent beyond the hold: charged only the hold's units. Spent 0: nothing charged.
    let (granted, id, ..) = hold(&s, k, 10 * NANOS_PER_SEC, T + 5 * TICK).await;
    assert_eq!((granted, id), (true, us(T + 5 * TICK)));
    s.release_at(&k, id, 50, Some(T + 5 * TICK)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 2, 8 * TICK, 0));
    let (granted, id, ..) = hold(&s, with_cost(k, 2), 10 * NANOS_PER_SEC, T + 5 * TICK).await;
    assert_eq!((granted, id), (true, us(T + 5 * TICK) + 1));
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 0, 8 * TICK, 0));
    s.release_at(&with_cost(k, 2), id, 0, Some(T + 5 * TICK)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * TICK).await, (true, 2, 8 * TICK, 0));
    // No hold lives: the state expires with its tat again (a short TTL beside the grace).
    let key = s.stored_key(&k).unwrap();
    assert_eq!(server.cli(&["EXISTS", &format!("{key}:h")]), "0");
}

#[tokio::test]
async fn refunds_and_overruns_keep_the_holds() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("settle", 4);
    assert!(hold(&s, k, 10 * NANOS_PER_SEC, T).await.0);
    let charged = s.decide_detailed(&[with_cost(k, 3)], Some(T)).await.unwrap().verdict;
    assert_eq!(charged.decisions[0].remaining, 3);
    // 1 of the 3 used: 2 back, tat T + 0.1 s; the 4 still held.
    let settle = |actual| Settle { check: with_cost(k, 3), charged_at: charged.charged_at(0), actual };
    s.settle_charges(&[settle(1)], Some(T)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T).await, (true, 4, 2 * TICK, 0));
    assert!(!peek(&s, with_cost(k, 6), T).await.0, "the hold still takes 4");
    let key = s.stored_key(&k).unwrap();
    let end = (T + 10 * NANOS_PER_SEC) / 1000;
    assert_eq!(server.cli(&["GET", &key]), format!("{}:4:{ID}:{end}:{end}", (T + TICK) / 1000));
    // 2 beyond the 3 reserved: tat T + 0.3 s, the hold kept.
    s.settle_charges(&[settle(5)], Some(T)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T).await, (true, 2, 4 * TICK, 0));
    assert_eq!(server.cli(&["GET", &key]), format!("{}:4:{ID}:{end}:{end}", (T + 3 * TICK) / 1000));
    assert_eq!(server.cli(&["HGET", &format!("{key}:h"), &ID.to_string()]), format!("4:{end}"));
    // Released unspent: the 4 are there again.
    s.release_at(&k, ID, 0, Some(T)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T).await, (true, 6, 4 * TICK, 0));
}

#[tokio::test]
async fn a_key_without_holds_keeps_its_single_number_and_decides_as_before() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("plain", 1);
    assert_eq!(decide(&s, with_cost(k, 3), T).await, (true, 7, 3 * TICK, 0));
    assert_eq!(decide(&s, with_cost(k, 8), T).await, (false, 7, 3 * TICK, TICK));
    assert_eq!(decide(&s, with_cost(k, 7), T + TICK).await, (true, 1, 9 * TICK, 0));
    let key = s.stored_key(&k).unwrap();
    assert_eq!(server.cli(&["GET", &key]), ((T + 10 * TICK) / 1000).to_string());
    assert_eq!(server.cli(&["EXISTS", &format!("{key}:h")]), "0");
    // A refund too.
    let settle = Settle { check: with_cost(k, 7), charged_at: T + TICK, actual: 2 };
    s.settle_charges(&[settle], Some(T + TICK)).await.unwrap();
    assert_eq!(server.cli(&["GET", &key]), ((T + 5 * TICK) / 1000).to_string());
    // The policing leaky bucket holds as the token bucket does.
    let police = Check { policy: 3, ..k };
    let h = s.hold_at(&police, NANOS_PER_SEC, Some(T)).await.unwrap();
    assert_eq!((h.granted, h.id, h.decision.remaining), (true, ID, 9));
}

#[tokio::test]
async fn only_policing_buckets_hold() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("other", 1);
    for policy in [1, 2] {
        let c = Check { policy, ..k };
        let held = s.hold_at(&c, NANOS_PER_SEC, Some(T)).await;
        assert!(matches!(held, Err(StoreError::Unsupported { store: "redis", .. })), "{policy}: {held:?}");
        assert!(matches!(s.release(&c, 1, 1).await, Err(StoreError::Unsupported { .. })));
    }
    assert!(matches!(s.hold_at(&with_cost(k, 11), NANOS_PER_SEC, Some(T)).await, Err(StoreError::Cost { .. })));
    assert_eq!(s.stats().redis_calls, 0, "refused before any call");
}

#[tokio::test]
async fn a_key_with_holds_outlives_them_and_their_charges() {
    let server = RedisServer::start();
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.explicit_time_grace = Duration::ZERO;
    let s = store_on(o);
    // A far future time: TTLs are computed from it alone (no grace).
    let at = T;
    let k = check("expiry", 3);
    assert!(decide(&s, with_cost(k, 2), at).await.0);
    // Held 3 for 60 s: the state (and the hash) live until max(tat, end) + 3 x 100 ms.
    assert!(hold(&s, k, 60 * NANOS_PER_SEC, at).await.0);
    let key = s.stored_key(&k).unwrap();
    let pttl = |name: &str| server.cli(&["PTTL", name]).parse::<i64>().unwrap();
    let expect = 60_300;
    for name in [key.clone(), format!("{key}:h")] {
        let left = pttl(&name);
        assert!((expect - 2_000..=expect).contains(&left), "{name}: PTTL {left}, expected about {expect}");
    }
    // A decision on it keeps both as long.
    assert!(decide(&s, with_cost(k, 1), at).await.0);
    for name in [key.clone(), format!("{key}:h")] {
        let left = pttl(&name);
        assert!((expect - 2_000..=expect).contains(&left), "{name}: PTTL {left}, expected about {expect}");
    }
    // Released: no hold lives, the state expires with its tat (0.3 s + 0.3 s spent = 600 ms).
    s.release_at(&k, ID, 3, Some(at)).await.unwrap();
    assert!(pttl(&key) <= 600, "{}", pttl(&key));
    assert_eq!(server.cli(&["EXISTS", &format!("{key}:h")]), "0");
}

#[tokio::test]
async fn on_the_servers_clock_through_the_store_trait() {
    let server = RedisServer::start();
    let s = store(&server);
    let k = check("clock", 4);
    let wall = sluice_core::wall_clock_now();
    let h = s.hold(&k, 60 * NANOS_PER_SEC).await.unwrap();
    assert!(h.granted && h.id > 0 && h.decision.remaining == 6, "{h:?}");
    assert!(h.at.abs_diff(wall) < 60 * NANOS_PER_SEC, "Redis's clock: {} against {wall}", h.at);
    let v = s.decide(&[with_cost(k, 7)], None).await.unwrap();
    assert!(!v.allowed, "7 do not fit beside the 4 held");
    s.release(&k, h.id, 0).await.unwrap();
    let v = s.decide(&[with_cost(k, 7)], None).await.unwrap();
    assert!(v.allowed, "released: 7 fit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_on_a_cluster_key_live_in_its_slot() {
    let cluster = RedisCluster::start();
    let s = store_on(RedisOptions::cluster(cluster.urls(), OnError::FailClosed));
    let k = check("cluster", 4);
    let key = s.stored_key(&k).unwrap();
    let holds = format!("{key}:h");
    assert_eq!(key_slot(holds.as_bytes()), key_slot(key.as_bytes()));
    let node = cluster.node_of_slot(key_slot(key.as_bytes()));

    assert_eq!(hold(&s, k, 5 * NANOS_PER_SEC, T).await, (true, ID, 6, 0, 0));
    assert_eq!(node.cli(&["EXISTS", &key]), "1");
    assert_eq!(node.cli(&["EXISTS", &holds]), "1");
    assert!(!decide(&s, with_cost(k, 7), T).await.0);
    assert_eq!(decide(&s, with_cost(k, 6), T).await, (true, 0, 6 * TICK, 0));
    // Ended at T + 5 s, charged whole then: tat = T + 5.4 s.
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * NANOS_PER_SEC).await, (true, 5, 5 * TICK, 0));
    // A second hold, released with 1 spent; then the server's clock, through the trait.
    let (granted, id, ..) = hold(&s, k, 5 * NANOS_PER_SEC, T + 5 * NANOS_PER_SEC).await;
    assert_eq!((granted, id), (true, us(T + 5 * NANOS_PER_SEC)));
    s.release_at(&k, id, 1, Some(T + 5 * NANOS_PER_SEC)).await.unwrap();
    assert_eq!(peek(&s, with_cost(k, 1), T + 5 * NANOS_PER_SEC).await, (true, 4, 6 * TICK, 0));
    let other = check("cluster-clock", 3);
    let h = s.hold(&other, 60 * NANOS_PER_SEC).await.unwrap();
    assert!(h.granted && h.id > 0, "{h:?}");
    s.release(&other, h.id, 3).await.unwrap();
    assert_eq!(s.stats().redis_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_on_the_primary_sentinel_names() {
    let set = SentinelSet::start(5_000, None);
    let s = store_on(RedisOptions::sentinel(SentinelSet::MASTER, set.urls(), OnError::FailClosed));
    let k = check("sentinel", 4);
    assert_eq!(hold(&s, k, 5 * NANOS_PER_SEC, T).await, (true, ID, 6, 0, 0));
    assert!(!decide(&s, with_cost(k, 7), T).await.0);
    s.release_at(&k, ID, 1, Some(T)).await.unwrap();
    // 1 spent of the 4: tat T + 100 ms, nothing held; a request of 1 leaves 8.
    assert_eq!(peek(&s, with_cost(k, 1), T).await, (true, 8, 2 * TICK, 0));
    let key = s.stored_key(&k).unwrap();
    assert_eq!(set.nodes[0].cli(&["GET", &key]), format!("{}:0:{ID}:0:0", (T + TICK) / 1000));
}

/// The rules of holds (`Store::hold`), one key of one bucket, in microseconds: what Redis must
/// answer, and the state it must keep (a state deleted when fresh: then its ids start again,
/// from the time).
#[derive(Debug, Clone)]
struct Model {
    capacity: u64,
    t: u64,
    tat: u64,
    /// (id, units, until)
    holds: Vec<(u64, u64, u64)>,
    next: u64,
}

/// (allowed, remaining, reset_after, retry_after) in microseconds.
type Answer = (bool, u64, u64, u64);

impl Model {
    fn held(&self) -> u64 {
        self.holds.iter().map(|h| h.1).sum()
    }

    fn tau(&self) -> u64 {
        self.capacity * self.t
    }

    fn reap(&mut self, now: u64) -> bool {
        self.holds.sort_by_key(|h| (h.2, h.0));
        let ended = self.holds.iter().take_while(|h| h.2 <= now).count();
        for (_, units, until) in self.holds.drain(..ended) {
            self.tat = self.tat.max(until) + units * self.t;
        }
        ended > 0
    }

    /// A write of the state at `now`: deleted when fresh (every hold reaped would leave it so).
    fn save(&mut self, now: u64) {
        let held = self.held();
        let latest = self.holds.iter().map(|h| h.2).max().unwrap_or(0);
        // Kept a moment while its last id is this microsecond's: ids never repeat.
        if self.tat.max(latest) + held * self.t <= now && self.next < now {
            self.tat = 0;
            self.holds.clear();
            self.next = 0;
        }
    }

    /// The decision at `cost` beside the holds, on tat `tat`; the new tat when admitted.
    fn answer(&self, tat: u64, cost: u64, now: u64) -> (Answer, u64) {
        let (held, t, tau) = (self.held(), self.t, self.tau());
        let start = tat.max(now);
        let new = start + cost * t;
        let allowed = new + held * t - now <= tau;
        if allowed {
            return ((true, (tau - (new - now) - held * t) / t, new - now, 0), new);
        }
        let remaining = (tau.saturating_sub(start - now) / t).saturating_sub(held);
        let retry = if cost + held > self.capacity {
            self.holds.iter().map(|h| h.2).min().unwrap() - now
        } else {
            new + held * t - now - tau
        };
        ((false, remaining, start - now, retry), tat)
    }

    fn decide(&mut self, costs: &[u64], now: u64, charge: bool) -> Vec<Answer> {
        let reaped = self.reap(now);
        let mut tat = self.tat;
        let mut out = Vec::new();
        for &cost in costs {
            let (a, after) = self.answer(tat, cost, now);
            tat = after;
            out.push(a);
        }
        if out.iter().all(|a| a.0) && charge {
            self.tat = tat;
            self.save(now);
        } else if reaped {
            self.save(now);
        }
        out
    }

    /// (granted, id, remaining, reset_after, retry_after)
    fn hold(&mut self, units: u64, life: u64, now: u64) -> (bool, u64, Answer) {
        let reaped = self.reap(now);
        let (a, _) = self.answer(self.tat, units, now);
        // A hold leaves tat alone: reset_after is on it, before the units.
        let a = (a.0, a.1, self.tat.max(now) - now, a.3);
        if a.0 {
            self.next = (self.next + 1).max(now);
            let id = self.next;
            if units > 0 {
                self.holds.push((id, units, now + life));
            }
            self.save(now);
            return (true, id, a);
        }
        if reaped {
            self.save(now);
        }
        (false, 0, a)
    }

    fn release(&mut self, id: u64, spent: u64, now: u64) {
        let reaped = self.reap(now);
        if let Some(i) = self.holds.iter().position(|h| h.0 == id) {
            let (_, units, _) = self.holds.remove(i);
            let spent = spent.min(units);
            if spent > 0 {
                self.tat = self.tat.max(now) + spent * self.t;
            }
            self.save(now);
        } else if reaped {
            self.save(now);
        }
    }

    /// A settlement of a charge of `cost` made at `charged`, `actual` used (settle.lua's gcra).
    fn settle(&mut self, cost: u64, charged: u64, actual: u64, now: u64) {
        if actual == cost {
            return;
        }
        self.reap(now);
        let t = self.t;
        if actual < cost {
            if self.tat > charged {
                self.tat = self.tat.saturating_sub((cost - actual) * t).max(charged);
            }
        } else {
            let over = (actual - cost).min(2 * self.capacity);
            self.tat = self.tat.max((self.tat.max(now) + over * t).min(now + 2 * self.tau()));
        }
        self.save(now);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Decide {
        costs: Vec<u64>,
        peek: bool,
    },
    /// A hold; with `renewing`, after the release of one picked as `Release` picks (one call:
    /// `Store::renew`).
    Hold {
        units: u64,
        life: u64,
        renewing: Option<(usize, u64)>,
    },
    /// One of the ids granted so far (`pick` modulo their number), or, one time in that number
    /// plus one, an id never granted.
    Release {
        pick: usize,
        spent: u64,
    },
    Settle {
        charge: usize,
        actual: u64,
    },
}

fn ops(capacity: u64, t: u64) -> impl proptest::strategy::Strategy<Value = Vec<(u64, Op)>> {
    use proptest::prelude::*;
    let tau = capacity * t;
    let step = prop_oneof![Just(0u64), 0..t + 1, 0..tau + 1, 0..3 * tau + 1];
    let cost = 0..=capacity;
    let op = prop_oneof![
        3 => (proptest::collection::vec(cost.clone(), 1..3), any::<bool>())
            .prop_map(|(costs, peek)| Op::Decide { costs, peek }),
        2 => (cost.clone(), prop_oneof![Just(0u64), 0..2 * tau + 1])
            .prop_map(|(units, life)| Op::Hold { units, life, renewing: None }),
        1 => (cost.clone(), prop_oneof![Just(0u64), 0..2 * tau + 1], any::<usize>(), 0..capacity + 3)
            .prop_map(|(units, life, pick, spent)| Op::Hold { units, life, renewing: Some((pick, spent)) }),
        2 => (any::<usize>(), 0..capacity + 3).prop_map(|(pick, spent)| Op::Release { pick, spent }),
        1 => (any::<usize>(), 0..2 * capacity + 2).prop_map(|(charge, actual)| Op::Settle { charge, actual }),
    ];
    proptest::collection::vec((step, op), 1..40)
}

#[test]
fn redis_follows_the_rules_of_holds_for_generated_traffic() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    use std::sync::atomic::{AtomicU32, Ordering};

    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let n = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    // Buckets of 1 to 12 tokens, one every 1 us to 100 ms (whole microseconds).
    let bucket = (1u64..13, prop_oneof![1u64..10, Just(1_000u64), Just(100_000u64)]);
    let case = bucket.prop_flat_map(|(c, t)| (Just((c, t)), ops(c, t)));
    let result = runner.run(&case, |((capacity, t), steps)| {
        let policy = TokenBucket::new(capacity, 1e6 / t as f64).unwrap();
        prop_assume!(policy.interval() == t * 1_000);
        let mut options = RedisOptions::single(server.url(), OnError::FailClosed);
        options.key_prefix = format!("holds{}", n.fetch_add(1, Ordering::Relaxed));
        options.deny_cache_entries = 0;
        options.timeout = Duration::from_secs(5);
        let named = NamedPolicy { name: "b".into(), policy: policy.into() };
        // The memory store, on the same traffic, must answer as Redis does (its ids are its
        // own: a release names the hold granted at the same step).
        let clock = Arc::new(ManualClock::new(0));
        let memory = MemoryStore::new(vec![named.clone()], MemoryOptions::default(), clock.clone());
        let mut granted_here: Vec<u64> = Vec::new();
        let s = RedisStore::new(vec![named], options).expect("valid store");
        let key = KeyHasher::from_secret(b"model").hash(&[b"k"]);
        let check = |cost| Check { policy: 0, key, cost };
        let mut model = Model { capacity, t, tat: 0, holds: Vec::new(), next: 0 };
        let mut charges: Vec<(u64, u64)> = Vec::new();
        let mut granted: Vec<u64> = Vec::new();
        let mut now = T / 1_000;
        let fail = |e: StoreError| TestCaseError::fail(e.to_string());
        let d = |a: Answer| (a.0, a.1, a.2 * 1_000, a.3 * 1_000);
        runtime.block_on(async {
            for (i, (step, op)) in steps.iter().enumerate() {
                now += step;
                let at = now * 1_000;
                let here = format!("step {i} at T + {} us: {op:?}, model {model:?}", now - T / 1_000);
                clock.set(at);
                match op {
                    Op::Decide { costs, peek } => {
                        let checks: Vec<Check> = costs.iter().map(|&c| check(c)).collect();
                        let got = if *peek {
                            s.peek_checks(&checks, Some(at)).await.map_err(fail)?
                        } else {
                            s.decide(&checks, Some(at)).await.map_err(fail)?
                        };
                        let want = model.decide(costs, now, !peek);
                        let got: Vec<_> = got
                            .decisions
                            .iter()
                            .map(|x| (x.allowed, x.remaining, x.reset_after, x.retry_after))
                            .collect();
                        let want: Vec<_> = want.into_iter().map(d).collect();
                        prop_assert_eq!(&got, &want, "{}", here);
                        let in_memory =
                            if *peek { memory.peek(&checks, None).await } else { memory.decide(&checks, None).await };
                        let in_memory: Vec<_> = in_memory
                            .map_err(fail)?
                            .decisions
                            .iter()
                            .map(|x| (x.allowed, x.remaining, x.reset_after, x.retry_after))
                            .collect();
                        prop_assert_eq!(&in_memory, &want, "memory store, {}", here);
                        if !peek && want.iter().all(|a| a.0) {
                            charges.extend(costs.iter().map(|&c| (c, now)));
                        }
                    }
                    Op::Hold { units, life, renewing } => {
                        // The release first, on all three, as `Release` does; then the hold.
                        let released = renewing.map(|(pick, spent)| {
                            let which = pick % (granted.len() + 1);
                            let id = granted.get(which).copied().unwrap_or(1);
                            let id_here = granted_here.get(which).copied().unwrap_or(u64::MAX);
                            model.release(id, spent, now);
                            (id, id_here, spent)
                        });
                        let got = match released {
                            Some((id, _, spent)) => {
                                s.renew_at(&check(*units), life * 1_000, (id, spent), Some(at)).await
                            }
                            None => s.hold_at(&check(*units), life * 1_000, Some(at)).await,
                        }
                        .map_err(fail)?;
                        let (ok, id, a) = model.hold(*units, *life, now);
                        if ok {
                            granted.push(id);
                        }
                        let got = (
                            got.granted,
                            got.id,
                            got.decision.remaining,
                            got.decision.reset_after,
                            got.decision.retry_after,
                            got.at,
                        );
                        let a = d(a);
                        prop_assert_eq!(got, (ok, id, a.1, a.2, a.3, at), "{}", here);
                        let h = match released {
                            Some((_, id_here, spent)) => {
                                memory.renew(&check(*units), life * 1_000, id_here, spent).await
                            }
                            None => memory.hold(&check(*units), life * 1_000).await,
                        }
                        .map_err(fail)?;
                        if h.granted {
                            granted_here.push(h.id);
                        }
                        let h = (h.granted, h.decision.remaining, h.decision.reset_after, h.decision.retry_after, h.at);
                        prop_assert_eq!(h, (ok, a.1, a.2, a.3, at), "memory store, {}", here);
                    }
                    Op::Release { pick, spent } => {
                        let which = pick % (granted.len() + 1);
                        let id = &granted.get(which).copied().unwrap_or(1);
                        let id_here = granted_here.get(which).copied().unwrap_or(u64::MAX);
                        let units = model.holds.iter().find(|h| h.0 == *id).map_or(1, |h| h.1);
                        s.release_at(&check(units), *id, *spent, Some(at)).await.map_err(fail)?;
                        memory.release(&check(units), id_here, *spent).await.map_err(fail)?;
                        model.release(*id, *spent, now);
                    }
                    Op::Settle { charge, actual } => {
                        if charges.is_empty() {
                            continue;
                        }
                        let (cost, charged) = charges.remove(charge % charges.len());
                        let settle = Settle { check: check(cost), charged_at: charged * 1_000, actual: *actual };
                        s.settle_charges(&[settle], Some(at)).await.map_err(fail)?;
                        memory.settle(&[settle], Some(at)).await.map_err(fail)?;
                        model.settle(cost, charged, *actual, now);
                    }
                }
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
