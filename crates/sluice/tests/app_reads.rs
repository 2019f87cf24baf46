//! Issue 23's reproductions through the binary, in front of an upstream that reads requests the
//! way an application does (`support/app_upstream.py`: forms parsed as forms, the query string
//! over the body, `_` read as `-` in header names, Unicode whitespace stripped, lenient bearer
//! tokens, targets through a URL parser, accounts matched accent- and width-insensitively).
//! Each attack is sent as about ten fresh variants against a limit of 2 per hour; the
//! application must act on the victim at most twice in all, whatever sluice answers, and no
//! request sluice refused or denied may reach it. Beside each, the honest request that must
//! still be admitted and acted on.

#[path = "../../sluice-http/tests/jwt_keys/mod.rs"]
mod jwt_keys;
mod support;

use std::net::SocketAddr;
use std::process::Command;

use serde_json::json;
use support::app::{App, Trials};
use support::{SLUICE, Serve, TempDir};

/// The account every attack aims at, as the application folds it.
const VICTIM: &str = "victim@example.com";

/// The password reset every account attack aims at.
const RESET: &str = "/api/password-reset";

/// The limit of every reproduction: 2 per hour, exact (no window approximation).
const TWO_PER_HOUR: &str =
    "[[policy]]\nname = \"two-per-hour\"\nalgorithm = \"sliding-log\"\nlimit = 2\nwindow = \"1h\"\n";

/// The application, and sluice in front of it with `server` lines, `rest` (TOML) and one route
/// at `path` keyed by `key` (its configuration checked first, so an unknown name says so);
/// the requests are sent through sluice, tagged. Temporary files are named after `tag`.
#[track_caller]
fn scene(tag: &str, server: &str, path: &str, key: &str, rest: &str) -> (TempDir, App, Serve, Trials) {
    let (dir, app) = (TempDir::new(tag), App::start(jwt_keys::HS_SECRET));
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n\n[upstream]\nurl = \"http://{}\"\ntimeout_ms = 5000\n\n{rest}\n\
         {TWO_PER_HOUR}\n[[route]]\npath = \"{path}\"\nlimits = [{{ policy = \"two-per-hour\", key = \"{key}\" }}]\n",
        app.addr
    );
    let file = dir.write("gateway.toml", &toml);
    let out = Command::new(SLUICE).args(["check-config", &file]).output().expect("run `sluice check-config`");
    assert!(
        out.status.success(),
        "sluice refused the configuration:\n{}\n{toml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gateway = Serve::gateway(&file);
    let trials = Trials::new(SocketAddr::from(([127, 0, 0, 1], gateway.port)));
    (dir, app, gateway, trials)
}

/// Fails, saying how often, when the application acted on `account` at `endpoint` more often
/// than the limit of 2 allows: the figure a bypass shows, with what sluice answered.
#[track_caller]
fn assert_acted_within_limit(app: &App, endpoint: &str, account: &str, statuses: &[u16]) {
    let acted = app.acts(endpoint, account);
    assert!(
        acted <= 2,
        "the application acted on {account} at {endpoint} {acted} times (limit 2); sluice answered {statuses:?}"
    );
}

/// `{"email": email}`, escaped as JSON.
fn email_json(email: &str) -> String {
    json!({ "email": email }).to_string()
}

#[test]
fn a_form_body_that_is_also_json_is_not_keyed_as_json() {
    let (_dir, app, _gw, t) = scene("app-form-json", "", RESET, "json:/email", "");
    // Honest: JSON bodies, `+json` included, admitted and acted on within the limit.
    assert_eq!(t.post(RESET, "application/json", &email_json(VICTIM)).status, 200);
    assert_eq!(t.post(RESET, "application/merge-patch+json", &email_json(VICTIM)).status, 200);
    assert_eq!(app.acts("password-reset", VICTIM), 2, "the honest requests were acted on");
    // The attack: sluice keyed the decoy; the form parser reads the victim.
    let statuses: Vec<u16> = (1..=10)
        .map(|n| {
            let body = format!(r#"{{"x":"&email=victim%40example.com&","email":"decoy{n}@example.net"}}"#);
            t.post(RESET, "application/x-www-form-urlencoded", &body).status
        })
        .collect();
    assert_acted_within_limit(&app, "password-reset", VICTIM, &statuses);
    assert_eq!(statuses, [415; 10], "a json: route refuses another content type");
    t.assert_refused_never_reached(&app);
    // Another account's JSON request is still served.
    assert_eq!(t.post(RESET, "application/json", &email_json("someone@example.com")).status, 200);
    assert_eq!(app.acts("password-reset", "someone@example.com"), 1);
}

#[test]
fn a_form_keyed_route_limits_real_form_posts() {
    let (_dir, app, _gw, t) = scene("app-form", "", RESET, "form:email", "");
    let form = "application/x-www-form-urlencoded";
    // Honest: real form posts of the victim, extra fields and a charset included.
    assert_eq!(t.post(RESET, form, "email=victim%40example.com&lang=uk").status, 200);
    assert_eq!(
        t.post(RESET, "application/x-www-form-urlencoded; charset=utf-8", "email=victim%40example.com").status,
        200
    );
    assert_eq!(app.acts("password-reset", VICTIM), 2, "the honest requests were acted on");
    // The victim again, the JSON-in-form trick (the form field is the victim's), a repeated
    // field either way round, and the field in the query string too.
    let mut attempts = vec![(RESET.to_owned(), "email=victim%40example.com".to_owned())];
    attempts.extend((1..=3).map(|n| {
        (RESET.to_owned(), format!(r#"{{"x":"&email=victim%40example.com&","email":"decoy{n}@example.net"}}"#))
    }));
    for n in 1..=2 {
        attempts.push((RESET.to_owned(), format!("email=victim%40example.com&email=rot{n}%40example.net")));
        attempts.push((RESET.to_owned(), format!("email=rot{n}%40example.net&email=victim%40example.com")));
    }
    attempts.extend(
        (1..=2).map(|n| (format!("{RESET}?email=victim%40example.com"), format!("email=rot{n}%40example.net"))),
    );
    let statuses: Vec<u16> = attempts.iter().map(|(target, body)| t.post(target, form, body).status).collect();
    assert_acted_within_limit(&app, "password-reset", VICTIM, &statuses);
    // The form's email is the victim's whatever else the body holds: limited, or refused as a
    // malformed form; a repeated keyed field and the field in the query too are refused.
    assert_eq!(statuses[0], 429);
    assert!(statuses[1..4].iter().all(|s| [400, 429].contains(s)), "{statuses:?}");
    assert_eq!(statuses[4..], [400; 6]);
    t.assert_refused_never_reached(&app);
    // Another account's form post is still served.
    assert_eq!(t.post(RESET, form, "email=someone%40example.com").status, 200);
    assert_eq!(app.acts("password-reset", "someone@example.com"), 1);
}

#[test]
fn the_keyed_field_also_in_the_query_string_is_refused() {
    let (_dir, app, _gw, t) = scene("app-query", "", RESET, "json:/email", "");
    let json = "application/json";
    // Honest: the victim's own two resets, one with an unrelated query parameter.
    assert_eq!(t.post(RESET, json, &email_json(VICTIM)).status, 200);
    assert_eq!(t.post(&format!("{RESET}?lang=uk"), json, &email_json(VICTIM)).status, 200);
    assert_eq!(app.acts("password-reset", VICTIM), 2, "the honest requests were acted on");
    // The attack: sluice keys the body's rotating address; the application reads the query first.
    let queries = [
        "email=victim%40example.com",
        "email=victim@example.com",
        "lang=uk&email=victim%40example.com",
        "email=victim%40example.com&lang=uk",
        "email=VICTIM%40example.com",
        "email=Victim%40Example.com",
        "email=victim%40example.com&email=x",
        "a=1&email=victim%40example.com&b=2",
        "email=%76ictim%40example.com",
        "email=victim%40example%2ecom",
    ];
    let statuses: Vec<u16> = queries
        .iter()
        .enumerate()
        .map(|(n, q)| t.post(&format!("{RESET}?{q}"), json, &email_json(&format!("rot{n}@example.net"))).status)
        .collect();
    assert_acted_within_limit(&app, "password-reset", VICTIM, &statuses);
    assert_eq!(statuses, [400; 10], "the keyed field in the query string too is refused");
    t.assert_refused_never_reached(&app);
    // Another account with an unrelated query is still served.
    assert_eq!(t.post(&format!("{RESET}?lang=uk"), json, &email_json("someone@example.com")).status, 200);
    assert_eq!(app.acts("password-reset", "someone@example.com"), 1);
}

#[test]
fn header_names_with_underscores_neither_dodge_a_key_nor_carry_an_identity() {
    let (_dir, app, _gw, t) = scene("app-underscore", "user_header = \"x-user\"", "/api/data", "header:x-api-key", "");
    let get = |headers: &[(&str, &[u8])]| t.send("GET", "/api/data", headers, b"").status;
    // Honest: KEY1's two requests, then it is spent.
    assert_eq!([get(&[("X-Api-Key", b"KEY1")]), get(&[("X-Api-Key", b"KEY1")])], [200, 200]);
    assert_eq!(get(&[("X-Api-Key", b"KEY1")]), 429);
    assert_eq!(app.acts("data", "KEY1"), 2, "the honest requests were acted on");
    // The attack: KEY1 under names a WSGI application reads as X-Api-Key.
    let names = [
        "X_Api_Key",
        "x_api_key",
        "X_API_KEY",
        "X-Api_Key",
        "X_Api-Key",
        "x_Api_key",
        "X_api_KEY",
        "X-API_KEY",
        "x-api_key",
        "X_API-key",
    ];
    let statuses: Vec<u16> = names.iter().map(|name| get(&[(name, b"KEY1")])).collect();
    // And identity headers an untrusted client spells with underscores, each with a fresh key.
    let spoofs: [(&str, &[u8]); 8] = [
        ("X_Forwarded_For", b"6.6.6.6"),
        ("x_forwarded_for", b"6.6.6.6"),
        ("X-Forwarded_For", b"6.6.6.6"),
        ("X_Real_IP", b"6.6.6.6"),
        ("x_real_ip", b"6.6.6.6"),
        ("X_User", b"admin"),
        ("x_user", b"admin"),
        ("X_USER", b"admin"),
    ];
    let spoof_statuses: Vec<u16> =
        spoofs.iter().enumerate().map(|(n, h)| get(&[("X-Api-Key", format!("spoof-{n}").as_bytes()), *h])).collect();
    let acted = app.acts("data", "KEY1");
    let reached: Vec<(String, String)> =
        app.identity_headers().into_iter().filter(|(_, v)| v.contains("6.6.6.6") || v.contains("admin")).collect();
    assert!(
        acted <= 2 && reached.is_empty(),
        "the application acted on KEY1 {acted} times (limit 2), sluice answered {statuses:?}; {} spoofed identity \
         headers reached it: {reached:?}, sluice answered {spoof_statuses:?}",
        reached.len()
    );
    t.assert_refused_never_reached(&app);
    // Honest: another key is served, and the application sees the forwarding header sluice wrote.
    assert_eq!(get(&[("X-Api-Key", b"KEY2")]), 200);
    assert_eq!(app.acts("data", "KEY2"), 1);
    let forwarded = app.identity_headers();
    assert!(
        forwarded.iter().any(|(k, v)| k.eq_ignore_ascii_case("x-forwarded-for") && v == "127.0.0.1"),
        "{forwarded:?}"
    );
}

#[test]
fn non_ascii_whitespace_around_a_keyed_header_value_is_refused() {
    let (_dir, app, _gw, t) = scene("app-nbsp", "", "/api/data", "header:x-api-key", "");
    let get = |key: &[u8]| t.send("GET", "/api/data", &[("X-Api-Key", key)], b"").status;
    // Honest: KEY1's two requests, then it is spent.
    assert_eq!([get(b"KEY1"), get(b"KEY1")], [200, 200]);
    assert_eq!(app.acts("data", "KEY1"), 2, "the honest requests were acted on");
    // The attack: bytes Python's str.strip() removes (Latin-1 NBSP and NEL), raw on the wire.
    let keys: [&[u8]; 10] = [
        b"KEY1\xa0",
        b"KEY1\x85",
        b"\xa0KEY1",
        b"\x85KEY1",
        b"\xa0KEY1\xa0",
        b"KEY1\xa0\xa0",
        b"KEY1\x85\xa0",
        b"\xa0\x85KEY1",
        b"\x85KEY1\x85",
        b"\xa0\xa0KEY1\x85",
    ];
    let statuses: Vec<u16> = keys.iter().map(|k| get(k)).collect();
    assert_acted_within_limit(&app, "data", "KEY1", &statuses);
    assert_eq!(statuses, [400; 10], "a keyed header value with non-ASCII bytes is refused");
    t.assert_refused_never_reached(&app);
    // Honest: another key with ordinary spaces around it (HTTP's own whitespace) is served.
    assert_eq!(get(b"  KEY2 "), 200);
    assert_eq!(app.acts("data", "KEY2"), 1);
}

#[test]
fn a_token_the_application_accepts_is_never_anonymous_to_sluice() {
    let jwt = format!("[identity.jwt]\nhs256_secret = \"{}\"\n", jwt_keys::HS_SECRET);
    let (_dir, app, _gw, t) =
        scene("app-jwt", "trusted_proxies = [\"127.0.0.0/8\"]", "/api/profile", "jwt:sub|ip", &jwt);
    let token = jwt_keys::hs256().sign(&jwt_keys::claims("victim", json!({})));
    // Each request through the trusted proxy from a new address.
    let from = |n: u32, auth: &[&str]| {
        let xff = format!("203.0.113.{n}");
        let mut headers: Vec<(&str, &[u8])> = vec![("X-Forwarded-For", xff.as_bytes())];
        headers.extend(auth.iter().map(|a| ("Authorization", a.as_bytes())));
        t.send("GET", "/api/profile", &headers, b"").status
    };
    let bearer = format!("Bearer {token}");
    // Honest: the subject's two requests, then it is spent wherever it comes from.
    assert_eq!([from(1, &[&bearer]), from(2, &[&bearer])], [200, 200]);
    assert_eq!(from(3, &[&bearer]), 429);
    assert_eq!(app.acts("profile", "victim"), 2, "the honest requests were acted on");
    // The attack: spellings the application accepts as the same token.
    let one_line = [
        format!("Bearer {token}="),
        format!("Bearer {token}=="),
        format!("Bearer  {token}"),
        format!("Bearer\t{token}"),
        format!("Bearer \t {token}"),
        format!("Bearer   {token}="),
        format!("bearer\t{token}="),
    ];
    let mut statuses: Vec<u16> = one_line.iter().zip(10..).map(|(auth, n)| from(n, &[auth])).collect();
    let two_lines = [
        [bearer.clone(), bearer.clone()],
        [bearer.clone(), "Bearer not.a.token".to_owned()],
        [format!("Bearer {token}="), "Basic dXNlcjpwYXNz".to_owned()],
    ];
    statuses.extend(two_lines.iter().zip(20..).map(|(lines, n)| from(n, &[&lines[0], &lines[1]])));
    assert_acted_within_limit(&app, "profile", "victim", &statuses);
    assert!(
        statuses[..7].iter().all(|s| [401, 429].contains(s)),
        "a present token that does not verify is refused: {statuses:?}"
    );
    assert_eq!(statuses[7..], [400, 400, 400], "two Authorization lines are refused");
    t.assert_refused_never_reached(&app);
    // Honest: no token falls back to the address; another subject's token is served.
    assert_eq!(from(30, &[]), 200);
    let other = jwt_keys::hs256().sign(&jwt_keys::claims("someone", json!({})));
    assert_eq!(from(31, &[&format!("Bearer {other}")]), 200);
    assert_eq!(app.acts("profile", "someone"), 1);
}

#[test]
fn a_target_starting_with_two_slashes_is_refused() {
    let (_dir, app, _gw, t) = scene("app-slashes", "", "/api/items", "ip", "");
    let get = |target: &str| t.send("GET", target, &[], b"").status;
    // Honest: two listings (a `//` in the query is no authority), then the address is spent.
    assert_eq!([get("/api/items"), get("/api/items?next=//elsewhere/x")], [200, 200]);
    assert_eq!(get("/api/items"), 429);
    assert_eq!(app.acts("items", "listing"), 2, "the honest requests were acted on");
    // The attack: a URL parser reads `//host` as an authority and the rest as /api/items.
    let targets = [
        "//127.0.0.1/api/items",
        "//localhost/api/items",
        "//evil.example/api/items",
        "//127.0.0.1:9/api/items",
        "//user@127.0.0.1/api/items",
        "//h6/api/items?page=2",
        "//h7/api/./items",
        "//h8/x/../api/items",
        "//h9/api/items/",
        "//h10/api/items.json",
    ];
    let statuses: Vec<u16> = targets.iter().map(|target| get(target)).collect();
    assert_acted_within_limit(&app, "items", "listing", &statuses);
    assert_eq!(statuses, [400; 10], "a target starting with // is refused");
    t.assert_refused_never_reached(&app);
}

#[test]
fn unicode_spellings_of_an_account_share_its_key() {
    let (_dir, app, _gw, t) = scene("app-unicode", "", RESET, "json:/email", "");
    let reset = |email: &str| t.post(RESET, "application/json", &email_json(email)).status;
    // Honest: the victim's own two resets.
    assert_eq!([reset(VICTIM), reset(VICTIM)], [200, 200]);
    assert_eq!(app.acts("password-reset", VICTIM), 2, "the honest requests were acted on");
    // The attack: spellings an accent-, width- and case-insensitive application matches to it.
    let spellings = [
        "\u{ff56}\u{ff49}\u{ff43}\u{ff54}\u{ff49}\u{ff4d}@example.com", // fullwidth letters
        "v\u{ef}ctim@example.com",                                      // precomposed ï
        "vi\u{308}ctim@example.com",                                    // i + combining diaeresis
        "v\u{131}ctim@example.com",                                     // dotless ı
        "v\u{130}ctim@example.com",                                     // dotted İ
        "vic\u{200b}tim@example.com",                                   // zero-width space
        "vic\u{200d}tim@example.com",                                   // zero-width joiner
        "vic\u{ad}tim@example.com",                                     // soft hyphen
        "\u{ff36}\u{ff29}\u{ff23}\u{ff34}\u{ff29}\u{ff2d}@\u{ff45}xample.com", // fullwidth capitals
        "v\u{ed}ctim@example.com",                                      // í
    ];
    let statuses: Vec<u16> = spellings.iter().map(|s| reset(s)).collect();
    assert_acted_within_limit(&app, "password-reset", VICTIM, &statuses);
    assert_eq!(statuses, [429; 10], "every spelling shares the victim's key");
    t.assert_refused_never_reached(&app);
    // Honest: an account that differs in a letter, not in a mark, is its own.
    assert_eq!(reset("v\u{ef}ctor@example.com"), 200);
    assert_eq!(app.acts("password-reset", "victor@example.com"), 1);
}

#[test]
fn format_suffixes_and_trailing_characters_are_limited_as_the_route() {
    let (_dir, app, _gw, t) = scene("app-suffix", "", RESET, "json:/email", "");
    let reset = |target: &str, email: &str| t.post(target, "application/json", &email_json(email)).status;
    // Honest: the victim's own two resets.
    assert_eq!([reset(RESET, VICTIM), reset(RESET, VICTIM)], [200, 200]);
    assert_eq!(app.acts("password-reset", VICTIM), 2, "the honest requests were acted on");
    // The attack: targets a Rails- or Spring-style application routes to the same action.
    let targets = [
        "/api/password-reset.json",
        "/api/password-reset.xml",
        "/api/password-reset.",
        "/api/password-reset%20",
        "/api/password-reset..",
        "/api/password-reset.%20",
        "/api/password-reset%20.json",
        "/api/password-reset.xml.",
        "/api/password-reset.json?lang=uk",
        "/api/password-reset%20%20",
    ];
    let statuses: Vec<u16> = targets.iter().map(|target| reset(target, VICTIM)).collect();
    assert_acted_within_limit(&app, "password-reset", VICTIM, &statuses);
    assert!(statuses.iter().all(|s| [400, 429].contains(s)), "limited or refused, never forwarded: {statuses:?}");
    t.assert_refused_never_reached(&app);
    // Honest: another account on the suffixed path is served, and counted as the route.
    assert_eq!(reset("/api/password-reset.json", "someone@example.com"), 200);
    assert_eq!(reset(RESET, "someone@example.com"), 200);
    assert_eq!(reset("/api/password-reset.json", "someone@example.com"), 429);
    assert_eq!(app.acts("password-reset", "someone@example.com"), 2);
}
