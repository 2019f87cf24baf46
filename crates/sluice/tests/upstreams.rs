//! `[[upstreams]]` through the binary, in front of real upstream processes (Python's
//! `http.server`, each serving a file that names it): routes name their upstream; round-robin
//! spreads requests; a target killed during a run is ejected after `eject_after` failures and
//! gets no request but the probes, while every GET is answered by another target (sent again
//! when it could not connect); a target started again is served again; every target down is a
//! 503 that says so; `hash` keeps a key on its target, and only the keys of a target that goes
//! move.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::raw::{metric_sum, request, send};
use support::{Serve, TempDir, free_port};

/// A Python `http.server` on `port` serving `dir`, whose file `who` holds its name.
struct Target {
    child: Child,
}

impl Target {
    fn start(dir: &TempDir, name: &str, port: u16) -> Self {
        let root = dir.path(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(format!("{root}/who"), name).unwrap();
        let child = Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory", &root])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 is needed by this test ({e}): apt-get install python3"));
        let up = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(30));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "python3 -m http.server did not start on {port}");
        Self { child }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config(targets: &[u16], balance: &str) -> String {
    let list: Vec<String> = targets.iter().map(|p| format!("\"http://127.0.0.1:{p}\"")).collect();
    format!(
        r#"[server]
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"

[[upstreams]]
name = "files"
targets = [{}]
{balance}
eject_after = 2
eject_for = "300ms"
timeout_ms = 2000

[[policy]]
name = "open"
algorithm = "token-bucket"
capacity = 1000000
refill_per_second = 1000000

[[route]]
path = "/who"
upstream = "files"
limits = [{{ policy = "open", key = "ip" }}]

[[route]]
path = "/here"
limits = [{{ policy = "open", key = "ip" }}]
"#,
        list.join(", ")
    )
}

/// `GET /who` (with `user` as `X-User`): the status and the body (the target's name).
fn who(gw: &Serve, user: Option<&str>) -> (u16, String) {
    let addr: SocketAddr = ([127, 0, 0, 1], gw.port).into();
    let headers: Vec<(&str, &[u8])> = user.map(|u| ("X-User", u.as_bytes())).into_iter().collect();
    let res = send(addr, &request("GET", "/who", &headers, b""));
    (res.status, res.text())
}

#[test]
fn a_killed_target_is_ejected_its_requests_go_elsewhere_and_it_is_served_again_when_back() {
    let dir = TempDir::new("upstreams");
    let ports = [free_port(), free_port(), free_port()];
    let mut targets: Vec<Target> = ["a", "b", "c"].iter().zip(ports).map(|(n, p)| Target::start(&dir, n, p)).collect();
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(&ports, "")));
    let admin = gw.admin();

    // Round-robin: every target gets its share; a route naming no upstream is answered by sluice.
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..30 {
        let (status, body) = who(&gw, None);
        assert_eq!(status, 200, "{body}");
        *seen.entry(body).or_default() += 1;
    }
    assert_eq!(seen.into_values().collect::<Vec<_>>(), [10, 10, 10]);
    let here = send(([127, 0, 0, 1], gw.port).into(), &request("GET", "/here", &[], b""));
    assert!(here.status == 200 && here.text().contains("allowed"), "{}", here.text());

    // b dies: every GET is still answered, by a or c; b gets its `eject_after` failures, then
    // only a probe each time its ejection ends.
    targets[1].stop();
    let started = Instant::now();
    for _ in 0..60 {
        let (status, body) = who(&gw, None);
        assert_eq!(status, 200, "a GET failed while b was down: {body}");
        assert_ne!(body, "b");
    }
    let elapsed = started.elapsed();
    let b = format!(
        "sluice_upstream_failures_total{{upstream=\"files\",target=\"127.0.0.1:{}\",outcome=\"connect\"}}",
        ports[1]
    );
    let failures = metric_sum(admin, &b);
    // Backoffs of 300 ms, 600, 1200...: a probe at most at each of their ends.
    let probes = (1..).take_while(|&k| 300 * ((1 << k) - 1) <= elapsed.as_millis() as u64).count() as f64;
    assert!(failures >= 2.0 && failures <= 2.0 + probes, "{failures} connects to b in {elapsed:?}");
    assert_eq!(
        metric_sum(admin, "sluice_upstream_retries_total{upstream=\"files\"}"),
        failures,
        "each failed GET went again"
    );
    assert!(metric_sum(admin, "sluice_upstream_ejections_total") >= 1.0);

    // b comes back on its port: it is served again within a few backoffs.
    targets[1] = Target::start(&dir, "b", ports[1]);
    let back = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        who(&gw, None).1 == "b"
    });
    assert!(back, "b was never served again");

    // Every target down: 502s while they fail, then 503 no_upstream without trying.
    for t in &mut targets {
        t.stop();
    }
    let answers: Vec<(u16, String)> = (0..12).map(|_| who(&gw, None)).collect();
    let last = &answers[answers.len() - 1];
    assert_eq!(last.0, 503, "{answers:?}");
    assert!(last.1.contains("no_upstream"), "{}", last.1);
    assert!(answers.iter().all(|(s, _)| *s == 502 || *s == 503), "{answers:?}");
    assert!(metric_sum(admin, "sluice_upstream_unavailable_total{upstream=\"files\"}") >= 1.0);
}

#[test]
fn hash_keeps_each_key_on_its_target_and_moves_only_the_keys_of_a_target_that_goes() {
    let dir = TempDir::new("upstreams-hash");
    let ports = [free_port(), free_port(), free_port()];
    let mut targets: Vec<Target> = ["a", "b", "c"].iter().zip(ports).map(|(n, p)| Target::start(&dir, n, p)).collect();
    let gw =
        Serve::gateway(&dir.write("gateway.toml", &config(&ports, "balance = \"hash\"\nhash_key = \"header:x-user\"")));
    let users: Vec<String> = (0..30).map(|i| format!("user-{i}")).collect();
    let placed: Vec<String> = users.iter().map(|u| who(&gw, Some(u)).1).collect();
    for (u, t) in users.iter().zip(&placed) {
        assert_eq!(&who(&gw, Some(u)).1, t, "{u} moved while nothing changed");
    }
    let used: std::collections::BTreeSet<&String> = placed.iter().collect();
    assert_eq!(used.len(), 3, "30 keys on 3 targets: {placed:?}");

    // a goes: its keys move (after its failures eject it), the others' stay.
    targets[0].stop();
    for _ in 0..4 {
        for u in &users {
            who(&gw, Some(u));
        }
    }
    for (u, before) in users.iter().zip(&placed) {
        let (status, now) = who(&gw, Some(u));
        assert_eq!(status, 200);
        if before == "a" {
            assert_ne!(now, "a");
        } else {
            assert_eq!(&now, before, "{u} moved from {before} though its target stayed");
        }
    }
}

#[test]
fn active_health_checks_keep_a_failing_target_out_until_its_checks_pass() {
    let dir = TempDir::new("upstreams-checks");
    let ports = [free_port(), free_port(), free_port()];
    let targets: Vec<Target> = ["a", "b", "c"].iter().zip(ports).map(|(n, p)| Target::start(&dir, n, p)).collect();
    // a and c answer their health check; b serves `who` but its check is a 404.
    for name in ["a", "c"] {
        std::fs::write(dir.path(&format!("{name}/health")), "ok").unwrap();
    }
    let checks = "health_check = { path = \"/health\", interval = \"100ms\", healthy_after = 2, unhealthy_after = 2 }";
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(&ports, checks)));
    let admin = gw.admin();
    let b = format!(
        "sluice_upstream_health_checks_total{{upstream=\"files\",target=\"127.0.0.1:{}\",outcome=\"unhealthy\"}}",
        ports[1]
    );
    let out = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        metric_sum(admin, &b) >= 2.0
    });
    assert!(out, "b's checks never failed twice");
    for _ in 0..30 {
        let (status, body) = who(&gw, None);
        assert_eq!(status, 200);
        assert_ne!(body, "b", "a target whose checks fail got a request");
    }
    // Its check passes again: it is back after two healthy answers.
    std::fs::write(dir.path("b/health"), "ok").unwrap();
    let back = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        who(&gw, None).1 == "b"
    });
    assert!(back, "b never came back once its checks passed");
    drop(targets);
}
