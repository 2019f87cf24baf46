//! The `[forward_auth]` table: its defaults, and the configurations it refuses (each error
//! naming the file, the line and the field).

use sluice_config::{ForwardAuth, parse};

const ROUTES: &str = r#"
[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 1

[[route]]
path = "/api/*"
limits = [{ policy = "per-ip", key = "ip" }]
"#;

fn with(head: &str) -> String {
    format!("{head}\n{ROUTES}")
}

fn error_of(text: &str) -> String {
    parse("fa.toml", text).expect_err("the configuration is refused").to_string()
}

#[test]
fn forward_auth_is_off_unless_configured_and_defaults_to_v1_authz_and_the_servers_deny_status() {
    assert_eq!(parse("fa.toml", ROUTES).unwrap().forward_auth, None);
    let c =
        parse("fa.toml", &with("[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\ndeny_status = 503\n[forward_auth]\n"))
            .unwrap();
    assert_eq!(c.forward_auth, Some(ForwardAuth { path: "/v1/authz".into(), deny_status: 503 }));
    let c = parse(
        "fa.toml",
        &with("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[forward_auth]\npath = \"/auth/ask\"\ndeny_status = 403\n"),
    )
    .unwrap();
    assert_eq!(c.forward_auth, Some(ForwardAuth { path: "/auth/ask".into(), deny_status: 403 }));
    assert_eq!(c.server.deny_status, 429, "the gateway's own denials keep the server's status");
}

#[test]
fn forward_auth_without_trusted_proxies_is_refused() {
    let e = error_of(&with("[forward_auth]\npath = \"/v1/authz\"\n"));
    assert!(e.starts_with("fa.toml:2: forward_auth.path: "), "{e}");
    assert!(e.contains("server.trusted_proxies"), "{e}");
}

#[test]
fn paths_that_are_not_normal_or_taken_are_refused() {
    let server = "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[forward_auth]\n";
    for (path, says) in [
        ("/V1/Authz", "normal form, `/v1/authz`"),
        ("/v1/authz/", "normal form, `/v1/authz`"),
        ("v1/authz", "normal form, `/v1/authz`"),
        ("/v1/./authz", "normal form, `/v1/authz`"),
        ("/v1%2Fauthz", "is not a path"),
        ("/v1/check", "is taken"),
        ("/", "is taken"),
    ] {
        let e = error_of(&with(&format!("{server}path = \"{path}\"\n")));
        assert!(e.starts_with("fa.toml:4: forward_auth.path: "), "{path}: {e}");
        assert!(e.contains(says), "{path}: {e}");
    }
}

#[test]
fn a_deny_status_that_is_no_error_and_unknown_fields_are_refused() {
    let server = "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[forward_auth]\n";
    for status in [200, 302, 600] {
        let e = error_of(&with(&format!("{server}deny_status = {status}\n")));
        assert_eq!(e, format!("fa.toml:4: forward_auth.deny_status: {status} is not a 4xx or 5xx status"));
    }
    let e = error_of(&with(&format!("{server}paht = \"/v1/authz\"\n")));
    assert!(e.contains("unknown field `paht`"), "{e}");
}
