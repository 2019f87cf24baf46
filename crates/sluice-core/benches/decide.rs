//! The cost of one decision for one key, per algorithm, with `governor`'s direct GCRA limiter
//! measured in the same run.
//!
//! `cargo bench -p sluice-core --bench decide`
//!
//! Groups:
//! - `admitted/*`, `denied/*`: each algorithm's `check` with an explicit `now` that advances on
//!   every call, in a steady state where every call is admitted (or every call denied). The
//!   steady state is asserted before measuring.
//! - `vs-governor-admitted/*`, `vs-governor-denied/*`: the token bucket beside `governor`, the
//!   same capacity and rate. governor reads its own clock inside `check()`; for a fair
//!   comparison sluice is also measured reading `SystemClock::now()` inside the loop, and with
//!   its state behind a `Mutex` (governor's state is a shared atomic). governor is also measured
//!   with its fake clock, the counterpart of an explicit `now`.
//! - `clock-read/*`: the cost of reading the time alone, sluice's `SystemClock` beside
//!   `std::time::Instant` and governor's default clock.
//!
//! After the groups, sluice (clock read in the loop) and governor run in alternating short
//! rounds, and the median ratio is printed: the figure to read on a busy machine.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use sluice_core::{
    Algorithm, Clock, FixedWindow, GcraState, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, Policy, SlidingLog,
    SlidingWindow, SystemClock, TokenBucket,
};

/// Requests each limit holds before denying.
const CAP: u64 = 1_000;
/// A Unix time in 2023 (a whole number of milliseconds).
const EPOCH: Nanos = 1_700_000_000 * NANOS_PER_SEC;
/// Admitted path: one request per microsecond against limits of 1,000 per millisecond or more.
const STEP_ADMITTED: Nanos = 1_000;
const MS: Nanos = 1_000_000;
/// Denied path: one request per nanosecond against limits full for an hour.
const STEP_DENIED: Nanos = 1;
const HOUR: Nanos = 3_600 * NANOS_PER_SEC;
/// Iterations run before measuring to assert the steady state.
const PROBE: u64 = 200_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// A limit with `now` advancing by `step` per call, and the state that steady state reached.
struct Steady<A: Algorithm> {
    alg: A,
    state: A::State,
    now: Nanos,
    step: Nanos,
}

impl<A: Algorithm> Steady<A> {
    /// Prepares `alg`: filled to capacity at the epoch when `fill`, then probed for `PROBE` calls,
    /// each of which must be `allowed` as given.
    fn new(alg: A, step: Nanos, fill: bool, allowed: bool, name: &str) -> Self {
        let mut state = A::State::default();
        if fill {
            assert!(alg.check(&mut state, EPOCH, CAP).expect("cost within capacity").allowed);
        }
        let mut s = Self { alg, state, now: EPOCH, step };
        for i in 0..PROBE {
            let d = s.decide();
            assert_eq!(d, allowed, "{name}: call {i} is not on the path measured");
        }
        s
    }

    #[inline]
    fn decide(&mut self) -> bool {
        self.now += self.step;
        self.alg.check(&mut self.state, black_box(self.now), 1).expect("cost within capacity").allowed
    }
}

fn bench_steady<A: Algorithm>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut s: Steady<A>) {
    g.bench_function(name, |b| b.iter(|| black_box(s.decide())));
}

fn admitted(c: &mut Criterion) {
    let mut g = c.benchmark_group("admitted");
    g.throughput(Throughput::Elements(1));
    let (fill, allowed, step) = (false, true, STEP_ADMITTED);
    // Exactly CAP per aligned millisecond window: every call admitted.
    let fw = FixedWindow::new(CAP, MS).unwrap();
    bench_steady(&mut g, "fixed-window", Steady::new(fw, step, fill, allowed, "fixed-window"));
    // A full log: each call expires the entry from one window ago and records itself.
    let log = SlidingLog::new(CAP, MS).unwrap();
    bench_steady(&mut g, "sliding-log", Steady::new(log, step, fill, allowed, "sliding-log"));
    // At most CAP in any window against a limit of 2 x CAP: the estimate never reaches it.
    let sw = SlidingWindow::new(2 * CAP, MS).unwrap();
    bench_steady(&mut g, "sliding-window", Steady::new(sw, step, fill, allowed, "sliding-window"));
    // One token per microsecond, one request per microsecond.
    let tb = TokenBucket::new(CAP, 1e6).unwrap();
    bench_steady(&mut g, "token-bucket", Steady::new(tb, step, fill, allowed, "token-bucket"));
    let police = LeakyBucket::new(1e6, CAP, LeakMode::Police).unwrap();
    bench_steady(&mut g, "leaky-bucket-police", Steady::new(police, step, fill, allowed, "leaky-police"));
    let shape = LeakyBucket::new(1e6, CAP, LeakMode::Shape { delay: 0 }).unwrap();
    bench_steady(&mut g, "leaky-bucket-shape", Steady::new(shape, step, fill, allowed, "leaky-shape"));
    // The run-time dispatch the stores use.
    let policy = Policy::from(TokenBucket::new(CAP, 1e6).unwrap());
    let mut state = policy.fresh_state();
    let mut now = EPOCH;
    g.bench_function("token-bucket-via-policy", |b| {
        b.iter(|| {
            now += step;
            black_box(policy.check(&mut state, black_box(now), 1).unwrap().allowed)
        })
    });
    g.finish();
}

fn denied(c: &mut Criterion) {
    let mut g = c.benchmark_group("denied");
    g.throughput(Throughput::Elements(1));
    let (fill, allowed, step) = (true, false, STEP_DENIED);
    let fw = FixedWindow::new(CAP, HOUR).unwrap();
    bench_steady(&mut g, "fixed-window", Steady::new(fw, step, fill, allowed, "fixed-window"));
    let log = SlidingLog::new(CAP, HOUR).unwrap();
    bench_steady(&mut g, "sliding-log", Steady::new(log, step, fill, allowed, "sliding-log"));
    let sw = SlidingWindow::new(CAP, HOUR).unwrap();
    bench_steady(&mut g, "sliding-window", Steady::new(sw, step, fill, allowed, "sliding-window"));
    let per_hour = 1.0 / 3_600.0;
    let tb = TokenBucket::new(CAP, per_hour).unwrap();
    bench_steady(&mut g, "token-bucket", Steady::new(tb, step, fill, allowed, "token-bucket"));
    let police = LeakyBucket::new(per_hour, CAP, LeakMode::Police).unwrap();
    bench_steady(&mut g, "leaky-bucket-police", Steady::new(police, step, fill, allowed, "leaky-police"));
    let shape = LeakyBucket::new(per_hour, CAP, LeakMode::Shape { delay: 0 }).unwrap();
    bench_steady(&mut g, "leaky-bucket-shape", Steady::new(shape, step, fill, allowed, "leaky-shape"));
    g.finish();
}

/// sluice's token bucket and governor with the same capacity and rate, each path in one group.
fn versus_governor(c: &mut Criterion, path: &str, rate_per_sec: f64, quota: Quota, fake_step: Duration) {
    let allowed = path == "admitted";
    let mut g = c.benchmark_group(format!("vs-governor-{path}"));
    g.throughput(Throughput::Elements(1));
    let tb = TokenBucket::new(CAP, rate_per_sec).unwrap();
    let fill = |state: &mut GcraState, now: Nanos| {
        if !allowed {
            assert!(tb.check(state, now, CAP).unwrap().allowed);
        }
    };

    // sluice, explicit now.
    let step = if allowed { tb.interval() } else { STEP_DENIED };
    bench_steady(&mut g, "sluice-explicit-now", Steady::new(tb, step, !allowed, allowed, "sluice-explicit-now"));

    // sluice, reading the clock inside the loop.
    let clock = SystemClock::new();
    let mut state = GcraState::default();
    fill(&mut state, clock.now());
    for _ in 0..PROBE {
        assert_eq!(tb.check(&mut state, clock.now(), 1).unwrap().allowed, allowed, "sluice-system-clock");
    }
    g.bench_function("sluice-system-clock", |b| {
        b.iter(|| black_box(tb.check(&mut state, clock.now(), 1).unwrap().allowed))
    });

    // sluice, clock inside the loop and the state behind a mutex, as a shared limiter needs.
    let shared = Mutex::new(GcraState::default());
    fill(&mut shared.lock().unwrap(), clock.now());
    let decide = || tb.check(&mut shared.lock().unwrap(), clock.now(), 1).unwrap().allowed;
    for _ in 0..PROBE {
        assert_eq!(decide(), allowed, "sluice-system-clock-mutex");
    }
    g.bench_function("sluice-system-clock-mutex", |b| b.iter(|| black_box(decide())));

    // governor with its default clock.
    let gov = RateLimiter::direct(quota);
    if !allowed {
        assert!(gov.check_n(nz(CAP as u32)).is_ok_and(|r| r.is_ok()));
    }
    for _ in 0..PROBE {
        assert_eq!(gov.check().is_ok(), allowed, "governor");
    }
    g.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));

    // governor with its fake clock advanced by hand: the counterpart of an explicit now.
    let fake = FakeRelativeClock::default();
    let gov_fake = RateLimiter::direct_with_clock(quota, fake.clone());
    if !allowed {
        assert!(gov_fake.check_n(nz(CAP as u32)).is_ok_and(|r| r.is_ok()));
    }
    let decide_fake = || {
        fake.advance(fake_step);
        gov_fake.check().is_ok()
    };
    for _ in 0..PROBE {
        assert_eq!(decide_fake(), allowed, "governor-fake-clock");
    }
    g.bench_function("governor-fake-clock", |b| b.iter(|| black_box(decide_fake())));
    g.finish();
}

fn governor_comparison(c: &mut Criterion) {
    // Admitted: capacity 1,000, one token per nanosecond (faster than any loop can ask).
    let quota = Quota::with_period(Duration::from_nanos(1)).unwrap().allow_burst(nz(CAP as u32));
    versus_governor(c, "admitted", 1e9, quota, Duration::from_nanos(1));
    // Denied: capacity 1,000 drained, one token per hour.
    let quota = Quota::per_hour(nz(1)).allow_burst(nz(CAP as u32));
    versus_governor(c, "denied", 1.0 / 3_600.0, quota, Duration::from_nanos(STEP_DENIED));
}

/// What reading the time costs, which the clock-in-the-loop variants above pay on every call.
fn clock_read(c: &mut Criterion) {
    use governor::clock::Clock as _;
    let mut g = c.benchmark_group("clock-read");
    let ours = SystemClock::new();
    g.bench_function("sluice-system-clock", |b| b.iter(|| black_box(ours.now())));
    g.bench_function("std-instant-now", |b| b.iter(|| black_box(std::time::Instant::now())));
    let theirs = governor::clock::DefaultClock::default();
    g.bench_function("governor-default-clock", |b| b.iter(|| black_box(theirs.now())));
    g.finish();
}

/// Nanoseconds per call of `f` over about `secs` seconds.
fn ns_per_call(mut f: impl FnMut() -> bool, secs: f64) -> f64 {
    let mut iters: u64 = 100_000;
    loop {
        let start = std::time::Instant::now();
        for _ in 0..iters {
            black_box(f());
        }
        let took = start.elapsed().as_secs_f64();
        if took >= secs {
            return took * 1e9 / iters as f64;
        }
        iters = (iters as f64 * (secs / took.max(1e-4)) * 1.1) as u64;
    }
}

/// The median of a few values.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// sluice with `SystemClock::now()` in the loop against governor's `check()`, in alternating
/// short rounds so that load from other processes weighs on both alike: the median time of each
/// and the median of the per-round ratios (sluice / governor; below 1 is faster).
fn alternating_summary() {
    const ROUNDS: usize = 15;
    println!("\ntoken bucket with the clock read, median of {ROUNDS} alternating rounds:");
    for (path, rate, quota) in [
        ("admitted", 1e9, Quota::with_period(Duration::from_nanos(1)).unwrap().allow_burst(nz(CAP as u32))),
        ("denied", 1.0 / 3_600.0, Quota::per_hour(nz(1)).allow_burst(nz(CAP as u32))),
    ] {
        let allowed = path == "admitted";
        let tb = TokenBucket::new(CAP, rate).unwrap();
        let clock = SystemClock::new();
        let mut state = GcraState::default();
        let gov = RateLimiter::direct(quota);
        if !allowed {
            assert!(tb.check(&mut state, clock.now(), CAP).unwrap().allowed);
            assert!(gov.check_n(nz(CAP as u32)).is_ok_and(|r| r.is_ok()));
        }
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let a = ns_per_call(|| tb.check(&mut state, clock.now(), 1).unwrap().allowed, 0.1);
            let b = ns_per_call(|| gov.check().is_ok(), 0.1);
            ours.push(a);
            theirs.push(b);
            ratios.push(a / b);
        }
        assert_eq!(tb.check(&mut state, clock.now(), 1).unwrap().allowed, allowed, "sluice left the {path} path");
        assert_eq!(gov.check().is_ok(), allowed, "governor left the {path} path");
        println!(
            "  {path:<8}  sluice {:>6.2} ns  governor {:>6.2} ns  ratio {:.2}",
            median(ours),
            median(theirs),
            median(ratios)
        );
    }
}

fn main() {
    // What `criterion_group!` and `criterion_main!` expand to, without their undocumented `pub fn`.
    let mut c = Criterion::default().configure_from_args();
    admitted(&mut c);
    denied(&mut c);
    governor_comparison(&mut c);
    clock_read(&mut c);
    c.final_summary();
    // Only under `cargo bench`: a test run (`cargo test --benches`) just checks that each runs.
    if std::env::args().any(|a| a == "--bench") {
        alternating_summary();
    }
}
