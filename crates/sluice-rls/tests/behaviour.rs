//! What sluice's service adds to or keeps from envoyproxy/ratelimit, through its gRPC and HTTP
//! faces: hits_addend, limit overrides, response headers, sluice's algorithms and periods on
//! both stores, POST /json, health, metrics and reloads that keep state.

#[macro_use]
mod support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_core::{AlgorithmKind, NANOS_PER_SEC};
use support::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const API: &str = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: burst
    rate_limit:
      unit: minute
      requests_per_unit: 60
      algorithm: token-bucket
      burst: 2
  - key: log
    rate_limit:
      unit: hour
      requests_per_unit: 2
      algorithm: sliding-log
  - key: slide
    rate_limit:
      unit: minute
      requests_per_unit: 4
      algorithm: sliding-window
  - key: leak
    rate_limit:
      unit: second
      requests_per_unit: 1
      algorithm: leaky-bucket
      burst: 2
  - key: tens
    rate_limit:
      unit: second
      unit_multiplier: 10
      requests_per_unit: 2
  - key: half_minute
    rate_limit:
      window: 30s
      requests_per_unit: 1
";

async fn api(b: Backend) -> Harness {
    Harness::start(b, &[("api.yaml", API)], "", "[server]\nheaders = [\"draft-6\"]\n").await
}

async fn hits_addend(b: Backend) {
    let h = api(b).await;
    let mut c = h.client().await;
    let u = fresh("u");
    away_from_boundary(b, 60, 3).await;
    let r = call(&mut c, request("api", &[&[("user", &u)]], 4)).await;
    assert_eq!(r.statuses[0].limit_remaining, 6, "the request's hits_addend");
    let mut req = request("api", &[&[("user", &u)]], 4);
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let r = call(&mut c, req).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 6), "0 checks without charging");
    let mut req = request("api", &[&[("user", &u)]], 0);
    req.descriptors[0].hits_addend = Some(UInt64Value { value: 2 });
    assert_eq!(call(&mut c, req).await.statuses[0].limit_remaining, 4, "the descriptor's own hits_addend");
    let r = call(&mut c, request("api", &[&[("user", &u)]], 11)).await;
    assert_eq!(
        (overall(&r), r.statuses[0].limit_remaining),
        (Code::OverLimit, 0),
        "more than the limit: over, not an error"
    );
    assert_eq!(
        call(&mut c, request("api", &[&[("user", &u)]], 0)).await.statuses[0].limit_remaining,
        3,
        "0 at request level means 1"
    );
}

async fn overrides(b: Backend) {
    let h = api(b).await;
    let mut c = h.client().await;
    let u = fresh("o");
    away_from_boundary(b, 60, 3).await;
    let with = |rpu: u32| {
        let mut req = request("api", &[&[("user", &u)], &[("anything", "x")]], 1);
        for d in &mut req.descriptors {
            d.limit = Some(RateLimitOverride { requests_per_unit: rpu, unit: 2 });
        }
        req
    };
    for i in 0..3u32 {
        let r = call(&mut c, with(3)).await;
        assert_eq!(
            (overall(&r), limit_of(&r.statuses[0]), r.statuses[0].limit_remaining),
            (Code::Ok, Some((3, "MINUTE")), 2 - i)
        );
        assert_eq!(
            limit_of(&r.statuses[1]),
            Some((3, "MINUTE")),
            "an override applies even where nothing is configured"
        );
    }
    assert_eq!(overall(&call(&mut c, with(3)).await), Code::OverLimit);
    assert_eq!(overall(&call(&mut c, with(0)).await), Code::OverLimit, "an override of 0 denies");
    let r = call(&mut c, request("api", &[&[("user", &u)]], 1)).await;
    assert_eq!(r.statuses[0].limit_remaining, 9, "the configured limit counts apart");
}

async fn headers(b: Backend) {
    let h = api(b).await;
    let mut c = h.client().await;
    let u = fresh("h");
    away_from_boundary(b, 60, 3).await;
    let header = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse, name: &str| {
        r.response_headers_to_add.iter().find(|h| h.key == name).map(|h| h.value.clone())
    };
    let r = call(&mut c, request("api", &[&[("user", &u)]], 9)).await;
    assert_eq!(header(&r, "ratelimit-limit").as_deref(), Some("10"));
    assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("1"));
    assert_eq!(header(&r, "ratelimit-policy").as_deref(), Some("10;w=60"));
    assert_eq!(header(&r, "retry-after"), None);
    call(&mut c, request("api", &[&[("user", &u)]], 1)).await;
    let r = call(&mut c, request("api", &[&[("user", &u)]], 1)).await;
    assert_eq!(overall(&r), Code::OverLimit);
    assert_eq!(header(&r, "ratelimit-remaining").as_deref(), Some("0"));
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(header(&r, "cache-control").as_deref(), Some("no-store"));
}

/// A token bucket as the book shows it in docs/src/proxies/envoy.md (burst 10, 60 a minute), a
/// leaky bucket and a window.
const EDGE: &str = "domain: edge
descriptors:
  - key: bucket
    rate_limit:
      algorithm: token-bucket
      requests_per_unit: 60
      unit: minute
      burst: 10
  - key: leak
    rate_limit:
      algorithm: leaky-bucket
      requests_per_unit: 1
      unit: second
      burst: 2
  - key: window
    rate_limit:
      unit: minute
      requests_per_unit: 10
";

/// The `RateLimit-Policy` field of a fresh `key`'s first request in domain `edge`.
async fn policy_field(c: &mut Client, key: &str) -> String {
    let r = call(c, request("edge", &[&[(key, &fresh(key))]], 1)).await;
    let field = r.response_headers_to_add.iter().find(|h| h.key == "ratelimit-policy");
    field.map(|h| h.value.clone()).unwrap_or_else(|| panic!("no RateLimit-Policy in {r:?}"))
}

/// `w` is what the gateway states for the same policy (one function, `quota_window`): a bucket's
/// time to refill whole, not the period its rate is given per; a window's length.
#[tokio::test]
async fn ietf_fields_state_the_gateways_w_for_each_policy() {
    let h = Harness::start(Backend::Memory, &[("edge.yaml", EDGE)], "", "[server]\nheaders = [\"ietf\"]\n").await;
    let mut c = h.client().await;
    assert_eq!(policy_field(&mut c, "bucket").await, r#""token-bucket-10-per-10s";q=10;w=10"#);
    assert_eq!(policy_field(&mut c, "leak").await, r#""leaky-bucket-2-per-2s";q=2;w=2"#);
    assert_eq!(policy_field(&mut c, "window").await, r#""fixed-window-10-per-1m";q=10;w=60"#);
    // The gateway's `w` for the same bucket.
    let bucket = sluice_rls::rate_limit::policy(AlgorithmKind::TokenBucket, 60, 60 * NANOS_PER_SEC, Some(10)).unwrap();
    assert_eq!(sluice_http::headers::quota_window(&bucket), 10 * NANOS_PER_SEC);
}

/// The overall codes of `n` requests for a fresh value of `key`.
async fn codes(c: &mut Client, key: &str, n: usize) -> Vec<Code> {
    let v = fresh(key);
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(overall(&call(c, request("api", &[&[(key, &v)]], 1)).await));
    }
    out
}

type Client = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<
    tonic::transport::Channel,
>;

async fn algorithms_everywhere(b: Backend) {
    let h = api(b).await;
    let mut c = h.client().await;
    use Code::{Ok, OverLimit as Over};
    assert_eq!(codes(&mut c, "burst", 3).await, [Ok, Ok, Over], "token bucket: a burst of 2");
    assert_eq!(codes(&mut c, "log", 3).await, [Ok, Ok, Over], "sliding log: 2 an hour");
    assert_eq!(codes(&mut c, "leak", 3).await, [Ok, Ok, Over], "leaky bucket: 2 back to back");
    away_from_boundary(b, 10, 2).await;
    assert_eq!(codes(&mut c, "tens", 3).await, [Ok, Ok, Over], "2 per 10 s");
    away_from_boundary(b, 30, 2).await;
    assert_eq!(codes(&mut c, "half_minute", 2).await, [Ok, Over], "1 per 30 s");
}

/// The algorithms' time behaviour, on the memory store's manual clock.
#[tokio::test]
async fn algorithms_over_time_on_a_manual_clock() {
    let h = api(Backend::Memory).await;
    let mut c = h.client().await;
    let req = |k: &str| request("api", &[&[(k, "v")]], 1);
    for _ in 0..2 {
        call(&mut c, req("burst")).await;
    }
    let r = call(&mut c, req("burst")).await;
    assert_eq!(overall(&r), Code::OverLimit);
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!((reset.seconds, reset.nanos), (1, 0), "a token a second: the next in 1 s");
    h.advance(NANOS_PER_SEC);
    assert_eq!(overall(&call(&mut c, req("burst")).await), Code::Ok);

    // 2 per 10 s, windows aligned to 10 s: START + 1 s is 8.12 s into one.
    call(&mut c, req("tens")).await;
    let r = call(&mut c, req("tens")).await;
    let until = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!((until.seconds, until.nanos), (1, 876_543_211));
    assert_eq!(limit_of(&r.statuses[0]), Some((2, "SECOND")));
    h.advance(NANOS_PER_SEC);
    assert_eq!(overall(&call(&mut c, req("tens")).await), Code::OverLimit);
    h.advance(NANOS_PER_SEC);
    assert_eq!(overall(&call(&mut c, req("tens")).await), Code::Ok);

    // The sliding window counter weighs the previous window.
    for _ in 0..4 {
        assert_eq!(overall(&call(&mut c, req("slide")).await), Code::Ok);
    }
    assert_eq!(overall(&call(&mut c, req("slide")).await), Code::OverLimit);
    // 30.12 s into the next minute, the last one's 4 weigh 1.99: 3 more pass.
    h.advance(60 * NANOS_PER_SEC);
    for _ in 0..3 {
        assert_eq!(overall(&call(&mut c, req("slide")).await), Code::Ok);
    }
    assert_eq!(overall(&call(&mut c, req("slide")).await), Code::OverLimit, "the previous window still counts");

    // `window: 30s` reports the largest whole unit within it.
    let r = call(&mut c, req("half_minute")).await;
    assert_eq!(limit_of(&r.statuses[0]), Some((1, "SECOND")));
}

#[tokio::test]
async fn json_endpoint_health_and_metrics_share_the_listener() {
    let h = api(Backend::Memory).await;
    let url = |p: &str| format!("http://{}{p}", h.addr);
    let client = reqwest::Client::new();
    let body = r#"{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "j"}]}], "hits_addend": 10}"#;
    let r = client.post(url("/json")).body(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"], serde_json::json!({"requestsPerUnit": 10, "unit": "MINUTE"}));
    assert!(v["statuses"][0].get("limitRemaining").is_none(), "0 is left out, as protobuf's JSON does");
    assert_eq!(v["statuses"][0]["durationUntilReset"], "32.876543211s");
    let r = client.post(url("/json")).body(body.replace("10}", "1}")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(client.post(url("/json")).body("{").send().await.unwrap().status(), 400);
    assert_eq!(client.post(url("/json")).body(r#"{"domain": "api"}"#).send().await.unwrap().status(), 400);
    assert_eq!(client.get(url("/healthcheck")).send().await.unwrap().text().await.unwrap(), "OK");
    let m = client.get(url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("sluice_rls_requests_total{result=\"over_limit\"} 1"), "{m}");

    let channel = tonic::transport::Channel::from_shared(url("")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
}

#[tokio::test]
async fn bad_requests_are_refused() {
    let h = api(Backend::Memory).await;
    let mut c = h.client().await;
    let e = c.should_rate_limit(request("", &[&[("user", "x")]], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = c.should_rate_limit(request("api", &[], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_reload_keeps_the_state_of_unchanged_limits_and_refuses_bad_files() {
    let h = api(Backend::Memory).await;
    let mut c = h.client().await;
    call(&mut c, request("api", &[&[("user", "r")]], 7)).await;
    h.dir.write(
        "extra.yaml",
        "domain: extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    h.rls.reload().unwrap();
    assert_eq!(h.rls.domains(), ["api", "extra"]);
    assert_eq!(call(&mut c, request("api", &[&[("user", "r")]], 1)).await.statuses[0].limit_remaining, 2);
    h.dir.write("extra.yaml", "domain: extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: lightyear}\n");
    let e = h.rls.reload().unwrap_err().to_string();
    assert!(e.contains("extra.yaml:4: descriptors[0].rate_limit.unit"), "{e}");
    assert_eq!(h.rls.domains(), ["api", "extra"], "the running descriptors stay");
    assert!(h.rls.metrics_text().contains("sluice_rls_config_loads_total{result=\"refused\"} 1"));
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn redis_down_is_an_error_envoy_can_act_on() {
    let mut h = api(Backend::Redis).await;
    let mut c = h.client().await;
    assert_eq!(overall(&call(&mut c, request("api", &[&[("user", "x")]], 1)).await), Code::Ok);
    h.redis.as_mut().unwrap().kill();
    let e = c.should_rate_limit(request("api", &[&[("user", "x")]], 1)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "fail-closed: {e}");
    let r = call(&mut c, request("api", &[&[("unknown", "x")]], 1)).await;
    assert_eq!(overall(&r), Code::Ok, "a descriptor without a limit never asks the store");
}

on_both_stores!(hits_addend, overrides, headers, algorithms_everywhere);

const USAGE: &str = "\
domain: llm
descriptors:
  - key: user
    stream_done: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: plain
    rate_limit: { unit: minute, requests_per_unit: 100 }
";

/// A descriptor carrying its own `hits_addend`: what Envoy sends when a stream is done.
fn report(entries: &[(&str, &str)], hits: u64) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    let mut r = request("llm", &[entries], 0);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: hits });
    r
}

/// A descriptor carrying its own `hits_addend` charged by reports, into debt; asked without one,
/// checked at no cost.
async fn stream_done(backend: Backend) {
    away_from_boundary(backend, 60, 5).await;
    let h = Harness::start(backend, &[("llm.yaml", USAGE)], "", "").await;
    let mut c = h.client().await;
    let ada = fresh("ada");
    let ask = || request("llm", &[&[("user", ada.as_str())]], 1);
    // Asked on the request path: checked at no cost, however often.
    for _ in 0..3 {
        let r = call(&mut c, ask()).await;
        assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::Ok, 100), "{backend:?}");
    }
    // Reports: 60, then 70 (past the limit: a debt), each OK whatever is left.
    for hits in [60, 70] {
        assert_eq!(overall(&call(&mut c, report(&[("user", &ada)], hits)).await), Code::Ok, "{backend:?}");
    }
    let r = call(&mut c, ask()).await;
    assert_eq!((overall(&r), r.statuses[0].limit_remaining), (Code::OverLimit, 0), "{backend:?}: spent");
    // A descriptor that is not `stream_done` takes `hits_addend` as a cost, and denies.
    let bob = fresh("bob");
    assert_eq!(overall(&call(&mut c, report(&[("plain", &bob)], 150)).await), Code::OverLimit, "{backend:?}");
    assert_eq!(overall(&call(&mut c, report(&[("plain", &bob)], 60)).await), Code::Ok, "{backend:?}");
}

#[tokio::test]
async fn a_stream_done_descriptor_is_charged_by_reports_into_debt_and_checked_at_no_cost() {
    stream_done(Backend::Memory).await;
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn a_stream_done_descriptor_on_redis() {
    stream_done(Backend::Redis).await;
}
