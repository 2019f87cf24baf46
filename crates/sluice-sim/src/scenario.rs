//! Generated traffic: the scenarios of `sluice simulate`, each a pure function of its parameters,
//! generator and seed (see [`crate::generator`]).

use std::fmt;
use std::str::FromStr;

use sluice_core::{NANOS_PER_SEC, Nanos};
use thiserror::Error;

use crate::arrival::Arrival;
use crate::generator::{Generator, PoissonClock, Source};

/// The address every user of the `nat` scenario shares (TEST-NET-3, documentation only).
pub const NAT_ADDRESS: &str = "203.0.113.10";
/// The account the `botnet` scenario attacks.
pub const BOTNET_ACCOUNT: &str = "victim";
/// Refuse to generate more arrivals than this (about 1 GiB of simulation state).
pub const MAX_ARRIVALS: usize = 20_000_000;
/// The most clients a scenario can have (the addresses of 198.18.0.0/15).
pub const MAX_CLIENTS: usize = 1 << 17;

/// A traffic pattern.
///
/// | scenario | arrivals |
/// |---|---|
/// | `poisson` | one anonymous client; exponential gaps with mean `1 / rps` from t = 0 |
/// | `constant` | one anonymous client; one request every `1 / rps` (rounded to the nanosecond), the first at t = 0 |
/// | `burst` | one anonymous client at an average of `rps`, in bursts: every 5 windows, `rps × 5 windows` requests (rounded) at uniform random times within the first twentieth of a window |
/// | `boundary` | the window-edge attack: every 4 windows, `limit` requests at uniform random times in the tenth of a window before an edge and `limit` in the tenth after it; `rps` is not used |
/// | `nat` | `clients` (default 20) honest users, each with their own account `user-N`, all behind one address, each a Poisson stream at `rps` |
/// | `botnet` | `clients` (default 200) addresses from 198.18.0.0/15, each a Poisson stream at `rps`, all asking for one account, `victim` |
///
/// Streams of several clients are generated one client after another from the same generator,
/// then merged by time (ties keep client order). Arrivals at or after `duration` are dropped.
///
/// With the Python generator, a scenario is a few lines of Python away: `poisson` is
/// `r = random.Random(seed); t = 0.0; while True: t += r.expovariate(rps); ...` until `t` reaches
/// the duration, each time rounded to the nearest nanosecond, and the uniform draws of `burst`
/// and `boundary` are `r.randrange(span)` in nanoseconds, in the order above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Poisson arrivals from one client.
    Poisson,
    /// Bursts from one client.
    Burst,
    /// Bursts on both sides of window edges.
    Boundary,
    /// Many honest users behind one address.
    Nat,
    /// Many addresses attacking one account.
    Botnet,
    /// Evenly spaced arrivals from one client.
    Constant,
}

/// Every scenario, in the order the help lists them.
pub const SCENARIOS: [Scenario; 6] =
    [Scenario::Poisson, Scenario::Burst, Scenario::Boundary, Scenario::Nat, Scenario::Botnet, Scenario::Constant];

impl Scenario {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Poisson => "poisson",
            Scenario::Burst => "burst",
            Scenario::Boundary => "boundary",
            Scenario::Nat => "nat",
            Scenario::Botnet => "botnet",
            Scenario::Constant => "constant",
        }
    }

    /// The number of clients when none is given.
    pub fn default_clients(self) -> usize {
        match self {
            Scenario::Nat => 20,
            Scenario::Botnet => 200,
            _ => 1,
        }
    }

    /// Generates the arrivals of this scenario.
    ///
    /// ```
    /// use sluice_sim::{Scenario, TrafficParams};
    /// let a = Scenario::Poisson.generate(&TrafficParams::default()).unwrap();
    /// assert_eq!(a, Scenario::Poisson.generate(&TrafficParams::default()).unwrap());
    /// assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
    /// ```
    pub fn generate(self, p: &TrafficParams) -> Result<Vec<Arrival>, ScenarioError> {
        p.validate(self)?;
        let mut rng = Source::new(p.generator, p.seed);
        let w = p.window;
        let arrivals = match self {
            Scenario::Poisson => poisson(&mut rng, p.rps, p.duration, None, None)?,
            Scenario::Constant => {
                let gap = ((NANOS_PER_SEC as f64 / p.rps).round() as Nanos).max(1);
                let n = p.duration.div_ceil(gap);
                check_count(n as usize)?;
                (0..n).map(|i| Arrival::at(i * gap)).collect()
            }
            Scenario::Burst => {
                let period = w.saturating_mul(5);
                let size = (p.rps * period as f64 / NANOS_PER_SEC as f64).round() as usize;
                let span = (w / 20).max(1);
                let starts = (0..).map(|k: u64| k * period).take_while(|&s| s < p.duration);
                let mut out = Vec::new();
                for start in starts {
                    check_count(out.len() + size)?;
                    let mut burst: Vec<Nanos> = (0..size).map(|_| start + rng.below(span)).collect();
                    burst.sort_unstable();
                    out.extend(burst.into_iter().map(Arrival::at));
                }
                out
            }
            Scenario::Boundary => {
                let span = (w / 10).max(1);
                let n = p.limit as usize;
                let mut out = Vec::new();
                for edge in (1..).map(|k: u64| w.saturating_mul(4 * k - 3)).take_while(|&e| e < p.duration) {
                    check_count(out.len() + 2 * n)?;
                    let mut before: Vec<Nanos> = (0..n).map(|_| edge - span + rng.below(span)).collect();
                    let mut after: Vec<Nanos> = (0..n).map(|_| edge + rng.below(span)).collect();
                    before.sort_unstable();
                    after.sort_unstable();
                    out.extend(before.into_iter().chain(after).map(Arrival::at));
                }
                out
            }
            Scenario::Nat => {
                let mut out = Vec::new();
                for i in 0..p.clients(self) {
                    let account = format!("user-{i}");
                    out.extend(poisson(&mut rng, p.rps, p.duration, Some(NAT_ADDRESS), Some(&account))?);
                    check_count(out.len())?;
                }
                out.sort_by_key(|a| a.at);
                out
            }
            Scenario::Botnet => {
                let mut out = Vec::new();
                for i in 0..p.clients(self) {
                    let ip = botnet_address(i);
                    out.extend(poisson(&mut rng, p.rps, p.duration, Some(&ip), Some(BOTNET_ACCOUNT))?);
                    check_count(out.len())?;
                }
                out.sort_by_key(|a| a.at);
                out
            }
        };
        Ok(arrivals.into_iter().filter(|a| a.at < p.duration).collect())
    }
}

/// The address of bot `i`: 198.18.0.0/15 (the benchmarking range), in order.
fn botnet_address(i: usize) -> String {
    format!("198.{}.{}.{}", 18 + (i >> 16), (i >> 8) & 0xff, i & 0xff)
}

fn check_count(n: usize) -> Result<(), ScenarioError> {
    if n > MAX_ARRIVALS { Err(ScenarioError::TooManyArrivals(MAX_ARRIVALS)) } else { Ok(()) }
}

/// A Poisson stream at `rps` over `[0, duration)`: the first arrival one gap after t = 0.
fn poisson(
    rng: &mut Source,
    rps: f64,
    duration: Nanos,
    client: Option<&str>,
    account: Option<&str>,
) -> Result<Vec<Arrival>, ScenarioError> {
    let mut clock = PoissonClock::new(rps);
    let mut out = Vec::new();
    loop {
        let t = clock.advance(rng);
        if t >= duration {
            return Ok(out);
        }
        check_count(out.len() + 1)?;
        out.push(Arrival { at: t, client: client.map(str::to_string), account: account.map(str::to_string) });
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = ScenarioError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SCENARIOS.into_iter().find(|x| x.name() == s).ok_or_else(|| ScenarioError::Unknown(s.to_string()))
    }
}

/// The knobs of the generated scenarios.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficParams {
    /// Requests per second (per client in `nat` and `botnet`).
    pub rps: f64,
    /// Length of the run.
    pub duration: Nanos,
    /// Seed of the generator.
    pub seed: u64,
    /// The generator the seed seeds.
    pub generator: Generator,
    /// The window limit (`boundary` sends this many on each side of an edge).
    pub limit: u64,
    /// The window length (`burst` and `boundary` are timed by it).
    pub window: Nanos,
    /// Clients in `nat` and `botnet`; `None` for the scenario's default.
    pub clients: Option<usize>,
}

impl Default for TrafficParams {
    /// The seed article's experiment: 6 requests per second for 30 s, Python's generator with
    /// seed 42, limit 10 per 1 s.
    fn default() -> Self {
        Self {
            rps: 6.0,
            duration: 30 * NANOS_PER_SEC,
            seed: 42,
            generator: Generator::Python,
            limit: 10,
            window: NANOS_PER_SEC,
            clients: None,
        }
    }
}

impl TrafficParams {
    /// The number of clients `scenario` runs with.
    pub fn clients(&self, scenario: Scenario) -> usize {
        self.clients.unwrap_or(scenario.default_clients())
    }

    fn validate(&self, scenario: Scenario) -> Result<(), ScenarioError> {
        if !(self.rps.is_finite() && self.rps > 0.0) && scenario != Scenario::Boundary {
            return Err(ScenarioError::BadRate(self.rps));
        }
        if self.duration == 0 {
            return Err(ScenarioError::Zero("duration"));
        }
        if self.window == 0 {
            return Err(ScenarioError::Zero("window"));
        }
        if scenario == Scenario::Boundary && self.limit == 0 {
            return Err(ScenarioError::Zero("limit"));
        }
        let clients = self.clients(scenario);
        if clients == 0 {
            return Err(ScenarioError::Zero("clients"));
        }
        if clients > MAX_CLIENTS {
            return Err(ScenarioError::TooManyClients(MAX_CLIENTS));
        }
        // Estimate before generating, so that a typo like --rps 1e12 fails at once.
        let expected = self.rps.max(0.0) * clients as f64 * (self.duration as f64 / NANOS_PER_SEC as f64);
        if scenario != Scenario::Boundary && expected > MAX_ARRIVALS as f64 {
            return Err(ScenarioError::TooManyArrivals(MAX_ARRIVALS));
        }
        Ok(())
    }
}

/// Why a scenario could not be generated.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ScenarioError {
    /// A scenario name that does not exist.
    #[error("unknown scenario `{0}`: expected one of poisson, burst, boundary, nat, botnet, constant")]
    Unknown(String),
    /// A rate that is not a positive, finite number.
    #[error("the request rate must be a positive, finite number (got {0})")]
    BadRate(f64),
    /// A parameter that must not be zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// More clients than the scenario has addresses for.
    #[error("at most {0} clients")]
    TooManyClients(usize),
    /// The run would be too long to hold in memory.
    #[error("the run would have more than {0} arrivals: lower the rate, the duration or the clients")]
    TooManyArrivals(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_with(s: Scenario, f: impl FnOnce(&mut TrafficParams)) -> Vec<Arrival> {
        let mut p = TrafficParams::default();
        f(&mut p);
        s.generate(&p).unwrap()
    }

    fn sorted_and_bounded(a: &[Arrival], duration: Nanos) -> bool {
        a.windows(2).all(|w| w[0].at <= w[1].at) && a.iter().all(|x| x.at < duration)
    }

    #[test]
    fn every_scenario_is_sorted_bounded_and_reproducible() {
        for g in crate::generator::GENERATORS {
            for s in SCENARIOS {
                let a = gen_with(s, |p| p.generator = g);
                assert!(!a.is_empty(), "{g} {s}");
                assert!(sorted_and_bounded(&a, 30 * NANOS_PER_SEC), "{g} {s}");
                assert_eq!(a, gen_with(s, |p| p.generator = g), "{g} {s}");
                if s != Scenario::Constant {
                    assert_ne!(a, gen_with(s, |p| (p.generator, p.seed) = (g, 43)), "{g} {s}: the seed must matter");
                }
            }
        }
    }

    #[test]
    fn the_generator_matters_except_for_constant() {
        for s in SCENARIOS {
            let python = gen_with(s, |p| p.generator = Generator::Python);
            let xoshiro = gen_with(s, |p| p.generator = Generator::Xoshiro);
            assert_eq!(python == xoshiro, s == Scenario::Constant, "{s}");
        }
    }

    #[test]
    fn python_poisson_is_the_float_sum_of_expovariate_gaps() {
        let a = gen_with(Scenario::Poisson, |_| {});
        assert_eq!(a.len(), 184);
        // random.Random(42): the first gap is 0.1700100478791335 s, the last arrival before 30 s
        // is at 29.97640353425597 s.
        assert_eq!(a[0].at, 170_010_048);
        assert_eq!(a[183].at, 29_976_403_534);
    }

    #[test]
    fn poisson_rate_is_about_right() {
        let a = gen_with(Scenario::Poisson, |p| p.duration = 1000 * NANOS_PER_SEC);
        assert!((5_700..6_300).contains(&a.len()), "{}", a.len());
        assert!(a.iter().all(|x| x.client.is_none() && x.account.is_none()));
    }

    #[test]
    fn constant_is_evenly_spaced() {
        let a = gen_with(Scenario::Constant, |p| p.rps = 4.0);
        assert_eq!(a.len(), 120);
        assert!(a.iter().enumerate().all(|(i, x)| x.at == i as u64 * 250_000_000));
    }

    #[test]
    fn burst_keeps_the_average_rate_in_short_bursts() {
        let a = gen_with(Scenario::Burst, |_| {});
        assert_eq!(a.len(), 6 * 30);
        // Every request lies in the first 50 ms of a 5 s period.
        assert!(a.iter().all(|x| x.at % (5 * NANOS_PER_SEC) < 50_000_000));
    }

    #[test]
    fn boundary_straddles_window_edges() {
        let a = gen_with(Scenario::Boundary, |_| {});
        // Edges at 1, 5, 9, ..., 29 s: 8 edges, 10 requests on each side.
        assert_eq!(a.len(), 8 * 20);
        for chunk in a.chunks(20) {
            let edge = chunk[10].at / NANOS_PER_SEC * NANOS_PER_SEC;
            assert!(chunk[..10].iter().all(|x| x.at < edge && x.at >= edge - 100_000_000));
            assert!(chunk[10..].iter().all(|x| x.at >= edge && x.at < edge + 100_000_000));
        }
    }

    #[test]
    fn nat_and_botnet_have_the_right_identities() {
        let nat = gen_with(Scenario::Nat, |_| {});
        assert!(nat.iter().all(|x| x.client.as_deref() == Some(NAT_ADDRESS)));
        let accounts: std::collections::HashSet<_> = nat.iter().map(|x| x.account.clone()).collect();
        assert_eq!(accounts.len(), 20);

        let bots = gen_with(Scenario::Botnet, |p| p.clients = Some(300));
        assert!(bots.iter().all(|x| x.account.as_deref() == Some(BOTNET_ACCOUNT)));
        let ips: std::collections::HashSet<_> = bots.iter().map(|x| x.client.clone().unwrap()).collect();
        assert_eq!(ips.len(), 300);
        assert!(ips.contains("198.18.1.43"));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let p = |f: fn(&mut TrafficParams)| {
            let mut p = TrafficParams::default();
            f(&mut p);
            p
        };
        assert_eq!(Scenario::Poisson.generate(&p(|p| p.rps = 0.0)), Err(ScenarioError::BadRate(0.0)));
        assert!(Scenario::Poisson.generate(&p(|p| p.rps = f64::NAN)).is_err());
        assert_eq!(Scenario::Poisson.generate(&p(|p| p.duration = 0)), Err(ScenarioError::Zero("duration")));
        assert_eq!(Scenario::Nat.generate(&p(|p| p.clients = Some(0))), Err(ScenarioError::Zero("clients")));
        assert_eq!(Scenario::Poisson.generate(&p(|p| p.rps = 1e12)), Err(ScenarioError::TooManyArrivals(MAX_ARRIVALS)));
        assert_eq!("nope".parse::<Scenario>(), Err(ScenarioError::Unknown("nope".into())));
        assert_eq!("botnet".parse::<Scenario>(), Ok(Scenario::Botnet));
    }
}
