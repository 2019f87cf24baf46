//! Redis Sentinel on real servers started by the tests: a primary, one replica and three
//! Sentinels (quorum 2, `down-after-milliseconds` 1000). A store built from the Sentinels finds
//! the primary through them and decides there; under load, the primary is killed (SIGKILL) or
//! failed over on purpose (`SENTINEL FAILOVER`, the old primary still up), the Sentinels promote
//! the replica and the stores move to it on their own, in `fail-closed` and `fail-open`.
//!
//! As in `cluster_faults.rs`, three `RedisStore`s (three sluice instances) decide one hot token
//! bucket key and many other keys; the hot key's admissions are counted against capacity + rate
//! x elapsed. Replication is asynchronous: writes the replica had not received when it was
//! promoted are lost, and each lost admission is one the new primary grants again. The tests
//! measure that (the other keys' admissions the new primary does not count, the hot key's
//! excess over its bound) and allow the hot key an excess of at most its admissions answered
//! around the failover. Figures are printed, never asserted as timings.

#[path = "support/hot_load.rs"]
mod hot_load;
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hot_load::{CAPACITY, HotLoad, RATE, SPREAD, Sample, policies, stores};
use sluice_core::{FixedWindow, NANOS_PER_SEC, Policy};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHasher, NamedPolicy};
use support::SentinelSet;

/// Five Redis processes per set, and failovers timed under load: one set at a time.
static ONE_SET_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a Sentinel waits for an answer before it calls the primary down.
const DOWN_AFTER_MS: u64 = 1_000;

/// The hot key and the other keys.
const LOAD: HotLoad = HotLoad::new(b"sentinel");
/// Admissions answered this long before the kill may not have reached the replica.
const REPLICATION_WINDOW: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_finds_the_primary_through_the_sentinels_decides_there_and_follows_a_planned_failover() {
    let _one = ONE_SET_AT_A_TIME.lock().await;
    // Every process with a password: the Sentinels ask for it too (NOAUTH), and are given the
    // one the URLs carry, which is the primary's.
    let set = SentinelSet::start(DOWN_AFTER_MS, Some("sentinel-test-password"));
    // A Sentinel that is down, listed first, costs nothing: every Sentinel is asked at once.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut urls = vec![format!("redis://:sentinel-test-password@127.0.0.1:{nobody}")];
    urls.extend(set.urls());
    let mut o = RedisOptions::sentinel(SentinelSet::MASTER, urls, OnError::FailClosed);
    o.timeout = Duration::from_secs(2);
    o.deny_cache_entries = 0;
    let window = Policy::from(FixedWindow::new(3, 3_600 * NANOS_PER_SEC).unwrap());
    let store = RedisStore::new(vec![NamedPolicy { name: "w".into(), policy: window }], o.clone()).unwrap();
    let check = [Check { policy: 0, key: KeyHasher::from_secret(b"sentinel").hash(&[b"one"]), cost: 1 }];

    store.ping().await.expect("PING on the primary");
    for _ in 0..2 {
        let o = store.decide_detailed(&check, None).await.expect("decided");
        assert_eq!((o.verdict.allowed, o.source), (true, Source::Redis));
    }
    // The state is on the primary, and reaches its replica from there.
    let key = store.stored_key(&check[0]).unwrap();
    assert_eq!(set.cli(set.nodes[0].port, &["exists", &key]), "1", "the key is on the primary");
    assert_eq!(set.cli(set.nodes[0].port, &["role"]).lines().next(), Some("master"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while set.cli(set.nodes[1].port, &["exists", &key]) != "1" {
        let replication = set.cli(set.nodes[1].port, &["info", "replication"]);
        assert!(Instant::now() < deadline, "the replica never got the key: {replication}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A name the Sentinels do not monitor: every decision is an error that says so.
    let mut wrong = o.clone();
    wrong.sentinel = Some("not-monitored".into());
    let wrong = RedisStore::new(policies(), wrong).unwrap();
    let e = wrong.decide_detailed(&[LOAD.hot()], None).await.unwrap_err().to_string();
    assert!(e.contains("monitors no primary named \"not-monitored\""), "{e}");

    // A planned failover: the Sentinels promote the replica; the old primary stays up, and a
    // primary, for about ten seconds more, until they reconfigure it. No call fails: the store
    // moves because the Sentinels name the new primary. Each probe is a fresh key, which shows
    // on the node that decided it (the two no longer replicate each other).
    let asked = Instant::now();
    assert_eq!(set.cli(set.sentinels[1].port, &["sentinel", "failover", SentinelSet::MASTER]), "OK");
    let promoted = tokio::task::block_in_place(|| set.wait_failover(set.nodes[0].port, Duration::from_secs(30)));
    assert_eq!(promoted, 1, "the replica was promoted");
    let switched = asked.elapsed();
    let mut probes = 0u64;
    loop {
        probes += 1;
        let probe =
            [Check { policy: 0, key: KeyHasher::from_secret(b"sentinel").hash(&[&probes.to_le_bytes()]), cost: 1 }];
        let o = store.decide_detailed(&probe, None).await.expect("no call fails in a planned failover");
        assert_eq!((o.verdict.allowed, o.source), (true, Source::Redis));
        if set.cli(set.nodes[1].port, &["exists", &store.stored_key(&probe[0]).unwrap()]) == "1" {
            break;
        }
        assert!(asked.elapsed() < Duration::from_secs(10), "the store stayed on the old primary");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "SENTINEL FAILOVER: every Sentinel named the new primary {:.2} s after it was asked; the store decided there \
         from {:.2} s on, without a failed call; the old primary still answers as a primary: {}",
        switched.as_secs_f64(),
        asked.elapsed().as_secs_f64(),
        set.cli(set.nodes[0].port, &["role"]).lines().next().unwrap_or_default() == "master",
    );
    // The window's count carried over to the new primary: the third request is the last one
    // admitted.
    let third = store.decide_detailed(&check, None).await.unwrap();
    assert_eq!((third.verdict.allowed, third.verdict.decisions[0].remaining), (true, 0), "{third:?}");
    let fourth = store.decide_detailed(&check, None).await.unwrap();
    assert!(!fourth.verdict.allowed, "the window's count carried over to the new primary");
}

/// The hot key's admissions by Redis against the bucket's bound at every instant: the largest
/// excess over capacity + rate x (then - first request), 0 when always within.
fn hot_excess(samples: &[Sample]) -> u64 {
    let Some(first) = samples.iter().map(|s| s.asked).min() else { return 0 };
    let mut admitted = 0u64;
    let mut excess = 0;
    for s in samples.iter().filter(|s| s.key.is_none() && matches!(s.outcome, Ok((true, Source::Redis)))) {
        admitted += 1;
        let bound = CAPACITY + (RATE * (s.answered - first).as_secs_f64()).ceil() as u64;
        excess = excess.max(admitted.saturating_sub(bound));
    }
    excess
}

/// The other keys' admissions by Redis, per key.
fn spread_admitted(samples: &[Sample]) -> HashMap<u64, u64> {
    let mut per_key: HashMap<u64, u64> = HashMap::new();
    for s in samples {
        if let (Some(k), Ok((true, Source::Redis))) = (s.key, &s.outcome) {
            *per_key.entry(k).or_default() += 1;
        }
    }
    per_key
}

/// The other keys admitted by Redis beyond their capacity, in all.
fn spread_excess(samples: &[Sample]) -> u64 {
    spread_admitted(samples).values().map(|n| n.saturating_sub(SPREAD)).sum()
}

/// Of the other keys' admissions by Redis, those the primary at the end does not count: writes
/// lost in the failover (its state read with `peek`, which charges nothing).
async fn lost_writes(store: &RedisStore, samples: &[Sample]) -> u64 {
    let mut lost = 0;
    for (k, n) in spread_admitted(samples) {
        let d = &store.peek_checks(&[LOAD.spread(k)], None).await.expect("peek on the new primary").decisions[0];
        // Its bucket refills a token per 1000 s: what it holds is what was not spent.
        let counted = if d.allowed { SPREAD - 1 - d.remaining } else { SPREAD };
        lost += n.saturating_sub(counted);
    }
    lost
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL to the primary.
    Kill,
    /// `SENTINEL FAILOVER`: the old primary stays up, and writable until the Sentinels
    /// reconfigure it as a replica (about ten seconds later).
    Planned,
}

/// What a failover cost, as measured.
struct Failover {
    samples: Vec<Sample>,
    fault: Instant,
    /// From the fault to every Sentinel naming the replica.
    promoted_after: Duration,
    /// The other keys' admissions the new primary does not count.
    lost: u64,
    /// From the fault to the last failed decision.
    recovered_after: Duration,
    /// The hot key's admissions that may have been lost (see [`report`]).
    allowance: u64,
}

/// Three stores under load (one set at a time); `fault` at 0.8 s; then until the Sentinels name
/// the replica, and 2.5 s more. What callers saw is printed as `what`.
async fn failover_under_load(what: &str, mode: OnError, fault: Fault) -> Failover {
    let _one = ONE_SET_AT_A_TIME.lock().await;
    let mut set = SentinelSet::start(DOWN_AFTER_MS, None);
    let stores = stores(RedisOptions::sentinel(SentinelSet::MASTER, set.urls(), OnError::FailClosed), mode);
    let change = || {
        match fault {
            Fault::Kill => set.nodes[0].kill(),
            Fault::Planned => {
                assert_eq!(set.cli(set.sentinels[0].port, &["sentinel", "failover", SentinelSet::MASTER]), "OK")
            }
        }
        set.wait_failover(set.nodes[0].port, Duration::from_secs(30))
    };
    let load = LOAD.under_load(&stores, Duration::from_millis(800), change, Duration::from_millis(2_500)).await;
    assert_eq!(load.result, 1, "the replica was promoted");
    let lost = lost_writes(&stores[0], &load.samples).await;
    let promoted_after = load.ended - load.began;
    let mut f = Failover {
        samples: load.samples,
        fault: load.began,
        promoted_after,
        lost,
        recovered_after: Duration::ZERO,
        allowance: 0,
    };
    (f.recovered_after, f.allowance) = report(what, &f);
    f
}

/// What callers saw, printed. Returns the time from the fault to the last failed decision, and
/// the hot key's admissions that may have been lost (those answered from 100 ms before the
/// fault to 700 ms after the Sentinels named the new primary: the watcher's interval and grace,
/// and a margin).
fn report(what: &str, f: &Failover) -> (Duration, u64) {
    let after: Vec<&Sample> = f.samples.iter().filter(|s| s.answered >= f.fault).collect();
    let failed: Vec<&&Sample> = after.iter().filter(|s| s.failed()).collect();
    let last_failed = failed.iter().map(|s| s.answered).max().map_or(Duration::ZERO, |t| t - f.fault);
    let errors = failed.iter().filter(|s| s.outcome.is_err()).count();
    let worst = after.iter().map(|s| s.latency()).max().unwrap_or_default();
    // After a kill, every decision by Redis is the new primary's.
    let first_by_redis: Vec<String> = (0..3)
        .map(|store| {
            let first = after.iter().find(|s| s.store == store && s.by_redis() && s.asked >= f.fault);
            first.map_or("never".into(), |s| format!("{:.2} s", (s.answered - f.fault).as_secs_f64()))
        })
        .collect();
    let mut kinds: HashMap<&str, usize> = HashMap::new();
    for s in &failed {
        let kind = match &s.outcome {
            Err(e) if e.contains("circuit breaker") => "breaker open",
            Err(e) if e.contains("timed out") || e.contains("timeout") => "timeout",
            Err(_) => "error",
            Ok(_) => "failure mode",
        };
        *kinds.entry(kind).or_default() += 1;
    }
    let first_error = failed.iter().find_map(|s| s.outcome.as_ref().err().filter(|e| !e.contains("circuit breaker")));
    let window = (f.fault - REPLICATION_WINDOW)..(f.fault + f.promoted_after + Duration::from_millis(700));
    let allowance = f
        .samples
        .iter()
        .filter(|s| s.key.is_none() && matches!(s.outcome, Ok((true, Source::Redis))) && window.contains(&s.answered))
        .count() as u64;
    println!(
        "{what}: promoted {:.2} s after the fault; last failed decision {:.2} s after it; {} of {} decisions from \
         the fault on took the failure path ({errors} errors returned: {kinds:?}, the first {first_error:?}); first decision by Redis asked \
         after the fault, per store: {}; worst decision {:.1} ms; hot key over its bound by {} (allowance \
         {allowance}); other keys: {} admissions lost by the failover, {} over capacity",
        f.promoted_after.as_secs_f64(),
        last_failed.as_secs_f64(),
        failed.len(),
        after.len(),
        first_by_redis.join(", "),
        worst.as_secs_f64() * 1e3,
        hot_excess(&f.samples),
        f.lost,
        spread_excess(&f.samples),
    );
    (last_failed, allowance)
}

/// Every store decides on the new primary after the last failed decision, none failing; and
/// nothing passed beyond a limit but what asynchronous replication lost: the hot key over its
/// bound by at most its allowance, the other keys over their capacity by at most the writes lost.
fn assert_followed_within_what_was_lost(f: &Failover) {
    let tail: Vec<&Sample> = f.samples.iter().filter(|s| s.asked > f.fault + f.recovered_after).collect();
    assert!(tail.len() > 100 && tail.iter().all(|s| !s.failed()), "{} decisions after recovery", tail.len());
    for store in 0..3 {
        assert!(tail.iter().any(|s| s.store == store && s.by_redis()), "store {store} decides on the new primary");
    }
    assert!(tail.iter().any(|s| s.key.is_none() && s.admitted()), "the hot key is admitted");
    assert!(hot_excess(&f.samples) <= f.allowance, "Redis over-admitted beyond the writes the failover may have lost");
    assert!(spread_excess(&f.samples) <= f.lost, "an idle key over its capacity by more than the writes lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_a_killed_primary_is_followed_to_the_promoted_replica() {
    let f = failover_under_load("fail-closed, primary killed", OnError::FailClosed, Fault::Kill).await;
    let samples = &f.samples;
    assert!(samples.iter().all(|s| matches!(s.outcome, Ok((_, Source::Redis | Source::DenyCache)) | Err(_))));
    assert!(samples.iter().filter(|s| s.answered < f.fault).all(|s| s.outcome.is_ok()), "failures before the kill");
    assert!(samples.iter().any(|s| s.answered >= f.fault && s.outcome.is_err()), "the kill was noticed");
    // The stores decide again on the new primary on their own, and nothing passes beyond a
    // limit but what asynchronous replication lost.
    assert_followed_within_what_was_lost(&f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_a_killed_primary_admits_undecided_until_the_stores_find_the_promoted_replica() {
    let f = failover_under_load("fail-open, primary killed", OnError::FailOpen, Fault::Kill).await;
    let samples = &f.samples;
    assert!(samples.iter().all(|s| s.outcome.is_ok()), "fail-open surfaced an error");
    let open: Vec<&Sample> = samples.iter().filter(|s| matches!(s.outcome, Ok((_, Source::FailOpen)))).collect();
    assert!(!open.is_empty() && open.iter().all(|s| s.admitted() && s.answered >= f.fault));
    assert_followed_within_what_was_lost(&f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_a_planned_failover_is_followed_while_the_old_primary_still_answers() {
    let f = failover_under_load("fail-closed, SENTINEL FAILOVER", OnError::FailClosed, Fault::Planned).await;
    // The old primary keeps answering: the stores move when the Sentinels name the new one,
    // not because a call failed.
    assert_followed_within_what_was_lost(&f);
}
