//! Keyed decisions per second: the memory store against governor's keyed limiter (a DashMap of
//! GCRA cells), 100,000 keys, 2 threads, in the same run.
//!
//! Both limit every key with the same token bucket, in two regimes: `admit` (capacity 1000,
//! refilled at a million per second: every request is admitted and charged) and `deny` (capacity
//! 1, one per second: nearly every request is denied). Each thread walks the keys in a scattered
//! order. sluice is measured twice: from a ready key hash (what the store sees), and from the raw
//! key (hashing it with the keyed 128-bit hash first, as the gateway does; governor hashes its key
//! with SipHash inside the DashMap). After criterion's groups, a short timed run prints the
//! decisions per second of each and the ratio.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sluice_core::{Policy, SystemClock, TokenBucket};
use sluice_store::{Check, KeyHash, KeyHasher, MemoryOptions, MemoryStore, NamedPolicy};

const KEYS: u64 = 100_000;
const THREADS: u64 = 2;
/// A stride coprime with `KEYS`: consecutive requests land far apart.
const STRIDE: u64 = 7_919;

/// The key a thread uses for its `i`-th request.
fn key_index(thread: u64, i: u64) -> usize {
    ((i.wrapping_mul(STRIDE) + thread * (KEYS / THREADS)) % KEYS) as usize
}

struct Regime {
    name: &'static str,
    capacity: u32,
    per_second: u32,
}

const REGIMES: [Regime; 2] = [
    Regime { name: "admit", capacity: 1_000, per_second: 1_000_000 },
    Regime { name: "deny", capacity: 1, per_second: 1 },
];

struct Contenders {
    sluice: MemoryStore,
    governor: DefaultKeyedRateLimiter<u64>,
    hasher: KeyHasher,
    hashes: Vec<KeyHash>,
}

impl Contenders {
    fn new(r: &Regime) -> Arc<Self> {
        let bucket = TokenBucket::new(u64::from(r.capacity), f64::from(r.per_second)).expect("valid bucket");
        let policy = NamedPolicy { name: r.name.into(), policy: Policy::from(bucket) };
        let sluice = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
        let nz = |n: u32| NonZeroU32::new(n).expect("non-zero");
        let governor = RateLimiter::keyed(Quota::per_second(nz(r.per_second)).allow_burst(nz(r.capacity)));
        let hasher = KeyHasher::random();
        let hashes = (0..KEYS).map(|k| hasher.hash(&[&k.to_le_bytes()])).collect();
        let c = Self { sluice, governor, hasher, hashes };
        // Every key known to both before measuring.
        for k in 0..KEYS {
            c.sluice_hashed(k as usize);
            c.governor(k as usize);
        }
        Arc::new(c)
    }

    fn sluice_hashed(&self, k: usize) -> bool {
        let check = [Check { policy: 0, key: self.hashes[k], cost: 1 }];
        self.sluice.decide_now(&check).is_ok_and(|v| v.allowed)
    }

    fn sluice_raw(&self, k: usize) -> bool {
        let key = self.hasher.hash(&[&(k as u64).to_le_bytes()]);
        self.sluice.decide_now(&[Check { policy: 0, key, cost: 1 }]).is_ok_and(|v| v.allowed)
    }

    fn governor(&self, k: usize) -> bool {
        self.governor.check_key(&(k as u64)).is_ok()
    }
}

type Contender = fn(&Contenders, usize) -> bool;

const CONTENDERS: [(&str, Contender); 3] = [
    ("sluice", Contenders::sluice_hashed),
    ("sluice+hash", Contenders::sluice_raw),
    ("governor", Contenders::governor),
];

/// `iters` decisions on each of `THREADS` threads; the wall time of the whole.
fn on_threads(c: &Arc<Contenders>, f: Contender, iters: u64) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..iters {
                    black_box(f(c, key_index(t, i)));
                }
            });
        }
    });
    start.elapsed()
}

fn criterion_groups(criterion: &mut Criterion) {
    for r in &REGIMES {
        let c = Contenders::new(r);
        let mut group = criterion.benchmark_group(format!("keyed-100k-2threads/{}", r.name));
        group.throughput(Throughput::Elements(THREADS));
        group.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
        for (name, f) in CONTENDERS {
            group.bench_function(name, |b| b.iter_custom(|iters| on_threads(&c, f, iters)));
        }
        group.finish();
    }
}

/// Decisions per second over about `secs` seconds.
fn rate(c: &Arc<Contenders>, f: Contender, secs: f64) -> f64 {
    let mut iters = 10_000;
    loop {
        let took = on_threads(c, f, iters).as_secs_f64();
        if took >= secs {
            return (iters * THREADS) as f64 / took;
        }
        iters = ((iters as f64) * (secs / took.max(1e-3)) * 1.1) as u64;
    }
}

fn summary() {
    println!("\nkeyed decisions per second, {KEYS} keys, {THREADS} threads:");
    for r in &REGIMES {
        let c = Contenders::new(r);
        let rates: Vec<f64> = CONTENDERS.iter().map(|(_, f)| rate(&c, *f, 2.0)).collect();
        let governor = rates[2];
        for ((name, _), per_sec) in CONTENDERS.iter().zip(&rates) {
            println!(
                "  {:<6} {:<12} {:>7.2} M/s  ratio to governor {:.2}",
                r.name,
                name,
                per_sec / 1e6,
                per_sec / governor
            );
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    criterion_groups(&mut criterion);
    criterion.final_summary();
    // Only under `cargo bench`: a test run (`cargo test --benches`) just checks that each runs.
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
