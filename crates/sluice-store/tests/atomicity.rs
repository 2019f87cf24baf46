//! Several limits per request decided together, and concurrency: exact counts under contention,
//! no deadlock whatever the order of keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, SlidingLog, SlidingWindow, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, Store, Verdict};

const T: u64 = 1_000 * NANOS_PER_SEC;

fn named(name: &str, policy: impl Into<Policy>) -> NamedPolicy {
    NamedPolicy { name: name.into(), policy: policy.into() }
}

fn store(policies: Vec<NamedPolicy>) -> MemoryStore {
    MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(T)))
}

/// A key in shard `shard` (of a power-of-two count up to 2^16), distinct per `n`.
fn key(shard: u16, n: u64) -> KeyHash {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    k[8..10].copy_from_slice(&shard.to_le_bytes());
    KeyHash(k)
}

fn check(policy: usize, key: KeyHash) -> Check {
    Check { policy, key, cost: 1 }
}

fn remaining(v: &Verdict) -> Vec<u64> {
    v.decisions.iter().map(|d| d.remaining).collect()
}

#[test]
fn a_denial_by_one_limit_charges_none() {
    let s = store(vec![
        named("window", FixedWindow::new(5, 60 * NANOS_PER_SEC).unwrap()),
        named("bucket", TokenBucket::new(2, 0.001).unwrap()),
        named("log", SlidingLog::new(5, 60 * NANOS_PER_SEC).unwrap()),
        named("counter", SlidingWindow::new(5, 60 * NANOS_PER_SEC).unwrap()),
    ]);
    let (a, b) = (key(1, 1), key(2, 2));
    let request = [check(0, a), check(1, b), check(2, a), check(3, b)];
    assert_eq!(remaining(&s.decide_at(&request, T).unwrap()), [4, 1, 4, 4]);
    assert_eq!(remaining(&s.decide_at(&request, T).unwrap()), [3, 0, 3, 3]);

    // The bucket is empty: every other limit would admit, none is charged, at any later moment too.
    for i in 0..3 {
        let v = s.decide_at(&request, T + i).unwrap();
        assert!(!v.allowed);
        let allowed: Vec<bool> = v.decisions.iter().map(|d| d.allowed).collect();
        assert_eq!(allowed, [true, false, true, true]);
        assert_eq!(remaining(&v), [2, 0, 2, 2], "decisions as if the admitting limits were charged");
    }
    // Each admitting limit alone still has its 3 units left.
    for (policy, k) in [(0, a), (2, a), (3, b)] {
        let v = s.decide_at(&[check(policy, k)], T + 10).unwrap();
        assert!(v.allowed);
        assert_eq!(v.decisions[0].remaining, 2, "policy {policy} was charged by a denied request");
    }
}

#[test]
fn a_denial_leaves_new_keys_unstored() {
    let s = store(vec![
        named("a", FixedWindow::new(1, NANOS_PER_SEC).unwrap()),
        named("b", SlidingLog::new(3, NANOS_PER_SEC).unwrap()),
    ]);
    let k = key(0, 1);
    assert!(s.decide_at(&[check(0, k)], T).unwrap().allowed);
    let fresh = key(3, 99);
    let v = s.decide_at(&[check(1, fresh), check(0, k)], T).unwrap();
    assert!(!v.allowed);
    let keys: Vec<usize> = s.stats().iter().map(|p| p.keys).collect();
    assert_eq!(keys, [1, 0], "a denied request stored its new key");
}

#[test]
fn the_same_key_twice_sees_its_own_charge() {
    let s = store(vec![
        named("bucket", TokenBucket::new(3, 0.001).unwrap()),
        named("log", SlidingLog::new(3, NANOS_PER_SEC).unwrap()),
    ]);
    let k = key(5, 5);
    for policy in [0, 1] {
        let twice = [Check { policy, key: k, cost: 2 }, Check { policy, key: k, cost: 1 }];
        let v = s.decide_at(&twice, T).unwrap();
        assert!(v.allowed, "{policy}: {v:?}");
        assert_eq!(remaining(&v), [1, 0]);
        // Empty now: 1 + 1 is denied at the first check already, and a lone check too.
        let v = s.decide_at(&[check(policy, k), check(policy, k)], T).unwrap();
        assert!(!v.allowed);
        assert!(!s.decide_at(&[check(policy, k)], T).unwrap().allowed);
    }
    // The same key under two policies is two keys.
    let other = key(5, 6);
    let v = s.decide_at(&[check(0, other), check(1, other), check(0, other)], T).unwrap();
    assert!(v.allowed);
    assert_eq!(remaining(&v), [2, 2, 1]);
}

#[test]
fn a_second_check_on_a_stored_key_can_deny_the_whole_request() {
    let s = store(vec![named("pair", FixedWindow::new(2, NANOS_PER_SEC).unwrap())]);
    let k = key(1, 1);
    assert!(s.decide_at(&[check(0, k)], T).unwrap().allowed);
    let v = s.decide_at(&[check(0, k), check(0, k)], T).unwrap();
    assert!(!v.allowed);
    assert_eq!(v.decisions[0].remaining, 0);
    assert!(s.decide_at(&[check(0, k)], T).unwrap().allowed, "the first of the pair was charged");
}

/// `threads` threads send `per_thread` requests each; returns how many were admitted.
fn hammer(s: &Arc<MemoryStore>, request: Vec<Check>, threads: usize, per_thread: usize) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (s, admitted, request) = (Arc::clone(s), Arc::clone(&admitted), request.clone());
            thread::spawn(move || {
                for _ in 0..per_thread {
                    if s.decide_now(&request).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

#[test]
fn eight_threads_on_one_key_admit_exactly_the_capacity() {
    let policies = [
        named("tiny-refill", TokenBucket::new(1_000, 1e-6).unwrap()),
        named("huge-window", FixedWindow::new(1_000, 1_000_000 * NANOS_PER_SEC).unwrap()),
        named("log", SlidingLog::new(1_000, 1_000_000 * NANOS_PER_SEC).unwrap()),
        named("counter", SlidingWindow::new(1_000, 1_000_000 * NANOS_PER_SEC).unwrap()),
    ];
    for p in policies {
        let name = p.name.clone();
        let s = Arc::new(store(vec![p]));
        let admitted = hammer(&s, vec![check(0, key(3, 42))], 8, 10_000);
        assert_eq!(admitted, 1_000, "{name}");
    }
}

#[test]
fn eight_threads_with_two_limits_charge_both_or_neither() {
    let s = Arc::new(store(vec![
        named("wide", FixedWindow::new(1_000, 1_000_000 * NANOS_PER_SEC).unwrap()),
        named("narrow", TokenBucket::new(500, 1e-6).unwrap()),
    ]));
    let (a, b) = (key(1, 1), key(2, 2));
    let admitted = hammer(&s, vec![check(0, a), check(1, b)], 8, 5_000);
    assert_eq!(admitted, 500);
    // Exactly 500 charges reached the wide limit: 500 more fit, not one above.
    let v = s.decide_now(&[Check { policy: 0, key: a, cost: 500 }]).unwrap();
    assert!(v.allowed && v.decisions[0].remaining == 0, "{v:?}");
}

#[test]
fn opposite_lock_orders_never_deadlock() {
    let s = Arc::new(store(vec![
        named("a", TokenBucket::new(1_000_000, 1e6).unwrap()),
        named("b", FixedWindow::new(1_000_000, NANOS_PER_SEC).unwrap()),
    ]));
    // The rebuilt store shares both tables under swapped indices: its policy 0 is `b`.
    let swapped = Arc::new(s.rebuild(vec![s.policies()[1].clone(), s.policies()[0].clone()]));
    let (k1, k2) = (key(1, 1), key(60, 2));
    let forward = vec![check(0, k1), check(0, k2), check(1, k1), check(1, k2)];
    let backward: Vec<Check> = forward.iter().rev().copied().collect();
    let across = vec![check(0, k2), check(1, k1), check(0, k1), check(1, k2)];
    let (done, finished) = mpsc::channel();
    let jobs = [(Arc::clone(&s), forward), (Arc::clone(&s), backward), (swapped, across)];
    for (store, request) in jobs {
        let done = done.clone();
        thread::spawn(move || {
            for i in 0..20_000u64 {
                store.decide_at(&request, T + i).unwrap();
            }
            done.send(()).unwrap();
        });
    }
    for _ in 0..3 {
        finished.recv_timeout(Duration::from_secs(300)).expect("a worker is stuck: deadlock");
    }
}

/// A clock whose first read starts a rival request on another thread and gives it up to a
/// second to finish before returning; every later read is a millisecond later than the first.
/// If the store reads the clock before taking the lock, the rival decides first at the later
/// time and the first request is then decided at its older one.
struct Racing {
    reads: AtomicU64,
    first: u64,
    rival: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl sluice_core::Clock for Racing {
    fn now(&self) -> u64 {
        if self.reads.fetch_add(1, Ordering::SeqCst) > 0 {
            return self.first + NANOS_PER_SEC / 1_000;
        }
        if let Some(start_rival) = self.rival.get() {
            start_rival();
        }
        self.first
    }
}

/// Two requests on one key of a full bucket with room for exactly two: each must be admitted,
/// whichever reads the clock first (a refusal here was a request decided at a time older than
/// the charge before it: refused for a millisecond's gap, told to retry in a second).
fn race(decide: fn(&MemoryStore, &[Check]) -> bool, checks: Vec<Check>) {
    let bucket = TokenBucket::new(2, 10.0).unwrap();
    let policies = checks.iter().enumerate().map(|(i, _)| named(&format!("p{i}"), bucket)).collect();
    let clock = Arc::new(Racing { reads: AtomicU64::new(0), first: T, rival: std::sync::OnceLock::new() });
    let s = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock.clone()));
    // Emptied long before: full again at T.
    let drain: Vec<Check> = checks.iter().map(|c| Check { cost: 2, ..*c }).collect();
    assert!(s.decide_at(&drain, T - 10 * NANOS_PER_SEC).unwrap().allowed);
    let (done, finished) = mpsc::channel();
    let rival_store = Arc::downgrade(&s);
    let rival_checks = checks.clone();
    let handle = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&handle);
    let finished = std::sync::Mutex::new(finished);
    let start = move || {
        let (store, checks, done) = (rival_store.upgrade().unwrap(), rival_checks.clone(), done.clone());
        *slot.lock().unwrap() = Some(thread::spawn(move || {
            let allowed = decide(&store, &checks);
            let _ = done.send(());
            allowed
        }));
        // Blocked on the lock (the store reads the clock under it): go on after the wait.
        let _ = finished.lock().unwrap().recv_timeout(Duration::from_secs(1));
    };
    assert!(clock.rival.set(Box::new(start)).is_ok());
    let first = decide(&s, &checks);
    let rival = handle.lock().unwrap().take().expect("the rival started").join().unwrap();
    assert!(first && rival, "first admitted: {first}, rival admitted: {rival}");
}

#[test]
fn a_request_that_waited_for_the_lock_is_not_decided_at_an_older_time() {
    race(|s, c| s.decide_one_now(&c[0]).unwrap().allowed, vec![check(0, key(3, 1))]);
    race(|s, c| s.decide_now(c).unwrap().allowed, vec![check(0, key(3, 1))]);
    race(|s, c| s.decide_now(c).unwrap().allowed, vec![check(0, key(3, 1)), check(1, key(5, 2))]);
}
