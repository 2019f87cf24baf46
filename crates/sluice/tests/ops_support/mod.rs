//! What the operations tests of the binary share: programs they need (with how to install
//! them), `sluice serve` with its stdout read line by line, plain HTTP, and the metrics text.

#![allow(dead_code)] // each test binary uses part of this module

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// The binary under test.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
/// The `Accept` header of Prometheus' scrapes (what it asks for first).
pub const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
/// How long anything may take before a test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(20);

/// The workspace's root (where `deploy/` is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails the test, saying how to install `program`, unless it runs.
pub fn require(program: &str, version_arg: &str, install: &str) {
    let ran = Command::new(program).arg(version_arg).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if let Err(e) = ran {
        panic!("`{program}` is needed by this test and could not be run ({e}); install it: {install}");
    }
}

/// Runs `program` with `args`; returns (success, stdout, stderr).
pub fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("running {program}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// `sluice serve` as a child process, its stdout lines read by a thread; killed when dropped.
pub struct Running {
    /// The process.
    pub child: Child,
    /// Its stdout, line by line.
    lines: Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Starts `sluice` with `args` and `env`.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(SLUICE)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the sluice binary starts");
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next stdout line.
    pub fn line(&self) -> String {
        self.lines.recv_timeout(WAIT).expect("a stdout line within the wait")
    }

    /// Skips stdout lines until one contains `needle`; returns it.
    pub fn line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no stdout line with {needle:?}"),
            }
        }
    }

    /// Every stdout line up to the first that contains `needle`, that one included.
    pub fn lines_until(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no stdout line with {needle:?}"));
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }

    /// Sends signal `name` (`HUP`, `TERM`, ...) to the process.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args([&format!("-{name}"), &pid]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} {pid} failed");
    }

    /// Every JSON line of stdout with `key` equal to `value`, until `count` of them are seen.
    pub fn json_lines(&self, key: &str, value: &str, count: usize) -> Vec<serde_json::Value> {
        let mut found = Vec::new();
        while found.len() < count {
            let line = self.line_with(&format!("\"{key}\":\"{value}\""));
            found.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
        }
        found
    }

    /// The admin listener's address, from the `start` event.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        let start: serde_json::Value = serde_json::from_str(&self.line_with("\"event\":\"start\"")).expect("JSON");
        start["admin"].as_str().map(|a| a.parse::<SocketAddr>().expect("an address"))
    }

    /// The gateway's listening and admin addresses, from its `start` event.
    pub fn gateway_addresses(&self) -> (SocketAddr, Option<SocketAddr>) {
        let start: serde_json::Value = serde_json::from_str(&self.line_with("\"event\":\"start\"")).expect("JSON");
        let addr = |k: &str| start[k].as_str().map(|a| a.parse::<SocketAddr>().expect("an address"));
        (addr("listen").expect("the listen address"), addr("admin"))
    }
}

/// The address in a `... listening on http://ADDR ...` line, on the loopback interface.
pub fn listening(line: &str) -> SocketAddr {
    let url = line.split("http://").nth(1).and_then(|r| r.split(' ').next()).expect("an http:// address");
    let port: u16 = url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A response: status, lowercase head, body.
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// The head (status line and headers), lowercased.
    pub head: String,
    /// The body.
    pub body: String,
}

/// One HTTP/1.1 request on a new connection.
pub fn http(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(WAIT)).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head: {raw:?}"));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status");
    Resp { status, head: head.to_lowercase(), body: body.to_owned() }
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, "", "")
}

/// Waits until something accepts connections at `addr`.
pub fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scraped `/metrics` text, with its samples.
pub struct Scraped {
    /// The exposition.
    pub text: String,
}

impl Scraped {
    /// Scrapes `admin`'s `/metrics` as Prometheus does, asking for OpenMetrics.
    pub fn from(admin: SocketAddr) -> Self {
        let r = http(admin, "GET", "/metrics", &format!("Accept: {OPENMETRICS}\r\n"), "");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
        Self { text: r.body }
    }

    /// The value of the sample `name{labels}` whose labels include every pair of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            let ok = n == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            ok.then(|| value.parse().ok()).flatten()
        })
    }

    /// Like `value`, failing with the exposition when the sample is absent.
    pub fn must(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }

    /// The names of every sample in the exposition (`_bucket`, `_total` included).
    pub fn sample_names(&self) -> std::collections::BTreeSet<String> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.split([' ', '{']).next().map(str::to_owned))
            .collect()
    }
}

/// A gateway configuration on the Redis at `url` with `on_error`, ports chosen by the system,
/// an admin listener, and one route `hello` (`/api/hello`) limited to 2 per IP an hour; no
/// admitted decision is logged, every denial and failure-mode answer is.
pub fn redis_gateway(url: &str, on_error: &str) -> String {
    redis_gateway_keyed(url, on_error, "ip", "")
}

/// [`redis_gateway`], the limit keyed by `key` (a key part, `ip` there), and `first` (more
/// `[[policy]]` tables) written before its policy `per-ip`.
pub fn redis_gateway_keyed(url: &str, on_error: &str, key: &str, first: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
key_secret = "operations test secret, long enough"

[admin]
listen = "127.0.0.1:0"

[store]
kind = "redis"
url = "{url}"
on_error = "{on_error}"
timeout_ms = 200
{first}
[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 2
window = "1h"

[[route]]
name = "hello"
path = "/api/hello"
limits = [{{ policy = "per-ip", key = "{key}" }}]

[decision_log]
sample = 0.0
denials_per_second = 100
"#
    )
}
