//! `sluice serve` with the JWT-keyed, plan-tiered example (`examples/plans.toml`), as a user runs
//! it: the binary, keys on disk, tokens in `Authorization: Bearer`, plain HTTP/1.1 requests like
//! curl's.

#[path = "../../sluice-http/tests/jwt_keys/mod.rs"]
mod jwt_keys;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use jwt_keys::*;
use serde_json::json;
use support::{SLUICE, Serve, TempDir};

/// A response: status, lower-cased headers, body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// `curl -H "Authorization: Bearer TOKEN" http://127.0.0.1:PORT/path`, one connection each.
fn get(port: u16, path: &str, token: Option<&str>) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to sluice");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("a response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: body.to_owned() }
}

/// The example of the book (docs/src/getting-started/tokens-and-plans.md), listening on a free
/// port, its secret in a file and a JWK set beside it.
fn config() -> String {
    let example = include_str!("../../../examples/plans.toml");
    let secret_line = example.lines().find(|l| l.starts_with("hs256_secret = ")).expect("the example's secret");
    example
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("window = \"1m\"", "window = \"1h\"")
        .replace(secret_line, "hs256_secret_file = \"hs256.secret\"\njwks_file = \"jwks.json\"")
}

#[test]
fn free_callers_get_429_after_their_quota_and_pro_callers_keep_getting_200() {
    let dir = TempDir::new("jwt");
    let ed = ed25519("ed-2025");
    dir.write("hs256.secret", &format!("{HS_SECRET}\n"));
    dir.write("jwks.json", &jwks(&[&ed]));
    let path = dir.write("sluice.toml", &config());
    let checked = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let served = Serve::gateway(&path);
    let for_us = json!({ "iss": "https://auth.example", "aud": "api" });
    let mut free_claims = claims("user-free", for_us.clone());
    free_claims["plan"] = json!("free");
    let mut pro_claims = claims("user-pro", for_us);
    pro_claims["plan"] = json!("pro");
    let free = hs256().sign(&free_claims);
    let pro = ed.sign(&pro_claims);

    for expected_remaining in ["2", "1", "0"] {
        let r = get(served.port, "/api/search", Some(&free));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("ratelimit-remaining"), Some(expected_remaining));
    }
    let denied = get(served.port, "/api/search", Some(&free));
    assert_eq!(denied.status, 429);
    assert!(denied.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
    assert!(denied.header("ratelimit-policy").unwrap().contains("\"search-free\";q=3"), "{:?}", denied.headers);
    let body: serde_json::Value = serde_json::from_str(&denied.body).unwrap();
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert!(!denied.body.contains("user-free"), "no identity in the body");

    for _ in 0..5 {
        let r = get(served.port, "/api/search", Some(&pro));
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.header("ratelimit-policy").unwrap().contains("\"search-pro\";q=100"));
    }
    // A pro token with a forged signature is refused (401: the example keeps the default
    // `on_invalid_token = "reject"`), and spends nothing: the address still has its one
    // anonymous request, then 429.
    assert_eq!(get(served.port, "/api/search", Some(&forged(&pro))).status, 401);
    assert_eq!(get(served.port, "/api/search", None).status, 200);
    assert_eq!(get(served.port, "/api/search", None).status, 429);
    assert_eq!(get(served.port, "/api/search", Some(&pro)).status, 200, "the real pro caller is untouched");
}
