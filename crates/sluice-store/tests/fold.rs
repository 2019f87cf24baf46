//! Lossless eviction: a full store folds what it evicts into a bounded summary, and no flood of
//! new keys loosens a limit. Against an unbounded exact store, for each of the five algorithms:
//! a denied key stays denied until its own state would admit; random traffic through a tiny
//! store admits only traffic the exact algorithm admits; a flood of ten million distinct keys
//! keeps the store at its bound, keys and bytes.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, ManualClock, NANOS_PER_SEC, Nanos, Policy, SlidingLog, SlidingWindow,
    TokenBucket,
};
use sluice_store::conformance::Reference;
use sluice_store::{Check, FoldSize, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, WhenFull};

const T0: Nanos = 1_000 * NANOS_PER_SEC;
const S: Nanos = NANOS_PER_SEC;

/// Distinct, well-spread key hashes (the store indexes by the hash's own bits).
fn key(n: u64) -> KeyHash {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(n).to_le_bytes());
    k[8..].copy_from_slice(&mix(n ^ 0x5555_5555_5555_5555).to_le_bytes());
    KeyHash(k)
}

fn named(policy: Policy) -> Vec<NamedPolicy> {
    vec![NamedPolicy { name: policy.name().into(), policy }]
}

fn store(policy: Policy, max_keys: usize, shards: usize, when_full: WhenFull) -> MemoryStore {
    MemoryStore::new(named(policy), MemoryOptions { max_keys, shards, when_full }, Arc::new(ManualClock::new(T0)))
}

/// One policy per algorithm, each spent by 3 requests of cost 1 and fresh again within 10 s.
fn five() -> [Policy; 5] {
    [
        FixedWindow::new(3, 10 * S).unwrap().into(),
        SlidingLog::new(3, 10 * S).unwrap().into(),
        SlidingWindow::new(3, 10 * S).unwrap().into(),
        TokenBucket::new(3, 0.5).unwrap().into(),
        LeakyBucket::new(0.5, 3, LeakMode::Police).unwrap().into(),
    ]
}

fn one(n: u64) -> [Check; 1] {
    [Check { policy: 0, key: key(n), cost: 1 }]
}

/// The victim of the reported bypass: spent, then 100 times `max_keys` other keys arrive.
/// Returns the victim's answers from then on, one request every 100 ms for 30 s.
fn victim_after_flood(policy: Policy, when_full: WhenFull) -> Vec<(Nanos, bool)> {
    let s = store(policy, 8, 1, when_full);
    let victim = 0;
    while s.decide_at(&one(victim), T0).unwrap().allowed {}
    for n in 1..=800 {
        // Flood keys share cells with each other (each spent by one request), rarely all four
        // of the victim's: each is admitted.
        assert!(s.decide_at(&one(n), T0).unwrap().allowed, "{}: flood key {n}", policy.name());
    }
    (0..300).map(|i| T0 + i * S / 10).map(|t| (t, s.decide_at(&one(victim), t).unwrap().allowed)).collect()
}

#[test]
fn a_flood_of_new_keys_does_not_reset_a_denied_key() {
    for policy in five() {
        let folded = victim_after_flood(policy, WhenFull::Fold(FoldSize { width: Some(1024), depth: 4 }));
        // The exact answers: the same requests to an unbounded store that saw the victim only.
        let mut exact = Reference::new(&named(policy));
        while exact.decide(&one(0), T0).unwrap().allowed {}
        let want: Vec<(Nanos, bool)> =
            folded.iter().map(|&(t, _)| (t, exact.decide(&one(0), t).unwrap().allowed)).collect();
        // The flood came at T0 and every flood key is less spent than the victim: the summary
        // holds the victim's state exactly, so it answers exactly.
        assert_eq!(folded, want, "{}", policy.name());
        assert!(!folded[0].1 && folded.iter().any(|a| a.1), "{}: denied first, admitted later", policy.name());
    }
}

#[test]
fn forgetting_evicted_keys_is_the_bypass() {
    // What `forget` (the old default) does with the same traffic: the victim starts over.
    for policy in five() {
        let forgot = victim_after_flood(policy, WhenFull::Forget);
        assert!(forgot[0].1, "{}: the flood reset the victim", policy.name());
    }
}

#[test]
fn a_later_flood_denies_the_victim_no_earlier_than_its_own_state() {
    // Flood keys spent more recently than the victim share its cells: it may wait longer, never
    // less, and is admitted at most when the latest of them would be.
    let bucket: Policy = TokenBucket::new(3, 0.5).unwrap().into();
    let s = store(bucket, 4, 1, WhenFull::Fold(FoldSize { width: Some(1), depth: 1 }));
    let mut exact = Reference::new(&named(bucket));
    for _ in 0..3 {
        assert!(s.decide_at(&one(0), T0).unwrap().allowed);
        exact.decide(&one(0), T0).unwrap();
    }
    // 10 s later (5 tokens' worth: the victim is full again at T0 + 6 s), a flood spends keys
    // fully: with one cell, every absent key starts from the latest of them.
    let flood = T0 + 10 * S;
    for n in 1..=20 {
        for _ in 0..3 {
            s.decide_at(&one(n), flood).unwrap();
        }
    }
    let first_admitted = |decide: &mut dyn FnMut(Nanos) -> bool| (0..200).map(|i| T0 + i * S / 10).find(|&t| decide(t));
    let exact_at = first_admitted(&mut |t| exact.decide(&one(0), t).unwrap().allowed).unwrap();
    let folded_at = first_admitted(&mut |t| s.decide_at(&one(0), t).unwrap().allowed).unwrap();
    assert_eq!(exact_at, T0 + 2 * S);
    // The folded store answers at the flood's time (requests before it are in the past).
    assert!(folded_at >= exact_at);
    assert_eq!(folded_at, flood + 2 * S, "the strictest flood key's state");
}

/// Random traffic from a few keys (one check per request, or two: the general path, with
/// working copies) through a store of 3 keys folding into a tiny summary, replayed into an
/// unbounded exact store: every request the folding store admits must be admitted by the exact
/// algorithm on the traffic admitted so far, so the admitted traffic of every key fits its limit.
/// (A stricter start can deny a request the exact store would admit and admit a later one it
/// would deny, after not charging the first: the limit holds either way.)
fn replay(policy: Policy, fold: FoldSize, steps: &[(u8, u8, u64, u64)]) -> Result<(), TestCaseError> {
    let s = store(policy, 3, 1, WhenFull::Fold(fold));
    let mut exact = Reference::new(&named(policy));
    let mut now = T0;
    for (i, &(k, second, gap, cost)) in steps.iter().enumerate() {
        now += gap;
        let check = |k: u8| Check { policy: 0, key: key(u64::from(k)), cost: cost.min(policy.limit()) };
        let checks = if second < 12 { vec![check(k), check(second)] } else { vec![check(k)] };
        let got = s.decide_at(&checks, now).unwrap();
        if got.allowed {
            let want = exact.decide(&checks, now).unwrap();
            prop_assert!(want.allowed, "step {i}: key {k} admitted beyond its limit ({})", policy.name());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn folding_never_admits_beyond_a_limit(
        which in 0usize..5,
        width in 1usize..4,
        depth in 1usize..3,
        steps in proptest::collection::vec((0u8..12, 0u8..30, 0u64..(3 * S), 0u64..3), 1..120),
    ) {
        replay(five()[which], FoldSize { width: Some(width), depth }, &steps)?;
    }
}

#[test]
fn the_replay_catches_a_store_that_forgets() {
    // The same check against `forget`, on the bypass: it must fail.
    let policy: Policy = FixedWindow::new(3, 10 * S).unwrap().into();
    let s = store(policy, 3, 1, WhenFull::Forget);
    let mut exact = Reference::new(&named(policy));
    let mut beyond = 0;
    for round in 0..2u64 {
        for n in 0..6 {
            for _ in 0..3 {
                let c = [Check { policy: 0, key: key(n), cost: 1 }];
                if s.decide_at(&c, T0 + round).unwrap().allowed && !exact.decide(&c, T0 + round).unwrap().allowed {
                    beyond += 1;
                }
            }
        }
    }
    assert!(beyond > 0);
}

/// `victims` keys spent at T0, then `flood` distinct keys of one request each, at T0 too.
/// Afterwards the store holds `max_keys` keys and no more bytes than once the flood had filled
/// it (every shard full, every summary allocated), and every victim is denied until its exact
/// retry time and admitted then.
fn flood(policy: Policy, max_keys: usize, victims: u64, flood: u64) {
    let s = store(policy, max_keys, 16, WhenFull::default());
    for v in 0..victims {
        while s.decide_at(&one(v), T0).unwrap().allowed {}
    }
    let mut bytes_when_full = None;
    let mut admitted = 0u64;
    for n in victims..victims + flood {
        admitted += u64::from(s.decide_one_at(&one(n)[0], T0).unwrap().allowed);
        if n == victims + 4 * max_keys as u64 {
            bytes_when_full = Some(s.stats()[0].bytes);
        }
    }
    let stats = &s.stats()[0];
    assert_eq!(stats.keys, max_keys);
    // Every victim was evicted (they were the least recently used), and the flood filled the
    // store. Then, the flood arriving at one instant, the summary filled up: a flood key starts
    // from the strictest states its cells hold, each admitted one adds its charge to them, and
    // once every cell is spent new keys are denied (the limit's own refill empties them again).
    assert!(stats.evicted_lru >= victims && admitted >= max_keys as u64, "{stats:?}, {admitted} admitted");
    let when_full = bytes_when_full.unwrap();
    assert!(
        stats.bytes <= when_full,
        "{}: {} bytes after the flood, {when_full} when full",
        policy.name(),
        stats.bytes
    );
    println!(
        "{}: {} keys, {} bytes, {admitted} of {flood} flood keys admitted",
        policy.name(),
        stats.keys,
        stats.bytes
    );
    let mut exact = Reference::new(&named(policy));
    while exact.decide(&one(0), T0).unwrap().allowed {}
    let retry = exact.decide(&one(0), T0).unwrap().decisions[0].retry_after;
    for v in 0..victims {
        let d = s.decide_one_at(&one(v)[0], T0 + retry - 1).unwrap();
        assert!(!d.allowed, "{}: victim {v} admitted before its retry time", policy.name());
    }
    for v in 0..victims {
        let d = s.decide_one_at(&one(v)[0], T0 + retry).unwrap();
        assert!(d.allowed, "{}: victim {v} at its retry time", policy.name());
    }
}

#[test]
fn ten_million_keys_flood_a_bucket_store_of_ten_thousand() {
    flood(TokenBucket::new(3, 0.5).unwrap().into(), 10_000, 1_000, 10_000_000);
}

#[test]
fn a_flood_keeps_every_algorithm_at_its_bound() {
    for policy in five() {
        flood(policy, 1_000, 100, 20_000);
    }
}
