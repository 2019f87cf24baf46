//! `jwt:` key parts: only a token that verifies names a caller; everything else falls back to
//! the next source (or is refused with 401), and never lands in another caller's bucket.

#[path = "jwt_keys/mod.rs"]
mod jwt_keys;

use std::sync::Arc;

use jwt_keys::*;
use proptest::prelude::*;
use serde_json::json;
use sluice_config::{Config, KeySource, KeySpec, parse};
use sluice_core::{ManualClock, NANOS_PER_SEC};
use sluice_http::identity::Client;
use sluice_http::jwt::{JwtVerifier, TokenStatus};
use sluice_http::keys::{KeyBuilder, KeyKind, KeyRefusal, RequestFacts};
use sluice_http::pipeline::Refusal;
use sluice_store::{KeyHash, KeyHasher};

/// The manual clock's start, Unix seconds.
const NOW: u64 = 1_700_000_000;

fn tmp() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jwt")
}

/// A configuration with `[identity.jwt]` holding `table` (and the JWK set `jwks`, if any).
fn config(table: &str, jwks: Option<&str>) -> Config {
    let file = jwks.map(|j| write_file(&tmp(), "jwks.json", j));
    let jwks_line = file.map(|f| format!("jwks_file = {:?}\n", f.display().to_string())).unwrap_or_default();
    parse("t.toml", &format!("[identity.jwt]\n{jwks_line}{table}\n")).unwrap_or_else(|e| panic!("{e}"))
}

struct Setup {
    keys: KeyBuilder,
    verifier: Arc<JwtVerifier>,
    clock: Arc<ManualClock>,
}

fn setup(cfg: &Config) -> Setup {
    let clock = Arc::new(ManualClock::new(NOW * NANOS_PER_SEC));
    let hasher = KeyHasher::from_secret(b"0123456789abcdef");
    let pointers = vec!["/sub".into(), "/org".into(), "/tenant/id".into()];
    let verifier =
        Arc::new(JwtVerifier::new(cfg.identity.jwt.as_ref().unwrap(), hasher.clone(), clock.clone(), pointers));
    let keys = KeyBuilder::new(hasher, None).with_jwt(Some(verifier.clone()));
    Setup { keys, verifier, clock }
}

fn client(ip: &str) -> Client {
    let ip = ip.parse().unwrap();
    Client { ip, grouped: ip, peer_trusted: false }
}

fn spec(claim: &str) -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Jwt(claim.into()), KeySource::Ip]] }
}

fn bearer(token: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("authorization", format!("Bearer {token}").parse().unwrap());
    h
}

impl Setup {
    fn key_with(&self, claim: &str, headers: &http::HeaderMap, from: &str) -> Result<(KeyHash, KeyKind), KeyRefusal> {
        let c = client(from);
        let facts =
            RequestFacts { method: "GET", path: "/api", route: "api", client: &c, headers, tls: None, body: None };
        self.keys.key("p", &spec(claim), &facts)
    }

    fn key(&self, token: Option<&str>, from: &str) -> (KeyHash, KeyKind) {
        let headers = token.map(bearer).unwrap_or_default();
        self.key_with("/sub", &headers, from).expect("a key")
    }
}

const ADDRESS: &str = "198.51.100.7";

#[test]
fn one_sub_is_one_key_from_any_address_with_every_algorithm() {
    let (es, ed) = (es256("ec-1"), ed25519("ed-1"));
    let cfg = config(&format!("hs256_secret = {HS_SECRET:?}\nleeway = \"0s\""), Some(&jwks(&[rs256(), &es, &ed])));
    let s = setup(&cfg);
    let alice = s.key(Some(&hs256().sign(&claims_at(NOW, "alice", json!({})))), "192.0.2.1");
    assert_eq!(alice.1, "jwt");
    for key in [&hs256(), rs256(), &es, &ed] {
        let token = key.sign(&claims_at(NOW, "alice", json!({})));
        assert_eq!(s.key(Some(&token), "203.0.113.9"), alice, "{:?}", key.algorithm);
        assert_eq!(s.key(Some(&key.sign_without_kid(&claims_at(NOW, "alice", json!({})))), ADDRESS), alice);
    }
    let bob = s.key(Some(&rs256().sign(&claims_at(NOW, "bob", json!({})))), "192.0.2.1");
    assert_ne!(bob.0, alice.0);
}

#[test]
fn tokens_that_do_not_verify_fall_back_to_the_address_never_to_the_victim() {
    // With `on_invalid_token = "fallback"` (the explicit loosening; the default refuses them).
    let cfg = config(
        "issuer = \"https://auth.example\"\naudience = \"api\"\nleeway = \"30s\"\non_invalid_token = \"fallback\"",
        Some(&jwks(&[rs256()])),
    );
    let s = setup(&cfg);
    let good = json!({ "iss": "https://auth.example", "aud": ["other", "api"] });
    let victim = s.key(Some(&rs256().sign(&claims_at(NOW, "victim", good.clone()))), "192.0.2.1");
    assert_eq!(victim.1, "jwt");
    let by_address = s.key(None, ADDRESS);
    assert_eq!(by_address.1, "ip");
    let claim = |extra: serde_json::Value| {
        let mut c = claims_at(NOW, "victim", good.clone());
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        c
    };
    // RS/HS confusion: HMAC over the token with the RSA public key's bytes as the secret.
    let public = rs256().public_der.clone().unwrap();
    let confused = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claim(json!({})),
        &jsonwebtoken::EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    let n = rs256().jwk.as_ref().unwrap()["n"].as_str().unwrap().to_owned();
    let confused_n = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claim(json!({})),
        &jsonwebtoken::EncodingKey::from_secret(n.as_bytes()).unwrap(),
    )
    .unwrap();
    let other_rsa = rs256_other();
    let attacks = [
        ("bad signature", forged(&rs256().sign(&claim(json!({}))))),
        ("signed by an unknown key", other_rsa.sign_without_kid(&claim(json!({})))),
        ("expired", rs256().sign(&claim(json!({ "exp": NOW - 31 })))),
        ("not yet valid", rs256().sign(&claim(json!({ "nbf": NOW + 31 })))),
        ("no exp", rs256().sign(&json!({ "sub": "victim", "iss": "https://auth.example", "aud": "api" }))),
        ("exp not a number", rs256().sign(&claim(json!({ "exp": "never" })))),
        ("alg none", unsigned(&claim(json!({})))),
        ("RSA public key as HS256 secret", confused),
        ("RSA modulus as HS256 secret", confused_n),
        ("another audience", rs256().sign(&claim(json!({ "aud": "billing" })))),
        ("no audience", rs256().sign(&claim(json!({ "aud": null })))),
        ("another issuer", rs256().sign(&claim(json!({ "iss": "https://evil.example" })))),
        ("not a JWT", "not.a.jwt".to_owned()),
    ];
    for (what, token) in &attacks {
        let got = s.key(Some(token), ADDRESS);
        assert_eq!(got, by_address, "{what}: falls back to the address");
        assert_ne!(got.0, victim.0, "{what}");
        assert!(matches!(s.verifier.verdict(&bearer(token)), TokenStatus::Invalid), "{what}");
    }
    // Within the leeway, a token just expired or not quite valid still counts.
    assert_eq!(s.key(Some(&rs256().sign(&claim(json!({ "exp": NOW - 29 })))), ADDRESS), victim);
    assert_eq!(s.key(Some(&rs256().sign(&claim(json!({ "nbf": NOW + 29 })))), ADDRESS), victim);
}

#[test]
fn a_valid_token_without_the_claim_is_no_identity_and_two_authorization_lines_are_refused() {
    for mode in ["reject", "fallback"] {
        let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}\non_invalid_token = {mode:?}"), None));
        let token = hs256().sign(&json!({ "exp": NOW + 60, "org": 42 }));
        assert_eq!(s.key(Some(&token), ADDRESS), s.key(None, ADDRESS), "no sub: the address");
        // Which line an application reads is its own choice: 400 whatever the mode.
        let mut two = bearer(&hs256().sign(&claims_at(NOW, "alice", json!({}))));
        two.append("authorization", format!("Bearer {token}").parse().unwrap());
        let err = s.key_with("/sub", &two, ADDRESS).unwrap_err();
        assert_eq!(err, KeyRefusal::RepeatedHeader("authorization".into()), "{mode}");
        assert_eq!(Refusal::from(err).answer().status, 400);
    }
}

#[test]
fn numbers_are_keyed_by_value_and_nested_claims_by_pointer() {
    let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}"), None));
    let with = |extra| bearer(&hs256().sign(&claims_at(NOW, "x", extra)));
    let org = |h: &http::HeaderMap| s.key_with("/org", h, ADDRESS).unwrap();
    assert_eq!(org(&with(json!({ "org": 42 }))), org(&with(json!({ "org": 42.0 }))));
    assert_ne!(org(&with(json!({ "org": 42 }))), org(&with(json!({ "org": 43 }))));
    assert_eq!(org(&with(json!({ "org": [42] }))).1, "ip", "an array is no key");
    let tenant = |h: &http::HeaderMap| s.key_with("/tenant/id", h, ADDRESS).unwrap();
    let t1 = tenant(&with(json!({ "tenant": { "id": "t1" } })));
    assert_eq!(t1.1, "jwt");
    assert_eq!(t1, tenant(&with(json!({ "tenant": { "id": "t1", "name": "other" } }))));
    assert_eq!(tenant(&with(json!({ "tenant": "t1" }))).1, "ip");
}

#[test]
fn a_cached_token_still_expires_on_the_clock() {
    let s = setup(&config(
        &format!("hs256_secret = {HS_SECRET:?}\nleeway = \"10s\"\non_invalid_token = \"fallback\""),
        None,
    ));
    let token = hs256().sign(&json!({ "sub": "alice", "exp": NOW + 100, "nbf": NOW + 50 }));
    assert_eq!(s.key(Some(&token), ADDRESS).1, "ip", "not valid before nbf - leeway");
    s.clock.advance(40 * NANOS_PER_SEC);
    assert_eq!(s.key(Some(&token), ADDRESS).1, "jwt", "valid from nbf - leeway, without a second verification");
    assert_eq!(s.verifier.cached(), (1, 0));
    s.clock.advance(69 * NANOS_PER_SEC);
    assert_eq!(s.key(Some(&token), ADDRESS).1, "jwt", "until exp + leeway");
    s.clock.advance(NANOS_PER_SEC);
    assert_eq!(s.key(Some(&token), ADDRESS).1, "ip", "then never again");
}

#[test]
fn a_flood_of_distinct_forged_tokens_stays_within_the_cache_and_evicts_no_valid_token() {
    let s = setup(&config(
        &format!("hs256_secret = {HS_SECRET:?}\ncache_entries = 64\non_invalid_token = \"fallback\""),
        None,
    ));
    let alice = hs256().sign(&claims_at(NOW, "alice", json!({})));
    let alice_key = s.key(Some(&alice), ADDRESS);
    for i in 0..1000 {
        let forged = hs256().sign(&claims_at(NOW, &format!("mallory-{i}"), json!({})));
        let forged = forged.rsplit_once('.').unwrap().0.to_owned() + ".c2lnbmF0dXJl";
        assert_eq!(s.key(Some(&forged), ADDRESS).1, "ip");
    }
    let (valid, invalid) = s.verifier.cached();
    assert_eq!(valid, 1);
    assert!(invalid <= 64, "{invalid} invalid verdicts kept");
    assert_eq!(s.key(Some(&alice), "192.0.2.55"), alice_key);
    for i in 0..1000 {
        s.key(Some(&hs256().sign(&claims_at(NOW, &format!("user-{i}"), json!({})))), ADDRESS);
    }
    assert!(s.verifier.cached().0 <= 64);
}

#[test]
fn reject_mode_refuses_invalid_tokens_with_401_and_lets_anonymous_requests_through() {
    // Reject is the default: no `on_invalid_token` line.
    let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}"), None));
    let err = s.key_with("/sub", &bearer(&unsigned(&claims_at(NOW, "victim", json!({})))), ADDRESS).unwrap_err();
    assert_eq!(err, KeyRefusal::InvalidToken);
    let answer = Refusal::from(err).answer();
    assert_eq!(answer.status, 401);
    assert_eq!(answer.headers["www-authenticate"], r#"Bearer error="invalid_token""#);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["error"], "invalid_token");
    assert_eq!(s.key(None, ADDRESS).1, "ip", "no token is no invalid token");
    let mut basic = http::HeaderMap::new();
    basic.insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
    assert_eq!(s.key_with("/sub", &basic, ADDRESS).unwrap().1, "ip");
    // Spellings of a valid token that lenient stacks accept (PyJWT ignores padding; others
    // take any run of spaces or a tab): never "no token", which would fall back to the address.
    let valid = hs256().sign(&claims_at(NOW, "victim", json!({})));
    assert_eq!(s.key(Some(&valid), ADDRESS).1, "jwt");
    for line in [
        format!("Bearer {valid}="),
        format!("Bearer  {valid}"),
        format!("Bearer\t{valid}"),
        format!("bearer {valid}=="),
    ] {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", line.parse().unwrap());
        assert_eq!(s.key_with("/sub", &h, ADDRESS), Err(KeyRefusal::InvalidToken), "{line:?}");
    }
}

#[test]
fn tokens_can_come_from_a_cookie() {
    let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}\ncookie = \"session\""), None));
    let token = hs256().sign(&claims_at(NOW, "alice", json!({})));
    let mut h = http::HeaderMap::new();
    h.insert("cookie", format!("theme=dark; session={token}").parse().unwrap());
    assert_eq!(s.key_with("/sub", &h, ADDRESS).unwrap().1, "jwt");
    assert_eq!(s.key(Some(&token), ADDRESS).1, "ip", "the Authorization header is not read then");
}

fn shaped_token() -> impl Strategy<Value = String> {
    let segment = "[A-Za-z0-9_-]{0,64}";
    (segment, segment, segment).prop_map(|(a, b, c)| format!("{a}.{b}.{c}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sluice_core::fuzz_cases(256), .. ProptestConfig::default() })]

    /// Any bytes in the Authorization header: no panic, never an identity, bounded caches.
    #[test]
    fn any_authorization_bytes_are_handled(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}\ncache_entries = 16"), None));
        let mut h = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_bytes(&bytes) {
            h.insert("authorization", v);
        }
        // Never an identity: keyed by the address, or (the default `reject`) refused as an
        // invalid token.
        match s.key_with("/sub", &h, ADDRESS) {
            Ok((_, kind)) => prop_assert_eq!(kind, "ip"),
            Err(e) => prop_assert_eq!(e, KeyRefusal::InvalidToken),
        }
        prop_assert!(s.verifier.cached().1 <= 16);
    }

    /// Token-shaped strings (and JSON in base64url parts): no panic, never verified.
    #[test]
    fn token_shaped_input_never_verifies(token in shaped_token(), header in ".{0,80}", payload in ".{0,200}") {
        let s = setup(&config(&format!("hs256_secret = {HS_SECRET:?}"), Some(&jwks(&[&ed25519("e")]))));
        prop_assert!(!matches!(s.verifier.verdict_of(&token), TokenStatus::Valid(_)));
        let crafted = format!("{}.{}.{}", b64url(header.as_bytes()), b64url(payload.as_bytes()), b64url(b"sig"));
        prop_assert!(!matches!(s.verifier.verdict_of(&crafted), TokenStatus::Valid(_)));
    }
}
