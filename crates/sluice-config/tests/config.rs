//! The configuration contract: the example parses, and every error names file, line, field.

use sluice_config::{HeaderStyle, KeySource, OnDeny, PathPattern, PathShape, StoreConfig, parse};
use sluice_store::{FoldSize, WhenFull};

const EXAMPLE: &str = include_str!("../../../examples/gateway.toml");

#[test]
fn the_documented_example_parses_into_the_expected_model() {
    let cfg = parse("gateway.toml", EXAMPLE).unwrap();
    assert_eq!(cfg.server.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(cfg.server.trusted_proxies.len(), 2);
    assert_eq!(cfg.server.forwarded_header, sluice_config::ForwardedHeader::XForwardedFor);
    assert_eq!(cfg.server.headers, vec![HeaderStyle::Draft6, HeaderStyle::Ietf]);
    assert_eq!(cfg.server.on_deny, OnDeny::Respond);
    assert_eq!(cfg.upstream.as_ref().unwrap().url, "http://127.0.0.1:9000");
    assert_eq!(
        cfg.policies.iter().map(|p| p.policy.name()).collect::<Vec<_>>(),
        ["sliding-log", "token-bucket", "leaky-bucket"]
    );
    let reset = &cfg.routes[0];
    assert_eq!(reset.path, PathPattern { shape: PathShape::Path("/api/password-reset".into()), exact: false });
    assert!(reset.matches("POST", "/api/password-reset"));
    assert!(!reset.matches("GET", "/api/password-reset"));
    // Spellings an upstream would serve as the same resource cannot slip past the limit.
    for variant in [
        "/api/password-reset/",
        "//api/password-reset",
        "/api/./password-reset",
        "/API/Password-Reset",
        "/api/x/../password-reset",
        "/api/%70assword-reset",
    ] {
        assert!(reset.matches("POST", variant), "{variant}");
    }
    assert!(!reset.matches("POST", "/api/password-resets"));
    assert_eq!(reset.limits[0].key.parts, vec![vec![KeySource::Json("/email".into())]]);
    assert!(reset.limits[0].key.needs_body());
    assert_eq!(reset.limits[1].policy, 1);
    let search = &cfg.routes[1];
    assert_eq!(search.limits[0].key.parts.len(), 2);
    assert_eq!(search.limits[0].key.to_string(), "header:x-api-key|ip + route");
    let prefix = &cfg.routes[2];
    assert!(prefix.matches("GET", "/api/anything/else"));
    assert!(prefix.matches("GET", "/api"));
    assert!(!prefix.matches("GET", "/apix"));
    assert_eq!(
        cfg.store,
        StoreConfig::Memory { max_keys: 1_000_000, shards: 64, when_full: WhenFull::default(), snapshot: None }
    );
}

fn error_of(text: &str) -> String {
    parse("bad.toml", text).unwrap_err().to_string()
}

#[test]
fn errors_name_file_line_and_field() {
    let e = error_of("[[policy]]\nname = \"a\"\nalgorithm = \"sliding-log\"\nlimit = 3\nwindow = \"15 minutes\"\n");
    assert!(e.starts_with("bad.toml:5: policy[0].window:"), "{e}");

    let e = error_of("[[policy]]\nname = \"a\"\nalgorithm = \"token-bucket\"\ncapacity = 3\nrefill_per_second = -1\n");
    assert!(e.starts_with("bad.toml:5: policy[0].refill_per_second:"), "{e}");

    let e = error_of(
        "[[policy]]\nname = \"a\"\nalgorithm = \"token-bucket\"\ncapacity = 3\nlimit = 5\nrefill_per_second = 1\n",
    );
    assert!(e.starts_with("bad.toml:5: policy[0].limit: does not apply to token-bucket"), "{e}");

    let e = error_of("[[policy]]\nname = \"a\"\nalgorithm = \"gcra\"\n");
    assert!(e.starts_with("bad.toml:3: policy[0].algorithm: unknown algorithm `gcra`"), "{e}");

    let e = error_of("[server]\nlisten = \"8080\"\n");
    assert!(e.starts_with("bad.toml:2: server.listen:"), "{e}");

    let e = error_of("[server]\n\ntrusted_proxies = [\"10.0.0.0/33\"]\n");
    assert!(e.starts_with("bad.toml:3: server.trusted_proxies:"), "{e}");

    let e = error_of("[server]\nlistn = \"0.0.0.0:1\"\n");
    assert!(e.starts_with("bad.toml:2: server.listn: unknown field `listn`"), "{e}");

    let e = error_of("[[route]]\npath = \"/x\"\nlimits = [{ policy = \"nope\", key = \"ip\" }]\n");
    assert!(e.starts_with("bad.toml:3: route[0].limits[0]: no policy named `nope`"), "{e}");

    let e = error_of(
        "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1s\"\n[[route]]\npath = \"/x\"\nlimits = [{ policy = \"p\", key = \"cookie:sid\" }]\n",
    );
    assert!(e.starts_with("bad.toml:8: route[0].limits[0]: unknown key part `cookie`"), "{e}");

    let e = error_of("[store]\nkind = \"redis\"\n");
    assert!(e.starts_with("bad.toml:2: store.url:") || e.starts_with("bad.toml:1: store.url:"), "{e}");

    let e = error_of("[[policy]]\nname = \"a\"\nalgorithm = \"sliding-log\"\nlimit = 100000001\nwindow = \"1s\"\n");
    assert!(e.starts_with("bad.toml:4: policy[0].limit:") && e.contains("use sliding-window"), "{e}");

    let e = error_of("[server]\nforwarded_header = \"x-real-ip\"\n");
    assert!(e.starts_with("bad.toml:2: server.forwarded_header:"), "{e}");

    let e = error_of("this is = = not toml");
    assert!(e.starts_with("bad.toml:1: (syntax):"), "{e}");
}

/// Type errors, unknown and missing fields come from serde: each names the field's whole path,
/// in tables, arrays of tables and inline tables alike.
#[test]
fn serde_errors_name_the_field_path() {
    let policy = "[[policy]]\nname = \"a\"\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1s\"\n";
    for (text, expected) in [
        (
            "[server]\nlisten = \"127.0.0.1:1\"\nmax_in_flight = \"ten\"\n".to_string(),
            "bad.toml:3: server.max_in_flight: invalid type: string \"ten\", expected usize",
        ),
        (
            format!("{policy}[[policy]]\nname = \"b\"\nalgorithm = \"fixed-window\"\nlimit = \"3\"\n"),
            "bad.toml:9: policy[1].limit: invalid type: string \"3\", expected u64",
        ),
        (format!("{policy}[[policy]]\nname = \"b\"\n"), "bad.toml:6: policy[1].algorithm: missing field `algorithm`"),
        (
            format!(
                "{policy}[[route]]\npath = \"/x\"\n[[route]]\npath = \"/y\"\nlimits = [{{ policy = \"a\", key = \"ip\" }}, {{ policy = \"a\", key = \"ip\", cost = \"x\" }}]\n"
            ),
            "bad.toml:10: route[1].limits[1].cost: invalid type: string \"x\", expected u64",
        ),
        (
            "[[route]]\npath = \"/x\"\nlimits = [\n  { policy = \"a\" },\n]\n".to_string(),
            "bad.toml:4: route[0].limits[0].key: missing field `key`",
        ),
        (
            "[[route]]\npath = \"/x\"\nlimits = [{ policy = \"a\", key = 3 }]\n".to_string(),
            "bad.toml:3: route[0].limits[0].key: expected a key: one string (`\"header:x-api-key|ip\"`) or an array of parts",
        ),
        (
            "[[route]]\npath = \"/x\"\nlimits = [{ key = \"ip\", policy_by = \"user\", policies = { pro = 1 } }]\n"
                .to_string(),
            "bad.toml:3: route[0].limits[0].policies.pro: invalid type: integer `1`, expected a string",
        ),
        (
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\", 3]\n".to_string(),
            "bad.toml:2: server.trusted_proxies[1]: invalid type: integer `3`, expected a string",
        ),
        (
            "[identity.jwt]\nleeway = 5\n".to_string(),
            "bad.toml:2: identity.jwt.leeway: invalid type: integer `5`, expected a string",
        ),
        (
            "[identity]\njwt = { leeway = 5 }\n".to_string(),
            "bad.toml:2: identity.jwt.leeway: invalid type: integer `5`, expected a string",
        ),
        (
            "[store]\ncluster = \"yes\"\n".to_string(),
            "bad.toml:2: store.cluster: invalid type: string \"yes\", expected a boolean",
        ),
        ("[rls]\nlisten = \"127.0.0.1:1\"\n".to_string(), "bad.toml:1: rls.descriptors: missing field `descriptors`"),
        ("policy = 3\n".to_string(), "bad.toml:1: policy: invalid type: integer `3`, expected a sequence"),
    ] {
        let e = error_of(&text);
        assert_eq!(e, expected, "{text}");
    }
    // What is not TOML at all has no field.
    assert!(error_of("[server]\n[server]\n").starts_with("bad.toml:2: (syntax): duplicate key"));
}

#[test]
fn requests_in_flight_per_client_default_to_a_tenth_of_the_total_within_bounds() {
    let per_client = |server: &str| parse("s.toml", server).unwrap().server.max_in_flight_per_client;
    // A tenth of the default 10 000: ten clients are needed to fill the gateway.
    assert_eq!(per_client(""), 1_000);
    assert_eq!(per_client("[server]\nmax_in_flight = 5000\n"), 500);
    // Not below 64 (a few dozen people behind one address), nor above the total.
    assert_eq!(per_client("[server]\nmax_in_flight = 200\n"), 64);
    assert_eq!(per_client("[server]\nmax_in_flight = 20\n"), 20);
    assert_eq!(per_client("[server]\nmax_in_flight = 20\nmax_in_flight_per_client = 5\n"), 5);
    let e = error_of("[server]\nmax_in_flight = 20\nmax_in_flight_per_client = 0\n");
    assert!(e.starts_with("bad.toml:3: server.max_in_flight_per_client: must be at least 1"), "{e}");
}

#[test]
fn workers_are_one_per_core_unless_set_from_1_to_1024() {
    let workers = |server: &str| parse("s.toml", server).unwrap().server.workers;
    assert_eq!(workers(""), None, "one per core, decided at start");
    assert_eq!(workers("[server]\nworkers = 1\n"), Some(1));
    for n in [0, 1025] {
        let e = error_of(&format!("[server]\nlisten = \"127.0.0.1:8080\"\nworkers = {n}\n"));
        assert!(e.starts_with(&format!("bad.toml:3: server.workers: {n} worker threads: give 1 to 1024")), "{e}");
    }
}

#[test]
fn duplicate_policy_names_and_user_without_header_are_refused() {
    let two = "[[policy]]\nname = \"a\"\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1s\"\n";
    let e = error_of(&format!("{two}{two}"));
    assert!(e.starts_with("bad.toml:7: policy[1].name: duplicate policy name `a`"), "{e}");
    let e = error_of(&format!("{two}[[route]]\npath = \"/x\"\nlimits = [{{ policy = \"a\", key = \"user\" }}]\n"));
    assert!(e.contains("needs `server.user_header`"), "{e}");
}

#[test]
fn leaky_bucket_modes() {
    let base = "[[policy]]\nname = \"l\"\nalgorithm = \"leaky-bucket\"\nrate_per_second = 2\ncapacity = 5\n";
    let cfg = parse("x.toml", &format!("{base}mode = \"shape\"\ndelay = 2\n")).unwrap();
    match cfg.policies[0].policy {
        sluice_core::Policy::LeakyBucket(lb) => assert_eq!(lb.mode(), sluice_core::LeakMode::Shape { delay: 2 }),
        ref other => panic!("{other:?}"),
    }
    let e = error_of(&format!("{base}delay = 2\n"));
    assert!(e.contains("policy[0].delay: applies only to mode"), "{e}");
    let e = error_of(&format!("{base}mode = \"shape\"\ndelay = 5\n"));
    assert!(e.contains("policy[0].delay"), "{e}");
}

const REDIS: &str = "[store]\nkind = \"redis\"\nurl = \"redis://:hunter2-password@127.0.0.1:6379\"\n";

#[test]
fn a_shared_store_needs_a_shared_key_secret_and_an_explicit_failure_mode() {
    // Without a key secret, each instance would draw its own and grant the full limit.
    let e = error_of(&format!("{REDIS}on_error = \"fail-closed\"\n"));
    assert!(e.starts_with("bad.toml:2: server.key_secret: a Redis store is shared"), "{e}");
    // Without a failure mode: the three, one line each.
    let e = error_of(&format!("[server]\nkey_secret = \"0123456789abcdef0123\"\n{REDIS}"));
    assert!(e.starts_with("bad.toml:4: store.on_error: is required with kind = \"redis\""), "{e}");
    for mode in ["on_error = \"fail-closed\"", "on_error = \"fail-open\"", "on_error = \"local\""] {
        assert_eq!(e.lines().filter(|l| l.trim_start().starts_with(mode)).count(), 1, "{mode} in {e}");
    }
    let e = error_of(&format!("[server]\nkey_secret = \"0123456789abcdef0123\"\n{REDIS}on_error = \"open\"\n"));
    assert!(e.starts_with("bad.toml:6: store.on_error: `open` is not a failure mode"), "{e}");
    let ok =
        parse("ok.toml", &format!("[server]\nkey_secret = \"0123456789abcdef0123\"\n{REDIS}on_error = \"local\"\n"));
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn redis_sentinel_names_the_primary_instead_of_urls() {
    let head =
        "[server]\nkey_secret = \"0123456789abcdef0123\"\n[store]\nkind = \"redis\"\non_error = \"fail-closed\"\n";
    let sentinels = "urls = [\"redis://:pw@10.0.0.5:26379/1\", \"redis://:pw@10.0.0.6:26379/1\"]";
    let ok = parse("s.toml", &format!("{head}sentinel = {{ master = \"mymaster\", {sentinels} }}\n")).unwrap();
    let StoreConfig::Redis { urls, cluster, sentinel: Some(sentinel), .. } = ok.store else { panic!("{:?}", ok.store) };
    assert!(urls.is_empty() && !cluster);
    assert_eq!(sentinel.master, "mymaster");
    assert_eq!(sentinel.urls.iter().map(|u| u.expose()).collect::<Vec<_>>()[1], "redis://:pw@10.0.0.6:26379/1");
    assert_eq!(sentinel.urls[0].to_string(), "redis://<redacted>@10.0.0.5:26379/1", "the password never shows");
    // As a table of its own, too.
    let table = format!("{head}[store.sentinel]\nmaster = \"mymaster\"\n{sentinels}\n");
    assert!(matches!(parse("s.toml", &table).unwrap().store, StoreConfig::Redis { sentinel: Some(_), .. }));

    let one = "sentinel = { master = \"m\", urls = [\"redis://10.0.0.5:26379\"] }\n";
    let differ = "urls = [\"redis://:pw@a:26379\", \"redis://b:26379\"]";
    for (text, expected) in [
        // Mutually exclusive with the servers themselves: the file, the line and the field.
        (
            format!("{head}url = \"redis://10.0.0.5:6379\"\n{one}"),
            "bad.toml:7: store.sentinel: `url` is set too: give the Sentinels or the servers",
        ),
        (format!("{head}{one}urls = [\"redis://10.0.0.5:6379\"]\n"), "bad.toml:6: store.sentinel: `urls` is set too"),
        (format!("{head}{one}cluster = true\n"), "bad.toml:6: store.sentinel: `cluster` is set too"),
        // Its own fields.
        (
            format!("{head}sentinel = {{ urls = [\"redis://10.0.0.5:26379\"] }}\n"),
            "bad.toml:6: store.sentinel.master: is required",
        ),
        (
            format!("{head}sentinel = {{ master = \"my master\", urls = [\"redis://a:26379\"] }}\n"),
            "bad.toml:6: store.sentinel.master: `my master` is not a name",
        ),
        (
            format!("{head}[store.sentinel]\nmaster = \"m\"\nurls = []\n"),
            "bad.toml:8: store.sentinel.urls: is required",
        ),
        (
            format!("{head}[store.sentinel]\nmaster = \"m\"\nurls = [\"rediss://a:26379\"]\n"),
            "bad.toml:8: store.sentinel.urls: `rediss://a:26379` must start with redis://",
        ),
        (
            format!("{head}[store.sentinel]\nmaster = \"m\"\n{differ}\n"),
            "bad.toml:8: store.sentinel.urls: every Sentinel URL must carry the same user",
        ),
        // Not for the memory store.
        (
            "[store]\nsentinel = { master = \"m\", urls = [\"redis://a:26379\"] }\n".to_string(),
            "bad.toml:2: store.sentinel: applies only to kind = \"redis\"",
        ),
    ] {
        let e = error_of(&text);
        assert!(e.starts_with(expected), "{expected}: {e}");
    }
    // Neither: the message names all three.
    let e = error_of(head);
    assert!(e.contains("store.url: kind = \"redis\" needs `url` (or `urls` for a cluster, or `sentinel`)"), "{e}");
    // A field it does not have.
    let e = error_of(&format!("{head}sentinel = {{ master = \"m\", urls = [\"redis://a:26379\"], port = 1 }}\n"));
    assert!(e.contains("store.sentinel") && e.contains("unknown field `port`"), "{e}");
}

#[test]
fn a_key_secret_comes_from_the_file_from_a_file_or_from_the_environment() {
    let dir = std::env::temp_dir().join(format!("sluice-config-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret"), "a secret kept in its own file\n").unwrap();
    let file = dir.join("sluice.toml");
    std::fs::write(&file, "[server]\nkey_secret_file = \"secret\"\n").unwrap();
    let from_file = sluice_config::load(&file).unwrap();
    // Relative to the configuration's folder; the trailing newline is not part of it.
    assert_eq!(from_file.server.key_secret.unwrap().expose(), "a secret kept in its own file");

    // A variable that is not set is an error naming it (a set one is read by the binary's tests:
    // setting the environment in-process needs `unsafe`, which the workspace forbids).
    let var = format!("SLUICE_TEST_SECRET_{}", std::process::id());
    let from_env_text = format!("[server]\nkey_secret_env = \"{var}\"\n");
    let e = error_of(&from_env_text);
    assert!(e.starts_with("bad.toml:2: server.key_secret_env:") && e.contains(&var), "{e}");

    let e = error_of("[server]\nkey_secret_file = \"/nonexistent/sluice-secret\"\n");
    assert!(e.starts_with("bad.toml:2: server.key_secret_file: cannot read"), "{e}");
    let e = error_of("[server]\nkey_secret = \"0123456789abcdef0123\"\nkey_secret_env = \"X\"\n");
    assert!(e.starts_with("bad.toml:2: server.key_secret: give one of"), "{e}");
    std::fs::write(dir.join("short"), "short\n").unwrap();
    std::fs::write(&file, "[server]\nkey_secret_file = \"short\"\n").unwrap();
    let e = sluice_config::load(&file).unwrap_err().to_string();
    assert!(e.contains("server.key_secret: must be at least 16 characters"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn secrets_never_show_in_debug_output() {
    let text = format!(
        "[server]\nkey_secret = \"the key secret itself\"\n{REDIS}on_error = \"fail-closed\"\n\
         [decision_api]\ntoken = \"the decision api token\"\n"
    );
    let cfg = parse("s.toml", &text).unwrap();
    let shown = format!("{cfg:?}");
    for secret in ["the key secret itself", "the decision api token", "hunter2-password"] {
        assert!(!shown.contains(secret), "{secret} shows in {shown}");
    }
    assert!(shown.contains("<redacted>"));
}

#[test]
fn a_cost_of_nothing_is_refused() {
    let policy = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n";
    let e = error_of(&format!(
        "{policy}[[route]]\npath = \"/x\"\ncost = 0\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n"
    ));
    assert!(e.starts_with("bad.toml:8: route[0].cost: must be at least 1"), "{e}");
    let e = error_of(&format!(
        "{policy}[[route]]\npath = \"/x\"\nlimits = [{{ policy = \"p\", key = \"ip\", cost = 0 }}]\n"
    ));
    assert!(e.starts_with("bad.toml:8: route[0].limits[0]: cost must be at least 1"), "{e}");
}

#[test]
fn the_decision_api_answers_loopback_by_default() {
    let cfg = parse("d.toml", "").unwrap();
    let allow: Vec<String> = cfg.decision_api.allow.iter().map(|n| n.to_string()).collect();
    assert_eq!(allow, ["127.0.0.0/8", "::1/128"]);
    assert_eq!((cfg.decision_api.token, cfg.decision_api.max_cost), (None, None));
    let cfg = parse("d.toml", "[decision_api]\nallow = [\"10.0.0.0/8\", \"192.0.2.7\"]\nmax_cost = 10\n").unwrap();
    assert_eq!(cfg.decision_api.allow.len(), 2);
    assert_eq!(cfg.decision_api.max_cost, Some(10));
    let e = error_of("[decision_api]\n\nallow = [\"everyone\"]\n");
    assert!(e.starts_with("bad.toml:3: decision_api.allow:"), "{e}");
    let e = error_of("[decision_api]\nmax_cost = 0\n");
    assert!(e.starts_with("bad.toml:2: decision_api.max_cost:"), "{e}");
    let e = error_of("[decision_api]\ntoken = \"short\"\n");
    assert!(e.starts_with("bad.toml:2: decision_api.token: must be at least 16"), "{e}");
}

#[test]
fn the_rate_limit_service_watches_its_directory_unless_told_not_to() {
    let rls = |extra: &str| format!("[rls]\ndescriptors = \"ratelimit\"\n{extra}");
    let cfg = parse("r.toml", &rls("")).unwrap();
    assert_eq!(cfg.rls.as_ref().unwrap().watch_interval, Some(2_000_000_000), "2s by default");
    let cfg = parse("r.toml", &rls("watch_interval = \"250ms\"\n")).unwrap();
    assert_eq!(cfg.rls.unwrap().watch_interval, Some(250_000_000));
    let cfg = parse("r.toml", &rls("watch_interval = \"0s\"\n")).unwrap();
    assert_eq!(cfg.rls.unwrap().watch_interval, None, "SIGHUP only");
    let e = error_of(&rls("\nwatch_interval = \"1ms\"\n"));
    assert!(e.starts_with("bad.toml:4: rls.watch_interval: must be at least 100ms"), "{e}");
    let e = error_of(&rls("watch_interval = \"often\"\n"));
    assert!(e.starts_with("bad.toml:3: rls.watch_interval:"), "{e}");
    let e = error_of(&rls("charge = \"some\"\n"));
    assert!(e.starts_with("bad.toml:3: rls.charge:"), "{e}");
}

#[test]
fn a_full_memory_store_folds_by_default_refuses_or_forgets_when_told() {
    let when_full =
        |store: &str| match parse("s.toml", &format!("[store]\nkind = \"memory\"\n{store}")).map(|c| c.store) {
            Ok(StoreConfig::Memory { when_full, .. }) => Ok(when_full),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
    assert_eq!(when_full(""), Ok(WhenFull::Fold(FoldSize::default())));
    assert_eq!(
        when_full("when_full = \"fold\"\nfold_width = 4096\nfold_depth = 2\n"),
        Ok(WhenFull::Fold(FoldSize { width: Some(4096), depth: 2 }))
    );
    // The old default, spelled as before: it evicts, now without loosening.
    assert_eq!(when_full("when_full = \"evict-lru\"\n"), Ok(WhenFull::Fold(FoldSize::default())));
    assert_eq!(when_full("when_full = \"refuse\"\n"), Ok(WhenFull::Refuse));
    assert_eq!(when_full("when_full = \"forget\"\n"), Ok(WhenFull::Forget));
    let e = when_full("when_full = \"lru\"\n").unwrap_err();
    assert!(e.starts_with("s.toml:3: store.when_full:") && e.contains("fold, refuse or forget"), "{e}");
    let e = when_full("when_full = \"refuse\"\nfold_depth = 2\n").unwrap_err();
    assert!(e.starts_with("s.toml:4: store.fold_depth:"), "{e}");
    let e = when_full("fold_depth = 9\n").unwrap_err();
    assert!(e.starts_with("s.toml:3: store.fold_depth:") && e.contains("between 1 and 8"), "{e}");
    let e = when_full("fold_width = 0\n").unwrap_err();
    assert!(e.starts_with("s.toml:3: store.fold_width:"), "{e}");
}

#[test]
fn a_route_matches_format_suffixes_unless_it_is_exact() {
    let policy = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n";
    let cfg = parse(
        "t.toml",
        &format!(
            "{policy}[[route]]\npath = \"/api/password-reset\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n\
             [[route]]\npath = \"/api/items\"\nexact = true\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n"
        ),
    )
    .unwrap();
    let (reset, items) = (&cfg.routes[0], &cfg.routes[1]);
    assert!(!reset.path.exact && items.path.exact);
    assert!(reset.matches("POST", "/api/password-reset.json") && reset.matches("POST", "/API/Password-Reset.XML"));
    assert!(items.matches("GET", "/api/items") && !items.matches("GET", "/api/items.json"));
    let e = error_of(&format!(
        "{policy}[[route]]\npath = \"/x\"\nexact = \"yes\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n"
    ));
    assert!(e.starts_with("bad.toml:8:"), "{e}");
}

#[test]
fn a_route_path_that_requests_could_not_send_is_refused() {
    for (path, why) in [("//api/x", "starts with `//`"), ("/api/x.", "ends in `.`"), ("/api/x%20", "whitespace")] {
        let e = error_of(&format!(
            "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n\
             [[route]]\npath = \"{path}\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n"
        ));
        assert!(e.starts_with("bad.toml:7: route[0].path:") && e.contains(why), "{path}: {e}");
    }
}

#[test]
fn unrouted_requests_pass_unlimited_unless_a_last_route_catches_them_all() {
    let policies = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n\
                    [[policy]]\nname = \"s\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\nshadow = true\n";
    let upstream = "[upstream]\nurl = \"http://127.0.0.1:9000\"\n";
    let api = "[[route]]\npath = \"/api/*\"\nlimits = [{ policy = \"p\", key = \"ip\" }]\n";
    let all = |methods: &str, policy: &str| {
        format!("[[route]]\npath = \"/*\"\n{methods}limits = [{{ policy = \"{policy}\", key = \"ip\" }}]\n")
    };
    let unlimited = |text: &str| parse("t.toml", text).unwrap().passes_unrouted_unlimited();
    // No upstream: sluice answers unrouted requests 404 itself.
    assert!(!unlimited(&format!("{policies}{api}")));
    assert!(unlimited(&format!("{upstream}{policies}{api}")));
    assert!(!unlimited(&format!("{upstream}{policies}{api}{}", all("", "p"))));
    // A catch-all for some methods only, or with a shadow limit only, lets the rest through.
    assert!(unlimited(&format!("{upstream}{policies}{api}{}", all("methods = [\"GET\"]\n", "p"))));
    assert!(unlimited(&format!("{upstream}{policies}{api}{}", all("", "s"))));
    // Forward-auth answers unrouted originals `unlimited` too.
    let fa = "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[forward_auth]\n";
    assert!(unlimited(&format!("{fa}{policies}{api}")));
    assert!(!unlimited(&format!("{fa}{policies}{api}{}", all("", "p"))));
}

#[test]
fn a_policy_is_enforced_hard_soft_or_in_shadow() {
    let policy = |extra: &str| {
        format!("[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n{extra}\n")
    };
    let read = |extra: &str| {
        let c = parse("p.toml", &policy(extra)).unwrap();
        (c.policies[0].shadow, c.policies[0].soft)
    };
    assert_eq!(read(""), (false, false));
    assert_eq!(read("enforce = \"hard\""), (false, false));
    assert_eq!(read("enforce = \"soft\""), (false, true));
    assert_eq!(read("enforce = \"shadow\""), (true, false));
    assert_eq!(read("shadow = true"), (true, false));
    assert_eq!(read("shadow = true\nenforce = \"shadow\""), (true, false));
    let e = error_of(&policy("shadow = true\nenforce = \"soft\""));
    assert!(e.starts_with("bad.toml:6: policy[0].shadow: `shadow = true` is `enforce = \"shadow\"`"), "{e}");
    let e = error_of(&policy("enforce = \"warn\""));
    assert!(e.starts_with("bad.toml:6: policy[0].enforce: `warn` is not one of `hard`"), "{e}");
}

#[test]
fn a_policy_counts_requests_unless_its_unit_or_its_limits_say_otherwise() {
    let with = |unit: &str, cost_from: &str| {
        format!(
            "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n{unit}\n\
             [[route]]\npath = \"/*\"\nlimits = [{{ policy = \"p\", key = \"ip\"{cost_from} }}]\n"
        )
    };
    let unit = |text: &str| parse("u.toml", text).unwrap().policies[0].unit.clone();
    assert_eq!(unit(&with("", "")), None, "requests: the draft's default, not written");
    assert_eq!(unit(&with("", ", cost_from = \"response-bytes\"")).as_deref(), Some("content-bytes"));
    assert_eq!(unit(&with("", ", cost_from = \"response-json:/usage/total_tokens\"")), None);
    assert_eq!(
        unit(&with("unit = \"tokens\"", ", cost_from = \"response-json:/usage/total_tokens\"")).as_deref(),
        Some("tokens")
    );
    // What the file says wins, `requests` included.
    assert_eq!(unit(&with("unit = \"requests\"", ", cost_from = \"response-bytes\"")), None);
    assert_eq!(unit(&with("unit = \"concurrent-requests\"", "")).as_deref(), Some("concurrent-requests"));
    for bad in ["Tokens", "2fa", "to kens", "tokens\\\"", ""] {
        let e = error_of(&with(&format!("unit = \"{bad}\""), ""));
        assert!(e.starts_with("bad.toml:6: policy[0].unit: `"), "{bad}: {e}");
    }
}

#[test]
fn with_redis_check_config_refuses_the_names_the_store_would() {
    let redis = "[server]\nkey_secret = \"a long random secret of 32 chars!\"\n[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\non_error = \"fail-closed\"\n";
    let policy = |name: &str| {
        format!("[[policy]]\nname = \"{name}\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n")
    };
    assert!(parse("r.toml", &format!("{redis}key_prefix = \"app-1.eu/v2\"\n{}", policy("per-ip_v2"))).is_ok());
    let e = error_of(&format!("{redis}key_prefix = \"app:1\"\n"));
    assert!(e.starts_with("bad.toml:7: store.key_prefix: goes into every Redis key verbatim"), "{e}");
    let e = error_of(&format!("{redis}{}", policy("per ip")));
    assert!(e.starts_with("bad.toml:8: policy[0].name: with a Redis store a policy's name goes into"), "{e}");
    // The memory store takes any name.
    assert!(parse("m.toml", &policy("per ip {eu}")).is_ok());
}

#[test]
fn a_route_cannot_read_a_cost_from_response_extensions() {
    let text = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1s\"\n\
                [[route]]\npath = \"/*\"\nlimits = [{ policy = \"p\", key = \"ip\", cost_from = \"response-extension\" }]\n";
    let e = error_of(text);
    assert!(e.contains("route[0].limits[0].cost_from: `response-extension` is for the tower layer"), "{e}");
}

#[test]
fn upstreams_and_cors_are_read_and_their_mistakes_named() {
    const POLICY: &str = "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\n";
    let ok = parse(
        "ok.toml",
        &format!(
            "[[upstreams]]\nname = \"api\"\ntargets = [\"http://10.0.0.1:80\", \"http://10.0.0.2:80\"]\nbalance = \"hash\"\n\
             hash_key = \"header:x-user|ip\"\n\n{POLICY}\n[[route]]\npath = \"/api/*\"\nupstream = \"api\"\n\
             limits = [{{ policy = \"p\", key = \"ip\" }}]\n"
        ),
    )
    .unwrap();
    assert_eq!(ok.routes[0].upstream, Some(0));
    assert_eq!(ok.upstreams[0].targets.len(), 2);
    assert_eq!(ok.upstreams[0].eject, sluice_config::Ejection { after: 3, base: 5_000_000_000, on_5xx: false });

    let e = error_of(&format!(
        "{POLICY}\n[[route]]\npath = \"/x\"\nupstream = \"nope\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n"
    ));
    assert!(e.starts_with("bad.toml:9: route[0].upstream: no `[[upstreams]]` is named `nope` (known: none)"), "{e}");
    let e = error_of("[[upstreams]]\nname = \"a\"\ntargets = []\n");
    assert!(e.starts_with("bad.toml:3: upstreams[0].targets: lists no target"), "{e}");
    let e = error_of("[[upstreams]]\nname = \"a\"\ntargets = [\"http://h:1\"]\nbalance = \"hash\"\n");
    assert!(e.starts_with("bad.toml:4: upstreams[0].balance: `hash` needs `hash_key`"), "{e}");
    let e = error_of(
        "[[upstreams]]\nname = \"a\"\ntargets = [\"http://h:1\"]\nbalance = \"hash\"\nhash_key = \"json:/user\"\n",
    );
    assert!(e.contains("upstreams[0].hash_key: reads what every request carries in its head"), "{e}");
    let e = error_of("[[upstreams]]\nname = \"a\"\ntargets = [\"ftp://h:1\"]\n");
    assert!(e.starts_with("bad.toml:3: upstreams[0].targets: `ftp://h:1` must start with http:// or https://"), "{e}");
    let e = error_of(
        "[[upstreams]]\nname = \"a\"\ntargets = [\"http://h:1\"]\n[[upstreams]]\nname = \"a\"\ntargets = [\"http://h:2\"]\n",
    );
    assert!(e.starts_with("bad.toml:5: upstreams[1].name:"), "{e}");

    let e = error_of("[server.cors]\nallow_origins = [\"https://app.example/\"]\n");
    assert!(e.starts_with("bad.toml:2: server.cors.allow_origins: `https://app.example/` is not an origin"), "{e}");
    let e = error_of("[server.cors]\nallow_origins = [\"null\"]\n");
    assert!(e.contains("`null` is the origin of sandboxed frames"), "{e}");
    let e = error_of("[server.cors]\nallow_origins = [\"*\"]\npreflight = \"charge\"\n");
    assert!(e.starts_with("bad.toml:3: server.cors.preflight:"), "{e}");
    let e = error_of("[access_log]\npath = \"/nonexistent-dir-of-sluice/access.log\"\n");
    assert!(e.starts_with("bad.toml:2: access_log.path:") && e.contains("does not exist"), "{e}");
    let e = error_of("[access_log]\npath = \"-\"\nformat = \"clf\"\n");
    assert!(e.starts_with("bad.toml:3: access_log.format: `clf` is not a format"), "{e}");
}
