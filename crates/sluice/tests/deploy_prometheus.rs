//! `deploy/prometheus/alerts.yml`: valid rules (`promtool check rules`) that fire, and only
//! fire, on the series of `deploy/prometheus/tests/alerts_test.yml` (`promtool test rules`).
//! promtool is Debian's `prometheus` package.

mod ops_support;
mod support;

use ops_support::root;
#[cfg(feature = "external-programs")]
use ops_support::{require, run};
#[cfg(feature = "external-programs")]
use support::TempDir;

#[cfg(feature = "external-programs")]
const INSTALL: &str = "apt-get install prometheus (Debian's package provides promtool)";

#[cfg(feature = "external-programs")]
fn promtool(args: &[&str]) -> (bool, String) {
    require("promtool", "--version", INSTALL);
    let (ok, out, err) = run("promtool", args);
    (ok, format!("{out}{err}"))
}

#[cfg(feature = "external-programs")]
#[test]
fn the_alert_rules_are_valid_and_their_tests_pass() {
    let dir = root().join("deploy/prometheus");
    let rules = dir.join("alerts.yml");
    let (ok, out) = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(ok, "promtool check rules failed:\n{out}");
    assert!(out.contains("SUCCESS: 13 rules found"), "{out}");

    let tests = dir.join("tests/alerts_test.yml");
    let (ok, out) = promtool(&["test", "rules", tests.to_str().unwrap()]);
    assert!(ok, "promtool test rules failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_has_a_test_that_sees_it_fire() {
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(root().join("deploy/prometheus/tests/alerts_test.yml")).unwrap();
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert_eq!(alerts.len(), 13);
    for alert in alerts {
        // A test that expects the alert names it, then lists what it expects (not `[]`).
        let firing = tests.split("alertname: ").skip(1).any(|rest| {
            let (name, after) = rest.split_once('\n').unwrap_or((rest, ""));
            name.trim() == alert && after.trim_start().starts_with("exp_alerts:\n")
        });
        assert!(firing, "no test expects {alert} to fire");
    }
}

#[cfg(feature = "external-programs")]
#[test]
fn the_tests_catch_an_alert_on_a_misspelt_metric() {
    // The same tests against rules whose store-error alert reads a metric sluice does not
    // export: it never fires, and promtool says so.
    let dir = TempDir::new("alerts");
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let broken = rules.replacen("rate(sluice_store_errors_total[5m])", "rate(sluice_store_error_total[5m])", 1);
    assert_ne!(broken, rules);
    std::fs::create_dir_all(dir.dir().join("tests")).unwrap();
    dir.write("alerts.yml", &broken);
    let tests = std::fs::read_to_string(root().join("deploy/prometheus/tests/alerts_test.yml")).unwrap();
    let test_file = dir.write("tests/alerts_test.yml", &tests);
    let (ok, out) = promtool(&["test", "rules", &test_file]);
    assert!(!ok, "promtool should fail:\n{out}");
    assert!(out.contains("SluiceStoreErrors"), "{out}");
}
