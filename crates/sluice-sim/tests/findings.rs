//! The seed article's findings, and the scenarios' lessons, as assertions over real runs of the
//! core through the memory store.

use sluice_core::{ALGORITHM_NAMES, NANOS_PER_SEC};
use sluice_sim::{
    Arrival, GENERATORS, Generator, KeyScope, LaneResults, Limits, Quiet, Report, RunInfo, RunResults, Scenario,
    Simulation, TrafficParams,
};

fn run(
    scenario: Scenario,
    traffic: &TrafficParams,
    limits: &Limits,
    scopes: Option<&[KeyScope]>,
) -> (Vec<Arrival>, RunResults) {
    let arrivals = scenario.generate(traffic).unwrap();
    let scopes = scopes.map_or_else(|| KeyScope::defaults(Some(scenario), &arrivals), <[KeyScope]>::to_vec);
    let sim = Simulation::new(&ALGORITHM_NAMES, &scopes, limits).unwrap();
    let results = sim.run(&arrivals, &mut Quiet).unwrap();
    (arrivals, results)
}

fn lane<'a>(o: &'a RunResults, algorithm: &str, scope: KeyScope) -> &'a LaneResults {
    o.lanes.iter().find(|l| l.lane.algorithm == algorithm && l.lane.scope == scope).unwrap()
}

fn counts(o: &RunResults) -> Vec<(String, u64, u64, u64)> {
    o.lanes.iter().map(|l| (l.lane.algorithm.clone(), l.admitted, l.rejected, l.max_in_window)).collect()
}

#[test]
fn poisson_at_60_percent_buckets_admit_everything_windows_reject_some() {
    // The article's set-up: Poisson at 6 req/s for 30 s, seed 42; windows 10 per 1 s; token
    // bucket 10/s capacity 20; leaky bucket 10/s capacity 20. The lesson holds with either
    // generator.
    for generator in GENERATORS {
        let traffic = TrafficParams { generator, ..TrafficParams::default() };
        let (arrivals, o) = run(Scenario::Poisson, &traffic, &Limits::default(), None);
        let n = arrivals.len() as u64;
        for bucket in ["token-bucket", "leaky-bucket"] {
            let l = lane(&o, bucket, KeyScope::Global);
            assert_eq!((l.admitted, l.rejected), (n, 0), "{generator} {bucket}");
        }
        for window in ["fixed-window", "sliding-log", "sliding-window"] {
            let l = lane(&o, window, KeyScope::Global);
            assert!(l.rejected > 0, "{generator} {window} should reject some clustered requests");
            assert!(l.allowed_ratio() > 0.9, "{generator} {window} should still admit most");
        }
    }
}

/// The article's run under `generator`: the number of requests, and per algorithm its name,
/// admitted, rejected and max in 1 s.
fn article_run(generator: Generator) -> (usize, Vec<(String, u64, u64, u64)>) {
    let traffic = TrafficParams { generator, ..TrafficParams::default() };
    let (arrivals, o) = run(Scenario::Poisson, &traffic, &Limits::default(), None);
    (arrivals.len(), counts(&o))
}

fn rows(rows: [(&str, u64, u64, u64); 5]) -> Vec<(String, u64, u64, u64)> {
    rows.into_iter().map(|(a, b, c, d)| (a.to_string(), b, c, d)).collect()
}

#[test]
fn the_article_table_is_reproduced_exactly() {
    // Python's random.Random(42), as the article's script used it: 184 requests; fixed window
    // 178 (6 rejected, 96.74%), sliding window counter 178, token bucket 184, leaky bucket 184.
    // The article does not run the sliding log; it holds to 10 in every second, so it rejects more.
    let want = rows([
        ("fixed-window", 178, 6, 13),
        ("sliding-log", 174, 10, 10),
        ("sliding-window", 178, 6, 13),
        ("token-bucket", 184, 0, 15),
        ("leaky-bucket", 184, 0, 15),
    ]);
    assert_eq!(article_run(Generator::Python), (184, want));
}

#[test]
fn xoshiro_numbers_are_pinned() {
    // The portable generator's own numbers, pinned as a regression check: if these change,
    // every xoshiro scenario changed with them.
    let want = rows([
        ("fixed-window", 179, 3, 11),
        ("sliding-log", 178, 4, 10),
        ("sliding-window", 177, 5, 11),
        ("token-bucket", 182, 0, 12),
        ("leaky-bucket", 182, 0, 12),
    ]);
    assert_eq!(article_run(Generator::Xoshiro), (182, want));
}

#[test]
fn boundary_lets_the_fixed_window_admit_twice_its_limit() {
    let limits = Limits::default();
    let (_, o) = run(Scenario::Boundary, &TrafficParams::default(), &limits, None);
    assert_eq!(lane(&o, "fixed-window", KeyScope::Global).max_in_window, 2 * limits.limit);
    assert!(lane(&o, "sliding-log", KeyScope::Global).max_in_window <= limits.limit);
    // The counter approximates the log: far below 2x, though not always exact.
    assert!(lane(&o, "sliding-window", KeyScope::Global).max_in_window < 2 * limits.limit);

    // The same holds for another limit and window.
    let limits = Limits { limit: 7, window: 500 * 1_000_000, ..Limits::default() };
    let traffic = TrafficParams { limit: 7, window: limits.window, ..TrafficParams::default() };
    let (_, o) = run(Scenario::Boundary, &traffic, &limits, None);
    assert_eq!(lane(&o, "fixed-window", KeyScope::Global).max_in_window, 14);
    assert!(lane(&o, "sliding-log", KeyScope::Global).max_in_window <= 7);
}

#[test]
fn nat_per_ip_punishes_honest_users_per_account_does_not() {
    let (_, o) = run(Scenario::Nat, &TrafficParams::default(), &Limits::default(), None);
    for algorithm in ALGORITHM_NAMES {
        let ip = lane(&o, algorithm, KeyScope::Ip);
        let account = lane(&o, algorithm, KeyScope::Account);
        assert!(ip.allowed_ratio() < 0.2, "{algorithm} per ip admitted {}", ip.allowed_ratio());
        assert!(account.allowed_ratio() > 0.9, "{algorithm} per account admitted {}", account.allowed_ratio());
    }
    // The buckets absorb each user's jitter entirely.
    assert_eq!(lane(&o, "token-bucket", KeyScope::Account).rejected, 0);
}

#[test]
fn botnet_defeats_per_ip_limits_but_not_per_account_or_global_ones() {
    let traffic = TrafficParams::default();
    let limits = Limits::default();
    let (arrivals, o) = run(Scenario::Botnet, &traffic, &limits, None);
    let secs = traffic.duration / NANOS_PER_SEC;
    for algorithm in ALGORITHM_NAMES {
        // What the attacked account may receive over the run, by the policy's own promise.
        let budget = match algorithm {
            "token-bucket" | "leaky-bucket" => limits.capacity + limits.refill as u64 * secs,
            _ => limits.limit * secs,
        };
        let ip = lane(&o, algorithm, KeyScope::Ip);
        assert!(ip.admitted > 10 * budget, "{algorithm} per ip let only {} through", ip.admitted);
        assert!(ip.allowed_ratio() > 0.9);
        assert!(ip.max_in_window > 50 * limits.limit);
        for scope in [KeyScope::Account, KeyScope::Global] {
            let l = lane(&o, algorithm, scope);
            assert!(l.admitted <= budget, "{algorithm} per {scope} admitted {} > {budget}", l.admitted);
            assert!(l.admitted as f64 / arrivals.len() as f64 <= 0.01);
        }
    }
    // Within any one window, each holds to its own bound.
    let max = |a: &str| lane(&o, a, KeyScope::Account).max_in_window;
    assert!(max("fixed-window") <= 2 * limits.limit);
    assert!(max("sliding-log") <= limits.limit);
    assert!(max("token-bucket") <= limits.capacity + limits.refill as u64);
}

#[test]
fn burst_shows_the_buckets_burst_capacity() {
    let (_, o) = run(Scenario::Burst, &TrafficParams::default(), &Limits::default(), None);
    // 30 requests within 50 ms every 5 s: the windows pass 10 of each, the buckets 20.
    assert_eq!(lane(&o, "fixed-window", KeyScope::Global).admitted, 60);
    assert_eq!(lane(&o, "sliding-log", KeyScope::Global).admitted, 60);
    assert_eq!(lane(&o, "token-bucket", KeyScope::Global).admitted, 120);
    assert_eq!(lane(&o, "token-bucket", KeyScope::Global).max_in_window, 20);
}

#[test]
fn constant_traffic_under_the_limit_is_never_rejected() {
    let traffic = TrafficParams { rps: 9.0, ..TrafficParams::default() };
    let (arrivals, o) = run(Scenario::Constant, &traffic, &Limits::default(), None);
    // One every 1/9 s from t = 0: 271 arrivals before 30 s.
    assert_eq!(arrivals.len(), 271);
    assert!(o.lanes.iter().all(|l| l.rejected == 0 && l.admitted == 271 && l.max_in_window == 10));
}

fn json(seed: u64) -> String {
    let traffic = TrafficParams { seed, ..TrafficParams::default() };
    let limits = Limits::default();
    let (_, o) = run(Scenario::Nat, &traffic, &limits, None);
    let info = RunInfo {
        scenario: Some(Scenario::Nat),
        arrivals_file: None,
        seed: Some(seed),
        generator: Some(traffic.generator),
        rps: Some(traffic.rps),
        clients: Some(20),
        duration: traffic.duration,
        limits,
    };
    Report::new(&o, &info).to_json()
}

#[test]
fn same_seed_same_json_other_seed_other_json() {
    assert_eq!(json(42), json(42));
    assert_ne!(json(42), json(7));
}
