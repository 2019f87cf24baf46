//! The validated configuration: what the rest of sluice reads. No serde here.

use std::fmt;
use std::net::SocketAddr;

use ipnet::IpNet;
use sluice_core::{Nanos, Policy};
use sluice_store::WhenFull;

use crate::path::normalize_path;
#[cfg(doc)]
use crate::path::request_path;
use crate::secret::{Secret, SecretUrl};

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Listener, identity and response settings.
    pub server: Server,
    /// Where admitted requests go; `None` means sluice answers them itself.
    pub upstream: Option<Upstream>,
    /// Named policies, in file order; routes refer to them by index.
    pub policies: Vec<PolicyConfig>,
    /// Routes, in file order; the first match wins.
    pub routes: Vec<Route>,
    /// Where limit state lives.
    pub store: StoreConfig,
    /// The admin listener (metrics, health), if configured.
    pub admin: Option<Admin>,
    /// Decision log sampling.
    pub decision_log: DecisionLog,
    /// Who may ask `POST /v1/check`, and for how much.
    pub decision_api: DecisionApi,
    /// Envoy's rate-limit service (`[rls]`), if configured.
    pub rls: Option<Rls>,
}

/// `[server]`
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Peers whose forwarding headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The forwarding header those peers write.
    pub forwarded_header: ForwardedHeader,
    /// IPv6 clients are grouped by this prefix length.
    pub ipv6_prefix: u8,
    /// Rate-limit header styles to send.
    pub headers: Vec<HeaderStyle>,
    /// Status of a denial (429 by default).
    pub deny_status: u16,
    /// Respond to a denial, or close the connection.
    pub on_deny: OnDeny,
    /// Requests in flight beyond which new ones are shed with 503.
    pub max_in_flight: usize,
    /// Header carrying an authenticated user id, believed only from trusted proxies.
    pub user_header: Option<String>,
    /// Most bytes of a body read to find a `json:` key part.
    pub max_body_bytes: usize,
    /// The longest a client may take to send that part of a body (408 after).
    pub body_timeout: Nanos,
    /// The longest a body read may wait for its next bytes (408 after): a trickling client.
    pub body_idle_timeout: Nanos,
    /// Bodies read at once for one client address (429 beyond): slow bodies from one client
    /// cannot fill `max_in_flight`.
    pub max_body_reads_per_client: usize,
    /// Secret keying the key hash; instances sharing a store must share it (required with a
    /// shared store). From `key_secret`, `key_secret_file` or the variable `key_secret_env` names.
    pub key_secret: Option<Secret>,
}

/// `[decision_api]` (and `server.decision_api`): the decision service `POST /v1/check`.
///
/// Anyone who can call it can spend any key's quota, so it answers only peers in `allow`
/// (loopback by default) or requests bearing `token`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionApi {
    /// Serve it (`server.decision_api`); `None`: only when there is no upstream.
    pub enabled: Option<bool>,
    /// Peers that may call it without a token.
    pub allow: Vec<IpNet>,
    /// A bearer token that admits a caller from anywhere (`Authorization: Bearer TOKEN`).
    pub token: Option<Secret>,
    /// The largest cost one check may ask; `None`: the policy's limit.
    pub max_cost: Option<u64>,
}

/// Which forwarding header the trusted proxies write (`server.forwarded_header`).
///
/// Only that header is read: proxies append to one header and pass the other through as the
/// client sent it, so reading "whichever is present" would let a client name itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy, most load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// A rate-limit header style (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderStyle {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, `RateLimit-Policy`.
    Draft6,
    /// `RateLimit-Policy: "name";q=100;w=60` and `RateLimit: "name";r=50;t=30`.
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds).
    XRateLimit,
}

impl HeaderStyle {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            HeaderStyle::Draft6 => "draft-6",
            HeaderStyle::Ietf => "ietf",
            HeaderStyle::XRateLimit => "x-ratelimit",
        }
    }
}

/// What a denial does to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeny {
    /// Answer with `deny_status`, headers and a JSON body.
    Respond,
    /// Close the connection without a response.
    Drop,
}

/// `[upstream]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http://host:port` (no path).
    pub url: String,
    /// How long to wait for the upstream's response headers.
    pub timeout: Nanos,
}

/// `[[policy]]`
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// The policy's name.
    pub name: String,
    /// The algorithm and its validated parameters.
    pub policy: Policy,
    /// Decide, log and count, but never deny.
    pub shadow: bool,
}

/// `[[route]]`
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The route's name (its path unless given), used in metrics and `route` key parts.
    pub name: String,
    /// Which paths it matches.
    pub path: PathPattern,
    /// Upper-case methods it matches; `None` matches every method.
    pub methods: Option<Vec<String>>,
    /// The limits every matching request must pass.
    pub limits: Vec<RouteLimit>,
}

/// A route's path: exact, or a prefix written `/api/*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathPattern {
    /// Matches this path only.
    Exact(String),
    /// Matches paths that start with this prefix (which ends in `/`), and the prefix without it.
    Prefix(String),
}

impl PathPattern {
    /// True when `path` (no query string) matches, after [`normalize_path`].
    pub fn matches(&self, path: &str) -> bool {
        self.matches_normal(&normalize_path(path))
    }

    /// True when `path`, already passed through [`normalize_path`], matches.
    pub fn matches_normal(&self, path: &str) -> bool {
        match self {
            PathPattern::Exact(p) => p == path,
            PathPattern::Prefix(p) => path.starts_with(p.as_str()) || path == &p[..p.len() - 1],
        }
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathPattern::Exact(p) => f.write_str(p),
            PathPattern::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

impl Route {
    /// True when this route applies to `method` and `path`.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.matches_normal(method, &normalize_path(path))
    }

    /// [`Route::matches`] for a path already passed through [`request_path`] (normalise once
    /// per request, not once per route).
    ///
    /// Methods match whatever their case (`get` is `GET` to most frameworks), and a route of
    /// `GET` also limits `HEAD` (every common framework runs the GET handler for HEAD).
    pub fn matches_normal(&self, method: &str, path: &str) -> bool {
        self.path.matches_normal(path) && self.methods.as_ref().is_none_or(|ms| methods_match(ms, method))
    }
}

/// True when the request method `method` is one of `configured` (upper case), as routes match:
/// case-insensitively, `HEAD` as `GET`.
pub fn methods_match(configured: &[String], method: &str) -> bool {
    configured.iter().any(|m| m.eq_ignore_ascii_case(method) || (m == "GET" && method.eq_ignore_ascii_case("HEAD")))
}

/// One limit of a route: a policy (index into `Config::policies`), the key, the cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLimit {
    /// Index into [`Config::policies`].
    pub policy: usize,
    /// How the key is built from the request.
    pub key: KeySpec,
    /// What one request costs under this limit.
    pub cost: u64,
}

/// A key: parts that combine into one key; each part is a chain of sources where a later
/// source is used when the earlier ones are absent (`header:x-api-key|ip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// The parts, each a non-empty fallback chain.
    pub parts: Vec<Vec<KeySource>>,
}

impl KeySpec {
    /// The kind of the first source of the first part: the "key type" for logs.
    pub fn kind(&self) -> &'static str {
        self.parts.first().and_then(|p| p.first()).map_or("const", KeySource::kind)
    }

    /// True when some part reads the request body.
    pub fn needs_body(&self) -> bool {
        self.parts.iter().flatten().any(|s| s.json_pointer().is_some())
    }
}

impl fmt::Display for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.parts.iter().map(|chain| chain.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("|")).collect();
        f.write_str(&parts.join(" + "))
    }
}

/// Where one key part comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The client IP (after trusted-proxy resolution; IPv6 grouped by prefix).
    Ip,
    /// A request header (name lower-cased).
    Header(String),
    /// The authenticated user id from `server.user_header`, believed only from trusted proxies.
    User,
    /// A string at a JSON pointer in the body, trimmed and lower-cased.
    Json(String),
    /// The request method.
    Method,
    /// The request path.
    Path,
    /// The route's name.
    Route,
    /// A constant (a global limit).
    Const(String),
    /// Another source's value read as an email address (`email(json:/email)`): trimmed,
    /// lower-cased, and a `+tag` in the local part dropped, so `Victim+1@x` and `victim@x` are
    /// one account. An alias rule for providers that deliver `+tag` mail to the same mailbox,
    /// not a default: where `a+b@x` is a different account, do not use it.
    Email(Box<KeySource>),
}

impl KeySource {
    /// The source a value is read from (through `email(...)`).
    pub fn base(&self) -> &KeySource {
        match self {
            KeySource::Email(inner) => inner.base(),
            other => other,
        }
    }

    /// The JSON pointer this source reads, if it reads the body.
    pub fn json_pointer(&self) -> Option<&str> {
        match self.base() {
            KeySource::Json(p) => Some(p),
            _ => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            KeySource::Email(inner) => inner.kind(),
            KeySource::Ip => "ip",
            KeySource::Header(_) => "header",
            KeySource::User => "user",
            KeySource::Json(_) => "json",
            KeySource::Method => "method",
            KeySource::Path => "path",
            KeySource::Route => "route",
            KeySource::Const(_) => "const",
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Header(h) => write!(f, "header:{h}"),
            KeySource::Json(p) => write!(f, "json:{p}"),
            KeySource::Const(c) => write!(f, "const:{c}"),
            KeySource::Email(inner) => write!(f, "email({inner})"),
            other => f.write_str(other.kind()),
        }
    }
}

/// `[store]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded in-memory store.
    Memory {
        /// Keys per policy before eviction.
        max_keys: usize,
        /// Shards per policy (a power of two).
        shards: usize,
        /// What a shard full of live entries does with a new key (`when_full`): fold the least
        /// recently used into the policy's summary (with its `fold_width` and `fold_depth`),
        /// refuse, or forget it.
        when_full: WhenFull,
        /// Where the state is written and read back across restarts (`snapshot`), if anywhere.
        snapshot: Option<Snapshot>,
    },
    /// Redis or Redis Cluster.
    Redis {
        /// Server URLs (one unless `cluster`); they may carry a password.
        urls: Vec<SecretUrl>,
        /// Redis Cluster mode.
        cluster: bool,
        /// What to do when Redis fails.
        on_error: OnError,
        /// Bound on each call.
        timeout_ms: u64,
        /// Prefix of every stored key.
        key_prefix: String,
    },
}

/// `[store] snapshot`: the memory store's state in a file, written on shutdown and every
/// `interval`, read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The file (relative paths are relative to the configuration file's directory).
    pub path: std::path::PathBuf,
    /// How often it is written while serving (`snapshot_interval`, default 10 s): a crash loses
    /// at most this much of the state's changes.
    pub interval: Nanos,
}

/// The failure mode of a shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Admit.
    FailOpen,
    /// Answer 503 with Retry-After.
    FailClosed,
    /// Fall back to an in-memory limiter of the same policies.
    Local,
}

/// `[admin]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// Address of the admin listener.
    pub listen: SocketAddr,
}

/// `[decision_log]`
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionLog {
    /// Share of admitted decisions logged.
    pub sample: f64,
    /// Cap on denial log lines per second.
    pub denials_per_second: f64,
}

/// `[rls]`: Envoy's rate-limit service beside the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rls {
    /// Address of its gRPC (and `POST /json`) listener.
    pub listen: SocketAddr,
    /// The directory of envoyproxy/ratelimit YAML files, one domain per file.
    pub descriptors: std::path::PathBuf,
    /// How the descriptors of one request are charged.
    pub charge: RlsCharge,
}

/// How the rate-limit service charges a request's descriptors (`rls.charge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RlsCharge {
    /// sluice's rule: a request admitted by every descriptor is charged to all; a denied one to
    /// none (envoyproxy/ratelimit with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    #[default]
    AllOrNothing,
    /// envoyproxy/ratelimit's default: each descriptor is decided and charged on its own, so a
    /// denied request still spends the descriptors that admitted it.
    Independent,
}
