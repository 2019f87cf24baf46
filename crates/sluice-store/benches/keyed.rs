//! Keyed decisions per second: the memory store against governor's keyed limiter (a DashMap of
//! GCRA cells), 100,000 keys, 2 threads, in the same run.
//!
//! Both limit every key with the same token bucket, in two regimes: `admit` (capacity 1000,
//! refilled at a million per second: every request is admitted and charged) and `deny` (capacity
//! 1, one per second: nearly every request is denied). Each thread walks the keys in a scattered
//! order. sluice is measured twice: from a ready key hash (what the store itself costs; the stand-in
//! hash is two multiply-shift rounds), and from the raw key (hashing it with the keyed 128-bit
//! SipHash first, as the gateway does; governor hashes its key with SipHash inside the DashMap).
//! governor runs twice: keyed by a `u64` (its best case, 16-byte buckets) and by 16 bytes (the
//! width of the key hash sluice stores). All read the time on every decision: sluice its
//! `SystemClock`, governor its default clock (both read the CPU's counter through quanta). Each
//! contender has its own store or limiter. After criterion's groups, a short timed run prints the
//! decisions per second of each and the ratio.

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::median;
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
    sluice_hashing: MemoryStore,
    governor: DefaultKeyedRateLimiter<u64>,
    governor_wide: DefaultKeyedRateLimiter<[u8; 16]>,
    hasher: KeyHasher,
}

/// A stand-in for a key hash that costs no memory access: two rounds of a 64-bit mixer.
fn spread(k: u64) -> KeyHash {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&mix(k).to_le_bytes());
    key[8..].copy_from_slice(&mix(k ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes());
    KeyHash(key)
}

impl Contenders {
    fn new(r: &Regime) -> Arc<Self> {
        let bucket = TokenBucket::new(u64::from(r.capacity), f64::from(r.per_second)).expect("valid bucket");
        let policy = NamedPolicy { name: r.name.into(), policy: Policy::from(bucket) };
        let options = MemoryOptions::default();
        // One store per contender: a shared store would hold both contenders' keys (twice the
        // table, more cache misses) and charge one's time to the other.
        let sluice = MemoryStore::new(vec![policy.clone()], options, Arc::new(SystemClock::new()));
        let sluice_hashing = MemoryStore::new(vec![policy], options, Arc::new(SystemClock::new()));
        let nz = |n: u32| NonZeroU32::new(n).expect("non-zero");
        let quota = Quota::per_second(nz(r.per_second)).allow_burst(nz(r.capacity));
        let (governor, governor_wide) = (RateLimiter::keyed(quota), RateLimiter::keyed(quota));
        let c = Self { sluice, sluice_hashing, governor, governor_wide, hasher: KeyHasher::random() };
        // Every key known to each contender before measuring.
        for k in 0..KEYS as usize {
            c.sluice_hashed(k);
            c.sluice_raw(k);
            c.governor(k);
            c.governor_wide(k);
        }
        Arc::new(c)
    }

    fn sluice_hashed(&self, k: usize) -> bool {
        let check = Check { policy: 0, key: spread(k as u64), cost: 1 };
        self.sluice.decide_one_now(&check).is_ok_and(|d| d.allowed)
    }

    fn sluice_raw(&self, k: usize) -> bool {
        let key = self.hasher.hash(&[&(k as u64).to_le_bytes()]);
        self.sluice_hashing.decide_one_now(&Check { policy: 0, key, cost: 1 }).is_ok_and(|d| d.allowed)
    }

    fn governor(&self, k: usize) -> bool {
        self.governor.check_key(&(k as u64)).is_ok()
    }

    fn governor_wide(&self, k: usize) -> bool {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&(k as u64).to_le_bytes());
        self.governor_wide.check_key(&key).is_ok()
    }
}

type Contender = fn(&Contenders, usize) -> bool;

const CONTENDERS: [(&str, Contender); 4] = [
    ("sluice", Contenders::sluice_hashed),
    ("sluice+hash", Contenders::sluice_raw),
    ("governor", Contenders::governor),
    ("governor-16B", Contenders::governor_wide),
];
/// The reference: governor with 8-byte keys, its best case.
const GOVERNOR: usize = 2;

/// `iters` decisions on each of `threads` threads; the wall time of the whole.
fn on_threads(c: &Arc<Contenders>, f: Contender, threads: u64, iters: u64) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..threads {
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
            group.bench_function(name, |b| b.iter_custom(|iters| on_threads(&c, f, THREADS, iters)));
        }
        group.finish();
    }
}

/// Decisions per second on `threads` threads over about `secs` seconds.
fn rate(c: &Arc<Contenders>, f: Contender, threads: u64, secs: f64) -> f64 {
    let mut iters = 10_000;
    loop {
        let took = on_threads(c, f, threads, iters).as_secs_f64();
        if took >= secs {
            return (iters * threads) as f64 / took;
        }
        iters = ((iters as f64) * (secs / took.max(1e-3)) * 1.1) as u64;
    }
}

/// Contenders measured in alternation, several short rounds each, so that load from other
/// processes weighs on all of them alike; prints the median rate and the median of the per-round
/// ratios to governor.
fn summary() {
    const ROUNDS: usize = 7;
    println!("\nkeyed decisions per second, {KEYS} keys, median of {ROUNDS} alternating rounds:");
    for threads in [1, THREADS] {
        for r in &REGIMES {
            let c = Contenders::new(r);
            let mut rates = vec![Vec::new(); CONTENDERS.len()];
            for _ in 0..ROUNDS {
                for (i, (_, f)) in CONTENDERS.iter().enumerate() {
                    rates[i].push(rate(&c, *f, threads, 0.3));
                }
            }
            let governor = rates[GOVERNOR].clone();
            for ((name, _), per_sec) in CONTENDERS.iter().zip(&rates) {
                let ratios = per_sec.iter().zip(&governor).map(|(a, b)| a / b).collect();
                println!(
                    "  {threads} thread(s)  {:<6} {:<12} {:>7.2} M/s  ratio to governor {:.2}",
                    r.name,
                    name,
                    median(per_sec.clone()) / 1e6,
                    median(ratios)
                );
            }
        }
    }
}

fn main() {
    common::run(criterion_groups, summary);
}
