//! `lease = "auto"` through the binary: two `sluice serve` gateways on one real Redis, one hot
//! key (every client shares it), loaded from several connections each. Under a limit the load
//! exceeds, the two admit no more than the limit between them; under one it never reaches,
//! Redis runs far fewer scripts than there are requests (its own `INFO commandstats`), against
//! one script a request with `lease = "off"`.

#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_support::RedisServer;
use support::{Serve, TempDir};

/// Connections per gateway.
const CLIENTS: usize = 6;

fn config(redis: &str, limit: u64, lease: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
key_secret = "shared-by-every-instance-0123456789"

[store]
kind = "redis"
url = "{redis}"
on_error = "fail-closed"

[[policy]]
name = "fleet"
algorithm = "fixed-window"
limit = {limit}
window = "1h"
lease = "{lease}"

[[route]]
path = "/api/*"
limits = [{{ policy = "fleet", key = "const:everyone" }}]
"#
    )
}

/// Keep-alive GETs on `port` until `stop`: (requests, 200s).
fn load(
    port: u16,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    admitted: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while !stop.load(Ordering::Relaxed) {
            writer.write_all(b"GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
            let mut length = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            sent.fetch_add(1, Ordering::Relaxed);
            if status == 200 {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Two gateways with `limit` and `lease`, loaded for `seconds`: (requests, 200s, scripts Redis
/// ran meanwhile), inside one hour-long window.
fn run(limit: u64, lease: &str, millis: u64) -> (u64, u64, u64) {
    loop {
        let redis = RedisServer::start();
        let dir = TempDir::new("redis-leases");
        let path = dir.write("gateway.toml", &config(&redis.url(), limit, lease));
        let gateways = [Serve::gateway(&path), Serve::gateway(&path)];
        let hour = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600;
        let started_in = hour();
        let before = redis.scripts_run();
        let (stop, sent, admitted) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::default());
        let threads: Vec<_> = gateways
            .iter()
            .flat_map(|g| (0..CLIENTS).map(|_| load(g.port, stop.clone(), Arc::clone(&sent), Arc::clone(&admitted))))
            .collect();
        std::thread::sleep(Duration::from_millis(millis));
        stop.store(true, Ordering::Relaxed);
        threads.into_iter().for_each(|t| t.join().unwrap());
        // A run across the top of the hour spans two windows: run again, in one.
        if hour() != started_in {
            continue;
        }
        let scripts = redis.scripts_run() - before;
        return (sent.load(Ordering::Relaxed), admitted.load(Ordering::Relaxed), scripts);
    }
}

#[test]
fn two_gateways_leasing_one_hot_key_admit_no_more_than_its_limit() {
    const LIMIT: u64 = 2_000;
    let (sent, admitted, scripts) = run(LIMIT, "auto", 2_500);
    println!("lease auto, limit {LIMIT}: {sent} requests, {admitted} admitted, {scripts} scripts");
    assert!(sent > LIMIT * 2, "the load must exceed the limit: {sent} requests");
    assert!(admitted <= LIMIT, "{admitted} admitted between the two, the limit is {LIMIT}");
    // What the leases still held unspent when the run stopped is all that can be missing.
    assert!(admitted * 10 >= LIMIT * 8, "only {admitted} of {LIMIT} admitted");
}

#[test]
fn leases_spare_redis_a_script_a_request() {
    const NEVER: u64 = 100_000_000;
    let (off_sent, off_admitted, off_scripts) = run(NEVER, "off", 1_500);
    let (on_sent, on_admitted, on_scripts) = run(NEVER, "auto", 1_500);
    println!(
        "lease off: {off_sent} requests, {off_scripts} scripts; lease auto: {on_sent} requests, {on_scripts} scripts"
    );
    assert_eq!((off_admitted, on_admitted), (off_sent, on_sent), "a limit never reached admits all");
    assert!(off_scripts >= off_sent, "without leases a script a request: {off_scripts} for {off_sent}");
    assert!(on_scripts * 10 <= on_sent, "with leases: {on_scripts} scripts for {on_sent} requests");
}
