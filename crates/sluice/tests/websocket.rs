//! WebSockets through the gateway, where a route says `upgrades = ["websocket"]`: a Python
//! WebSocket client (standard library only, `support/websocket.py`) through sluice to a Python
//! echo upstream. The upgrade is limited like any request and, while the tunnel lives, held as
//! one request in flight (a concurrency limit, `max_in_flight_per_client`); frames go both ways;
//! closing either side closes the other; a quiet tunnel is closed after `tunnel_idle_timeout`;
//! an upstream that refuses the upgrade is heard; a route without `upgrades` refuses it (501).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{PythonServer, Serve, TempDir};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/websocket.py");

fn gateway(dir: &TempDir, echo: &PythonServer, server: &str, policy: &str) -> Serve {
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
{server}

[upstream]
url = "http://127.0.0.1:{port}"

{policy}

[[route]]
path = "/ws/*"
upgrades = ["websocket"]
limits = [{{ policy = "p", key = "ip" }}]

[[route]]
path = "/plain/*"
limits = [{{ policy = "p", key = "ip" }}]
"#,
        port = echo.port
    );
    Serve::gateway(&dir.write("gateway.toml", &config))
}

const GENEROUS: &str = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 100\nwindow = \"1m\"";

/// The Python client's lines for `path` with `n` messages.
fn python_client(gw: &Serve, path: &str, n: usize) -> Vec<String> {
    let out = Command::new("python3")
        .args([SCRIPT, "client", "127.0.0.1", &gw.port.to_string(), path, &n.to_string()])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// An upgrade sent by hand: the socket and the status of its answer (kept open when 101).
fn upgrade(addr: SocketAddr, path: &str) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: sluice.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (s, status)
}

/// Whether the server closes `s` within `within` (reading whatever comes before).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn addr(s: &Serve) -> SocketAddr {
    ([127, 0, 0, 1], s.port).into()
}

#[test]
fn frames_go_both_ways_through_the_gateway() {
    let (dir, echo) = (TempDir::new("ws-echo"), PythonServer::start("websocket.py", &["serve"]));
    let gw = gateway(&dir, &echo, "", GENEROUS);
    // Twenty messages of up to 19 kB each way, then the close handshake.
    let lines = python_client(&gw, "/ws/chat", 20);
    assert_eq!(lines, ["HTTP/1.1 101 Switching Protocols", "echoed 20", "closed"]);
    // An upstream that refuses the upgrade is heard as it answered.
    let lines = python_client(&gw, "/ws/refuse", 1);
    assert_eq!(lines, ["HTTP/1.1 403 Forbidden"]);
    // A route that does not say `upgrades` refuses it, never passes it on as a plain GET.
    let (_, status) = upgrade(addr(&gw), "/plain/chat");
    assert_eq!(status, 501);
}

#[test]
fn the_upgrade_is_limited_and_the_tunnel_is_held_as_one_request_in_flight() {
    let (dir, echo) = (TempDir::new("ws-limits"), PythonServer::start("websocket.py", &["serve"]));
    // At most one request in flight per client: a tunnel holds its slot while it lives.
    let one = "[[policy]]\nname = \"p\"\nalgorithm = \"concurrency\"\nmax_in_flight = 1";
    let gw = gateway(&dir, &echo, "", one);
    let (first, status) = upgrade(addr(&gw), "/ws/a");
    assert_eq!(status, 101);
    let (_, second) = upgrade(addr(&gw), "/ws/b");
    assert_eq!(second, 429, "a second tunnel while the first lives");
    // The first closes: its slot is given back.
    first.shutdown(std::net::Shutdown::Both).unwrap();
    drop(first);
    let started = Instant::now();
    loop {
        let (_, status) = upgrade(addr(&gw), "/ws/c");
        if status == 101 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "the slot never came back: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A fixed window counts the upgrade as a request.
    let dir = TempDir::new("ws-window");
    let two = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 2\nwindow = \"1m\"";
    let gw = gateway(&dir, &echo, "", two);
    let statuses: Vec<u16> = (0..3).map(|_| upgrade(addr(&gw), "/ws/x").1).collect();
    assert_eq!(statuses, [101, 101, 429]);

    // `max_in_flight_per_client`: the tunnel is a request in flight for the gateway too.
    let dir = TempDir::new("ws-in-flight");
    let gw = gateway(&dir, &echo, "max_in_flight_per_client = 1", GENEROUS);
    let (_tunnel, status) = upgrade(addr(&gw), "/ws/a");
    assert_eq!(status, 101);
    let plain = support::raw::send(addr(&gw), &support::raw::request("GET", "/plain/x", &[], b""));
    assert_eq!(plain.status, 429, "{}", plain.text());
    assert_eq!(plain.json()["error"], "too_many_in_flight");
}

#[test]
fn closing_either_side_or_going_quiet_closes_the_other() {
    let (dir, echo) = (TempDir::new("ws-close"), PythonServer::start("websocket.py", &["serve"]));
    let gw = gateway(&dir, &echo, "tunnel_idle_timeout = \"1s\"", GENEROUS);
    // The upstream closes after its first echo: the client's connection is closed.
    let (mut s, status) = upgrade(addr(&gw), "/ws/close-after-one");
    assert_eq!(status, 101);
    // A masked text frame "hi".
    s.write_all(&[0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2]).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)), "the upstream closed; the client's side stayed open");
    // Nothing either way for the idle timeout: both are closed.
    let (mut quiet, status) = upgrade(addr(&gw), "/ws/quiet");
    assert_eq!(status, 101);
    let started = Instant::now();
    assert!(closed_within(&mut quiet, Duration::from_secs(5)), "a quiet tunnel stayed open");
    assert!(started.elapsed() >= Duration::from_millis(900), "closed before the idle timeout");
}
