//! What a reservation costs on the memory store: a plain decision against a decision followed by
//! its settlement (the target: reserve + settle at most 1.3x a plain decision), in the
//! same run, through the `Store` trait as the faces call it (`decide_at_once`, `settle_at_once`).
//!
//! One token bucket that admits everything (capacity 10^9, refilled fast), 10,000 keys walked in
//! a scattered order, one thread. `decide` is one decision of cost 5; `reserve + settle down` is
//! that decision and then its settlement to 3 (2 given back); `reserve + settle up` settles it to
//! 8 (3 more charged); `reserve + refund` gives all 5 back. After criterion's groups, under
//! `cargo bench`, alternating timed rounds print each rate and its ratio to `decide`.

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::median;
use criterion::Criterion;
use sluice_core::{Policy, SystemClock, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, Settle, Store};

const KEYS: u64 = 10_000;
const STRIDE: u64 = 7_919;
const COST: u64 = 5;

fn store() -> MemoryStore {
    let policy = Policy::from(TokenBucket::new(1_000_000_000, 1e9).expect("valid"));
    let named = vec![NamedPolicy { name: "tokens".into(), policy }];
    MemoryStore::new(named, MemoryOptions::default(), Arc::new(SystemClock::new()))
}

fn check(i: u64) -> Check {
    let k = (i.wrapping_mul(STRIDE) % KEYS).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&k.to_le_bytes());
    key[8..].copy_from_slice(&k.rotate_left(17).to_le_bytes());
    Check { policy: 0, key: KeyHash(key), cost: COST }
}

/// One request as the faces take it through the memory store (no future made: the store's
/// `decide_at_once` and `settle_at_once`): decided, and when `actual` is given, settled to it.
fn request(s: &MemoryStore, i: u64, actual: Option<u64>) -> bool {
    let c = [check(i)];
    let v = s.decide_at_once(&c).expect("decides at once").expect("decides").verdict;
    if let Some(actual) = actual {
        let settle = [Settle { check: c[0], charged_at: v.charged_at(0), actual }];
        s.settle_at_once(&settle).expect("settles at once").expect("settles");
    }
    v.allowed
}

const CONTENDERS: [(&str, Option<u64>); 4] = [
    ("decide", None),
    ("reserve + settle down", Some(COST - 2)),
    ("reserve + settle up", Some(COST + 3)),
    ("reserve + refund", Some(0)),
];

fn criterion_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory store, one check");
    group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for (name, actual) in CONTENDERS {
        let s = store();
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                black_box(request(&s, i, actual))
            })
        });
    }
    group.finish();
}

/// Requests per second of one contender over `secs`.
fn rate(s: &MemoryStore, actual: Option<u64>, secs: f64) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..1_000 {
            n += 1;
            black_box(request(s, n, actual));
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Contenders in alternation, several short rounds, so that other load weighs on all alike.
fn summary() {
    const ROUNDS: usize = 7;
    println!("\nrequests per second, {KEYS} keys, one thread, median of {ROUNDS} alternating rounds:");
    let stores: Vec<MemoryStore> = CONTENDERS.iter().map(|_| store()).collect();
    let mut rates = vec![Vec::new(); CONTENDERS.len()];
    for _ in 0..ROUNDS {
        for (i, (_, actual)) in CONTENDERS.iter().enumerate() {
            rates[i].push(rate(&stores[i], *actual, 0.3));
        }
    }
    for ((name, _), per_sec) in CONTENDERS.iter().zip(&rates) {
        // Per round, this contender's time per request over the plain decision's.
        let ratios = per_sec.iter().zip(&rates[0]).map(|(this, decide)| decide / this).collect();
        println!(
            "  {name:<22} {:>6.2} M/s  time per request {:.2}x a plain decision",
            median(per_sec.clone()) / 1e6,
            median(ratios)
        );
    }
}

fn main() {
    common::run(criterion_groups, summary);
}
