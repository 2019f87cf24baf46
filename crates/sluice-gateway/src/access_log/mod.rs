//! The access log (`[access_log]`): one line per request the gateway answers, written when its
//! response has ended — the whole body sent, the client gone, or a relayed WebSocket closed —
//! with what sluice made of it: the request id, the client, the route, the rate-limit outcome,
//! the upstream and its latency, the status, the bytes and the duration.
//!
//! A request's [`Entry`] is filled as the request goes (the lifecycle tells its route and
//! outcome through [`Watching`], the proxy its upstream), then travels with the request's
//! [`Ending`] — the slot in flight the response holds until it ends — and is written when that
//! is dropped. The lines are what `sluice simulate --access-log` reads back ([`format`]): a new
//! configuration can be tried on the gateway's own traffic.
//!
//! The file is opened in append mode at start (and on reload); SIGUSR1 reopens it, after
//! logrotate has moved it away.

pub mod format;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http::HeaderValue;
use sluice_config::{AccessLogFormat, ClientInLog, LogDestination};
use sluice_http::lifecycle::{Counted, Observe};
use sluice_http::pipeline::{Refusal, Ruling};

use crate::client_slots::Slot;
use crate::request_id::RequestId;

/// Where the lines go and how they are written; shared by the requests of a configuration.
#[derive(Debug)]
pub struct AccessLog {
    /// The configured destination (a file is reopened from its path).
    to: LogDestination,
    /// `combined` or `json`.
    format: AccessLogFormat,
    /// Addresses, or a hash in their place.
    client: ClientInLog,
    /// The open file; `None` for standard output.
    file: Mutex<Option<File>>,
}

impl AccessLog {
    /// Opens `config`'s destination (a file is created if needed, appended to).
    pub fn open(config: &sluice_config::AccessLog) -> std::io::Result<Self> {
        let file = match &config.to {
            LogDestination::Stdout => None,
            LogDestination::File(path) => Some(append(path)?),
        };
        Ok(Self { to: config.to.clone(), format: config.format, client: config.client, file: Mutex::new(file) })
    }

    /// Reopens the file by its path (SIGUSR1): lines go to a new file once logrotate has moved
    /// the old one. A file that cannot be opened leaves the old one in use, and says so.
    pub fn reopen(&self) {
        let LogDestination::File(path) = &self.to else { return };
        match append(path) {
            Ok(file) => *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(file),
            Err(e) => {
                tracing::warn!(target: "sluice::event", path = %path.display(), error = %e, "access log not reopened")
            }
        }
    }

    /// How the client is written.
    pub fn client(&self) -> ClientInLog {
        self.client
    }

    /// Writes `entry`'s line, in one write (lines of several threads never interleave).
    fn write(&self, entry: &Entry) {
        let mut line = Vec::with_capacity(320);
        match self.format {
            AccessLogFormat::Combined => format::combined(entry, &mut line),
            AccessLogFormat::Json => format::json(entry, &mut line),
        }
        line.push(b'\n');
        let written = match &mut *self.file.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(file) => file.write_all(&line),
            None => std::io::stdout().lock().write_all(&line),
        };
        if let Err(e) = written {
            tracing::warn!(target: "sluice::event", error = %e, "access log line not written");
        }
    }
}

fn append(path: &std::path::Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// How the client is written in a line.
#[derive(Debug, Clone)]
pub enum LoggedClient {
    /// The address that connected, the forwarding header as it came, the client sluice resolved.
    Address {
        /// The peer.
        peer: IpAddr,
        /// `X-Forwarded-For` as the peer sent it.
        forwarded_for: Option<HeaderValue>,
        /// The client, as sluice resolved it through the trusted proxies.
        client: IpAddr,
    },
    /// A pseudonym in place of every address (`client = "hash"`).
    Hash(String),
}

/// One request's line, filled as the request goes.
#[derive(Debug)]
pub struct Entry {
    /// When the request came (the line's time).
    pub time: SystemTime,
    /// The same, for the duration.
    pub started: Instant,
    /// The request's id.
    pub request_id: RequestId,
    /// Who sent it.
    pub client: LoggedClient,
    /// The request line: method, target as sent, version.
    pub method: http::Method,
    /// The target as the client sent it (path and query).
    pub target: String,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub version: http::Version,
    /// `Referer` and `User-Agent`, as sent.
    pub referer: Option<HeaderValue>,
    /// See `referer`.
    pub user_agent: Option<HeaderValue>,
    /// The route's name; `None` before one was found (or when none matched).
    pub route: Option<String>,
    /// What the limits made of it (see [`Outcome`]).
    pub outcome: Outcome,
    /// The policy the response describes: the one that denied, or the one closest to denying.
    pub policy: Option<String>,
    /// The upstream it was passed on to (`host:port`) and how long its response head took.
    pub upstream: Option<(String, Duration)>,
    /// The response's status (0: the connection was dropped without one).
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// From arrival to the end of the response.
    pub duration: Duration,
}

/// The rate-limit outcome of a request, as the access log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every limit admitted it at once.
    Allowed,
    /// Admitted after a shaping delay.
    Delayed,
    /// A limit denied it.
    Denied,
    /// The store could not decide, and its failure mode did not admit.
    Unavailable,
    /// Refused before any limit (an ambiguous path, header or body; two hosts).
    Refused,
    /// No route matched: no limit applies.
    Unmatched,
    /// Shed before anything was decided (`max_in_flight`, `max_in_flight_per_client`).
    Shed,
    /// A CORS preflight, not charged (passed on or answered).
    Preflight,
    /// Not decided by a route's limits (the decision API, forward-auth's endpoint, an upgrade
    /// refused).
    None,
}

impl Outcome {
    /// The word written in the line.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Delayed => "delayed",
            Outcome::Denied => "denied",
            Outcome::Unavailable => "unavailable",
            Outcome::Refused => "refused",
            Outcome::Unmatched => "unmatched",
            Outcome::Shed => "shed",
            Outcome::Preflight => "preflight",
            Outcome::None => "-",
        }
    }
}

/// What a response holds until it ends: the request's slot in flight and, when there is an
/// access log, its line, written when this is dropped.
#[derive(Debug)]
pub struct Ending {
    /// Counted in `max_in_flight` until the response ends.
    _slot: Slot,
    /// The line and where it goes.
    line: Option<(Box<Entry>, Arc<AccessLog>)>,
    /// Body bytes sent, counted by whoever streams the body ([`Ending::sent`]).
    bytes: u64,
}

impl Ending {
    /// Holds `slot`, and writes `line` (with the bytes sent) at the end.
    pub fn new(slot: Slot, line: Option<(Box<Entry>, Arc<AccessLog>)>) -> Self {
        Self { _slot: slot, line, bytes: 0 }
    }

    /// Whether a line will be written (so bytes are worth counting).
    pub fn logs(&self) -> bool {
        self.line.is_some()
    }

    /// `n` more body bytes were sent.
    pub fn sent(&mut self, n: u64) {
        self.bytes += n;
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        if let Some((mut entry, log)) = self.line.take() {
            entry.bytes += self.bytes;
            entry.duration = entry.started.elapsed();
            log.write(&entry);
        }
    }
}

/// The lifecycle's observer for one request: tells the configuration's observer (metrics,
/// decision lines with the request id) and notes the route and outcome for the access log.
pub struct Watching<'a> {
    /// The configuration's observer.
    pub observed: &'a crate::observe::Observed,
    /// The request's id, for its decision line.
    pub request_id: &'a RequestId,
    /// What the access log will say (only noted when there is one).
    pub noted: Option<&'a Mutex<Noted>>,
}

/// What the lifecycle told of a request: its route, its outcome and the policy described.
#[derive(Debug, Default)]
pub struct Noted {
    /// The route's name.
    pub route: Option<String>,
    /// The outcome; `None` until the lifecycle said.
    pub outcome: Option<Outcome>,
    /// The policy the response describes.
    pub policy: Option<String>,
    /// The upstream the request went to, and how long its response head took.
    pub upstream: Option<(String, Duration)>,
}

impl Watching<'_> {
    fn note(&self, f: impl FnOnce(&mut Noted)) {
        if let Some(noted) = self.noted {
            f(&mut noted.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }
}

impl Observe for Watching<'_> {
    fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
        self.observed.record(at, ruling).emit_for(status, Some(self.request_id));
        self.note(|n| {
            n.route = Some(at.name().to_string());
            n.outcome = Some(match ruling.action() {
                sluice_http::pipeline::Action::Admit { delay } if delay.is_zero() => Outcome::Allowed,
                sluice_http::pipeline::Action::Admit { .. } => Outcome::Delayed,
                sluice_http::pipeline::Action::Deny => Outcome::Denied,
                sluice_http::pipeline::Action::Unavailable => Outcome::Unavailable,
            });
            n.policy = ruling.view().map(|v| v.name.to_string());
        });
    }

    fn refused(&self, at: Option<Counted<'_>>, why: &Refusal) {
        self.observed.refused(at, why);
        self.note(|n| {
            n.route = at.map(|a| a.name().to_string());
            n.outcome = Some(Outcome::Refused);
        });
    }

    fn unmatched(&self) {
        Observe::unmatched(self.observed);
        self.note(|n| n.outcome = Some(Outcome::Unmatched));
    }
}

impl sluice_upstream::pool::Held for Ending {
    fn sent(&mut self, n: u64) {
        self.bytes += n;
    }
}

/// The name of `client` in a log without addresses: the hash of its address under the key
/// secret (the same client, the same name, for as long as the secret stays; no address can be
/// read back from it).
pub fn pseudonym(hasher: &sluice_store::KeyHasher, client: IpAddr) -> String {
    let address = match client {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    hasher.hash(&[b"access-log-client", &address]).to_hex()
}
