//! Quota leases (`sluice_store::LeasedStore`) over real Redis: four instances decide one hot
//! fixed-window key, each from leases of the key's window, and every admission — wherever it
//! was decided — is counted against its window on Redis's clock: none holds more than the
//! limit, also when an instance is killed holding a lease. Then the same hot key under a limit
//! it never reaches, with and without leases, in one run: Redis's own count of scripts run per
//! decision (`INFO commandstats`), and decisions per second (printed, never asserted). And the
//! first run again on a Redis Cluster, the hot key on one of its three primaries. And a hot
//! token bucket, leased as holds: in no interval do the four admit more than the bucket's own
//! bound, also when one dies holding a hold.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_core::{Clock, FixedWindow, NANOS_PER_SEC, Nanos, Policy, SystemClock, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::{Check, KeyHasher, LeaseOptions, LeasedStore, NamedPolicy, Store};
use support::{RedisCluster, RedisServer};

/// The hot key's window.
const WINDOW: Nanos = NANOS_PER_SEC;
/// Request loops per instance.
const LOOPS: usize = 6;
const INSTANCES: usize = 4;

fn hot() -> Check {
    Check { policy: 0, key: KeyHasher::from_secret(b"leases").hash(&[b"hot"]), cost: 1 }
}

/// An instance: its own Redis store (its own connections) on `server`, leasing or not.
fn instance(server: &RedisServer, limit: u64, leases: bool) -> Arc<dyn Store> {
    instance_on(RedisOptions::single(server.url(), OnError::FailClosed), window(limit), leases)
}

/// The hot key's fixed window of `limit`.
fn window(limit: u64) -> Policy {
    Policy::from(FixedWindow::new(limit, WINDOW).unwrap())
}

/// An instance: its own Redis store with `options` (a single node or a Cluster), leasing or not.
fn instance_on(mut options: RedisOptions, policy: Policy, leases: bool) -> Arc<dyn Store> {
    let policies = vec![NamedPolicy { name: "hot".into(), policy }];
    options.timeout = Duration::from_millis(500);
    // The deny cache would answer the hot key's denials without Redis: off, so that every
    // denial here is Redis's own (and the count of scripts is the store's work alone).
    options.deny_cache_entries = 0;
    let redis: Arc<dyn Store> = Arc::new(RedisStore::new(policies, options).expect("valid options"));
    if !leases {
        return redis;
    }
    let options = LeaseOptions { min_rate: 50.0, ..LeaseOptions::default() };
    Arc::new(LeasedStore::new(redis, vec![true], options, Arc::new(SystemClock::new())))
}

/// Admissions by Redis window (the verdict's time: Redis's clock when it charged, or when it
/// charged the lease the admission was spent from), each admission's span on this machine's
/// clock (asked, answered: it was decided in between), and decisions made.
#[derive(Default)]
struct Tally {
    admitted: BTreeMap<u64, u64>,
    spans: Vec<(Nanos, Nanos)>,
    decisions: u64,
    /// Admissions of the instance killed.
    killed_admitted: u64,
}

/// `LOOPS` request loops on `store` for the hot key until `stop`.
fn drive(store: Arc<dyn Store>, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Tally>> {
    (0..LOOPS)
        .map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let check = [hot()];
                let clock = SystemClock::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = clock.now();
                    let v = store.decide(&check, None).await.expect("Redis decides");
                    tally.decisions += 1;
                    if v.allowed {
                        *tally.admitted.entry(v.charged_at(0) / WINDOW).or_default() += 1;
                        tally.spans.push((asked, clock.now()));
                    }
                    // A real client does something between its requests.
                    tokio::task::yield_now().await;
                }
                tally
            })
        })
        .collect()
}

async fn total(tasks: Vec<tokio::task::JoinHandle<Tally>>, into: &mut Tally) {
    for t in tasks {
        let Ok(t) = t.await else { continue };
        into.decisions += t.decisions;
        for (w, n) in t.admitted {
            *into.admitted.entry(w).or_default() += n;
        }
        into.spans.extend(t.spans);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_never_admit_beyond_the_window_also_when_one_dies_holding_a_lease() {
    let server = RedisServer::start();
    let tally = four_instances_one_killed(|| instance(&server, LIMIT, true)).await;
    assert!(tally.killed_admitted > 0, "the instance killed had admitted some");
    println!("{} scripts run by Redis", server.scripts_run());
    assert_never_beyond(&tally);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_four_instances_never_admit_beyond_the_window_also_when_one_dies() {
    let cluster = RedisCluster::start();
    let options = RedisOptions::cluster(cluster.urls(), OnError::FailClosed);
    let tally = four_instances_one_killed(|| instance_on(options.clone(), window(LIMIT), true)).await;
    let scripts: Vec<u64> = cluster.nodes.iter().map(RedisServer::scripts_run).collect();
    println!("scripts run per primary: {scripts:?}");
    // One primary holds the hot key's slot: it decided every lease and denial.
    assert_eq!(scripts.iter().filter(|&&n| n > 0).count(), 1, "the hot key lives on one primary: {scripts:?}");
    assert_never_beyond(&tally);
}

/// The hot key's limit in the runs that exceed it.
const LIMIT: u64 = 3_000;

/// Four instances that `make` builds decide the hot key far above its limit for 4 s; the
/// first dies at 1.7 s (its loops stop, its leases are never given back: nothing runs its
/// `return_idle`). Every admission counts, the dead instance's too.
async fn four_instances_one_killed(make: impl Fn() -> Arc<dyn Store>) -> Tally {
    let (stop, stop_first) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let instances: Vec<Arc<dyn Store>> = (0..INSTANCES).map(|_| make()).collect();
    let mut tasks: Vec<Vec<_>> = instances
        .iter()
        .enumerate()
        .map(|(i, s)| drive(s.clone(), if i == 0 { stop_first.clone() } else { stop.clone() }))
        .collect();
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    stop_first.store(true, Ordering::Relaxed);
    let killed = tasks.remove(0);
    let mut tally = Tally::default();
    total(killed, &mut tally).await;
    tally.killed_admitted = tally.spans.len() as u64;
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        total(t, &mut tally).await;
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_never_admit_beyond_a_bucket_also_when_one_dies_holding_units() {
    const CAPACITY: u64 = 3_000;
    const RATE: u64 = 1_000;
    let server = RedisServer::start();
    let bucket = Policy::from(TokenBucket::new(CAPACITY, RATE as f64).unwrap());
    let options = RedisOptions::single(server.url(), OnError::FailClosed);
    let tally = four_instances_one_killed(|| instance_on(options.clone(), bucket, true)).await;
    let mut spans = tally.spans;
    spans.sort_unstable();
    let (first, last) = (spans[0].0, spans.iter().map(|s| s.1).max().unwrap());
    let bound = |from: Nanos, to: Nanos| CAPACITY + (to - from) * RATE / NANOS_PER_SEC;
    println!(
        "{} decisions, {} admitted ({} by the instance killed) over {} ms, the bucket's bound over that {}; {} scripts",
        tally.decisions,
        spans.len(),
        tally.killed_admitted,
        (last - first) / 1_000_000,
        bound(first, last),
        server.scripts_run()
    );
    assert!(tally.killed_admitted > 0, "the instance killed had admitted some");
    // Every interval [a, b]: the admissions certainly inside it (asked at a or later, answered
    // by b) are at most the bucket's bound over it. Each start a is an admission's asking time,
    // each end b an answering time: the intervals where a count could first pass the bound.
    // From the last start back, the answering times of the admissions asked at that start or
    // later, kept sorted.
    let mut ends: Vec<Nanos> = Vec::with_capacity(spans.len());
    for &(a, answered) in spans.iter().rev() {
        let at = ends.partition_point(|&e| e < answered);
        ends.insert(at, answered);
        for (n, &b) in ends.iter().enumerate() {
            let inside = n as u64 + 1;
            assert!(inside <= bound(a, b), "{inside} admitted between {a} and {b}, the bound is {}", bound(a, b));
        }
    }
    // Far above the bucket's rate: nearly the whole bound admitted (the dead instance's hold is
    // lost until its life ends, and units held when the run stopped were not spent).
    let admitted = spans.len() as u64;
    assert!(admitted * 10 >= bound(first, last) * 7, "only {admitted} of {} admitted", bound(first, last));
}

/// No window admitted beyond [`LIMIT`], and the busiest one nearly all of it.
fn assert_never_beyond(tally: &Tally) {
    let worst = tally.admitted.values().copied().max().unwrap_or(0);
    println!(
        "{} decisions in {} windows, admitted per window {:?}",
        tally.decisions,
        tally.admitted.len(),
        tally.admitted.values().collect::<Vec<_>>(),
    );
    for (w, n) in &tally.admitted {
        assert!(*n <= LIMIT, "window {w}: {n} admitted, the limit is {LIMIT}");
    }
    // The load was far above the limit: whole windows were admitted up to it (leases came
    // back or were spent), not a trickle.
    assert!(worst * 10 >= LIMIT * 8, "the busiest window admitted only {worst} of {LIMIT}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_under_its_limit_costs_redis_far_fewer_scripts_with_leases() {
    let server = RedisServer::start();
    // A limit the load never reaches: every decision admits.
    const LIMIT: u64 = 50_000_000;
    let mut runs = Vec::new();
    for leases in [false, true] {
        let before = server.scripts_run();
        let stop = Arc::new(AtomicBool::new(false));
        let instances: Vec<Arc<dyn Store>> = (0..INSTANCES).map(|_| instance(&server, LIMIT, leases)).collect();
        let tasks: Vec<_> = instances.iter().flat_map(|s| drive(s.clone(), stop.clone())).collect();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        stop.store(true, Ordering::Relaxed);
        let mut tally = Tally::default();
        total(tasks, &mut tally).await;
        let seconds = started.elapsed().as_secs_f64();
        let scripts = server.scripts_run() - before;
        let per = scripts as f64 / tally.decisions as f64;
        println!(
            "leases {leases}: {} decisions, {:.0}/s, {scripts} scripts run by Redis, {per:.4} per decision",
            tally.decisions,
            tally.decisions as f64 / seconds
        );
        runs.push((tally.decisions, per));
    }
    let ((_, without), (_, with)) = (runs[0], runs[1]);
    assert!(without >= 0.99, "without leases every decision is a script: {without}");
    assert!(with * 10.0 <= without, "with leases {with:.4} scripts per decision, without {without:.4}");
}
