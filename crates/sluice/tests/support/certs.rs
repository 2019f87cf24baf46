//! Test certificates made by openssl, and the programs the TLS and HTTP/2 tests run.

use std::path::Path;
use std::process::Command;

/// Runs `program` with `args`; fails the test, saying how to install it, when it is missing.
pub fn run(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| {
        let package = match program {
            "h2load" | "nghttp" => "nghttp2-client",
            other => other,
        };
        panic!("{program} is needed by this test ({e}): apt-get install {package} (scripts/test installs it as root)")
    })
}

/// A self-signed certificate for `localhost` and 127.0.0.1 (P-256), and its key, in `dir`.
pub fn certificate(dir: &Path, name: &str) -> (String, String) {
    certificate_for(dir, name, "localhost")
}

/// A self-signed certificate for `host` (and 127.0.0.1), and its key, in `dir`.
pub fn certificate_for(dir: &Path, name: &str, host: &str) -> (String, String) {
    let names = format!("subjectAltName=DNS:{host},IP:127.0.0.1");
    self_signed(dir, name, &format!("/CN={host}"), Some(&names))
}

/// A certificate authority (self-signed, P-256) named `name`: its certificate and key.
pub fn authority(dir: &Path, name: &str) -> (String, String) {
    self_signed(dir, name, &format!("/CN={name}"), None)
}

/// A self-signed P-256 certificate of `subject` with the extension `extension`, valid two
/// days, written to `dir` as `name.crt` and `name.key`.
fn self_signed(dir: &Path, name: &str, subject: &str, extension: Option<&str>) -> (String, String) {
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    let (cert_path, key_path) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let mut args = vec!["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    args.extend(["-days", "2", "-subj", subject, "-keyout", key_path, "-out", cert_path]);
    if let Some(e) = extension {
        args.extend(["-addext", e]);
    }
    let out = run("openssl", &args);
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}

/// A client certificate for `name` signed by `ca` (certificate, key), with `san` as its
/// subjectAltName (`URI:spiffe://...,DNS:...`), valid for `days` from now (-1: expired
/// yesterday): its certificate and key.
pub fn client_certificate(dir: &Path, ca: &(String, String), name: &str, san: &str, days: i32) -> (String, String) {
    signed(dir, ca, name, san, days, "clientAuth")
}

/// A server certificate for `name` signed by `ca`, with `san` as its subjectAltName
/// (`DNS:localhost`), valid for `days` from now (-1: expired yesterday).
pub fn server_certificate(dir: &Path, ca: &(String, String), name: &str, san: &str, days: i32) -> (String, String) {
    signed(dir, ca, name, san, days, "serverAuth")
}

/// A certificate for `name` signed by `ca`, for `usage` (an extendedKeyUsage).
fn signed(dir: &Path, ca: &(String, String), name: &str, san: &str, days: i32, usage: &str) -> (String, String) {
    let (cert, key, csr, ext) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.csr")),
        dir.join(format!("{name}.ext")),
    );
    std::fs::write(&ext, format!("subjectAltName={san}\nextendedKeyUsage={usage}\n")).unwrap();
    let subject = format!("/CN={name}");
    let out = run(
        "openssl",
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &subject,
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            csr.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let days = days.to_string();
    let out = run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            csr.to_str().unwrap(),
            "-CA",
            &ca.0,
            "-CAkey",
            &ca.1,
            "-CAcreateserial",
            "-days",
            &days,
            "-extfile",
            ext.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}
