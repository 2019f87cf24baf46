//! `sluice serve` as a user runs it: the binary on port 0, a real HTTP client, signals.
//!
//! The seed service must answer as the seed tutorial's server does, response for response; bad
//! environment values stop start-up; the gateway reloads on SIGHUP (refusing a bad file) and
//! drains in-flight requests on SIGTERM before exiting 0.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::TempDir;
use support::raw::{Resp, http};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const WAIT: Duration = Duration::from_secs(20);

/// A running `sluice` process, killed when dropped.
struct Sluice {
    child: Child,
    stdout: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    addr: SocketAddr,
}

impl Sluice {
    /// Starts `sluice serve ARGS` with `env` (the seed variables are cleared first) and waits for
    /// its first line, which says where it listens.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve").args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for var in ["PORT", "RATE_LIMIT_CAPACITY", "RATE_LIMIT_REFILL_PER_SECOND"] {
            cmd.env_remove(var);
        }
        cmd.env("RUST_LOG", "warn");
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("the sluice binary starts");
        let (tx, stdout) = channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let first = match stdout.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sluice printed no first line; stderr: {}", stderr.lock().unwrap());
            }
        };
        let addr = listening_addr(&first);
        Self { child, stdout, stderr, addr }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.pid()]).status().expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for a stdout line containing `needle`.
    fn wait_stdout(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => panic!("no stdout line with {needle:?}; stderr: {}", self.stderr.lock().unwrap()),
            }
        }
    }

    /// Waits until stderr contains `needle`, and returns it all.
    fn wait_stderr(&self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.stderr.lock().unwrap().clone();
            if text.contains(needle) {
                return text;
            }
            assert!(Instant::now() < deadline, "stderr never said {needle:?}: {text}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "sluice did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn get(&self, path: &str) -> Resp {
        http(self.addr, "GET", path, b"")
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address in `sluice listening on http://[::]:PORT (port PORT)` or
/// `sluice gateway listening on http://ADDR (config FILE)`, as a loopback address to connect to.
fn listening_addr(line: &str) -> SocketAddr {
    let url = line.split("http://").nth(1).and_then(|r| r.split(' ').next());
    let url = url.unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
    let port: u16 =
        url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    assert_ne!(port, 0, "{line}");
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn the_seed_service_answers_as_the_tutorial_server_does() {
    let sluice = Sluice::start(&[], &[("PORT", "0")]);
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let res = sluice.get("/api/hello");
        assert_eq!(res.status, 200);
        assert_eq!(res.header("ratelimit-limit"), Some("5"));
        assert_eq!(res.header("content-type"), Some("application/json; charset=utf-8"));
        assert!(res.json()["message"].is_string());
        remaining.push(res.header("ratelimit-remaining").unwrap().to_string());
    }
    assert_eq!(remaining, ["4", "3", "2", "1", "0"]);
    for _ in 0..2 {
        let res = sluice.get("/api/hello");
        assert_eq!(res.status, 429);
        assert_eq!(res.header("retry-after"), Some("1"));
        assert_eq!(res.header("ratelimit-limit"), Some("5"));
        assert_eq!(res.header("ratelimit-remaining"), Some("0"));
        assert_eq!(res.header("cache-control"), Some("no-store"));
        let body = res.json();
        assert_eq!(body["error"], "rate_limit_exceeded");
        assert_eq!(body["retryAfterSeconds"], 1);
        assert!(body["message"].is_string());
    }
    let health = sluice.get("/health");
    assert_eq!((health.status, health.json()), (200, serde_json::json!({"status": "ok"})));
    for path in ["/", "/api", "/api/hello/more", "/nope"] {
        let res = sluice.get(path);
        assert_eq!(res.status, 404, "{path}");
        assert_eq!(res.json()["error"], "not_found");
    }
    // /health is GET only, as in the tutorial: anything else is a 404.
    assert_eq!(http(sluice.addr, "POST", "/health", b"").status, 404);
}

#[test]
fn a_non_get_on_hello_is_405_and_counts_against_the_limit() {
    let sluice =
        Sluice::start(&[], &[("PORT", "0"), ("RATE_LIMIT_CAPACITY", "2"), ("RATE_LIMIT_REFILL_PER_SECOND", "0.001")]);
    assert!(sluice.wait_stdout("limit:").contains("2 requests"));
    let post = http(sluice.addr, "POST", "/api/hello", b"{}");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET"));
    assert_eq!(post.header("ratelimit-limit"), Some("2"));
    assert_eq!(post.header("ratelimit-remaining"), Some("1"));
    assert_eq!(post.json()["error"], "method_not_allowed");
    let get = sluice.get("/api/hello");
    assert_eq!((get.status, get.header("ratelimit-remaining")), (200, Some("0")));
    // Spent: the limit is checked before the method, so a POST is now a 429.
    let post = http(sluice.addr, "POST", "/api/hello", b"{}");
    assert_eq!(post.status, 429);
    // One token per 1000 s.
    assert_eq!(post.header("retry-after"), Some("1000"));
    assert_eq!(post.json()["retryAfterSeconds"], 1000);
    assert_eq!(sluice.get("/api/hello").status, 429);
}

#[test]
fn other_spellings_of_the_hello_path_share_its_limit_and_ambiguous_ones_are_refused() {
    // The seed routes as the gateway does: spellings of /api/hello that the tutorial's Express
    // server routes to its handler (case, a trailing slash, `;params`, encoded letters) are the
    // limited route, one bucket, never a way round it.
    let sluice =
        Sluice::start(&[], &[("PORT", "0"), ("RATE_LIMIT_CAPACITY", "3"), ("RATE_LIMIT_REFILL_PER_SECOND", "0.001")]);
    let spellings = ["/API/Hello/", "/api//hello", "/api/hello;x=1", "/api/%68ello"];
    let got: Vec<(u16, Option<String>)> = spellings
        .iter()
        .map(|p| {
            let res = sluice.get(p);
            (res.status, res.header("ratelimit-remaining").map(str::to_string))
        })
        .collect();
    let want = [(200, Some("2")), (200, Some("1")), (200, Some("0")), (429, Some("0"))];
    let want: Vec<(u16, Option<String>)> = want.iter().map(|(s, r)| (*s, r.map(str::to_string))).collect();
    assert_eq!(got, want, "{spellings:?}");
    // A path applications read differently is refused, never answered as another route.
    for path in ["/api%2Fhello", "/api/hello%00", "/api\\hello", "//api/hello"] {
        let res = sluice.get(path);
        assert_eq!(res.status, 400, "{path}");
        assert_eq!(res.header("ratelimit-remaining"), None, "{path}: nothing decided");
    }
}

#[test]
fn malformed_environment_values_stop_start_up_naming_variable_and_value() {
    for (var, value) in [
        ("RATE_LIMIT_CAPACITY", "abc"),
        ("RATE_LIMIT_CAPACITY", "0"),
        ("RATE_LIMIT_CAPACITY", "-1"),
        ("RATE_LIMIT_REFILL_PER_SECOND", "0"),
        ("RATE_LIMIT_REFILL_PER_SECOND", "fast"),
        ("PORT", "x"),
        ("PORT", "65536"),
        // Numbers that parse but make a bucket whose refill time overflows.
        ("RATE_LIMIT_REFILL_PER_SECOND", "1e-300"),
        ("RATE_LIMIT_CAPACITY", "18446744073709551615"),
    ] {
        let out = Command::new(BIN)
            .arg("serve")
            .env_remove("RATE_LIMIT_CAPACITY")
            .env_remove("RATE_LIMIT_REFILL_PER_SECOND")
            .env("PORT", "0")
            .env(var, value)
            .stdin(Stdio::null())
            .output()
            .expect("the sluice binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}={value} was accepted");
        assert!(stderr.contains(var) && stderr.contains(value), "{var}={value}: stderr {stderr:?}");
        assert!(out.stdout.is_empty(), "{var}={value}: it printed {:?}", String::from_utf8_lossy(&out.stdout));
    }
}

fn gateway_config(capacity: u64) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = {capacity}
refill_per_second = 0.001

[[route]]
path = "/api/*"
limits = [{{ policy = "per-ip", key = "ip" }}]
"#
    )
}

#[test]
fn sighup_reloads_a_good_file_and_refuses_a_bad_one_while_the_old_config_serves() {
    let dir = TempDir::new("reload");
    let path = dir.write("sluice.toml", &gateway_config(3));
    let sluice = Sluice::start(&["--config", &path], &[]);
    let res = sluice.get("/api/x");
    assert_eq!((res.status, res.header("ratelimit-remaining")), (200, Some("2")));

    // A file that does not validate: refused, with the reason on stderr.
    dir.write("sluice.toml", &gateway_config(3).replace("capacity = 3", "capacity = 0"));
    sluice.signal("HUP");
    let stderr = sluice.wait_stderr("reload refused");
    assert!(stderr.contains("capacity"), "{stderr}");
    // The old configuration still serves, with its state.
    let res = sluice.get("/api/x");
    assert_eq!(
        (res.status, res.header("ratelimit-limit"), res.header("ratelimit-remaining")),
        (200, Some("3"), Some("1"))
    );

    // Not TOML at all: refused too.
    dir.write("sluice.toml", "[[policy\nname = ");
    sluice.signal("HUP");
    let deadline = Instant::now() + WAIT;
    while sluice.stderr.lock().unwrap().matches("reload refused").count() < 2 {
        assert!(Instant::now() < deadline, "second reload never refused");
        thread::sleep(Duration::from_millis(10));
    }
    let res = sluice.get("/api/x");
    assert_eq!((res.status, res.header("ratelimit-remaining")), (200, Some("0")));
    assert_eq!(sluice.get("/api/x").status, 429);

    // A good file with a larger bucket: taken, and the changed policy starts afresh.
    dir.write("sluice.toml", &gateway_config(10));
    sluice.signal("HUP");
    sluice.wait_stdout("reloaded");
    let res = sluice.get("/api/x");
    assert_eq!(
        (res.status, res.header("ratelimit-limit"), res.header("ratelimit-remaining")),
        (200, Some("10"), Some("9"))
    );
}

/// An upstream that accepts one request, reports it, and answers only when told to.
fn held_upstream() -> (SocketAddr, Receiver<()>, std::sync::mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (arrived_tx, arrived) = channel();
    let (release, release_rx) = channel::<()>();
    thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let _ = arrived_tx.send(());
        let _ = release_rx.recv();
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nslow response");
    });
    (addr, arrived, release)
}

#[test]
fn sigterm_drains_the_request_in_flight_and_exits_zero() {
    let (upstream, arrived, release) = held_upstream();
    let dir = TempDir::new("drain");
    let config = format!("[upstream]\nurl = \"http://{upstream}\"\n{}", gateway_config(5));
    let path = dir.write("sluice.toml", &config);
    let mut sluice = Sluice::start(&["--config", &path, "--drain", "15s"], &[]);
    let addr = sluice.addr;
    let in_flight = thread::spawn(move || http(addr, "GET", "/api/slow", b""));
    arrived.recv_timeout(WAIT).expect("the request reaches the upstream");

    sluice.signal("TERM");
    // It stops accepting: new connections are refused while the old request is still held.
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting connections after SIGTERM");
        thread::sleep(Duration::from_millis(10));
    }
    assert!(sluice.child.try_wait().unwrap().is_none(), "exited with a request in flight");

    release.send(()).unwrap();
    let res = in_flight.join().unwrap();
    assert_eq!(res.status, 200);
    assert_eq!(res.body, b"slow response");
    assert_eq!(res.header("ratelimit-remaining"), Some("4"));
    let status = sluice.wait_exit();
    assert!(status.success(), "exit status {status:?}; stderr: {}", sluice.stderr.lock().unwrap());
    sluice.wait_stdout("stopped");
}

#[test]
fn sigint_stops_the_seed_service_with_exit_zero() {
    let mut sluice = Sluice::start(&[], &[("PORT", "0")]);
    assert_eq!(sluice.get("/health").status, 200);
    sluice.signal("INT");
    let status = sluice.wait_exit();
    assert!(status.success(), "exit status {status:?}");
}

/// The worker threads serving client connections, by name, of the process `pid`, once there
/// are `n` (they are started one after another; at most 5 s), or as many as there are then.
fn worker_threads(pid: u32, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("a Linux /proc")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim().to_string())
            .filter(|n| n.starts_with("sluice-worker-"))
            .collect();
        names.sort();
        if names.len() >= n || Instant::now() > deadline {
            return names;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn server_workers_sets_how_many_threads_serve_connections() {
    let dir = TempDir::new("workers");
    let three = gateway_config(3).replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:0\"\nworkers = 3");
    let sluice = Sluice::start(&["--config", &dir.write("three.toml", &three)], &[]);
    // Served first: the listening line is written before the workers start.
    assert_eq!(sluice.get("/api/x").status, 200, "served");
    assert_eq!(worker_threads(sluice.child.id(), 3), ["sluice-worker-0", "sluice-worker-1", "sluice-worker-2"]);
    let one = gateway_config(3).replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:0\"\nworkers = 1");
    let sluice = Sluice::start(&["--config", &dir.write("one.toml", &one)], &[]);
    assert_eq!(sluice.get("/api/x").status, 200, "served");
    assert_eq!(worker_threads(sluice.child.id(), 1), ["sluice-worker-0"]);
}
