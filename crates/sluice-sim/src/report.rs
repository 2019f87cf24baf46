//! The side-by-side report: a table for people, JSON for programs, CSV for spreadsheets.

use std::fmt::Write as _;

use serde::Serialize;
use sluice_core::{NANOS_PER_SEC, Nanos};

use sluice_core::format_duration;

use crate::generator::Generator;
use crate::scenario::Scenario;
use crate::simulation::{KeyScope, Limits, RunResults};

/// Where the arrivals came from and with which knobs, for the report's header.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The generated scenario, if any.
    pub scenario: Option<Scenario>,
    /// The arrivals file, if the arrivals were read from one.
    pub arrivals_file: Option<String>,
    /// Seed of a generated scenario.
    pub seed: Option<u64>,
    /// The generator of a generated scenario.
    pub generator: Option<Generator>,
    /// Rate of a generated scenario.
    pub rps: Option<f64>,
    /// Clients of a generated `nat` or `botnet`.
    pub clients: Option<usize>,
    /// Length of the run: the scenario's duration, or the last arrival of a file.
    pub duration: Nanos,
    /// The limits the algorithms ran with.
    pub limits: Limits,
}

/// One row of results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultRow {
    /// The algorithm (or policy) name.
    pub algorithm: String,
    /// What it counted by: `ip`, `account` or `global`.
    pub keyed_by: String,
    /// Admitted requests.
    pub allowed: u64,
    /// Rejected requests.
    pub rejected: u64,
    /// `allowed / requests` (0 when there were no requests).
    pub allowed_ratio: f64,
    /// The most admitted requests in any interval of one window length.
    pub max_in_window: u64,
}

/// The parameters block of the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parameters {
    /// Requests per window (window algorithms).
    pub limit: u64,
    /// The window, as written on the command line (`1s`).
    pub window: String,
    /// The window in seconds.
    pub window_seconds: f64,
    /// Bucket capacity.
    pub capacity: u64,
    /// Bucket refill (token) and drain (leaky) rate per second.
    pub refill_per_second: f64,
    /// Requests per second of a generated scenario (per client for `nat` and `botnet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rps: Option<f64>,
    /// Clients of `nat` and `botnet`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<usize>,
}

/// The whole report. Serialised, it starts `{"requests": N, "results": [...]` and adds the
/// scenario, seed, duration and parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Requests simulated.
    pub requests: u64,
    /// One row per algorithm and key.
    pub results: Vec<ResultRow>,
    /// The scenario, when generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// The arrivals file, when read from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals_file: Option<String>,
    /// The seed, when generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The generator the seed seeded (`python` or `xoshiro`), when generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// Length of the run in seconds.
    pub duration_seconds: f64,
    /// The knobs.
    pub parameters: Parameters,
}

impl Report {
    /// Summarises `run` for `info`.
    pub fn new(run: &RunResults, info: &RunInfo) -> Self {
        let results = run
            .lanes
            .iter()
            .map(|l| ResultRow {
                algorithm: l.lane.algorithm.clone(),
                keyed_by: l.lane.scope.name().to_string(),
                allowed: l.admitted,
                rejected: l.rejected,
                allowed_ratio: l.allowed_ratio(),
                max_in_window: l.max_in_window,
            })
            .collect();
        let secs = |n: Nanos| n as f64 / NANOS_PER_SEC as f64;
        Self {
            requests: run.times.len() as u64,
            results,
            scenario: info.scenario.map(|s| s.name().to_string()),
            arrivals_file: info.arrivals_file.clone(),
            seed: info.seed,
            generator: info.generator.map(|g| g.name().to_string()),
            duration_seconds: secs(info.duration),
            parameters: Parameters {
                limit: info.limits.limit,
                window: format_duration(info.limits.window),
                window_seconds: secs(info.limits.window),
                capacity: info.limits.capacity,
                refill_per_second: info.limits.refill,
                rps: info.rps,
                clients: info.clients,
            },
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain data with finite numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// CSV with a header line: `algorithm,keyed_by,allowed,rejected,allowed_ratio,max_in_window`.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("algorithm,keyed_by,allowed,rejected,allowed_ratio,max_in_window\n");
        for r in &self.results {
            let _ = writeln!(
                s,
                "{},{},{},{},{:.6},{}",
                csv_field(&r.algorithm),
                r.keyed_by,
                r.allowed,
                r.rejected,
                r.allowed_ratio,
                r.max_in_window
            );
        }
        s
    }

    /// One line describing the run: source, requests, length, rate, seed and generator.
    pub fn headline(&self) -> String {
        let p = &self.parameters;
        let mut s = match (&self.scenario, &self.arrivals_file) {
            (Some(sc), _) => sc.clone(),
            (None, Some(f)) => f.clone(),
            (None, None) => "arrivals".to_string(),
        };
        let _ = write!(s, ": {} requests in {}", self.requests, format_duration_secs(self.duration_seconds));
        if let Some(rps) = p.rps {
            let _ = write!(s, " at {rps} req/s");
            if let Some(c) = p.clients {
                let _ = write!(s, " from each of {c} clients");
            }
        }
        if let Some(seed) = self.seed {
            let _ = write!(s, ", seed {seed}");
        }
        if let Some(g) = &self.generator {
            let _ = write!(s, " ({g} generator)");
        }
        s
    }

    /// An aligned table under two lines describing the run and the limits.
    pub fn to_table(&self) -> String {
        let p = &self.parameters;
        let mut s = self.headline();
        let _ = writeln!(
            s,
            "\nwindows: {} per {}; buckets: capacity {}, {} per second",
            p.limit, p.window, p.capacity, p.refill_per_second
        );
        let show_key = self.results.iter().any(|r| r.keyed_by != KeyScope::Global.name())
            || self.results.iter().map(|r| &r.keyed_by).collect::<std::collections::HashSet<_>>().len() > 1;
        let mut header = vec!["algorithm".to_string()];
        if show_key {
            header.push("keyed by".into());
        }
        header.extend(["allowed", "rejected", "allowed %"].map(String::from));
        header.push(format!("max in {}", p.window));
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| {
                let mut row = vec![r.algorithm.clone()];
                if show_key {
                    row.push(r.keyed_by.clone());
                }
                row.push(r.allowed.to_string());
                row.push(r.rejected.to_string());
                row.push(format!("{:.2}%", r.allowed_ratio * 100.0));
                row.push(r.max_in_window.to_string());
                row
            })
            .collect();
        let mut table = vec![header];
        table.extend(rows);
        let text_columns = if show_key { 2 } else { 1 };
        s.push_str(&aligned(&table, |i| i < text_columns));
        s
    }
}

fn format_duration_secs(secs: f64) -> String {
    format_duration((secs * NANOS_PER_SEC as f64).round() as Nanos)
}

/// The rows as a table, two spaces between columns, one line each: the columns for which
/// `left` is true left-aligned (text), the others right-aligned (numbers).
pub(crate) fn aligned(rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| if left(i) { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// Quotes a CSV field when it holds a comma, a quote or a line break.
pub(crate) fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")).into() } else { s.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrival::Arrival;
    use crate::simulation::{Quiet, Simulation};

    fn report(scopes: &[KeyScope]) -> Report {
        let sim = Simulation::new(&["fixed-window", "token-bucket"], scopes, &Limits::default()).unwrap();
        let arrivals: Vec<Arrival> = (0..25).map(|i| Arrival::keyed(i, "a,b", "x")).collect();
        let out = sim.run(&arrivals, &mut Quiet).unwrap();
        let info = RunInfo {
            scenario: None,
            arrivals_file: Some("t.txt".into()),
            seed: None,
            generator: None,
            rps: None,
            clients: None,
            duration: NANOS_PER_SEC,
            limits: Limits::default(),
        };
        Report::new(&out, &info)
    }

    #[test]
    fn json_has_the_promised_shape() {
        let v: serde_json::Value = serde_json::from_str(&report(&[KeyScope::Global]).to_json()).unwrap();
        assert_eq!(v["requests"], 25);
        assert_eq!(v["results"][0]["algorithm"], "fixed-window");
        assert_eq!(v["results"][0]["allowed"], 10);
        assert_eq!(v["results"][0]["rejected"], 15);
        assert_eq!(v["results"][0]["allowed_ratio"], 0.4);
        assert_eq!(v["results"][0]["max_in_window"], 10);
        assert_eq!(v["results"][1]["allowed"], 20);
        assert_eq!(v["parameters"]["window"], "1s");
        assert!(v.get("seed").is_none());
        assert!(v.get("generator").is_none());
    }

    #[test]
    fn csv_and_table_hold_the_same_numbers() {
        let r = report(&[KeyScope::Global]);
        let csv = r.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "algorithm,keyed_by,allowed,rejected,allowed_ratio,max_in_window");
        assert_eq!(lines[1], "fixed-window,global,10,15,0.400000,10");
        assert_eq!(lines[2], "token-bucket,global,20,5,0.800000,20");
        let table = r.to_table();
        assert!(table.starts_with("t.txt: 25 requests in 1s\n"), "{table}");
        assert!(table.contains("algorithm     allowed  rejected  allowed %  max in 1s\n"), "{table}");
        assert!(table.contains("fixed-window       10        15     40.00%         10\n"), "{table}");
        assert!(!table.contains("keyed by"));
        assert!(report(&[KeyScope::Ip, KeyScope::Account]).to_table().contains("keyed by"));
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
