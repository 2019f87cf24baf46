//! `deploy/grafana/sluice.json` is a dashboard Grafana can import (its structure, its layout,
//! its variables, and PromQL that promtool parses), and every metric it — and every alert of
//! `deploy/prometheus/alerts.yml` — names is one that a running sluice really exports: the
//! binary is started on a real Redis with `on_error = "local"`, the configuration under which
//! every family of sluice appears (memory keys through the local fallback, the breaker, the
//! deny cache, store errors and failure-mode answers), and its `/metrics` scraped.

mod ops_support;
#[cfg(feature = "external-programs")]
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::collections::BTreeSet;

use ops_support::root;
#[cfg(feature = "external-programs")]
use ops_support::{Running, Scraped, get, redis_gateway, require, run};
#[cfg(feature = "external-programs")]
use redis_support::RedisServer;
use serde_json::Value;
#[cfg(feature = "external-programs")]
use support::TempDir;

fn dashboard() -> Value {
    let text = std::fs::read_to_string(root().join("deploy/grafana/sluice.json")).expect("the dashboard");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("sluice.json is not JSON: {e}"))
}

/// Every PromQL expression of the dashboard: panel targets and query variables.
fn expressions(d: &Value) -> Vec<String> {
    let mut out: Vec<String> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("a target's expr").to_owned())
        .collect();
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push(q.to_owned());
        }
    }
    out
}

/// The metric names an expression reads: sluice's and the process's, whose prefixes no
/// function, keyword or label of PromQL shares.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find(|c: char| ident(c)) {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !ident(c)).unwrap_or(tail.len());
        let word = &tail[..end];
        let is_label_value = rest[..i].ends_with('"');
        if !is_label_value && (word.starts_with("sluice_") || word.starts_with("process_")) {
            names.insert(word.to_owned());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_is_a_grafana_dashboard() {
    let d = dashboard();
    assert_eq!(d["title"], "sluice");
    let uid = d["uid"].as_str().expect("a uid");
    assert!(uid.len() <= 40 && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{uid}");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion");
    assert!(d["time"]["from"].is_string() && d["refresh"].is_string());

    let vars: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| v["name"].as_str().expect("a variable's name").to_owned())
        .collect();
    assert_eq!(vars, ["datasource", "instance", "route"].map(String::from).into());
    let builtins = ["__rate_interval", "__interval", "__range"];

    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    let mut boxes: Vec<(u64, u64, u64, u64, &str)> = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("a title");
        assert!(ids.insert(p["id"].as_u64().expect("a numeric id")), "duplicate id in {title}");
        let kind = p["type"].as_str().expect("a type");
        assert!(["row", "timeseries", "state-timeline", "stat", "table"].contains(&kind), "{title}: {kind}");
        let g = &p["gridPos"];
        let (x, y, w, h) =
            (g["x"].as_u64().unwrap(), g["y"].as_u64().unwrap(), g["w"].as_u64().unwrap(), g["h"].as_u64().unwrap());
        assert!(w > 0 && h > 0 && x + w <= 24, "{title} does not fit the 24-column grid");
        for (bx, by, bw, bh, other) in &boxes {
            let apart = x + w <= *bx || *bx + bw <= x || y + h <= *by || *by + bh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((x, y, w, h, title));
        if kind == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        let refs: BTreeSet<&str> = targets.iter().map(|t| t["refId"].as_str().expect("a refId")).collect();
        assert_eq!(refs.len(), targets.len(), "{title}: refIds repeat");
    }
    for expr in expressions(&d) {
        for (open, close) in [('(', ')'), ('{', '}'), ('[', ']')] {
            assert_eq!(expr.matches(open).count(), expr.matches(close).count(), "unbalanced {open}{close}: {expr}");
        }
        for var in expr.split('$').skip(1) {
            let name: String = var.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(vars.contains(&name) || builtins.contains(&name.as_str()), "${name} is not defined: {expr}");
        }
    }
    // What the dashboard is for.
    let all = expressions(&d).join("\n");
    for needed in [
        "sum by (outcome) (rate(sluice_decisions_total",
        "sum by (route, policy, outcome) (rate(sluice_decisions_total",
        "sum by (policy) (rate(sluice_decisions_total{instance=~\"$instance\", route=~\"$route\", outcome=\"denied\"}",
        "histogram_quantile(0.99, sum by (store, le) (rate(sluice_store_latency_seconds_bucket",
        "sluice_keys",
        "sluice_evictions_total",
        "sluice_breaker_open",
        "sluice_in_flight",
    ] {
        assert!(all.contains(needed), "no query with {needed}");
    }
}

#[cfg(feature = "external-programs")]
#[test]
fn the_dashboards_promql_parses() {
    require("promtool", "--version", "apt-get install prometheus (Debian's package provides promtool)");
    // Each query as a recording rule, Grafana's variables replaced as Grafana would.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in expressions(&dashboard()).iter().enumerate() {
        if expr.starts_with("label_values(") {
            continue; // a Grafana function, not PromQL
        }
        let expr = expr.replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$route", ".*");
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {}\n", serde_json::json!(expr)));
    }
    let dir = TempDir::new("dashboard-rules");
    let path = dir.write("dashboard.yml", &rules);
    let (ok, out, err) = run("promtool", &["check", "rules", &path]);
    assert!(ok, "promtool refused a dashboard query:\n{out}{err}\n{rules}");
}

#[cfg(feature = "external-programs")]
#[test]
fn every_metric_the_dashboard_and_the_alerts_name_is_exported() {
    let redis = RedisServer::start();
    let dir = TempDir::new("dashboard-scrape");
    let config = redis_gateway(&redis.url(), "local");
    let path = dir.write("sluice.toml", &config);
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let (gateway, admin) = sluice.gateway_addresses();
    let admin = admin.expect("the admin listener");
    let statuses: Vec<u16> = (0..3).map(|_| get(gateway, "/api/hello").status).collect();
    assert_eq!(statuses, [200, 200, 429]);

    let mut exported = Scraped::from(admin).sample_names();
    // The snapshot's metrics come from a memory store that writes one.
    let snapshotting = dir.write(
        "memory.toml",
        "[server]\nlisten = \"127.0.0.1:0\"\nkey_secret = \"the key secret of the dashboard test\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n[store]\nsnapshot = \"state\"\n",
    );
    let memory = Running::start(&["serve", "--config", &snapshotting], &[]);
    let (_, memory_admin) = memory.gateway_addresses();
    exported.extend(Scraped::from(memory_admin.expect("the admin listener")).sample_names());
    let alerts = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let alert_exprs: Vec<&str> = alerts.lines().filter(|l| l.contains("sluice_")).collect();
    let mut named = BTreeSet::new();
    for expr in expressions(&dashboard()).iter().map(String::as_str).chain(alert_exprs) {
        named.extend(metric_names(expr));
    }
    assert!(named.len() >= 15, "{named:?}");
    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "named but not exported: {missing:?}\nexported: {exported:?}");
}

#[test]
fn metric_names_are_found_and_label_values_are_not() {
    let got = metric_names(
        r#"sum by (le) (rate(sluice_store_latency_seconds_bucket{store="sluice_x"}[5m])) / process_open_fds"#,
    );
    assert_eq!(got, ["process_open_fds", "sluice_store_latency_seconds_bucket"].map(String::from).into());
}
