//! The arguments `simulate` and `replay` share: the traffic (a generated scenario or an arrival
//! file) and the policy parameters it is simulated under.

use std::path::PathBuf;

use anyhow::Context;
use clap::builder::PossibleValuesParser;
use sluice_core::Nanos;
use sluice_sim::{
    Arrival, GENERATORS, Generator, Limits, SCENARIOS, Scenario, TrafficParams, parse_arrivals, parse_duration,
};

/// Where the arrivals come from (flattened into both subcommands' arguments).
#[derive(Debug, clap::Args)]
pub struct TrafficArgs {
    /// Generated traffic (default poisson). nat and botnet: --rps is each client's rate.
    #[arg(long, value_parser = PossibleValuesParser::new(SCENARIOS.map(Scenario::name)), conflicts_with = "arrivals")]
    pub scenario: Option<String>,
    /// Arrivals from a file: one per line, `SECONDS [CLIENT [ACCOUNT]]`, separated by commas or
    /// whitespace; `#` comments and blank lines are skipped.
    #[arg(long, value_name = "FILE")]
    pub arrivals: Option<PathBuf>,
    /// Requests per second of the generated traffic.
    #[arg(long, default_value_t = 6.0, conflicts_with = "arrivals")]
    pub rps: f64,
    /// Length of the generated traffic (30s, 500ms, 15m, 1d).
    #[arg(long, default_value = "30s", value_parser = parse_duration, conflicts_with = "arrivals")]
    pub duration: Nanos,
    /// Seed of the generator: the same seed gives the same arrivals.
    #[arg(long, default_value_t = 42, conflicts_with = "arrivals")]
    pub seed: u64,
    /// The pseudo-random generator: python is Python's random.Random(SEED), the seed article's
    /// (the same arrivals as a few lines of Python); xoshiro is xoshiro256** with a portable
    /// logarithm (the same arrivals with every C library).
    #[arg(long, default_value = "python", value_parser = PossibleValuesParser::new(GENERATORS.map(Generator::name)),
          conflicts_with = "arrivals")]
    pub generator: String,
    /// Clients of the nat (default 20) and botnet (default 200) scenarios.
    #[arg(long, conflicts_with = "arrivals")]
    pub clients: Option<usize>,
}

/// The policy parameters (flattened into both subcommands' arguments).
#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    /// Requests per window for fixed-window, sliding-log and sliding-window.
    #[arg(long, default_value_t = 10)]
    pub limit: u64,
    /// The window (500ms, 1s, 15m); also the interval of the max_in_window column, for every
    /// algorithm.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub window: Nanos,
    /// Capacity of the token bucket and the leaky bucket.
    #[arg(long, default_value_t = 20)]
    pub capacity: u64,
    /// Token bucket refill per second; also the leaky bucket's rate (it polices: it rejects
    /// beyond its capacity).
    #[arg(long, default_value_t = 10.0)]
    pub refill: f64,
}

impl PolicyArgs {
    /// The simulator's limits.
    pub fn limits(&self) -> Limits {
        Limits { limit: self.limit, window: self.window, capacity: self.capacity, refill: self.refill }
    }
}

/// The arrivals and where they came from.
pub struct Traffic {
    /// The arrivals, in time order.
    pub arrivals: Vec<Arrival>,
    /// The scenario and its parameters, when generated.
    pub generated: Option<(Scenario, TrafficParams)>,
}

impl TrafficArgs {
    /// Reads the file or generates the scenario (whose shape may depend on the limit and window).
    pub fn load(&self, limit: u64, window: Nanos) -> anyhow::Result<Traffic> {
        if let Some(path) = &self.arrivals {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let arrivals = parse_arrivals(&text).with_context(|| format!("in {}", path.display()))?;
            return Ok(Traffic { arrivals, generated: None });
        }
        let scenario: Scenario = self.scenario.as_deref().unwrap_or("poisson").parse()?;
        let params = TrafficParams {
            rps: self.rps,
            duration: self.duration,
            seed: self.seed,
            generator: self.generator.parse()?,
            limit,
            window,
            clients: self.clients,
        };
        let arrivals = scenario.generate(&params)?;
        Ok(Traffic { arrivals, generated: Some((scenario, params)) })
    }
}
