//! The cost of building a key (`KeyBuilder::key`): an `ip` part, beside a `jwt:sub|ip` part
//! whose token is already cached (one keyed hash and one lookup), and one whose token is new
//! (a full verification: HS256, RS256, ES256 and EdDSA). Tokens are signed outside the timed
//! part; the verifier reads the system clock, so they are valid from now.

#[path = "../tests/jwt_keys/mod.rs"]
mod jwt_keys;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion};
use http::HeaderMap;
use jwt_keys::*;
use serde_json::json;
use sluice_config::{KeySource, KeySpec, parse};
use sluice_core::SystemClock;
use sluice_http::identity::Client;
use sluice_http::jwt::JwtVerifier;
use sluice_http::keys::{KeyBuilder, RequestFacts};
use sluice_store::KeyHasher;

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("authorization", format!("Bearer {token}").parse().expect("a header value"));
    h
}

fn keys(c: &mut Criterion) {
    let (es, ed) = (es256("ec"), ed25519("ed"));
    let dir = std::env::temp_dir().join("sluice-bench-keys");
    let file = write_file(&dir, "jwks.json", &jwks(&[rs256(), &es, &ed]));
    let toml = format!("[identity.jwt]\nhs256_secret = {HS_SECRET:?}\njwks_file = {:?}\n", file.display().to_string());
    let cfg = parse("bench.toml", &toml).expect("the bench config parses");
    let hasher = KeyHasher::from_secret(b"0123456789abcdef");
    let clock = Arc::new(SystemClock::new());
    let verifier = JwtVerifier::new(cfg.identity.jwt.as_ref().unwrap(), hasher.clone(), clock, vec!["/sub".into()]);
    let builder = KeyBuilder::new(hasher, None).with_jwt(Some(Arc::new(verifier)));
    let ip = "192.0.2.1".parse().unwrap();
    let client = Client { ip, grouped: ip, peer_trusted: false };
    let by_ip = KeySpec { parts: vec![vec![KeySource::Ip]] };
    let by_sub = KeySpec { parts: vec![vec![KeySource::Jwt("/sub".into()), KeySource::Ip]] };
    let key = |spec: &KeySpec, headers: &HeaderMap| {
        let facts =
            RequestFacts { method: "GET", path: "/api", route: "api", client: &client, headers, tls: None, body: None };
        builder.key("p", spec, &facts).expect("a key")
    };

    let mut g = c.benchmark_group("key");
    let none = HeaderMap::new();
    g.bench_function("ip", |b| b.iter(|| black_box(key(&by_ip, black_box(&none)))));
    let cached = bearer(&hs256().sign(&claims("alice", json!({}))));
    assert_eq!(key(&by_sub, &cached).1, "jwt");
    g.bench_function("jwt_sub_cached", |b| b.iter(|| black_box(key(&by_sub, black_box(&cached)))));
    let mut n = 0u64;
    let hs = hs256();
    for (name, signer) in [("hs256", &hs), ("rs256", rs256()), ("es256", &es), ("eddsa", &ed)] {
        g.bench_function(format!("jwt_sub_fresh_{name}"), |b| {
            b.iter_batched(
                || {
                    n += 1;
                    bearer(&signer.sign(&claims(&format!("user-{n}"), json!({}))))
                },
                |headers| black_box(key(&by_sub, &headers)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    keys(&mut c);
    c.final_summary();
}
