//! Running an access log through a configuration: every line in virtual time, at its logged
//! time, put back in time order within a reorder window, decided by a [`Judge`] (in `sluice`,
//! the gateway's own pipeline over the memory store), and counted per route and limit in fixed
//! memory.
//!
//! This crate knows nothing of HTTP or configurations: the judge matches routes and builds keys,
//! and [`RouteInfo`] tells the report what the routes and limits are called.
//!
//! ```
//! use sluice_core::{Decision, Nanos};
//! use sluice_sim::{
//!     AccessOptions, CombinedFormat, Judge, Judgement, LimitDecision, LimitInfo, LimitVerdict, LogFormat,
//!     LogRequest, LogSource, Quiet, RequestVerdict, RouteInfo, run_access_log,
//! };
//! use sluice_store::KeyHash;
//!
//! /// Admits the first two requests, denies the rest.
//! struct FirstTwo(u32, Vec<LimitDecision>);
//! impl Judge for FirstTwo {
//!     fn judge(&mut self, _: &LogRequest, _: Nanos) -> Judgement<'_> {
//!         self.0 += 1;
//!         let allowed = self.0 <= 2;
//!         let verdict = if allowed { LimitVerdict::Allowed } else { LimitVerdict::Denied };
//!         let decision = Decision { allowed, limit: 2, remaining: 0, reset_after: 0, retry_after: 0, delay: 0 };
//!         self.1 = vec![LimitDecision { key: KeyHash([7; 16]), key_type: "ip", verdict, decision }];
//!         let request = if allowed { RequestVerdict::Admitted } else { RequestVerdict::Denied };
//!         Judgement::Decided { route: 0, verdict: request, limits: &self.1 }
//!     }
//! }
//!
//! let log = "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1\n".repeat(3) + "garbage\n";
//! let mut source = LogSource::from_reader(std::io::Cursor::new(log.into_bytes()), None).unwrap();
//! let limit = LimitInfo { policy: 0, policy_name: "p".into(), algorithm: "fixed-window".into(), key: "ip".into(), shadow: false };
//! let routes = vec![RouteInfo { name: "/".into(), path: "/".into(), limits: vec![limit], not_simulable: None }];
//! let format = LogFormat::Combined(CombinedFormat::default());
//! let out = run_access_log(&mut source, &format, routes, &AccessOptions::default(), &mut FirstTwo(0, vec![]), &mut Quiet)
//!     .unwrap();
//! assert_eq!((out.lines, out.requests, out.malformed), (4, 3, 1));
//! assert_eq!(out.malformed_lines[0].0, 4);
//! assert_eq!((out.routes[0].admitted, out.routes[0].denied), (2, 1));
//! assert_eq!(out.routes[0].limits[0].keys.top(1)[0].requests, 3);
//! ```

use std::io;

use sluice_core::{Decision, NANOS_PER_SEC, Nanos};
use sluice_store::KeyHash;
use thiserror::Error;

use crate::heavy_hitters::{HEAVY_HITTERS_CAPACITY, HeavyHitters};
use crate::log_format::LogFormat;
use crate::log_request::{LineError, LogRequest};
use crate::log_source::LogSource;
use crate::reorder::Reorder;
use crate::simulation::Quiet;
use crate::timeline::Timeline;

/// How many malformed lines are kept with their reasons (all are counted).
pub const MALFORMED_SHOWN: usize = 10;

/// Lines between two progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

/// A configured route, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteInfo {
    /// Its name (metrics, `route` key parts).
    pub name: String,
    /// The path pattern it matches (`/api/*`).
    pub path: String,
    /// Its limits, in order.
    pub limits: Vec<LimitInfo>,
    /// Why its requests cannot be simulated (a key part the log cannot supply), if so.
    pub not_simulable: Option<String>,
}

/// One limit of a route, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitInfo {
    /// Index of its policy in the configuration (the series of the plot).
    pub policy: usize,
    /// The policy's name.
    pub policy_name: String,
    /// The policy's algorithm.
    pub algorithm: String,
    /// How its key is built (`header:x-api-key|ip + route`).
    pub key: String,
    /// Decided and counted, never denying.
    pub shadow: bool,
}

/// What one limit did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitVerdict {
    /// It admitted the request.
    Allowed,
    /// It denied the request.
    Denied,
    /// A shadow limit that would have denied it.
    ShadowDenied,
    /// A shadow limit not decided: the enforced limits denied the request first.
    NotEvaluated,
}

impl LimitVerdict {
    /// The name in the decisions file, as in the gateway's decision logs.
    pub fn name(self) -> &'static str {
        match self {
            LimitVerdict::Allowed => "allowed",
            LimitVerdict::Denied => "denied",
            LimitVerdict::ShadowDenied => "shadow_denied",
            LimitVerdict::NotEvaluated => "not_evaluated",
        }
    }

    /// Denied, or would have been (shadow).
    pub fn denies(self) -> bool {
        matches!(self, LimitVerdict::Denied | LimitVerdict::ShadowDenied)
    }
}

/// One limit's decision on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitDecision {
    /// The keyed hash of the key, as the decision logs write it.
    pub key: KeyHash,
    /// What the key was built from (`ip`, `header`, ..., `absent`).
    pub key_type: &'static str,
    /// What the limit did.
    pub verdict: LimitVerdict,
    /// The core's decision (remaining, retry-after, shaping delay).
    pub decision: Decision,
}

/// What became of a request under its route's limits together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestVerdict {
    /// Every enforced limit admitted it.
    Admitted,
    /// A limit denied it.
    Denied,
    /// The store could not decide (a full store refusing new keys): the gateway answers 503.
    Unavailable,
}

/// What a [`Judge`] made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement<'a> {
    /// No route matched it.
    Unmatched,
    /// The gateway would refuse it (400) before any route: a path upstreams read differently.
    Refused,
    /// Route `route` matched, but the log cannot supply its keys.
    NotSimulable {
        /// Index of the route.
        route: usize,
    },
    /// Route `route` matched and its limits decided.
    Decided {
        /// Index of the route.
        route: usize,
        /// The request's outcome.
        verdict: RequestVerdict,
        /// One per limit of the route, in order (empty when unavailable).
        limits: &'a [LimitDecision],
    },
}

/// Decides the requests of a log, one at a time, in time order.
pub trait Judge {
    /// Decides `request` at virtual time `at` (its logged time, or later for a late line).
    fn judge(&mut self, request: &LogRequest, at: Nanos) -> Judgement<'_>;
}

/// Receives every limit decision and the progress of a run: the decisions file and the
/// progress bar of `sluice simulate` are sinks.
pub trait LogSink {
    /// Called for each decided limit of each request, in decision order.
    #[allow(clippy::too_many_arguments)]
    fn decision(
        &mut self,
        request: &LogRequest,
        at: Nanos,
        late: bool,
        route: &RouteInfo,
        limit: &LimitInfo,
        decision: &LimitDecision,
    ) -> io::Result<()> {
        let _ = (request, at, late, route, limit, decision);
        Ok(())
    }

    /// Called every 65,536 lines with the bytes and lines read so far.
    fn progress(&mut self, bytes_read: u64, lines: u64) {
        let _ = (bytes_read, lines);
    }
}

impl LogSink for Quiet {}

/// The knobs of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessOptions {
    /// How long lines are held to be put back in time order.
    pub reorder_window: Nanos,
    /// How many keys each limit's busiest-keys summary keeps.
    pub keys_kept: usize,
    /// The policy names, by index, when a [`Timeline`] per policy is wanted (for a plot).
    pub timeline: Option<Vec<String>>,
}

impl Default for AccessOptions {
    /// A 2 s window, [`HEAVY_HITTERS_CAPACITY`] keys per limit, no timeline.
    fn default() -> Self {
        Self { reorder_window: 2 * NANOS_PER_SEC, keys_kept: HEAVY_HITTERS_CAPACITY, timeline: None }
    }
}

/// The first and the last of some instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// The earliest.
    pub first: Option<Nanos>,
    /// The latest.
    pub last: Option<Nanos>,
}

impl Span {
    fn note(&mut self, at: Nanos) {
        self.first = Some(self.first.map_or(at, |f| f.min(at)));
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }
}

/// What one limit of a route did over the run.
#[derive(Debug, Clone)]
pub struct LimitResults {
    /// The limit.
    pub info: LimitInfo,
    /// Requests it admitted.
    pub admitted: u64,
    /// Requests it denied (for a shadow limit: would have denied).
    pub denied: u64,
    /// Requests a shadow limit did not decide (the enforced limits denied them).
    pub not_evaluated: u64,
    /// Requests admitted with a shaping delay.
    pub delayed: u64,
    /// The longest shaping delay.
    pub max_delay: Nanos,
    /// When it first and last denied.
    pub denials: Span,
    /// Its busiest keys.
    pub keys: HeavyHitters,
}

impl LimitResults {
    /// Requests it decided (or, shadow, was given).
    pub fn requests(&self) -> u64 {
        self.admitted + self.denied + self.not_evaluated
    }
}

/// What one route's requests met over the run.
#[derive(Debug, Clone)]
pub struct RouteResults {
    /// The route.
    pub info: RouteInfo,
    /// Requests that matched it (simulated or not).
    pub requests: u64,
    /// Requests admitted by all its limits.
    pub admitted: u64,
    /// Requests denied by one of its limits.
    pub denied: u64,
    /// Requests the store could not decide.
    pub unavailable: u64,
    /// When its requests were first and last denied.
    pub denials: Span,
    /// Per limit, in order.
    pub limits: Vec<LimitResults>,
}

/// Everything a run counted.
#[derive(Debug, Clone)]
pub struct AccessResults {
    /// Lines read.
    pub lines: u64,
    /// Lines read as requests.
    pub requests: u64,
    /// Lines that could not be read.
    pub malformed: u64,
    /// The first [`MALFORMED_SHOWN`] of them: line number and reason.
    pub malformed_lines: Vec<(u64, LineError)>,
    /// Requests that came after a later one was decided, decided at the then current time.
    pub late: u64,
    /// Requests that matched no route.
    pub unmatched: u64,
    /// Requests the gateway would refuse (400) before routing them.
    pub refused: u64,
    /// The earliest and latest logged times.
    pub logged: Span,
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Per route, in configuration order.
    pub routes: Vec<RouteResults>,
    /// Admitted and denied over time per policy, when asked for.
    pub timeline: Option<Timeline>,
}

impl AccessResults {
    /// Requests of routes that could not be simulated.
    pub fn not_simulated(&self) -> u64 {
        self.routes.iter().filter(|r| r.info.not_simulable.is_some()).map(|r| r.requests).sum()
    }
}

/// Why a run stopped.
#[derive(Debug, Error)]
pub enum AccessError {
    /// Reading the log failed (a truncated gzip file, a read error).
    #[error("reading the log: {0}")]
    Read(io::Error),
    /// A sink failed to write.
    #[error("writing decisions: {0}")]
    Write(io::Error),
}

/// The run's state: the counts so far and the virtual time.
struct Counter<'a> {
    /// What is counted.
    results: AccessResults,
    /// Decides each request.
    judge: &'a mut dyn Judge,
    /// Receives decisions and progress.
    sink: &'a mut dyn LogSink,
    /// The time of the last decision: the virtual clock, which never goes back.
    now: Option<Nanos>,
}

impl Counter<'_> {
    fn malformed(&mut self, line: u64, error: LineError) {
        self.results.malformed += 1;
        if self.results.malformed_lines.len() < MALFORMED_SHOWN {
            self.results.malformed_lines.push((line, error));
        }
    }

    fn decide(&mut self, r: &LogRequest, late: bool) -> Result<(), AccessError> {
        let at = self.now.map_or(r.at, |now| now.max(r.at));
        self.now = Some(at);
        self.results.late += u64::from(late);
        let results = &mut self.results;
        let (route, verdict, limits) = match self.judge.judge(r, at) {
            Judgement::Unmatched => {
                results.unmatched += 1;
                return Ok(());
            }
            Judgement::Refused => {
                results.refused += 1;
                return Ok(());
            }
            Judgement::NotSimulable { route } => {
                if let Some(rr) = results.routes.get_mut(route) {
                    rr.requests += 1;
                }
                return Ok(());
            }
            Judgement::Decided { route, verdict, limits } => (route, verdict, limits),
        };
        let Some(rr) = results.routes.get_mut(route) else {
            results.unmatched += 1;
            return Ok(());
        };
        rr.requests += 1;
        match verdict {
            RequestVerdict::Admitted => rr.admitted += 1,
            RequestVerdict::Denied => {
                rr.denied += 1;
                rr.denials.note(at);
            }
            RequestVerdict::Unavailable => rr.unavailable += 1,
        }
        for (lr, d) in rr.limits.iter_mut().zip(limits) {
            let denied = d.verdict.denies();
            match d.verdict {
                LimitVerdict::Allowed => {
                    lr.admitted += 1;
                    if d.decision.delay > 0 {
                        lr.delayed += 1;
                        lr.max_delay = lr.max_delay.max(d.decision.delay);
                    }
                }
                LimitVerdict::Denied | LimitVerdict::ShadowDenied => lr.denied += 1,
                LimitVerdict::NotEvaluated => lr.not_evaluated += 1,
            }
            if denied {
                lr.denials.note(at);
            }
            if d.verdict != LimitVerdict::NotEvaluated {
                lr.keys.add(d.key, denied);
                if let Some(t) = &mut results.timeline {
                    t.add(lr.info.policy, at, denied);
                }
            }
            self.sink.decision(r, at, late, &rr.info, &lr.info, d).map_err(AccessError::Write)?;
        }
        Ok(())
    }
}

/// Reads `source` in `format` and decides every request with `judge`, counting per route of
/// `routes` (the judge's route indices refer to it). Lines that cannot be read are counted with
/// their numbers, never skipped silently.
pub fn run_access_log(
    source: &mut LogSource,
    format: &LogFormat,
    routes: Vec<RouteInfo>,
    options: &AccessOptions,
    judge: &mut dyn Judge,
    sink: &mut dyn LogSink,
) -> Result<AccessResults, AccessError> {
    run_access_logs(std::slice::from_mut(source), format, routes, options, judge, sink)
}

/// [`run_access_log`] over several logs of the same format at once (one per gateway instance,
/// say), merged by time: the next request decided is the earliest of the next request of each
/// log, then put back in time order within the reorder window as with one log. Each request
/// says which log it came from ([`LogRequest::source`]); line numbers count within each log.
pub fn run_access_logs(
    sources: &mut [LogSource],
    format: &LogFormat,
    routes: Vec<RouteInfo>,
    options: &AccessOptions,
    judge: &mut dyn Judge,
    sink: &mut dyn LogSink,
) -> Result<AccessResults, AccessError> {
    let routes = routes
        .into_iter()
        .map(|info| RouteResults {
            limits: info
                .limits
                .iter()
                .map(|l| LimitResults {
                    info: l.clone(),
                    admitted: 0,
                    denied: 0,
                    not_evaluated: 0,
                    delayed: 0,
                    max_delay: 0,
                    denials: Span::default(),
                    keys: HeavyHitters::new(options.keys_kept),
                })
                .collect(),
            info,
            requests: 0,
            admitted: 0,
            denied: 0,
            unavailable: 0,
            denials: Span::default(),
        })
        .collect();
    let results = AccessResults {
        lines: 0,
        requests: 0,
        malformed: 0,
        malformed_lines: Vec::new(),
        late: 0,
        unmatched: 0,
        refused: 0,
        logged: Span::default(),
        bytes_read: 0,
        routes,
        timeline: None,
    };
    let mut c = Counter { results, judge, sink, now: None };
    let mut window = Reorder::new(options.reorder_window);
    // The next request of each log, read ahead (`None` once the log is read to its end).
    let mut heads: Vec<Option<LogRequest>> = Vec::with_capacity(sources.len());
    for i in 0..sources.len() {
        let head = next_request(sources, i, format, &mut c, &mut window)?;
        heads.push(head);
    }
    loop {
        // The earliest head; the first log's on a tie (a stable merge).
        let next = heads.iter().enumerate().filter_map(|(i, h)| h.as_ref().map(|r| (r.at, i))).min();
        let Some((_, i)) = next else { break };
        let mut r = heads[i].take().expect("picked a head");
        r.source = i;
        c.results.requests += 1;
        c.results.logged.note(r.at);
        if c.results.timeline.is_none()
            && let Some(names) = &options.timeline
        {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            c.results.timeline = Some(Timeline::new(&names, r.at - r.at % NANOS_PER_SEC));
        }
        if c.now.is_some_and(|now| r.at < now) {
            // A later line was decided already: this one is decided now, late.
            c.decide(&r, true)?;
            window.recycle(r);
        } else {
            window.push(r);
        }
        while let Some(r) = window.pop_ready() {
            c.decide(&r, false)?;
            window.recycle(r);
        }
        heads[i] = next_request(sources, i, format, &mut c, &mut window)?;
    }
    while let Some(r) = window.pop_any() {
        c.decide(&r, false)?;
        window.recycle(r);
    }
    c.results.bytes_read = sources.iter().map(LogSource::bytes_read).sum();
    c.sink.progress(c.results.bytes_read, c.results.lines);
    Ok(c.results)
}

/// The next line of `sources[i]` read as a request (its number set), counting every line read
/// and the malformed ones on the way; `None` at the end of the log.
fn next_request(
    sources: &mut [LogSource],
    i: usize,
    format: &LogFormat,
    c: &mut Counter<'_>,
    window: &mut Reorder,
) -> Result<Option<LogRequest>, AccessError> {
    loop {
        let mut r = window.spare();
        let number = {
            let Some(line) = sources[i].next_line().map_err(AccessError::Read)? else {
                window.recycle(r);
                return Ok(None);
            };
            match line.bytes.and_then(|bytes| format.parse(bytes, &mut r)) {
                Ok(()) => Some(line.number),
                Err(e) => {
                    c.malformed(line.number, e);
                    None
                }
            }
        };
        c.results.lines += 1;
        if c.results.lines.is_multiple_of(PROGRESS_EVERY) {
            let bytes = sources.iter().map(LogSource::bytes_read).sum();
            c.sink.progress(bytes, c.results.lines);
        }
        match number {
            Some(number) => {
                r.line = number;
                return Ok(Some(r));
            }
            None => window.recycle(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::combined::CombinedFormat;

    /// Records the order and times of decisions; admits everything.
    struct Recorder {
        seen: Vec<(u64, Nanos)>,
        out: Vec<LimitDecision>,
    }

    impl Judge for Recorder {
        fn judge(&mut self, r: &LogRequest, at: Nanos) -> Judgement<'_> {
            self.seen.push((r.line, at));
            if r.path() == "/nowhere" {
                return Judgement::Unmatched;
            }
            let decision = Decision { allowed: true, limit: 1, remaining: 0, reset_after: 0, retry_after: 0, delay: 0 };
            self.out = vec![LimitDecision {
                key: KeyHash([r.line as u8; 16]),
                key_type: "ip",
                verdict: LimitVerdict::Allowed,
                decision,
            }];
            Judgement::Decided { route: 0, verdict: RequestVerdict::Admitted, limits: &self.out }
        }
    }

    fn line(second: u32, path: &str) -> String {
        format!("1.2.3.4 - - [10/Oct/2000:13:55:{second:02} +0000] \"GET {path} HTTP/1.1\" 200 1\n")
    }

    fn run(text: &str, window: Nanos) -> (AccessResults, Vec<(u64, Nanos)>) {
        let mut source = LogSource::from_reader(std::io::Cursor::new(text.as_bytes().to_vec()), None).unwrap();
        let limit =
            LimitInfo { policy: 0, policy_name: "p".into(), algorithm: "a".into(), key: "ip".into(), shadow: false };
        let routes = vec![RouteInfo { name: "r".into(), path: "/*".into(), limits: vec![limit], not_simulable: None }];
        let options = AccessOptions { reorder_window: window, timeline: Some(vec!["p".into()]), ..Default::default() };
        let mut judge = Recorder { seen: Vec::new(), out: Vec::new() };
        let format = LogFormat::Combined(CombinedFormat::default());
        let out = run_access_log(&mut source, &format, routes, &options, &mut judge, &mut Quiet).unwrap();
        (out, judge.seen)
    }

    /// 2000-10-10T13:55:00Z.
    const BASE: Nanos = 971_186_100 * NANOS_PER_SEC;

    #[test]
    fn lines_are_decided_in_time_order_within_the_window() {
        // Second 9 comes twice after 10, each within 2 s of the newest line.
        let text = [line(10, "/"), line(9, "/"), line(11, "/"), line(9, "/"), line(20, "/")].concat();
        let (out, seen) = run(&text, 2 * NANOS_PER_SEC);
        let lines: Vec<u64> = seen.iter().map(|s| s.0).collect();
        assert_eq!(lines, [2, 4, 1, 3, 5]);
        assert_eq!(seen[0].1, BASE + 9 * NANOS_PER_SEC);
        assert_eq!(out.late, 0);
        assert!(seen.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    #[test]
    fn a_line_beyond_the_window_is_late_and_decided_at_the_current_time() {
        // Line 3 (second 5) comes after second 10 was decided: late, decided at second 10.
        let text = [line(10, "/"), line(13, "/"), line(5, "/"), line(14, "/")].concat();
        let (out, seen) = run(&text, 2 * NANOS_PER_SEC);
        assert_eq!(out.late, 1);
        assert_eq!(seen[1].0, 3);
        assert_eq!(seen[1].1, seen[0].1, "decided at the virtual time of line 1");
        assert_eq!(out.logged.first.unwrap() + 9 * NANOS_PER_SEC, out.logged.last.unwrap());
    }

    #[test]
    fn malformed_and_unmatched_lines_are_counted_with_numbers() {
        let mut text = line(1, "/nowhere");
        for _ in 0..12 {
            text.push_str("junk\n");
        }
        text.push_str(&line(2, "/"));
        let (out, _) = run(&text, 0);
        assert_eq!((out.lines, out.requests, out.malformed, out.unmatched), (14, 2, 12, 1));
        let numbers: Vec<u64> = out.malformed_lines.iter().map(|m| m.0).collect();
        assert_eq!(numbers, (2..12).collect::<Vec<u64>>());
        assert_eq!(out.routes[0].requests, 1);
        let t = out.timeline.unwrap();
        assert_eq!(t.series()[0].admitted.iter().sum::<u64>(), 1);
    }
}
