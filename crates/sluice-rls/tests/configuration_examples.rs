//! The examples of envoyproxy/ratelimit's configuration section, each written as a test, on
//! the memory store and on a real Redis: nested descriptors, matching order, depth, unlimited,
//! shadow_mode, replaces, detailed metrics, wildcards, value_to_metric and share_threshold.

#[macro_use]
mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluice_rls::UNLIMITED_REMAINING;
use support::*;

async fn start(backend: Backend, yaml: &str) -> Harness {
    Harness::start(backend, &[("example.yaml", yaml)], "", "").await
}

/// Two limits with one key and different values; another value matches nothing.
async fn example_1(b: Backend) {
    let h = start(b, "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n").await;
    let mut c = h.client().await;
    let r = call(&mut c, request("mongo_cps", &[&[("database", "users")]], 1)).await;
    assert_eq!((limit_of(&r.statuses[0]), r.statuses[0].limit_remaining), (Some((500, "SECOND")), 499));
    let r = call(&mut c, request("mongo_cps", &[&[("database", "orders")]], 1)).await;
    assert_eq!((code(&r.statuses[0]), limit_of(&r.statuses[0])), (Code::Ok, None));
}

/// Nested descriptors, and several descriptors in one request: the answer is their OR.
async fn example_2(b: Backend) {
    let h = start(
        b,
        "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
",
    )
    .await;
    let mut c = h.client().await;
    let number = fresh("2061111111");
    let both: &[&[(&str, &str)]] =
        &[&[("message_type", "marketing"), ("to_number", &number)], &[("to_number", &number)]];
    for i in 0..5u32 {
        let r = call(&mut c, request("messaging", both, 1)).await;
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!((limit_of(&r.statuses[0]), r.statuses[0].limit_remaining), (Some((5, "DAY")), 4 - i));
        assert_eq!((limit_of(&r.statuses[1]), r.statuses[1].limit_remaining), (Some((100, "DAY")), 99 - i));
    }
    let r = call(&mut c, request("messaging", both, 1)).await;
    assert_eq!((overall(&r), code(&r.statuses[0]), code(&r.statuses[1])), (Code::OverLimit, Code::OverLimit, Code::Ok));
    assert_eq!(r.statuses[1].limit_remaining, 95, "a denied request charges nothing");
    // Another number has its own 5 a day.
    let other = fresh("2062222222");
    let r = call(&mut c, request("messaging", &[&[("message_type", "marketing"), ("to_number", &other)]], 1)).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

/// The most specific match wins: key and value before key alone; 0 a second always denies.
async fn example_3(b: Backend) {
    let h = start(
        b,
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    )
    .await;
    let mut c = h.client().await;
    let r = call(&mut c, request("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.1")]], 1)).await;
    assert_eq!(
        (overall(&r), limit_of(&r.statuses[0]), r.statuses[0].limit_remaining),
        (Code::Ok, Some((10, "SECOND")), 9)
    );
    for _ in 0..3 {
        let r = call(&mut c, request("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.5")]], 1)).await;
        assert_eq!(
            (overall(&r), limit_of(&r.statuses[0]), r.statuses[0].limit_remaining),
            (Code::OverLimit, Some((0, "SECOND")), 0)
        );
    }
}

/// A request's tuple count must equal the depth of the configured descriptor.
async fn example_4(b: Backend) {
    let shallow = start(b, "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit:\n      requests_per_unit: 300\n      unit: second\n").await;
    let two: &[&[(&str, &str)]] = &[&[("key", "value"), ("subkey", "subvalue")]];
    let r = call(&mut shallow.client().await, request("example4", two, 1)).await;
    assert_eq!((code(&r.statuses[0]), limit_of(&r.statuses[0])), (Code::Ok, None));
    let nested = start(b, "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    descriptors:\n      - key: subkey\n        rate_limit:\n          requests_per_unit: 300\n          unit: second\n").await;
    let mut c = nested.client().await;
    let r = call(&mut c, request("example4", two, 1)).await;
    assert_eq!((limit_of(&r.statuses[0]), r.statuses[0].limit_remaining), (Some((300, "SECOND")), 299));
    let r = call(&mut c, request("example4", &[&[("key", "value")]], 1)).await;
    assert_eq!(limit_of(&r.statuses[0]), None, "one tuple does not reach the nested limit");
}

/// `unlimited`: OK with 4294967295 remaining, the store never asked.
async fn example_5(b: Backend) {
    let h = start(b, "domain: internal\ndescriptors:\n  - key: ldap\n    rate_limit:\n      unlimited: true\n  - key: azure\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n").await;
    let mut c = h.client().await;
    for _ in 0..3 {
        let r = call(&mut c, request("internal", &[&[("ldap", "x")], &[("azure", "y")]], 1)).await;
        let s = &r.statuses[0];
        assert_eq!((code(s), s.current_limit.clone(), s.limit_remaining), (Code::Ok, None, UNLIMITED_REMAINING));
        assert_eq!(limit_of(&r.statuses[1]), Some((100, "MINUTE")));
    }
    if let Some(redis) = &h.redis {
        // Only the azure key was written.
        assert_eq!(redis.cli(&["DBSIZE"]).trim(), "1");
    }
}

/// `shadow_mode`: decided and counted, always OK; user-b is enforced.
async fn example_6(b: Backend) {
    let h = start(
        b,
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    )
    .await;
    let mut c = h.client().await;
    away_from_boundary(b, 1, 1).await;
    for i in 0..15u32 {
        let r = call(&mut c, request("example6", &[&[("service", "auth-service"), ("user", "user-a")]], 1)).await;
        assert_eq!((overall(&r), code(&r.statuses[0])), (Code::Ok, Code::Ok), "request {}", i + 1);
        assert_eq!(r.statuses[0].limit_remaining, 9u32.saturating_sub(i));
    }
    let m = h.rls.metrics_text();
    assert!(m.contains("descriptor=\"service.user_user-a\",result=\"shadow_over_limit\"} 5"), "{m}");
    away_from_boundary(b, 1, 1).await;
    for i in 0..21u32 {
        let r = call(&mut c, request("example6", &[&[("service", "auth-service"), ("user", "user-b")]], 1)).await;
        assert_eq!(overall(&r), if i < 20 { Code::Ok } else { Code::OverLimit }, "request {}", i + 1);
    }
}

/// `replaces`: a matched limit named in another's `replaces` is dropped, and not charged.
async fn example_7(b: Backend) {
    let h = start(
        b,
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    )
    .await;
    let mut c = h.client().await;
    away_from_boundary(b, 1, 1).await;
    let first: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let second: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    for i in 0..11u32 {
        let r = call(&mut c, request("example7", &[first, second], 1)).await;
        assert_eq!((code(&r.statuses[0]), limit_of(&r.statuses[0])), (Code::Ok, None), "replaced");
        assert_eq!(limit_of(&r.statuses[1]), Some((10, "SECOND")));
        assert_eq!(overall(&r), if i < 10 { Code::Ok } else { Code::OverLimit }, "request {}", i + 1);
    }
    let r = call(&mut c, request("example7", &[first], 1)).await;
    assert_eq!((limit_of(&r.statuses[0]), r.statuses[0].limit_remaining), (Some((5, "SECOND")), 4), "untouched");
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "specific_limit");
}

/// `detailed_metric`: the request's value goes into the metric label.
async fn example_8(b: Backend) {
    let h = start(b, "domain: example8\ndescriptors:\n  - key: key1\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n").await;
    let mut c = h.client().await;
    for v in ["unspecified_value", "unspecified_value2", "value1"] {
        call(&mut c, request("example8", &[&[("key1", v)]], 1)).await;
    }
    let m = h.rls.metrics_text();
    for label in ["key1_unspecified_value", "key1_unspecified_value2", "key1_value1"] {
        assert!(m.contains(&format!("descriptor=\"{label}\",result=\"ok\"}} 1")), "{label} in {m}");
    }
    assert!(!m.contains("descriptor=\"key1\","), "{m}");
}

/// Wildcards anywhere in the value; each matching value has its own counter.
async fn example_9(b: Backend) {
    let h = start(
        b,
        "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    )
    .await;
    let mut c = h.client().await;
    let hit = |k: &'static str, v: &'static str| request("example9", &[&[(k, v)]], 1);
    away_from_boundary(b, 60, 2).await;
    for (k, v, limited) in [
        ("key1", "value1", true),
        ("key1", "valueXYZ", true),
        ("key1", "xvalue", false),
        ("path", "/api/123/action", true),
        ("path", "/api/user-id/action", true),
        ("path", "/api/123/other", false),
        ("route", "/api/v1/resource/123/action", true),
        ("route", "/api/v1/resource/123", false),
    ] {
        let r = call(&mut c, hit(k, v)).await;
        assert_eq!(limit_of(&r.statuses[0]).is_some(), limited, "{k}={v}");
        if limited {
            assert_eq!(r.statuses[0].limit_remaining, 19, "{k}={v} has its own counter");
        }
    }
}

/// `value_to_metric`: runtime values in the metric label at the levels that ask.
async fn example_10(b: Backend) {
    let h = start(
        b,
        "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    )
    .await;
    let mut c = h.client().await;
    call(&mut c, request("example10", &[&[("route", "api"), ("http_method", "GET"), ("subject_id", "123")]], 1)).await;
    call(&mut c, request("example10", &[&[("route", "web"), ("http_method", "POST"), ("subject_id", "456")]], 1)).await;
    let m = h.rls.metrics_text();
    assert!(m.contains("descriptor=\"route_api.http_method_GET.subject_id\""), "{m}");
    assert!(m.contains("descriptor=\"route_web.http_method_POST.subject_id\""), "{m}");
}

/// `share_threshold`: every value a wildcard matches shares one counter.
async fn example_11(b: Backend) {
    let h = start(
        b,
        "domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
",
    )
    .await;
    let mut c = h.client().await;
    away_from_boundary(b, 3600, 5).await;
    for f in ["files/a.pdf", "files/b.csv"] {
        for _ in 0..5 {
            assert_eq!(overall(&call(&mut c, request("example11", &[&[("files", f)]], 1)).await), Code::Ok);
        }
    }
    let r = call(&mut c, request("example11", &[&[("files", "files/c.txt")]], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit, "the shared threshold is spent");
    for _ in 0..10 {
        call(&mut c, request("example11", &[&[("files_no_share", "files_no_share/a.pdf")]], 1)).await;
    }
    let r = call(&mut c, request("example11", &[&[("files_no_share", "files_no_share/b.csv")]], 1)).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 9), "isolated thresholds");
    assert!(h.rls.metrics_text().contains("descriptor=\"files_files/*\""));
}

on_both_stores!(
    example_1, example_2, example_3, example_4, example_5, example_6, example_7, example_8, example_9, example_10,
    example_11
);
