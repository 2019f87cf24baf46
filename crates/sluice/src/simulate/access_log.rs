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
    AccessDecisionCsv, AccessInfo, AccessOptions, AccessReport, CombinedFormat, JsonFields, KeySecret, LimitDecision,
    LimitInfo, LogFormat, LogRequest, LogSink, LogSource, RouteInfo, SIMULATION_KEY_SECRET, parse_duration,
    plot_timeline, run_access_log,
};
use sluice_store::{KeyHasher, MemoryStore, Store};

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
    /// standard input.
    #[arg(long, value_name = "FILE", requires = "config")]
    pub access_log: Option<PathBuf>,
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
        self.access_log.is_some()
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
pub fn run(args: &AccessArgs, decisions: Option<&Path>, plot: Option<&Path>) -> anyhow::Result<AccessReport> {
    let (Some(config_path), Some(log_path)) = (&args.config, &args.access_log) else {
        bail!("--access-log needs --config");
    };
    let format = args.format()?;
    let mut config = sluice_config::load(config_path)?;
    let log_headers = format.header_names();
    held_until_released(&mut config);

    // The gateway's pipeline on the memory store, its clock set to each request's logged time.
    let clock = Arc::new(ManualClock::new(0));
    let store: Arc<dyn Store> =
        Arc::new(MemoryStore::new(named_policies(&config), memory_options(&config.store), clock.clone()));
    let (secret, key_secret) = match &config.server.key_secret {
        Some(s) => (s.expose(), KeySecret::Configured),
        None => (SIMULATION_KEY_SECRET, KeySecret::Simulation),
    };
    let limiter = Limiter::of_config(&config, store, KeyHasher::from_secret(secret.as_bytes()));
    let routes = route_infos(&config);
    let warnings = warnings(&config, &log_headers);
    let policies: Vec<String> = config.policies.iter().map(|p| format!("{} ({})", p.name, p.policy.name())).collect();
    let mut judge = ConfigJudge::new(config, limiter, clock, &log_headers);

    let mut source = LogSource::open(log_path).with_context(|| format!("opening {}", log_path.display()))?;
    let mut sink = Sink { decisions: None, bar: ProgressBar::new(true), size: source.size() };
    if let Some(path) = decisions {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        sink.decisions = Some(AccessDecisionCsv::new(BufWriter::new(file))?);
    }
    let options = AccessOptions {
        reorder_window: args.reorder_window,
        timeline: plot.is_some().then_some(policies),
        ..Default::default()
    };
    let results = run_access_log(&mut source, &format, routes, &options, &mut judge, &mut sink);
    sink.bar.finish();
    let results = results.with_context(|| format!("in {}", log_path.display()))?;
    if let Some(csv) = sink.decisions.take() {
        csv.into_inner().context("writing the decisions file")?;
    }
    let info = AccessInfo {
        access_log: log_path.display().to_string(),
        log_format: format.name().to_string(),
        gzip: source.is_gzip(),
        reorder_window: args.reorder_window,
        key_secret,
        warnings,
    };
    let report = AccessReport::new(&results, &info);
    if let Some(path) = plot {
        match &results.timeline {
            Some(t) => plot_timeline(path, t, &report.headline())?,
            None => bail!("nothing to plot: no line of {} was read as a request", log_path.display()),
        }
    }
    Ok(report)
}
