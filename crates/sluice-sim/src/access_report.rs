//! The report of an access-log run: a table for people, JSON for programs, CSV for
//! spreadsheets. Times are RFC 3339 in UTC; keys are the keyed hashes the gateway's decision
//! logs write.

use std::fmt::Write as _;

use serde::Serialize;
use sluice_core::{Nanos, format_duration};

use crate::access_run::{AccessResults, LimitResults, RouteResults, Span};
use crate::heavy_hitters::HeavyHitter;
use crate::instances::InstancesReport;
use crate::log_time::format_rfc3339;
use crate::report::{aligned, csv_field};

/// Busiest keys shown per limit.
pub const BUSIEST_SHOWN: usize = 5;

/// Which secret keyed the hashes in a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySecret {
    /// The simulation's fixed secret ([`crate::SIMULATION_KEY_SECRET`]): results are the same on
    /// every run, hashes differ from a gateway's.
    Simulation,
    /// `server.key_secret`: the hashes are the gateway's own.
    Configured,
}

/// What the results cannot tell about themselves: the file, the window, the secret, warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessInfo {
    /// The log, as named on the command line.
    pub access_log: String,
    /// `combined` or `json`.
    pub log_format: String,
    /// Whether it was gzip-compressed.
    pub gzip: bool,
    /// The reorder window.
    pub reorder_window: Nanos,
    /// Which secret keyed the hashes.
    pub key_secret: KeySecret,
    /// What the simulation could not do as the gateway would (headers the log lacks, ...).
    pub warnings: Vec<String>,
}

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MalformedLine {
    /// Its number, counting from 1.
    pub line: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// Malformed lines: how many, and the first few.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Malformed {
    /// How many lines could not be read.
    pub lines: u64,
    /// The first of them (at most [`crate::MALFORMED_SHOWN`]).
    pub first: Vec<MalformedLine>,
}

/// A busy key of a limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    /// The keyed hash, 32 hex digits.
    pub key_hash: String,
    /// Requests (an upper bound when `overcount` is not 0).
    pub requests: u64,
    /// Of which denied (a lower bound when `overcount` is not 0).
    pub denied: u64,
    /// At most this many of `requests` are other keys' (0: exact).
    pub overcount: u64,
}

/// One limit of a route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitRow {
    /// The policy.
    pub policy: String,
    /// Its algorithm.
    pub algorithm: String,
    /// How the key is built.
    pub key: String,
    /// A shadow policy: `denied` counts what it would have denied.
    pub shadow: bool,
    /// Requests it decided (absent when the route was not simulated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Requests it admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted: Option<u64>,
    /// Requests it denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<u64>,
    /// Shadow: requests not decided because the enforced limits denied them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_evaluated: Option<u64>,
    /// `denied / requests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_share: Option<f64>,
    /// Shaping: requests admitted with a delay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed: Option<u64>,
    /// Shaping: the longest delay, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<f64>,
    /// When it first denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_denial: Option<String>,
    /// When it last denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_denial: Option<String>,
    /// Its busiest keys, most requests first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_keys: Option<Vec<KeyRow>>,
    /// Whether the busiest keys' counts are exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_keys_exact: Option<bool>,
}

/// One route.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteRow {
    /// Its name.
    pub route: String,
    /// Its path pattern.
    pub path: String,
    /// Whether its requests were simulated.
    pub simulable: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_simulable_because: Option<String>,
    /// Requests that matched it.
    pub requests: u64,
    /// Requests admitted by all its limits (absent when not simulated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted: Option<u64>,
    /// Requests denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<u64>,
    /// Requests the store could not decide (503).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<u64>,
    /// `denied / requests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied_share: Option<f64>,
    /// When a request was first denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_denial: Option<String>,
    /// When a request was last denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_denial: Option<String>,
    /// Its limits.
    pub limits: Vec<LimitRow>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessReport {
    /// The log.
    pub access_log: String,
    /// `combined` or `json`.
    pub log_format: String,
    /// Whether it was gzip-compressed.
    pub gzip: bool,
    /// Lines read.
    pub lines: u64,
    /// Lines read as requests.
    pub requests: u64,
    /// The earliest logged time.
    pub first_request: Option<String>,
    /// The latest logged time.
    pub last_request: Option<String>,
    /// Lines that could not be read.
    pub malformed: Malformed,
    /// Requests that came beyond the reorder window, decided at the then current time.
    pub late: u64,
    /// The reorder window (`2s`).
    pub reorder_window: String,
    /// Requests no route matched (unlimited).
    pub unmatched: u64,
    /// Requests the gateway would refuse (400) before routing: paths upstreams read differently.
    pub refused: u64,
    /// Requests of routes that could not be simulated.
    pub not_simulated: u64,
    /// `simulation` (the fixed secret) or `configured` (`server.key_secret`).
    pub key_secret: String,
    /// Per route, in configuration order.
    pub routes: Vec<RouteRow>,
    /// What the simulation could not do as the gateway would.
    pub warnings: Vec<String>,
    /// With several instances (`--instances`): their prediction against one exact limiter
    /// (the rest of the report is the instances' run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<InstancesReport>,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

fn times(span: &Span) -> (Option<String>, Option<String>) {
    (span.first.map(format_rfc3339), span.last.map(format_rfc3339))
}

fn key_row(h: &HeavyHitter) -> KeyRow {
    KeyRow { key_hash: h.key.to_hex(), requests: h.requests, denied: h.denied, overcount: h.overcount }
}

fn limit_row(l: &LimitResults, simulated: bool) -> LimitRow {
    let (first_denial, last_denial) = times(&l.denials);
    let n = l.requests();
    let on = |v: u64| simulated.then_some(v);
    LimitRow {
        policy: l.info.policy_name.clone(),
        algorithm: l.info.algorithm.clone(),
        key: l.info.key.clone(),
        shadow: l.info.shadow,
        requests: on(n),
        admitted: on(l.admitted),
        denied: on(l.denied),
        not_evaluated: on(l.not_evaluated).filter(|_| l.info.shadow),
        denied_share: simulated.then(|| share(l.denied, n)),
        delayed: on(l.delayed).filter(|&d| d > 0),
        max_delay_seconds: (l.delayed > 0).then(|| l.max_delay as f64 / 1e9),
        first_denial,
        last_denial,
        busiest_keys: simulated.then(|| l.keys.top(BUSIEST_SHOWN).iter().map(key_row).collect()),
        busiest_keys_exact: simulated.then(|| l.keys.exact()),
    }
}

fn route_row(r: &RouteResults) -> RouteRow {
    let simulated = r.info.not_simulable.is_none();
    let (first_denial, last_denial) = times(&r.denials);
    let on = |v: u64| simulated.then_some(v);
    RouteRow {
        route: r.info.name.clone(),
        path: r.info.path.clone(),
        simulable: simulated,
        not_simulable_because: r.info.not_simulable.clone(),
        requests: r.requests,
        admitted: on(r.admitted),
        denied: on(r.denied),
        unavailable: on(r.unavailable),
        denied_share: simulated.then(|| share(r.denied, r.requests)),
        first_denial,
        last_denial,
        limits: r.limits.iter().map(|l| limit_row(l, simulated)).collect(),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl AccessReport {
    /// The report of `results`, described by `info`.
    pub fn new(results: &AccessResults, info: &AccessInfo) -> Self {
        let (first_request, last_request) = times(&results.logged);
        Self {
            access_log: info.access_log.clone(),
            log_format: info.log_format.clone(),
            gzip: info.gzip,
            lines: results.lines,
            requests: results.requests,
            first_request,
            last_request,
            malformed: Malformed {
                lines: results.malformed,
                first: results
                    .malformed_lines
                    .iter()
                    .map(|(line, e)| MalformedLine { line: *line, reason: e.to_string() })
                    .collect(),
            },
            late: results.late,
            reorder_window: format_duration(info.reorder_window),
            unmatched: results.unmatched,
            refused: results.refused,
            not_simulated: results.not_simulated(),
            key_secret: match info.key_secret {
                KeySecret::Simulation => "simulation".into(),
                KeySecret::Configured => "configured".into(),
            },
            routes: results.routes.iter().map(route_row).collect(),
            warnings: info.warnings.clone(),
            instances: None,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Plain data with finite numbers: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// CSV, one line per route and limit:
    /// `route,policy,algorithm,key,shadow,simulated,requests,admitted,denied,denied_share,first_denial,last_denial`
    /// (the counts of a route that was not simulated are empty but `requests`, the route's).
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "route,policy,algorithm,key,shadow,simulated,requests,admitted,denied,denied_share,first_denial,last_denial\n",
        );
        let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        for r in &self.routes {
            for l in &r.limits {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(&r.route),
                    csv_field(&l.policy),
                    l.algorithm,
                    csv_field(&l.key),
                    l.shadow,
                    r.simulable,
                    l.requests.unwrap_or(r.requests),
                    num(l.admitted),
                    num(l.denied),
                    l.denied_share.map(|v| format!("{v:.6}")).unwrap_or_default(),
                    l.first_denial.as_deref().unwrap_or(""),
                    l.last_denial.as_deref().unwrap_or(""),
                );
            }
        }
        s
    }

    /// The first line: the log, its size in lines and requests, the time it covers.
    pub fn headline(&self) -> String {
        let gz = if self.gzip { ", gzip" } else { "" };
        let mut s = format!(
            "{} ({}{gz}): {}, {}",
            self.access_log,
            self.log_format,
            plural(self.lines, "line", "lines"),
            plural(self.requests, "request", "requests")
        );
        if let (Some(a), Some(b)) = (&self.first_request, &self.last_request) {
            let _ = write!(s, " from {a} to {b}");
        }
        s
    }

    /// The table: what was read, then one row per route limit (and per route of several
    /// limits, its requests' outcome), the busiest keys, and the warnings.
    pub fn to_table(&self) -> String {
        let mut s = self.headline();
        s.push('\n');
        let _ = writeln!(s, "malformed lines: {}", self.malformed.lines);
        for m in &self.malformed.first {
            let _ = writeln!(s, "  line {}: {}", m.line, m.reason);
        }
        if self.malformed.lines > self.malformed.first.len() as u64 {
            let _ = writeln!(s, "  ... and {} more", self.malformed.lines - self.malformed.first.len() as u64);
        }
        let _ = writeln!(s, "late lines: {} (reorder window {})", self.late, self.reorder_window);
        let _ = writeln!(s, "unmatched requests: {} (no route: not limited)", self.unmatched);
        if self.refused > 0 {
            let _ = writeln!(s, "refused requests: {} (400: a path upstreams read differently)", self.refused);
        }
        let mut rows = vec![
            [
                "route",
                "policy",
                "algorithm",
                "requests",
                "admitted",
                "denied",
                "denied %",
                "first denial",
                "last denial",
            ]
            .map(String::from)
            .to_vec(),
        ];
        let mut unsimulated = Vec::new();
        for r in &self.routes {
            if let Some(why) = &r.not_simulable_because {
                unsimulated.push(format!(
                    "{}: not simulable ({why}): {} not simulated",
                    r.route,
                    plural(r.requests, "request", "requests")
                ));
                continue;
            }
            let row = |policy: String,
                       algorithm: &str,
                       n: u64,
                       admitted: u64,
                       denied: u64,
                       first: &Option<String>,
                       last: &Option<String>| {
                vec![
                    r.route.clone(),
                    policy,
                    algorithm.to_string(),
                    n.to_string(),
                    admitted.to_string(),
                    denied.to_string(),
                    format!("{:.2}%", share(denied, n) * 100.0),
                    first.clone().unwrap_or_else(|| "-".into()),
                    last.clone().unwrap_or_else(|| "-".into()),
                ]
            };
            for l in &r.limits {
                let name = if l.shadow { format!("{} (shadow)", l.policy) } else { l.policy.clone() };
                let n = l.requests.unwrap_or(0);
                rows.push(row(
                    name,
                    &l.algorithm,
                    n,
                    l.admitted.unwrap_or(0),
                    l.denied.unwrap_or(0),
                    &l.first_denial,
                    &l.last_denial,
                ));
            }
            if r.limits.len() > 1 {
                let admitted = r.admitted.unwrap_or(0);
                rows.push(row(
                    "(all limits)".into(),
                    "",
                    r.requests,
                    admitted,
                    r.denied.unwrap_or(0),
                    &r.first_denial,
                    &r.last_denial,
                ));
            }
        }
        // Route, policy and algorithm, then numbers, then the two times.
        s.push_str(&aligned(&rows, |i| !(3..=6).contains(&i)));
        for line in unsimulated {
            let _ = writeln!(s, "{line}");
        }
        for r in &self.routes {
            if let Some(n) = r.unavailable.filter(|&n| n > 0) {
                let _ = writeln!(
                    s,
                    "{}: {} answered 503: the store refused new keys",
                    r.route,
                    plural(n, "request", "requests")
                );
            }
        }
        let secret = match self.key_secret.as_str() {
            "configured" => "server.key_secret, as the gateway's decision logs",
            _ => "the simulation's fixed secret; set server.key_secret to match a gateway's decision logs",
        };
        let _ = writeln!(s, "busiest keys (keyed hashes: {secret}):");
        for r in &self.routes {
            for l in &r.limits {
                let Some(keys) = l.busiest_keys.as_ref().filter(|k| !k.is_empty()) else { continue };
                let _ = writeln!(s, "  {} {}:", r.route, l.policy);
                let mut rows = vec![vec!["key hash".to_string(), "requests".into(), "denied".into()]];
                rows.extend(
                    keys.iter().map(|k| vec![k.key_hash.clone(), k.requests.to_string(), k.denied.to_string()]),
                );
                for line in aligned(&rows, |i| i == 0).lines() {
                    let _ = writeln!(s, "    {line}");
                }
                if l.busiest_keys_exact == Some(false) {
                    let over = keys.iter().map(|k| k.overcount).max().unwrap_or(0);
                    let _ = writeln!(
                        s,
                        "    (approximate: more distinct keys than the summary keeps; a count may include up to {over} requests of other keys)"
                    );
                }
            }
        }
        if let Some(instances) = &self.instances {
            s.push_str(&instances.to_table());
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        s
    }
}
