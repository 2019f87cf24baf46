//! Running policies side by side over the same arrivals, in virtual time, through the real core
//! and the real memory store.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use sluice_core::{
    ALGORITHM_NAMES, Decision, FixedWindow, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, ParamError, Policy,
    SlidingLog, SlidingWindow, TokenBucket,
};
use sluice_store::{KeyHash, KeyHasher};
use thiserror::Error;

use crate::arrival::Arrival;
use crate::engine::Engine;
use crate::scenario::Scenario;
use crate::window::max_in_window;

/// The secret keying the simulator's key hashes, so that a run gives the same hashes (and
/// decisions) every time; `sluice simulate --access-log` uses it unless the configuration sets
/// `server.key_secret`.
pub const SIMULATION_KEY_SECRET: &str = "sluice simulate";

/// What a limit counts by: the identity whose requests share one bucket or window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyScope {
    /// Per client (an IP address in the generated scenarios; the first key of an arrivals file).
    Ip,
    /// Per account (the second key of an arrivals file).
    Account,
    /// One limit shared by everybody.
    Global,
}

impl KeyScope {
    /// The name on the command line and in reports: `ip`, `account`, `global`.
    pub fn name(self) -> &'static str {
        match self {
            KeyScope::Ip => "ip",
            KeyScope::Account => "account",
            KeyScope::Global => "global",
        }
    }

    /// The raw key of `arrival` under this scope: `""` for an arrival without that identity
    /// (all such arrivals share one key), `"*"` for the global scope.
    pub fn raw_key(self, arrival: &Arrival) -> &str {
        match self {
            KeyScope::Ip => arrival.client.as_deref().unwrap_or(""),
            KeyScope::Account => arrival.account.as_deref().unwrap_or(""),
            KeyScope::Global => "*",
        }
    }

    /// The scopes to compare when none are chosen: per IP and per account for `nat`, and global
    /// too for `botnet`; otherwise per IP and per account when the arrivals carry those keys, and
    /// global when they carry none.
    pub fn defaults(scenario: Option<Scenario>, arrivals: &[Arrival]) -> Vec<KeyScope> {
        match scenario {
            Some(Scenario::Nat) => vec![KeyScope::Ip, KeyScope::Account],
            Some(Scenario::Botnet) => vec![KeyScope::Ip, KeyScope::Account, KeyScope::Global],
            _ => {
                let mut v = Vec::new();
                if arrivals.iter().any(|a| a.client.is_some()) {
                    v.push(KeyScope::Ip);
                }
                if arrivals.iter().any(|a| a.account.is_some()) {
                    v.push(KeyScope::Account);
                }
                if v.is_empty() {
                    v.push(KeyScope::Global);
                }
                v
            }
        }
    }
}

impl fmt::Display for KeyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyScope {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "ip" => Ok(KeyScope::Ip),
            "account" => Ok(KeyScope::Account),
            "global" => Ok(KeyScope::Global),
            _ => Err(SimError::UnknownScope(s.to_string())),
        }
    }
}

/// The parameters that turn algorithm names into policies.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Requests per window for `fixed-window`, `sliding-log` and `sliding-window`.
    pub limit: u64,
    /// The window length; also the interval `max_in_window` measures, for every algorithm.
    pub window: Nanos,
    /// Token bucket and leaky bucket capacity.
    pub capacity: u64,
    /// Token bucket refill rate, and leaky bucket drain rate, per second.
    pub refill: f64,
}

impl Default for Limits {
    /// The seed article's experiment: windows of 10 per second; buckets of 20 at 10 per second.
    fn default() -> Self {
        Self { limit: 10, window: NANOS_PER_SEC, capacity: 20, refill: 10.0 }
    }
}

impl Limits {
    /// The policy for algorithm `name` (a leaky bucket polices: it rejects beyond its capacity).
    pub fn policy(&self, name: &str) -> Result<Policy, SimError> {
        let bad = |problem| SimError::Params { algorithm: name.to_string(), problem };
        Ok(match name {
            "fixed-window" => FixedWindow::new(self.limit, self.window).map_err(bad)?.into(),
            "sliding-log" => SlidingLog::new(self.limit, self.window).map_err(bad)?.into(),
            "sliding-window" => SlidingWindow::new(self.limit, self.window).map_err(bad)?.into(),
            "token-bucket" => TokenBucket::new(self.capacity, self.refill).map_err(bad)?.into(),
            "leaky-bucket" => LeakyBucket::new(self.refill, self.capacity, LeakMode::Police).map_err(bad)?.into(),
            _ => return Err(SimError::UnknownAlgorithm(name.to_string())),
        })
    }
}

/// One column of the comparison: a policy applied per key of one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// The label in reports (the algorithm's name, or a policy's name from a config).
    pub algorithm: String,
    /// What the policy counts by.
    pub scope: KeyScope,
    /// The policy.
    pub policy: Policy,
}

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimError {
    /// An algorithm name that does not exist.
    #[error(
        "unknown algorithm `{0}`: expected one of fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket"
    )]
    UnknownAlgorithm(String),
    /// The same algorithm twice.
    #[error("algorithm `{0}` is listed twice")]
    DuplicateAlgorithm(String),
    /// A key scope that does not exist.
    #[error("unknown key `{0}`: expected ip, account or global")]
    UnknownScope(String),
    /// Arrivals out of time order.
    #[error("arrival {0} is earlier than the one before it: arrivals must be sorted by time")]
    Unsorted(usize),
    /// No algorithm or no scope to run.
    #[error("nothing to simulate: choose at least one algorithm and one key")]
    Empty,
    /// Parameters that do not make a limit.
    #[error("{algorithm}: {problem}")]
    Params {
        /// The algorithm they were meant for.
        algorithm: String,
        /// What is wrong.
        problem: ParamError,
    },
    /// The store refused a decision (it cannot happen with cost 1 and a store sized to the keys).
    #[error("store: {0}")]
    Store(#[from] sluice_store::StoreError),
    /// Writing decisions failed.
    #[error("writing decisions: {0}")]
    Io(#[from] std::io::Error),
}

/// Receives every decision as it is made, and the progress of the run: the decisions file and
/// the progress bar of `sluice simulate` are sinks.
pub trait DecisionSink {
    /// Called for every arrival and lane, in time order.
    fn decision(&mut self, arrival: &Arrival, lane: &Lane, decision: &Decision) -> std::io::Result<()> {
        let _ = (arrival, lane, decision);
        Ok(())
    }

    /// Called now and then with the number of arrivals decided so far.
    fn progress(&mut self, done: usize, total: usize) {
        let _ = (done, total);
    }
}

/// A sink that discards every decision.
#[derive(Debug, Default, Clone, Copy)]
pub struct Quiet;

impl DecisionSink for Quiet {}

/// The results of one lane.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneResults {
    /// The lane that ran.
    pub lane: Lane,
    /// For each arrival, in order: admitted or not.
    pub allowed: Vec<bool>,
    /// Admitted requests.
    pub admitted: u64,
    /// Rejected requests.
    pub rejected: u64,
    /// The most admitted requests (all keys together) in any interval of one window length.
    pub max_in_window: u64,
}

impl LaneResults {
    /// Admitted over all requests; 0 when there were none.
    pub fn allowed_ratio(&self) -> f64 {
        let n = self.admitted + self.rejected;
        if n == 0 { 0.0 } else { self.admitted as f64 / n as f64 }
    }
}

/// The results of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResults {
    /// The arrivals' times, in order.
    pub times: Vec<Nanos>,
    /// The interval `max_in_window` measured.
    pub window: Nanos,
    /// One per lane, in the order of the lanes.
    pub lanes: Vec<LaneResults>,
}

/// A set of lanes to run over arrivals.
///
/// ```
/// use sluice_sim::{Arrival, KeyScope, Limits, Quiet, Simulation};
/// let sim = Simulation::new(&["fixed-window", "token-bucket"], &[KeyScope::Global], &Limits::default()).unwrap();
/// // 25 requests at once: the window admits 10, the bucket its capacity of 20.
/// let arrivals: Vec<Arrival> = (0..25).map(|_| Arrival::at(0)).collect();
/// let out = sim.run(&arrivals, &mut Quiet).unwrap();
/// assert_eq!(out.lanes[0].admitted, 10);
/// assert_eq!(out.lanes[1].admitted, 20);
/// ```
#[derive(Debug, Clone)]
pub struct Simulation {
    lanes: Vec<Lane>,
    window: Nanos,
}

impl Simulation {
    /// Every algorithm of `algorithms` (names as in configuration) under every scope of `scopes`,
    /// with the parameters of `limits`; `max_in_window` measures `limits.window`.
    pub fn new(algorithms: &[&str], scopes: &[KeyScope], limits: &Limits) -> Result<Self, SimError> {
        let mut seen = HashSet::new();
        let mut policies = Vec::new();
        for &name in algorithms {
            if !ALGORITHM_NAMES.contains(&name) {
                return Err(SimError::UnknownAlgorithm(name.to_string()));
            }
            if !seen.insert(name) {
                return Err(SimError::DuplicateAlgorithm(name.to_string()));
            }
            policies.push((name.to_string(), limits.policy(name)?));
        }
        Self::from_policies(policies, scopes, limits.window)
    }

    /// Named policies (from a configuration, say) under every scope of `scopes`.
    pub fn from_policies(
        policies: Vec<(String, Policy)>,
        scopes: &[KeyScope],
        window: Nanos,
    ) -> Result<Self, SimError> {
        if policies.is_empty() || scopes.is_empty() {
            return Err(SimError::Empty);
        }
        if window == 0 {
            return Err(SimError::Params {
                algorithm: "max_in_window".into(),
                problem: ParamError::Zero { field: "window" },
            });
        }
        let mut lanes = Vec::new();
        for (algorithm, policy) in policies {
            for &scope in scopes {
                lanes.push(Lane { algorithm: algorithm.clone(), scope, policy });
            }
        }
        Ok(Self { lanes, window })
    }

    /// The lanes, in report order.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The interval `max_in_window` measures.
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// Decides every arrival under every lane, in time order, through a fresh memory store.
    /// Arrivals must be sorted by time (generated and parsed arrivals are).
    pub fn run(&self, arrivals: &[Arrival], sink: &mut dyn DecisionSink) -> Result<RunResults, SimError> {
        if let Some(i) = arrivals.windows(2).position(|w| w[1].at < w[0].at) {
            return Err(SimError::Unsorted(i + 1));
        }
        let hasher = KeyHasher::from_secret(SIMULATION_KEY_SECRET.as_bytes());
        let scopes: Vec<KeyScope> = {
            let mut s: Vec<KeyScope> = self.lanes.iter().map(|l| l.scope).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let hash = |scope: KeyScope, a: &Arrival| hasher.hash(&[scope.name().as_bytes(), scope.raw_key(a).as_bytes()]);
        let distinct = scopes
            .iter()
            .map(|&s| arrivals.iter().map(|a| hash(s, a)).collect::<HashSet<KeyHash>>().len())
            .max()
            .unwrap_or(0);
        let mut engine = Engine::new(self.lanes.iter().map(|l| (l.algorithm.clone(), l.policy)).collect(), distinct);
        let mut allowed: Vec<Vec<bool>> = vec![Vec::with_capacity(arrivals.len()); self.lanes.len()];
        let mut keys = [KeyHash([0; 16]); 3];
        const PROGRESS_EVERY: usize = 1 << 14;
        for (i, a) in arrivals.iter().enumerate() {
            for &s in &scopes {
                keys[s as usize] = hash(s, a);
            }
            for (index, lane) in self.lanes.iter().enumerate() {
                let d = engine.decide(index, keys[lane.scope as usize], a.at)?;
                allowed[index].push(d.allowed);
                sink.decision(a, lane, &d)?;
            }
            if (i + 1) % PROGRESS_EVERY == 0 {
                sink.progress(i + 1, arrivals.len());
            }
        }
        sink.progress(arrivals.len(), arrivals.len());
        let times: Vec<Nanos> = arrivals.iter().map(|a| a.at).collect();
        let lanes = self
            .lanes
            .iter()
            .zip(allowed)
            .map(|(lane, allowed)| {
                let admitted_times: Vec<Nanos> =
                    times.iter().zip(&allowed).filter(|(_, ok)| **ok).map(|(t, _)| *t).collect();
                let admitted = admitted_times.len() as u64;
                LaneResults {
                    lane: lane.clone(),
                    admitted,
                    rejected: allowed.len() as u64 - admitted,
                    max_in_window: max_in_window(&admitted_times, self.window),
                    allowed,
                }
            })
            .collect();
        Ok(RunResults { times, window: self.window, lanes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::NANOS_PER_MILLI;

    fn all() -> Vec<&'static str> {
        ALGORITHM_NAMES.to_vec()
    }

    #[test]
    fn names_and_scopes_are_checked() {
        let l = Limits::default();
        assert!(matches!(Simulation::new(&["nope"], &[KeyScope::Global], &l), Err(SimError::UnknownAlgorithm(_))));
        assert!(matches!(
            Simulation::new(&["sliding-log", "sliding-log"], &[KeyScope::Global], &l),
            Err(SimError::DuplicateAlgorithm(_))
        ));
        assert!(matches!(Simulation::new(&[], &[KeyScope::Global], &l), Err(SimError::Empty)));
        assert!(matches!(Simulation::new(&["sliding-log"], &[], &l), Err(SimError::Empty)));
        let zero = Limits { limit: 0, ..Limits::default() };
        let e = Simulation::new(&["fixed-window"], &[KeyScope::Global], &zero).unwrap_err();
        assert_eq!(e.to_string(), "fixed-window: limit must be at least 1");
        assert!(matches!("everyone".parse::<KeyScope>(), Err(SimError::UnknownScope(_))));
        assert_eq!("account".parse::<KeyScope>().unwrap(), KeyScope::Account);
    }

    #[test]
    fn lanes_are_algorithms_times_scopes_in_order() {
        let sim = Simulation::new(&all(), &[KeyScope::Ip, KeyScope::Global], &Limits::default()).unwrap();
        let labels: Vec<String> = sim.lanes().iter().map(|l| format!("{}/{}", l.algorithm, l.scope)).collect();
        assert_eq!(labels[..3], ["fixed-window/ip", "fixed-window/global", "sliding-log/ip"]);
        assert_eq!(labels.len(), 10);
    }

    #[test]
    fn keys_separate_clients_and_the_global_scope_joins_them() {
        let sim = Simulation::new(&["fixed-window"], &[KeyScope::Ip, KeyScope::Global], &Limits::default()).unwrap();
        // Two clients, 10 requests each within 1 ms.
        let arrivals: Vec<Arrival> =
            (0..20).map(|i| Arrival::keyed(i * 50_000, if i % 2 == 0 { "a" } else { "b" }, "x")).collect();
        let out = sim.run(&arrivals, &mut Quiet).unwrap();
        assert_eq!((out.lanes[0].admitted, out.lanes[0].rejected), (20, 0));
        assert_eq!((out.lanes[1].admitted, out.lanes[1].rejected), (10, 10));
        assert_eq!(out.lanes[0].max_in_window, 20);
        assert_eq!(out.lanes[1].max_in_window, 10);
    }

    #[test]
    fn the_sink_sees_every_decision_in_order() {
        struct Log(Vec<(Nanos, String, bool, u64)>, usize);
        impl DecisionSink for Log {
            fn decision(&mut self, a: &Arrival, lane: &Lane, d: &Decision) -> std::io::Result<()> {
                self.0.push((a.at, lane.algorithm.clone(), d.allowed, d.retry_after));
                Ok(())
            }
            fn progress(&mut self, done: usize, _: usize) {
                self.1 = done;
            }
        }
        let sim = Simulation::new(
            &["sliding-log", "token-bucket"],
            &[KeyScope::Global],
            &Limits { limit: 1, window: NANOS_PER_SEC, capacity: 1, refill: 1.0 },
        )
        .unwrap();
        let arrivals = [Arrival::at(0), Arrival::at(400 * NANOS_PER_MILLI)];
        let mut log = Log(Vec::new(), 0);
        sim.run(&arrivals, &mut log).unwrap();
        assert_eq!(log.1, 2);
        assert_eq!(
            log.0,
            vec![
                (0, "sliding-log".into(), true, 0),
                (0, "token-bucket".into(), true, 0),
                (400 * NANOS_PER_MILLI, "sliding-log".into(), false, 600 * NANOS_PER_MILLI),
                (400 * NANOS_PER_MILLI, "token-bucket".into(), false, 600 * NANOS_PER_MILLI),
            ]
        );
    }

    #[test]
    fn unsorted_arrivals_are_refused() {
        let sim = Simulation::new(&["fixed-window"], &[KeyScope::Global], &Limits::default()).unwrap();
        let e = sim.run(&[Arrival::at(5), Arrival::at(9), Arrival::at(7)], &mut Quiet).unwrap_err();
        assert!(matches!(e, SimError::Unsorted(2)), "{e}");
    }

    #[test]
    fn default_scopes_follow_the_keys() {
        assert_eq!(KeyScope::defaults(Some(Scenario::Poisson), &[Arrival::at(0)]), [KeyScope::Global]);
        assert_eq!(KeyScope::defaults(Some(Scenario::Nat), &[]), [KeyScope::Ip, KeyScope::Account]);
        assert_eq!(KeyScope::defaults(Some(Scenario::Botnet), &[]).len(), 3);
        let file = [Arrival { at: 0, client: Some("a".into()), account: None }];
        assert_eq!(KeyScope::defaults(None, &file), [KeyScope::Ip]);
        assert_eq!(KeyScope::defaults(None, &[Arrival::keyed(0, "a", "b")]), [KeyScope::Ip, KeyScope::Account]);
    }
}
