//! `https://` upstreams through the binary: a Python HTTPS server (standard library) with
//! certificates made by openssl behind the gateway. Its certificate checked against `ca`:
//! requests are proxied and limited; an unknown authority, an expired certificate or another
//! name than the URL's is a 502 counted in `sluice_upstream_tls_errors_total{reason}`; an
//! upstream that asks for a client certificate gets `client_cert`; one asked for HTTP/2 that
//! does not agree to it by ALPN is a 502 counted as `no_http2`.

mod support;

use std::net::SocketAddr;

use support::certs::{authority, client_certificate, server_certificate};
use support::raw::{http, request, send};
use support::{PythonServer, Serve, TempDir};

/// The Python HTTPS upstream with the certificate `cert`, asking for a client certificate
/// signed by `client_ca` when given.
fn upstream(cert: &(String, String), client_ca: Option<&str>) -> PythonServer {
    let mut args = vec![cert.0.as_str(), cert.1.as_str()];
    args.extend(client_ca);
    PythonServer::start("https_upstream.py", &args)
}

/// A gateway proxying to `url` with `upstream` lines, limiting `/api/*` to 2 a minute, with an
/// admin listener (returned).
fn gateway(dir: &TempDir, url: &str, upstream: &str) -> (Serve, SocketAddr) {
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"

[upstream]
url = "{url}"
timeout_ms = 5000
{upstream}

[admin]
listen = "{admin}"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
path = "/api/*"
limits = [{{ policy = "per-ip", key = "ip" }}]
"#
    );
    (Serve::gateway(&dir.write("gateway.toml", &config)), admin)
}

fn addr(s: &Serve) -> SocketAddr {
    ([127, 0, 0, 1], s.port).into()
}

/// `sluice_upstream_tls_errors_total{reason="..."}` as the admin listener reports it.
fn tls_errors(admin: SocketAddr, reason: &str) -> f64 {
    let text = http(admin, "GET", "/metrics", b"").text();
    let name = format!("sluice_upstream_tls_errors_total{{reason=\"{reason}\"}}");
    text.lines().find_map(|l| l.strip_prefix(&name)).map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn an_https_upstream_is_proxied_with_its_certificate_checked() {
    let dir = TempDir::new("https-upstream");
    let ca = authority(dir.dir(), "upstream-ca");
    let cert = server_certificate(dir.dir(), &ca, "localhost", "DNS:localhost", 2);
    let up = upstream(&cert, None);
    let (gw, _) = gateway(&dir, &format!("https://localhost:{}", up.port), &format!("ca = \"{}\"", ca.0));
    let res = send(addr(&gw), &request("GET", "/api/items?x=1", &[], b""));
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["path"], "/api/items?x=1");
    assert_eq!(send(addr(&gw), &request("GET", "/api/items", &[], b"")).status, 200);
    assert_eq!(send(addr(&gw), &request("GET", "/api/items", &[], b"")).status, 429, "limited as over http://");
}

#[test]
fn certificate_errors_are_502_counted_by_reason() {
    let dir = TempDir::new("https-upstream-errors");
    let ca = authority(dir.dir(), "upstream-ca");
    let other = authority(dir.dir(), "other-ca");
    let good = server_certificate(dir.dir(), &ca, "good", "DNS:localhost", 2);
    let expired = server_certificate(dir.dir(), &ca, "expired", "DNS:localhost", -1);
    let cases = [
        (upstream(&good, None), "localhost", &other.0, "unknown_issuer"),
        (upstream(&expired, None), "localhost", &ca.0, "expired"),
        (upstream(&good, None), "127.0.0.1", &ca.0, "not_valid_for_name"),
    ];
    for (up, host, trusted, reason) in cases {
        let (gw, admin) = gateway(&dir, &format!("https://{host}:{}", up.port), &format!("ca = \"{trusted}\""));
        let res = send(addr(&gw), &request("GET", "/open", &[], b""));
        assert_eq!(res.status, 502, "{reason}: {}", res.text());
        assert_eq!(res.json()["error"], "bad_gateway");
        assert_eq!(tls_errors(admin, reason), 1.0, "{reason} counted");
    }
}

#[test]
fn an_upstream_that_asks_for_a_client_certificate_gets_it() {
    let dir = TempDir::new("https-upstream-mtls");
    let ca = authority(dir.dir(), "upstream-ca");
    let cert = server_certificate(dir.dir(), &ca, "localhost", "DNS:localhost", 2);
    let clients = authority(dir.dir(), "gateways-ca");
    let mine = client_certificate(dir.dir(), &clients, "sluice-gateway", "DNS:gateway.internal", 2);
    let up = upstream(&cert, Some(&clients.0));
    let url = format!("https://localhost:{}", up.port);
    let with = format!("ca = \"{}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"", ca.0, mine.0, mine.1);
    let (gw, _) = gateway(&dir, &url, &with);
    let res = send(addr(&gw), &request("GET", "/open", &[], b""));
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["client"], "sluice-gateway");
    // Without it, the upstream refuses the handshake: 502, counted.
    let (gw, admin) = gateway(&dir, &url, &format!("ca = \"{}\"", ca.0));
    assert_eq!(send(addr(&gw), &request("GET", "/open", &[], b"")).status, 502);
    assert_eq!(tls_errors(admin, "handshake"), 1.0);
}

#[test]
fn check_config_names_what_an_https_upstream_needs() {
    let dir = TempDir::new("https-upstream-config");
    let (cert, _) = support::certs::certificate(dir.dir(), "x");
    let base = |url: &str, extra: &str| format!("[upstream]\nurl = \"{url}\"\n{extra}\n");
    let cases = [
        (base("http://127.0.0.1:9", &format!("ca = \"{cert}\"")), "upstream.ca", "applies only to an `https://`"),
        (base("https://localhost:9", "ca = \"/nonexistent.pem\""), "upstream.ca", "/nonexistent.pem"),
        (
            base("https://localhost:9", &format!("client_cert = \"{cert}\"")),
            "upstream.client_cert",
            "needs `client_key`",
        ),
        (base("ftp://localhost:9", ""), "upstream.url", "must start with http:// or https://"),
    ];
    for (config, field, says) in cases {
        let err = support::refused_config(&dir.write("gateway.toml", &config));
        assert!(err.contains(field) && err.contains(says), "{config}: {err}");
    }
}

#[test]
fn an_upstream_asked_for_http2_that_does_not_agree_is_a_502_counted() {
    let dir = TempDir::new("https-upstream-no-h2");
    let ca = authority(dir.dir(), "upstream-ca");
    let cert = server_certificate(dir.dir(), &ca, "localhost", "DNS:localhost", 2);
    // Python's server offers no ALPN protocol: HTTP/1.1 only.
    let up = upstream(&cert, None);
    let url = format!("https://localhost:{}", up.port);
    let (gw, admin) = gateway(&dir, &url, &format!("ca = \"{}\"\nhttp2 = true", ca.0));
    assert_eq!(send(addr(&gw), &request("GET", "/api/items", &[], b"")).status, 502);
    assert_eq!(tls_errors(admin, "no_http2"), 1.0);
    // The same upstream in HTTP/1.1 is served.
    let (gw, _) = gateway(&dir, &url, &format!("ca = \"{}\"", ca.0));
    assert_eq!(send(addr(&gw), &request("GET", "/api/items", &[], b"")).status, 200);
}
