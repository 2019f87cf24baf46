//! The report of a multi-instance access-log run (`sluice simulate --instances N`): several
//! gateway instances, each with its own quota leases over one shared store, against one exact
//! limiter deciding the same requests on a store of its own. This crate only prints the counts;
//! `sluice` runs the instances.
//!
//! ```
//! use sluice_sim::{InstanceRow, InstancesReport, LimitComparison};
//! let report = InstancesReport {
//!     instances: 2,
//!     split: "round-robin".into(),
//!     trade_every_ms: None,
//!     leased_policies: vec!["fleet".into()],
//!     limits: vec![LimitComparison {
//!         route: "/api/*".into(),
//!         policy: "fleet".into(),
//!         leased: true,
//!         requests: 500,
//!         admitted: 90,
//!         admitted_exact: 100,
//!         under_admitted: 10,
//!         over_admitted: 0,
//!     }],
//!     admitted: 90,
//!     admitted_exact: 100,
//!     under_admitted: 10,
//!     over_admitted: 0,
//!     decisions: 500,
//!     store_calls: 60,
//!     store_calls_per_decision: 0.12,
//!     per_instance: vec![
//!         InstanceRow { instance: 0, requests: 250, admitted: 50, admitted_from_leases: 40, store_calls: 30, held_at_end: 0 },
//!         InstanceRow { instance: 1, requests: 250, admitted: 40, admitted_from_leases: 35, store_calls: 30, held_at_end: 10 },
//!     ],
//! };
//! let table = report.to_table();
//! assert!(table.contains("10 under-admitted"), "{table}");
//! assert!(!table.contains("OVER-ADMISSION"));
//! ```

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::aligned;

/// One limit of a route: what the instances with leases admitted, and one exact limiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitComparison {
    /// The route's name.
    pub route: String,
    /// The policy's name.
    pub policy: String,
    /// Whether its policy is leased (`lease = "auto"` on a fixed window or a policing bucket).
    pub leased: bool,
    /// Requests it decided in the run with leases.
    pub requests: u64,
    /// Requests it admitted in the run with leases.
    pub admitted: u64,
    /// Requests it admitted in the exact run (one store, no leases).
    pub admitted_exact: u64,
    /// `admitted_exact - admitted`: what the leases cost (negative only when another limit of
    /// the route denied differently in the two runs).
    pub under_admitted: i64,
    /// Requests admitted beyond the limit of a leased window (per key and window): always 0,
    /// or leases are broken. Checked for leased limits of a fixed cost.
    pub over_admitted: u64,
}

/// One instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceRow {
    /// Its number, from 0 (with several logs: the log's position on the command line).
    pub instance: usize,
    /// Requests it decided.
    pub requests: u64,
    /// Of which it admitted.
    pub admitted: u64,
    /// Admitted from its leases, without asking the shared store.
    pub admitted_from_leases: u64,
    /// Calls it made to the shared store: decisions, leases taken, units given back.
    pub store_calls: u64,
    /// Units its leases still held, unspent, when the log ended: counted by the store and
    /// admitted by no one (under-admission, when other requests were denied meanwhile).
    pub held_at_end: u64,
}

/// The prediction of a multi-instance run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstancesReport {
    /// How many instances.
    pub instances: usize,
    /// How requests were split: `round-robin`, `client`, or `log` (one log per instance).
    pub split: String,
    /// With `--regions`: how much of a region's traffic one trade covers, ms. The instances are
    /// then regions, and their store calls are what crosses regions.
    pub trade_every_ms: Option<u64>,
    /// The policies leased (none: the instances admit exactly what one limiter does).
    pub leased_policies: Vec<String>,
    /// Per route and limit, in configuration order (simulated routes only).
    pub limits: Vec<LimitComparison>,
    /// Requests admitted by the instances with leases.
    pub admitted: u64,
    /// Requests admitted by one exact limiter.
    pub admitted_exact: u64,
    /// `admitted_exact - admitted`.
    pub under_admitted: i64,
    /// Sum of the limits' `over_admitted`: always 0.
    pub over_admitted: u64,
    /// Requests decided (by the instances).
    pub decisions: u64,
    /// Calls the instances made to the shared store.
    pub store_calls: u64,
    /// `store_calls / decisions` (one exact limiter makes 1).
    pub store_calls_per_decision: f64,
    /// Per instance.
    pub per_instance: Vec<InstanceRow>,
}

fn percent(part: i64, whole: u64) -> String {
    if whole == 0 { "-".into() } else { format!("{:.2}%", part as f64 * 100.0 / whole as f64) }
}

impl InstancesReport {
    /// What the run admitted beyond a leased window's limit, loudly; `None` when nothing (as it
    /// must be).
    pub fn over_admission_alarm(&self) -> Option<String> {
        (self.over_admitted > 0).then(|| {
            let rows: Vec<String> = self
                .limits
                .iter()
                .filter(|l| l.over_admitted > 0)
                .map(|l| format!("{} {}: {}", l.route, l.policy, l.over_admitted))
                .collect();
            format!(
                "OVER-ADMISSION: {} requests admitted beyond a leased window's limit ({}). Leases must never admit \
                 more than the limit: this is a bug in sluice, please report it with this configuration and log",
                self.over_admitted,
                rows.join(", ")
            )
        })
    }

    /// The section the table report ends with.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let leases = if self.leased_policies.is_empty() {
            "no policy has lease = \"auto\": every instance decides every request on the shared store, so the \
             instances admit exactly what one limiter admits"
                .to_string()
        } else {
            format!("quota leases (lease = \"auto\") on {}", self.leased_policies.join(", "))
        };
        let split = match self.split.as_str() {
            "log" => "one access log per instance".to_string(),
            other => format!("split {other}"),
        };
        match self.trade_every_ms {
            None => {
                let _ = writeln!(s, "instances: {}, {split}, over one shared store; {leases}", self.instances);
            }
            Some(ms) => {
                let _ = writeln!(
                    s,
                    "regions: {}, {split}; each region leases its share of the limit from the others, a trade covering \
                     {ms} ms of its traffic, and denies on its own once no share is left for it until the window \
                     ends; {leases}; store calls are the calls that cross regions",
                    self.instances
                );
            }
        }
        let _ = writeln!(
            s,
            "prediction: the instances with leases against one exact limiter (the same requests, one store, no leases):"
        );
        let mut rows = vec![
            ["route", "policy", "leased", "requests", "admitted", "exact", "under-admitted", "over-admitted"]
                .map(String::from)
                .to_vec(),
        ];
        for l in &self.limits {
            rows.push(vec![
                l.route.clone(),
                l.policy.clone(),
                if l.leased { "yes" } else { "no" }.into(),
                l.requests.to_string(),
                l.admitted.to_string(),
                l.admitted_exact.to_string(),
                l.under_admitted.to_string(),
                l.over_admitted.to_string(),
            ]);
        }
        s.push_str(&aligned(&rows, |i| i < 3));
        let _ = writeln!(
            s,
            "requests admitted: {} by the {} instances, {} by one exact limiter: {} under-admitted ({} of the exact)",
            self.admitted,
            self.instances,
            self.admitted_exact,
            self.under_admitted,
            percent(self.under_admitted, self.admitted_exact)
        );
        let _ = writeln!(
            s,
            "store calls: {} for {} decisions, {:.4} per decision (one exact limiter: 1)",
            self.store_calls, self.decisions, self.store_calls_per_decision
        );
        let mut rows = vec![
            ["instance", "requests", "admitted", "from leases", "store calls", "held at end"]
                .map(String::from)
                .to_vec(),
        ];
        for i in &self.per_instance {
            rows.push(vec![
                i.instance.to_string(),
                i.requests.to_string(),
                i.admitted.to_string(),
                i.admitted_from_leases.to_string(),
                i.store_calls.to_string(),
                i.held_at_end.to_string(),
            ]);
        }
        for line in aligned(&rows, |_| false).lines() {
            let _ = writeln!(s, "  {line}");
        }
        if let Some(alarm) = self.over_admission_alarm() {
            let _ = writeln!(s, "{alarm}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_admission_is_printed_loudly_with_its_limit() {
        let limit = LimitComparison {
            route: "/api/*".into(),
            policy: "fleet".into(),
            leased: true,
            requests: 10,
            admitted: 6,
            admitted_exact: 5,
            under_admitted: -1,
            over_admitted: 1,
        };
        let report = InstancesReport {
            instances: 2,
            split: "client".into(),
            trade_every_ms: None,
            leased_policies: vec!["fleet".into()],
            limits: vec![limit],
            admitted: 6,
            admitted_exact: 5,
            under_admitted: -1,
            over_admitted: 1,
            decisions: 10,
            store_calls: 10,
            store_calls_per_decision: 1.0,
            per_instance: Vec::new(),
        };
        let alarm = report.over_admission_alarm().unwrap();
        assert!(alarm.starts_with("OVER-ADMISSION: 1 requests") && alarm.contains("/api/* fleet: 1"), "{alarm}");
        assert!(report.to_table().contains(&alarm));
        assert!(report.to_table().contains("split client"));
    }
}
