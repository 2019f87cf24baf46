//! `sluice simulate`: the algorithms side by side over generated or recorded arrivals.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::builder::PossibleValuesParser;
use sluice_core::{ALGORITHM_NAMES, Decision, Nanos};
use sluice_sim::{
    Arrival, DecisionCsv, KeyScope, Lane, Limits, Observer, Report, RunInfo, SCENARIOS, Scenario, Simulation,
    TrafficParams, parse_arrivals, parse_duration,
};

/// Arguments of `sluice simulate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Without --scenario or --arrivals, runs the seed article's experiment: Poisson arrivals at \
6 req/s for 30 s, seed 42; windows of 10 per 1 s; token and leaky bucket of capacity 20 at 10 per second.")]
pub struct Args {
    /// Generated traffic (default poisson). nat and botnet: --rps is each client's rate.
    #[arg(long, value_parser = PossibleValuesParser::new(SCENARIOS.map(Scenario::name)), conflicts_with = "arrivals")]
    scenario: Option<String>,
    /// Arrivals from a file: one per line, `SECONDS [CLIENT [ACCOUNT]]`, separated by commas or
    /// whitespace; `#` comments and blank lines are skipped.
    #[arg(long, value_name = "FILE")]
    arrivals: Option<PathBuf>,
    /// Requests per second of the generated traffic.
    #[arg(long, default_value_t = 6.0, conflicts_with = "arrivals")]
    rps: f64,
    /// Length of the generated traffic (30s, 500ms, 15m).
    #[arg(long, default_value = "30s", value_parser = duration, conflicts_with = "arrivals")]
    duration: Nanos,
    /// Seed of the generator: the same seed gives the same arrivals on every machine.
    #[arg(long, default_value_t = 42, conflicts_with = "arrivals")]
    seed: u64,
    /// Clients of the nat (default 20) and botnet (default 200) scenarios.
    #[arg(long, conflicts_with = "arrivals")]
    clients: Option<usize>,
    /// Algorithms to compare, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(ALGORITHM_NAMES),
          default_value = "fixed-window,sliding-log,sliding-window,token-bucket,leaky-bucket")]
    algorithms: Vec<String>,
    /// What the limits count by, comma-separated: ip, account, global. Default: ip and account
    /// for nat, and global too for botnet; for a file, the keys it has; otherwise global.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(["ip", "account", "global"]))]
    keys: Vec<String>,
    /// Requests per window for fixed-window, sliding-log and sliding-window.
    #[arg(long, default_value_t = 10)]
    limit: u64,
    /// The window; also the interval of the max_in_window column, for every algorithm.
    #[arg(long, default_value = "1s", value_parser = duration)]
    window: Nanos,
    /// Capacity of the token bucket and the leaky bucket.
    #[arg(long, default_value_t = 20)]
    capacity: u64,
    /// Token bucket refill per second; also the leaky bucket's rate (it polices: it rejects
    /// beyond its capacity).
    #[arg(long, default_value_t = 10.0)]
    refill: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write every decision of every algorithm to FILE as CSV
    /// (time,key,algorithm,keyed_by,allowed,remaining,retry_after).
    #[arg(long, value_name = "FILE")]
    decisions: Option<PathBuf>,
    /// Draw the run to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
}

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Aligned columns for people.
    Table,
    /// One JSON object: {"requests": N, "results": [...], ...}.
    Json,
    /// CSV with a header line.
    Csv,
}

fn duration(s: &str) -> Result<Nanos, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// Runs `sluice simulate`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.plot {
        sluice_sim::is_svg(path)?;
    }
    let limits = Limits { limit: args.limit, window: args.window, capacity: args.capacity, refill: args.refill };
    let (arrivals, info) = arrivals(&args, &limits)?;
    let scopes: Vec<KeyScope> = if args.keys.is_empty() {
        KeyScope::defaults(info.scenario, &arrivals)
    } else {
        let mut v = Vec::new();
        for k in &args.keys {
            let scope: KeyScope = k.parse()?;
            if v.contains(&scope) {
                bail!("key `{k}` is listed twice");
            }
            v.push(scope);
        }
        v
    };
    let names: Vec<&str> = args.algorithms.iter().map(String::as_str).collect();
    let sim = Simulation::new(&names, &scopes, &limits)?;

    let mut observer = Progress::new(arrivals.len(), sim.lanes().len());
    if let Some(path) = &args.decisions {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        observer.decisions = Some(DecisionCsv::new(BufWriter::new(file))?);
    }
    let outcome = sim.run(&arrivals, &mut observer)?;
    observer.finish();
    if let Some(csv) = observer.decisions.take() {
        csv.into_inner().context("writing the decisions file")?;
    }

    let report = Report::new(&outcome, &info);
    if let Some(path) = &args.plot {
        sluice_sim::plot(path, &outcome, &report.headline(), info.duration)?;
    }
    let text = match args.format {
        Format::Table => report.to_table(),
        Format::Json => report.to_json() + "\n",
        Format::Csv => report.to_csv(),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The arrivals to run and the description of where they came from.
fn arrivals(args: &Args, limits: &Limits) -> anyhow::Result<(Vec<Arrival>, RunInfo)> {
    if let Some(path) = &args.arrivals {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let arrivals = parse_arrivals(&text).with_context(|| format!("in {}", path.display()))?;
        // The run lasts until the end of the window of the last arrival.
        let duration =
            arrivals.last().map_or(limits.window, |a| (a.at / limits.window + 1).saturating_mul(limits.window));
        let info = RunInfo {
            scenario: None,
            arrivals_file: Some(path.display().to_string()),
            seed: None,
            rps: None,
            clients: None,
            duration,
            limits: limits.clone(),
        };
        return Ok((arrivals, info));
    }
    let scenario: Scenario = args.scenario.as_deref().unwrap_or("poisson").parse()?;
    let params = TrafficParams {
        rps: args.rps,
        duration: args.duration,
        seed: args.seed,
        limit: args.limit,
        window: args.window,
        clients: args.clients,
    };
    let arrivals = scenario.generate(&params)?;
    let many = matches!(scenario, Scenario::Nat | Scenario::Botnet);
    let info = RunInfo {
        scenario: Some(scenario),
        arrivals_file: None,
        seed: Some(args.seed),
        rps: (scenario != Scenario::Boundary).then_some(args.rps),
        clients: many.then(|| params.clients(scenario)),
        duration: args.duration,
        limits: limits.clone(),
    };
    Ok((arrivals, info))
}

/// Writes decisions if asked, and draws a progress bar on a terminal for long runs.
struct Progress {
    decisions: Option<DecisionCsv<BufWriter<File>>>,
    bar: bool,
    last: Instant,
    drawn: bool,
}

/// Runs with fewer decisions than this finish too fast to need a bar.
const LONG_RUN: usize = 2_000_000;

impl Progress {
    fn new(arrivals: usize, lanes: usize) -> Self {
        let bar = std::io::stderr().is_terminal() && arrivals.saturating_mul(lanes) >= LONG_RUN;
        Self { decisions: None, bar, last: Instant::now(), drawn: false }
    }

    fn finish(&mut self) {
        if self.drawn {
            // Clear the bar's line.
            eprint!("\r{:70}\r", "");
        }
    }
}

impl Observer for Progress {
    fn decision(&mut self, arrival: &Arrival, lane: &Lane, decision: &Decision) -> std::io::Result<()> {
        match &mut self.decisions {
            Some(csv) => csv.decision(arrival, lane, decision),
            None => Ok(()),
        }
    }

    fn progress(&mut self, done: usize, total: usize) {
        if !self.bar || self.last.elapsed() < Duration::from_millis(100) || total == 0 {
            return;
        }
        self.last = Instant::now();
        const WIDTH: usize = 40;
        let filled = done * WIDTH / total;
        eprint!(
            "\r[{}{}] {:3}% {done}/{total} arrivals",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            done * 100 / total
        );
        self.drawn = true;
    }
}
