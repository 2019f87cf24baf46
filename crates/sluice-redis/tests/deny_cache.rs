//! The local deny cache: repeated denials are answered without Redis, and it never admits what
//! Redis would deny (nor denies what Redis would admit at the cached cost or above).

mod support;

use std::time::Duration;

use sluice_core::{FixedWindow, NANOS_PER_SEC, Nanos, Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::conformance::{Reference, T0, key, policies};
use sluice_store::{Check, KeyHasher, NamedPolicy, Store};
use support::RedisServer;

fn options(server: &RedisServer, prefix: &str) -> RedisOptions {
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.key_prefix = prefix.into();
    o.timeout = Duration::from_secs(5);
    o
}

/// A small deterministic generator for the traffic.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn the_cache_agrees_with_the_core_on_every_admission() {
    let server = RedisServer::start();
    let all = policies();
    let s = RedisStore::new(all.clone(), options(&server, "agree")).expect("valid store");
    let mut reference = Reference::new(&all);
    let mut rng = Lcg(7);
    let mut now: Nanos = T0;
    for i in 0..3_000 {
        // Bursts: mostly the same instant or a few microseconds apart, sometimes a longer pause.
        now += match rng.below(10) {
            0..=5 => 0,
            6..=8 => rng.below(2_000) * 1_000,
            _ => rng.below(400_000) * 1_000,
        };
        let n = 1 + rng.below(3) as usize;
        let checks: Vec<Check> = (0..n)
            .map(|_| {
                let policy = rng.below(all.len() as u64) as usize;
                let cost = if rng.below(4) == 0 { 1 + rng.below(all[policy].policy.limit()) } else { 1 };
                Check { policy, key: key(rng.below(2) as u8), cost }
            })
            .collect();
        let want = reference.decide(&checks, now).unwrap();
        let got = s.decide_detailed(&checks, Some(now)).await.unwrap();
        assert_eq!(
            got.verdict.allowed,
            want.allowed,
            "request {i} at t0 + {} us: {checks:?} ({:?})",
            (now - T0) / 1000,
            got.source
        );
        if got.source == Source::DenyCache {
            // Each cached denial is a denial the core gives too, and for no later than it says.
            for (g, w) in got.verdict.decisions.iter().zip(&want.decisions) {
                if !g.allowed {
                    assert!(!w.allowed, "request {i}: the cache denied a check the core admits");
                    assert!(g.retry_after <= w.retry_after, "request {i}: cached retry {g:?} vs core {w:?}");
                }
            }
        }
    }
    let stats = s.stats();
    assert!(stats.deny_cache_hits > 100, "the cache answered: {stats:?}");
    assert!(stats.redis_calls < 3_000, "{stats:?}");
}

#[tokio::test]
async fn denied_keys_cost_redis_nothing_until_their_retry_time() {
    let server = RedisServer::start();
    let bucket = NamedPolicy { name: "tb".into(), policy: Policy::from(TokenBucket::new(3, 0.001).unwrap()) };
    let s = RedisStore::new(vec![bucket], options(&server, "real")).expect("valid store");
    let k = KeyHasher::from_secret(b"s").hash(&[b"attacker"]);
    let cost = |c| [Check { policy: 0, key: k, cost: c }];
    assert!(s.decide_detailed(&cost(3), None).await.unwrap().verdict.allowed);
    let denied = s.decide_detailed(&cost(2), None).await.unwrap();
    assert_eq!((denied.source, denied.verdict.allowed), (Source::Redis, false));
    let calls = s.stats().redis_calls;
    for _ in 0..50 {
        let o = s.decide_detailed(&cost(2), None).await.unwrap();
        assert_eq!((o.source, o.verdict.allowed), (Source::DenyCache, false));
        let d = o.verdict.decisions[0];
        assert!(d.retry_after > 0 && d.retry_after <= denied.verdict.decisions[0].retry_after);
    }
    assert_eq!(s.stats().redis_calls, calls, "no call reached Redis");
    // A smaller cost was not the one denied: Redis decides it (and denies it too).
    let smaller = s.decide_detailed(&cost(1), None).await.unwrap();
    assert_eq!((smaller.source, smaller.verdict.allowed), (Source::Redis, false));
    assert_eq!(s.stats().deny_cache_hits, 50);
}

#[tokio::test]
async fn a_cached_denial_denies_the_whole_request_and_charges_nothing() {
    let server = RedisServer::start();
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    let policies = vec![
        named("per-ip", FixedWindow::new(10, 60 * NANOS_PER_SEC).unwrap().into()),
        named("per-account", TokenBucket::new(1, 1.0).unwrap().into()),
    ];
    let s = RedisStore::new(policies, options(&server, "multi")).expect("valid store");
    let h = KeyHasher::from_secret(b"s");
    let (ip, account) = (h.hash(&[b"ip"]), h.hash(&[b"acct"]));
    let account_only = [Check { policy: 1, key: account, cost: 1 }];
    let both = [Check { policy: 0, key: ip, cost: 1 }, Check { policy: 1, key: account, cost: 1 }];
    assert!(s.decide_detailed(&account_only, Some(T0)).await.unwrap().verdict.allowed);
    assert!(!s.decide_detailed(&account_only, Some(T0)).await.unwrap().verdict.allowed);
    let calls = s.stats().redis_calls;
    let o = s.decide_detailed(&both, Some(T0 + 1_000)).await.unwrap();
    assert_eq!(o.source, Source::DenyCache);
    assert!(!o.verdict.allowed && !o.verdict.decisions[1].allowed);
    assert_eq!(o.verdict.tightest(), Some(1), "the cached denial describes the request");
    assert_eq!(s.stats().redis_calls, calls);
    // The IP limit was not charged: its first Redis decision still has 9 of 10 left after it.
    let ip_only = [Check { policy: 0, key: ip, cost: 1 }];
    let d = s.decide_detailed(&ip_only, Some(T0 + 2_000)).await.unwrap();
    assert_eq!((d.source, d.verdict.decisions[0].remaining), (Source::Redis, 9));
    // Once the account's retry time has passed, Redis decides again (and admits).
    let later = s.decide_detailed(&both, Some(T0 + NANOS_PER_SEC)).await.unwrap();
    assert_eq!((later.source, later.verdict.allowed), (Source::Redis, true));
}

#[tokio::test]
async fn a_rebuilt_store_keeps_the_denials_and_the_breaker_of_the_one_it_replaces() {
    let mut server = RedisServer::start();
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    let account = || named("per-account", FixedWindow::new(1, 3_600 * NANOS_PER_SEC).unwrap().into());
    let mut o = options(&server, "rebuilt");
    o.on_error = OnError::FailOpen;
    o.timeout = Duration::from_millis(200);
    let s = RedisStore::new(vec![account()], o).expect("valid store");
    let k = KeyHasher::from_secret(b"s").hash(&[b"acct"]);
    let at = |policy| [Check { policy, key: k, cost: 1 }];
    assert!(s.decide_detailed(&at(0), None).await.unwrap().verdict.allowed);
    let denied = s.decide_reported(&at(0), None).await.unwrap();
    assert!(!denied.verdict.allowed && denied.answered, "Redis's own denial");

    server.kill();
    let other = [Check { policy: 0, key: KeyHasher::from_secret(b"s").hash(&[b"other"]), cost: 1 }];
    for _ in 0..3 {
        let r = s.decide_reported(&other, None).await.unwrap();
        assert!(r.degraded.is_some() && !r.answered, "fail-open answered for Redis");
    }
    assert_eq!(s.breaker_state(), sluice_redis::BreakerState::Open);
    let cached = s.decide_reported(&at(0), None).await.unwrap();
    assert!(!cached.verdict.allowed && cached.degraded.is_none());
    assert!(!cached.answered, "a cached denial is not Redis answering");

    // A reload: another policy listed first, and the account's policy changed under another name.
    let changed = named("per-account-v2", FixedWindow::new(5, 3_600 * NANOS_PER_SEC).unwrap().into());
    let reloaded = s.rebuild(vec![changed, account()]).expect("same options");
    let still = reloaded.decide_detailed(&at(1), None).await.unwrap();
    assert_eq!((still.source, still.verdict.allowed), (Source::DenyCache, false), "the same policy, now second");
    let fresh = reloaded.decide_detailed(&at(0), None).await.unwrap();
    assert_eq!((fresh.source, fresh.verdict.allowed), (Source::FailOpen, true), "another policy has no denial");
    assert_eq!(reloaded.breaker_state(), sluice_redis::BreakerState::Open, "the outage goes on");
    assert_eq!(reloaded.stats().deny_cache_hits, 2, "the counters go on");
}
