//! Keys built from the request: the password-reset case (per account from the JSON body and
//! per IP, together) and API keys behind one NAT address.

mod common;

use common::{Client, Resp, start};

const PASSWORD_RESET: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]
headers = ["draft-6", "ietf", "x-ratelimit"]

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 3
window = "15m"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 0.001

[[route]]
path = "/api/password-reset"
methods = ["POST"]
limits = [
  { policy = "per-account", key = "json:/email" },
  { policy = "per-ip", key = "ip" },
]
"#;

async fn reset(c: &Client, ip: &str, email: &str) -> Resp {
    let body = serde_json::json!({ "email": email }).to_string();
    c.post("/api/password-reset", &[("x-forwarded-for", ip), ("content-type", "application/json")], body).await
}

#[tokio::test]
async fn rotating_ips_cannot_bypass_the_per_account_limit() {
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    let mut statuses = Vec::new();
    for i in 1..=6 {
        statuses.push(reset(&c, &format!("198.51.100.{i}"), "victim@example.com").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    // Another account is not affected.
    assert_eq!(reset(&c, "198.51.100.7", "someone@example.com").await.status, 200);
}

#[tokio::test]
async fn rotating_accounts_cannot_bypass_the_per_ip_limit() {
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    let mut statuses = Vec::new();
    for i in 1..=7 {
        statuses.push(reset(&c, "203.0.113.66", &format!("user{i}@example.com")).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    // The per-ip limit named the denial in its headers.
    let denied = reset(&c, "203.0.113.66", "user99@example.com").await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.num("ratelimit-limit"), 5);
    assert_eq!(denied.num("ratelimit-remaining"), 0);
    // Another address may still ask for those accounts.
    assert_eq!(reset(&c, "203.0.113.67", "user1@example.com").await.status, 200);
}

#[tokio::test]
async fn case_and_whitespace_variants_of_an_email_are_one_account() {
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    let variants = ["Victim@Example.com", "  victim@example.com ", "VICTIM@EXAMPLE.COM", "victim@example.com"];
    let mut statuses = Vec::new();
    for (i, email) in variants.iter().enumerate() {
        statuses.push(reset(&c, &format!("198.51.100.{}", 10 + i), email).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test]
async fn a_request_without_the_field_counts_against_a_shared_key_and_an_unkeyable_body_is_refused() {
    // (max_body_bytes is the default 64 KiB here.)
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    // Leaving the field out cannot escape the per-account limit: such requests share one
    // "absent" key.
    let bodies = [r#"{"name": "x"}"#, r#"{"email": ""}"#, "", r#"{"other": 1}"#];
    let mut statuses = Vec::new();
    for (i, b) in bodies.iter().enumerate() {
        let ip = format!("198.51.100.{}", 20 + i);
        let json = [("x-forwarded-for", ip.as_str()), ("content-type", "application/json")];
        statuses.push(c.post("/api/password-reset", &json, *b).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // A body padded past max_body_bytes is forwarded but not keyed by account: it lands on the
    // same shared "absent" key, already spent here, so padding escapes nothing.
    let padded = format!(r#"{{"email": "victim@example.com", "pad": "{}"}}"#, "x".repeat(70 * 1024));
    // A readable body the limiter cannot key is refused: an upstream that still reads the
    // account from it would otherwise see requests escape the account's limit.
    let refused = [
        ("not json", 400),
        (r#"{"email": 5"#, 400),
        (r#"{"email": ["victim@example.com"]}"#, 400),
        (r#"{"email": {"a": "victim@example.com"}}"#, 400),
        (padded.as_str(), 429),
    ];
    for (i, (body, want)) in refused.iter().enumerate() {
        let ip = format!("198.51.100.{}", 40 + i);
        let json = [("x-forwarded-for", ip.as_str()), ("content-type", "application/json")];
        let res = c.post("/api/password-reset", &json, body.to_string()).await;
        assert_eq!(res.status, *want, "{}", &body[..body.len().min(40)]);
    }
    // A body sent with no content type, or as another kind, is not read as JSON: an
    // application would parse it as what it says it is (or not at all). 415, nothing charged.
    let victim = r#"{"email": "victim@example.com"}"#;
    for (i, typ) in
        [None, Some("application/x-www-form-urlencoded"), Some("text/plain"), Some("multipart/form-data; boundary=x")]
            .iter()
            .enumerate()
    {
        let ip = format!("198.51.100.{}", 60 + i);
        let mut headers = vec![("x-forwarded-for", ip.as_str())];
        headers.extend(typ.map(|t| ("content-type", t)));
        let res = c.post("/api/password-reset", &headers, victim).await;
        assert_eq!((res.status, res.json()["error"].as_str()), (415, Some("unsupported_media_type")), "{typ:?}");
    }
}

#[tokio::test]
async fn a_denial_reveals_no_email_ip_or_key() {
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    let email = "Secret.Person@Example.org";
    let ip = "198.51.100.222";
    for _ in 0..3 {
        assert_eq!(reset(&c, ip, email).await.status, 200);
    }
    let denied = reset(&c, ip, email).await;
    assert_eq!(denied.status, 429);
    let body = denied.json();
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert!(body["retry_after_seconds"].as_u64().unwrap() >= 1);
    assert_eq!(denied.num("retry-after"), body["retry_after_seconds"].as_u64().unwrap());
    assert_eq!(denied.header("cache-control"), Some("no-store"));
    let mut everything = denied.text().to_lowercase();
    for (name, value) in &denied.headers {
        everything.push_str(&format!("\n{name}: {}", value.to_str().unwrap().to_lowercase()));
    }
    for secret in ["secret.person", "example.org", "@", "198.51.100"] {
        assert!(!everything.contains(secret), "denial leaks {secret:?}: {everything}");
    }
    // No hex string long enough to be a key hash (128 bits = 32 hex digits).
    let longest_hex_run = everything.split(|ch: char| !ch.is_ascii_hexdigit()).map(str::len).max().unwrap_or(0);
    assert!(longest_hex_run < 16, "denial carries a hash-like value: {everything}");
}

const API_KEYS: &str = r#"
[[policy]]
name = "per-client"
algorithm = "token-bucket"
capacity = 2
refill_per_second = 0.001

[[route]]
path = "/api/search"
limits = [{ policy = "per-client", key = ["header:x-api-key|ip", "route"] }]
"#;

#[tokio::test]
async fn two_api_keys_behind_one_nat_address_do_not_share_a_limit() {
    let (gw, _clock) = start(API_KEYS).await;
    let c = Client::new(gw.addr);
    let search = |key: Option<&'static str>| {
        let c = c.clone();
        async move {
            let headers: Vec<(&str, &str)> = key.map(|k| ("x-api-key", k)).into_iter().collect();
            c.get("/api/search?q=x", &headers).await.status
        }
    };
    // Everyone is 127.0.0.1 (one NAT address); the API key tells them apart.
    assert_eq!(
        [search(Some("key-a")).await, search(Some("key-a")).await, search(Some("key-a")).await],
        [200, 200, 429]
    );
    assert_eq!(
        [search(Some("key-b")).await, search(Some("key-b")).await, search(Some("key-b")).await],
        [200, 200, 429]
    );
    // Without the header the address is the key: a limit of its own, not key-a's or key-b's.
    assert_eq!([search(None).await, search(None).await, search(None).await], [200, 200, 429]);
    // An empty header is no key: it falls back to the (exhausted) address.
    let empty = c.get("/api/search", &[("x-api-key", "")]).await.status;
    assert_eq!(empty, 429);
    assert_eq!(search(Some("key-c")).await, 200);
}

fn per_user(trusted: &str) -> String {
    format!(
        r#"
[server]
trusted_proxies = [{trusted}]
user_header = "X-User-Id"

[[policy]]
name = "per-user"
algorithm = "token-bucket"
capacity = 2
refill_per_second = 0.001

[[route]]
path = "/api/*"
limits = [{{ policy = "per-user", key = "user|ip" }}]
"#
    )
}

#[tokio::test]
async fn the_user_header_is_believed_only_from_a_trusted_proxy() {
    // Behind a trusted proxy, each authenticated user has a limit of their own.
    let (gw, _clock) = start(&per_user("\"127.0.0.1/32\"")).await;
    let c = Client::new(gw.addr);
    let as_user = |user: &'static str| [("x-forwarded-for", "198.51.100.1"), ("x-user-id", user)];
    let alice = [
        c.get("/api/x", &as_user("alice")).await.status,
        c.get("/api/x", &as_user("alice")).await.status,
        c.get("/api/x", &as_user("alice")).await.status,
    ];
    assert_eq!(alice, [200, 200, 429]);
    assert_eq!(c.get("/api/x", &as_user("bob")).await.status, 200);
    // No user: the client address is the key.
    assert_eq!(c.get("/api/x", &[("x-forwarded-for", "198.51.100.1")]).await.status, 200);

    // From an untrusted peer the header is ignored: a client cannot mint identities.
    let (gw, _clock) = start(&per_user("")).await;
    let c = Client::new(gw.addr);
    let statuses = [
        c.get("/api/x", &[("x-user-id", "alice")]).await.status,
        c.get("/api/x", &[("x-user-id", "bob")]).await.status,
        c.get("/api/x", &[("x-user-id", "carol")]).await.status,
    ];
    assert_eq!(statuses, [200, 200, 429]);
}
