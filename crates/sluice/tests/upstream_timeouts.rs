//! The three stages of a request to an upstream, through the binary, each failing at its own
//! bound (`timeouts`), a route's in place of its upstream's: a target that answers late (504 at
//! `first_byte`, a 200 on a route that waits longer), one that stalls inside a body (cut at
//! `idle`, whole on a route that waits longer), and one whose connections never open (a 502 at
//! `connect`, counted as a `connect` failure, not a 20 s `timeout`). Then the status page's
//! view of the same upstreams, and its last reload.
//!
//! Which bound fired is read from what the client got and from the failure metrics, never
//! from how long anything took.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use support::raw::{metric_sum, request, send, upstream};
use support::{Serve, TempDir};

/// The upstream (`support::raw::upstream(answer)`): `/late...` answers after 1.2 s;
/// `/stall...` sends half its body, pauses 1.5 s, then the rest; anything else answers at once.
fn answer(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 2 {
            line.clear();
        }
        let path = first.split(' ').nth(1).unwrap_or("/").to_string();
        let written = if path.starts_with("/late") {
            thread::sleep(Duration::from_millis(1200));
            writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
        } else if path.starts_with("/stall") {
            let _ = writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello");
            thread::sleep(Duration::from_millis(1500));
            writer.write_all(b"world")
        } else {
            writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        };
        if written.is_err() {
            return;
        }
    }
}

/// A listener whose accept queue is full and never drained: the kernel drops every further SYN,
/// so a connection to it never opens (as to a host that drops packets). Returned with the one
/// connection that fills the queue, to be kept open.
fn blackhole() -> (socket2::Socket, TcpStream, SocketAddr) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let filler = TcpStream::connect(addr).unwrap();
    let probe = TcpStream::connect_timeout(&addr, Duration::from_millis(300));
    assert!(
        probe.is_err(),
        "a connection beyond a full accept queue opened: this kernel does not drop SYNs there, so the \
         test cannot make a target whose connections never open"
    );
    (socket, filler, addr)
}

fn config(app: SocketAddr, void: SocketAddr) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"

[[upstreams]]
name = "app"
targets = ["http://{app}"]
eject_after = 0
timeouts = {{ first_byte = "400ms", idle = "300ms" }}

[[upstreams]]
name = "void"
targets = ["http://{void}"]
eject_after = 0
timeout_ms = 20000
timeouts = {{ connect = "300ms" }}

[[policy]]
name = "open"
algorithm = "fixed-window"
limit = 1000
window = "15m"

[[route]]
path = "/late/short"
upstream = "app"
limits = [{{ policy = "open", key = "ip" }}]

[[route]]
path = "/late/patient"
upstream = "app"
timeouts = {{ first_byte = "5s" }}
limits = [{{ policy = "open", key = "ip" }}]

[[route]]
path = "/stall/short"
upstream = "app"
limits = [{{ policy = "open", key = "ip" }}]

[[route]]
path = "/stall/patient"
upstream = "app"
timeouts = {{ idle = "5s" }}
limits = [{{ policy = "open", key = "ip" }}]

[[route]]
path = "/void"
upstream = "void"
limits = [{{ policy = "open", key = "ip" }}]
"#
    )
}

/// `GET path` through the gateway, read to the end (a cut body is what came before the cut).
fn get(gw: &Serve, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&request("GET", path, &[], b"")).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let res = support::raw::parse_response(&raw);
    (res.status, res.text())
}

fn failures(admin: SocketAddr, upstream: &str, target: SocketAddr, outcome: &str) -> f64 {
    metric_sum(
        admin,
        &format!("sluice_upstream_failures_total{{upstream=\"{upstream}\",target=\"{target}\",outcome=\"{outcome}\"}}"),
    )
}

#[test]
fn each_stage_fails_at_its_own_bound_and_a_route_overrides_its_upstream() {
    let app = upstream(answer);
    let (_hole, _filler, void) = blackhole();
    let dir = TempDir::new("upstream-timeouts");
    let path = dir.write("gateway.toml", &config(app, void));
    let gw = Serve::gateway(&path);
    let admin = gw.admin();

    // First byte: 1.2 s is past the upstream's 400 ms, within the patient route's 5 s.
    let (status, body) = get(&gw, "/late/short");
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("gateway_timeout"), "{body}");
    assert_eq!(get(&gw, "/late/patient"), (200, "late".to_string()));
    assert_eq!(failures(admin, "app", app, "timeout"), 1.0);

    // Idle: a 1.5 s pause inside the body is past the upstream's 300 ms (the client gets the
    // head and the first half, then the connection is cut), within the patient route's 5 s.
    assert_eq!(get(&gw, "/stall/short"), (200, "hello".to_string()), "cut inside the body");
    assert_eq!(get(&gw, "/stall/patient"), (200, "helloworld".to_string()));

    // Connect: the connection never opens; after 300 ms it is a 502 and a `connect` failure,
    // not a 504 at the 20 s `timeout_ms`.
    let (status, body) = get(&gw, "/void");
    assert_eq!(status, 502, "{body}");
    assert_eq!(failures(admin, "void", void, "connect"), 1.0);
    assert_eq!(failures(admin, "void", void, "timeout"), 0.0);

    // /config shows each upstream's stages in force and each route's own.
    let config = support::raw::http(admin, "GET", "/config", b"").json();
    assert_eq!(
        config["upstreams"][0]["timeouts"],
        serde_json::json!({"connect_ms": 30000, "first_byte_ms": 400, "idle_ms": 300})
    );
    assert_eq!(config["upstreams"][1]["timeouts"]["connect_ms"], 300);
    assert_eq!(config["upstreams"][1]["timeouts"]["first_byte_ms"], 20000);
    assert_eq!(config["routes"][1]["timeouts"]["first_byte_ms"], 5000);
    assert_eq!(config["routes"][1]["timeouts"]["idle_ms"], serde_json::Value::Null);

    // The status page's view: each target, its state, counts and response times.
    let status = support::raw::http(admin, "GET", "/status.json", b"").json();
    let ups = status["upstreams"].as_array().unwrap();
    assert_eq!(ups.len(), 2, "{status}");
    let a = &ups[0]["targets"][0];
    assert_eq!((ups[0]["name"].as_str(), ups[0]["balance"].as_str()), (Some("app"), Some("round-robin")));
    assert_eq!(a["target"], app.to_string());
    assert_eq!(a["state"], "up");
    // Three response heads (the patient late answer, both stalls) and the one timeout.
    assert_eq!((a["responses"].as_u64(), a["failures"].as_u64()), (Some(3), Some(1)), "{a}");
    // The patient late answer took 1.2 s: the 99th percentile is under the 2.5 s bucket.
    assert_eq!(a["p99_ms_at_most"], 2500.0, "{a}");
    let v = &ups[1]["targets"][0];
    assert_eq!((v["responses"].as_u64(), v["failures"].as_u64()), (Some(0), Some(1)), "{v}");
    assert!(v.get("p50_ms_at_most").is_none(), "no response, no response time: {v}");
    // Durations as a configuration writes them.
    assert_eq!(status["policies"][0]["window"], "15m", "{}", status["policies"]);
    assert!(status["uptime_seconds"].as_u64().is_some());
    assert!(status.get("last_reload").is_none(), "no reload yet");
}

#[test]
fn the_status_page_shows_the_last_reload_and_why_it_was_refused() {
    let app = upstream(answer);
    let (_hole, _filler, void) = blackhole();
    let dir = TempDir::new("upstream-reload");
    let path = dir.write("gateway.toml", &config(app, void));
    let gw = Serve::gateway(&path);
    let admin = gw.admin();
    let hup = || {
        let ok = std::process::Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap();
        assert!(ok.success());
    };
    let last = |result: &str| {
        for _ in 0..200 {
            let s = support::raw::http(admin, "GET", "/status.json", b"").json();
            if s["last_reload"]["result"] == result {
                return s["last_reload"].clone();
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("no reload with result {result} on the status page");
    };
    hup();
    let ok = last("ok");
    assert_eq!(ok["of"], "config");
    assert!(ok.get("error").is_none(), "{ok}");
    std::fs::write(&path, config(app, void).replace("first_byte = \"5s\"", "first_byte = \"5 parsecs\"")).unwrap();
    hup();
    let refused = last("refused");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("timeouts.first_byte"), "the error names the field: {error}");
    // The running configuration kept serving.
    let res = send(([127, 0, 0, 1], gw.port).into(), &request("GET", "/stall/patient", &[], b""));
    assert_eq!(res.text(), "helloworld");
}
