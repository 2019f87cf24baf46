//! `sluice serve` and `sluice check-config` with `[forward_auth]`: the start-up warning about
//! routes forward-auth cannot decide (and their 500), the example accepted, a forward-auth
//! without trusted proxies refused.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use support::{SLUICE, TempDir};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/forward-auth/sluice.toml");

/// The example, on a free port, with a route whose key is read from the body.
fn with_body_keyed_route() -> String {
    let text =
        std::fs::read_to_string(EXAMPLE).unwrap().replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\"");
    format!(
        "{text}\n[[route]]\nname = \"login\"\npath = \"/login\"\nlimits = [{{ policy = \"per-client\", key = \"json:/user\" }}]\n"
    )
}

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_warns_at_start_up_of_routes_it_cannot_decide_and_answers_them_500() {
    let dir = TempDir::new("fa-warn");
    let path = dir.write("sluice.toml", &with_body_keyed_route());
    let mut child = Command::new(SLUICE)
        .args(["serve", "--config", &path])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice serve");
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut before = Vec::new();
    let port = loop {
        let line = lines.next().expect("sluice serve prints its start").unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if event["event"] == "start" {
            break event["listen"].as_str().unwrap().rsplit(':').next().unwrap().parse::<u16>().unwrap();
        }
        before.push(event);
    };
    // Drained, so that the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let warning =
        before.iter().find(|e| e["event"] == "forward_auth_undecidable").expect("the warning, before the start");
    assert_eq!((warning["level"].as_str(), warning["target"].as_str()), (Some("WARN"), Some("sluice::event")));
    assert!(warning["message"].as_str().unwrap().contains("login"), "{warning}");

    let ask = |uri: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head = format!(
            "GET /v1/authz HTTP/1.1\r\nHost: t\r\nX-Forwarded-Method: POST\r\nX-Forwarded-Uri: {uri}\r\nConnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let login = ask("/login");
    assert!(login.starts_with("HTTP/1.1 500"), "{login}");
    assert!(login.contains(r#""error":"not_decidable""#), "{login}");
    assert!(ask("/api/items").starts_with("HTTP/1.1 200"), "the other routes are decided");
}

#[test]
fn check_config_accepts_the_example_and_refuses_forward_auth_that_trusts_no_proxy() {
    let ok = Command::new(SLUICE).args(["check-config", EXAMPLE]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).trim_end().ends_with(": OK"));

    let dir = TempDir::new("fa-check");
    let untrusting = std::fs::read_to_string(EXAMPLE).unwrap().replace("trusted_proxies = [\"127.0.0.1\"]", "");
    let path = dir.write("sluice.toml", &untrusting);
    let refused = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("forward_auth.path") && err.contains("server.trusted_proxies"), "{err}");
}
