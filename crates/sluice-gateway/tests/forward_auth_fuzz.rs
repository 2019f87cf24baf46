//! Forward-auth's inputs cross a trust boundary: whatever a proxy (or a client behind it) puts
//! in the headers, reading the original never panics, yields only a path, and a decision keeps
//! memory bounded by what was decided.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use sluice_core::ManualClock;
use sluice_gateway::forward_auth::{self, METHOD_HEADERS, Original, URI_HEADERS};
use sluice_gateway::gateway::Gateway;
use sluice_gateway::stores::MemoryStores;

const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1", "10.0.0.0/8"]

[forward_auth]

[[policy]]
name = "tight"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
path = "/api/*"
methods = ["GET", "DELETE"]
limits = [{ policy = "tight", key = ["header:x-api-key|ip", "path"] }]

[[route]]
path = "/login"
limits = [{ policy = "tight", key = "json:/user" }]
"#;

/// Bytes a header value may hold, biased towards what request targets and methods are made of.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "(GET|HEAD|get|DELETE|POST|[A-Z ]{0,6})".prop_map(String::into_bytes),
        "(https?://[a-z.]{0,8})?[/a-zA-Z0-9%.;?#\\\\*: _-]{0,40}".prop_map(String::into_bytes),
        proptest::collection::vec(
            any::<u8>().prop_filter("header byte", |b| *b == b'\t' || *b >= 0x20 && *b != 0x7f),
            0..48
        ),
    ]
}

/// The headers a forward-auth request may carry: the original's four, a forwarding chain, an
/// API key; any number of lines of each, or a well-formed original with a hostile chain and API keys.
fn headers() -> impl Strategy<Value = Vec<(usize, Vec<u8>)>> {
    let noise = proptest::collection::vec((0usize..6, value()), 0..8);
    let original = (
        "(GET|HEAD|get|DELETE|POST)",
        "/(api|API|login)(/[a-z.;%0-9]{0,6}){0,3}(\\?[a-z=/]{0,6})?",
        "((198\\.51\\.100\\.[0-9]{1,3}|[0-9a-f:]{2,20}|junk), )?198\\.51\\.100\\.[0-9]{1,2}",
        proptest::collection::vec((4usize..6, value()), 0..3),
    )
        .prop_map(|(method, uri, chain, extra)| {
            let mut lines = vec![(0, method.into_bytes()), (2, uri.into_bytes()), (4, chain.into_bytes())];
            lines.extend(extra);
            lines
        });
    prop_oneof![1 => noise, 3 => original]
}

fn name(i: usize) -> HeaderName {
    match i {
        0 | 1 => METHOD_HEADERS[i].clone(),
        2 | 3 => URI_HEADERS[i - 2].clone(),
        4 => HeaderName::from_static("x-forwarded-for"),
        _ => HeaderName::from_static("x-api-key"),
    }
}

fn map(lines: &[(usize, Vec<u8>)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (i, v) in lines {
        if let Ok(v) = HeaderValue::from_bytes(v) {
            h.append(name(*i), v);
        }
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sluice_core::fuzz_cases(2048), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reading_the_original_never_panics_and_yields_a_path_of_the_uri_sent(lines in headers()) {
        let h = map(&lines);
        if let Ok(o) = Original::from_headers(&h) {
            prop_assert!(o.path.starts_with('/'), "{o:?}");
            prop_assert!(!o.path.contains(['?', '#', ' ']), "{o:?}");
            prop_assert!(!o.method.is_empty());
            let sent: Vec<&[u8]> = URI_HEADERS.iter().flat_map(|n| h.get_all(n)).map(|v| v.as_bytes()).collect();
            prop_assert!(!sent.is_empty() && sent.windows(2).all(|w| w[0] == w[1]), "one URI, however spelled");
            let uri = std::str::from_utf8(sent[0]).unwrap();
            prop_assert!(uri.contains(o.path), "{} is not part of {uri}", o.path);
        }
    }
}

#[test]
fn any_request_gets_one_of_its_answers_and_keys_grow_only_with_decisions() {
    let clock = Arc::new(ManualClock::new(0));
    let gateway =
        Gateway::new(sluice_config::parse("fuzz.toml", CONFIG).unwrap(), Box::new(MemoryStores::new(clock))).unwrap();
    let loaded = gateway.config();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let peers: [IpAddr; 3] = ["127.0.0.1".parse().unwrap(), "10.9.8.7".parse().unwrap(), "192.0.2.1".parse().unwrap()];
    let decided = Cell::new(0u64);
    let mut runner = TestRunner::new(ProptestConfig { cases: 2048, failure_persistence: None, ..Default::default() });
    runner
        .run(&(0usize..3, headers()), |(peer, lines)| {
            let h = map(&lines);
            let res = runtime.block_on(forward_auth::handle(
                &loaded.limiter,
                &loaded.observed,
                &loaded.config,
                peers[peer],
                &h,
            ));
            let status = res.status().as_u16();
            prop_assert_eq!(status == 403, peer == 2, "403 exactly for the untrusted peer");
            prop_assert!([200, 400, 403, 429, 500].contains(&status), "unexpected {}", status);
            let limited = res.headers().contains_key("ratelimit-remaining");
            if status == 429 || limited {
                decided.set(decided.get() + 1);
            }
            if status != 200 && status != 429 {
                prop_assert!(!limited, "{} with rate-limit headers", status);
            }
            let keys: u64 = loaded.store().key_stats().iter().map(|k| k.keys).sum();
            prop_assert!(keys <= decided.get(), "{} keys after {} decisions", keys, decided.get());
            Ok(())
        })
        .unwrap();
    let decided = decided.get();
    assert!(decided > 150, "the generator reaches decisions ({decided} of 2048)");
}
