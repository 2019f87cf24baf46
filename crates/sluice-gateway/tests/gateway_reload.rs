//! Hot reload through `Gateway::reload` while the server runs: changed policies take effect,
//! unchanged ones keep their state, and a refused configuration leaves the old one serving.

mod common;

use common::{Client, config, start};

fn policies(a_capacity: u64, b_capacity: u64, extra: &str) -> String {
    format!(
        r#"
[server]
key_secret = "a-test-secret-of-some-length"

[[policy]]
name = "a"
algorithm = "token-bucket"
capacity = {a_capacity}
refill_per_second = 0.001

[[policy]]
name = "b"
algorithm = "token-bucket"
capacity = {b_capacity}
refill_per_second = 0.001

[[route]]
path = "/a"
limits = [{{ policy = "a", key = "ip" }}]

[[route]]
path = "/b"
limits = [{{ policy = "b", key = "ip" }}]
{extra}
"#
    )
}

#[tokio::test]
async fn a_changed_policy_takes_effect_and_unchanged_ones_keep_their_state() {
    let (gw, _clock) = start(&policies(2, 3, "")).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/a", &[]).await.status, 200);
    assert_eq!(c.get("/a", &[]).await.status, 200);
    assert_eq!(c.get("/a", &[]).await.status, 429);
    assert_eq!(c.get("/b", &[]).await.num("ratelimit-remaining"), 2);

    // Policy `a` grows to 5 tokens; `b` is unchanged; a new route appears.
    let extra = "[[route]]\npath = \"/c\"\nlimits = [{ policy = \"b\", key = \"const:all\" }]\n";
    gw.gateway.reload(config(&policies(5, 3, extra))).expect("reload accepted");

    let a = c.get("/a", &[]).await;
    assert_eq!((a.status, a.num("ratelimit-limit"), a.num("ratelimit-remaining")), (200, 5, 4));
    // `b` remembers the request made before the reload.
    let b = c.get("/b", &[]).await;
    assert_eq!((b.status, b.num("ratelimit-limit"), b.num("ratelimit-remaining")), (200, 3, 1));
    assert_eq!(c.get("/b", &[]).await.num("ratelimit-remaining"), 0);
    assert_eq!(c.get("/b", &[]).await.status, 429);
    // The new route is live.
    assert_eq!(c.get("/c", &[]).await.num("ratelimit-remaining"), 2);
}

#[tokio::test]
async fn removing_a_route_or_tightening_a_limit_applies_at_once() {
    let (gw, _clock) = start(&policies(5, 3, "")).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/a", &[]).await.status, 200);
    // Only route /a remains, and its policy shrinks to one token.
    let toml = policies(1, 3, "").replace("[[route]]\npath = \"/b\"\nlimits = [{ policy = \"b\", key = \"ip\" }]", "");
    gw.gateway.reload(config(&toml)).expect("reload accepted");
    assert_eq!(c.get("/a", &[]).await.status, 200);
    assert_eq!(c.get("/a", &[]).await.status, 429);
    let gone = c.get("/b", &[]).await;
    assert_eq!((gone.status, gone.json()["error"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn a_refused_reload_leaves_the_running_configuration_and_its_state() {
    let (gw, _clock) = start(&policies(2, 3, "")).await;
    let c = Client::new(gw.addr);
    assert_eq!(c.get("/a", &[]).await.num("ratelimit-remaining"), 1);
    // The key secret cannot change without a restart: every key would move.
    let other_secret = policies(9, 9, "").replace("a-test-secret-of-some-length", "another-secret-entirely");
    let err = gw.gateway.reload(config(&other_secret)).unwrap_err();
    assert!(err.to_string().contains("key_secret"), "{err}");
    // Nor can the number of worker threads: they start with the listeners.
    let more_workers = policies(9, 9, "").replace("[server]\n", "[server]\nworkers = 3\n");
    let err = gw.gateway.reload(config(&more_workers)).unwrap_err();
    assert_eq!(err.to_string(), "server.workers cannot change on reload: restart to change it");
    let a = c.get("/a", &[]).await;
    assert_eq!((a.status, a.num("ratelimit-limit"), a.num("ratelimit-remaining")), (200, 2, 0));
    assert_eq!(c.get("/a", &[]).await.status, 429);
}
