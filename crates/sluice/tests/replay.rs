//! `sluice replay` against real servers on loopback: the built `sluice serve` (seed service and
//! gateway) and a server that stops answering; its statuses agree with `sluice simulate`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::{SLUICE, Serve, TempDir};

/// Runs `sluice SUBCOMMAND args`, killing it (and failing) if it has not ended within a minute.
fn sluice(subcommand: &str, args: &[&str]) -> Output {
    let mut child = Command::new(SLUICE)
        .arg(subcommand)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the sluice binary");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("sluice {subcommand} {args:?} did not stop by itself within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn json(subcommand: &str, args: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let out = sluice(subcommand, &all);
    assert!(out.status.success(), "sluice {subcommand} {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn count(v: &Value, field: &str, key: &str) -> u64 {
    v[field].get(key).map_or(0, |n| n.as_u64().unwrap())
}

/// Twelve anonymous arrivals 50 ms apart.
fn twelve() -> String {
    (0..12).map(|i| format!("{}.{:02}\n", i / 20, i % 20 * 5)).collect()
}

#[test]
fn replay_against_the_seed_service_agrees_with_simulate() {
    let serve = Serve::seed("5", "0.001");
    let dir = TempDir::new("seed");
    let file = dir.write("arrivals.txt", &twelve());
    let plot = dir.path("live.svg");
    let policy = ["--algorithm", "token-bucket", "--capacity", "5", "--refill", "0.001"];
    let url = serve.url("/api/hello");
    let mut args = vec!["--url", url.as_str(), "--arrivals", &file, "--concurrency", "1"];
    args.extend_from_slice(&policy);
    args.extend_from_slice(&["--plot", &plot]);
    let live = json("replay", &args);

    let sim = json(
        "simulate",
        &["--arrivals", &file, "--algorithms", "token-bucket", "--capacity", "5", "--refill", "0.001"],
    );
    let result = &sim["results"][0];
    assert_eq!(sim["requests"], 12);
    assert_eq!(live["sent"], 12);
    assert_eq!(count(&live, "statuses", "200"), result["allowed"].as_u64().unwrap());
    assert_eq!(count(&live, "statuses", "429"), result["rejected"].as_u64().unwrap());
    assert_eq!(count(&live, "statuses", "200"), 5);
    assert_eq!((live["retries"].as_u64(), live["rate_limited"].as_u64()), (Some(0), Some(7)));
    assert_eq!((live["unfinished"].as_u64(), live["not_sent"].as_u64()), (Some(0), Some(0)));
    assert_eq!(live["errors"], serde_json::json!({}));
    // The built-in simulation agrees request by request (the order is kept with one in flight).
    assert_eq!(live["simulated"]["allowed"], 5);
    assert_eq!(live["simulated"]["agreeing"], 12);
    let l = &live["latency_ms"];
    let p: Vec<f64> = ["p50", "p90", "p99", "max"].iter().map(|k| l[k].as_f64().unwrap()).collect();
    assert!(p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]), "{l}");

    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("live (not 429/503): 5 admitted, 7 rejected"), "live lane missing from the figure");
    assert!(svg.contains("simulated token-bucket: 5 admitted, 7 rejected"));
}

#[test]
fn generated_arrivals_come_from_the_chosen_generator() {
    // The first five arrivals of the article's Poisson stream (all within the first second),
    // from Python's generator by default or from xoshiro, against a service that admits them all.
    let serve = Serve::seed("100", "100");
    let url = serve.url("/api/hello");
    for generator in [None, Some("python"), Some("xoshiro")] {
        let mut args = vec!["--url", url.as_str(), "--requests", "5", "--algorithm", "fixed-window"];
        args.extend(generator.iter().flat_map(|g| ["--generator", *g]));
        let live = json("replay", &args);
        assert_eq!((live["requests"].as_u64(), live["sent"].as_u64()), (Some(5), Some(5)), "{generator:?}");
        assert_eq!(count(&live, "statuses", "200"), 5, "{generator:?}");
        assert_eq!(live["simulated"]["allowed"], 5);
        assert_eq!(live["simulated"]["agreeing"], 5);
    }
}

#[test]
fn arrival_keys_travel_as_forwarded_for_and_api_key() {
    let dir = TempDir::new("keys");
    let config = dir.write(
        "gateway.toml",
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 2
refill_per_second = 0.001

[[policy]]
name = "per-account"
algorithm = "token-bucket"
capacity = 2
refill_per_second = 0.001

[[route]]
path = "/by-ip"
limits = [{ policy = "per-ip", key = "ip" }]

[[route]]
path = "/by-account"
limits = [{ policy = "per-account", key = "header:x-api-key" }]
"#,
    );
    let serve = Serve::gateway(&config);
    // Per IP: .1 sends 6, .2 sends 3, .3 sends 1 -> 2 + 2 + 1 admitted.
    // Per account: alice 6, bob 4 -> 2 + 2 admitted.
    let file = dir.write(
        "arrivals.txt",
        "0.00,203.0.113.1,alice\n0.02,203.0.113.1,alice\n0.04,203.0.113.2,alice\n0.06,203.0.113.1,bob\n\
         0.08,203.0.113.2,alice\n0.10,203.0.113.1,bob\n0.12,203.0.113.1,alice\n0.14,203.0.113.2,bob\n\
         0.16,203.0.113.3,alice\n0.18,203.0.113.1,bob\n",
    );
    for (path, keys, admitted) in [("/by-ip", "ip", 5), ("/by-account", "account", 4)] {
        let url = serve.url(path);
        let policy = ["--algorithm", "token-bucket", "--capacity", "2", "--refill", "0.001", "--keys", keys];
        let mut args = vec!["--url", url.as_str(), "--arrivals", &file, "--concurrency", "1"];
        args.extend_from_slice(&policy);
        let live = json("replay", &args);
        let sim = json(
            "simulate",
            &[
                "--arrivals",
                &file,
                "--algorithms",
                "token-bucket",
                "--capacity",
                "2",
                "--refill",
                "0.001",
                "--keys",
                keys,
            ],
        );
        assert_eq!(sim["results"][0]["allowed"], admitted, "{keys}");
        assert_eq!(count(&live, "statuses", "200"), admitted, "{keys}: {live}");
        assert_eq!(count(&live, "statuses", "429"), 10 - admitted, "{keys}: {live}");
        assert_eq!(live["simulated"]["agreeing"], 10, "{keys}: {live}");
    }
}

#[test]
fn retry_waits_as_told_and_counts_the_retries() {
    // Capacity 2: of four requests at once two are refused, told to come back in 1 s, and
    // admitted then (10 tokens per second have refilled the bucket).
    let dir = TempDir::new("retry");
    let file = dir.write("arrivals.txt", "0\n0\n0\n0\n");
    let plain = Serve::seed("2", "10");
    let live = json("replay", &["--url", &plain.url("/api/hello"), "--arrivals", &file]);
    assert_eq!((count(&live, "statuses", "200"), count(&live, "statuses", "429")), (2, 2), "{live}");
    assert_eq!(live["retries"], 0);

    let retried = Serve::seed("2", "10");
    let live = json("replay", &["--url", &retried.url("/api/hello"), "--arrivals", &file, "--retry"]);
    assert_eq!(count(&live, "statuses", "200"), 4, "{live}");
    assert_eq!(live["retries"], 2, "{live}");
    assert_eq!(live["rate_limited"], 2, "{live}");
    assert_eq!(live["retry"], true);
    // The retried calls waited the 1 s the server asked for.
    assert!(live["latency_ms"]["max"].as_f64().unwrap() >= 1000.0, "{live}");
}

#[test]
fn bad_targets_and_arguments_get_a_clear_error() {
    let dir = TempDir::new("bad");
    let file = dir.write("arrivals.txt", "0\n0.01\n0.02\n");
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused = format!("http://127.0.0.1:{closed}/");
    for (args, needle) in [
        (vec!["--url", "not a url", "--arrivals", &file], "invalid --url `not a url`"),
        (vec!["--url", "ftp://127.0.0.1/", "--arrivals", &file], "only http:// URLs"),
        (vec!["--url", &refused, "--arrivals", &file], "no response from"),
        (vec!["--url", "http://127.0.0.1:9/", "--arrivals", &file, "--requests", "200000"], "more than one replay"),
        (vec!["--url", "http://127.0.0.1:9/", "--arrivals", &file, "--grace", "0s"], "--grace"),
        (vec!["--url", "http://127.0.0.1:9/", "--plot", "x.svg"], "--algorithm"),
        (vec!["--url", "http://127.0.0.1:9/", "--arrivals", &dir.path("missing.txt")], "missing.txt"),
        (vec!["--url", "http://127.0.0.1:9/", "--arrivals", &file, "--concurrency", "0"], "concurrency"),
        (vec!["--url", "http://127.0.0.1:9/", "--arrivals", &file, "--grace", "10"], "`10` has no unit"),
        (vec!["--url", "http://127.0.0.1:9/", "--generator", "mt19937"], "mt19937"),
    ] {
        let out = sluice("replay", &args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a summary");
    }
    let bad_key = dir.write("keys.txt", "0 bad\u{7f}key\n");
    let err = sluice("replay", &["--url", "http://127.0.0.1:9/", "--arrivals", &bad_key]).stderr;
    assert!(String::from_utf8_lossy(&err).contains("arrival 1: the client"), "{}", String::from_utf8_lossy(&err));
}

/// A server that answers the first request and then accepts connections but never answers.
struct Stalling {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Stalling {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let answered = answered.clone();
                        std::thread::spawn(move || Self::connection(stream, &answered));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { port, stop, thread: Some(thread) }
    }

    fn connection(mut stream: TcpStream, answered: &AtomicUsize) {
        stream.set_nonblocking(false).unwrap();
        let mut buf = [0u8; 4096];
        let mut request = Vec::new();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        if answered.fetch_add(1, Ordering::SeqCst) == 0 {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            return;
        }
        // Hold the connection until the client gives up.
        while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_stalling_server_cannot_keep_the_replay_running() {
    let server = Stalling::start();
    let dir = TempDir::new("stall");
    let file = dir.write("arrivals.txt", "0\n0.05\n0.1\n0.15\n0.2\n");
    let url = format!("http://127.0.0.1:{}/", server.port);
    let live = json("replay", &["--url", &url, "--arrivals", &file, "--requests", "3", "--grace", "500ms"]);
    assert_eq!(live["requests"], 3, "{live}");
    assert_eq!(count(&live, "statuses", "200"), 1, "{live}");
    let stuck = count(&live, "errors", "timeout") + live["unfinished"].as_u64().unwrap();
    assert_eq!(stuck + live["not_sent"].as_u64().unwrap(), 2, "{live}");
    assert_eq!(live["sent"].as_u64().unwrap() + live["not_sent"].as_u64().unwrap(), 3, "{live}");
}
