//! The rate-limit service observed as the gateway is: after a known sequence of gRPC
//! `ShouldRateLimit` calls, the observer's families hold exactly its decisions under the
//! gateway's metric names, with `route="rls:<domain>"` over the domain's own policies; store
//! errors are counted; no request's domain becomes a label. The service runs for real on a
//! loopback port (memory store on a manual clock, or a real `redis-server`).

mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use sluice_gateway::observe::Scrape;
use support::{Backend, Harness, call, fresh, overall, request};

const EDGE: &str = "domain: edge
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: watch
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: closed
    rate_limit:
      unit: hour
      requests_per_unit: 0
";

const OTHER: &str = "domain: other
descriptors:
  - key: ip
    rate_limit:
      unit: minute
      requests_per_unit: 5
";

/// The observer's exposition, as the admin listener would render it.
fn scrape(h: &Harness, store: &'static str) -> String {
    let scrape = Scrape {
        in_flight: 0,
        max_in_flight: None,
        store,
        ready: true,
        keys: Vec::new(),
        breaker_open: None,
        deny_cache_hits: None,
        leases: None,
    };
    h.observer.metrics().render(scrape)
}

fn decisions(route: &str, policy: &str, outcome: &str) -> String {
    format!(
        "sluice_decisions_total{{route=\"{route}\",policy=\"{policy}\",algorithm=\"fixed-window\",outcome=\"{outcome}\"}}"
    )
}

fn requests(route: &str, outcome: &str) -> String {
    format!("sluice_requests_total{{route=\"{route}\",outcome=\"{outcome}\"}}")
}

/// The value of the sample `series` (written as in the exposition), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn must(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[tokio::test]
async fn grpc_decisions_are_counted_under_the_gateways_names_with_the_domains_route() {
    let h = Harness::start(Backend::Memory, &[("edge.yaml", EDGE), ("other.yaml", OTHER)], "", "").await;
    let mut c = h.client().await;
    let user = |u: &str| request("edge", &[&[("user", u)]], 0);
    let codes = [
        overall(&call(&mut c, user("alice")).await),
        overall(&call(&mut c, user("alice")).await),
        overall(&call(&mut c, user("alice")).await),
    ];
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
    // The shadow limit's second request would be over: answered OK, counted as shadow_denied.
    for _ in 0..2 {
        assert_eq!(overall(&call(&mut c, request("edge", &[&[("watch", "w")]], 0)).await), Code::Ok);
    }
    // A domain no file configures: nothing matches (unmatched), and a limit override is decided
    // under the one fixed route of unknown domains.
    let nowhere = fresh("nowhere");
    assert_eq!(overall(&call(&mut c, request(&nowhere, &[&[("user", "alice")]], 0)).await), Code::Ok);
    let mut with_override = request(&nowhere, &[&[("user", "alice")]], 0);
    with_override.descriptors[0].limit = Some(RateLimitOverride { requests_per_unit: 7, unit: 2 });
    assert_eq!(overall(&call(&mut c, with_override).await), Code::Ok);
    // An override in a configured domain with the parameters of another domain's limit: the
    // request counts under its domain, the check under no policy (the request chose it).
    let mut borrowed = request("edge", &[&[("user", "carol")]], 0);
    borrowed.descriptors[0].limit = Some(RateLimitOverride { requests_per_unit: 5, unit: 2 });
    assert_eq!(overall(&call(&mut c, borrowed).await), Code::Ok);

    let m = scrape(&h, "memory");
    let user_policy = "fixed-window-2-per-1h";
    let shadow_policy = "fixed-window-1-per-1h-shadow";
    assert_eq!(must(&m, &decisions("rls:edge", user_policy, "allowed")), 2.0);
    assert_eq!(must(&m, &decisions("rls:edge", user_policy, "denied")), 1.0);
    assert_eq!(must(&m, &decisions("rls:edge", user_policy, "error")), 0.0);
    assert_eq!(must(&m, &decisions("rls:edge", shadow_policy, "allowed")), 1.0);
    assert_eq!(must(&m, &decisions("rls:edge", shadow_policy, "shadow_denied")), 1.0);
    assert_eq!(must(&m, &requests("rls:edge", "allowed")), 5.0);
    assert_eq!(must(&m, &requests("rls:edge", "denied")), 1.0);
    assert_eq!(must(&m, &requests("rls:other", "allowed")), 0.0, "every configured domain shows from its load");
    assert_eq!(must(&m, &requests("unmatched", "unlimited")), 1.0);
    // An override's policy is named after numbers the request chose: it never becomes a label.
    assert_eq!(must(&m, &requests("rls:(unknown)", "allowed")), 1.0);
    assert!(!m.contains("fixed-window-7-per-1m"), "an override's policy is no label:\n{m}");
    assert_eq!(
        must(&m, "sluice_decision_duration_seconds_count{store=\"memory\"}"),
        7.0,
        "one observation per decided request"
    );
    assert_eq!(sample(&m, &decisions("rls:edge", "fixed-window-5-per-1m", "allowed")), None, "other's policy");
    assert_eq!(sample(&m, &decisions("rls:other", user_policy, "allowed")), None, "edge's policy");
    assert!(!m.contains("nowhere"), "a request's domain never becomes a label:\n{m}");

    // envoyproxy/ratelimit's counters stay, on the service's own port.
    let own = h.rls.metrics_text();
    assert!(own.contains("sluice_rls_requests_total{result=\"over_limit\"} 1"), "{own}");

    // The status page's rows.
    let counts = h.rls.counts();
    let row = counts.iter().find(|c| c.route == "rls:edge" && c.policy == user_policy).expect("a row");
    assert_eq!((row.allowed, row.denied, row.algorithm), (2, 1, "fixed-window"));
    let shadow = counts.iter().find(|c| c.route == "rls:edge" && c.policy == shadow_policy).expect("a row");
    assert_eq!((shadow.allowed, shadow.shadow_denied), (1, 1));
}

#[tokio::test]
async fn a_descriptor_over_without_the_store_denies_the_request_it_is_counted_in() {
    let h = Harness::start(Backend::Memory, &[("edge.yaml", EDGE)], "charge = \"independent\"", "").await;
    let mut c = h.client().await;
    // `closed` (0 per hour) is over without asking the store; `user` is decided and charged.
    let r = call(&mut c, request("edge", &[&[("user", "bob")], &[("closed", "x")]], 0)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let m = scrape(&h, "memory");
    assert_eq!(must(&m, &decisions("rls:edge", "fixed-window-2-per-1h", "allowed")), 1.0, "user's own decision");
    assert_eq!(must(&m, &requests("rls:edge", "denied")), 1.0, "the request was answered over the limit");
    assert_eq!(must(&m, &requests("rls:edge", "allowed")), 0.0);
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn redis_store_errors_are_counted_on_the_domains_route() {
    let mut h = Harness::start(Backend::Redis, &[("edge.yaml", EDGE)], "", "").await;
    let mut c = h.client().await;
    let u = fresh("u");
    assert_eq!(overall(&call(&mut c, request("edge", &[&[("user", &u)]], 0)).await), Code::Ok);
    let m = scrape(&h, "redis");
    let errors = |m: &str| {
        ["timeout", "unavailable"]
            .iter()
            .map(|kind| must(m, &format!("sluice_store_errors_total{{store=\"redis\",kind=\"{kind}\"}}")))
            .sum::<f64>()
    };
    assert_eq!(errors(&m), 0.0, "the error series exist before the first error");

    h.redis.as_mut().expect("a redis-server").kill();
    for _ in 0..2 {
        let e = c.should_rate_limit(request("edge", &[&[("user", &u)]], 0)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "fail-closed: {e}");
    }
    let m = scrape(&h, "redis");
    assert_eq!(errors(&m), 2.0, "{m}");
    assert_eq!(must(&m, &requests("rls:edge", "error")), 2.0);
    assert_eq!(must(&m, &decisions("rls:edge", "fixed-window-2-per-1h", "error")), 2.0);
    assert_eq!(must(&m, &decisions("rls:edge", "fixed-window-2-per-1h", "allowed")), 1.0);
}

#[tokio::test]
async fn a_flood_of_distinct_limit_overrides_is_capped_and_adds_no_series() {
    let h = Harness::start(Backend::Memory, &[("edge.yaml", EDGE)], "", "").await;
    let mut c = h.client().await;
    let _ = call(&mut c, request("edge", &[&[("user", "dora")]], 0)).await;
    let series = |m: &str| m.lines().filter(|l| !l.starts_with('#')).count();
    let before = series(&scrape(&h, "memory"));
    let mut refused = 0;
    for n in 1..=(sluice_rls::MAX_OVERRIDE_POLICIES as u32 + 20) {
        let mut r = request("edge", &[&[("user", "dora")]], 0);
        r.descriptors[0].limit = Some(RateLimitOverride { requests_per_unit: 1_000 + n, unit: 1 });
        match c.should_rate_limit(r).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 20, "overrides beyond the cap are refused");
    let m = scrape(&h, "memory");
    assert_eq!(series(&m), before, "request-chosen overrides add no series:\n{m}");
    assert!(!m.contains("per-1s"), "{m}");
}
