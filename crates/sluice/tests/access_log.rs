//! `sluice simulate --config FILE --access-log LOG` as a user runs it: real log lines through a
//! gateway configuration, with counts worked out by hand.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_config::{KeySource, KeySpec};
use sluice_http::identity::Client;
use sluice_http::keys::{KeyBuilder, RequestFacts};
use sluice_store::KeyHasher;

mod support;

use support::{SLUICE, TempDir};

fn simulate(args: &[&str]) -> Output {
    Command::new(SLUICE).arg("simulate").args(args).output().expect("run the sluice binary")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = simulate(args);
    assert!(out.status.success(), "sluice simulate {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json_ok(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    serde_json::from_str(&stdout_ok(&all)).expect("JSON on stdout")
}

fn stderr_failing(args: &[&str]) -> String {
    let out = simulate(args);
    assert!(!out.status.success(), "sluice simulate {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The hash the gateway gives the key `ip` of `policy` for a client at `ip`, under `secret`.
fn ip_key(secret: &str, policy: &str, ip: &str) -> String {
    let ip: IpAddr = ip.parse().unwrap();
    let client = Client { ip, grouped: ip, peer_trusted: false };
    let headers = http::HeaderMap::new();
    let facts = RequestFacts {
        method: "GET",
        path: "/",
        route: "r",
        client: &client,
        headers: &headers,
        tls: None,
        body: None,
    };
    let spec = KeySpec { parts: vec![vec![KeySource::Ip]] };
    KeyBuilder::new(KeyHasher::from_secret(secret.as_bytes()), None).key(policy, &spec, &facts).unwrap().0.to_hex()
}

/// The secret of the simulation when the configuration sets none.
const SIMULATION: &str = "sluice simulate";

const HAND_CONFIG: &str = r#"
[[policy]]
name = "login-window"
algorithm = "fixed-window"
limit = 2
window = "10s"

[[policy]]
name = "api-log"
algorithm = "sliding-log"
limit = 2
window = "10s"

[[route]]
path = "/login"
methods = ["POST"]
limits = [{ policy = "login-window", key = "ip" }]

[[route]]
path = "/api/*"
limits = [{ policy = "api-log", key = "ip" }]
"#;

/// 13:55:36 -0700 is 20:55:36Z, Unix 971211336: the fixed windows of 10 s are 20:55:30-40 and
/// 20:55:40-50.
const HAND_LOG: &str = r#"203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] "GET /api/items HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:37 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:37 -0700] "GET /api/items?page=2 HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:38 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:38 -0700] "GET /api/items HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:39 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.20 - - [10/Oct/2000:13:55:39 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.20 - - [10/Oct/2000:13:55:40 -0700] "GET /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:41 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:45 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:46 -0700] "GET /api/items HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:47 -0700] "POST /login HTTP/1.1" 200 12 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:47 -0700] "GET /API//items/?x=1 HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.10 - - [10/Oct/2000:13:55:48 -0700] "GET /api/items HTTP/1.1" 200 512 "-" "curl/8.5"
203.0.113.20 - - [10/Oct/2000:13:55:48 -0700] "GET /health HTTP/1.1" 200 2
203.0.113.10 - - [10/Oct/2000:13:55:49 -0700] "GET /api/items HTTP/1.1
"#;

fn hand_files(dir: &TempDir) -> (String, String) {
    (dir.write("gateway.toml", HAND_CONFIG), dir.write("access.log", HAND_LOG))
}

#[test]
fn a_hand_counted_log_gives_the_exact_table_and_json() {
    let dir = TempDir::new("hand");
    let (config, log) = hand_files(&dir);
    // By hand. POST /login, fixed window of 2 per 10 s per IP: .10 at :36 :37 admitted, :38 :39
    // denied (window :30-:40); :41 :45 admitted, :47 denied (window :40-:50); .20 at :39
    // admitted. 8 requests, 5 admitted, 3 denied, denials from :38 to :47.
    // /api/*, sliding log of 2 per 10 s: :36 :37 admitted, :38 denied; :46 admitted (only :37 in
    // (:36, :46]); :47 admitted (`/API//items/` is `/api/items`; only :46 in (:37, :47]); :48
    // denied. 6 requests, 4 admitted, 2 denied, denials :38 and :48.
    // GET /login (method) and /health match no route; line 17 has no closing quote.
    let a_login = ip_key(SIMULATION, "login-window", "203.0.113.10");
    let b_login = ip_key(SIMULATION, "login-window", "203.0.113.20");
    let a_api = ip_key(SIMULATION, "api-log", "203.0.113.10");
    let table = stdout_ok(&["--config", &config, "--access-log", &log]);
    let expected = format!(
        "{log} (combined): 17 lines, 16 requests from 2000-10-10T20:55:36Z to 2000-10-10T20:55:48Z
malformed lines: 1
  line 17: no quoted request
late lines: 0 (reorder window 2s)
unmatched requests: 2 (no route: not limited)
route   policy        algorithm     requests  admitted  denied  denied %  first denial          last denial
/login  login-window  fixed-window         8         5       3    37.50%  2000-10-10T20:55:38Z  2000-10-10T20:55:47Z
/api/*  api-log       sliding-log          6         4       2    33.33%  2000-10-10T20:55:38Z  2000-10-10T20:55:48Z
busiest keys (keyed hashes: the simulation's fixed secret; set server.key_secret to match a gateway's decision logs):
  /login login-window:
    key hash                          requests  denied
    {a_login}         7       3
    {b_login}         1       0
  /api/* api-log:
    key hash                          requests  denied
    {a_api}         6       2
"
    );
    assert_eq!(table, expected);

    let v = json_ok(&["--config", &config, "--access-log", &log]);
    let keys = |rows: &[(&str, u64, u64)]| -> Value {
        rows.iter().map(|(k, r, d)| json!({"key_hash": k, "requests": r, "denied": d, "overcount": 0})).collect()
    };
    let limit = |policy: &str, algorithm: &str, n: u64, admitted: u64, first: &str, last: &str, busiest: Value| {
        json!({
            "policy": policy, "algorithm": algorithm, "key": "ip", "shadow": false,
            "requests": n, "admitted": admitted, "denied": n - admitted,
            "denied_share": (n - admitted) as f64 / n as f64,
            "first_denial": first, "last_denial": last,
            "busiest_keys": busiest, "busiest_keys_exact": true,
        })
    };
    let route = |name: &str, n: u64, admitted: u64, first: &str, last: &str, limit: Value| {
        json!({
            "route": name, "path": name, "simulable": true, "requests": n, "admitted": admitted,
            "denied": n - admitted, "unavailable": 0, "denied_share": (n - admitted) as f64 / n as f64,
            "first_denial": first, "last_denial": last, "limits": [limit],
        })
    };
    let want = json!({
        "access_log": log,
        "log_format": "combined",
        "gzip": false,
        "lines": 17,
        "requests": 16,
        "first_request": "2000-10-10T20:55:36Z",
        "last_request": "2000-10-10T20:55:48Z",
        "malformed": {"lines": 1, "first": [{"line": 17, "reason": "no quoted request"}]},
        "late": 0,
        "reorder_window": "2s",
        "unmatched": 2,
        "not_simulated": 0,
        "refused": 0,
        "key_secret": "simulation",
        "routes": [
            route("/login", 8, 5, "2000-10-10T20:55:38Z", "2000-10-10T20:55:47Z",
                limit("login-window", "fixed-window", 8, 5, "2000-10-10T20:55:38Z", "2000-10-10T20:55:47Z",
                    keys(&[(&a_login, 7, 3), (&b_login, 1, 0)]))),
            route("/api/*", 6, 4, "2000-10-10T20:55:38Z", "2000-10-10T20:55:48Z",
                limit("api-log", "sliding-log", 6, 4, "2000-10-10T20:55:38Z", "2000-10-10T20:55:48Z",
                    keys(&[(&a_api, 6, 2)]))),
        ],
        "warnings": [],
    });
    assert_eq!(v, want);

    let csv = stdout_ok(&["--config", &config, "--access-log", &log, "--format", "csv"]);
    assert_eq!(
        csv,
        "route,policy,algorithm,key,shadow,simulated,requests,admitted,denied,denied_share,first_denial,last_denial\n\
         /login,login-window,fixed-window,ip,false,true,8,5,3,0.375000,2000-10-10T20:55:38Z,2000-10-10T20:55:47Z\n\
         /api/*,api-log,sliding-log,ip,false,true,6,4,2,0.333333,2000-10-10T20:55:38Z,2000-10-10T20:55:48Z\n"
    );
}

#[test]
fn gzip_logs_are_told_by_their_bytes_and_read_alike() {
    let dir = TempDir::new("gzip");
    let (config, log) = hand_files(&dir);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(HAND_LOG.as_bytes()).unwrap();
    // No .gz in the name: the magic bytes tell.
    let packed = dir.path("rotated.log.1");
    std::fs::write(&packed, gz.finish().unwrap()).unwrap();
    let mut plain = json_ok(&["--config", &config, "--access-log", &log]);
    let mut zipped = json_ok(&["--config", &config, "--access-log", &packed]);
    assert_eq!(zipped["gzip"], true);
    for v in [&mut plain, &mut zipped] {
        v.as_object_mut().unwrap().remove("gzip");
        v.as_object_mut().unwrap().remove("access_log");
    }
    assert_eq!(plain, zipped);
    let table = stdout_ok(&["--config", &config, "--access-log", &packed]);
    assert!(table.starts_with(&format!("{packed} (combined, gzip): 17 lines, 16 requests")), "{table}");
}

#[test]
fn paths_the_gateway_refuses_are_counted_as_refused_not_limited() {
    let dir = TempDir::new("refused");
    let config = dir.write("gateway.toml", HAND_CONFIG);
    let line = |path: &str| format!("203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"POST {path} HTTP/1.1\" 200 1\n");
    let text = [line("/login"), line("/login%2F..%2Fx"), line("/log%252Fin"), line("/LOGIN;jsessionid=1")].concat();
    let log = dir.write("access.log", &text);
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    assert_eq!(v["refused"], 2, "{v}");
    // The path parameter and the case are the gateway's /login too: the route's limit saw both.
    assert_eq!(v["routes"][0]["requests"], 2, "{v}");
}

#[test]
fn malformed_lines_are_counted_and_the_first_ten_named() {
    let dir = TempDir::new("malformed");
    let config = dir.write("gateway.toml", HAND_CONFIG);
    let good = "203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"POST /login HTTP/1.1\" 200 1\n";
    let mut text = good.to_string();
    let bad = [
        "",
        "garbage",
        "203.0.113.10 - - [10/Oct/2000:13:55:36] \"GET / HTTP/1.1\" 200 1",
        "203.0.113.10 - - [10/Foo/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
        "203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"\\x16\\x03\\x01\" 400 0",
        "203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" ok 1",
        "unix: - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
        "203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\"",
        "203.0.113.10 - - [31/Apr/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
        "{\"time\": 1}",
        "203.0.113.10 - - [10/Oct/1969:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
        "203.0.113.10",
    ];
    for b in bad {
        text.push_str(b);
        text.push('\n');
    }
    text.push_str(good);
    let log = dir.write("access.log", &text);
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    assert_eq!((v["lines"].as_u64(), v["requests"].as_u64()), (Some(14), Some(2)));
    assert_eq!(v["malformed"]["lines"], 12);
    let first = v["malformed"]["first"].as_array().unwrap();
    let numbers: Vec<u64> = first.iter().map(|m| m["line"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (2..12).collect::<Vec<u64>>());
    let reasons: Vec<&str> = first.iter().map(|m| m["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons[0], "empty line");
    assert_eq!(reasons[1], "address `garbage` is not an IP address");
    assert!(reasons[2].starts_with("no [time]"), "{}", reasons[2]);
    assert!(reasons[3].contains("not a time like 10/Oct/2000:13:55:36 -0700"), "{}", reasons[3]);
    assert!(reasons[4].contains("is not an HTTP request line"), "{}", reasons[4]);
    assert_eq!(reasons[5], "status `ok` is not a number");
    assert_eq!(reasons[6], "address `unix:` is not an IP address");
    assert_eq!(reasons[7], "no quoted referer and user agent after the size");
    assert_eq!(reasons[8], "time: `31/Apr/2000:13:55:36 -0700`: day out of range");
    let table = stdout_ok(&["--config", &config, "--access-log", &log]);
    assert!(table.contains("malformed lines: 12\n  line 2: empty line\n  line 3: address"), "{table}");
    assert!(table.contains("  line 11: address `{\"time\":` is not an IP address\n  ... and 2 more\n"), "{table}");
}

#[test]
fn json_lines_with_custom_field_names_and_header_keys() {
    let dir = TempDir::new("json");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "per-key"
algorithm = "fixed-window"
limit = 1
window = "1m"

[[route]]
path = "/v1/*"
limits = [{ policy = "per-key", key = "header:x-api-key|ip" }]
"#,
    );
    // Two API keys from one address, and one request with no key (keyed by its address).
    let log = dir.write(
        "access.jsonl",
        r#"{"ts": 971211336.25, "client": "203.0.113.7", "verb": "GET", "uri": "/v1/a?x=1", "key": "k-1", "ua": "x"}
{"ts": "2000-10-10T20:55:37Z", "client": "203.0.113.7", "verb": "GET", "uri": "/v1/b", "key": "k-2"}
{"ts": "971211338", "client": "203.0.113.7", "verb": "GET", "uri": "/v1/c", "key": "k-1"}
{"ts": 971211339, "client": "203.0.113.7", "verb": "GET", "uri": "/v1/d"}
{"ts": 971211340, "client": "203.0.113.7", "verb": "GET", "uri": "/v1/e", "key": null}
{"ts": 971211341, "verb": "GET", "uri": "/v1/f"}
"#,
    );
    let fields = "time=ts,ip=client,method=verb,path=uri,header:x-api-key=key";
    let args = ["--config", &config, "--access-log", &log, "--log-format", "json", "--json-fields", fields];
    let v = json_ok(&args);
    assert_eq!((v["lines"].as_u64(), v["requests"].as_u64()), (Some(6), Some(5)));
    assert_eq!(v["malformed"]["first"][0], json!({"line": 6, "reason": "no `client` field (client address)"}));
    assert_eq!(v["first_request"], "2000-10-10T20:55:36.25Z");
    let limit = &v["routes"][0]["limits"][0];
    // k-1 twice (second denied), k-2 once, no key twice as the address (second denied).
    assert_eq!((limit["admitted"].as_u64(), limit["denied"].as_u64()), (Some(3), Some(2)));
    let counts: Vec<(u64, u64)> = limit["busiest_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["requests"].as_u64().unwrap(), k["denied"].as_u64().unwrap()))
        .collect();
    assert_eq!(counts, [(2, 1), (2, 1), (1, 0)]);
    assert!(v["warnings"].as_array().unwrap().is_empty(), "{}", v["warnings"]);
    // The default field names do not fit this log: nothing is read, and each line says why.
    let v = json_ok(&["--config", &config, "--access-log", &log, "--log-format", "json"]);
    assert_eq!(v["malformed"]["lines"], 6);
    assert_eq!(v["malformed"]["first"][0]["reason"], "no `time` field (time)");
}

#[test]
fn forwarded_fields_count_only_from_trusted_proxies() {
    let dir = TempDir::new("xff");
    let config = dir.write(
        "gateway.toml",
        r#"
[server]
trusted_proxies = ["10.0.0.0/8"]

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 1
window = "1m"

[[route]]
path = "/*"
limits = [{ policy = "per-ip", key = "ip" }]
"#,
    );
    let line = |peer: &str, second: u32, xff: &str| {
        format!("{peer} - - [10/Oct/2000:20:55:{second:02} +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"ua\" \"{xff}\"\n")
    };
    let log = dir.write(
        "access.log",
        &[
            // An untrusted client naming others: keyed by its own address, so its second request
            // is denied whatever it claims.
            line("203.0.113.5", 1, "198.51.100.1"),
            line("203.0.113.5", 2, "198.51.100.2"),
            // Behind the trusted proxies: the address they forwarded.
            line("10.0.0.1", 3, "198.51.100.7"),
            line("10.0.0.1", 4, "198.51.100.8"),
            // Walked from the right: 198.51.100.7 again; what it wrote on the left is not read.
            line("10.0.0.2", 5, "6.6.6.6, 198.51.100.7, 10.9.9.9"),
            // No forwarded field: the proxy itself.
            line("10.0.0.2", 6, "-"),
        ]
        .concat(),
    );
    let decisions = dir.path("decisions.csv");
    let v = json_ok(&["--config", &config, "--access-log", &log, "--xff-last-field", "--decisions", &decisions]);
    let limit = &v["routes"][0]["limits"][0];
    assert_eq!((limit["admitted"].as_u64(), limit["denied"].as_u64()), (Some(4), Some(2)));
    let csv = std::fs::read_to_string(&decisions).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let key_of = |line: &str| rows.iter().find(|r| r[1] == line).map(|r| (r[5], r[7])).unwrap();
    let spoofer = ip_key(SIMULATION, "per-ip", "203.0.113.5");
    assert_eq!(key_of("1"), (spoofer.as_str(), "allowed"));
    assert_eq!(key_of("2"), (spoofer.as_str(), "denied"));
    let client = ip_key(SIMULATION, "per-ip", "198.51.100.7");
    assert_eq!(key_of("3"), (client.as_str(), "allowed"));
    assert_eq!(key_of("4").1, "allowed");
    assert_eq!(key_of("5"), (client.as_str(), "denied"));
    assert_eq!(key_of("6"), (ip_key(SIMULATION, "per-ip", "10.0.0.2").as_str(), "allowed"));
    assert!(v["warnings"].as_array().unwrap().is_empty(), "{}", v["warnings"]);

    // Without the option the forwarded field is not read, and the report says what that means.
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].as_str().unwrap().contains("the log carries no `x-forwarded-for`"), "{warnings:?}");
    // 203.0.113.5 twice, 10.0.0.1 twice, 10.0.0.2 twice: one denial each.
    assert_eq!(v["routes"][0]["limits"][0]["denied"], 3);
}

#[test]
fn body_keyed_routes_are_not_simulable_and_absent_headers_are_warned() {
    let dir = TempDir::new("unsimulable");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 1
window = "15m"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 1
refill_per_second = 0.001

[[route]]
path = "/api/password-reset"
methods = ["POST"]
limits = [{ policy = "per-account", key = "json:/email" }, { policy = "per-ip", key = "ip" }]

[[route]]
path = "/api/*"
limits = [{ policy = "per-ip", key = ["header:x-api-key", "route"] }]
"#,
    );
    let line = |path: &str, second: u32| {
        format!("203.0.113.9 - - [10/Oct/2000:20:55:{second:02} +0000] \"POST {path} HTTP/1.1\" 200 1 \"-\" \"ua\"\n")
    };
    let log = dir.write(
        "access.log",
        &[line("/api/password-reset", 1), line("/api/password-reset", 2), line("/api/x", 3), line("/api/y", 4)]
            .concat(),
    );
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    assert_eq!(v["not_simulated"], 2);
    let reset = &v["routes"][0];
    assert_eq!(reset["simulable"], false);
    assert_eq!(
        reset["not_simulable_because"],
        "key part json:/email reads the request body, which an access log does not record"
    );
    assert_eq!(reset["requests"], 2);
    assert!(reset.get("admitted").is_none() && reset.get("denied").is_none(), "{reset}");
    assert_eq!(
        reset["limits"][0],
        json!({"policy": "per-account", "algorithm": "sliding-log", "key": "json:/email", "shadow": false})
    );
    // The other route is simulated: every request lacks x-api-key, so all share the absent key
    // (as in the gateway) and the bucket of 1 admits the first only.
    let api = &v["routes"][1]["limits"][0];
    assert_eq!((api["admitted"].as_u64(), api["denied"].as_u64()), (Some(1), Some(1)));
    assert_eq!(
        v["warnings"],
        json!([
            "route /api/*, policy per-ip: the log carries no `x-api-key` header, so `header:x-api-key` is absent for \
             every request; as in the gateway, every request without it shares one \"absent\" key"
        ])
    );
    let table = stdout_ok(&["--config", &config, "--access-log", &log]);
    assert!(
        table.contains(
            "/api/password-reset: not simulable (key part json:/email reads the request body, which an access log \
             does not record): 2 requests not simulated\n"
        ),
        "{table}"
    );
    assert!(table.contains("\nwarning: route /api/*, policy per-ip: the log carries no `x-api-key` header"), "{table}");
}

#[test]
fn form_keyed_routes_are_not_simulable_like_json_keyed_ones() {
    let dir = TempDir::new("unsimulable-form");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "per-account"
algorithm = "fixed-window"
limit = 1
window = "1m"

[[route]]
path = "/login"
methods = ["POST"]
limits = [{ policy = "per-account", key = "form:username" }]
"#,
    );
    let line = |second: u32| {
        format!("203.0.113.9 - - [10/Oct/2000:20:55:{second:02} +0000] \"POST /login HTTP/1.1\" 200 1 \"-\" \"ua\"\n")
    };
    let log = dir.write("access.log", &[line(1), line(2)].concat());
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    // Deciding them with the field absent would put every login in one bucket: 1 admitted, 1
    // denied, a finding the gateway would never make.
    assert_eq!(v["not_simulated"], 2, "{v}");
    let login = &v["routes"][0];
    assert_eq!(login["simulable"], false);
    assert_eq!(
        login["not_simulable_because"],
        "key part form:username reads the request body, which an access log does not record"
    );
    assert!(login.get("admitted").is_none() && login.get("denied").is_none(), "{login}");
}

#[test]
fn out_of_order_lines_are_sorted_within_the_window_and_late_beyond_it() {
    let dir = TempDir::new("order");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "one-per-10s"
algorithm = "sliding-log"
limit = 1
window = "10s"

[[route]]
path = "/*"
limits = [{ policy = "one-per-10s", key = "ip" }]
"#,
    );
    let line =
        |second: u32| format!("203.0.113.1 - - [10/Oct/2000:20:55:{second:02} +0000] \"GET / HTTP/1.1\" 200 1\n");
    let decided = |log: &str, window: &str| -> (Value, Vec<(String, String, String, String)>) {
        let decisions = dir.path("d.csv");
        let v =
            json_ok(&["--config", &config, "--access-log", log, "--reorder-window", window, "--decisions", &decisions]);
        let csv = std::fs::read_to_string(&decisions).unwrap();
        let rows = csv
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[0].to_string(), f[1].to_string(), f[2].to_string(), f[7].to_string())
            })
            .collect();
        (v, rows)
    };
    let row = |t: &str, line: &str, late: &str, d: &str| {
        (format!("2000-10-10T20:55:{t}Z"), line.into(), late.into(), d.into())
    };

    // :20 then :19, one second out of order: put back in order, :19 admitted and :20 denied.
    let within = dir.write("within.log", &[line(20), line(19), line(40)].concat());
    let (v, rows) = decided(&within, "2s");
    assert_eq!(v["late"], 0);
    assert_eq!(
        rows,
        [row("19", "2", "false", "allowed"), row("20", "1", "false", "denied"), row("40", "3", "false", "allowed")]
    );

    // With no window the same line is late: decided at :20, after line 1.
    let (v, rows) = decided(&within, "0s");
    assert_eq!(v["late"], 1);
    assert_eq!(rows[..2], [row("20", "1", "false", "allowed"), row("20", "2", "true", "denied")]);

    // :15 comes after :23 was read: :20 was released (23 - 2 >= 20), so :15 is late and decided
    // at :20, the virtual clock never going back.
    let beyond = dir.write("beyond.log", &[line(20), line(23), line(15)].concat());
    let (v, rows) = decided(&beyond, "2s");
    assert_eq!(v["late"], 1);
    assert_eq!(
        rows,
        [row("20", "1", "false", "allowed"), row("20", "3", "true", "denied"), row("23", "2", "false", "denied")]
    );
    assert_eq!(
        (v["first_request"].as_str(), v["last_request"].as_str()),
        (Some("2000-10-10T20:55:15Z"), Some("2000-10-10T20:55:23Z"))
    );
    let table = stdout_ok(&["--config", &config, "--access-log", &beyond]);
    assert!(table.contains("\nlate lines: 1 (reorder window 2s)\n"), "{table}");
}

#[test]
fn decisions_and_plots_of_an_access_log() {
    let dir = TempDir::new("files");
    let (config, log) = hand_files(&dir);
    let (decisions, svg) = (dir.path("d.csv"), dir.path("p.svg"));
    stdout_ok(&["--config", &config, "--access-log", &log, "--decisions", &decisions, "--plot", &svg]);
    let csv = std::fs::read_to_string(&decisions).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "time,line,late,route,policy,key_hash,key_type,decision,remaining,retry_after");
    assert_eq!(lines.len(), 1 + 8 + 6, "one line per limit decision");
    let a = ip_key(SIMULATION, "login-window", "203.0.113.10");
    assert_eq!(lines[1], format!("2000-10-10T20:55:36Z,1,false,/login,login-window,{a},ip,allowed,1,0.000000000"));
    // :38 is denied until the window ends at :40.
    assert_eq!(lines[5], format!("2000-10-10T20:55:38Z,5,false,/login,login-window,{a},ip,denied,0,2.000000000"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    for text in [
        "login-window (fixed-window): 5 admitted, 3 denied (37.50% denied)",
        "api-log (sliding-log): 4 admitted, 2 denied (33.33% denied)",
        "time since 2000-10-10T20:55:36Z (s)",
        "denied per 1s",
        &format!("{log} (combined): 17 lines, 16 requests"),
    ] {
        assert!(svg.contains(text), "missing {text:?}");
    }
}

#[test]
fn access_log_arguments_are_checked() {
    let dir = TempDir::new("args");
    let (config, log) = hand_files(&dir);
    for (args, needle) in [
        (vec!["--access-log", log.as_str()], "--config"),
        (vec!["--config", config.as_str()], "--access-log"),
        (vec!["--config", &config, "--access-log", &log, "--scenario", "nat"], "cannot be used with"),
        (vec!["--config", &config, "--access-log", &log, "--limit", "3"], "cannot be used with"),
        (
            vec!["--config", &config, "--access-log", &log, "--json-fields", "time=t"],
            "--json-fields is for --log-format json",
        ),
        (
            vec!["--config", &config, "--access-log", &log, "--log-format", "json", "--xff-last-field"],
            "--xff-last-field is for",
        ),
        (
            vec!["--config", &config, "--access-log", &log, "--log-format", "json", "--json-fields", "colour=c"],
            "unknown role `colour`",
        ),
        (vec!["--config", &config, "--access-log", &dir.path("missing.log")], "missing.log"),
        (vec!["--config", &dir.path("missing.toml"), "--access-log", &log], "missing.toml"),
        (vec!["--config", &config, "--access-log", &log, "--reorder-window", "2"], "has no unit"),
        (vec!["--config", &config, "--access-log", &log, "--plot", "x.gif"], ".svg or .png"),
    ] {
        let err = stderr_failing(&args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A `sluice serve --config` child whose decision lines are read from its stdout.
struct Gateway {
    child: std::process::Child,
    port: u16,
    lines: mpsc::Receiver<String>,
}

impl Gateway {
    fn start(config: &str) -> Self {
        let mut child = Command::new(SLUICE)
            .args(["serve", "--config", config])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sluice serve");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(30)).expect("the gateway's first line");
        let port = first
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split([' ', '"']).next())
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        Self { child, port, lines }
    }

    fn get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    }

    /// The next decision line (a guard against a hang, not a timed assertion).
    fn decision(&self) -> Value {
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(30)).expect("a decision line");
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if v["target"] == "sluice::decision" || v.get("key_hash").is_some() {
                return v;
            }
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn key_hashes_are_those_of_the_gateways_decision_logs() {
    let dir = TempDir::new("parity");
    let config = dir.write(
        "gateway.toml",
        r#"
[server]
listen = "127.0.0.1:0"
key_secret = "the secret every instance of this test shares"

[decision_log]
sample = 1.0

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 1
window = "1h"

[[route]]
path = "/api/*"
limits = [{ policy = "per-ip", key = ["ip", "route"] }]
"#,
    );
    let gateway = Gateway::start(&config);
    assert!(gateway.get("/api/hello").starts_with("HTTP/1.1 200"));
    let admitted = gateway.decision();
    assert!(gateway.get("/api/hello").starts_with("HTTP/1.1 429"));
    let denied = gateway.decision();
    assert_eq!((admitted["decision"].as_str(), denied["decision"].as_str()), (Some("allowed"), Some("denied")));
    drop(gateway);

    // The same two requests, as nginx would have logged them.
    let line = "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /api/hello HTTP/1.1\" 200 1 \"-\" \"curl\"\n";
    let log = dir.write("access.log", &line.repeat(2));
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    assert_eq!(v["key_secret"], "configured");
    let busiest = &v["routes"][0]["limits"][0]["busiest_keys"][0];
    assert_eq!(busiest["key_hash"], admitted["key_hash"]);
    assert_eq!(busiest["key_hash"], denied["key_hash"]);
    assert_eq!((busiest["requests"].as_u64(), busiest["denied"].as_u64()), (Some(2), Some(1)));
}

#[test]
fn shadow_limits_and_shaping_are_counted_as_the_gateway_counts_them() {
    let dir = TempDir::new("shadow");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "strict"
algorithm = "fixed-window"
limit = 3
window = "1m"

[[policy]]
name = "watch"
algorithm = "sliding-log"
limit = 1
window = "1m"
shadow = true

[[policy]]
name = "paced"
algorithm = "leaky-bucket"
rate_per_second = 1
capacity = 2
mode = "shape"

[[route]]
path = "/api/*"
limits = [{ policy = "strict", key = "ip" }, { policy = "watch", key = "ip" }]

[[route]]
path = "/paced"
limits = [{ policy = "paced", key = "ip" }]
"#,
    );
    let line = |second: &str, path: &str| {
        format!("203.0.113.1 - - [10/Oct/2000:20:55:{second} +0000] \"GET {path} HTTP/1.1\" 200 1\n")
    };
    let mut log: String = ["00", "01", "02", "03"].iter().map(|s| line(s, "/api/x")).collect();
    log.push_str(&line("10", "/paced").repeat(4));
    let log = dir.write("access.log", &log);
    // strict admits :00 :01 :02 and denies :03. watch, shadow, is charged for admitted requests
    // only: it admits :00, would deny :01 and :02 (never failing them), and is not evaluated
    // for :03, which strict denied. The paced bucket of 2 admits two back to back, the second
    // held 1 s, and refuses the other two.
    let table = stdout_ok(&["--config", &config, "--access-log", &log]);
    let rows: Vec<&str> = table.lines().skip(4).take(5).collect();
    assert_eq!(
        rows,
        [
            "route   policy          algorithm     requests  admitted  denied  denied %  first denial          last denial",
            "/api/*  strict          fixed-window         4         3       1    25.00%  2000-10-10T20:55:03Z  2000-10-10T20:55:03Z",
            "/api/*  watch (shadow)  sliding-log          4         1       2    50.00%  2000-10-10T20:55:01Z  2000-10-10T20:55:02Z",
            "/api/*  (all limits)                         4         3       1    25.00%  2000-10-10T20:55:03Z  2000-10-10T20:55:03Z",
            "/paced  paced           leaky-bucket         4         2       2    50.00%  2000-10-10T20:55:10Z  2000-10-10T20:55:10Z",
        ]
    );
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    let watch = &v["routes"][0]["limits"][1];
    assert_eq!((watch["shadow"].as_bool(), watch["not_evaluated"].as_u64()), (Some(true), Some(1)));
    assert_eq!(watch["busiest_keys"][0]["requests"], 3, "keys count the requests a limit decided");
    let paced = &v["routes"][1]["limits"][0];
    assert_eq!((paced["delayed"].as_u64(), paced["max_delay_seconds"].as_f64()), (Some(1), Some(1.0)));
}

#[test]
fn a_limit_on_bytes_is_charged_the_size_each_line_logs() {
    let dir = TempDir::new("bytes");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "download"
algorithm = "token-bucket"
capacity = 1000
refill_per_second = 0.001

[[policy]]
name = "tokens"
algorithm = "token-bucket"
capacity = 1000
refill_per_second = 0.001

[[policy]]
name = "streams"
algorithm = "concurrency"
max_in_flight = 1

[[route]]
path = "/files/*"
limits = [{ policy = "download", key = "ip", cost_from = "response-bytes" }]

[[route]]
path = "/v1/*"
limits = [
  { policy = "tokens", key = "ip", cost = 300, cost_from = "response-json:/usage/total_tokens" },
  { policy = "streams", key = "ip" },
]
"#,
    );
    // By hand, 1000 bytes per IP: 600, 300, nothing (`-`, Apache's %b for no body) and 50 are
    // sent, each admitted (it reserves 1 of what is left); the fifth is admitted with 50 left and
    // sends 80 (a debt of 30); the sixth is denied. On /v1/*, no log says the tokens: each
    // request costs its reservation of 300, so the fourth is denied; the concurrency limit of 1
    // never denies (a combined line does not say how long its request took: over at once).
    let line = |path: &str, size: &str| {
        format!("203.0.113.10 - - [10/Oct/2000:13:55:36 -0700] \"GET {path} HTTP/1.1\" 200 {size} \"-\" \"curl/8.5\"\n")
    };
    let mut log = String::new();
    for (path, size) in [
        ("/files/a", "600"),
        ("/files/b", "300"),
        ("/files/c", "-"),
        ("/files/d", "50"),
        ("/files/e", "80"),
        ("/files/f", "1"),
    ] {
        log += &line(path, size);
    }
    for _ in 0..4 {
        log += &line("/v1/chat", "2000");
    }
    let log = dir.write("access.log", &log);
    let v = json_ok(&["--config", &config, "--access-log", &log]);
    let routes = v["routes"].as_array().expect("routes");
    let counts =
        |i: usize| (routes[i]["requests"].as_u64(), routes[i]["admitted"].as_u64(), routes[i]["denied"].as_u64());
    assert_eq!(counts(0), (Some(6), Some(5), Some(1)), "{}", routes[0]);
    assert_eq!(counts(1), (Some(4), Some(3), Some(1)), "{}", routes[1]);
    let warnings: Vec<&str> = v["warnings"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(warnings.iter().any(|w| w.contains("`response-json:/usage/total_tokens` is not read")), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.contains("policy streams") && w.contains("gives it back at once")),
        "{warnings:?}"
    );
    assert!(!warnings.iter().any(|w| w.contains("download")), "{warnings:?}");
}

#[test]
fn a_concurrency_slot_is_held_for_the_time_each_line_says_its_request_took() {
    let dir = TempDir::new("in-flight");
    let config = dir.write(
        "gateway.toml",
        r#"
[[policy]]
name = "streams"
algorithm = "concurrency"
max_in_flight = 1
lease = "1s"

[[route]]
path = "/v1/*"
limits = [{ policy = "streams", key = "ip" }]
"#,
    );
    // One stream per address at a time, by hand (seconds after t0, address, request_time):
    // 0 A 2.0 admitted, held to 2.0 (longer than the lease of 1 s: the gateway renews it);
    // 1 A denied; 1 B admitted; 2.5 A 0.5 admitted (the first ended at 2.0); 2.7 A denied;
    // 3.0 A (no time: over at once) admitted, as the one at 2.5 ended at 3.0; 3.0 A 1.0
    // admitted; 3.5 A denied.
    let lines = [
        (0.0, "A", Some("2.0")),
        (1.0, "A", Some("0.1")),
        (1.0, "B", Some("0.1")),
        (2.5, "A", Some("0.5")),
        (2.7, "A", Some("0.1")),
        (3.0, "A", None),
        (3.0, "A", Some("1.0")),
        (3.5, "A", Some("0.1")),
    ];
    let mut log = String::new();
    for (at, who, took) in lines {
        let ip = if who == "A" { "203.0.113.10" } else { "203.0.113.11" };
        let took = took.map(|t| format!(", \"request_time\": {t}")).unwrap_or_default();
        log += &format!(
            "{{\"time\": {}, \"remote_addr\": \"{ip}\", \"request_method\": \"GET\", \"request_uri\": \"/v1/chat\"{took}}}\n",
            1_700_000_000.0 + at
        );
    }
    let log = dir.write("access.jsonl", &log);
    let v = json_ok(&["--config", &config, "--access-log", &log, "--log-format", "json"]);
    let route = &v["routes"][0];
    let counts = (route["requests"].as_u64(), route["admitted"].as_u64(), route["denied"].as_u64());
    assert_eq!(counts, (Some(8), Some(5), Some(3)), "{route}");
}
