//! Client certificates (`[server.tls] client_ca`) through the binary, asked by curl: a good
//! certificate is served and keyed by its names (`tls:san`: two services, two allowances), an
//! unknown, an expired or a missing one is refused in the handshake; with `client_auth =
//! "optional"` a client without one is served and keyed by the fallback; `check-config` names a
//! `tls:` key part without `client_ca`, and `client_auth` without it.

mod support;

use support::certs::{authority, certificate, client_certificate, run};
use support::{Serve, TempDir};

fn config(cert: &str, key: &str, ca: &str, extra: &str, key_part: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"

[server.tls]
cert = "{cert}"
key = "{key}"
client_ca = "{ca}"
{extra}

[[policy]]
name = "per-service"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
path = "/api/*"
limits = [{{ policy = "per-service", key = "{key_part}" }}]
"#
    )
}

/// curl's status for one request to `port` with the client certificate `client` (if any):
/// "000" when the handshake failed.
fn status(port: u16, server_cert: &str, client: Option<&(String, String)>) -> String {
    let url = format!("https://localhost:{port}/api/x");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--resolve", &resolve];
    args.extend(["--cacert", server_cert]);
    if let Some((cert, key)) = client {
        args.extend(["--cert", cert.as_str(), "--key", key.as_str()]);
    }
    args.push(&url);
    String::from_utf8_lossy(&run("curl", &args).stdout).into_owned()
}

#[test]
fn a_verified_client_certificate_is_an_identity_and_others_are_refused() {
    let dir = TempDir::new("mtls");
    let (cert, key) = certificate(dir.dir(), "server");
    let ca = authority(dir.dir(), "services-ca");
    let svc_a = client_certificate(dir.dir(), &ca, "svc-a", "URI:spiffe://example.org/svc-a,DNS:svc-a.internal", 2);
    let svc_b = client_certificate(dir.dir(), &ca, "svc-b", "URI:spiffe://example.org/svc-b", 2);
    let other_ca = authority(dir.dir(), "other-ca");
    let stranger = client_certificate(dir.dir(), &other_ca, "stranger", "URI:spiffe://example.org/svc-a", 2);
    let expired = client_certificate(dir.dir(), &ca, "expired", "URI:spiffe://example.org/svc-c", -1);
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(&cert, &key, &ca.0, "", "tls:san")));

    let statuses: Vec<String> = (0..3).map(|_| status(gw.port, &cert, Some(&svc_a))).collect();
    assert_eq!(statuses, ["200", "200", "429"], "svc-a's allowance");
    assert_eq!(status(gw.port, &cert, Some(&svc_b)), "200", "svc-b is another key");
    // Signed by another authority (naming svc-a all the same), expired, or none: no handshake.
    assert_eq!(status(gw.port, &cert, Some(&stranger)), "000", "a certificate of an unknown authority");
    assert_eq!(status(gw.port, &cert, Some(&expired)), "000", "an expired certificate");
    assert_eq!(status(gw.port, &cert, None), "000", "no certificate, where one is required");
}

#[test]
fn optional_client_certificates_fall_back_to_the_next_key_source() {
    let dir = TempDir::new("mtls-optional");
    let (cert, key) = certificate(dir.dir(), "server");
    let ca = authority(dir.dir(), "services-ca");
    let svc_a = client_certificate(dir.dir(), &ca, "svc-a", "URI:spiffe://example.org/svc-a", 2);
    let stranger = client_certificate(dir.dir(), &authority(dir.dir(), "other-ca"), "x", "URI:spiffe://x", 2);
    let optional = config(&cert, &key, &ca.0, "client_auth = \"optional\"", "tls:san|ip");
    let gw = Serve::gateway(&dir.write("gateway.toml", &optional));
    // Without a certificate: served, keyed by the address.
    let anonymous: Vec<String> = (0..3).map(|_| status(gw.port, &cert, None)).collect();
    assert_eq!(anonymous, ["200", "200", "429"]);
    // With one: its own allowance, whatever the address's.
    assert_eq!(status(gw.port, &cert, Some(&svc_a)), "200");
    // A certificate given must still verify.
    assert_eq!(status(gw.port, &cert, Some(&stranger)), "000");
}

#[test]
fn check_config_names_what_client_certificates_need() {
    let dir = TempDir::new("mtls-config");
    let (cert, key) = certificate(dir.dir(), "server");
    let ca = authority(dir.dir(), "services-ca");
    let without_ca = config(&cert, &key, &ca.0, "", "tls:san").replace(&format!("client_ca = \"{}\"\n", ca.0), "");
    let err = support::refused_config(&dir.write("a.toml", &without_ca));
    assert!(err.contains("route[0].limits[0]") && err.contains("needs `[server.tls] client_ca`"), "{err}");
    let auth_without_ca =
        without_ca.replace("limits = [{ policy = \"per-service\", key = \"tls:san\" }]", "limits = []") + "";
    let auth_without_ca = auth_without_ca.replace("[server.tls]\n", "[server.tls]\nclient_auth = \"optional\"\n");
    let err = support::refused_config(&dir.write("b.toml", &auth_without_ca));
    assert!(err.contains("server.tls.client_auth") && err.contains("applies only with `client_ca`"), "{err}");
    let missing = config(&cert, &key, "/nonexistent/ca.pem", "", "tls:san");
    let err = support::refused_config(&dir.write("c.toml", &missing));
    assert!(err.contains("server.tls.client_ca") && err.contains("/nonexistent/ca.pem"), "{err}");
    let bad_part = config(&cert, &key, &ca.0, "", "tls:serial");
    let err = support::refused_config(&dir.write("d.toml", &bad_part));
    assert!(err.contains("`tls:san` or `tls:subject`"), "{err}");
}
