//! The decision API, `POST /v1/check`: single and multiple checks (all or nothing), 200/429,
//! the decision in the body and in the headers, and 400 on requests it cannot decide.

mod common;

use common::{Client, Resp, start, upstream};
use serde_json::json;

const DECISIONS: &str = r#"
[server]
headers = ["draft-6"]

[[policy]]
name = "per-user"
algorithm = "token-bucket"
capacity = 3
refill_per_second = 0.001

[[policy]]
name = "login"
algorithm = "sliding-log"
limit = 1
window = "1m"
"#;

async fn check(c: &Client, body: serde_json::Value) -> Resp {
    c.post("/v1/check", &[("content-type", "application/json")], body.to_string()).await
}

#[tokio::test]
async fn a_single_check_answers_200_until_the_limit_then_429_with_the_decision() {
    let (gw, _clock) = start(DECISIONS).await;
    let c = Client::new(gw.addr);
    for remaining in [2, 1, 0] {
        let res = check(&c, json!({"policy": "per-user", "key": "alice"})).await;
        assert_eq!(res.status, 200);
        let body = res.json();
        assert_eq!(body["allowed"], true);
        assert_eq!(body["limit"], 3);
        assert_eq!(body["remaining"], remaining);
        assert_eq!(body["retry_after_ms"], 0);
        assert_eq!(body["delay_ms"], 0);
        assert!(body["reset_after_ms"].as_u64().unwrap() > 0);
        assert_eq!((res.num("ratelimit-limit"), res.num("ratelimit-remaining")), (3, remaining));
        assert!(res.header("retry-after").is_none());
    }
    let res = check(&c, json!({"policy": "per-user", "key": "alice"})).await;
    assert_eq!(res.status, 429);
    let body = res.json();
    assert_eq!(body["allowed"], false);
    assert_eq!(body["remaining"], 0);
    // One token per 1000 s: the next is 1000 s away.
    assert_eq!(body["retry_after_ms"], 1_000_000);
    assert_eq!(res.num("retry-after"), 1000);
    assert_eq!(res.header("cache-control"), Some("no-store"));
    assert_eq!(res.num("ratelimit-remaining"), 0);

    // Another key is another bucket; a cost takes that many tokens.
    let res = check(&c, json!({"policy": "per-user", "key": "bob", "cost": 2})).await;
    assert_eq!((res.status, res.json()["remaining"].as_u64()), (200, Some(1)));
    let res = check(&c, json!({"policy": "per-user", "key": "bob", "cost": 2})).await;
    assert_eq!((res.status, res.json()["remaining"].as_u64()), (429, Some(1)));
}

#[tokio::test]
async fn several_checks_are_decided_together_and_a_denial_charges_none() {
    let (gw, _clock) = start(DECISIONS).await;
    let c = Client::new(gw.addr);
    let both = json!({"checks": [
        {"policy": "login", "key": "carol"},
        {"policy": "per-user", "key": "carol"},
    ]});
    let res = check(&c, both.clone()).await;
    assert_eq!(res.status, 200);
    let body = res.json();
    assert_eq!(body["allowed"], true);
    let checks = body["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert_eq!((checks[0]["policy"].as_str(), checks[0]["remaining"].as_u64()), (Some("login"), Some(0)));
    assert_eq!((checks[1]["policy"].as_str(), checks[1]["remaining"].as_u64()), (Some("per-user"), Some(2)));
    // The headers describe the limit closest to denying: login, with nothing left.
    assert_eq!((res.num("ratelimit-limit"), res.num("ratelimit-remaining")), (1, 0));

    // `login` is spent: the pair is denied, and so per-user is not charged.
    for _ in 0..3 {
        let res = check(&c, both.clone()).await;
        assert_eq!(res.status, 429);
        let body = res.json();
        assert_eq!(body["allowed"], false);
        assert_eq!(body["checks"][0]["allowed"], false);
        assert_eq!(body["checks"][1]["allowed"], true);
        assert_eq!(res.num("ratelimit-limit"), 1);
        assert!(body["retry_after_ms"].as_u64().unwrap() > 0);
    }
    let alone = check(&c, json!({"policy": "per-user", "key": "carol"})).await;
    assert_eq!((alone.status, alone.json()["remaining"].as_u64()), (200, Some(1)));
}

#[tokio::test]
async fn requests_it_cannot_decide_are_400_and_other_methods_405() {
    let (gw, _clock) = start(DECISIONS).await;
    let c = Client::new(gw.addr);
    let cases = [
        (json!({"policy": "nope", "key": "x"}).to_string(), "unknown_policy"),
        ("{not json".to_string(), "bad_request"),
        (json!({"checks": []}).to_string(), "bad_request"),
        (json!({"policy": "per-user"}).to_string(), "bad_request"),
        (json!({"policy": "per-user", "key": "x", "cost": 4}).to_string(), "cost_too_large"),
        (json!({"policy": "per-user", "key": "x", "extra": 1}).to_string(), "bad_request"),
        (
            json!({"checks": [{"policy": "per-user", "key": "x"}, {"policy": "nope", "key": "x"}]}).to_string(),
            "unknown_policy",
        ),
    ];
    for (body, code) in cases {
        let res = c.post("/v1/check", &[("content-type", "application/json")], body.clone()).await;
        assert_eq!(res.status, 400, "{body} -> {}", res.text());
        assert_eq!(res.json()["error"], code, "{body}");
    }
    // None of the refused requests charged anything.
    let res = check(&c, json!({"policy": "per-user", "key": "x"})).await;
    assert_eq!(res.json()["remaining"], 2);

    let res = c.get("/v1/check", &[]).await;
    assert_eq!((res.status, res.header("allow")), (405, Some("POST")));
}

#[tokio::test]
async fn with_an_upstream_the_decision_api_is_off_unless_asked_for() {
    let up = upstream().await;
    let base = format!("[upstream]\nurl = \"http://{}\"\n{DECISIONS}", up.addr);
    let (gw, _clock) = start(&base).await;
    let res = check(&Client::new(gw.addr), json!({"policy": "per-user", "key": "x"})).await;
    // Proxied: the upstream's echo answers.
    assert_eq!((res.status, res.json()["path"].as_str()), (200, Some("/v1/check")));

    let on = base.replace("[server]\n", "[server]\ndecision_api = true\n");
    let (gw, _clock) = start(&on).await;
    let res = check(&Client::new(gw.addr), json!({"policy": "per-user", "key": "x"})).await;
    assert_eq!((res.status, res.json()["remaining"].as_u64()), (200, Some(2)));
    assert_eq!(up.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}
