//! envoyproxy/ratelimit's own integration sequence, sent by a tonic client to sluice's service
//! on the memory store (manual clock) and on a real Redis: an unknown descriptor, `key1`
//! 50/second, a fresh `key2` value (20/minute) counted down past its limit, and `key2` with
//! `key3` (10/hour) together, in both charging modes.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluice_core::NANOS_PER_SEC;
use support::*;

const BASIC: &str = "\
domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
";

const ANOTHER: &str = "\
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

async fn sequence(backend: Backend, independent: bool) {
    let extra = if independent { "charge = \"independent\"" } else { "" };
    let h = Harness::start(backend, &[("basic.yaml", BASIC), ("another.yaml", ANOTHER)], extra, "").await;
    let mut c = h.client().await;

    // An unknown domain and descriptor: OK, no limit.
    let r = call(&mut c, request("foo", &[&[("hello", "world")]], 1)).await;
    assert_eq!(overall(&r), Code::Ok);
    assert_eq!(r.statuses.len(), 1);
    assert_eq!(
        (code(&r.statuses[0]), r.statuses[0].current_limit.clone(), r.statuses[0].limit_remaining),
        (Code::Ok, None, 0)
    );
    assert!(r.statuses[0].duration_until_reset.is_none());

    // key1: 50 a second, one spent.
    let r = call(&mut c, request("basic", &[&[("key1", "foo")]], 1)).await;
    assert_eq!(overall(&r), Code::Ok);
    let s = &r.statuses[0];
    assert_eq!((code(s), limit_of(s), s.limit_remaining), (Code::Ok, Some((50, "SECOND")), 49));
    let reset = s.duration_until_reset.unwrap();
    assert!(
        reset.seconds * 1_000_000_000 + i64::from(reset.nanos) <= 1_000_000_000
            && (reset.seconds, reset.nanos) != (0, 0)
    );

    // A fresh key2 value: 19..0 remaining, then over the limit from the 21st.
    away_from_boundary(backend, 60, 5).await;
    let v = fresh("key2");
    for i in 0..25u32 {
        let r = call(&mut c, request("another", &[&[("key2", &v)]], 1)).await;
        let s = &r.statuses[0];
        let (want, remaining) = if i < 20 { (Code::Ok, 19 - i) } else { (Code::OverLimit, 0) };
        assert_eq!((overall(&r), code(s), s.limit_remaining), (want, want, remaining), "request {}", i + 1);
        assert_eq!(limit_of(s), Some((20, "MINUTE")));
        let until = s.duration_until_reset.unwrap();
        assert!(until.seconds <= 60);
    }

    // key2 and key3 together: key3 (10/hour) denies from the 11th request. sluice charges a
    // denied request nothing (key2 keeps 10, like envoyproxy/ratelimit with
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT); `independent` charges key2 anyway (its default).
    let v = fresh("pair");
    for i in 0..15u32 {
        let r = call(&mut c, request("another", &[&[("key2", &v)], &[("key3", &v)]], 1)).await;
        let (a, b) = (&r.statuses[0], &r.statuses[1]);
        let over = i >= 10;
        assert_eq!(overall(&r), if over { Code::OverLimit } else { Code::Ok }, "request {}", i + 1);
        let key2_left = match (over, independent) {
            (false, _) | (true, true) => 19 - i,
            (true, false) => 10,
        };
        assert_eq!(
            (code(a), limit_of(a), a.limit_remaining),
            (Code::Ok, Some((20, "MINUTE")), key2_left),
            "request {}",
            i + 1
        );
        let (want, left) = if over { (Code::OverLimit, 0) } else { (Code::Ok, 9 - i) };
        assert_eq!((code(b), limit_of(b), b.limit_remaining), (want, Some((10, "HOUR")), left), "request {}", i + 1);
    }

    // Counted per domain and configured descriptor.
    let m = h.rls.metrics_text();
    assert!(
        m.contains("sluice_rls_descriptors_total{domain=\"another\",descriptor=\"key2\",result=\"over_limit\"} 5"),
        "{m}"
    );
    assert!(
        m.contains("sluice_rls_descriptors_total{domain=\"(unknown)\",descriptor=\"(none)\",result=\"no_limit\"} 1"),
        "{m}"
    );
    assert!(m.contains("sluice_rls_hits_total{domain=\"another\",descriptor=\"key3\"} 15"), "{m}");
}

#[tokio::test]
async fn envoyproxy_sequence_on_memory() {
    sequence(Backend::Memory, false).await;
}

#[tokio::test]
async fn envoyproxy_sequence_on_memory_charging_independently() {
    sequence(Backend::Memory, true).await;
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn envoyproxy_sequence_on_redis() {
    sequence(Backend::Redis, false).await;
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn envoyproxy_sequence_on_redis_charging_independently() {
    sequence(Backend::Redis, true).await;
}

#[tokio::test]
async fn fixed_windows_are_aligned_to_the_unit() {
    let h = Harness::start(Backend::Memory, &[("basic.yaml", BASIC)], "", "").await;
    let mut c = h.client().await;
    let req = || request("basic", &[&[("one_per_minute", "x")]], 1);
    let r = call(&mut c, req()).await;
    assert_eq!(overall(&r), Code::Ok);
    // START is 27.12 s into its minute: the window ends 32.88 s later, whatever came before.
    let until = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!((until.seconds, until.nanos), (32, 876_543_211));
    assert_eq!(overall(&call(&mut c, req()).await), Code::OverLimit);
    h.advance(32 * NANOS_PER_SEC + 876_543_210);
    assert_eq!(overall(&call(&mut c, req()).await), Code::OverLimit, "still the same minute");
    h.advance(1);
    assert_eq!(overall(&call(&mut c, req()).await), Code::Ok, "the next minute");
}
