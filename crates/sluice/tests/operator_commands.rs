//! What an operator types beside `serve`: `sluice key-hash` gives the hash a decision line
//! shows for a client (the same as the running gateway's, limit by limit), and `check-config`
//! speaks the configuration's own words, never Rust's names for them.

mod support;

use std::process::Command;

use serde_json::Value;
use support::raw::{request, send};
use support::{SLUICE, Serve, TempDir};

const CONFIG: &str = r#"[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
key_secret = "an operator's long random secret, 0123456789"

[[policy]]
name = "one-per-ip"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[policy]]
name = "per-key"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/ip/*"
limits = [{ policy = "one-per-ip", key = "ip" }]

[[route]]
path = "/keyed/*"
limits = [{ policy = "per-key", key = "header:x-api-key|ip" }]
"#;

fn sluice(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(SLUICE).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The key hash of the denial the gateway logs for `path` from the client `xff` with `headers`.
fn denied_hash(gw: &Serve, path: &str, xff: &str, headers: &[(&str, &[u8])]) -> String {
    let mut all = vec![("X-Forwarded-For", xff.as_bytes())];
    all.extend_from_slice(headers);
    let addr = ([127, 0, 0, 1], gw.port).into();
    assert_eq!(send(addr, &request("GET", path, &all, b"")).status, 200);
    let denied = send(addr, &request("GET", path, &all, b""));
    assert_eq!(denied.status, 429);
    let id = denied.header("x-request-id").unwrap().to_string();
    let line = gw.stdout_line(|l| l.contains(&id));
    let line: Value = serde_json::from_str(&line).unwrap();
    line["key_hash"].as_str().unwrap().to_string()
}

#[test]
fn key_hash_gives_the_hash_the_gateway_logs() {
    let dir = TempDir::new("key-hash");
    let file = dir.write("gateway.toml", CONFIG);
    let gw = Serve::gateway(&file);
    let by_ip = denied_hash(&gw, "/ip/x", "203.0.113.7", &[]);
    let by_key = denied_hash(&gw, "/keyed/x", "203.0.113.8", &[("X-Api-Key", b"k-123")]);

    let (ok, out, err) = sluice(&["key-hash", "--config", &file, "ip:203.0.113.7"]);
    assert!(ok, "{err}");
    // Both limits: the keyed one falls back to the address when no API key is given.
    let row = out.lines().find(|l| l.starts_with("/ip/*")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.split_whitespace().eq(["/ip/*", "one-per-ip", "ip", by_ip.as_str()]), "{out}");
    assert!(out.lines().any(|l| l.starts_with("/keyed/*")), "{out}");

    let (ok, out, err) = sluice(&["key-hash", "--config", &file, "header:X-Api-Key=k-123", "ip:203.0.113.8"]);
    assert!(ok, "{err}");
    let row = out.lines().find(|l| l.starts_with("/keyed/*")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(row.split_whitespace().last(), Some(by_key.as_str()), "{out}");

    // Without a key secret there is nothing to compute: each start draws its own.
    let secretless = dir.write("secretless.toml", &CONFIG.replace("key_secret", "# key_secret"));
    let (ok, _, err) = sluice(&["key-hash", "--config", &secretless, "ip:203.0.113.7"]);
    assert!(!ok && err.contains("server.key_secret is not set"), "{err}");
    let (ok, _, err) = sluice(&["key-hash", "--config", &file, "jwt:sub=alice"]);
    assert!(!ok && err.contains("not a part this command builds"), "{err}");
}

#[test]
fn check_config_speaks_the_configuration_s_words() {
    let dir = TempDir::new("check-config-words");
    let file = dir.write(
        "gateway.toml",
        r#"[server]
forwarded_header = "forwarded"
on_deny = "drop"
key_secret = "an operator's long random secret, 0123456789"

[store]
kind = "redis"
url = "redis://127.0.0.1:6379"
on_error = "local"

[identity.jwt]
hs256_secret = "a secret of thirty-two bytes or more, 0123456789"
on_invalid_token = "fallback"

[[policy]]
name = "paced"
algorithm = "leaky-bucket"
rate_per_second = 5
capacity = 10
mode = "shape"
delay = 2

[[route]]
path = "/*"
limits = [{ policy = "paced", key = "jwt:sub|ip" }]
"#,
    );
    let (ok, out, err) = sluice(&["check-config", &file]);
    assert!(ok, "{err}");
    for words in [
        "forwarding header read: forwarded",
        "deny: status 429 (on_deny: drop)",
        "on error: local,",
        "mode=shape delay=2",
        "(HS256)",
        "on invalid token: fallback",
    ] {
        assert!(out.contains(words), "`{words}` not in:\n{out}");
    }
    for rust in ["Forwarded\n", "Drop", "Local", "Shape", "Hs256", "Fallback", "{", "}"] {
        assert!(!out.contains(rust), "`{rust}` (a Rust name) in:\n{out}");
    }
}
