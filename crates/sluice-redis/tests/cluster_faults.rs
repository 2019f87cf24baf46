//! Redis faults under load, on real servers started by the tests: a Redis Cluster of three
//! primaries and three replicas loses a primary (SIGKILL) and fails over, in each failure mode;
//! a replica takes over on `CLUSTER FAILOVER` (MOVED); a slot moves to another primary while
//! it is in use (ASK); and a single Redis restarts with its data lost.
//!
//! Three `RedisStore`s (three sluice instances) decide one hot key and many other keys
//! concurrently. The hot key is a token bucket of known capacity and rate, so the requests it
//! may admit between two instants are known (capacity + rate x elapsed): every admission is
//! counted across the fault against that bound. Latencies and recovery times are measured and
//! printed, never asserted.

#[path = "support/hot_load.rs"]
mod hot_load;
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hot_load::{CAPACITY, HotLoad, KEYS, RATE, SPREAD, Sample, stores};
use sluice_redis::{BreakerOptions, OnError, RedisOptions, RedisStore, Source, key_slot};
use sluice_store::Check;
use support::{RedisCluster, RedisServer};

/// Six Redis processes per cluster: one cluster at a time.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The hot key and the other keys.
const LOAD: HotLoad = HotLoad::new(b"faults");

/// Checks that the hot key's admissions by `source` never exceed the bucket's bound, at any
/// instant: those answered by then, against capacity + rate x (then - first request).
fn assert_within_the_bucket(samples: &[Sample], source: Source, copies: u64) {
    let Some(first) = samples.iter().map(|s| s.asked).min() else { return };
    let mut admitted = 0u64;
    for s in samples.iter().filter(|s| s.key.is_none()) {
        if matches!(s.outcome, Ok((true, src)) if src == source) {
            admitted += 1;
            let bound = copies * (CAPACITY + (RATE * (s.answered - first).as_secs_f64()).ceil() as u64);
            assert!(admitted <= bound, "{admitted} hot admissions by {source:?} within a bound of {bound}");
        }
    }
}

/// Checks that no other key was admitted more than its capacity by `source`, per copy.
fn assert_spread_within(samples: &[Sample], source: Source, copies: u64) {
    let mut per_key: HashMap<(u64, usize), u64> = HashMap::new();
    for s in samples {
        if let (Some(k), Ok((true, src))) = (s.key, &s.outcome)
            && *src == source
        {
            *per_key.entry((k, if copies == 1 { 0 } else { s.store })).or_default() += 1;
        }
    }
    if let Some(((k, _), n)) = per_key.iter().find(|(_, n)| **n > SPREAD) {
        panic!("key {k} admitted {n} times by {source:?}, its capacity is {SPREAD}");
    }
}

/// What a fault cost, as measured.
struct Cost {
    /// From the fault to the last failed or failure-path decision of the hot key's slot.
    recovered_after: Duration,
    /// The slowest decision from the fault to recovery.
    worst: Duration,
    /// Decisions that took the failure path (an error, fail-open or local) from the fault on.
    failure_path: usize,
    /// Of those, decisions of keys on primaries that never failed.
    healthy_refused: usize,
}

fn cost(samples: &[Sample], fault: Instant, dead: &dyn Fn(Option<u64>) -> bool) -> Cost {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.answered >= fault).collect();
    let last = after.iter().filter(|s| s.failed()).map(|s| s.answered).max().unwrap_or(fault);
    let during: Vec<&&Sample> = after.iter().filter(|s| s.asked <= last).collect();
    Cost {
        recovered_after: last - fault,
        worst: during.iter().map(|s| s.latency()).max().unwrap_or_default(),
        failure_path: after.iter().filter(|s| s.failed()).count(),
        healthy_refused: after.iter().filter(|s| s.failed() && !dead(s.key)).count(),
    }
}

fn print_cost(what: &str, c: &Cost, total: usize) {
    println!(
        "{what}: recovered {:.2} s after the fault; worst decision {:.1} ms; {} of {total} decisions took the failure \
         path ({} of them for keys on primaries that never failed)",
        c.recovered_after.as_secs_f64(),
        c.worst.as_secs_f64() * 1e3,
        c.failure_path,
        c.healthy_refused
    );
}

/// The slot of `check`'s stored key.
fn slot_of(store: &RedisStore, check: &Check) -> u16 {
    key_slot(store.stored_key(check).unwrap().as_bytes())
}

/// Kills the primary of the hot key under load; returns the samples, the kill's instant and a
/// predicate for the keys the dead primary served.
async fn kill_the_hot_primary(mode: OnError) -> (Vec<Sample>, Instant, Box<dyn Fn(Option<u64>) -> bool>) {
    let mut cluster = RedisCluster::start_with_replicas();
    let stores = stores(RedisOptions::cluster(cluster.urls(), OnError::FailClosed), mode);
    let hot_slot = slot_of(&stores[0], &LOAD.hot());
    let primary = cluster.index_of_slot(hot_slot);
    let replica = cluster.replica_of(primary);
    let dead_port = cluster.nodes[primary].port;
    // Which other keys live on the dead primary (their slots move with it).
    let owners = cluster.slot_map();
    let on_primary: Vec<bool> =
        (0..KEYS).map(|k| owners[usize::from(slot_of(&stores[0], &LOAD.spread(k)))] == primary).collect();

    let kill = || {
        cluster.nodes[primary].kill();
        cluster.wait_moved(hot_slot, dead_port, Duration::from_secs(30))
    };
    let load = LOAD.under_load(&stores, Duration::from_millis(800), kill, Duration::from_millis(2_500)).await;
    assert_eq!(load.result, replica, "the dead primary's replica took its slots");
    println!("{mode}: the replica was promoted {:.2} s after the kill", (load.ended - load.began).as_secs_f64());
    let dead = Box::new(move |key: Option<u64>| key.is_none_or(|k| on_primary[k as usize]));
    (load.samples, load.began, dead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_a_killed_primary_fails_over_and_nothing_passes_beyond_a_limit() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let (samples, fault, dead) = kill_the_hot_primary(OnError::FailClosed).await;
    let c = cost(&samples, fault, &*dead);
    print_cost("fail-closed, primary killed", &c, samples.len());
    assert!(samples.iter().all(|s| matches!(s.outcome, Ok((_, Source::Redis | Source::DenyCache)) | Err(_))));
    assert!(samples.iter().filter(|s| s.answered < fault).all(|s| s.outcome.is_ok()), "failures before the fault");
    assert!(c.failure_path > 0, "the kill was noticed");
    // Admissions never passed the hot bucket's bound, nor any other key's capacity, at any time.
    assert_within_the_bucket(&samples, Source::Redis, 1);
    assert_spread_within(&samples, Source::Redis, 1);
    // Decisions go on after the failover: the last second is all decided by Redis.
    let tail: Vec<&Sample> = samples.iter().filter(|s| s.asked > fault + c.recovered_after).collect();
    assert!(tail.len() > 100 && tail.iter().all(|s| s.outcome.is_ok()), "{} decisions after recovery", tail.len());
    assert!(tail.iter().any(|s| s.key.is_none() && s.admitted()), "the hot key is decided after the failover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_a_killed_primary_admits_without_a_decision_until_the_failover() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let (samples, fault, dead) = kill_the_hot_primary(OnError::FailOpen).await;
    let c = cost(&samples, fault, &*dead);
    print_cost("fail-open, primary killed", &c, samples.len());
    // docs/src/storage.md: fail-open admits (counted): no error reaches the caller, and what Redis decided
    // still fits the limit.
    assert!(samples.iter().all(|s| s.outcome.is_ok()), "fail-open surfaced an error");
    let open: Vec<&Sample> = samples.iter().filter(|s| matches!(s.outcome, Ok((_, Source::FailOpen)))).collect();
    assert!(!open.is_empty() && open.iter().all(|s| s.admitted() && s.answered >= fault));
    assert_within_the_bucket(&samples, Source::Redis, 1);
    assert_spread_within(&samples, Source::Redis, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_a_killed_primary_is_replaced_by_each_instances_own_limit() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let (samples, fault, dead) = kill_the_hot_primary(OnError::Local).await;
    let c = cost(&samples, fault, &*dead);
    print_cost("local, primary killed", &c, samples.len());
    // docs/src/storage.md: local decides with an in-memory limiter per instance: each of the three stores
    // holds the limit on its own, so together they admit at most three times it.
    assert!(samples.iter().all(|s| s.outcome.is_ok()), "local surfaced an error");
    let local: Vec<Sample> = samples.iter().filter(|s| matches!(s.outcome, Ok((_, Source::Local)))).cloned().collect();
    assert!(!local.is_empty() && local.iter().all(|s| s.answered >= fault));
    for store in 0..3 {
        let mine: Vec<Sample> = local.iter().filter(|s| s.store == store).cloned().collect();
        assert_within_the_bucket(&mine, Source::Local, 1);
    }
    assert_spread_within(&local, Source::Local, 3);
    assert_within_the_bucket(&samples, Source::Redis, 1);
}

/// Runs the load for a while, does `change` (blocking) halfway, and returns the samples and
/// when the change began and ended.
async fn under_load(stores: &[Arc<RedisStore>], change: impl FnOnce()) -> (Vec<Sample>, Instant, Instant) {
    let load = LOAD.under_load(stores, Duration::from_millis(600), change, Duration::from_millis(1_000)).await;
    (load.samples, load.began, load.ended)
}

fn print_worst(what: &str, samples: &[Sample], from: Instant, failed: usize) {
    let worst = samples.iter().filter(|s| s.answered >= from).map(Sample::latency).max().unwrap_or_default();
    println!(
        "{what}: {} decisions, {failed} failed; worst decision from the change on {:.1} ms",
        samples.len(),
        worst.as_secs_f64() * 1e3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_surfaces_no_error_and_a_moving_slot_only_redirects_and_their_breaker() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start_with_replicas();
    let stores = stores(RedisOptions::cluster(cluster.urls(), OnError::FailClosed), OnError::FailClosed);
    let hot_slot = slot_of(&stores[0], &LOAD.hot());

    // CLUSTER FAILOVER on the hot primary's replica: the primary pauses writes until the
    // replica has caught up and taken over, then answers MOVED, which clients follow. A decision
    // on that primary waits out the pause. Usually it is tens of milliseconds and nothing fails;
    // on a loaded machine it has lasted past the stores' 250 ms timeout (one CI run: 1,559
    // failures, a few timeouts and then the breaker they opened). So what is asserted is what
    // the client controls: no redirect ever surfaces as an error, a failure is only a timeout or
    // the breaker those opened, both only while the failover runs (and a cool-down after), and
    // nothing is admitted beyond the limit.
    let primary = cluster.index_of_slot(hot_slot);
    let replica = cluster.replica_of(primary);
    let failover = || {
        assert_eq!(cluster.nodes[replica].cli(&["cluster", "failover"]), "OK");
        cluster.wait_moved(hot_slot, cluster.nodes[primary].port, Duration::from_secs(30));
    };
    // Two seconds after it, so that a breaker it opened has closed again for the last half.
    let load = LOAD.under_load(&stores, Duration::from_millis(600), failover, Duration::from_millis(2_000)).await;
    let (samples, began, ended) = (load.samples, load.began, load.ended);
    assert_eq!(cluster.index_of_slot(hot_slot), replica);
    let failed: Vec<&Sample> = samples.iter().filter(|s| s.outcome.is_err()).collect();
    print_worst("CLUSTER FAILOVER", &samples, began, failed.len());
    let timeout = Duration::from_millis(250);
    // The last timeout is asked by `ended + timeout` and answered a timeout later; a breaker it
    // opened refuses for a cool-down after that.
    let settled = ended + timeout * 3 + BreakerOptions::default().cool_down;
    let timeouts: Vec<&&Sample> =
        failed.iter().filter(|s| s.outcome.as_ref().unwrap_err().contains("timed out")).collect();
    let timed_out = timeouts.len();
    for s in &failed {
        let why = s.outcome.as_ref().unwrap_err();
        // Asked while it ran, or just after, while the clients learn the new topology.
        let waited_out =
            why.contains("timed out") && s.latency() >= timeout && s.asked >= began && s.asked <= ended + timeout;
        // Only a store that timed out opens its breaker.
        let breaker = why.contains("circuit breaker open")
            && timeouts.iter().any(|t| t.store == s.store && t.answered <= s.asked)
            && s.asked <= settled;
        assert!(waited_out || breaker, "a failure a planned failover does not explain: {s:?}");
    }
    let tail: Vec<&Sample> = samples.iter().filter(|s| s.asked > settled).collect();
    assert!(tail.len() > 100 && tail.iter().all(|s| s.outcome.is_ok()), "failures after the failover");
    if !failed.is_empty() {
        println!("CLUSTER FAILOVER: the write pause outlasted the {timeout:?} timeout ({timed_out} timed out)");
    }
    assert_within_the_bucket(&samples, Source::Redis, 1);

    // The hot slot moves to another primary while in use: clients follow ASK while its keys
    // migrate, then MOVED. The cluster client sends ASKING apart from the command on a shared
    // connection, so another request can take the flag: the importing node then answers MOVED
    // back, and a decision fails now and then; three in a row open that store's breaker, which
    // then refuses every decision for its cool-down (fail-closed). Those are the only failures,
    // and nothing is ever admitted beyond the limit.
    let from = cluster.index_of_slot(hot_slot);
    let to = (0..cluster.nodes.len()).find(|&i| i != from && !cluster.nodes[i].is_replica()).unwrap();
    let opened_before: Vec<u64> = stores.iter().map(|s| s.stats().breaker_opened).collect();
    let (samples, began, ended) = under_load(&stores, || migrate(&cluster, hot_slot, from, to)).await;
    assert_eq!(cluster.index_of_slot(hot_slot), to);
    let failed: Vec<&Sample> = samples.iter().filter(|s| s.outcome.is_err()).collect();
    print_worst("slot migration", &samples, began, failed.len());
    let redirects = failed.iter().filter(|s| s.outcome.as_ref().unwrap_err().contains("Moved")).count();
    let cool_down = BreakerOptions::default().cool_down;
    let opened: Vec<u64> = stores.iter().zip(&opened_before).map(|(s, b)| s.stats().breaker_opened - b).collect();
    println!("slot migration: {redirects} MOVED redirects surfaced; breakers opened per store: {opened:?}");
    for s in &failed {
        let why = s.outcome.as_ref().unwrap_err();
        let redirect = s.key.is_none() && why.contains("Moved") && s.asked >= began && s.asked <= ended;
        let breaker = why.contains("circuit breaker open") && s.asked >= began && s.asked <= ended + cool_down * 2;
        assert!(redirect || breaker, "a failure other than a redirect of the moving key or its breaker: {s:?}");
    }
    assert_within_the_bucket(&samples, Source::Redis, 1);
}

/// Moves `slot` from node `from` to node `to` as `redis-cli --cluster reshard` does: importing,
/// migrating, the keys one batch at a time, then the new owner told to every primary, itself
/// first.
fn migrate(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
    let (src, dst) = (&cluster.nodes[from], &cluster.nodes[to]);
    let (src_id, dst_id) = (src.cli(&["cluster", "myid"]), dst.cli(&["cluster", "myid"]));
    let slot = slot.to_string();
    assert_eq!(dst.cli(&["cluster", "setslot", &slot, "importing", &src_id]), "OK");
    assert_eq!(src.cli(&["cluster", "setslot", &slot, "migrating", &dst_id]), "OK");
    loop {
        let keys = src.cli(&["cluster", "getkeysinslot", &slot, "100"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        // Keys stay in use meanwhile: let the clients meet ASK for a moment.
        std::thread::sleep(Duration::from_millis(200));
        let port = dst.port.to_string();
        let mut args = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "keys"];
        args.extend(keys);
        let reply = src.cli(&args);
        assert!(reply == "OK" || reply == "NOKEY", "MIGRATE: {reply}");
    }
    // The new owner first, then the old one (a node told first would send clients back and
    // forth between them), then the other primaries.
    let rest = cluster.live().filter(|n| !n.is_replica() && n.port != src.port && n.port != dst.port);
    for n in [dst, src].into_iter().chain(rest) {
        assert_eq!(n.cli(&["cluster", "setslot", &slot, "node", &dst_id]), "OK");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_redis_restarted_without_its_data_grants_a_fresh_quota() {
    let mut server = RedisServer::start();
    let stores = stores(RedisOptions::single(server.url(), OnError::FailClosed), OnError::FailClosed);
    let store = &stores[0];
    let decide = |check: Check| async move { store.decide_detailed(&[check], None).await };
    // Spend one key fully and another partly.
    let (spent, partly) = (LOAD.spread(1), LOAD.spread(2));
    for _ in 0..SPREAD {
        assert!(decide(spent).await.unwrap().verdict.allowed);
    }
    let denied = decide(spent).await.unwrap();
    assert!(!denied.verdict.allowed && denied.source == Source::Redis);
    for _ in 0..3 {
        decide(partly).await.unwrap();
    }
    // Redis restarts empty (no persistence): every key it held is gone.
    server.restart();
    // The first call after the restart may find the old connection dead: fail-closed refuses it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let fresh = loop {
        match decide(partly).await {
            Ok(v) => break v,
            Err(e) => assert!(Instant::now() < deadline, "Redis never came back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // What clients see: a fresh quota. The partly spent key has its whole capacity again ...
    assert!(fresh.verdict.allowed && fresh.source == Source::Redis);
    assert_eq!(fresh.verdict.decisions[0].remaining, SPREAD - 1, "3 of 5 were spent before the restart");
    // ... and the spent key too, except on the instance that cached its denial, which keeps
    // denying it until the retry time Redis gave (1000 s a token here), without asking Redis.
    let cached = decide(spent).await.unwrap();
    assert_eq!((cached.verdict.allowed, cached.source), (false, Source::DenyCache));
    let other = stores[1].decide_detailed(&[spent], None).await.unwrap();
    assert_eq!((other.verdict.allowed, other.source), (true, Source::Redis), "another instance: a fresh quota");
    assert_eq!(other.verdict.decisions[0].remaining, SPREAD - 1);
}
