//! What the binary's tests share: temporary directories and a `sluice serve` child process.

#![allow(dead_code)] // each test binary uses part of this module

pub mod app;
pub mod certs;
pub mod h2;
pub mod raw;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The binary under test.
pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// A TCP port free on 127.0.0.1 a moment ago, for a program that cannot be told to pick one.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A fresh temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty directory whose name starts with `tag`.
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "sluice-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Writes `text` to `name` in the directory; returns its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The path of `name` in the directory.
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `[server]` line every instance on one Redis shares: the same key secret.
pub const SHARED_SECRET: &str = "key_secret = \"shared-by-every-instance-0123456789\"";

/// A `[store]` table on the Redis at `url`, failing closed (an error must fail a test, not be
/// answered by a fallback).
pub fn redis_store(url: &str) -> String {
    format!("\n[store]\nkind = \"redis\"\nurl = \"{url}\"\non_error = \"fail-closed\"\n")
}

/// A gateway of a fleet on the Redis at `redis`: one fixed window, `fleet`, of `limit` per
/// `window`, leased as `lease` says, on one key every client shares (`/api/*`), with an admin
/// listener and `extra` (an `[access_log]`, say). Its store waits 2 s for Redis: a busy machine
/// can hold a call past the default 50 ms, and fail-closed answers it 503, while these gateways'
/// tests count admissions, not the failure mode (CI at 7e3b21c lost one request of 3,710 so).
pub fn fleet_config(redis: &str, limit: u64, window: &str, lease: &str, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
{SHARED_SECRET}

[admin]
listen = "127.0.0.1:0"
{store}timeout_ms = 2000

{extra}

[[policy]]
name = "fleet"
algorithm = "fixed-window"
limit = {limit}
window = "{window}"
lease = "{lease}"

[[route]]
path = "/api/*"
limits = [{{ policy = "fleet", key = "const:everyone" }}]
"#,
        store = redis_store(redis),
    )
}

/// A `sluice serve` child process on a free port, killed when dropped.
pub struct Serve {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// Its further stdout lines (decision lines, events), as they come.
    stdout: std::sync::mpsc::Receiver<String>,
    /// Its first stdout line (the listening line, or the gateway's start event).
    pub first_line: String,
}

/// Reads the server's further lines (decision lines, events) into a channel: a pipe nobody
/// reads would fill and block the server's writes.
fn drain(mut stdout: BufReader<ChildStdout>) -> std::sync::mpsc::Receiver<String> {
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = lines.send(std::mem::take(&mut line));
        }
    });
    read
}

impl Serve {
    /// The seed service with its bucket's capacity and refill.
    pub fn seed(capacity: &str, refill: &str) -> Self {
        let mut cmd = Command::new(SLUICE);
        cmd.arg("serve")
            .env("PORT", "0")
            .env("RATE_LIMIT_CAPACITY", capacity)
            .env("RATE_LIMIT_REFILL_PER_SECOND", refill);
        Self::start(cmd)
    }

    /// The gateway with the configuration in `path`.
    pub fn gateway(path: &str) -> Self {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["serve", "--config", path]);
        Self::start(cmd)
    }

    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start `sluice serve`");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // "sluice listening on http://[::]:PORT (port PORT)" or, in a JSON line,
        // "sluice gateway listening on http://ADDR (config FILE)" (https:// with TLS).
        let addr = line.split("://").nth(1).and_then(|rest| rest.split(' ').next());
        let port = addr.and_then(|a| a.parse::<SocketAddr>().ok()).map(|a| a.port());
        let Some(port) = port else {
            let _ = child.kill();
            panic!("unexpected first line from sluice serve: {line:?}");
        };
        let stdout = drain(stdout);
        Self { child, port, stdout, first_line: line }
    }

    /// The next line it writes on stdout that `wanted` picks (skipping the others), within ten
    /// seconds.
    pub fn stdout_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self.stdout.recv_timeout(left).expect("a line on stdout in time");
            if wanted(&line) {
                return line;
            }
        }
    }

    /// The admin listener's address, from the gateway's start event (`[admin] listen`).
    pub fn admin(&self) -> SocketAddr {
        let v: serde_json::Value = serde_json::from_str(&self.first_line).expect("a JSON start event");
        v["admin"].as_str().expect("an admin listener").parse().unwrap()
    }

    /// The process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The seed service's limited route.
    pub fn hello(&self) -> String {
        self.url("/api/hello")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `sluice check-config FILE` says on stderr of a file it must refuse.
pub fn refused_config(path: &str) -> String {
    let out = std::process::Command::new(SLUICE).args(["check-config", path]).output().unwrap();
    assert!(!out.status.success(), "check-config accepted {path}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A Python script of `tests/support` serving on a port it prints first, killed when dropped.
pub struct PythonServer {
    child: Child,
    /// The port it printed.
    pub port: u16,
}

impl PythonServer {
    /// Runs `support/{script}` with `args`; fails the test, saying how to install Python, when
    /// it is missing.
    pub fn start(script: &str, args: &[&str]) -> Self {
        let path = format!("{}/tests/support/{script}", env!("CARGO_MANIFEST_DIR"));
        let mut child = Command::new("python3")
            .arg(&path)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 is needed by this test ({e}): apt-get install python3"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("{script} said {line:?}"));
        Self { child, port }
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
