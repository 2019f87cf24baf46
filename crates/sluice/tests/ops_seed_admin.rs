//! The default service (`sluice serve`, no configuration) is observable like the gateway:
//! `ADMIN_PORT` starts the admin listener on the loopback interface (status page, metrics,
//! health), decisions are counted under the gateway's names and denials are written as JSON
//! decision lines on stdout. A bad `ADMIN_PORT` is refused by name.

mod ops_support;

use ops_support::{Running, SLUICE, Scraped, get, listening};

fn seed(env: &[(&str, &str)]) -> Running {
    let mut all = vec![("PORT", "0"), ("RATE_LIMIT_CAPACITY", "2"), ("RATE_LIMIT_REFILL_PER_SECOND", "0.001")];
    all.extend_from_slice(env);
    Running::start(&["serve"], &all)
}

#[test]
fn admin_port_serves_the_seed_services_status_metrics_and_decision_lines() {
    let sluice = seed(&[("ADMIN_PORT", "0")]);
    let service = listening(&sluice.line_with("sluice listening on"));
    let admin_line = sluice.line_with("sluice admin listening on");
    assert!(admin_line.contains("http://127.0.0.1:"), "loopback only: {admin_line}");
    let admin = listening(&admin_line);

    let statuses: Vec<u16> = (0..3).map(|_| get(service, "/api/hello").status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(get(service, "/health").status, 200);

    let m = Scraped::from(admin);
    let hello = |outcome| {
        let labels =
            [("route", "/api/hello"), ("policy", "per-ip"), ("algorithm", "token-bucket"), ("outcome", outcome)];
        m.must("sluice_decisions_total", &labels)
    };
    assert_eq!((hello("allowed"), hello("denied")), (2.0, 1.0));
    assert_eq!(m.must("sluice_requests_total", &[("route", "unmatched"), ("outcome", "unlimited")]), 1.0);
    assert_eq!(m.must("sluice_decision_duration_seconds_count", &[("store", "memory")]), 3.0);
    assert_eq!(m.must("sluice_keys", &[("policy", "per-ip")]), 1.0);

    let line = &sluice.json_lines("decision", "denied", 1)[0];
    assert_eq!((line["route"].as_str(), line["status"].as_u64()), (Some("/api/hello"), Some(429)));
    assert_eq!((line["key_type"].as_str(), line["target"].as_str()), (Some("ip"), Some("sluice::decision")));
    assert!(!line.to_string().contains("127.0.0.1"), "a raw address in a decision line: {line}");

    let status: serde_json::Value = serde_json::from_str(&get(admin, "/status.json").body).unwrap();
    assert_eq!((status["service"].as_str(), status["store"]["kind"].as_str()), (Some("seed"), Some("memory")));
    assert_eq!(status["top_denied"][0]["key_hash"], line["key_hash"]);
    let page = get(admin, "/");
    assert!(page.head.contains("content-security-policy: default-src 'none'"), "{}", page.head);
    assert_eq!(get(admin, "/readyz").status, 200);
    // The admin endpoints are not on the service's port.
    assert_eq!(get(service, "/metrics").status, 404);
}

#[test]
fn a_bad_admin_port_is_refused_by_name() {
    for bad in ["http", "70000", "0.0.0.0:9090"] {
        let out = std::process::Command::new(SLUICE)
            .arg("serve")
            .env("PORT", "0")
            .env("ADMIN_PORT", bad)
            .output()
            .expect("sluice runs");
        assert!(!out.status.success(), "ADMIN_PORT={bad} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("ADMIN_PORT=\"{bad}\" is invalid")), "{err}");
    }
    // Empty is unset: the service starts without an admin listener.
    let sluice = seed(&[("ADMIN_PORT", " ")]);
    let service = listening(&sluice.line_with("sluice listening on"));
    assert_eq!(get(service, "/api/hello").status, 200);
}
