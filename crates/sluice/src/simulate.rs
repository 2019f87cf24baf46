//! `sluice simulate`: the algorithms side by side over generated or recorded arrivals, or a
//! gateway configuration over an access log.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::traffic::{PolicyArgs, TrafficArgs};
use anyhow::{Context, bail};
use clap::builder::PossibleValuesParser;
use sluice_core::{ALGORITHM_NAMES, Decision};
use sluice_sim::{Arrival, DecisionCsv, DecisionSink, KeyScope, Lane, Limits, Report, RunInfo, Scenario, Simulation};

mod access_log;
mod instances;
mod judge;
mod progress;

use progress::{ProgressBar, bar};

/// Arguments of `sluice simulate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Without --scenario or --arrivals, runs the seed article's experiment: Poisson arrivals at \
6 req/s for 30 s from Python's random.Random(42); windows of 10 per 1 s; token and leaky bucket of capacity 20 at \
10 per second. It prints the article's numbers: 184 requests; fixed window and sliding window counter 178 allowed, \
token and leaky bucket 184.

With --config and --access-log, runs a real access log through a gateway configuration instead: every request \
at its logged time, through the configured routes, trusted proxies, keys and policies, on the memory store, and \
reports per route and policy what was admitted and denied, the busiest keys (as the gateway's decision logs hash \
them) and the first and last denials. JSON roles (--json-fields, defaults in brackets): time [time] (RFC 3339, \
10/Oct/2000:13:55:36 -0700, or Unix seconds), ip [remote_addr], method [request_method], path [request_uri], \
request [request] (\"GET /path HTTP/1.1\", when method or path is absent), user_agent [http_user_agent], \
referer [http_referer], xff [http_x_forwarded_for], header:NAME [none]. Key parts json:... cannot be simulated: \
such routes are reported and not simulated.

With --instances N (or --access-log given once per instance), N gateway instances decide the log over one \
shared store, each with its own quota leases for the policies with lease = \"auto\", and the same requests go \
through one exact limiter too: the report adds, per route and limit, what the instances admitted against the \
exact limiter (under-admission: what the leases cost; over-admission must be 0) and the store calls per \
decision the leases save.")]
pub struct Args {
    #[command(flatten)]
    traffic: TrafficArgs,
    #[command(flatten)]
    access: access_log::AccessArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Algorithms to compare, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(ALGORITHM_NAMES),
          default_value = "fixed-window,sliding-log,sliding-window,token-bucket,leaky-bucket")]
    algorithms: Vec<String>,
    /// What the limits count by, comma-separated: ip, account, global. Default: ip and account
    /// for nat, and global too for botnet; for a file, the keys it has; otherwise global.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(["ip", "account", "global"]))]
    keys: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write every decision of every algorithm to FILE as CSV
    /// (time,key,algorithm,keyed_by,allowed,remaining,retry_after; with --access-log:
    /// time,line,late,route,policy,key_hash,key_type,decision,remaining,retry_after).
    #[arg(long, value_name = "FILE")]
    decisions: Option<PathBuf>,
    /// Draw the run to FILE.svg or FILE.png (with --access-log: admitted and denied over time
    /// per policy).
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

/// Runs `sluice simulate`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.plot {
        sluice_sim::is_svg(path)?;
    }
    if args.access.wanted() {
        if args.access.fleet()?.is_some() && args.format == Format::Csv {
            bail!("--format csv prints one run: with several instances, use --format table or json");
        }
        let report = access_log::run(&args.access, args.decisions.as_deref(), args.plot.as_deref())?;
        if let Some(alarm) = report.instances.as_ref().and_then(|i| i.over_admission_alarm()) {
            eprintln!("sluice simulate: {alarm}");
        }
        let text = match args.format {
            Format::Table => report.to_table(),
            Format::Json => report.to_json() + "\n",
            Format::Csv => report.to_csv(),
        };
        return print(&text);
    }
    let limits = args.policy.limits();
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

    let mut sink = Progress::new(arrivals.len(), sim.lanes().len());
    if let Some(path) = &args.decisions {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        sink.decisions = Some(DecisionCsv::new(BufWriter::new(file))?);
    }
    let results = sim.run(&arrivals, &mut sink)?;
    sink.finish();
    if let Some(csv) = sink.decisions.take() {
        csv.into_inner().context("writing the decisions file")?;
    }

    let report = Report::new(&results, &info);
    if let Some(path) = &args.plot {
        sluice_sim::plot(path, &results, &report.headline(), info.duration)?;
    }
    let text = match args.format {
        Format::Table => report.to_table(),
        Format::Json => report.to_json() + "\n",
        Format::Csv => report.to_csv(),
    };
    print(&text)
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The arrivals to run and the description of where they came from.
fn arrivals(args: &Args, limits: &Limits) -> anyhow::Result<(Vec<Arrival>, RunInfo)> {
    let traffic = args.traffic.load(args.policy.limit, args.policy.window)?;
    let info = match (&traffic.generated, &args.traffic.arrivals) {
        (Some((scenario, params)), _) => {
            let many = matches!(scenario, Scenario::Nat | Scenario::Botnet);
            RunInfo {
                scenario: Some(*scenario),
                arrivals_file: None,
                seed: Some(params.seed),
                generator: Some(params.generator),
                rps: (*scenario != Scenario::Boundary).then_some(params.rps),
                clients: many.then(|| params.clients(*scenario)),
                duration: params.duration,
                limits: limits.clone(),
            }
        }
        (None, path) => RunInfo {
            scenario: None,
            arrivals_file: path.as_ref().map(|p| p.display().to_string()),
            seed: None,
            generator: None,
            rps: None,
            clients: None,
            // The run lasts until the end of the window of the last arrival.
            duration: traffic
                .arrivals
                .last()
                .map_or(limits.window, |a| (a.at / limits.window + 1).saturating_mul(limits.window)),
            limits: limits.clone(),
        },
    };
    Ok((traffic.arrivals, info))
}

/// Writes decisions if asked, and draws a progress bar on a terminal for long runs.
struct Progress {
    decisions: Option<DecisionCsv<BufWriter<File>>>,
    bar: ProgressBar,
}

/// Runs with fewer decisions than this finish too fast to need a bar.
const LONG_RUN: usize = 2_000_000;

impl Progress {
    fn new(arrivals: usize, lanes: usize) -> Self {
        Self { decisions: None, bar: ProgressBar::new(arrivals.saturating_mul(lanes) >= LONG_RUN) }
    }

    fn finish(&mut self) {
        self.bar.finish();
    }
}

impl DecisionSink for Progress {
    fn decision(&mut self, arrival: &Arrival, lane: &Lane, decision: &Decision) -> std::io::Result<()> {
        match &mut self.decisions {
            Some(csv) => csv.decision(arrival, lane, decision),
            None => Ok(()),
        }
    }

    fn progress(&mut self, done: usize, total: usize) {
        if total > 0 {
            self.bar.draw(|_| format!("{} {done}/{total} arrivals", bar(done as f64 / total as f64)));
        }
    }
}
