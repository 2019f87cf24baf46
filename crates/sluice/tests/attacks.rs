//! Trying to get past sluice as an attacker would, through the binary in front of a real
//! upstream that records what reaches it. Each bypass found against the gateway is sent again
//! here and must stay limited, refused, or stripped; beside each, the honest request that must
//! still pass.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use support::raw::{Recorder, Resp, WAIT, http, request, send};
use support::{SLUICE, Serve, TempDir};

/// A gateway in front of `up` with `server` lines, `policies` and `routes` (TOML).
fn gateway(dir: &TempDir, up: &Recorder, server: &str, rest: &str) -> Serve {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n\n[upstream]\nurl = \"http://{}\"\ntimeout_ms = 5000\n\n{rest}",
        up.addr
    );
    Serve::gateway(&dir.write("gateway.toml", &toml))
}

fn addr(s: &Serve) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], s.port))
}

fn statuses(s: &Serve, reqs: &[Vec<u8>]) -> Vec<u16> {
    reqs.iter().map(|r| send(addr(s), r).status).collect()
}

const ONE_PER_HOUR: &str = r#"
[[policy]]
name = "per-account"
algorithm = "fixed-window"
limit = 1
window = "1h"
"#;

#[test]
fn ambiguous_json_members_cannot_move_a_request_off_the_victims_account() {
    let (dir, up) = (TempDir::new("json"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nlimits = [{{ policy = \"per-account\", key = \"json:/email\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let post =
        |body: &str| request("POST", "/api/password-reset", &[("Content-Type", b"application/json")], body.as_bytes());
    assert_eq!(send(addr(&gw), &post(r#"{"email":"victim@example.com"}"#)).status, 200);
    assert_eq!(send(addr(&gw), &post(r#"{"email":"victim@example.com"}"#)).status, 429);
    // Before: keyed on the last duplicate (a first-wins upstream acts for the victim), or the
    // exact-case member (a case-folding upstream binds `Email`). 4 of 4 admitted. Now: 400.
    for (i, body) in [
        r#"{"email":"victim@example.com","email":"rand-1@example.com"}"#.to_string(),
        r#"{"email":"rand-2@example.com","Email":"victim@example.com"}"#.to_string(),
        r#"{"EMAIL":"victim@example.com"}"#.to_string(),
        format!(r#"{{"email":"victim@example.com","email":"rand-{}@example.com"}}"#, 3),
    ]
    .iter()
    .enumerate()
    {
        let res = send(addr(&gw), &post(body));
        assert_eq!(res.status, 400, "attempt {i}: {body}");
        assert_eq!(res.json()["error"], "bad_request");
    }
    // Still fine: extra fields, a charset, a query string — and they count (no second pass).
    let honest = request(
        "POST",
        "/api/password-reset?lang=uk",
        &[("Content-Type", b"application/json; charset=utf-8")],
        br#"{"email":"someone@example.com","captcha":"x","lang":"uk"}"#,
    );
    assert_eq!(send(addr(&gw), &honest).status, 200);
    assert_eq!(send(addr(&gw), &honest).status, 429);
    // Only the two admitted requests ever reached the upstream.
    assert_eq!(up.count(), 2);
}

#[test]
fn numbers_are_one_account_whatever_their_spelling() {
    let (dir, up) = (TempDir::new("numbers"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/transfer\"\nlimits = [{{ policy = \"per-account\", key = \"json:/account\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let post = |body: &str| request("POST", "/api/transfer", &[("Content-Type", b"application/json")], body.as_bytes());
    assert_eq!(send(addr(&gw), &post(r#"{"account":1}"#)).status, 200);
    for spelling in ["1.0", "1e0", "10e-1", "\"1\""] {
        let res = send(addr(&gw), &post(&format!(r#"{{"account":{spelling}}}"#)));
        assert_eq!(res.status, 429, "account {spelling}");
    }
    assert_eq!(send(addr(&gw), &post(r#"{"account":2}"#)).status, 200);
}

#[test]
fn the_email_key_part_folds_plus_tags_when_asked() {
    let (dir, up) = (TempDir::new("email"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nlimits = [{{ policy = \"per-account\", key = \"email(json:/email)\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let json: &[(&str, &[u8])] = &[("Content-Type", b"application/json")];
    let post =
        |email: &str| request("POST", "/api/password-reset", json, format!(r#"{{"email":"{email}"}}"#).as_bytes());
    assert_eq!(send(addr(&gw), &post("victim@example.com")).status, 200);
    for alias in ["victim+1@example.com", " Victim+reset@Example.COM", "VICTIM@example.com"] {
        assert_eq!(send(addr(&gw), &post(alias)).status, 429, "{alias}");
    }
}

#[test]
fn no_spelling_of_a_limited_path_reaches_the_upstream_unlimited() {
    let (dir, up) = (TempDir::new("paths"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nmethods = [\"GET\", \"POST\"]\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    assert_eq!(send(addr(&gw), &request("POST", "/api/password-reset", &[], b"")).status, 200);
    // Before: each of these was proxied with no limit. Now: limited (429) or refused (400).
    let spellings = [
        ("POST", "/api/password-reset;jsessionid=x", 429),
        ("POST", "/api/password-reset%3bjsessionid=x", 429),
        ("POST", "/api/password-reset/", 429),
        ("POST", "/api/x/..;/password-reset", 429),
        ("POST", "/api/password-reset/x/..", 429),
        ("POST", "/api/%2e/password-reset", 429),
        ("POST", "/API/Password-Reset", 429),
        ("post", "/api/password-reset", 429),
        ("HEAD", "/api/password-reset", 429),
        ("hEaD", "/api/password-reset", 429),
        ("POST", "/api%2Fpassword-reset", 400),
        ("POST", "/api%5Cpassword-reset", 400),
        ("POST", "/api\\password-reset", 400),
        ("POST", "/api/password-reset%00", 400),
        ("POST", "/api/password-reset%0d%0a", 400),
        ("POST", "/api%252Fpassword-reset", 400),
        ("POST", "/api/password-reset%253Bx", 400),
        ("POST", "/api%255Cpassword-reset", 400),
        ("POST", "/api/p%25%36%31ssword-reset", 400),
        ("POST", "/api/password-reset%", 400),
        // The absolute form names the same path: limited as the origin form is.
        ("POST", "http://sluice.test/api/password-reset", 429),
        ("POST", "http://sluice.test/api/password-reset;x", 429),
        // An absolute form naming another host than `Host`: two hosts in one request, which
        // applications read apart (Go's net/http the target, most frameworks `Host`).
        ("POST", "http://elsewhere.example/api/password-reset", 400),
    ];
    for (method, path, want) in spellings {
        let res = send(addr(&gw), &request(method, path, &[], b""));
        assert_eq!(res.status, want, "{method} {path}");
        if want == 400 {
            assert_eq!(res.json()["error"], "bad_request", "{method} {path}");
        }
    }
    // A refused path is refused wherever it goes: never forwarded, even with no route for it.
    assert_eq!(send(addr(&gw), &request("GET", "/other%2Fthing", &[], b"")).status, 400);
    assert_eq!(up.count(), 1, "{:?}", up.requests().iter().map(|r| r.path.clone()).collect::<Vec<_>>());
    // Honest requests elsewhere still pass, query strings included.
    assert_eq!(send(addr(&gw), &request("GET", "/other/thing?a=%2F", &[], b"")).status, 200);
    // An absolute-form target reaches the upstream in origin form: the client's scheme and
    // authority are not passed on as the target.
    assert_eq!(send(addr(&gw), &request("GET", "http://sluice.test/other/abs?q=1", &[], b"")).status, 200);
    assert_eq!(up.requests().last().map(|r| r.path.clone()).as_deref(), Some("/other/abs?q=1"));
}

/// The path an application behind sluice acts on for the request target `target`, read as
/// Node's `new URL(target, base)` (a leading `//` starts a host), Windows and Python's
/// `str.strip()` (a segment's trailing dots and whitespace dropped) and Rails' `(.:format)` or
/// Spring's suffix match (a `.ext` on the last segment dropped) read it, together.
fn application_path(target: &str) -> String {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let path = match path.strip_prefix("//") {
        Some(after) => after.find('/').map_or("/", |i| &after[i..]),
        None => path,
    };
    let mut bytes = Vec::new();
    let mut rest = path.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail.get(..2).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())) {
            (b'%', Some(v)) => {
                bytes.push(v);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(b);
                rest = tail;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&bytes).to_lowercase();
    let mut segments: Vec<&str> = Vec::new();
    for s in decoded.split('/') {
        match s.trim_end_matches(|c: char| c == '.' || c.is_whitespace()) {
            _ if s == ".." => {
                segments.pop();
            }
            "" => {}
            trimmed => segments.push(trimmed),
        }
    }
    let last = segments.pop().map(|l| l.get(1..).and_then(|t| t.find('.')).map_or(l, |dot| &l[..=dot]));
    format!("/{}", segments.into_iter().chain(last).collect::<Vec<_>>().join("/"))
}

#[test]
fn a_target_starting_with_two_slashes_is_refused_not_routed_as_another_path() {
    let (dir, up) = (TempDir::new("double-slash"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nmethods = [\"GET\"]\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    assert_eq!(send(addr(&gw), &request("GET", "/api/items", &[], b"")).status, 200);
    // Before: routed as `/127.0.0.1/api/items`, no route, proxied unlimited; Node's URL parser
    // hands the application `/api/items`. Now: 400, in every spelling that reaches a leading `//`.
    for target in [
        "//127.0.0.1/api/items",
        "//evil/api/items",
        "///api/items",
        "/..//evil/api/items",
        "/%2e%2e//evil/api/items",
        "/.//evil/api/items",
        "http://sluice.test//127.0.0.1/api/items",
    ] {
        let res = send(addr(&gw), &request("GET", target, &[], b""));
        assert_eq!(res.status, 400, "{target}: {}", res.text());
        assert_eq!(res.json()["error"], "bad_request", "{target}");
        assert!(res.json()["message"].as_str().unwrap().contains("starts with `//`"), "{target}");
    }
    // `//` further on is one `/`, as before: limited.
    assert_eq!(send(addr(&gw), &request("GET", "/api//items", &[], b"")).status, 429);
    let seen: Vec<String> = up.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(seen, ["/api/items"], "only the admitted request reached the upstream");
    let acted = seen.iter().filter(|t| application_path(t).starts_with("/api/")).count();
    assert_eq!(acted, 1, "the application acted on /api/* once, within the limit");
    // Honest targets: a `//` inside an unrouted path, and the origin form of another host.
    assert_eq!(send(addr(&gw), &request("GET", "/static//app.v2.js", &[], b"")).status, 200);
    assert_eq!(send(addr(&gw), &request("GET", "http://sluice.test/other?next=//x", &[], b"")).status, 200);
    assert_eq!(up.count(), 3);
}

#[test]
fn forward_auth_refuses_an_original_starting_with_two_slashes_in_both_spellings() {
    let (dir, up) = (TempDir::new("fa-double-slash"), Recorder::start());
    let rest = format!(
        "[forward_auth]\n{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "trusted_proxies = [\"127.0.0.1\"]", &rest);
    let ask = |method: &str, uri_header: &str, uri: &str| {
        let res = send(addr(&gw), &request("GET", "/v1/authz", &[(method, b"GET"), (uri_header, uri.as_bytes())], b""));
        (res.status, res.text())
    };
    // Before: `//evil/api/items` matched no route and was answered 200 `unlimited`. Now: 400,
    // whichever header names it, in origin or absolute form.
    for (method, uri_header) in [("X-Forwarded-Method", "X-Forwarded-Uri"), ("X-Original-Method", "X-Original-URI")] {
        for uri in ["//evil/api/items", "//127.0.0.1/api/items?x=1", "https://app.example//evil/api/items"] {
            let (status, body) = ask(method, uri_header, uri);
            assert_eq!(status, 400, "{uri_header}: {uri}: {body}");
            assert!(body.contains("starts with `//`"), "{uri_header}: {uri}: {body}");
        }
        for uri in ["/api/items.", "/api/items%20"] {
            assert_eq!(ask(method, uri_header, uri).0, 400, "{uri_header}: {uri}");
        }
    }
    // Nothing above was charged: the honest original is admitted once, then limited, also
    // with a format suffix.
    assert_eq!(ask("X-Forwarded-Method", "X-Forwarded-Uri", "/api/items").0, 200);
    assert_eq!(ask("X-Original-Method", "X-Original-URI", "/api/items.json").0, 429);
    assert_eq!(ask("X-Forwarded-Method", "X-Forwarded-Uri", "/other//x").0, 200, "unrouted, as before");
    assert_eq!(up.count(), 0, "forward-auth never forwards");
}

#[test]
fn format_suffixes_and_trailing_dots_or_whitespace_do_not_escape_a_limit() {
    let (dir, up) = (TempDir::new("suffix"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nmethods = [\"POST\"]\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n\
         [[route]]\npath = \"/api/export\"\nexact = true\nlimits = [{{ policy = \"per-account\", key = [\"ip\", \"route\"] }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let post = |target: &str| send(addr(&gw), &request("POST", target, &[], b""));
    assert_eq!(post("/api/password-reset").status, 200);
    // Before: each was proxied unlimited, and Rails' `(.:format)`, Spring's suffix match,
    // Windows or `str.strip()` served it as the password reset. Now: limited, or refused.
    for (target, want) in [
        ("/api/password-reset.json", 429),
        ("/api/password-reset.xml", 429),
        ("/api/password-reset.tar.gz", 429),
        ("/API/Password-Reset.JSON", 429),
        ("/api/password-reset.json?x=1", 429),
        ("/api/password-reset.", 400),
        ("/api/password-reset%2e", 400),
        ("/api/password-reset./", 400),
        ("/api/password-reset%20", 400),
        ("/api/password-reset%C2%A0", 400),
        ("/api/password-reset%e3%80%80", 400),
        ("/api./password-reset", 400),
        ("/api/x/..%20/password-reset", 400),
        // Node's URL resolves `..` against the empty segment (`/api/password-reset/`), nginx
        // and sluice's normal form against the one before it (`/api`): refused.
        ("/api/password-reset//..", 400),
        ("/api/password-reset%09", 400),
    ] {
        let res = post(target);
        assert_eq!(res.status, want, "{target}: {}", res.text());
    }
    let seen: Vec<String> = up.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(seen, ["/api/password-reset"], "only the admitted request reached the upstream");
    // An `exact = true` route takes its path only: its `.json` is another resource.
    assert_eq!(post("/api/export").status, 200);
    assert_eq!(post("/api/export").status, 429);
    assert_eq!(post("/api/export.json").status, 200, "exact: the suffix is not the route");
    // Honest paths with dots and spaces inside segments pass, unrouted as before.
    for target in ["/api/v1.2/items", "/files/annual%20report.pdf", "/.well-known/security.txt", "/wiki/voil%C3%A0"] {
        assert_eq!(post(target).status, 200, "{target}");
    }
    let acted = up.requests().iter().filter(|r| application_path(&r.path) == "/api/password-reset").count();
    assert_eq!(acted, 1, "the application acted on the password reset once, the limit");
}

#[test]
fn a_path_keyed_limit_is_one_key_whatever_the_format_suffix() {
    // Keyed by `path`, each extension used to be a fresh allowance on one resource: Rails and
    // Spring serve /api/items.json, .xml and .anything as /api/items.
    let (dir, up) = (TempDir::new("pathkey"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nlimits = [{{ policy = \"per-account\", key = \"path\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let get = |target: &str| send(addr(&gw), &request("GET", target, &[], b"")).status;
    assert_eq!(get("/api/items"), 200);
    for target in ["/api/items.json", "/api/items.xml", "/api/items.a", "/api/ITEMS.tar.gz"] {
        assert_eq!(get(target), 429, "{target}");
    }
    // Another resource is another key.
    assert_eq!(get("/api/orders.json"), 200);
    assert_eq!(up.count(), 2);
}

#[test]
fn check_config_warns_when_unrouted_requests_pass_unlimited() {
    let dir = TempDir::new("unrouted");
    let route = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let upstream = "[upstream]\nurl = \"http://127.0.0.1:9000\"\n";
    let catch_all = "[[route]]\npath = \"/*\"\nlimits = [{ policy = \"per-account\", key = \"ip\" }]\n";
    let warned = |name: &str, text: &str| {
        let (out, err, ok) = check_config(&dir.write(name, text), &[]);
        assert!(ok && out.trim_end().ends_with(": OK"), "{name}: {out}{err}");
        err.contains("warning: requests that no route matches are let through unlimited")
    };
    // Before: silent. Now: the proxying configuration without a catch-all route is named.
    assert!(warned("proxy.toml", &format!("{upstream}{route}")));
    let (_, err, _) = check_config(&dir.path("proxy.toml"), &[]);
    assert!(err.contains("path = \"/*\""), "the warning says how: {err}");
    // A last `/*` route with a limit, or no upstream (unrouted requests get 404), is quiet.
    assert!(!warned("caught.toml", &format!("{upstream}{route}{catch_all}")));
    assert!(!warned("answers.toml", &route));
}

#[test]
fn identity_headers_from_untrusted_clients_never_reach_the_upstream() {
    let (dir, up) = (TempDir::new("strip"), Recorder::start());
    let rest = "[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 100\nrefill_per_second = 1\n\
                [[route]]\npath = \"/api/*\"\nlimits = [{ policy = \"p\", key = \"user|ip\" }]\n";
    let gw = gateway(&dir, &up, "user_header = \"x-user-id\"", rest);
    let spoof: &[(&str, &[u8])] = &[
        ("X-User-Id", b"admin"),
        ("Forwarded", b"for=6.6.6.6"),
        ("X-Real-IP", b"6.6.6.6"),
        ("X-Forwarded-For", b"6.6.6.6"),
    ];
    assert_eq!(send(addr(&gw), &request("GET", "/api/me", spoof, b"")).status, 200);
    let seen = &up.requests()[0];
    // Before: the upstream received the client's own X-User-Id: admin, Forwarded and X-Real-IP.
    for gone in ["x-user-id", "forwarded", "x-real-ip"] {
        assert!(seen.all(gone).is_empty(), "{gone} reached the upstream: {:?}", seen.headers);
    }
    assert_eq!(seen.all("x-forwarded-for"), ["127.0.0.1"]);

    // With `forwarded_header = "forwarded"`, that is the header written.
    let (dir2, up2) = (TempDir::new("strip-fwd"), Recorder::start());
    let gw2 = gateway(&dir2, &up2, "forwarded_header = \"forwarded\"", &rest.replace("user|ip", "ip"));
    assert_eq!(send(addr(&gw2), &request("GET", "/api/me", spoof, b"")).status, 200);
    let seen = &up2.requests()[0];
    assert_eq!(seen.all("forwarded"), ["for=127.0.0.1"]);
    assert!(seen.all("x-forwarded-for").is_empty() && seen.all("x-real-ip").is_empty(), "{:?}", seen.headers);
}

#[test]
fn a_repeated_identity_header_is_refused_not_chosen_from() {
    let (dir, up) = (TempDir::new("repeat"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nlimits = [{{ policy = \"per-account\", key = \"header:x-api-key|ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let with_keys = |keys: &[&'static [u8]]| {
        let headers: Vec<(&str, &[u8])> = keys.iter().map(|k| ("X-Api-Key", *k)).collect();
        request("GET", "/api/data", &headers, b"")
    };
    assert_eq!(statuses(&gw, &[with_keys(&[b"victim-key"]), with_keys(&[b"victim-key"])]), [200, 429]);
    // Before: only the first line was read; a front proxy that appends let the client choose.
    assert_eq!(send(addr(&gw), &with_keys(&[b"victim-key", b"rand-1"])).status, 400);
    assert_eq!(send(addr(&gw), &with_keys(&[b"rand-2", b"victim-key"])).status, 400);
    assert_eq!(up.count(), 1);
}

#[test]
fn bytes_that_are_not_text_in_the_forwarding_chain_cannot_move_a_client() {
    let (dir, up) = (TempDir::new("xff-bytes"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "trusted_proxies = [\"127.0.0.1/32\"]", &rest);
    let from = |xff: &[u8]| request("GET", "/api/x", &[("X-Forwarded-For", xff)], b"");
    assert_eq!(send(addr(&gw), &from(b"203.0.113.7")).status, 200);
    // Before: the whole line failed to read as text and the request moved to the proxy's key.
    assert_eq!(send(addr(&gw), &from(b"\xff\xfe, 203.0.113.7")).status, 429);
    assert_eq!(send(addr(&gw), &from(b"caf\xc3\xa9, 203.0.113.7")).status, 429);
    // Another client behind the same proxy is its own key.
    assert_eq!(send(addr(&gw), &from(b"\xff, 203.0.113.8")).status, 200);
}

/// Opens a connection that sends the head of a `json:`-keyed POST and then trickles its body.
fn trickle(gw: SocketAddr, xff: &str) -> TcpStream {
    let mut s = TcpStream::connect(gw).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let head = format!(
        "POST /api/password-reset HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\nContent-Length: 40\r\nConnection: close\r\n\r\n{{\"em"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

fn read_all(mut s: TcpStream) -> Resp {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    support::raw::parse_response(&raw)
}

#[test]
fn slow_bodies_from_one_client_cannot_hold_the_gateway() {
    let (dir, up) = (TempDir::new("slow"), Recorder::start());
    let rest = "[[policy]]\nname = \"per-ip\"\nalgorithm = \"token-bucket\"\ncapacity = 3\nrefill_per_second = 0.001\n\
                [[policy]]\nname = \"per-account\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1h\"\n\
                [[route]]\npath = \"/api/password-reset\"\nlimits = [{ policy = \"per-ip\", key = \"ip\" }, { policy = \"per-account\", key = \"json:/email\" }]\n\
                [[route]]\npath = \"/api/search\"\nlimits = [{ policy = \"per-ip\", key = \"ip\" }]\n";
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let server = "trusted_proxies = [\"127.0.0.1/32\"]\nmax_in_flight = 4\nmax_body_reads_per_client = 2\nbody_idle_timeout = \"1s\"";
    let gw = gateway(&dir, &up, server, &format!("[admin]\nlisten = \"{admin}\"\n\n{rest}"));
    // Before: three trickling bodies to a json: route filled max_in_flight; an unrelated client
    // got 503 for 10 s. Now: two reads at once per client, the third refused at once (429)...
    let held = [trickle(addr(&gw), "198.51.100.1"), trickle(addr(&gw), "198.51.100.1")];
    // Both are being read (in flight) before the third is sent.
    let deadline = std::time::Instant::now() + WAIT;
    while !http(admin, "GET", "/metrics", b"").text().contains("sluice_in_flight 2") {
        assert!(std::time::Instant::now() < deadline, "the two trickled requests never were in flight");
        std::thread::sleep(Duration::from_millis(20));
    }
    let third = read_all(trickle(addr(&gw), "198.51.100.1"));
    assert_eq!((third.status, third.json()["error"].as_str()), (429, Some("too_many_uploads")));
    // ... the per-IP limit, decided before any body is read, was charged by each attempt: the
    // fourth from that address is denied without its body being waited for ...
    let fourth = read_all(trickle(addr(&gw), "198.51.100.1"));
    assert_eq!((fourth.status, fourth.json()["error"].as_str()), (429, Some("rate_limit_exceeded")));
    // ... an unrelated client is served at once ...
    let other = request("GET", "/api/search", &[("X-Forwarded-For", b"198.51.100.2")], b"");
    assert_eq!(send(addr(&gw), &other).status, 200);
    // ... and the trickled reads end with 408 once they stall.
    for s in held {
        assert_eq!(read_all(s).status, 408);
    }
    assert_eq!(up.count(), 1, "only the unrelated request reached the upstream");
}

/// A gateway in front of `up`, behind the trusted proxy 127.0.0.1, with `server` lines, `rest`
/// (policies and routes: unrouted requests are proxied unlimited) and an admin listener
/// (returned); requests wait for the upstream far longer than a test runs.
fn open_gateway(dir: &TempDir, up: &Recorder, server: &str, rest: &str) -> (Serve, SocketAddr) {
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n{server}\n\n\
         [upstream]\nurl = \"http://{}\"\ntimeout_ms = 600000\n\n[admin]\nlisten = \"{admin}\"\n\n{rest}",
        up.addr
    );
    (Serve::gateway(&dir.write("gateway.toml", &toml)), admin)
}

/// Opens a connection for the client `xff` (behind the trusted proxy) that sends the head of a
/// 1 MiB upload to `path` and its first bytes, then holds.
fn upload_head(gw: SocketAddr, path: &str, xff: &str) -> TcpStream {
    let mut s = TcpStream::connect(gw).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\nfirst bytes"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// True when the server has written something back on `s` (without reading it).
fn answered(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let peeked = s.peek(&mut [0; 1]);
    s.set_nonblocking(false).unwrap();
    matches!(peeked, Ok(n) if n > 0)
}

/// A metric's value in the admin listener's scrape (`name` with its labels, as written).
fn metric(admin: SocketAddr, name: &str) -> Option<f64> {
    let text = http(admin, "GET", "/metrics", b"").text();
    let line = text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?;
    line[name.len()..].trim().parse().ok()
}

/// Waits (at most [`WAIT`]) until the admin listener reports `name` at `want`.
fn wait_metric(admin: SocketAddr, name: &str, want: f64) {
    let deadline = std::time::Instant::now() + WAIT;
    while metric(admin, name) != Some(want) {
        assert!(std::time::Instant::now() < deadline, "{name} never reached {want}: {:?}", metric(admin, name));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_client_trickling_uploads_cannot_fill_max_in_flight() {
    let (dir, up) = (TempDir::new("per-client"), Recorder::start());
    let (gw, admin) = open_gateway(&dir, &up, "max_in_flight = 20\nmax_in_flight_per_client = 5", "");
    // 25 uploads from one client to an unrouted path, each trickling (1 MiB announced, a few
    // bytes sent). Each is either being forwarded (the upstream receives its body) or answered.
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    for i in 0..25 {
        let receiving = up.receiving().len();
        let s = upload_head(addr(&gw), "/upload", "198.51.100.1");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if up.receiving().len() > receiving {
                held.push(s);
                break;
            }
            if answered(&s) {
                refused.push(s);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "upload {i} was neither forwarded nor answered");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Before: 20 uploads held every slot of max_in_flight and every other client got 503 until
    // they ended. Now another client is served, with and without a body ...
    let other = [("X-Forwarded-For", b"198.51.100.2".as_slice())];
    assert_eq!(send(addr(&gw), &request("GET", "/items", &other, b"")).status, 200);
    assert_eq!(send(addr(&gw), &request("POST", "/items", &other, b"{\"x\":1}")).status, 200);
    // ... because that client holds 5 at most; the rest were told to come back, not shed.
    assert_eq!((held.len(), refused.len()), (5, 20));
    for s in refused {
        let res = read_all(s);
        assert_eq!((res.status, res.json()["error"].as_str()), (429, Some("too_many_in_flight")));
        assert_eq!(res.header("retry-after"), Some("1"));
    }
    assert_eq!(metric(admin, "sluice_shed_per_client_total"), Some(20.0));
    assert_eq!(metric(admin, "sluice_shed_total"), Some(0.0));
    assert_eq!(metric(admin, "sluice_in_flight"), Some(5.0));
    // Its uploads count until they end: closed by the client here, cut upstream too.
    drop(held);
    wait_metric(admin, "sluice_in_flight", 0.0);
    up.wait_for("the five uploads cut", |log| (log.cut.len() == 5).then_some(()));
    assert_eq!(metric(admin, "sluice_request_body_errors_total{reason=\"incomplete\"}"), Some(5.0));
    let mine = [("X-Forwarded-For", b"198.51.100.1".as_slice())];
    assert_eq!(send(addr(&gw), &request("POST", "/upload", &mine, b"small")).status, 200);
}

#[test]
fn a_streamed_body_that_stalls_is_cut_and_answered_408() {
    let (dir, up) = (TempDir::new("stall"), Recorder::start());
    let (gw, admin) = open_gateway(&dir, &up, "body_idle_timeout = \"1s\"", "");
    // An unrouted upload (streamed to the upstream, never read for a key) whose client stops.
    let s = upload_head(addr(&gw), "/upload", "198.51.100.1");
    let conn = up.wait_for("the upload's first bytes", |log| {
        log.receiving.values().find(|r| r.body == b"first bytes").map(|r| r.conn)
    });
    // Before: it held its slot until the upstream's timeout, then 504 (an upstream error).
    let res = read_all(s);
    assert_eq!((res.status, res.json()["error"].as_str()), (408, Some("request_timeout")));
    assert_eq!(res.header("connection"), Some("close"));
    // The upstream request was aborted, its connection closed and never used again.
    up.wait_for("the upload cut", |log| log.cut.iter().any(|r| r.conn == conn).then_some(()));
    assert_eq!(send(addr(&gw), &request("POST", "/upload", &[], b"whole")).status, 200);
    assert_ne!(up.requests().last().map(|r| r.conn), Some(conn));
    assert_eq!(metric(admin, "sluice_request_body_errors_total{reason=\"stalled\"}"), Some(1.0));
}

#[test]
fn a_malformed_chunked_body_is_the_clients_error_and_its_upstream_connection_is_closed() {
    let (dir, up) = (TempDir::new("malformed"), Recorder::start());
    let keyed = "[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 100\nrefill_per_second = 1\n\
                 [[route]]\npath = \"/api/password-reset\"\nlimits = [{ policy = \"p\", key = \"json:/email\" }]\n";
    let (gw, admin) = open_gateway(&dir, &up, "max_body_bytes = 16", keyed);
    let broken: [(&str, &[u8]); 3] = [
        ("a bad chunk-size line", b"zz\r\nworld\r\n0\r\n\r\n"),
        ("a quoted chunk extension holding CRLF", b"5;name=\"a\r\nb\"\r\nworld\r\n0\r\n\r\n"),
        ("a bare LF ending a chunk-size line", b"5\nworld\r\n0\r\n\r\n"),
    ];
    for (i, (form, rest)) in broken.into_iter().enumerate() {
        let mut s = TcpStream::connect(addr(&gw)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n")
            .unwrap();
        // The first chunk is streamed to the upstream before the broken part comes.
        let conn = up.wait_for("the first chunk", |log| {
            log.receiving.values().find(|r| r.body.starts_with(b"hello")).map(|r| r.conn)
        });
        s.write_all(rest).unwrap();
        // Before: 502, an upstream error. Now: the client's error.
        let res = read_all(s);
        assert_eq!((res.status, res.json()["error"].as_str()), (400, Some("bad_request")), "{form}");
        // The upstream connection that received part of it is closed, not kept for reuse ...
        up.wait_for("the partial request cut", |log| log.cut.iter().any(|r| r.conn == conn).then_some(()));
        // ... so the next requests, with a body and without, come on other connections.
        assert_eq!(send(addr(&gw), &request("POST", "/upload", &[], b"whole")).status, 200, "{form}");
        assert_eq!(send(addr(&gw), &request("GET", "/next", &[], b"")).status, 200, "{form}");
        let seen = up.requests();
        assert_eq!(seen.len(), 2 * (i + 1), "{form}: nothing of the broken request was taken as whole");
        assert!(seen[2 * i..].iter().all(|r| r.conn != conn), "{form}: a request reused the cut connection {conn}");
    }
    // A route that reads the body for a key: broken inside what is read, refused before anything
    // reaches the upstream (as before); broken after it (a body larger than max_body_bytes, the
    // rest streamed), the same as an unrouted one (before: 502).
    let keyed = |body: &[u8]| {
        let mut s = TcpStream::connect(addr(&gw)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.write_all(
            b"POST /api/password-reset HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        s.write_all(body).unwrap();
        s
    };
    let res = read_all(keyed(b"5\r\n{\"a\":\r\nzz\r\n1}\r\n0\r\n\r\n"));
    assert_eq!((res.status, res.json()["error"].as_str()), (400, Some("bad_request")));
    let reached = |log: &support::raw::Log| {
        log.done.iter().chain(&log.cut).chain(log.receiving.values()).any(|r| r.path == "/api/password-reset")
    };
    assert!(!reached(&up.log.lock().unwrap()), "a body refused while read for its key reached the upstream");
    let mut s = keyed(b"14\r\n{\"email\":\"a@b.c\",   \r\n");
    let conn = up.wait_for("the keyed body's prefix", |log| {
        log.receiving.values().find(|r| r.body.starts_with(b"{\"email\"")).map(|r| r.conn)
    });
    s.write_all(b"5\nx\"}\r\n0\r\n\r\n").unwrap();
    let res = read_all(s);
    assert_eq!((res.status, res.json()["error"].as_str()), (400, Some("bad_request")));
    up.wait_for("the keyed request cut", |log| log.cut.iter().any(|r| r.conn == conn).then_some(()));
    assert_eq!(metric(admin, "sluice_request_body_errors_total{reason=\"malformed\"}"), Some(5.0));
}

#[test]
fn a_flood_of_new_keys_never_resets_a_denied_key() {
    let (dir, up) = (TempDir::new("flood"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/*\"\nlimits = [{{ policy = \"per-account\", key = \"header:x-api-key\" }}]\n\n[store]\nkind = \"memory\"\nmax_keys = 64\nshards = 1\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let key = |k: &str| request("GET", "/api/x", &[("X-Api-Key", k.as_bytes())], b"");
    assert_eq!(statuses(&gw, &[key("victim"), key("victim")]), [200, 429]);
    // Before (LRU eviction): a flood of other keys evicted the victim's state: 200 again.
    for i in 0..640 {
        let _ = send(addr(&gw), &key(&format!("flood-{i}")));
    }
    assert_eq!(send(addr(&gw), &key("victim")).status, 429, "the victim's limit held through the flood");
}

#[test]
fn the_decision_api_answers_only_allowed_peers_or_its_token_and_caps_the_cost() {
    let (dir, up) = (TempDir::new("decision-api"), Recorder::start());
    let rest = "[decision_api]\nallow = [\"10.0.0.0/8\"]\ntoken = \"a bearer token for the decision api\"\nmax_cost = 5\n\n\
                [[policy]]\nname = \"p\"\nalgorithm = \"sliding-log\"\nlimit = 100\nwindow = \"1h\"\n";
    let gw = gateway(&dir, &up, "decision_api = true", rest);
    let check = |cost: u64, auth: Option<&[u8]>| {
        let body = format!(r#"{{"policy":"p","key":"victim","cost":{cost}}}"#);
        let headers: Vec<(&str, &[u8])> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        send(addr(&gw), &request("POST", "/v1/check", &headers, body.as_bytes()))
    };
    // Before: anyone could burn any key's quota, at any cost. Now: 127.0.0.1 is not allowed here.
    assert_eq!(check(1, None).status, 403);
    assert_eq!(check(1, Some(b"Bearer wrong token of the same length!!")).status, 403);
    assert_eq!(check(1, Some(b"Basic a bearer token for the decision api")).status, 403);
    let ok = check(5, Some(b"Bearer a bearer token for the decision api"));
    assert_eq!((ok.status, ok.json()["remaining"].as_u64()), (200, Some(95)));
    let costly = check(6, Some(b"Bearer a bearer token for the decision api"));
    assert_eq!((costly.status, costly.json()["error"].as_str()), (400, Some("cost_too_large")));
}

#[test]
fn a_chunked_get_reaches_the_upstream_with_its_body() {
    let (dir, up) = (TempDir::new("chunked"), Recorder::start());
    let rest = "[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 10\nrefill_per_second = 1\n\
                [[route]]\npath = \"/api/*\"\nlimits = [{ policy = \"p\", key = \"ip\" }]\n";
    let gw = gateway(&dir, &up, "", rest);
    let chunked = b"GET /api/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    assert_eq!(send(addr(&gw), chunked).status, 200);
    assert_eq!(send(addr(&gw), &request("GET", "/elsewhere", &[], b"sized body")).status, 200);
    let seen = up.requests();
    // Before: the GET reached the upstream with an empty body (the upstream saw another request).
    assert_eq!(seen[0].body, b"hello world");
    assert_eq!(seen[1].body, b"sized body");
}

#[test]
fn requests_pipelined_behind_a_bodiless_one_are_limited_and_forwarded_one_by_one() {
    // Requests without a body go on sluice's own upstream exchange, which writes their heads
    // itself: a second request packed behind the first, or a field a client spells to split a
    // line, must neither ride past the limit nor reach the upstream as anything but itself.
    let (dir, up) = (TempDir::new("pipelined"), Recorder::start());
    let rest = format!(
        "{ONE_PER_HOUR}\n[[route]]\npath = \"/api/password-reset\"\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"
    );
    let gw = gateway(&dir, &up, "", &rest);
    let packed = b"GET /api/password-reset HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n\
                   GET /api/password-reset HTTP/1.1\r\nHost: x\r\n\r\n\
                   GET /other HTTP/1.1\r\nHost: x\r\nX-Tab: a\tb  c\r\nConnection: x-tab, close\r\n\r\n";
    let mut s = TcpStream::connect(addr(&gw)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(packed).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    let statuses: Vec<&str> = text.match_indices("HTTP/1.1 ").map(|(i, _)| &text[i + 9..i + 12]).collect();
    assert_eq!(statuses, ["200", "429", "200"], "{text}");
    let seen = up.requests();
    let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/api/password-reset", "/other"], "the denied one never reached the upstream");
    assert!(seen.iter().all(|r| r.body.is_empty()));
    // The field `Connection` names is hop-by-hop: not passed on; nothing else was split off.
    assert!(seen[1].all("x-tab").is_empty(), "{:?}", seen[1].headers);
    // An honest request with a tab in a value keeps it, as one field.
    assert_eq!(send(addr(&gw), &request("GET", "/other", &[("X-Tab", b"a\tb")], b"")).status, 200);
    assert_eq!(up.requests().last().map(|r| r.all("x-tab").join("|")).as_deref(), Some("a\tb"));
}

/// `sluice check-config FILE`: its stdout, stderr, and whether it succeeded.
fn check_config(path: &str, env: &[(&str, &str)]) -> (String, String, bool) {
    let out = Command::new(SLUICE).args(["check-config", path]).envs(env.iter().copied()).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into(), out.status.success())
}

#[test]
fn a_shared_store_needs_its_secret_and_a_chosen_failure_mode_and_never_shows_them() {
    let dir = TempDir::new("shared");
    let store = "[store]\nkind = \"redis\"\nurl = \"redis://:hunter2-redis-password@127.0.0.1:6379\"\n";
    // Before: three instances without key_secret each drew a random secret: 300 of 300 admitted
    // for a limit of 100. Now: refused at check-config and at start-up, naming the field.
    let no_secret = dir.write("no-secret.toml", &format!("{store}on_error = \"fail-closed\"\n"));
    let (_, err, ok) = check_config(&no_secret, &[]);
    assert!(!ok && err.contains("server.key_secret") && err.contains("no-secret.toml:2"), "{err}");
    let start = Command::new(SLUICE).args(["serve", "--config", &no_secret]).output().unwrap();
    assert!(!start.status.success() && String::from_utf8_lossy(&start.stderr).contains("server.key_secret"));
    // Before: on_error defaulted to fail-open (a limit of 2 admitted 6 of 6 during a pause).
    let no_mode = dir.write("no-mode.toml", &format!("[server]\nkey_secret_env = \"SLUICE_ATTACK_SECRET\"\n{store}"));
    let (_, err, ok) = check_config(&no_mode, &[("SLUICE_ATTACK_SECRET", "a secret from the environment")]);
    assert!(!ok && err.contains("store.on_error: is required"), "{err}");
    for mode in ["fail-closed", "fail-open", "local"] {
        assert!(err.contains(&format!("on_error = \"{mode}\"")), "{mode}: {err}");
    }
    // Before: check-config printed the Redis password. Now secrets never show.
    let good = dir.write(
        "good.toml",
        &format!("[server]\nkey_secret_env = \"SLUICE_ATTACK_SECRET\"\n{store}on_error = \"fail-closed\"\n"),
    );
    let (out, err, ok) = check_config(&good, &[("SLUICE_ATTACK_SECRET", "a secret from the environment")]);
    assert!(ok, "{err}");
    assert!(out.contains("<redacted>") && out.contains("key secret: set"), "{out}");
    for secret in ["hunter2-redis-password", "a secret from the environment"] {
        assert!(!out.contains(secret) && !err.contains(secret), "{secret} shown: {out}{err}");
    }
    // The variable named must be set.
    let (_, err, ok) = check_config(&good, &[]);
    assert!(!ok && err.contains("SLUICE_ATTACK_SECRET"), "{err}");
}

#[test]
fn a_route_that_costs_nothing_is_refused() {
    let dir = TempDir::new("cost0");
    let path = dir.write(
        "zero.toml",
        &format!("{ONE_PER_HOUR}\n[[route]]\npath = \"/x\"\ncost = 0\nlimits = [{{ policy = \"per-account\", key = \"ip\" }}]\n"),
    );
    let (_, err, ok) = check_config(&path, &[]);
    assert!(!ok && err.contains("route[0].cost: must be at least 1"), "{err}");
}

#[test]
fn honest_requests_still_pass() {
    let (dir, up) = (TempDir::new("honest"), Recorder::start());
    let rest = "[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 10\nrefill_per_second = 1\n\
                [[route]]\npath = \"/api/password-reset\"\nlimits = [{ policy = \"p\", key = \"json:/email\" }]\n";
    let gw = gateway(&dir, &up, "", rest);
    let body = br#"{"email":"a@example.com","extra":{"x":[1,2]}}"#;
    let json: &[(&str, &[u8])] = &[("Content-Type", b"application/json")];
    let res = send(addr(&gw), &request("POST", "/api/password-reset?from=mail", json, body));
    assert_eq!(res.status, 200);
    let res = send(
        addr(&gw),
        &request(
            "POST",
            "/api/password-reset",
            &[("Content-Type", b"application/json; charset=utf-8")],
            "{\"email\":\"ü@example.com\"}".as_bytes(),
        ),
    );
    assert_eq!(res.status, 200);
    assert_eq!(up.count(), 2);
    assert_eq!(up.requests()[0].path, "/api/password-reset?from=mail", "forwarded as sent");
}
