//! The gateway's access log and request ids through the binary: every request gets an
//! `X-Request-Id` (a trusted proxy's, or a new UUIDv7; a client's own is replaced), sent to the
//! upstream, echoed to the client and written in its access log line and its decision line; the
//! access log (JSON or combined) says what sluice made of each request, and `sluice simulate`
//! reads it back to the same decisions; SIGUSR1 reopens the file after logrotate moved it; with
//! `client = "hash"` no address is written.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::raw::{Recorder, Resp, request, send};
use support::{SLUICE, Serve, TempDir};

/// A gateway config: 127.0.0.1 trusted when `trusted`, `/api/*` limited to a bucket of 3 per
/// client that does not refill, the upstream `upstream` (none: answered by sluice), and
/// `access_log` lines.
fn config(upstream: Option<SocketAddr>, trusted: bool, access_log: &str) -> String {
    let upstream = upstream.map_or(String::new(), |a| format!("[upstream]\nurl = \"http://{a}\"\n"));
    let trusted = if trusted { r#"trusted_proxies = ["127.0.0.1/32"]"# } else { "" };
    format!(
        r#"[server]
listen = "127.0.0.1:0"
{trusted}

{upstream}
[access_log]
{access_log}

[[policy]]
name = "three"
algorithm = "token-bucket"
capacity = 3
refill_per_second = 0.0001

[[route]]
path = "/api/*"
limits = [{{ policy = "three", key = "ip" }}]
"#
    )
}

fn addr(gw: &Serve) -> SocketAddr {
    ([127, 0, 0, 1], gw.port).into()
}

/// `GET path` from the client `xff` names (through the trusted 127.0.0.1), with `extra` headers.
fn get(gw: &Serve, path: &str, xff: &str, extra: &[(&str, &[u8])]) -> Resp {
    let mut headers = vec![("X-Forwarded-For", xff.as_bytes())];
    headers.extend_from_slice(extra);
    send(addr(gw), &request("GET", path, &headers, b""))
}

/// The file's lines once there are `n` (lines are written as responses end).
fn lines(path: &str, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text.lines().map(str::to_string).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("fewer than {n} lines in {path}: {:?}", std::fs::read_to_string(path));
}

/// Whether `id` is a UUIDv7 as sluice writes them.
fn is_uuid_v7(id: &str) -> bool {
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    groups == [8, 4, 4, 4, 12] && &id[14..15] == "7" && id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())
}

/// `sluice simulate --format json` with `args`.
fn simulate(args: &[&str]) -> Value {
    let out = Command::new(SLUICE).arg("simulate").args(args).args(["--format", "json"]).output().unwrap();
    assert!(out.status.success(), "simulate: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn json_lines_say_what_sluice_made_of_each_request_and_the_simulator_reads_them_back() {
    let dir = TempDir::new("access-json");
    let up = Recorder::start();
    let log = dir.path("access.log");
    let file = dir.write("gateway.toml", &config(Some(up.addr), true, &format!("path = \"{log}\"\nformat = \"json\"")));
    let gw = Serve::gateway(&file);

    // Client .1: five requests, the last two denied; the first carries its proxy's id. Client
    // .2: two. One request to no route (proxied, not limited).
    let mut sent = Vec::new();
    for i in 0..5 {
        let id: &[(&str, &[u8])] = if i == 0 { &[("X-Request-Id", b"lb-7f3a")] } else { &[] };
        sent.push(("203.0.113.1", get(&gw, "/api/items?page=1", "203.0.113.1", id)));
    }
    for _ in 0..2 {
        sent.push(("203.0.113.2", get(&gw, "/api/items", "203.0.113.2", &[])));
    }
    sent.push(("203.0.113.2", get(&gw, "/health", "203.0.113.2", &[])));
    let statuses: Vec<u16> = sent.iter().map(|(_, r)| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 200, 200, 200]);

    // Ids: the trusted proxy's kept, the others new UUIDv7s; the upstream saw each one's.
    let ids: Vec<&str> = sent.iter().map(|(_, r)| r.header("x-request-id").expect("an id on every answer")).collect();
    assert_eq!(ids[0], "lb-7f3a");
    assert!(ids[1..].iter().all(|id| is_uuid_v7(id)), "{ids:?}");
    let seen: Vec<String> = up.requests().iter().map(|s| s.all("x-request-id").join(",")).collect();
    let proxied: Vec<&str> = [0, 1, 2, 5, 6, 7].iter().map(|&i| ids[i]).collect();
    assert_eq!(seen, proxied, "the upstream is told each proxied request's id, once");

    // One line per request, in the order their responses ended.
    let lines = lines(&log, 8);
    assert_eq!(lines.len(), 8, "{lines:?}");
    let lines: Vec<Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    for ((client, res), line) in sent.iter().zip(&lines) {
        assert_eq!(line["request_id"], res.header("x-request-id").unwrap(), "{line}");
        assert_eq!(line["remote_addr"], "127.0.0.1");
        assert_eq!(line["http_x_forwarded_for"], *client);
        assert_eq!(line["client"], *client);
        assert_eq!(line["request_method"], "GET");
        assert_eq!(line["server_protocol"], "HTTP/1.1");
        assert_eq!(line["status"], res.status);
        assert_eq!(line["body_bytes_sent"], res.body.len() as u64, "{line}");
        assert!(line["request_time"].as_f64().unwrap() >= 0.0);
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
    }
    let field = |name: &str| lines.iter().map(|l| l[name].clone()).collect::<Vec<_>>();
    let s = |v: &str| Value::String(v.into());
    assert_eq!(field("request_uri")[0], "/api/items?page=1");
    assert_eq!(
        field("ratelimit"),
        ["allowed", "allowed", "allowed", "denied", "denied", "allowed", "allowed", "unmatched"].map(s)
    );
    let api = s("/api/*");
    assert_eq!(field("route"), [&api, &api, &api, &api, &api, &api, &api, &Value::Null].map(Clone::clone));
    assert_eq!(field("ratelimit_policy")[3], "three");
    let upstream = s(&up.addr.to_string());
    for (i, line) in lines.iter().enumerate() {
        let was_proxied = ![3, 4].contains(&i);
        assert_eq!(line["upstream_addr"] == upstream, was_proxied, "{line}");
        assert_eq!(line["upstream_response_time"].is_number(), was_proxied, "{line}");
    }

    // The simulator reads the gateway's own log with its own configuration: the same decisions.
    let report = simulate(&["--config", &file, "--access-log", &log, "--log-format", "json"]);
    assert_eq!(report["requests"], 8, "{report}");
    assert_eq!(report["unmatched"], 1, "{report}");
    let route = &report["routes"][0];
    assert_eq!(
        (route["route"].as_str(), route["admitted"].as_u64(), route["denied"].as_u64()),
        (Some("/api/*"), Some(5), Some(2)),
        "{report}"
    );
}

#[test]
fn combined_lines_are_reopened_on_sigusr1_and_read_back_by_the_simulator() {
    let dir = TempDir::new("access-combined");
    let log = dir.path("access.log");
    let file = dir.write("gateway.toml", &config(None, true, &format!("path = \"{log}\"")));
    let gw = Serve::gateway(&file);
    for _ in 0..4 {
        get(&gw, "/api/x", "198.51.100.9", &[("User-Agent", b"curl/8 \"quoted\"")]);
    }
    let first = lines(&log, 4);
    let line = &first[3];
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains("\"GET /api/x HTTP/1.1\" 429 "), "{line}");
    assert!(line.contains("\"-\" \"curl/8 \\x22quoted\\x22\" \"198.51.100.9\" rid="), "{line}");
    assert!(
        line.contains(" client=198.51.100.9 route=/api/* ratelimit=denied policy=three upstream=- urt=- rt="),
        "{line}"
    );

    // logrotate moves the file, then signals: the next lines go to a new file of the name.
    std::fs::rename(&log, dir.path("access.log.1")).unwrap();
    let usr1 = Command::new("kill").args(["-USR1", &gw.pid().to_string()]).status().unwrap();
    assert!(usr1.success());
    let reopened = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        get(&gw, "/api/x", "198.51.100.10", &[]);
        std::path::Path::new(&log).exists()
    });
    assert!(reopened, "SIGUSR1 did not reopen the access log");
    assert_eq!(lines(&dir.path("access.log.1"), 4).len(), 4, "the moved file keeps its lines");

    let report = simulate(&["--config", &file, "--access-log", &dir.path("access.log.1"), "--xff-last-field"]);
    let route = &report["routes"][0];
    assert_eq!((route["admitted"].as_u64(), route["denied"].as_u64()), (Some(3), Some(1)), "{report}");
}

#[test]
fn a_client_s_own_id_is_replaced_and_a_hashed_log_holds_no_address() {
    let dir = TempDir::new("access-hash");
    let log = dir.path("access.log");
    let file = dir.write("gateway.toml", &config(None, false, &format!("path = \"{log}\"\nclient = \"hash\"")));
    let gw = Serve::gateway(&file);
    let forged: &[(&str, &[u8])] = &[("X-Request-Id", b"chosen-by-the-client")];
    let answers: Vec<Resp> = (0..4).map(|_| get(&gw, "/api/x", "192.0.2.77", forged)).collect();
    let ids: Vec<&str> = answers.iter().map(|r| r.header("x-request-id").unwrap()).collect();
    assert!(ids.iter().all(|id| is_uuid_v7(id)), "a client that is not a trusted proxy chose its id: {ids:?}");
    assert_eq!(answers[3].status, 429);

    // The denial's decision line carries the id the client was answered with.
    let id = ids[3];
    let decision = gw.stdout_line(|l| l.contains("\"sluice::decision\"") && l.contains(id));
    let decision: Value = serde_json::from_str(&decision).unwrap();
    assert_eq!((decision["decision"].as_str(), decision["request_id"].as_str()), (Some("denied"), Some(id)));

    let lines = lines(&log, 4);
    for line in &lines {
        assert!(!line.contains("127.0.0.1") && !line.contains("192.0.2.77"), "an address in {line}");
    }
    let client = |l: &str| l.split(' ').find_map(|t| t.strip_prefix("client=")).unwrap().to_string();
    let hashes: std::collections::BTreeSet<String> = lines.iter().map(|l| client(l)).collect();
    assert_eq!(hashes.len(), 1, "one client, one name: {lines:?}");
    assert_eq!(hashes.first().unwrap().len(), 32);
}
