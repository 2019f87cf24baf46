//! `[identity.jwt]`, `jwt:` key parts and plan-chosen limits: what parses, and errors that name
//! the file, the line and the field.

use sluice_config::{JwtAlgorithm, KeySource, OnInvalidToken, PlanChoice, TokenSource, parse};

const EXAMPLE: &str = include_str!("../../../examples/plans.toml");

#[test]
fn the_plans_example_parses_into_one_limit_per_plan_and_a_default() {
    let cfg = parse("plans.toml", EXAMPLE).unwrap_or_else(|e| panic!("{e}"));
    let jwt = cfg.identity.jwt.as_ref().unwrap();
    assert_eq!(jwt.keys.len(), 1);
    assert_eq!(jwt.keys[0].algorithm, JwtAlgorithm::Hs256);
    assert_eq!(jwt.token, TokenSource::Header("authorization".into()));
    assert_eq!(jwt.leeway, 30_000_000_000);
    assert_eq!(
        jwt.on_invalid_token,
        OnInvalidToken::Reject,
        "a present token that does not verify is refused by default"
    );
    assert!(!format!("{jwt:?}").contains("change me"), "the secret never shows");
    let limits = &cfg.routes[0].limits;
    let names: Vec<_> = limits.iter().map(|l| cfg.policies[l.policy].name.as_str()).collect();
    assert_eq!(names, ["search-free", "search-pro", "search-anonymous"]);
    let by = KeySource::Jwt("/plan".into());
    let named = vec!["free".to_string(), "pro".to_string()];
    assert_eq!(limits[1].plan, Some(PlanChoice { by: by.clone(), plan: Some("pro".into()), named: named.clone() }));
    assert_eq!(limits[2].plan, Some(PlanChoice { by, plan: None, named }));
    assert_eq!(limits[0].key.parts[0], vec![KeySource::Jwt("/sub".into()), KeySource::Ip]);
    assert_eq!(limits[0].key.to_string(), "jwt:sub|ip");
}

#[test]
fn claims_are_json_pointers_and_need_the_identity_table() {
    let with = |key: &str| {
        format!(
            "[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\n[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 2\nwindow = \"1s\"\n[[route]]\npath = \"/x\"\nlimits = [{{ policy = \"p\", key = \"{key}\" }}]\n"
        )
    };
    let part = |key: &str| parse("t.toml", &with(key)).unwrap().routes[0].limits[0].key.parts[0][0].clone();
    assert_eq!(part("jwt:org_id"), KeySource::Jwt("/org_id".into()));
    assert_eq!(part("jwt:/tenant/id"), KeySource::Jwt("/tenant/id".into()));
    assert_eq!(part("jwt:a/b"), KeySource::Jwt("/a~1b".into()));
    assert_eq!(part("jwt:/tenant/id").to_string(), "jwt:/tenant/id");
    assert_eq!(part("email(jwt:email)"), KeySource::Email(Box::new(KeySource::Jwt("/email".into()))));
    let e =
        parse("t.toml", &with("jwt:").replace("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\n", ""))
            .unwrap_err()
            .to_string();
    assert!(e.contains("route[0].limits[0]: key part `jwt:` needs a claim"), "{e}");
    let without = with("jwt:sub").replace("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\n", "");
    let e = parse("t.toml", &without).unwrap_err().to_string();
    assert!(e.starts_with("t.toml:8: route[0].limits[0]: key part `jwt:sub` needs `[identity.jwt]`"), "{e}");
}

fn error_of(text: &str) -> String {
    parse("bad.toml", text).unwrap_err().to_string()
}

#[test]
fn identity_errors_name_the_field() {
    let e = error_of("[identity.jwt]\nissuer = \"x\"\n");
    assert!(e.starts_with("bad.toml:1: identity.jwt.hs256_secret: [identity.jwt] needs a key"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"short\"\n");
    assert!(e.starts_with("bad.toml:2: identity.jwt.hs256_secret: must be at least 16 characters"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\nhs256_secret_env = \"X\"\n");
    assert!(e.contains("identity.jwt.hs256_secret: give one of"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret_env = \"SLUICE_TEST_UNSET_VARIABLE\"\n");
    assert!(e.contains("identity.jwt.hs256_secret_env: the environment variable"), "{e}");
    let e =
        error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\n\nheader = \"x\"\ncookie = \"s\"\n");
    assert!(e.starts_with("bad.toml:5: identity.jwt.cookie: give `header` or `cookie`"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\nleeway = \"soon\"\n");
    assert!(e.starts_with("bad.toml:3: identity.jwt.leeway:"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\non_invalid_token = \"drop\"\n");
    assert!(e.starts_with("bad.toml:3: identity.jwt.on_invalid_token: `drop` is neither"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\ncache_entries = 0\n");
    assert!(e.starts_with("bad.toml:3: identity.jwt.cache_entries:"), "{e}");
    let e = error_of("[identity.jwt]\njwks_file = \"/nonexistent/sluice/jwks.json\"\n");
    assert!(e.starts_with("bad.toml:2: identity.jwt.jwks_file: cannot read"), "{e}");
    let e = error_of("[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\nalgorithm = \"HS256\"\n");
    assert!(e.contains("unknown field `algorithm`"), "{e}");
}

const POLICIES: &str = "[server]\ntrusted_proxies = [\"10.0.0.1\"]\n[identity.jwt]\nhs256_secret = \"sixteen characters at least\"\n\
[[policy]]\nname = \"free\"\nalgorithm = \"fixed-window\"\nlimit = 2\nwindow = \"1m\"\n\
[[policy]]\nname = \"pro\"\nalgorithm = \"fixed-window\"\nlimit = 10\nwindow = \"1m\"\n[[route]]\npath = \"/x\"\n";

fn limit_error(limit: &str) -> String {
    error_of(&format!("{POLICIES}limits = [{limit}]\n"))
}

#[test]
fn plan_errors_are_precise() {
    let cases = [
        (
            r#"{ key = "ip", policy = "free", policy_by = "jwt:plan", policies = { pro = "pro" }, default_policy = "free" }"#,
            "route[0].limits[0].policy_by: give `policy`, or `policy_by`",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan", policies = { pro = "pro" } }"#,
            "route[0].limits[0].policy_by: needs `default_policy`",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan", default_policy = "free" }"#,
            "route[0].limits[0].policy_by: needs `policies`",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan", policies = {}, default_policy = "free" }"#,
            "route[0].limits[0].policies: must name at least one plan",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan", policies = { pro = "gold" }, default_policy = "free" }"#,
            "route[0].limits[0].policies.pro: no policy named `gold`",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan", policies = { pro = "pro" }, default_policy = "nope" }"#,
            "route[0].limits[0].default_policy: no policy named `nope`",
        ),
        (
            r#"{ key = "ip", cost = 5, policy_by = "jwt:plan", policies = { pro = "pro", free = "free" }, default_policy = "pro" }"#,
            "route[0].limits[0].policies.free: cost 5 exceeds policy `free`'s limit 2",
        ),
        (
            r#"{ key = "ip", policy = "free", policies = { pro = "pro" } }"#,
            "route[0].limits[0].policies: applies only with `policy_by`",
        ),
        (
            r#"{ key = "ip", policy = "free", default_policy = "pro" }"#,
            "route[0].limits[0].default_policy: applies only with `policy_by`",
        ),
        (r#"{ key = "ip" }"#, "route[0].limits[0]: needs `policy`, or `policy_by`"),
        (
            r#"{ key = "ip", policy_by = "ip", policies = { pro = "pro" }, default_policy = "free" }"#,
            "route[0].limits[0].policy_by: `ip`: the plan comes from one of jwt:CLAIM, user, or header:NAME",
        ),
        (
            r#"{ key = "ip", policy_by = "jwt:plan|ip", policies = { pro = "pro" }, default_policy = "free" }"#,
            "route[0].limits[0].policy_by: `jwt:plan|ip`: the plan comes from one of",
        ),
        (
            r#"{ key = "ip", policy_by = "user", policies = { pro = "pro" }, default_policy = "free" }"#,
            "route[0].limits[0]: key part `user` needs `server.user_header`",
        ),
    ];
    for (limit, expected) in cases {
        let e = limit_error(limit);
        assert!(e.contains(expected), "{limit}\n  gave: {e}\n  want: {expected}");
        assert!(e.starts_with("bad.toml:"), "{e}");
    }
    // A plan header with no trusted proxy to set it would be any client's choice.
    let e = error_of(&format!(
        "{}limits = [{{ key = \"ip\", policy_by = \"header:x-plan\", policies = {{ pro = \"pro\" }}, default_policy = \"free\" }}]\n",
        POLICIES.replace("trusted_proxies = [\"10.0.0.1\"]", "")
    ));
    assert!(e.contains("route[0].limits[0].policy_by: `header:x-plan` is believed only from trusted proxies"), "{e}");
    let ok = parse(
        "ok.toml",
        &format!("{POLICIES}limits = [{{ key = \"ip\", policy_by = \"header:X-Plan\", policies = {{ pro = \"pro\" }}, default_policy = \"free\" }}]\n"),
    )
    .unwrap();
    assert_eq!(ok.routes[0].limits[0].plan.as_ref().unwrap().by, KeySource::Header("x-plan".into()));
}
