//! Several `sluice serve` processes sharing one real Redis: one exact limit across instances, and
//! the failure modes as a client sees them. The tests start `redis-server` themselves.

#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
#[cfg(feature = "external-programs")]
use std::sync::Arc;
#[cfg(feature = "external-programs")]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(feature = "external-programs")]
use redis_support::RedisServer;
use support::{TempDir, free_port};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Serve {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `sluice serve --config` with a Redis store and waits until it accepts connections.
fn serve(redis_url: &str, on_error: &str, policy: &str) -> Serve {
    serve_with(redis_url, on_error, policy, "")
}

fn serve_with(redis_url: &str, on_error: &str, policy: &str, extra: &str) -> Serve {
    let dir = TempDir::new("redis-serve");
    let port = free_port();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:{port}"
key_secret = "shared-by-every-instance-0123456789"

[store]
kind = "redis"
url = "{redis_url}"
on_error = "{on_error}"
timeout_ms = 200

{policy}
{extra}
"#
    );
    let path = dir.write("sluice.toml", &config);
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sluice serve did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Serve { child, port, _dir: dir }
}

/// GETs a path; returns the status code and the raw response.
#[cfg(feature = "external-programs")]
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    (out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), out)
}

/// POSTs a decision request; returns the status code and the raw response.
fn check(port: u16, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

const SHARED: &str = r#"
[[policy]]
name = "shared"
algorithm = "token-bucket"
capacity = 100
refill_per_second = 0.000001
"#;

#[cfg(feature = "external-programs")]
#[test]
fn three_instances_share_one_exact_limit() {
    let redis = RedisServer::start();
    let instances: Vec<Serve> = (0..3).map(|_| serve(&redis.url(), "fail-closed", SHARED)).collect();
    let ports: Arc<Vec<u16>> = Arc::new(instances.iter().map(|s| s.port).collect());
    let admitted = Arc::new(AtomicUsize::new(0));
    let denied = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..30)
        .map(|t| {
            let (ports, admitted, denied) = (ports.clone(), admitted.clone(), denied.clone());
            std::thread::spawn(move || {
                for i in 0..10 {
                    let port = ports[(t + i) % ports.len()];
                    match check(port, r#"{"policy":"shared","key":"one-key"}"#) {
                        (200, _) => admitted.fetch_add(1, Ordering::SeqCst),
                        (429, _) => denied.fetch_add(1, Ordering::SeqCst),
                        (other, raw) => panic!("unexpected status {other}: {raw}"),
                    };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // 300 concurrent checks of one key, capacity 100, spread over three processes.
    assert_eq!(admitted.load(Ordering::SeqCst), 100);
    assert_eq!(denied.load(Ordering::SeqCst), 200);
    // A fourth instance started later sees the same state.
    let late = serve(&redis.url(), "fail-closed", SHARED);
    let (status, raw) = check(late.port, r#"{"policy":"shared","key":"one-key"}"#);
    assert_eq!(status, 429, "{raw}");
    let (status, _) = check(late.port, r#"{"policy":"shared","key":"another-key"}"#);
    assert_eq!(status, 200);
}

#[test]
fn failure_modes_as_a_client_sees_them() {
    // Nothing listens on this port: Redis is down from the start.
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let closed = serve(&dead, "fail-closed", SHARED);
    let (status, raw) = check(closed.port, r#"{"policy":"shared","key":"k"}"#);
    assert_eq!(status, 503, "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after:"), "{raw}");
    assert!(raw.contains("limiter_unavailable"), "{raw}");

    let open = serve(&dead, "fail-open", SHARED);
    for _ in 0..3 {
        assert_eq!(check(open.port, r#"{"policy":"shared","key":"k"}"#).0, 200);
    }

    // Local fallback: an in-memory limiter of the same policy still limits.
    let tight =
        "[[policy]]\nname = \"shared\"\nalgorithm = \"token-bucket\"\ncapacity = 2\nrefill_per_second = 0.000001\n";
    let local = serve(&dead, "local", tight);
    let statuses: Vec<u16> = (0..4).map(|_| check(local.port, r#"{"policy":"shared","key":"k"}"#).0).collect();
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[cfg(feature = "external-programs")]
#[test]
fn readiness_and_breaker_follow_redis_under_fail_closed() {
    let mut redis = RedisServer::start();
    let admin = free_port();
    let s = serve_with(&redis.url(), "fail-closed", SHARED, &format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", admin)).is_err() {
        assert!(Instant::now() < deadline, "admin listener did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(check(s.port, r#"{"policy":"shared","key":"k"}"#).0, 200);
    assert_eq!(get(admin, "/readyz").0, 200);
    redis.kill();
    // Consecutive failures open the breaker: the limiter is unavailable, and says so.
    for _ in 0..5 {
        assert_eq!(check(s.port, r#"{"policy":"shared","key":"k"}"#).0, 503);
    }
    let (status, body) = get(admin, "/readyz");
    assert_eq!(status, 503, "{body}");
    let (_, metrics) = get(admin, "/metrics");
    assert!(metrics.contains("sluice_breaker_open{store=\"redis\"} 1"), "{metrics}");
    assert!(metrics.contains("sluice_store_errors_total{"), "{metrics}");
}
