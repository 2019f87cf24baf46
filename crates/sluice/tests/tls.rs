//! `[server.tls]` through the binary: a certificate made by openssl, asked by curl over
//! HTTPS; a plaintext request to the TLS port is answered, not left hanging; the certificate
//! reloaded on SIGHUP and when its files change, a pair that does not load leaving the old one
//! serving; reloads under an h2load load (HTTP/2 and HTTP/1.1) failing no request and keeping a
//! connection opened before them; `check-config` names a key that does not go with its certificate, and a file that
//! is not there.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use support::certs::{certificate, certificate_for, run};
use support::{Serve, TempDir};

fn config(cert: &str, key: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
headers = ["ietf"]

[server.tls]
cert = "{cert}"
key = "{key}"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
path = "/api/*"
limits = [{{ policy = "per-ip", key = "ip" }}]
"#
    )
}

#[test]
fn the_gateway_speaks_https_and_limits_as_over_plaintext() {
    let dir = TempDir::new("tls");
    let (cert, key) = certificate(dir.dir(), "server");
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(&cert, &key)));
    let url = format!("https://localhost:{}/api/items", gw.port);
    let ask = || {
        let out = run(
            "curl",
            &[
                "-s",
                "-i",
                "--http1.1",
                "--cacert",
                &cert,
                "--resolve",
                &format!("localhost:{}:127.0.0.1", gw.port),
                &url,
            ],
        );
        assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for _ in 0..2 {
        let r = ask();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let denied = ask();
    assert!(denied.starts_with("HTTP/1.1 429"), "{denied}");
    assert!(denied.to_ascii_lowercase().contains("retry-after:"), "{denied}");

    // Plain HTTP to the TLS port: a 400 that says what to do, and the connection closed.
    let mut plain = TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(b"GET /api/items HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = String::new();
    plain.read_to_string(&mut answer).expect("an answer, not a hang");
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("speaks TLS"), "{answer}");
    // And the server goes on serving HTTPS.
    assert!(ask().starts_with("HTTP/1.1 429"));

    // Connections that never begin a handshake, or stop half-way through a ClientHello, hold
    // nobody else up: each waits on its own, for at most the header read timeout.
    let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(("127.0.0.1", gw.port)).unwrap()).collect();
    let mut half = TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
    assert!(ask().starts_with("HTTP/1.1 429"), "served beside idle and half-open handshakes");
    drop((idle, half));
}

/// Whether curl, trusting only `ca`, completes a request to the gateway on `port`.
fn trusted(port: u16, ca: &str) -> bool {
    let url = format!("https://localhost:{port}/api/items");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let out = run("curl", &["-s", "-o", "/dev/null", "--http1.1", "--cacert", ca, "--resolve", &resolve, &url]);
    out.status.success()
}

/// Copies the pair `from` (certificate, key) over the files `to` names.
fn put(from: &(String, String), to: &(String, String)) {
    std::fs::copy(&from.0, &to.0).unwrap();
    std::fs::copy(&from.1, &to.1).unwrap();
}

#[test]
fn the_certificate_is_reloaded_on_sighup_and_when_its_files_change() {
    let dir = TempDir::new("tls-reload");
    let served = certificate(dir.dir(), "served");
    let (second, third) = (certificate(dir.dir(), "second"), certificate(dir.dir(), "third"));
    let first = (dir.path("first.crt"), dir.path("first.key"));
    put(&served, &first);
    let gw = Serve::gateway(&dir.write("gateway.toml", &config(&served.0, &served.1)));
    assert!(trusted(gw.port, &first.0));

    // New files and SIGHUP: the new certificate serves, the old one no longer.
    put(&second, &served);
    let hup = Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    let switched = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        trusted(gw.port, &second.0)
    });
    assert!(switched, "the certificate after SIGHUP");
    assert!(!trusted(gw.port, &first.0), "the old certificate still served");

    // A certificate file that does not load (not PEM): the running one goes on serving.
    std::fs::write(&served.0, "not a certificate\n").unwrap();
    let hup = Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(trusted(gw.port, &second.0), "a bad pair replaced the running certificate");

    // Files changed on disk, no signal: picked up within the watch interval.
    put(&third, &served);
    let watched = (0..80).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        trusted(gw.port, &third.0)
    });
    assert!(watched, "the certificate changed on disk was not picked up");
}

/// h2load's request counts: `(succeeded, failed, errored)`, and its responses by class.
fn h2load_counts(out: &str) -> ((u64, u64, u64), [u64; 4]) {
    let number_before = |line: &str, word: &str| -> u64 {
        let at = line.find(word).unwrap_or_else(|| panic!("no '{word}' in {line}"));
        line[..at].trim_end().rsplit([' ', ',']).next().unwrap().parse().unwrap()
    };
    let line = |start: &str| out.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{out}"));
    let requests = line("requests:");
    let codes = line("status codes:");
    (
        (
            number_before(requests, " succeeded"),
            number_before(requests, " failed"),
            number_before(requests, " errored"),
        ),
        [" 2xx", " 3xx", " 4xx", " 5xx"].map(|c| number_before(codes, c)),
    )
}

#[test]
fn certificates_reloaded_under_load_fail_no_request_and_keep_open_connections() {
    let dir = TempDir::new("tls-reload-load");
    let served = certificate(dir.dir(), "served");
    let (first, second) = (certificate(dir.dir(), "one"), certificate(dir.dir(), "two"));
    put(&first, &served);
    let open = config(&served.0, &served.1).replace("limit = 2\n", "limit = 100000000\n");
    let gw = Serve::gateway(&dir.write("gateway.toml", &open));
    let url = format!("https://127.0.0.1:{}/api/items", gw.port);
    for (protocol, flags, curl_flag) in
        [("HTTP/2", &["-m", "4"][..], "--http2"), ("HTTP/1.1", &["--h1"][..], "--http1.1")]
    {
        // Eight h2load connections for four seconds, through which the certificate changes
        // six times (SIGHUP), the two pairs alternating.
        let mut args = vec!["-D", "4", "-c", "8", "-t", "1"];
        args.extend_from_slice(flags);
        args.push(&url);
        let load = Command::new("h2load")
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("h2load is needed by this test ({e}): apt-get install nghttp2-client"));
        // Beside the load, one curl asks twelve times, four a second, over one connection.
        let kept = Command::new("curl")
            .args(["-s", "-k", "--rate", "4/s", "-w", "%{http_code} %{num_connects}\n", curl_flag])
            .args((0..12).flat_map(|_| ["-o", "/dev/null", url.as_str()]))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        for round in 0..6 {
            std::thread::sleep(Duration::from_millis(500));
            put(if round % 2 == 0 { &second } else { &first }, &served);
            let hup = Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap();
            assert!(hup.success());
        }
        let out = load.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ((succeeded, failed, errored), classes) = h2load_counts(&text);
        assert!(succeeded > 100, "{protocol}: too few requests to say anything: {text}");
        assert_eq!((failed, errored), (0, 0), "{protocol}: requests failed while certificates were reloaded: {text}");
        assert_eq!(classes, [succeeded, 0, 0, 0], "{protocol}: {text}");
        // One connection opened before the reloads served every request after them.
        let kept = String::from_utf8_lossy(&kept.wait_with_output().unwrap().stdout).into_owned();
        let answers: Vec<&str> = kept.lines().collect();
        assert_eq!(answers.len(), 12, "{protocol}: {kept}");
        assert!(answers.iter().all(|a| a.starts_with("200 ")), "{protocol}: {kept}");
        let connects: u32 = answers.iter().map(|a| a[4..].trim().parse::<u32>().unwrap()).sum();
        assert_eq!(connects, 1, "{protocol}: the connection was not kept across reloads: {kept}");
        // And the reloads took: the last certificate put in place (the first pair) serves.
        assert!(
            (0..50).any(|_| {
                std::thread::sleep(Duration::from_millis(100));
                trusted(gw.port, &first.0)
            }),
            "{protocol}: the reloaded certificate"
        );
    }
}

/// The subject of the certificate the gateway on `port` shows a client asking for `name`
/// (none: no SNI).
fn served_subject(port: u16, name: Option<&str>) -> String {
    let connect = format!("127.0.0.1:{port}");
    let mut args = vec!["s_client", "-connect", &connect];
    match name {
        Some(n) => args.extend(["-servername", n]),
        None => args.push("-noservername"),
    }
    let out = Command::new("openssl")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("openssl is needed by this test ({e}): apt-get install openssl"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find(|l| l.starts_with("subject=")).map(str::to_string).unwrap_or_else(|| panic!("no subject: {text}"))
}

#[test]
fn each_name_gets_its_certificate_and_the_others_the_first() {
    let dir = TempDir::new("tls-sni");
    let a = certificate_for(dir.dir(), "a", "a.test");
    let b = certificate_for(dir.dir(), "b", "b.test");
    let toml = config(&a.0, &a.1).replace(
        "\n[[policy]]",
        &format!("\n[[server.tls.certificates]]\ncert = \"{}\"\nkey = \"{}\"\n\n[[policy]]", b.0, b.1),
    );
    let gw = Serve::gateway(&dir.write("gateway.toml", &toml));
    let b_subject = served_subject(gw.port, Some("b.test"));
    assert!(b_subject.contains("b.test"), "{b_subject}: {toml}");
    assert!(served_subject(gw.port, Some("a.test")).contains("a.test"));
    assert!(served_subject(gw.port, Some("other.test")).contains("a.test"), "an unknown name gets the first");
    assert!(served_subject(gw.port, None).contains("a.test"), "no name gets the first");
}

#[test]
fn check_config_names_a_key_that_does_not_go_with_its_certificate_and_a_missing_file() {
    let dir = TempDir::new("tls-bad");
    let (cert, _) = certificate(dir.dir(), "one");
    let (_, other_key) = certificate(dir.dir(), "two");
    let err = support::refused_config(&dir.write("gateway.toml", &config(&cert, &other_key)));
    assert!(err.contains("gateway.toml") && err.contains("server.tls.key"), "{err}");
    assert!(err.contains("two.key") && err.contains("one.crt"), "{err}");

    let missing = config(&dir.dir().join("nowhere.crt").display().to_string(), &other_key);
    let err = support::refused_config(&dir.write("gateway.toml", &missing));
    assert!(err.contains("gateway.toml") && err.contains("server.tls.cert") && err.contains("nowhere.crt"), "{err}");
    assert!(err.contains("gateway.toml:6: server.tls.cert"), "the line of the field: {err}");
}
