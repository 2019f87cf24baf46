//! A restart keeps the limits: `sluice serve` with `[store] snapshot` writes its state on
//! SIGTERM and reads it back at start, aged by the time it was down; a damaged or foreign file
//! is reported and skipped, and sluice serves from an empty store.
//!
//! The one place a test of sluice waits for real time: a sliding log of 2 s has to pass while
//! sluice is down.

mod faults_common;
mod ops_support;
mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faults_common::{Gateway, KeepAlive, SLUICE};
use ops_support::Scraped;
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

/// `sluice serve --config path`, which must exit at start: its exit status and stderr.
fn refused_at_start(path: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(SLUICE)
        .args(["serve", "--config", path])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary starts");
    let deadline = Instant::now() + faults_common::PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sluice serve started with a snapshot it cannot write");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status, err)
}

#[test]
fn a_snapshot_that_cannot_be_written_stops_check_config_and_the_start() {
    // Its directory does not exist: /var/lib/sluice under a unit without StateDirectory=.
    let dir = TempDir::new("snapshot-unwritable");
    let path = dir.write("sluice.toml", &config(SECRET).replace("snapshot = \"state\"", "snapshot = \"gone/state\""));
    let file = dir.dir().join("gone/state").display().to_string();
    let expected = format!("store.snapshot `{file}`: cannot be written (no file can be created in");

    let check = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success(), "check-config passed: {}", String::from_utf8_lossy(&check.stdout));
    assert!(err.contains(&expected), "{err}");

    let (status, err) = refused_at_start(&path);
    assert!(!status.success(), "{status}");
    assert!(err.contains(&expected), "{err}");
    assert!(!dir.dir().join("gone").exists(), "nothing was created on the way");

    // Once the directory is there, both pass; nothing is left of the check in it.
    std::fs::create_dir(dir.dir().join("gone")).unwrap();
    let check = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert_eq!(std::fs::read_dir(dir.dir().join("gone")).unwrap().count(), 0);
}

/// The admin listener's address, from the gateway's `start` event.
fn admin_of(g: &Gateway) -> SocketAddr {
    let start: serde_json::Value = serde_json::from_str(&g.lines.wait_for("\"event\":\"start\"")).unwrap();
    start["admin"].as_str().expect("an admin listener").parse().unwrap()
}

/// Scrapes `admin` until `name{labels}` reaches `at_least`; returns the scrape.
fn scraped_once(admin: SocketAddr, name: &str, labels: &[(&str, &str)], at_least: f64) -> Scraped {
    let deadline = Instant::now() + faults_common::PATIENCE;
    loop {
        let scraped = Scraped::from(admin);
        if scraped.value(name, labels).is_some_and(|v| v >= at_least) {
            return scraped;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} stayed below {at_least}:\n{}", scraped.text);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn snapshot_writes_are_counted_and_failures_too() {
    let dir = TempDir::new("snapshot-counted");
    std::fs::create_dir(dir.dir().join("states")).unwrap();
    let text = config(SECRET).replace("snapshot = \"state\"", "snapshot = \"states/state\"");
    let path = dir.write("sluice.toml", &format!("{text}\n[admin]\nlisten = \"127.0.0.1:0\"\n"));
    let g = Gateway::start(&path, &[]);
    let admin = admin_of(&g);
    // Both results exist from the start, at zero.
    let first = Scraped::from(admin);
    assert_eq!(first.value("sluice_snapshot_writes_total", &[("result", "failed")]), Some(0.0), "{}", first.text);

    let ok = [("result", "ok")];
    let written = scraped_once(admin, "sluice_snapshot_writes_total", &ok, 1.0);
    let last = written.must("sluice_snapshot_last_success_timestamp_seconds", &[("store", "memory")]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(last > now - 60.0 && last <= now + 1.0, "last success at {last}, now {now}");

    // The directory goes away: every interval's write fails, is logged and counted.
    std::fs::remove_dir_all(dir.dir().join("states")).unwrap();
    g.lines.wait_for("\"snapshot_failed\"");
    let failed = [("result", "failed")];
    let gauge = [("store", "memory")];
    let once = scraped_once(admin, "sluice_snapshot_writes_total", &failed, 1.0);
    let twice = scraped_once(admin, "sluice_snapshot_writes_total", &failed, 2.0);
    // Nothing was written between the two failures: the last success stays where it was.
    assert_eq!(once.must("sluice_snapshot_writes_total", &ok), twice.must("sluice_snapshot_writes_total", &ok));
    assert_eq!(
        once.must("sluice_snapshot_last_success_timestamp_seconds", &gauge),
        twice.must("sluice_snapshot_last_success_timestamp_seconds", &gauge)
    );
}
