//! The gateway keyed by verified JWT claims and tiered by plan: one caller is one bucket from
//! any address, a forged token never reaches the victim's bucket, `reject` answers 401, each
//! plan gets its policy, and a reload with a rotated JWK set drops the old key.

mod common;
#[path = "../../sluice-http/tests/jwt_keys/mod.rs"]
mod jwt_keys;

use common::{Client, Resp, start};
use jwt_keys::*;
use serde_json::json;
use sluice_gateway::observe::Scrape;

fn tmp() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jwt-gateway")
}

/// `[identity.jwt]` with the HS256 secret and a JWK set of `keys` (if any), then `rest`.
fn with_identity(keys: &[&TestKey], jwt: &str, rest: &str) -> String {
    let jwks_line = match keys {
        [] => String::new(),
        keys => format!("jwks_file = {:?}\n", write_file(&tmp(), "jwks.json", &jwks(keys)).display().to_string()),
    };
    format!("[identity.jwt]\nhs256_secret = {HS_SECRET:?}\n{jwks_line}{jwt}\n{rest}")
}

const PER_CALLER: &str = r#"
[server]
trusted_proxies = ["127.0.0.1"]

[[policy]]
name = "per-caller"
algorithm = "fixed-window"
limit = 10
window = "1h"

[[route]]
path = "/api"
limits = [{ policy = "per-caller", key = "jwt:sub|ip" }]
"#;

async fn get(client: &Client, from: &str, token: Option<&str>) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("x-forwarded-for", from)];
    headers.extend(auth.as_deref().map(|a| ("authorization", a)));
    client.get("/api", &headers).await
}

#[tokio::test]
async fn one_caller_is_one_bucket_and_forged_tokens_never_touch_the_victims() {
    let toml = with_identity(&[rs256()], "issuer = \"https://auth.example\"\naudience = \"api\"", PER_CALLER);
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let good = json!({ "iss": "https://auth.example", "aud": "api" });
    let victim = rs256().sign(&claims("victim", good.clone()));
    assert_eq!(get(&c, "192.0.2.1", Some(&victim)).await.num("ratelimit-remaining"), 9);
    assert_eq!(get(&c, "192.0.2.2", Some(&victim)).await.num("ratelimit-remaining"), 8, "another address, same caller");
    let claim = |extra: serde_json::Value| {
        let mut c = claims("victim", good.clone());
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        c
    };
    let confused = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claim(json!({})),
        &jsonwebtoken::EncodingKey::from_secret(rs256().public_der.as_deref().unwrap()).unwrap(),
    )
    .unwrap();
    let attacks = [
        ("bad signature", forged(&victim)),
        ("expired", rs256().sign(&claim(json!({ "exp": unix_now() - 3600 })))),
        ("alg none", unsigned(&claim(json!({})))),
        ("RSA public key as HS256 secret", confused),
        ("another audience", rs256().sign(&claim(json!({ "aud": "billing" })))),
        ("another issuer", rs256().sign(&claim(json!({ "iss": "https://evil.example" })))),
    ];
    // Each is refused (401, the default): neither the victim's bucket nor an address's
    // allowance is spent, so rotating addresses buys nothing.
    for (i, (what, token)) in attacks.iter().enumerate() {
        let r = get(&c, &format!("203.0.113.{}", 5 + i), Some(token)).await;
        assert_eq!(r.status, 401, "{what}");
    }
    assert_eq!(
        get(&c, "192.0.2.3", Some(&victim)).await.num("ratelimit-remaining"),
        7,
        "the victim's bucket is untouched"
    );
    assert_eq!(get(&c, "203.0.113.5", None).await.num("ratelimit-remaining"), 9, "nor the address's");
    // Each refusal is counted, under its route and why.
    let loaded = gw.gateway.config();
    let text = gw.gateway.observer().metrics().render(Scrape::of(loaded.store().as_ref(), 0));
    let refused = r#"sluice_refused_total{route="/api",reason="token"} 6"#;
    assert!(text.lines().any(|l| l == refused), "{refused} not in:\n{text}");
    // Two Authorization lines: 400 (never "pick one").
    let mut two = vec![("x-forwarded-for", "198.51.100.9")];
    let line = format!("Bearer {victim}");
    two.extend([("authorization", line.as_str()), ("authorization", line.as_str())]);
    assert_eq!(c.get("/api", &two).await.status, 400);
}

#[tokio::test]
async fn reject_mode_answers_401_for_invalid_tokens_only() {
    let toml = with_identity(&[], "on_invalid_token = \"reject\"", PER_CALLER);
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let r = get(&c, "192.0.2.1", Some(&forged(&hs256().sign(&claims("alice", json!({})))))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some(r#"Bearer error="invalid_token""#));
    assert_eq!(r.json()["error"], "invalid_token");
    assert_eq!(get(&c, "192.0.2.1", None).await.status, 200, "anonymous: keyed by address");
    let ok = get(&c, "192.0.2.1", Some(&hs256().sign(&claims("alice", json!({}))))).await;
    assert_eq!((ok.status, ok.num("ratelimit-remaining")), (200, 9));
}

const TIERS: &str = r#"
[server]
trusted_proxies = ["127.0.0.1"]
headers = ["ietf"]

[[policy]]
name = "search-free"
algorithm = "fixed-window"
limit = 2
window = "1h"

[[policy]]
name = "search-pro"
algorithm = "fixed-window"
limit = 4
window = "1h"

[[policy]]
name = "search-anonymous"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api"
limits = [{ key = "jwt:sub|ip", policy_by = "jwt:plan", policies = { free = "search-free", pro = "search-pro" }, default_policy = "search-anonymous" }]
"#;

/// Statuses of `n` requests from `from` with `token`.
async fn statuses(c: &Client, from: &str, token: Option<&str>, n: usize) -> Vec<u16> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("x-forwarded-for", from)];
    headers.extend(auth.as_deref().map(|a| ("authorization", a)));
    statuses_with(c, &headers, n).await
}

#[tokio::test]
async fn each_plan_gets_its_policy_and_metrics_name_the_chosen_one() {
    let (gw, _clock) = start(&with_identity(&[], "", TIERS)).await;
    let c = Client::new(gw.addr);
    let free = hs256().sign(&claims("f", json!({ "plan": "free" })));
    let pro = hs256().sign(&claims("p", json!({ "plan": "pro" })));
    let gold = hs256().sign(&claims("g", json!({ "plan": "gold" })));
    assert_eq!(statuses(&c, "192.0.2.1", Some(&free), 3).await, [200, 200, 429]);
    assert_eq!(statuses(&c, "192.0.2.2", Some(&pro), 5).await, [200, 200, 200, 200, 429]);
    assert_eq!(statuses(&c, "192.0.2.3", None, 2).await, [200, 429], "no token: the default policy, by address");
    assert_eq!(statuses(&c, "192.0.2.4", Some(&gold), 2).await, [200, 429], "a plan not named: the default");
    let forged_pro = forged(&pro);
    assert_eq!(statuses(&c, "192.0.2.5", Some(&forged_pro), 2).await, [401, 401], "a forged pro token is refused");
    let r = get(&c, "192.0.2.6", Some(&hs256().sign(&claims("p2", json!({ "plan": "pro" }))))).await;
    assert!(r.header("ratelimit-policy").unwrap().contains("\"search-pro\";q=4"), "{:?}", r.headers);
    let loaded = gw.gateway.config();
    let text = gw.gateway.observer().metrics().render(Scrape::of(loaded.store().as_ref(), 0));
    let count = |policy: &str, outcome: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("sluice_decisions_total{")
                    && l.contains("route=\"/api\"")
                    && l.contains(&format!("policy=\"{policy}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("search-pro", "allowed"), 5);
    assert_eq!(count("search-pro", "denied"), 1);
    assert_eq!(count("search-free", "allowed"), 2);
    assert_eq!(count("search-anonymous", "allowed"), 2, "the forged tokens were refused before any limit");
}

const HEADER_TIERS: &str = r#"
[server]
trusted_proxies = ["TRUSTED"]

[[policy]]
name = "pro"
algorithm = "fixed-window"
limit = 3
window = "1h"

[[policy]]
name = "basic"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api"
limits = [{ key = "ip", policy_by = "header:x-plan", policies = { pro = "pro" }, default_policy = "basic" }]
"#;

/// Statuses of `n` requests with `headers`.
async fn statuses_with(c: &Client, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(c.get("/api", headers).await.status);
    }
    out
}

#[tokio::test]
async fn a_plan_header_is_believed_from_trusted_proxies_only() {
    let untrusted = HEADER_TIERS.replace("TRUSTED", "10.255.255.1");
    let (gw, _clock) = start(&untrusted).await;
    let c = Client::new(gw.addr);
    assert_eq!(statuses_with(&c, &[("x-plan", "pro")], 2).await, [200, 429], "a client naming its own plan");
    let (gw, _clock) = start(&HEADER_TIERS.replace("TRUSTED", "127.0.0.1")).await;
    let c = Client::new(gw.addr);
    let from_proxy = [("x-plan", "pro"), ("x-forwarded-for", "192.0.2.1")];
    assert_eq!(statuses_with(&c, &from_proxy, 4).await, [200, 200, 200, 429]);
    let two = c.get("/api", &[("x-plan", "pro"), ("x-plan", "basic"), ("x-forwarded-for", "192.0.2.2")]).await;
    assert_eq!(two.status, 400, "two plan lines from the proxy: ambiguous");
}

#[tokio::test]
async fn a_reload_with_a_rotated_key_set_accepts_the_new_key_and_drops_the_old() {
    let file = write_file(&tmp(), "rotating.json", &jwks(&[rs256()]));
    let toml = format!(
        "[identity.jwt]\njwks_file = {:?}\non_invalid_token = \"reject\"\n{PER_CALLER}",
        file.display().to_string()
    );
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    let old = rs256().sign(&claims("alice", json!({})));
    let new = rs256_other().sign(&claims("alice", json!({})));
    assert_eq!(get(&c, "192.0.2.1", Some(&old)).await.status, 200);
    assert_eq!(get(&c, "192.0.2.1", Some(&new)).await.status, 401);
    std::fs::write(&file, jwks(&[rs256_other()])).unwrap();
    gw.gateway.reload(common::config(&toml)).expect("the reload applies");
    assert_eq!(get(&c, "192.0.2.1", Some(&new)).await.status, 200, "the new key verifies");
    assert_eq!(get(&c, "192.0.2.1", Some(&old)).await.status, 401, "the old key is gone, cached verdict and all");
    // A key set that no longer parses is refused, and the running one keeps serving.
    std::fs::write(&file, "{\"keys\": []}").unwrap();
    assert!(sluice_config::parse("t.toml", &toml).is_err());
    assert_eq!(get(&c, "192.0.2.1", Some(&new)).await.status, 200);
}
