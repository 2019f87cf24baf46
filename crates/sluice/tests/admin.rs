//! `sluice serve --config` with `[admin]`: JSON lines on stdout and the admin listener, as an
//! operator runs them (the binary on port 0, plain HTTP over TCP).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread;
use std::time::{Duration, Instant};
use support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const WAIT: Duration = Duration::from_secs(20);

struct Running {
    child: Child,
    lines: Receiver<String>,
    _dir: TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start(toml: &str) -> Self {
        let dir = TempDir::new("admin");
        let file = dir.write("gateway.toml", toml);
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&file)
            .env("RUST_LOG", "warn") // service events and decision lines are kept anyway
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the sluice binary starts");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, _dir: dir }
    }

    /// The next stdout line, which must be one JSON object.
    fn next_json(&self) -> serde_json::Value {
        let line = self.lines.recv_timeout(WAIT).expect("a stdout line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// Skips stdout lines until one has `key` equal to `value`.
    fn wait_for(&self, key: &str, value: &str) -> serde_json::Value {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "no stdout line with {key} = {value}");
            let line = self.next_json();
            if line[key] == value {
                return line;
            }
        }
    }
}

/// A plain HTTP/1.1 exchange; returns the status and the body.
fn http(addr: SocketAddr, request_line: &str, headers: &str, body: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let req = format!(
        "{request_line} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status");
    (status, head.to_lowercase(), body.to_owned())
}

#[test]
fn the_gateway_logs_json_lines_and_serves_metrics_health_and_config_on_the_admin_listener() {
    let sluice = Running::start(
        r#"
[server]
listen = "127.0.0.1:0"
key_secret = "binary test secret, not to be shown"

[admin]
listen = "127.0.0.1:0"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
name = "hello"
path = "/api/hello"
limits = [{ policy = "per-ip", key = "ip" }]

[decision_log]
sample = 1.0
"#,
    );
    let start = sluice.next_json();
    assert_eq!(start["event"], "start");
    assert_eq!(start["target"], "sluice::event");
    let gateway: SocketAddr = start["listen"].as_str().unwrap().parse().unwrap();
    let admin: SocketAddr = start["admin"].as_str().expect("the admin address is logged").parse().unwrap();
    assert_ne!(gateway, admin);

    assert_eq!(http(gateway, "GET /api/hello", "", "").0, 200);
    assert_eq!(http(gateway, "GET /api/hello", "", "").0, 429);
    let allowed = sluice.wait_for("target", "sluice::decision");
    assert_eq!((allowed["decision"].as_str(), allowed["status"].as_u64()), (Some("allowed"), Some(200)));
    let denied = sluice.wait_for("target", "sluice::decision");
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["policy"], "per-ip");
    assert_eq!(denied["status"], 429);
    assert!(!denied.to_string().contains("127.0.0.1"), "the client IP is not logged: {denied}");

    // Prometheus asks for OpenMetrics; anything else (curl, promtool) gets the text format.
    let openmetrics = "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n";
    let (status, head, metrics) = http(admin, "GET /metrics", openmetrics, "");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/openmetrics-text"), "{head}");
    let denied =
        "sluice_decisions_total{route=\"hello\",policy=\"per-ip\",algorithm=\"fixed-window\",outcome=\"denied\"} 1\n";
    assert!(metrics.contains(denied));
    assert!(metrics.contains("sluice_decision_duration_seconds_count{store=\"memory\"} 2\n"));
    assert!(metrics.contains("# TYPE sluice_decisions counter\n"));
    assert!(metrics.ends_with("# EOF\n"));
    let (status, head, text) = http(admin, "GET /metrics", "", "");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/plain; version=0.0.4"), "{head}");
    assert!(text.contains(denied) && text.contains("# TYPE sluice_decisions_total counter\n"), "{text}");
    assert!(!text.contains("# EOF"), "{text}");

    assert_eq!(http(admin, "GET /healthz", "", "").0, 200);
    let (status, _, ready) = http(admin, "GET /readyz", "", "");
    assert_eq!((status, ready.contains("\"ready\"")), (200, true));
    let (status, _, config) = http(admin, "GET /config", "", "");
    assert_eq!(status, 200);
    assert!(config.contains("<redacted>") && !config.contains("not to be shown"), "{config}");
    // The admin endpoints are not on the client listener.
    assert_eq!(http(gateway, "GET /metrics", "", "").0, 404);
}
