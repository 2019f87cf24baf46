//! The descriptor files' errors name the file, the line and the field; unknown keys and bad
//! values are refused; sluice's extensions are checked like the rest.

use sluice_rls::parse_file;

fn err(yaml: &str) -> String {
    parse_file("limits.yaml", yaml).unwrap_err().to_string()
}

const HEAD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n";

#[test]
fn unknown_keys_are_errors_at_their_line() {
    assert_eq!(err("domain: d\ndescriptor: []\n"), "limits.yaml:2: descriptor: unknown key (domain, descriptors)");
    let e = err("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        shadow: true\n");
    assert!(e.starts_with("limits.yaml:6: descriptors[0].descriptors[0].shadow: unknown key"), "{e}");
    let e = err(&format!("{HEAD}      unit: second\n      requests_per_unit: 1\n      burstt: 2\n"));
    assert!(e.starts_with("limits.yaml:7: descriptors[0].rate_limit.burstt: unknown key"), "{e}");
    let e = err(&format!("{HEAD}      unit: second\n      replaces:\n        - nme: x\n"));
    assert!(e.starts_with("limits.yaml:7: descriptors[0].rate_limit.replaces[0].nme: unknown key"), "{e}");
}

#[test]
fn bad_values_are_errors_naming_the_field() {
    let cases = [
        (format!("{HEAD}      unit: fortnight\n      requests_per_unit: 1\n"), "limits.yaml:5: descriptors[0].rate_limit.unit: `fortnight` is not a unit"),
        (format!("{HEAD}      unit: second\n      requests_per_unit: -1\n"), "limits.yaml:6: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295"),
        (format!("{HEAD}      unit: second\n      requests_per_unit: 4294967296\n"), "limits.yaml:6: descriptors[0].rate_limit.requests_per_unit: must be a whole number"),
        (format!("{HEAD}      requests_per_unit: 1\n"), "limits.yaml:5: descriptors[0].rate_limit.unit: is required"),
        (format!("{HEAD}      unlimited: true\n      unit: second\n"), "limits.yaml:6: descriptors[0].rate_limit.unit: an unlimited limit takes no unit"),
        (format!("{HEAD}      unlimited: maybe\n"), "limits.yaml:5: descriptors[0].rate_limit.unlimited: must be true or false"),
        (format!("{HEAD}      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n"), "limits.yaml:7: descriptors[0].rate_limit.algorithm: `gcra` is not one of fixed-window, sliding-log"),
        (format!("{HEAD}      unit: second\n      requests_per_unit: 1\n      burst: 3\n"), "limits.yaml:7: descriptors[0].rate_limit.burst: applies to token-bucket and leaky-bucket only"),
        (format!("{HEAD}      unit: second\n      window: 30s\n"), "limits.yaml:6: descriptors[0].rate_limit.window: give `unit` or `window`, not both"),
        (format!("{HEAD}      window: 30 parsecs\n      requests_per_unit: 1\n"), "limits.yaml:5: descriptors[0].rate_limit.window:"),
        (format!("{HEAD}      unit: second\n      unit_multiplier: 0\n      requests_per_unit: 1\n"), "limits.yaml:6: descriptors[0].rate_limit.unit_multiplier: must be at least 1"),
        (format!("{HEAD}      name: a\n      unit: second\n      replaces:\n        - name: a\n"), "limits.yaml:8: descriptors[0].rate_limit.replaces[0].name: a limit cannot replace itself"),
        (format!("{HEAD}      unit: second\n      replaces:\n        - name: \"\"\n"), "limits.yaml:7: descriptors[0].rate_limit.replaces[0].name: must not be empty"),
        (format!("{HEAD}      unit: second\n      requests_per_unit: 200000\n      algorithm: sliding-log\n"), "limits.yaml:6: descriptors[0].rate_limit.requests_per_unit: a sliding-log limit keeps one timestamp per request"),
        ("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"true\"\n".to_string(), "limits.yaml:4: descriptors[0].shadow_mode: must be true or false"),
        ("domain: d\ndescriptors:\n  - key: k\n    stream_done: yes please\n".to_string(), "limits.yaml:4: descriptors[0].stream_done: must be true or false"),
        ("domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n".to_string(), "limits.yaml:4: descriptors[0].quota_mode: is not supported by sluice"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n".to_string(), "limits.yaml:3: descriptors[0].share_threshold: share_threshold needs a value with `*`"),
        ("domain: d\ndescriptors:\n  - value: v\n".to_string(), "limits.yaml:3: descriptors[0].key: every descriptor needs a key"),
        ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n".to_string(), "limits.yaml:4: descriptors[1].key: duplicate descriptor `k`"),
        ("domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: a_b\n      - key: a\n        value: b\n".to_string(), "limits.yaml:6: descriptors[0].descriptors[1].key: duplicate descriptor `k.a_b`"),
        ("domain: \"\"\n".to_string(), "limits.yaml:1: domain: must not be empty"),
        ("descriptors: []\n".to_string(), "limits.yaml:1: domain: must not be empty"),
        ("".to_string(), "limits.yaml:1: domain: the file has no `domain`"),
        ("- a\n- b\n".to_string(), "limits.yaml:1: (root): must be a mapping"),
        ("domain: d\ndescriptors: {key: k}\n".to_string(), "limits.yaml:2: descriptors: must be a list"),
    ];
    for (yaml, want) in cases {
        let got = err(&yaml);
        assert!(got.starts_with(want), "for\n{yaml}\nwant {want}\n got {got}");
    }
}

#[test]
fn syntax_errors_have_a_line() {
    let e = err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second\n");
    assert!(e.starts_with("limits.yaml:") && e.contains("(syntax)"), "{e}");
}

#[test]
fn envoyproxy_files_load_unchanged() {
    // Every key of the format at once, in the spellings its users write.
    let d = parse_file(
        "all.yaml",
        "---
domain: everything
descriptors:
  - key: generic_key
    value: \"123\"
    shadow_mode: false
    detailed_metric: true
    value_to_metric: true
    metadata:
      owner: team-a
      tags: [x, y]
    rate_limit:
      name: base
      unit: SECOND
      requests_per_unit: 10
  - key: path
    value: /files/*
    share_threshold: true
    quota_mode: false
    rate_limit:
      unit: Minute
      requests_per_unit: 0
      replaces:
        - name: base
  - key: bare
    descriptors:
      - key: nested
        rate_limit:
          unlimited: true
      - key: weekly
        rate_limit: {unit: week, requests_per_unit: 7}
      - key: monthly
        rate_limit: {unit: month, requests_per_unit: 30}
      - key: yearly
        rate_limit: {unit: year, requests_per_unit: 365}
      - key: daily
        rate_limit: {unit: day, requests_per_unit: 1}
      - key: hourly
        rate_limit: {unit: hour, requests_per_unit: 1}
",
    )
    .unwrap();
    assert_eq!(d.domain_names(), ["everything"]);
    assert_eq!(d.limits().len(), 8);
    assert!(d.lookup("everything", &[("generic_key", "123")]).is_some());
    assert!(d.lookup("everything", &[("path", "/files/a")]).is_some());
    assert!(d.lookup("everything", &[("bare", "x"), ("monthly", "y")]).is_some());
}
