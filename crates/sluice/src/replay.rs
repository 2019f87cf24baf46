//! `sluice replay`: real HTTP requests on the arrival times of a scenario or a file, and a
//! summary of what came back, optionally beside the simulation of the same arrivals.
//!
//! Every arrival becomes one `GET URL`, sent when its time (counted from the start of the replay,
//! on the wall clock) comes, with at most `--concurrency` requests in flight; a request that
//! finds no free slot waits for one and goes late (the summary says how late). An arrival's
//! client key is sent as `X-Forwarded-For` and its account as `X-Api-Key` (or the header named
//! by `--account-header`). The run is bounded: at most `--requests` (default: every arrival, at
//! most 100 000) requests, and a hard deadline at the last arrival's time plus `--grace`, when
//! requests still in flight are abandoned and counted as unfinished.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::traffic::{PolicyArgs, TrafficArgs};
use anyhow::{Context, bail};
use clap::builder::PossibleValuesParser;
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest_middleware::ClientWithMiddleware;
use sluice_client::{RetryError, RetryMiddleware, RetryPolicy, RetryReport};
use sluice_core::{ALGORITHM_NAMES, Nanos};
use sluice_sim::{
    Arrival, KeyScope, Lane, LaneResults, Limits, Quiet, RunResults, Simulation, format_duration, max_in_window,
    parse_duration,
};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

mod summary;

use summary::{Settings, Summary};

/// The most requests one replay sends.
const MAX_REQUESTS: usize = 100_000;

/// Arguments of `sluice replay`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Each arrival is one GET to --url at its time from the start. An arrival's client key is \
sent as X-Forwarded-For and its account as X-Api-Key (see --account-header). The run stops by itself: after \
--requests requests, and at the last arrival's time plus --grace at the latest. With --algorithm, the same \
arrivals are also simulated under that policy and the summary says where live and simulated decisions agree; \
--plot draws both.")]
pub struct Args {
    #[command(flatten)]
    traffic: TrafficArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// The URL to send the requests to (http only).
    #[arg(long)]
    url: String,
    /// Send only the first N arrivals (at most 100000; default: all of them, up to 100000).
    #[arg(long, value_name = "N")]
    requests: Option<usize>,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    concurrency: u32,
    /// Retry with sluice-client's policy: honour Retry-After and RateLimit headers, else back off
    /// with full jitter; a call's retries end within --grace.
    #[arg(long)]
    retry: bool,
    /// Attempts per request with --retry, the first included.
    #[arg(long, default_value_t = 5, requires = "retry", value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,
    /// How long after the last arrival's time requests may still finish; also each request's
    /// timeout.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: Nanos,
    /// The header that carries an arrival's account.
    #[arg(long, default_value = "x-api-key")]
    account_header: String,
    /// Also simulate the arrivals under this policy, to compare with what the server decided.
    #[arg(long, value_parser = PossibleValuesParser::new(ALGORITHM_NAMES))]
    algorithm: Option<String>,
    /// What the simulated policy counts by: global (every request from this machine shares one
    /// key, as a server keying on the peer address sees it), ip (X-Forwarded-For) or account.
    #[arg(long, default_value = "global", value_parser = PossibleValuesParser::new(["ip", "account", "global"]))]
    keys: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Draw the live results beside the simulated one to FILE.svg or FILE.png (needs --algorithm).
    #[arg(long, value_name = "FILE.svg|FILE.png", requires = "algorithm")]
    plot: Option<PathBuf>,
}

/// How the summary is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Lines for people.
    Table,
    /// One JSON object: {"sent": N, "statuses": {...}, "retries": R, "latency_ms": {...}, ...}.
    Json,
}

/// Runs `sluice replay`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let url = target(&args.url)?;
    if let Some(path) = &args.plot {
        sluice_sim::is_svg(path)?;
    }
    if args.grace == 0 {
        bail!("--grace must be longer than 0");
    }
    let limits = args.policy.limits();
    let mut arrivals = arrivals(&args, &limits)?;
    let total = arrivals.len();
    let wanted = match args.requests {
        Some(n) if n > MAX_REQUESTS => bail!("--requests {n} is more than one replay sends ({MAX_REQUESTS})"),
        Some(n) => n,
        None => {
            if total > MAX_REQUESTS {
                eprintln!("sluice: replaying the first {MAX_REQUESTS} of {total} arrivals (--requests chooses)");
            }
            MAX_REQUESTS
        }
    };
    arrivals.truncate(wanted);
    if arrivals.is_empty() {
        bail!("no arrivals to replay");
    }
    let headers = request_headers(&arrivals, &args.account_header)?;
    let simulated = match &args.algorithm {
        Some(algorithm) => Some(simulate(algorithm, &args.keys, &limits, &arrivals)?),
        None => None,
    };

    let grace = Duration::from_nanos(args.grace);
    let client = client(args.retry, args.max_attempts, grace, args.concurrency as usize)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let plan = Plan { url: url.clone(), arrivals: &arrivals, headers, concurrency: args.concurrency as usize, grace };
    let live = runtime.block_on(replay(client, plan));
    drop(runtime);

    if live.calls().all(|c| c.status.is_none()) {
        match live.calls().find_map(|c| c.error.as_ref()) {
            Some(e) => bail!("no response from {url}: {e}"),
            None => bail!("no response from {url} within the grace period of {}", format_duration(args.grace)),
        }
    }
    let settings = Settings { url: url.to_string(), retry: args.retry, concurrency: args.concurrency };
    let summary = Summary::new(settings, &live, simulated.as_ref());
    if let (Some(path), Some(sim)) = (&args.plot, &simulated) {
        let results = beside(sim, &live, &arrivals, limits.window);
        let title = format!("{} requests to {url}: live beside simulated", arrivals.len());
        let span = arrivals.last().map_or(0, |a| a.at).saturating_add(1).max(limits.window);
        sluice_sim::plot(path, &results, &title, span)?;
    }
    let text = match args.format {
        Format::Table => summary.to_table(),
        Format::Json => serde_json::to_string_pretty(&summary)? + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The target, checked before anything is sent.
fn target(raw: &str) -> anyhow::Result<Url> {
    let url = Url::parse(raw).with_context(|| format!("invalid --url `{raw}`"))?;
    if url.scheme() != "http" {
        bail!("invalid --url `{raw}`: only http:// URLs are supported, not {}://", url.scheme());
    }
    if url.host_str().is_none_or(str::is_empty) {
        bail!("invalid --url `{raw}`: no host");
    }
    Ok(url)
}

/// The arrivals to replay, generated or read from the file.
fn arrivals(args: &Args, limits: &Limits) -> anyhow::Result<Vec<Arrival>> {
    Ok(args.traffic.load(limits.limit, limits.window)?.arrivals)
}

/// Each arrival's identity headers: the client as `X-Forwarded-For`, the account under
/// `account_header`. A key that cannot be a header value is refused before anything is sent.
fn request_headers(arrivals: &[Arrival], account_header: &str) -> anyhow::Result<Vec<HeaderMap>> {
    let account: HeaderName =
        account_header.parse().with_context(|| format!("--account-header `{account_header}` is not a header name"))?;
    let forwarded = HeaderName::from_static("x-forwarded-for");
    let value = |i: usize, what: &str, key: &str| {
        HeaderValue::from_str(key)
            .with_context(|| format!("arrival {}: the {what} `{key}` cannot be sent in a header", i + 1))
    };
    arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut h = HeaderMap::new();
            if let Some(c) = &a.client {
                h.insert(forwarded.clone(), value(i, "client", c)?);
            }
            if let Some(acc) = &a.account {
                h.insert(account.clone(), value(i, "account", acc)?);
            }
            Ok(h)
        })
        .collect()
}

/// The HTTP client: no proxy from the environment (the replay measures the target), each
/// request bounded by `grace`, and with `retry` sluice-client's policy with calls bounded by
/// `grace` too.
fn client(retry: bool, max_attempts: u32, grace: Duration, concurrency: usize) -> anyhow::Result<ClientWithMiddleware> {
    let inner = reqwest::Client::builder()
        .no_proxy()
        .timeout(grace)
        .pool_max_idle_per_host(concurrency)
        .build()
        .context("building the HTTP client")?;
    let mut builder = reqwest_middleware::ClientBuilder::new(inner);
    if retry {
        let policy = RetryPolicy::builder().max_attempts(max_attempts).deadline(grace).build()?;
        builder = builder.with(RetryMiddleware::new(policy));
    }
    Ok(builder.build())
}

/// What to send.
struct Plan<'a> {
    url: Url,
    arrivals: &'a [Arrival],
    headers: Vec<HeaderMap>,
    concurrency: usize,
    grace: Duration,
}

/// One request's fate.
#[derive(Debug, Clone, Default)]
struct Call {
    /// The final status, when a response came.
    status: Option<u16>,
    /// What went wrong when none came.
    error: Option<String>,
    /// The error's kind: connect, timeout or other.
    error_kind: Option<&'static str>,
    /// From sending to the end of the body, retries and their waits included.
    latency: Duration,
    /// How long after its arrival time the request was sent.
    lag: Duration,
    /// Attempts after the first.
    retries: u32,
    /// 429 answers received, retried ones included.
    rate_limited: u32,
}

/// What became of one arrival.
#[derive(Debug, Clone)]
enum Fate {
    /// The deadline came before its time (or its turn for a slot).
    NotSent,
    /// Sent, and abandoned in flight at the deadline.
    Unfinished,
    /// Finished with a response or an error.
    Done(Call),
}

/// The results of the live run.
struct Live {
    /// One per arrival, in order.
    fates: Vec<Fate>,
    /// From the first arrival's time zero to the end of the run.
    elapsed: Duration,
}

impl Live {
    fn calls(&self) -> impl Iterator<Item = &Call> {
        self.fates.iter().filter_map(|f| match f {
            Fate::Done(c) => Some(c),
            _ => None,
        })
    }
}

async fn replay(client: ClientWithMiddleware, plan: Plan<'_>) -> Live {
    let start = Instant::now();
    let last = plan.arrivals.last().map_or(0, |a| a.at);
    let deadline = start + Duration::from_nanos(last) + plan.grace;
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Call)>();
    let slots = Arc::new(Semaphore::new(plan.concurrency));
    let mut tasks = JoinSet::new();
    let mut fates = vec![Fate::NotSent; plan.arrivals.len()];
    let dispatch = async {
        for (i, (arrival, headers)) in plan.arrivals.iter().zip(plan.headers).enumerate() {
            let due = start + Duration::from_nanos(arrival.at);
            tokio::time::sleep_until(due).await;
            let Ok(slot) = slots.clone().acquire_owned().await else { break };
            let request = client.get(plan.url.clone()).headers(headers);
            let tx = tx.clone();
            fates[i] = Fate::Unfinished;
            tasks.spawn(async move {
                let sent = Instant::now();
                let mut call = send(request).await;
                call.latency = sent.elapsed();
                call.lag = sent.saturating_duration_since(due);
                drop(slot);
                let _ = tx.send((i, call));
            });
        }
        while tasks.join_next().await.is_some() {}
    };
    // At the deadline the dispatcher stops; calls still in flight are dropped with the tasks.
    let _ = tokio::time::timeout_at(deadline, dispatch).await;
    tasks.abort_all();
    drop(tx);
    let elapsed = start.elapsed();
    while let Ok((i, call)) = rx.try_recv() {
        fates[i] = Fate::Done(call);
    }
    Live { fates, elapsed }
}

/// Sends one request and reads its body; the retry report, if any, gives the retries.
async fn send(request: reqwest_middleware::RequestBuilder) -> Call {
    let mut call = Call::default();
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            match response.extensions().get::<RetryReport>() {
                Some(r) => (call.retries, call.rate_limited) = (r.retries(), r.rate_limited),
                None => call.rate_limited = u32::from(status == 429),
            }
            match response.bytes().await {
                Ok(_) => call.status = Some(status),
                Err(e) => (call.error, call.error_kind) = (Some(chain(&e)), Some(kind(&e))),
            }
        }
        Err(e) => {
            let (report, inner) = match RetryError::from_middleware_error(&e) {
                Some(r) => (Some(&r.report), r.source.downcast_ref::<reqwest_middleware::Error>()),
                None => (None, Some(&e)),
            };
            if let Some(r) = report {
                (call.retries, call.rate_limited) = (r.retries(), r.rate_limited);
            }
            let (error, error_kind) = match inner {
                Some(reqwest_middleware::Error::Reqwest(e)) => (chain(e), kind(e)),
                _ => (chain(&e), "other"),
            };
            (call.error, call.error_kind) = (Some(error), Some(error_kind));
        }
    }
    call
}

fn kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "other"
    }
}

/// An error with its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let _ = write!(s, ": {inner}");
        source = inner.source();
    }
    s
}

/// Whether the server let a request through: a response other than 429 or 503.
fn admitted(fate: &Fate) -> bool {
    matches!(fate, Fate::Done(Call { status: Some(s), .. }) if *s != 429 && *s != 503)
}

/// The simulated lane of `algorithm` under `keys` over the replayed arrivals.
fn simulate(algorithm: &str, keys: &str, limits: &Limits, arrivals: &[Arrival]) -> anyhow::Result<LaneResults> {
    let scope: KeyScope = keys.parse()?;
    let sim = Simulation::new(&[algorithm], &[scope], limits)?;
    let mut results = sim.run(arrivals, &mut Quiet)?;
    let mut lane = results.lanes.remove(0);
    lane.lane.algorithm = format!("simulated {algorithm}");
    Ok(lane)
}

/// The live lane above the simulated one, for the figure.
fn beside(sim: &LaneResults, live: &Live, arrivals: &[Arrival], window: Nanos) -> RunResults {
    let times: Vec<Nanos> = arrivals.iter().map(|a| a.at).collect();
    let allowed: Vec<bool> = live.fates.iter().map(admitted).collect();
    let admitted_times: Vec<Nanos> = times.iter().zip(&allowed).filter(|(_, a)| **a).map(|(t, _)| *t).collect();
    let admitted = admitted_times.len() as u64;
    let lane = LaneResults {
        lane: Lane { algorithm: "live (not 429/503)".into(), scope: sim.lane.scope, policy: sim.lane.policy },
        allowed,
        admitted,
        rejected: times.len() as u64 - admitted,
        max_in_window: max_in_window(&admitted_times, window),
    };
    RunResults { times, window, lanes: vec![lane, sim.clone()] }
}
