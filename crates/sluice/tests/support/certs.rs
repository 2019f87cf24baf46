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
    let (subject, names) = (format!("/CN={host}"), format!("subjectAltName=DNS:{host},IP:127.0.0.1"));
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    let out = run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            &names,
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}
