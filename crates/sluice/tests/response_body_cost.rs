//! Costs read from the response's body, through the binary: an OpenAI-style upstream reports
//! the tokens each completion used in its JSON or, streaming, in the last server-sent event; a
//! download is charged the bytes sent. Each request reserves 1 and is settled when its body
//! ends — or when its client leaves mid-stream, to what was sent by then.

mod support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use support::raw::{Resp, http, open_until, read_head, upstream};
use support::{Serve, TempDir};

/// An upstream in the OpenAI style. By query: `used=N` the tokens it reports; `stream` answers
/// in server-sent events (chunked), the usage in the last event before `[DONE]`; `bytes=N`
/// answers N bytes; `hang` sends the usage (or half the bytes) and then nothing more, never
/// ending the body.
fn openai_like() -> SocketAddr {
    upstream(answer)
}

fn query<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let (_, q) = target.split_once('?')?;
    q.split('&').find_map(|kv| match kv.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if kv == name => Some(""),
        _ => None,
    })
}

fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    while let Some((_, target, _)) = read_head(&mut reader) {
        let used: u64 = query(&target, "used").and_then(|n| n.parse().ok()).unwrap_or(0);
        let hang = query(&target, "hang").is_some();
        let usage =
            format!("{{\"prompt_tokens\":7,\"completion_tokens\":{},\"total_tokens\":{used}}}", used.saturating_sub(7));
        let reply = if let Some(n) = query(&target, "bytes").and_then(|n| n.parse::<usize>().ok()) {
            let length = if hang { 2 * n } else { n };
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {length}\r\n\r\n{}",
                "x".repeat(n)
            )
        } else if query(&target, "stream").is_some() {
            let mut s =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_string();
            for word in ["Hel", "lo"] {
                s += &chunk(&format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{word}\"}}}}],\"usage\":null}}\n\n"
                ));
            }
            s += &chunk(&format!("data: {{\"choices\":[],\"usage\":{usage}}}\n\n"));
            if !hang {
                s += &chunk("data: [DONE]\n\n");
                s += "0\r\n\r\n";
            }
            s
        } else {
            let body = format!("{{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"usage\":{usage}}}");
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
        if hang {
            thread::sleep(Duration::from_secs(60));
            return;
        }
    }
}

const CONFIG: &str = r#"
[[policy]]
name = "tokens"
algorithm = "token-bucket"
capacity = 1000
refill_per_second = 0.001
unit = "tokens"

[[policy]]
name = "bytes"
algorithm = "token-bucket"
capacity = 10000
refill_per_second = 0.001

[[route]]
path = "/v1/*"
limits = [{ policy = "tokens", key = "ip", cost_from = "response-json:/usage/total_tokens" }]

[[route]]
path = "/files/*"
limits = [{ policy = "bytes", key = "ip", cost_from = "response-bytes" }]
"#;

fn gateway(dir: &TempDir) -> (Serve, SocketAddr) {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n[upstream]\nurl = \"http://{}\"\n{CONFIG}",
        openai_like()
    );
    let gw = Serve::gateway(&dir.write("gateway.toml", &config));
    let addr = ([127, 0, 0, 1], gw.port).into();
    (gw, addr)
}

/// Waits (at most 10 s) until a request to `path` shows `policy` has `left` remaining (each
/// try charges what its own response costs: a path whose response costs 0).
fn settles_to(addr: SocketAddr, path: &str, policy: &str, left: u64) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = http(addr, "GET", path, b"");
        if r.remaining_of(policy) == left || Instant::now() > deadline {
            return r;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_completion_is_settled_to_the_tokens_its_json_reports() {
    let dir = TempDir::new("body-cost-json");
    let (_gw, addr) = gateway(&dir);
    let get = |path: &str| http(addr, "GET", path, b"");
    let first = get("/v1/chat/completions?used=300");
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["usage"]["total_tokens"], 300, "the body is passed on whole");
    assert_eq!(first.remaining_of("tokens"), 999, "reserved 1 while it is answered");
    assert_eq!(first.header("ratelimit-policy"), Some(r#""tokens";q=1000;qu="tokens";w=1000000"#));
    assert_eq!(get("/v1/chat/completions?used=650").remaining_of("tokens"), 699, "the first used 300");
    // 50 left: the next is admitted (it reserves 1) and uses 100; then the limit is spent.
    let over = get("/v1/chat/completions?used=100");
    assert_eq!((over.status, over.remaining_of("tokens")), (200, 49));
    let denied = get("/v1/chat/completions?used=1");
    assert_eq!(denied.status, 429, "the tokens are spent: the next request is denied, not the one in flight");
    assert_eq!(denied.header("retry-after"), Some("51000"), "50 tokens owed and 1 to ask, at 1 per 1000 s");
}

#[test]
fn a_stream_is_settled_to_its_last_usage_event_also_when_the_client_leaves() {
    let dir = TempDir::new("body-cost-sse");
    let (_gw, addr) = gateway(&dir);
    let whole = http(addr, "GET", "/v1/chat/completions?stream&used=200", b"");
    assert_eq!(whole.status, 200);
    let text = whole.text();
    assert!(text.contains("\"total_tokens\":200") && text.ends_with("data: [DONE]\n\n"), "{text}");
    // Each look reserves 1 (shown) and is settled to the 0 tokens it reports.
    assert_eq!(http(addr, "GET", "/v1/x?used=0", b"").remaining_of("tokens"), 799, "settled to 200");

    // A stream that never ends: the client reads the usage event and leaves. The reservation is
    // settled to what was sent (the usage it carried), not left at its estimate.
    let request = b"GET /v1/chat/completions?stream&hang&used=500 HTTP/1.1\r\nHost: t\r\n\r\n";
    let (c, _) = open_until(addr, request, "\"total_tokens\":500");
    drop(c);
    let after = settles_to(addr, "/v1/x?used=0", "tokens", 800 - 500 - 1);
    assert_eq!(after.remaining_of("tokens"), 299, "settled to the 500 tokens of the event sent");
}

#[test]
fn a_download_is_charged_the_bytes_sent_also_when_the_client_leaves() {
    let dir = TempDir::new("body-cost-bytes");
    let (_gw, addr) = gateway(&dir);
    let first = http(addr, "GET", "/files/a?bytes=3000", b"");
    assert_eq!((first.status, first.body.len(), first.remaining_of("bytes")), (200, 3000, 9999));
    // A policy charged the bytes sent counts bytes, and says so.
    assert_eq!(first.header("ratelimit-policy"), Some(r#""bytes";q=10000;qu="content-bytes";w=10000000"#));
    // Each look reserves 1 (shown) and is settled to the 0 bytes it sends.
    assert_eq!(http(addr, "GET", "/files/b?bytes=0", b"").remaining_of("bytes"), 6999, "3000 bytes sent");

    // Half of a 4000-byte body is sent, then the upstream stalls; the client leaves after it.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /files/c?bytes=2000&hang HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    while got.iter().filter(|&&b| b == b'x').count() < 2000 {
        let n = c.read(&mut buf).expect("the first half");
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    drop(c);
    let after = settles_to(addr, "/files/d?bytes=0", "bytes", 7000 - 2000 - 1);
    assert_eq!(after.remaining_of("bytes"), 4999, "charged the 2000 bytes sent, not the 4000 announced");
    // Over the limit: 6000 more bytes are sent (the response in flight is not cut), and the next
    // request is denied.
    assert_eq!(http(addr, "GET", "/files/e?bytes=6000", b"").body.len(), 6000);
    assert_eq!(http(addr, "GET", "/files/f?bytes=0", b"").status, 429);
}

#[test]
fn check_config_names_a_bad_pointer() {
    let dir = TempDir::new("body-cost-bad");
    let path = dir.write("gateway.toml", &CONFIG.replace("response-json:/usage/total_tokens", "response-json:usage"));
    let err = support::refused_config(&path);
    assert!(err.contains("gateway.toml") && err.contains("route[0].limits[0].cost_from"), "{err}");
    assert!(err.contains("`usage` is not a JSON pointer"), "{err}");
}
