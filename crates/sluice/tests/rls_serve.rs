//! `sluice serve --config` with an `[rls]` section: Envoy's rate-limit service beside the
//! gateway, its `POST /json` endpoint, SIGHUP reloading the descriptor directory (each reload
//! logged and counted as the gateway's are), and `sluice check-config` reading the descriptor
//! files.

mod ops_support;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use ops_support::{Running, Scraped};
use support::{SLUICE, TempDir, free_port};

const LIMITS: &str =
    "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n";

fn config(dir: &TempDir, port: u16) -> String {
    std::fs::create_dir_all(dir.dir().join("ratelimit")).unwrap();
    dir.write("ratelimit/edge.yaml", LIMITS);
    dir.write(
        "sluice.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[rls]\nlisten = \"127.0.0.1:{port}\"\ndescriptors = {:?}\n",
            dir.path("ratelimit")
        ),
    )
}

/// `POST /json` for `user`: the status and the JSON body.
fn check(port: u16, user: &str) -> (u16, serde_json::Value) {
    let body =
        format!(r#"{{"domain": "edge", "descriptors": [{{"entries": [{{"key": "user", "value": "{user}"}}]}}]}}"#);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!("POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    let json = out.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(json).unwrap_or(serde_json::Value::Null))
}

/// `sluice serve --config path`, killed when dropped; stdout is drained by a thread.
struct Sluice(Child);

impl Sluice {
    fn start(path: &str) -> Self {
        let mut child = Command::new(SLUICE)
            .args(["serve", "--config", path])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || for _ in out.lines() {});
        Sluice(child)
    }

    fn hangup(&self) {
        assert!(Command::new("kill").args(["-HUP", &self.0.id().to_string()]).status().unwrap().success());
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(port: u16) {
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the rate-limit service did not listen on {port}");
}

#[test]
fn serve_runs_the_rate_limit_service_and_reloads_it_on_sighup() {
    let dir = TempDir::new("rls-serve");
    let port = free_port();
    let path = config(&dir, port);
    let sluice = Sluice::start(&path);
    wait_for(port);
    let statuses: Vec<u16> = (0..3).map(|_| check(port, "alice").0).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let (status, body) = check(port, "bob");
    assert_eq!(status, 200);
    assert_eq!(body["overallCode"], "OK");
    assert_eq!(body["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(body["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert_eq!(body["statuses"][0]["limitRemaining"], 1);

    // A bad file is refused and the running descriptors stay; a good one is taken.
    dir.write("ratelimit/edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n");
    sluice.hangup();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(check(port, "alice").0, 429, "the old descriptors still decide");
    dir.write("ratelimit/edge.yaml", &LIMITS.replace("requests_per_unit: 2", "requests_per_unit: 5"));
    sluice.hangup();
    let mut remaining = None;
    for _ in 0..50 {
        let (_, body) = check(port, "dave");
        if body["statuses"][0]["currentLimit"]["requestsPerUnit"] == 5 {
            remaining = Some(body["statuses"][0]["limitRemaining"].clone());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(remaining.is_some(), "the reload took effect");
}

#[test]
fn check_config_reads_the_descriptor_files() {
    let dir = TempDir::new("rls-check");
    let path = config(&dir, free_port());
    let out = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("domains: edge"));
    dir.write(
        "ratelimit/edge.yaml",
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: -1\n",
    );
    let out = Command::new(SLUICE).args(["check-config", &path]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("edge.yaml:6: descriptors[0].rate_limit.requests_per_unit: must be a whole number"), "{err}");
}

/// `GET path` on `port`: the body.
fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

#[test]
fn the_admin_listener_counts_the_rate_limit_services_decisions_with_the_gateways() {
    let dir = TempDir::new("rls-admin");
    let (port, admin) = (free_port(), free_port());
    let path = config(&dir, port);
    let text = std::fs::read_to_string(&path).unwrap();
    dir.write("sluice.toml", &format!("{text}\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n"));
    let _sluice = Sluice::start(&path);
    wait_for(port);
    wait_for(admin);
    let statuses: Vec<u16> = (0..3).map(|_| check(port, "carol").0).collect();
    assert_eq!(statuses, [200, 200, 429]);

    let metrics = get(admin, "/metrics");
    let series = |s: &str| metrics.lines().find_map(|l| l.strip_prefix(s)?.strip_prefix(' ')?.parse::<f64>().ok());
    let policy = "fixed-window-2-per-1h";
    let decided = |outcome: &str| {
        series(&format!(
            "sluice_decisions_total{{route=\"rls:edge\",policy=\"{policy}\",algorithm=\"fixed-window\",outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!((decided("allowed"), decided("denied")), (Some(2.0), Some(1.0)), "{metrics}");
    assert_eq!(series("sluice_requests_total{route=\"rls:edge\",outcome=\"denied\"}"), Some(1.0), "{metrics}");

    let status: serde_json::Value = serde_json::from_str(&get(admin, "/status.json")).unwrap();
    let rows = status["decisions"].as_array().expect("decisions in /status.json");
    let row = rows.iter().find(|r| r["route"] == "rls:edge").unwrap_or_else(|| panic!("no rls:edge row in {status}"));
    assert_eq!((row["allowed"].as_u64(), row["denied"].as_u64()), (Some(2), Some(1)), "{row}");
}

#[test]
fn a_changed_descriptor_file_is_reloaded_without_a_signal() {
    let dir = TempDir::new("rls-watch");
    let port = free_port();
    let path = config(&dir, port);
    let text = std::fs::read_to_string(&path).unwrap();
    dir.write("sluice.toml", &text.replace("[rls]\n", "[rls]\nwatch_interval = \"100ms\"\n"));
    let _sluice = Sluice::start(&path);
    wait_for(port);
    assert_eq!(check(port, "erin").1["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    let limit_of = |user: &str| check(port, user).1["statuses"][0]["currentLimit"]["requestsPerUnit"].clone();
    let waited_for = |want: u64| {
        (0..100).any(|i| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            limit_of(&format!("probe-{want}-{i}")) == want
        })
    };

    // Same length, rewritten in place: seen by its bytes, not its size or time.
    dir.write("ratelimit/edge.yaml", &LIMITS.replace("requests_per_unit: 2", "requests_per_unit: 5"));
    assert!(waited_for(5), "the changed file took effect without SIGHUP");

    // A broken file is refused and the running descriptors stay.
    dir.write("ratelimit/edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(limit_of("frank"), 5, "the old descriptors still decide");
    dir.write("ratelimit/edge.yaml", &LIMITS.replace("requests_per_unit: 2", "requests_per_unit: 7"));
    assert!(waited_for(7), "fixing the file takes effect");
}

/// A descriptor file with an error on line 6, field `descriptors[0].rate_limit.requests_per_unit`.
const BROKEN: &str =
    "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: -1\n";

/// `sluice serve` with `[rls]` (`rls_extra` added to it) and an admin listener, its stdout read
/// line by line: the process, the service's port and the admin address.
fn serve_rls(dir: &TempDir, rls_extra: &str) -> (Running, u16, std::net::SocketAddr) {
    let port = free_port();
    let path = config(dir, port);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("[rls]\n", &format!("[rls]\n{rls_extra}"));
    dir.write("sluice.toml", &format!("{text}\n[admin]\nlisten = \"127.0.0.1:0\"\n"));
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let admin = sluice.admin_address();
    wait_for(port);
    (sluice, port, admin.expect("the admin listener"))
}

/// Replaces the descriptor file whole (written aside, then renamed over it): the watcher never
/// reads it half written.
fn replace_file(dir: &TempDir, text: &str) {
    let aside = dir.write("ratelimit/edge.yaml.next", text);
    std::fs::rename(aside, dir.path("ratelimit/edge.yaml")).expect("rename the descriptor file");
}

/// The next `reload` event of the descriptor directory.
fn descriptors_reload(sluice: &Running) -> serde_json::Value {
    let line = sluice.line_with("\"of\":\"rls_descriptors\"");
    let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(event["event"], "reload", "{event}");
    event
}

fn reloads(admin: std::net::SocketAddr, result: &str) -> f64 {
    Scraped::from(admin).must("sluice_config_reloads_total", &[("result", result)])
}

#[test]
fn the_watcher_logs_and_counts_each_descriptor_reload_it_picks_up() {
    let dir = TempDir::new("rls-watch-events");
    let (sluice, port, admin) = serve_rls(&dir, "watch_interval = \"100ms\"\n");
    assert_eq!(check(port, "gina").1["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);

    // A broken file: refused, with where and what, and counted where the shipped alert looks.
    replace_file(&dir, BROKEN);
    let refused = descriptors_reload(&sluice);
    assert_eq!(refused["result"], "refused", "{refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("edge.yaml:6: descriptors[0].rate_limit.requests_per_unit"), "{refused}");
    assert_eq!((reloads(admin, "refused"), reloads(admin, "ok")), (1.0, 0.0));
    assert_eq!(check(port, "gina").1["statuses"][0]["currentLimit"]["requestsPerUnit"], 2, "the old ones decide");

    // A valid change the watcher picks up: an event too.
    replace_file(&dir, &LIMITS.replace("requests_per_unit: 2", "requests_per_unit: 5"));
    let taken = descriptors_reload(&sluice);
    assert_eq!(taken["result"], "ok", "{taken}");
    assert_eq!((reloads(admin, "refused"), reloads(admin, "ok")), (1.0, 1.0));
    assert_eq!(check(port, "gina").1["statuses"][0]["currentLimit"]["requestsPerUnit"], 5);
}

#[test]
fn a_descriptor_reload_refused_on_sighup_is_logged_and_counted_beside_the_configurations() {
    let dir = TempDir::new("rls-hup-events");
    let (sluice, port, admin) = serve_rls(&dir, "watch_interval = \"0s\"\n");
    dir.write("ratelimit/edge.yaml", BROKEN);
    sluice.signal("HUP");
    let refused = descriptors_reload(&sluice);
    assert_eq!(refused["result"], "refused", "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("edge.yaml:6:")), "{refused}");
    // The configuration file itself was fine: one reload taken, one refused.
    let deadline = std::time::Instant::now() + ops_support::WAIT;
    while reloads(admin, "ok") < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the configuration's reload was not counted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!((reloads(admin, "refused"), reloads(admin, "ok")), (1.0, 1.0));
    assert_eq!(check(port, "hana").0, 200, "the running descriptors keep serving");
}

#[test]
fn a_file_with_only_rls_opens_no_gateway_listener_and_says_so() {
    let dir = TempDir::new("rls-only");
    std::fs::create_dir_all(dir.dir().join("ratelimit")).unwrap();
    dir.write("ratelimit/edge.yaml", LIMITS);
    let (gateway_port, rls_port) = (free_port(), free_port());
    let file = dir.write(
        "sluice.toml",
        &format!(
            "[server]\nlisten = \"127.0.0.1:{gateway_port}\"\n\n[rls]\nlisten = \"127.0.0.1:{rls_port}\"\ndescriptors = {:?}\n",
            dir.path("ratelimit")
        ),
    );
    let mut child = Command::new(SLUICE)
        .args(["serve", "--config", &file])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut said = String::new();
    for _ in 0..5 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(&line);
        if line.contains("no gateway listener") {
            break;
        }
    }
    let served = check(rls_port, "alice").0;
    let gateway_open = TcpStream::connect(("127.0.0.1", gateway_port)).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(said.contains("sluice rls listening on") && said.contains("no gateway listener"), "{said}");
    assert!(!said.contains("gateway listening"), "{said}");
    assert_eq!(served, 200, "the rate-limit service answers");
    assert!(!gateway_open, "a gateway listener was opened on {gateway_port}");
}
