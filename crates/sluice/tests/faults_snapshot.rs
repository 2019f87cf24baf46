//! A restart keeps the limits: `sluice serve` with `[store] snapshot` writes its state on
//! SIGTERM and reads it back at start, aged by the time it was down; a damaged or foreign file
//! is reported and skipped, and sluice serves from an empty store.
//!
//! The one place a test of sluice waits for real time: a sliding log of 2 s has to pass while
//! sluice is down.

mod faults_common;
mod support;

use std::time::{Duration, Instant};

use faults_common::{Gateway, KeepAlive};
use support::TempDir;

const SECRET: &str = "the key secret shared by every restart";

/// A gateway answering itself: `/api/log` (3 per sliding 2 s), `/api/bucket` (3, refilled at
/// one token per 1000 s), both per `X-User`, with the snapshot `state` beside the file.
fn config(secret: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
key_secret = "{secret}"

[store]
kind = "memory"
snapshot = "state"
snapshot_interval = "1s"

[[policy]]
name = "log"
algorithm = "sliding-log"
limit = 3
window = "2s"

[[policy]]
name = "bucket"
algorithm = "token-bucket"
capacity = 3
refill_per_second = 0.001

[[route]]
path = "/api/log"
limits = [{{ policy = "log", key = "header:x-user" }}]

[[route]]
path = "/api/bucket"
limits = [{{ policy = "bucket", key = "header:x-user" }}]
"#
    )
}

fn status(g: &Gateway, path: &str, user: &str) -> u16 {
    KeepAlive::connect(g.addr).unwrap().get(path, user).unwrap().status
}

/// Spends `user` on both routes: 3 admitted, then denied.
fn spend(g: &Gateway, user: &str) {
    for path in ["/api/log", "/api/bucket"] {
        let mut c = KeepAlive::connect(g.addr).unwrap();
        let got: Vec<u16> = (0..4).map(|_| c.get(path, user).unwrap().status).collect();
        assert_eq!(got, [200, 200, 200, 429], "{path}");
    }
}

#[test]
fn a_restart_keeps_the_limits_and_ages_them_by_the_downtime() {
    let dir = TempDir::new("snapshot-restart");
    let path = dir.write("sluice.toml", &config(SECRET));

    let mut first = Gateway::start(&path, &[]);
    first.lines.wait_for("no snapshot at");
    let spent_at = Instant::now();
    spend(&first, "alice");
    assert!(first.stop().success(), "{}", first.lines.all());
    let written = first.lines.wait_for("\"snapshot_written\"");
    assert!(written.contains("\"keys\":2"), "alice under both policies: {written}");

    // Straight back: alice is still spent under both limits, bob is not.
    let mut second = Gateway::start(&path, &[]);
    let restored = second.lines.wait_for("\"snapshot_restored\"");
    assert!(restored.contains("\"keys\":2"), "{restored}");
    let answer = KeepAlive::connect(second.addr).unwrap().get("/api/log", "alice").unwrap();
    assert_eq!(answer.status, 429, "the log was reset by the restart");
    let retry = answer.number("retry-after").unwrap();
    assert!((1..=3).contains(&retry), "the log's oldest entry leaves within its 2 s (+ an eighth): {retry}");
    assert_eq!(status(&second, "/api/bucket", "alice"), 429, "the bucket was refilled by the restart");
    assert_eq!(status(&second, "/api/bucket", "bob"), 200, "a new key starts full");
    assert!(second.stop().success());

    // Down for longer than the log's window: the log admits again, the bucket (1000 s a token)
    // does not. The log's entries are written rounded up to an eighth of the window.
    let downtime = Duration::from_millis(2_500).saturating_sub(spent_at.elapsed());
    std::thread::sleep(downtime);
    let mut third = Gateway::start(&path, &[]);
    third.lines.wait_for("\"snapshot_restored\"");
    assert_eq!(status(&third, "/api/log", "alice"), 200, "the window passed while sluice was down");
    assert_eq!(status(&third, "/api/bucket", "alice"), 429, "three restarts later, still spent");
    let bob = KeepAlive::connect(third.addr).unwrap().get("/api/bucket", "bob").unwrap();
    assert_eq!((bob.status, bob.number("ratelimit-remaining")), (200, Some(1)), "bob's one request counted");
    assert!(third.stop().success());
}

#[test]
fn a_damaged_or_foreign_snapshot_is_reported_and_sluice_serves_from_empty() {
    let dir = TempDir::new("snapshot-damaged");
    let path = dir.write("sluice.toml", &config(SECRET));
    let mut g = Gateway::start(&path, &[]);
    spend(&g, "alice");
    assert!(g.stop().success());
    let state = dir.dir().join("state");
    let good = std::fs::read(&state).unwrap();

    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x01;
    let mut version = good.clone();
    version[8] = 9;
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("a flipped byte", flipped, "checksum does not match"),
        ("truncated", good[..good.len() - 5].to_vec(), "truncated"),
        ("another version", version, "written in snapshot format 9"),
        ("not a snapshot", b"{\"state\": []}".to_vec(), "not a sluice snapshot"),
    ];
    for (what, bytes, reason) in cases {
        std::fs::write(&state, &bytes).unwrap();
        let mut g = Gateway::start(&path, &[]);
        let line = g.lines.wait_for("\"snapshot_skipped\"");
        assert!(line.contains(reason), "{what}: {line}");
        assert_eq!(status(&g, "/api/bucket", "alice"), 200, "{what}: sluice serves from an empty store");
        assert!(g.stop().success(), "{what}");
        std::fs::write(&state, &good).unwrap();
    }

    // The same file under another key secret: skipped too, and the next write replaces it.
    let other = dir.write("other.toml", &config("quite another secret, as long"));
    let mut g = Gateway::start(&other, &[]);
    assert!(g.lines.wait_for("\"snapshot_skipped\"").contains("written with another key secret"));
    assert_eq!(status(&g, "/api/bucket", "alice"), 200);
    assert!(g.stop().success());
    let mut g = Gateway::start(&path, &[]);
    assert!(g.lines.wait_for("\"snapshot_skipped\"").contains("another key secret"), "{}", g.lines.all());
    assert!(g.stop().success());
}

#[test]
fn the_snapshot_is_written_every_interval_while_serving() {
    // A crash (SIGKILL: no last write) loses at most one interval of changes.
    let dir = TempDir::new("snapshot-interval");
    let path = dir.write("sluice.toml", &config(SECRET));
    let g = Gateway::start(&path, &[]);
    spend(&g, "alice");
    let state = dir.dir().join("state");
    let deadline = Instant::now() + faults_common::PATIENCE;
    // The interval is 1 s: a write after the spending is one with alice's two keys.
    let mut modified = None;
    while modified.is_none() {
        assert!(Instant::now() < deadline, "no interval write: {}", g.lines.all());
        std::thread::sleep(Duration::from_millis(100));
        modified = std::fs::metadata(&state).ok().and_then(|m| m.modified().ok());
    }
    std::thread::sleep(Duration::from_millis(1_200));
    drop(g); // SIGKILL
    let mut g = Gateway::start(&path, &[]);
    g.lines.wait_for("\"snapshot_restored\"");
    assert_eq!(status(&g, "/api/bucket", "alice"), 429, "the crash kept the last interval's state");
    assert!(g.stop().success());
}
