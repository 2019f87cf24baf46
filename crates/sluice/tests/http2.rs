//! HTTP/2 from clients, through the binary: by ALPN on a TLS listener and with prior knowledge
//! on a plaintext one (`[server] h2c = true`), every stream a request to the limiter (curl and
//! h2load, real clients); the bounds of `[server.http2]` advertised; a host named twice
//! refused; and the attacks of 2023 and 2024 — streams reset as soon as opened (rapid reset,
//! CVE-2023-44487) and headers continued without end (CONTINUATION flood) — written frame by
//! frame: the attacking connection is sent GOAWAY or cut, and other clients go on being served.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::certs::{certificate, run};
use support::h2::{self, CONTINUATION, Conn, GOAWAY, HEADERS, RST_STREAM, block, frame, get};
use support::{Serve, TempDir};

const LIMITS: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[policy]]
name = "hundred"
algorithm = "fixed-window"
limit = 100
window = "1m"

[[route]]
path = "/api/*"
limits = [{ policy = "per-ip", key = "ip" }]

[[route]]
path = "/load/*"
limits = [{ policy = "hundred", key = "ip" }]

[[route]]
path = "/open/*"
limits = []
"#;

fn gateway(dir: &TempDir, server: &str) -> Serve {
    let config = format!("[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"ietf\"]\n{server}\n{LIMITS}");
    Serve::gateway(&dir.write("gateway.toml", &config))
}

fn addr(s: &Serve) -> SocketAddr {
    ([127, 0, 0, 1], s.port).into()
}

/// curl's `version status` line for each of `urls` (one connection, in turn), and its output.
fn curl(args: &[&str], urls: &[String]) -> Vec<String> {
    let mut all = vec!["-s", "-w", "%{http_version} %{http_code}\\n", "--max-time", "10"];
    all.extend_from_slice(args);
    for url in urls {
        all.extend(["-o", "/dev/null", url.as_str()]);
    }
    let out = run("curl", &all);
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn tls_clients_get_http2_by_alpn_and_every_stream_is_limited() {
    let dir = TempDir::new("h2-tls");
    let (cert, key) = certificate(dir.dir(), "server");
    let gw = gateway(&dir, &format!("[server.tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n"));
    let url = format!("https://127.0.0.1:{}/api/x", gw.port);
    let urls = [url.clone(), url.clone(), url.clone()];
    assert_eq!(curl(&["--cacert", &cert, "--http2"], &urls), ["2 200", "2 200", "2 429"]);
    // The denial over HTTP/2 carries the contract's headers.
    let out = run("curl", &["-s", "-D", "-", "-o", "/dev/null", "--cacert", &cert, "--http2", &url]);
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 429"), "{head}");
    for field in ["retry-after: ", "ratelimit: \"per-ip\";r=0", "cache-control: no-store"] {
        assert!(head.contains(field), "no {field} in {head}");
    }
    // The same port still speaks HTTP/1.1 to a client that asks for it, under the same limit.
    assert_eq!(curl(&["--cacert", &cert, "--http1.1"], &[url]), ["1.1 429"]);
}

#[test]
fn h2c_with_prior_knowledge_is_an_option_of_the_plaintext_listener() {
    let dir = TempDir::new("h2c");
    let gw = gateway(&dir, "h2c = true");
    let url = gw.url("/api/x");
    assert_eq!(curl(&["--http2-prior-knowledge"], std::slice::from_ref(&url)), ["2 200"]);
    assert_eq!(curl(&["--http1.1"], std::slice::from_ref(&url)), ["1.1 200"]);
    assert_eq!(curl(&["--http2-prior-knowledge"], &[url]), ["2 429"]);

    // Off by default: the preface is not an HTTP/1.1 request, and curl gets no HTTP/2.
    let dir = TempDir::new("h2c-off");
    let gw = gateway(&dir, "");
    let answered = curl(&["--http2-prior-knowledge"], &[gw.url("/api/x")]);
    assert!(!answered.iter().any(|l| l.starts_with("2 ")), "HTTP/2 without h2c: {answered:?}");
    assert_eq!(curl(&[], &[gw.url("/api/x")]), ["1.1 200"]);
}

/// h2load's counts of responses by class: `[2xx, 3xx, 4xx, 5xx]`.
fn status_classes(h2load: &str) -> [u64; 4] {
    let line = h2load.lines().find(|l| l.starts_with("status codes:")).unwrap_or_else(|| panic!("{h2load}"));
    let numbers: Vec<u64> = line.split([':', ',']).filter_map(|p| p.split_whitespace().next()?.parse().ok()).collect();
    numbers.try_into().unwrap_or_else(|_| panic!("{line}"))
}

#[test]
fn h2load_streams_are_each_one_request_to_the_limiter() {
    let dir = TempDir::new("h2load");
    let gw = gateway(&dir, "h2c = true");
    // 300 requests on 3 connections, 10 streams at once on each: exactly the limit admitted.
    let out = run("h2load", &["-n", "300", "-c", "3", "-m", "10", &gw.url("/load/x")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("300 done"), "{text}");
    assert_eq!(status_classes(&text), [100, 0, 200, 0], "{text}");
}

#[test]
fn the_connection_bounds_are_advertised_as_configured() {
    let dir = TempDir::new("h2-settings");
    let gw = gateway(
        &dir,
        "h2c = true\n[server.http2]\nmax_concurrent_streams = 7\nmax_header_list_size = 4096\nmax_frame_size = 32768",
    );
    let settings = h2::server_settings(addr(&gw));
    // SETTINGS_MAX_CONCURRENT_STREAMS (3), SETTINGS_MAX_FRAME_SIZE (5), SETTINGS_MAX_HEADER_LIST_SIZE (6).
    for want in [(3, 7), (5, 32768), (6, 4096)] {
        assert!(settings.contains(&want), "{want:?} not in {settings:?}");
    }
    let defaults = h2::server_settings(addr(&gateway(&TempDir::new("h2-defaults"), "h2c = true")));
    for want in [(3, 100), (6, 16384)] {
        assert!(defaults.contains(&want), "{want:?} not in {defaults:?}");
    }
}

#[test]
fn a_host_named_twice_is_refused_on_either_version() {
    let dir = TempDir::new("h2-host");
    let gw = gateway(&dir, "h2c = true");
    let mut c = Conn::open(addr(&gw));
    let mut twice = get("a.example", "/open/x");
    twice.push(("host", "b.example"));
    c.request(1, &twice).unwrap();
    assert_eq!(c.status(1), Some(400), ":authority a.example, host b.example");
    let mut same = get("a.example", "/open/x");
    same.push(("host", "A.example"));
    c.request(3, &same).unwrap();
    assert_eq!(c.status(3), Some(200), "the same host, in another case");
    c.request(5, &get("a.example", "/open/x")).unwrap();
    assert_eq!(c.status(5), Some(200), ":authority alone");
    c.request(7, &get("user@a.example", "/open/x")).unwrap();
    assert_eq!(c.status(7), Some(400), "user info in :authority");

    // HTTP/1.1: a target in absolute form names its host as :authority does.
    let absolute = b"GET http://a.example/open/x HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n";
    assert_eq!(support::raw::send(addr(&gw), absolute).status, 400);
    let agreeing = b"GET http://a.example/open/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n";
    assert_eq!(support::raw::send(addr(&gw), agreeing).status, 200);
}

#[test]
fn the_hardening_suites_spellings_and_repeated_headers_hold_over_http2() {
    let dir = TempDir::new("h2-hardening");
    let config = r#"[server]
listen = "127.0.0.1:0"
h2c = true

[[policy]]
name = "once"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api/password-reset"
limits = [{ policy = "once", key = "ip" }]

[[route]]
path = "/keyed/*"
limits = [{ policy = "once", key = "header:x-api-key" }]
"#;
    let gw = Serve::gateway(&dir.write("gateway.toml", config));
    let h2 = |extra: &[&str], path: &str| {
        let mut args = vec!["--http2-prior-knowledge", "--path-as-is"];
        args.extend_from_slice(extra);
        curl(&args, &[gw.url(path)]).join(" ")
    };
    assert_eq!(h2(&[], "/api/password-reset"), "2 200");
    for (path, want) in [
        ("/api/password-reset;jsessionid=x", "2 429"),
        ("/api/password-reset%3bjsessionid=x", "2 429"),
        ("/api/password-reset/", "2 429"),
        ("/api/x/..;/password-reset", "2 429"),
        ("/api/%2e/password-reset", "2 429"),
        ("/API/Password-Reset", "2 429"),
        ("/api%2Fpassword-reset", "2 400"),
        ("/api%5Cpassword-reset", "2 400"),
        ("/api/password-reset%00", "2 400"),
        ("/api%252Fpassword-reset", "2 400"),
        ("/api/p%25%36%31ssword-reset", "2 400"),
        ("//api/password-reset", "2 400"),
    ] {
        assert_eq!(h2(&[], path), want, "{path}");
    }
    // A key header sent twice (HTTP/2 keeps each field), or also spelled with `_`.
    assert_eq!(h2(&["-H", "x-api-key: victim"], "/keyed/a"), "2 200");
    assert_eq!(h2(&["-H", "x-api-key: victim", "-H", "x-api-key: other"], "/keyed/a"), "2 400");
    assert_eq!(h2(&["-H", "x-api-key: other", "-H", "x_api_key: victim"], "/keyed/a"), "2 400");
    assert_eq!(h2(&["-H", "x-api-key: victim"], "/keyed/a"), "2 429");
}

/// While `attack` runs on its own threads, honest HTTP/2 requests on new connections are
/// answered, each within two seconds; returns what each attack returned.
fn others_are_served<T: Send + 'static>(
    gw: &Serve,
    attacks: usize,
    attack: impl Fn(SocketAddr) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let attack = std::sync::Arc::new(attack);
    let target = addr(gw);
    let threads: Vec<_> = (0..attacks)
        .map(|_| {
            let attack = attack.clone();
            std::thread::spawn(move || attack(target))
        })
        .collect();
    let url = gw.url("/open/honest");
    let mut served = 0;
    while threads.iter().any(|t| !t.is_finished()) || served < 5 {
        let started = Instant::now();
        assert_eq!(curl(&["--http2-prior-knowledge"], std::slice::from_ref(&url)), ["2 200"], "an honest request");
        assert!(started.elapsed() < Duration::from_secs(2), "an honest request took {:?}", started.elapsed());
        served += 1;
    }
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_rapid_reset_flood_gets_goaway_and_other_clients_are_served() {
    let dir = TempDir::new("h2-rapid-reset");
    let gw = gateway(&dir, "h2c = true");
    // Each attacker opens streams and cancels each at once, 20,000 of them, as fast as it can.
    let outcomes = others_are_served(&gw, 3, |target| {
        let mut c = Conn::open(target);
        let fields = get("localhost", "/open/flood");
        let mut sent = 0u32;
        'flood: for batch in 0..100u32 {
            let mut bytes = Vec::new();
            for i in 0..200u32 {
                let stream = 2 * (batch * 200 + i) + 1;
                bytes.extend(frame(HEADERS, h2::END_HEADERS | h2::END_STREAM, stream, &block(&fields)));
                bytes.extend(frame(RST_STREAM, 0, stream, &8u32.to_be_bytes())); // CANCEL
            }
            if c.send(&bytes).is_err() {
                break 'flood;
            }
            sent += 200;
        }
        (sent, c.until(GOAWAY, 0).is_some())
    });
    eprintln!("rapid reset: (streams sent, GOAWAY) per attacker: {outcomes:?}");
    // Resets of streams the gateway has not yet taken are bounded (GOAWAY past 20); a gateway
    // that takes them as fast as they come serves the flood as load, each stream a request to
    // the limiter. Either way the attacker is sent GOAWAY, and the others were served above.
    for (sent, goaway) in outcomes {
        assert!(goaway, "no GOAWAY after {sent} streams opened and reset");
    }
}

#[test]
fn a_continuation_flood_is_cut_at_the_header_list_bound() {
    let dir = TempDir::new("h2-continuation");
    let gw = gateway(&dir, "h2c = true");
    // One request's headers, never ended: CONTINUATION frames of 16 KB of fields, up to 64 MB.
    let outcomes = others_are_served(&gw, 2, |target| {
        let mut c = Conn::open(target);
        let mut sent = 0usize;
        if c.send(&frame(HEADERS, 0, 1, &block(&get("localhost", "/open/x")))).is_ok() {
            let pad = "a".repeat(16_000);
            let fragment = frame(CONTINUATION, 0, 1, &block(&[("x-pad", &pad)]));
            while sent < 64 << 20 && c.send(&fragment).is_ok() {
                sent += fragment.len();
            }
        }
        let mut answered = false;
        while let Some(f) = c.next() {
            if f.kind == GOAWAY || (f.kind == RST_STREAM && f.stream == 1) || (f.kind == HEADERS && f.stream == 1) {
                answered = true;
                break;
            }
        }
        (sent, answered)
    });
    eprintln!("CONTINUATION flood: (bytes sent, answered) per attacker: {outcomes:?}");
    for (sent, _) in outcomes {
        // What the sockets' buffers hold aside, the server stopped reading long before.
        assert!(sent < 16 << 20, "the server read {sent} bytes of one request's headers");
    }
}
