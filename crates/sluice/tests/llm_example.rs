//! `examples/llm.toml`, the book's worked example, as a user runs it: the binary in front of an
//! OpenAI-style model server, callers with bearer tokens of two plans. A free caller's tokens per
//! minute run out on what its completions reported (JSON and streamed); a pro caller's do not.

#[path = "../../sluice-http/tests/jwt_keys/mod.rs"]
mod jwt_keys;
mod support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use jwt_keys::*;
use serde_json::json;
use support::raw::{Resp, parse_response, read_head, upstream};
use support::{Serve, TempDir};

/// A model server: `/v1/chat/completions?used=N` reports N tokens, streamed as server-sent
/// events when the query has `stream`.
fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    while let Some((_, target, headers)) = read_head(&mut reader) {
        let length: usize = headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let used = target.split_once("used=").map_or("0", |(_, n)| n.split('&').next().unwrap_or("0"));
        let usage = format!("{{\"prompt_tokens\":20,\"total_tokens\":{used}}}");
        let reply = if target.contains("stream") {
            let events = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\ndata: {{\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n"
            );
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
                events.len()
            )
        } else {
            let json = format!("{{\"object\":\"chat.completion\",\"usage\":{usage}}}");
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{json}", json.len())
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn config(model: SocketAddr) -> String {
    let example = include_str!("../../../examples/llm.toml");
    let secret_line = example.lines().find(|l| l.starts_with("hs256_secret = ")).expect("the example's secret");
    example
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("http://127.0.0.1:8000", &format!("http://{model}"))
        .replace(secret_line, &format!("hs256_secret = \"{HS_SECRET}\""))
}

fn complete(gateway: SocketAddr, query: &str, token: &str) -> Resp {
    let mut s = TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}]}"#;
    write!(
        s,
        "POST /v1/chat/completions?{query} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

#[test]
fn a_free_callers_tokens_run_out_on_what_its_completions_reported() {
    let dir = TempDir::new("llm");
    let gw = Serve::gateway(&dir.write("llm.toml", &config(upstream(answer))));
    let addr: SocketAddr = ([127, 0, 0, 1], gw.port).into();
    let ours = json!({ "iss": "https://auth.example", "aud": "api" });
    let token = |sub: &str, plan: &str| {
        let mut c = claims(sub, ours.clone());
        c["plan"] = json!(plan);
        hs256().sign(&c)
    };
    let (free, pro) = (token("ada", "free"), token("bob", "pro"));

    // 10,000 tokens a minute: 6,000 (JSON), then 3,800 streamed; each reserved 500 when it came.
    let first = complete(addr, "used=6000", &free);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.remaining_of("tokens-per-minute-free"), 9500);
    let policy = first.header("ratelimit-policy").expect("RateLimit-Policy");
    assert!(policy.contains(r#""tokens-per-minute-free";q=10000;qu="tokens""#), "{policy}");
    assert!(policy.contains(r#""tokens-per-month-free";q=1000000;qu="tokens""#), "{policy}");
    assert!(policy.contains(r#""completions-in-flight";q=4;qu="concurrent-requests""#), "{policy}");
    let second = complete(addr, "stream&used=3800", &free);
    assert_eq!(second.status, 200, "{}", second.text());
    assert!(second.text().ends_with("data: [DONE]\n\n"));
    // 6,000 charged; the stream's reservation shows 3,500 of the ~4,000 left (the bucket refills
    // 166.67 a second: a few more may have come back).
    assert!((3500..3600).contains(&second.remaining_of("tokens-per-minute-free")), "{:?}", second.header("ratelimit"));
    // About 200 left after 9,800: the next (it reserves 500) is denied until they come back.
    let denied = complete(addr, "used=10", &free);
    assert_eq!(denied.status, 429, "{}", denied.text());
    let wait: u64 = denied.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3).contains(&wait), "300 tokens at 166.67 a second: {wait} s");
    // The month counted both completions: 1,000,000 - 9,800, less the 500 this request would
    // have reserved (a limit that admitted a denied request reports what it would have left).
    assert_eq!(denied.remaining_of("tokens-per-month-free"), 989_700, "{:?}", denied.header("ratelimit"));
    assert_eq!(complete(addr, "used=0", &pro).status, 200, "another caller, another plan");
    for _ in 0..5 {
        let r = complete(addr, "stream&used=9000", &pro);
        assert_eq!(r.status, 200, "pro has 200,000 a minute: {}", r.text());
    }
}
