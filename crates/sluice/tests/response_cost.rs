//! `cost_from = "response-header:NAME"` through the binary: an LLM-like upstream reports the
//! tokens each request used, the gateway settles each request's reservation to it, and the next
//! request is denied when the tokens are spent (on the memory store, and on Redis).

#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};

use support::raw::{Resp, http, read_head, upstream};
use support::{Serve, TempDir};

/// An upstream that answers every request `200 done`, with `x-usage-tokens: N` when its query
/// is `used=N`.
fn usage_upstream() -> SocketAddr {
    upstream(answer)
}

fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    while let Some((_, target, _)) = read_head(&mut reader) {
        let used = target.split_once("?used=").map(|(_, n)| format!("x-usage-tokens: {n}\r\n")).unwrap_or_default();
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: 4\r\n{used}\r\ndone");
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

const LIMITS: &str = r#"
[[policy]]
name = "tokens"
algorithm = "token-bucket"
capacity = 100
refill_per_second = 0.001

[[route]]
path = "/v1/*"
limits = [{ policy = "tokens", key = "ip", cost_from = "response-header:x-usage-tokens" }]
"#;

fn config(upstream: SocketAddr, server: &str, store: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n{server}\n[upstream]\nurl = \"http://{upstream}\"\n{LIMITS}{store}"
    )
}

/// What the ietf field says is left of the tokens.
fn left_of(r: &Resp) -> u64 {
    r.remaining_of("tokens")
}

fn tokens_are_settled(gateway: SocketAddr) {
    let get = |path: &str| http(gateway, "GET", path, b"");
    let first = get("/v1/chat?used=40");
    assert_eq!((first.status, first.text().as_str(), left_of(&first)), (200, "done", 99), "reserved 1");
    assert_eq!(left_of(&get("/v1/chat?used=50")), 59, "the first used 40");
    assert_eq!(left_of(&get("/v1/chat")), 9, "the second used 50");
    // The third said nothing: its reservation of 1 stands. The fourth uses 30 of the 8 left.
    let fourth = get("/v1/chat?used=30");
    assert_eq!((fourth.status, left_of(&fourth)), (200, 8));
    let denied = get("/v1/chat?used=1");
    assert_eq!(denied.status, 429, "{}", denied.text());
    assert_eq!(denied.header("retry-after"), Some("22000"), "21 tokens owed and 1 to ask, at 1 per 1000 s");
}

#[test]
fn the_gateway_settles_each_request_to_the_tokens_its_response_reports() {
    let dir = TempDir::new("response-cost");
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(usage_upstream(), "", "")));
    tokens_are_settled(([127, 0, 0, 1], gw.port).into());
}

#[cfg(feature = "external-programs")]
#[test]
fn on_redis_too() {
    let redis = redis_support::RedisServer::start();
    let dir = TempDir::new("response-cost-redis");
    let config = config(usage_upstream(), support::SHARED_SECRET, &support::redis_store(&redis.url()));
    let gw = Serve::gateway(&dir.write("gateway.toml", &config));
    tokens_are_settled(([127, 0, 0, 1], gw.port).into());
}

#[test]
fn check_config_names_a_bad_cost_source() {
    let dir = TempDir::new("response-cost-bad");
    let bad = config(usage_upstream(), "", "").replace("response-header:x-usage-tokens", "response-body:/usage");
    let path = dir.write("gateway.toml", &bad);
    let err = support::refused_config(&path);
    assert!(err.contains("gateway.toml") && err.contains("route[0].limits[0].cost_from"), "{err}");
    assert!(err.contains("unknown cost source `response-body:/usage`"), "{err}");
}
