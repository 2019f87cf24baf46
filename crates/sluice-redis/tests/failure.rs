//! Redis killed, paused (SIGSTOP) and brought back under load, in each failure mode: the
//! breaker opens, decisions then take the failure path without calling Redis (so without
//! waiting for the timeout), and a probe closes the breaker once Redis answers again.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_core::{NANOS_PER_SEC, Policy, TokenBucket};
use sluice_redis::{BreakerOptions, BreakerState, OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHash, KeyHasher, NamedPolicy, StoreError};
use support::RedisServer;

const TIMEOUT: Duration = Duration::from_millis(300);
/// Long enough that the checks made while the breaker is open finish before a probe is due.
const COOL_DOWN: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Pause,
}

fn store(server: &RedisServer, mode: OnError) -> Arc<RedisStore> {
    let policy = NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(5, 0.001).unwrap()) };
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.on_error = mode;
    o.timeout = TIMEOUT;
    o.breaker = BreakerOptions { failures_to_open: 3, cool_down: COOL_DOWN };
    Arc::new(RedisStore::new(vec![policy], o).expect("valid store"))
}

fn fresh_key(n: u64) -> KeyHash {
    KeyHasher::from_secret(b"load").hash(&[&n.to_le_bytes()])
}

/// Background traffic on fresh keys (each admitted by Redis when Redis answers) until told to
/// stop; panics on any outcome the mode does not allow.
fn load(store: Arc<RedisStore>, mode: OnError, stop: Arc<AtomicBool>, seed: u64) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let check = [Check { policy: 0, key: fresh_key(seed * 1_000_000 + n), cost: 1 }];
            let result = store.decide_detailed(&check, None).await;
            match (mode, result) {
                (_, Ok(o)) if o.source == Source::Redis => assert!(o.verdict.allowed),
                (OnError::FailOpen, Ok(o)) => assert!(o.source == Source::FailOpen && o.verdict.allowed),
                (OnError::Local, Ok(o)) => assert!(o.source == Source::Local && o.verdict.allowed),
                (OnError::FailClosed, Err(StoreError::Unavailable(_) | StoreError::Timeout(_))) => {}
                (mode, other) => panic!("{mode}: unexpected outcome under load: {other:?}"),
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    })
}

async fn outage(mode: OnError, fault: Fault) {
    let mut server = RedisServer::start();
    let s = store(&server, mode);
    let warm = s.decide_detailed(&[Check { policy: 0, key: fresh_key(u64::MAX), cost: 1 }], None).await.unwrap();
    assert_eq!(warm.source, Source::Redis);

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (1..=4).map(|i| load(Arc::clone(&s), mode, Arc::clone(&stop), i)).collect();
    tokio::time::sleep(Duration::from_millis(50)).await;

    match fault {
        Fault::Kill => server.kill(),
        Fault::Pause => server.pause(),
    }
    let fault_at = Instant::now();

    // The load and these decisions fail until the breaker opens.
    let me = KeyHasher::from_secret(b"foreground").hash(&[b"client"]);
    let one = [Check { policy: 0, key: me, cost: 1 }];
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.breaker_state() != BreakerState::Open {
        assert!(Instant::now() < deadline, "{mode}/{fault:?}: the breaker did not open");
        let _ = s.decide_detailed(&one, None).await;
    }
    let time_to_open = fault_at.elapsed();
    let opened = s.stats();
    match fault {
        Fault::Kill => assert!(opened.redis_errors >= 3, "{mode}: refused connections counted: {opened:?}"),
        Fault::Pause => assert!(opened.timeouts >= 3, "{mode}: timeouts counted: {opened:?}"),
    }

    // Open: no decision reaches Redis, so none waits for the timeout.
    let calls = s.stats().redis_calls;
    let other = [Check { policy: 0, key: KeyHasher::from_secret(b"foreground").hash(&[b"other"]), cost: 1 }];
    let mut slowest = Duration::ZERO;
    for i in 0..100u64 {
        let began = Instant::now();
        let result = s.decide_detailed(&other, None).await;
        slowest = slowest.max(began.elapsed());
        match mode {
            OnError::FailOpen => {
                let o = result.expect("fail-open admits");
                assert_eq!(o.source, Source::FailOpen);
                assert!(o.verdict.allowed);
            }
            OnError::FailClosed => match result {
                Err(StoreError::Unavailable(why)) => {
                    assert!(why.contains("breaker"), "{why}");
                    let wait = s.unavailable_retry_after();
                    assert!(wait > Duration::ZERO && wait <= COOL_DOWN, "Retry-After hint {wait:?}");
                }
                other => panic!("fail-closed: {other:?}"),
            },
            OnError::Local => {
                let o = result.expect("local decides");
                assert_eq!(o.source, Source::Local);
                // The local bucket of 5 holds for this key as Redis's would.
                assert_eq!(o.verdict.allowed, i < 5, "local decision {i}");
            }
        }
    }
    let open = s.stats();
    assert_eq!(open.redis_calls, calls, "{mode}/{fault:?}: no call reached Redis while the breaker was open");
    assert_eq!(open.breaker, BreakerState::Open);
    assert!(open.breaker_rejections >= 100);
    assert!(slowest < TIMEOUT, "{mode}/{fault:?}: a decision waited {slowest:?} with the breaker open");
    let back_at = Instant::now();

    match fault {
        Fault::Kill => tokio::task::block_in_place(|| server.restart()),
        Fault::Pause => server.resume(),
    }

    // After the cool-down, a probe reaches Redis and closes the breaker.
    let deadline = Instant::now() + COOL_DOWN + Duration::from_secs(20);
    let probe_key = KeyHasher::from_secret(b"probe").hash(&[b"p"]);
    loop {
        let r = s.decide_detailed(&[Check { policy: 0, key: probe_key, cost: 0 }], None).await;
        if matches!(&r, Ok(o) if o.source == Source::Redis) {
            break;
        }
        assert!(Instant::now() < deadline, "{mode}/{fault:?}: Redis never came back: {r:?} {:?}", s.stats());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.breaker_state(), BreakerState::Closed);
    // Figures for the record (cargo test -- --nocapture).
    eprintln!(
        "{mode}/{fault:?}: breaker open {time_to_open:?} after the fault; slowest of 100 decisions while open \
         {slowest:?} (timeout {TIMEOUT:?}); closed {:?} after Redis was back",
        back_at.elapsed()
    );
    let after = s.stats();
    assert!(after.redis_calls > calls);
    assert!(after.breaker_opened >= 1);
    if let Fault::Kill = fault {
        assert!(after.script_reloads >= 2, "the restarted server needed the script again");
    }

    stop.store(true, Ordering::Relaxed);
    let served = AtomicU64::new(0);
    for l in loads {
        served.fetch_add(l.await.expect("the load ran without an unexpected outcome"), Ordering::Relaxed);
    }
    assert!(served.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_through_a_kill() {
    outage(OnError::FailOpen, Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_through_a_pause() {
    outage(OnError::FailOpen, Fault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_through_a_kill() {
    outage(OnError::FailClosed, Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_through_a_pause() {
    outage(OnError::FailClosed, Fault::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_through_a_kill() {
    outage(OnError::Local, Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_through_a_pause() {
    outage(OnError::Local, Fault::Pause).await;
}

#[tokio::test]
async fn a_store_built_while_redis_is_down_starts_in_its_failure_mode() {
    let mut server = RedisServer::start();
    server.kill();
    let s = store(&server, OnError::FailClosed);
    let one = [Check { policy: 0, key: fresh_key(1), cost: 1 }];
    assert!(matches!(s.decide_detailed(&one, Some(NANOS_PER_SEC)).await, Err(StoreError::Unavailable(_))));
    assert!(s.ping().await.is_err());
}
