//! `[upstream] http2 = true` through the binary, against nginx speaking HTTP/2 as the upstream:
//! with prior knowledge on `http://` (h2c) and by ALPN on `https://`. The upstream sees HTTP/2
//! with the client's host as `:authority`, the path and query as sent, the forwarding header
//! sluice writes, and a request body; a response of a megabyte comes back whole (flow control);
//! many clients at once share one connection per worker; the limit holds as on HTTP/1.1; an
//! h2c upstream that speaks only HTTP/1.1 is a 502 (an https one: `https_upstream.rs`).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::certs::{authority, certificate, run, server_certificate};
use support::{Serve, TempDir, free_port};

/// nginx on `h2c` (HTTP/2 with prior knowledge) and `tls` (HTTP/2 by ALPN) ports: `/whoami`
/// answers how it read the request; `/echo` answers the request body (read by nginx's proxy,
/// handed to a second server block as a header); `/big.bin` is a 1 MiB file.
struct Nginx {
    child: Child,
    h2c: u16,
    tls: u16,
    /// A server block of HTTP/1.1 only.
    h1: u16,
}

impl Nginx {
    fn start(dir: &TempDir, cert: &(String, String)) -> Self {
        let (h2c, tls, sink) = (free_port(), free_port(), free_port());
        let root = dir.path("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(format!("{root}/big.bin"), vec![b'x'; 1 << 20]).unwrap();
        // nginx's workers run unprivileged: they must be able to read the file.
        for p in [dir.dir().to_str().unwrap(), &root] {
            run("chmod", &["755", p]);
        }
        run("chmod", &["644", &format!("{root}/big.bin")]);
        let d = dir.dir().display();
        let conf = dir.write(
            "nginx.conf",
            &format!(
                r#"pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format conn '$connection $request_uri';
  access_log {d}/access.log conn;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{h2c} http2;
    listen 127.0.0.1:{tls} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {root};
    location = /whoami {{
      return 200 "$server_protocol $http2 host=$host uri=$request_uri xff=$http_x_forwarded_for conn=$connection\n";
    }}
    location = /echo {{
      proxy_set_header X-Body $request_body;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_pass http://127.0.0.1:{sink}/;
    }}
  }}
  server {{
    listen 127.0.0.1:{sink};
    location / {{ return 200 "$http_x_body"; }}
  }}
}}
"#,
                cert = cert.0,
                key = cert.1,
            ),
        );
        let child = Command::new("nginx")
            .args(["-p", &format!("{d}/"), "-e", &dir.path("startup.log"), "-c", &conf])
            .args(["-g", "daemon off; master_process off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("nginx is needed by this test ({e}): apt-get install nginx (scripts/test does it as root; Debian puts it in /usr/sbin, which must be on PATH)"));
        let nginx = Self { child, h2c, tls, h1: sink };
        let up = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            std::net::TcpStream::connect(("127.0.0.1", tls)).is_ok()
        });
        if !up {
            let logs = ["startup.log", "error.log"].map(|f| std::fs::read_to_string(dir.path(f)).unwrap_or_default());
            panic!("nginx did not start: {logs:?}");
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway in front of `url` in HTTP/2, with `tls` lines in `[upstream]`; `/limited` allows
/// 3 a minute per address, everything else a million.
fn gateway(dir: &TempDir, url: &str, tls: &str) -> Serve {
    Serve::gateway(&dir.write(
        "gateway.toml",
        &format!(
            r#"[server]
listen = "127.0.0.1:0"
h2c = true

[upstream]
url = "{url}"
http2 = true
{tls}

[[policy]]
name = "open"
algorithm = "fixed-window"
limit = 1000000
window = "1m"

[[policy]]
name = "three"
algorithm = "fixed-window"
limit = 3
window = "1m"

[[route]]
path = "/whoami"
limits = [{{ policy = "three", key = "ip" }}]

[[route]]
path = "/*"
limits = [{{ policy = "open", key = "ip" }}]
"#
        ),
    ))
}

/// curl's answer (`-i`) to `args` then `url`.
fn curl(args: &[&str], url: &str) -> String {
    let mut all = vec!["-s", "-i", "--max-time", "10"];
    all.extend_from_slice(args);
    all.push(url);
    let out = run("curl", &all);
    assert!(out.status.success(), "curl {all:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything through a gateway speaking HTTP/2 to nginx, which reports `protocol` (`h2c`, `h2`).
fn proxied_in_http2(gw: &Serve, protocol: &str, log: &str) {
    // What the upstream read: HTTP/2, the client's host, the target as sent, the client's
    // address appended by sluice to a forwarding header the client wrote.
    let who = curl(&["-H", "Host: api.example", "-H", "X-Forwarded-For: 6.6.6.6"], &gw.url("/whoami?q=1&q=2"));
    assert!(who.starts_with("HTTP/1.1 200"), "{who}");
    let expected = format!("HTTP/2.0 {protocol} host=api.example uri=/whoami?q=1&q=2 xff=127.0.0.1 conn=");
    assert!(who.contains(&expected), "expected `{expected}` in {who}");
    assert!(who.to_ascii_lowercase().contains("ratelimit"), "the limit's headers: {who}");

    // The limit holds as on HTTP/1.1: 3 a minute, the fourth denied by sluice, not nginx.
    for _ in 0..2 {
        assert!(curl(&[], &gw.url("/whoami")).starts_with("HTTP/1.1 200"));
    }
    let denied = curl(&[], &gw.url("/whoami"));
    assert!(denied.starts_with("HTTP/1.1 429") && denied.to_ascii_lowercase().contains("retry-after:"), "{denied}");

    // A request body goes in DATA frames.
    let echo = curl(&["--data-binary", "name=sluice&count=3"], &gw.url("/echo"));
    assert!(echo.starts_with("HTTP/1.1 200") && echo.ends_with("\r\n\r\nname=sluice&count=3"), "{echo}");

    // A megabyte comes back whole, past the stream's first window (64 KiB).
    let out = run("curl", &["-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", &gw.url("/big.bin")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("200 {}", 1 << 20));

    // Four hundred requests, twenty at a time, from HTTP/1.1 and HTTP/2 clients: all answered
    // by nginx, on at most one upstream connection per gateway worker (nginx numbers its
    // connections in its log).
    for flags in [&["--h1"][..], &["-m", "10"][..]] {
        let mut args = vec!["-n", "200", "-c", "20"];
        if flags[0] == "-m" {
            args[3] = "2";
        }
        args.extend_from_slice(flags);
        let url = gw.url("/open");
        args.push(&url);
        let load = run("h2load", &args);
        let text = String::from_utf8_lossy(&load.stdout);
        // nginx has no /open: 404 from the upstream, every one of them.
        assert!(text.contains("status codes: 0 2xx, 0 3xx, 200 4xx, 0 5xx"), "{text}");
    }
    let log = std::fs::read_to_string(log).unwrap();
    let connections: std::collections::BTreeSet<&str> =
        log.lines().filter(|l| l.ends_with(" /open")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(log.lines().filter(|l| l.ends_with(" /open")).count(), 400, "{log}");
    let workers = std::thread::available_parallelism().unwrap().get();
    assert!(
        connections.len() <= workers,
        "{} upstream connections for {workers} workers: {connections:?}",
        connections.len()
    );
}

#[test]
fn requests_go_to_an_h2c_upstream_as_streams_of_one_connection() {
    let dir = TempDir::new("h2c-upstream");
    let nginx = Nginx::start(&dir, &certificate(dir.dir(), "upstream"));
    let gw = gateway(&dir, &format!("http://127.0.0.1:{}", nginx.h2c), "");
    proxied_in_http2(&gw, "h2c", &dir.path("access.log"));
}

#[test]
fn requests_go_to_an_https_upstream_in_http2_by_alpn() {
    let dir = TempDir::new("h2-upstream");
    let ca = authority(dir.dir(), "upstream-ca");
    let nginx = Nginx::start(&dir, &server_certificate(dir.dir(), &ca, "localhost", "DNS:localhost", 2));
    let gw = gateway(&dir, &format!("https://localhost:{}", nginx.tls), &format!("ca = \"{}\"", ca.0));
    proxied_in_http2(&gw, "h2", &dir.path("access.log"));
}

#[test]
fn an_h2c_upstream_that_speaks_only_http1_is_a_502() {
    let dir = TempDir::new("h2c-refused");
    let nginx = Nginx::start(&dir, &certificate(dir.dir(), "upstream"));
    let gw = gateway(&dir, &format!("http://127.0.0.1:{}", nginx.h1), "");
    let answer = curl(&[], &gw.url("/open"));
    assert!(answer.starts_with("HTTP/1.1 502") && answer.contains("bad_gateway"), "{answer}");
}
