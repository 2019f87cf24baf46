//! `sluice simulate --config FILE --access-log LOG`: what a configuration would have done to
//! the traffic of a real access log, request by request, in virtual time.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use sluice_core::{ManualClock, Nanos};
use sluice_gateway::stores::{memory_options, named_policies};
use sluice_http::pipeline::Limiter;
use sluice_sim::{
    AccessDecisionCsv, AccessInfo, AccessOptions, AccessReport, CombinedFormat, JsonFields, Judge, KeySecret,
    LimitDecision, LimitInfo, LogFormat, LogRequest, LogSink, LogSource, RouteInfo, SIMULATION_KEY_SECRET,
    parse_duration, plot_timeline, run_access_logs,
};
use sluice_store::{KeyHasher, LeaseOptions, MemoryStore, Store};

use super::instances::{Fleet, Split, region_leases};
use super::judge::{ConfigJudge, route_infos, warnings};
use super::progress::{ProgressBar, bar, eta, si};

/// The access-log arguments of `sluice simulate`.
#[derive(Debug, clap::Args)]
pub struct AccessArgs {
    /// Run the access log of --access-log through this gateway configuration (TOML): its routes,
    /// trusted proxies, keys and policies, on the memory store.
    #[arg(long, value_name = "FILE", requires = "access_log", conflicts_with_all = [
        "scenario", "arrivals", "rps", "duration", "seed", "generator", "clients",
        "limit", "window", "capacity", "refill", "algorithms", "keys",
    ])]
    pub config: Option<PathBuf>,
    /// An access log to run through --config: plain or gzip (told by its first bytes); `-` reads
    /// standard input. Given several times: one log per gateway instance, merged by time, each
    /// instance deciding its own log's requests (as --instances, one instance a log).
    #[arg(long, value_name = "FILE", requires = "config", action = clap::ArgAction::Append)]
    pub access_log: Vec<PathBuf>,
    /// Simulate N gateway instances over one shared store, each with its own quota leases for
    /// the policies with lease = "auto" (as the gateway takes them), and predict what that
    /// costs: the report compares them with one exact limiter deciding the same requests
    /// (under-admission), and counts their store calls.
    #[arg(long, value_name = "N", value_parser = parse_instances, requires = "access_log")]
    pub instances: Option<usize>,
    /// With --instances and one log: which instance decides each request [default: round-robin].
    #[arg(long, value_enum, requires = "access_log")]
    pub split: Option<SplitArg>,
    /// The instances (--instances, or one log each) are regions, each with its own store: a
    /// region leases its share of every lease = "auto" policy's window from the others in trades
    /// (each covering --trade-every of its traffic, from its first request), and denies on its
    /// own once no share is left for it until the window ends. Store calls are then the calls
    /// that cross regions (docs: Scaling, several regions).
    #[arg(long, requires = "access_log")]
    pub regions: bool,
    /// With --regions: how much of a region's traffic one trade covers.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, requires = "regions")]
    pub trade_every: Nanos,
    /// How the access log is written.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Combined, requires = "access_log")]
    pub log_format: LogFormatArg,
    /// JSON lines: the field of each role, ROLE=FIELD,... over the defaults; a dot descends into
    /// an object (request.remote_ip); ROLE= drops a role.
    #[arg(long, value_name = "ROLE=FIELD,...", requires = "access_log")]
    pub json_fields: Option<String>,
    /// Combined logs: the last quoted field after the user agent is X-Forwarded-For (nginx's
    /// "$http_x_forwarded_for" appended to the combined format).
    #[arg(long, requires = "access_log")]
    pub xff_last_field: bool,
    /// Lines are put back in time order within this window; a line older than that (its
    /// successors already decided) is decided at the current virtual time and counted late.
    #[arg(long, default_value = "2s", value_parser = parse_duration, requires = "access_log")]
    pub reorder_window: Nanos,
}

/// Most instances `--instances` takes.
pub const MAX_INSTANCES: usize = 1024;

fn parse_instances(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least one instance".into()),
        Ok(n) if n > MAX_INSTANCES => Err(format!("at most {MAX_INSTANCES} instances")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of instances")),
    }
}

/// `--split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitArg {
    /// Each instance in turn.
    RoundRobin,
    /// By the address that connected: a client always meets the same instance.
    Client,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormatArg {
    /// nginx/Apache combined, or common (no referer and user agent).
    Combined,
    /// One JSON object per line (see --json-fields).
    Json,
}

impl AccessArgs {
    /// Whether an access log is to be simulated.
    pub fn wanted(&self) -> bool {
        !self.access_log.is_empty()
    }

    /// With several instances: how many, how requests are split among them, and how they lease
    /// (as gateways, or as regions).
    pub fn fleet(&self) -> anyhow::Result<Option<(usize, Split, LeaseOptions)>> {
        let leases = if self.regions { region_leases(self.trade_every) } else { LeaseOptions::default() };
        match self.instances()? {
            Some((n, split)) => Ok(Some((n, split, leases))),
            None if self.regions => bail!("--regions needs --instances N, or one --access-log per region"),
            None => Ok(None),
        }
    }

    /// With several instances: how many, and how requests are split among them.
    fn instances(&self) -> anyhow::Result<Option<(usize, Split)>> {
        let logs = self.access_log.len();
        if self.access_log.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
            bail!("--access-log -: standard input can be read once");
        }
        if logs > 1 {
            if self.split.is_some() {
                bail!(
                    "--split is for one log: with several --access-log, each log is one instance's requests (leave --split out)"
                );
            }
            if let Some(n) = self.instances.filter(|&n| n != logs) {
                bail!("--instances {n} with {logs} logs: each log is one instance's (leave --instances out)");
            }
            if logs > MAX_INSTANCES {
                bail!("{logs} logs: at most {MAX_INSTANCES} instances");
            }
            return Ok(Some((logs, Split::Log)));
        }
        Ok(match (self.instances, self.split) {
            (None, Some(_)) => bail!("--split needs --instances N (how many instances to split the log among)"),
            (None, None) => None,
            (Some(n), split) => {
                Some((n, if split == Some(SplitArg::Client) { Split::Client } else { Split::RoundRobin }))
            }
        })
    }

    fn format(&self) -> anyhow::Result<LogFormat> {
        Ok(match self.log_format {
            LogFormatArg::Combined => {
                if self.json_fields.is_some() {
                    bail!("--json-fields is for --log-format json");
                }
                LogFormat::Combined(CombinedFormat { forwarded_last: self.xff_last_field })
            }
            LogFormatArg::Json => {
                if self.xff_last_field {
                    bail!(
                        "--xff-last-field is for --log-format combined; JSON logs name the field: --json-fields xff=FIELD"
                    );
                }
                let fields: JsonFields = self.json_fields.as_deref().unwrap_or("").parse().context("--json-fields")?;
                LogFormat::Json(fields)
            }
        })
    }
}

/// Writes decisions if asked, and draws the progress bar.
struct Sink {
    /// The decisions file.
    decisions: Option<AccessDecisionCsv<BufWriter<File>>>,
    /// The bar on stderr.
    bar: ProgressBar,
    /// The log's size, for the bar's fraction and estimate.
    size: Option<u64>,
}

impl LogSink for Sink {
    fn decision(
        &mut self,
        request: &LogRequest,
        at: Nanos,
        late: bool,
        route: &RouteInfo,
        limit: &LimitInfo,
        decision: &LimitDecision,
    ) -> std::io::Result<()> {
        match &mut self.decisions {
            Some(csv) => csv.decision(request, at, late, route, limit, decision),
            None => Ok(()),
        }
    }

    fn progress(&mut self, bytes: u64, lines: u64) {
        let size = self.size.filter(|&s| s > 0);
        self.bar.draw(|b| {
            let secs = b.elapsed().max(1e-3);
            let rate = format!("{} lines, {} lines/s", si(lines as f64), si(lines as f64 / secs));
            match size {
                Some(total) => {
                    let left = secs * total.saturating_sub(bytes) as f64 / bytes.max(1) as f64;
                    let f = bytes as f64 / total as f64;
                    format!("{} {}B of {}B, {rate}, ETA {}", bar(f), si(bytes as f64), si(total as f64), eta(left))
                }
                None => format!("{}B read, {rate}", si(bytes as f64)),
            }
        });
    }
}

/// The gateway renews a concurrency slot while its request lives, so a slot is held until the
/// request ends however long its lease: the simulation, which gives slots back when the logged
/// requests ended and renews nothing, leases them for a century instead.
fn held_until_released(config: &mut sluice_config::Config) {
    const CENTURY: u64 = 100 * 365 * 86_400 * sluice_core::NANOS_PER_SEC;
    for p in config.policies.iter_mut().filter(|p| p.concurrency) {
        if let Ok(log) = sluice_core::SlidingLog::new(p.policy.limit(), CENTURY) {
            p.policy = log.into();
        }
    }
}

/// Runs the access log through the configuration; writes the decisions and the plot if asked.
/// With several instances (`--instances`, or several logs) the run is theirs, and the report
/// ends with their prediction against one exact limiter.
pub fn run(args: &AccessArgs, decisions: Option<&Path>, plot: Option<&Path>) -> anyhow::Result<AccessReport> {
    let Some(config_path) = &args.config else {
        bail!("--access-log needs --config");
    };
    if args.access_log.is_empty() {
        bail!("--config needs --access-log");
    }
    let fleet_of = args.fleet()?;
    let format = args.format()?;
    let mut config = sluice_config::load(config_path)?;
    let log_headers = format.header_names();
    held_until_released(&mut config);

    // The gateway's pipeline on the memory store, its clock set to each request's logged time.
    let (secret, key_secret) = match &config.server.key_secret {
        Some(s) => (s.expose().to_string(), KeySecret::Configured),
        None => (SIMULATION_KEY_SECRET.to_string(), KeySecret::Simulation),
    };
    let routes = route_infos(&config);
    let warnings = warnings(&config, &log_headers);
    let policies: Vec<String> = config.policies.iter().map(|p| format!("{} ({})", p.name, p.policy.name())).collect();
    let mut single = None;
    let mut fleet = None;
    let judge: &mut dyn Judge = match fleet_of {
        None => {
            let clock = Arc::new(ManualClock::new(0));
            let store: Arc<dyn Store> =
                Arc::new(MemoryStore::new(named_policies(&config), memory_options(&config.store), clock.clone()));
            let limiter = Limiter::of_config(&config, store, KeyHasher::from_secret(secret.as_bytes()));
            single.insert(ConfigJudge::new(config, limiter, clock, &log_headers))
        }
        Some(of) => fleet.insert(Fleet::new(&config, of, &secret, &log_headers)),
    };

    let mut sources = Vec::with_capacity(args.access_log.len());
    for path in &args.access_log {
        sources.push(LogSource::open(path).with_context(|| format!("opening {}", path.display()))?);
    }
    let names = args.access_log.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    let size = sources.iter().map(LogSource::size).sum::<Option<u64>>();
    let mut sink = Sink { decisions: None, bar: ProgressBar::new(true), size };
    if let Some(path) = decisions {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        sink.decisions = Some(AccessDecisionCsv::new(BufWriter::new(file))?);
    }
    let options = AccessOptions {
        reorder_window: args.reorder_window,
        timeline: plot.is_some().then_some(policies),
        ..Default::default()
    };
    let results = run_access_logs(&mut sources, &format, routes, &options, judge, &mut sink);
    sink.bar.finish();
    let results = results.with_context(|| format!("in {names}"))?;
    if let Some(csv) = sink.decisions.take() {
        csv.into_inner().context("writing the decisions file")?;
    }
    let info = AccessInfo {
        access_log: names.clone(),
        log_format: format.name().to_string(),
        gzip: sources.iter().any(LogSource::is_gzip),
        reorder_window: args.reorder_window,
        key_secret,
        warnings,
    };
    let mut report = AccessReport::new(&results, &info);
    report.instances = fleet.as_ref().map(|f| f.report(&results));
    if let Some(path) = plot {
        match &results.timeline {
            Some(t) => plot_timeline(path, t, &report.headline())?,
            None => bail!("nothing to plot: no line of {names} was read as a request"),
        }
    }
    Ok(report)
}
