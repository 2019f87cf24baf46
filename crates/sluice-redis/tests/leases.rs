//! Quota leases (`sluice_store::LeasedStore`) over real Redis: four instances decide one hot
//! fixed-window key, each from leases of the key's window, and every admission — wherever it
//! was decided — is counted against its window on Redis's clock: none holds more than the
//! limit, also when an instance is killed holding a lease. Then the same hot key under a limit
//! it never reaches, with and without leases, in one run: Redis's own count of scripts run per
//! decision (`INFO commandstats`), and decisions per second (printed, never asserted).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_core::{FixedWindow, NANOS_PER_SEC, Nanos, Policy, SystemClock};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::{Check, KeyHasher, LeaseOptions, LeasedStore, NamedPolicy, Store};
use support::RedisServer;

/// The hot key's window.
const WINDOW: Nanos = NANOS_PER_SEC;
/// Request loops per instance.
const LOOPS: usize = 6;
const INSTANCES: usize = 4;

fn hot() -> Check {
    Check { policy: 0, key: KeyHasher::from_secret(b"leases").hash(&[b"hot"]), cost: 1 }
}

/// An instance: its own Redis store (its own connections), leasing or not.
fn instance(server: &RedisServer, limit: u64, leases: bool) -> Arc<dyn Store> {
    let policies =
        vec![NamedPolicy { name: "hot".into(), policy: Policy::from(FixedWindow::new(limit, WINDOW).unwrap()) }];
    let mut options = RedisOptions::single(server.url(), OnError::FailClosed);
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
/// charged the lease the admission was spent from), and decisions made.
#[derive(Default)]
struct Tally {
    admitted: BTreeMap<u64, u64>,
    decisions: u64,
}

/// `LOOPS` request loops on `store` for the hot key until `stop`.
fn drive(store: Arc<dyn Store>, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Tally>> {
    (0..LOOPS)
        .map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let check = [hot()];
                while !stop.load(Ordering::Relaxed) {
                    let v = store.decide(&check, None).await.expect("Redis decides");
                    tally.decisions += 1;
                    if v.allowed {
                        *tally.admitted.entry(v.charged_at(0) / WINDOW).or_default() += 1;
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
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_never_admit_beyond_the_window_also_when_one_dies_holding_a_lease() {
    let server = RedisServer::start();
    const LIMIT: u64 = 3_000;
    let stop = Arc::new(AtomicBool::new(false));
    let instances: Vec<Arc<dyn Store>> = (0..INSTANCES).map(|_| instance(&server, LIMIT, true)).collect();
    let mut tasks: Vec<Vec<_>> = instances.iter().map(|s| drive(s.clone(), stop.clone())).collect();
    // One instance dies mid-run: its loops stop where they are, its leases are never given back.
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    let killed = tasks.remove(0);
    for t in &killed {
        t.abort();
    }
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut tally = Tally::default();
    total(killed, &mut tally).await;
    for t in tasks {
        total(t, &mut tally).await;
    }
    let worst = tally.admitted.values().copied().max().unwrap_or(0);
    println!(
        "{} decisions in {} windows, admitted per window {:?}, {} scripts run by Redis",
        tally.decisions,
        tally.admitted.len(),
        tally.admitted.values().collect::<Vec<_>>(),
        server.scripts_run()
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
