//! Reservations of the decision API: `/v1/reserve` holds an admitted request's charges under an
//! id, `/v1/settle` settles them to what the request really cost, `/v1/refund` gives them back.
//! And as an attacker would try them: someone else's id, a guessed one, one used twice, a refund
//! larger than the charge — each refused, counted, and the charges left as they were.

mod common;

use common::{Client, Resp, start};
use serde_json::{Value, json};
use sluice_gateway::observe::Scrape;

const CONFIG: &str = r#"
[decision_api]
allow = ["127.0.0.0/8"]
token = "the-token-of-the-billing-service-0123"

[[policy]]
name = "tokens"
algorithm = "token-bucket"
capacity = 100
refill_per_second = 0.001
"#;

const TOKEN: &str = "Bearer the-token-of-the-billing-service-0123";

async fn post(c: &Client, path: &str, bearer: bool, body: Value) -> Resp {
    let mut headers = vec![("content-type", "application/json")];
    if bearer {
        headers.push(("authorization", TOKEN));
    }
    c.post(path, &headers, body.to_string()).await
}

/// What is left of alice's tokens: a reservation of one, given back at once.
async fn left(c: &Client) -> u64 {
    let r = post(c, "/v1/reserve", false, json!({"policy": "tokens", "key": "alice"})).await.json();
    let back = post(c, "/v1/refund", false, json!({"reservation": r["reservation"]})).await;
    assert_eq!(back.status, 200, "{}", back.text());
    r["remaining"].as_u64().expect("remaining") + 1
}

fn refused(gw: &common::TestGateway, reason: &str) -> usize {
    let store = gw.gateway.config().limiter.enforcer().store().clone();
    let text = gw.gateway.observer().metrics().render(Scrape::of(&*store, 0));
    let line = format!("sluice_reservations_refused_total{{reason=\"{reason}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn a_reservation_is_settled_to_what_was_used_or_refunded() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let reserve = |cost: u64| post(&c, "/v1/reserve", false, json!({"policy": "tokens", "key": "alice", "cost": cost}));

    let r = reserve(20).await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!((body["allowed"].as_bool(), body["remaining"].as_u64()), (Some(true), Some(80)));
    assert_eq!(body["expires_in_ms"], 600_000);
    let id = body["reservation"].as_str().expect("an id").to_string();
    assert_eq!(id.len(), 32);
    // It used 35: settled up.
    let s = post(&c, "/v1/settle", false, json!({"reservation": id, "actual": 35})).await;
    assert_eq!((s.status, s.json()["status"].as_str()), (200, Some("settled")));
    assert_eq!(left(&c).await, 65);

    // Another reserves 30 and gives 10 back, then the rest is refunded... only once.
    let id = reserve(30).await.json()["reservation"].as_str().unwrap().to_string();
    assert_eq!(left(&c).await, 35);
    let s = post(&c, "/v1/refund", false, json!({"reservation": id, "amount": 10})).await;
    assert_eq!((s.status, s.json()["status"].as_str()), (200, Some("refunded")));
    assert_eq!(left(&c).await, 45);
    let again = post(&c, "/v1/refund", false, json!({"reservation": id})).await;
    assert_eq!((again.status, again.json()["error"].as_str()), (404, Some("unknown_reservation")));
    assert_eq!(left(&c).await, 45, "a second refund gives nothing back");

    // A denied request holds nothing: no id.
    let denied = reserve(100).await;
    assert_eq!(denied.status, 429);
    assert!(denied.json().get("reservation").is_none());
    assert_eq!(refused(&gw, "unknown"), 1);
}

#[tokio::test]
async fn only_its_maker_settles_a_reservation_once_and_never_for_more_than_it_charged() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    // The billing service reserves with its token.
    let r = post(&c, "/v1/reserve", true, json!({"policy": "tokens", "key": "alice", "cost": 40})).await;
    let id = r.json()["reservation"].as_str().expect("an id").to_string();
    assert_eq!(left(&c).await, 60);

    // Another caller allowed by its address (no token) cannot give alice's tokens back.
    let stolen = post(&c, "/v1/refund", false, json!({"reservation": id})).await;
    assert_eq!((stolen.status, stolen.json()["error"].as_str()), (404, Some("unknown_reservation")));
    // Guessed or altered ids are the same unknown.
    let mut flipped = id.clone().into_bytes();
    flipped[31] = if flipped[31] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    for guess in [flipped.as_str(), "00000000000000000000000000000000", &id.to_uppercase(), "not an id", ""] {
        let r = post(&c, "/v1/refund", true, json!({"reservation": guess})).await;
        assert_eq!(r.status, 404, "{guess}");
    }
    // A refund larger than the charge is refused, and the reservation stays open.
    let big = post(&c, "/v1/refund", true, json!({"reservation": id, "amount": 41})).await;
    assert_eq!((big.status, big.json()["error"].as_str()), (400, Some("refund_too_large")));
    assert_eq!(left(&c).await, 60, "nothing given back by the refused attempts");
    // Its maker settles it, once.
    assert_eq!(post(&c, "/v1/settle", true, json!({"reservation": id, "actual": 10})).await.status, 200);
    assert_eq!(left(&c).await, 90);
    let twice = post(&c, "/v1/settle", true, json!({"reservation": id, "actual": 0})).await;
    assert_eq!(twice.status, 404);
    assert_eq!(left(&c).await, 90);
    assert_eq!((refused(&gw, "unknown"), refused(&gw, "too_large")), (7, 1));

    // Malformed requests are 400, and a caller neither allowed nor holding the token 403.
    let bad = post(&c, "/v1/settle", true, json!({"reservation": id, "actual": -1})).await;
    assert_eq!(bad.status, 400);
    let bad = post(&c, "/v1/settle", true, json!({"reservation": id, "actual": 1, "extra": true})).await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn a_peek_says_what_a_check_would_and_charges_nothing() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let check = |body: Value| post(&c, "/v1/check", false, body);
    for _ in 0..3 {
        let p = check(json!({"policy": "tokens", "key": "alice", "cost": 30, "peek": true})).await;
        assert_eq!(p.status, 200, "{}", p.text());
        let body = p.json();
        assert_eq!((body["allowed"].as_bool(), body["remaining"].as_u64()), (Some(true), Some(70)), "{body}");
    }
    // Nothing was charged: a real check of 95 leaves 5.
    let r = check(json!({"policy": "tokens", "key": "alice", "cost": 95})).await.json();
    assert_eq!(r["remaining"].as_u64(), Some(5));
    // A peek of what would be denied is answered as the denial would be, and charges nothing.
    let several = json!({"checks": [{"policy": "tokens", "key": "alice", "cost": 6}, {"policy": "tokens", "key": "bob", "cost": 1}], "peek": true});
    let p = check(several).await;
    assert_eq!(p.status, 429, "{}", p.text());
    assert!(p.header("retry-after").is_some());
    let body = p.json();
    assert_eq!(body["allowed"].as_bool(), Some(false));
    assert_eq!(body["checks"][1]["remaining"].as_u64(), Some(99), "bob's own decision, uncharged");
    let r = check(json!({"policy": "tokens", "key": "bob", "cost": 1})).await.json();
    assert_eq!(r["remaining"].as_u64(), Some(99), "the denied peek charged bob nothing");
    let r = check(json!({"policy": "tokens", "key": "alice", "cost": 5})).await;
    assert_eq!((r.status, r.json()["remaining"].as_u64()), (200, Some(0)), "nor alice");

    // A peek holds nothing, and says so beside the checks.
    let p = post(&c, "/v1/reserve", false, json!({"policy": "tokens", "key": "carol", "peek": true})).await;
    assert_eq!(p.status, 400, "{}", p.text());
    let inside = json!({"checks": [{"policy": "tokens", "key": "carol", "peek": true}]});
    assert_eq!(check(inside).await.status, 400);
}
