//! The validated configuration: what the rest of sluice reads. No serde here.

use std::fmt;
use std::net::SocketAddr;

use ipnet::IpNet;
use sluice_core::{Nanos, Policy};
use sluice_store::WhenFull;

#[cfg(doc)]
use crate::path::request_path;
use crate::path::{PathPattern, PathShape, normalize_path};
use crate::secret::{Secret, SecretUrl};

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Listener, identity and response settings.
    pub server: Server,
    /// Where admitted requests go; `None` means sluice answers them itself.
    pub upstream: Option<Upstream>,
    /// `[[upstreams]]`: named upstreams of one or more targets, which routes name
    /// (`upstream = "name"`); a route that names none goes to `[upstream]`.
    pub upstreams: Vec<UpstreamGroup>,
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
    /// Where authenticated identities come from (`[identity]`).
    pub identity: Identity,
    /// Decisions asked by proxies before they forward (`[forward_auth]`), if configured.
    pub forward_auth: Option<ForwardAuth>,
    /// One line per request the gateway answers (`[access_log]`), if configured.
    pub access_log: Option<AccessLog>,
}

/// `[access_log]`: one line per request, written when its response has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLog {
    /// Where the lines go.
    pub to: LogDestination,
    /// How each line is written.
    pub format: AccessLogFormat,
    /// How the client is written.
    pub client: ClientInLog,
}

/// Where an access log is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDestination {
    /// Standard output (`path = "-"`).
    Stdout,
    /// A file, appended to; reopened on SIGUSR1 (after logrotate has moved it).
    File(std::path::PathBuf),
}

/// `access_log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// nginx's `combined`, the client's `X-Forwarded-For` as the last quoted field, then
    /// `key=value` tokens (what sluice adds).
    Combined,
    /// One JSON object per line, nginx's variable names where nginx has one.
    Json,
}

/// `access_log.client`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientInLog {
    /// The addresses: the peer, the forwarding header as it came, the client sluice resolved.
    Address,
    /// No address at all: the client's key hash (as decision lines write it) in their place.
    Hash,
}

/// `[identity]`: identities sluice verifies itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Identity {
    /// `[identity.jwt]`: bearer JWTs whose verified claims are `jwt:` key parts.
    pub jwt: Option<Jwt>,
}

/// `[identity.jwt]`: how bearer tokens are found and verified.
///
/// A token counts only when its signature verifies with one of `keys` under that key's own
/// algorithm, and its `exp`, `nbf`, `iss` and `aud` check out.
#[derive(Debug, Clone, PartialEq)]
pub struct Jwt {
    /// The verification keys, each with the one algorithm it verifies (no algorithm is taken
    /// from the token alone, so a public key is never used as an HMAC secret).
    pub keys: Vec<JwtKey>,
    /// Where `keys` came from, for display: the JWKS file, if any.
    pub jwks_file: Option<std::path::PathBuf>,
    /// Where the token is read.
    pub token: TokenSource,
    /// The `iss` a token must carry, if set.
    pub issuer: Option<String>,
    /// A value the token's `aud` must hold, if set.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Nanos,
    /// What a request with an invalid token gets.
    pub on_invalid_token: OnInvalidToken,
    /// Most verified tokens remembered (and, apart, most invalid ones).
    pub cache_entries: usize,
}

/// One verification key of `[identity.jwt]`.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtKey {
    /// The JWK `kid`: a token naming a `kid` is verified with that key only.
    pub kid: Option<String>,
    /// The one algorithm this key verifies.
    pub algorithm: JwtAlgorithm,
    /// The key itself.
    pub material: JwtKeyMaterial,
}

/// The signature algorithms sluice verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JwtAlgorithm {
    /// HMAC with SHA-256, with `hs256_secret`.
    Hs256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RSA keys of 2048 bits or more).
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// Ed25519.
    EdDsa,
}

impl JwtAlgorithm {
    /// The JOSE name (`alg`).
    pub fn name(self) -> &'static str {
        match self {
            JwtAlgorithm::Hs256 => "HS256",
            JwtAlgorithm::Rs256 => "RS256",
            JwtAlgorithm::Es256 => "ES256",
            JwtAlgorithm::EdDsa => "EdDSA",
        }
    }
}

/// A key's material, as the JWK gives it (base64url, checked for form and length).
#[derive(Debug, Clone, PartialEq)]
pub enum JwtKeyMaterial {
    /// The HS256 secret.
    Secret(Secret),
    /// An RSA public key: modulus and exponent.
    Rsa {
        /// Modulus (`n`).
        n: String,
        /// Public exponent (`e`).
        e: String,
    },
    /// A P-256 public key: the point's coordinates.
    Ec {
        /// `x`.
        x: String,
        /// `y`.
        y: String,
    },
    /// An Ed25519 public key (`x`).
    Ed {
        /// `x`.
        x: String,
    },
}

/// Where a request's token is read (`header` or `cookie` of `[identity.jwt]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A header (lower case) whose one value is `Bearer TOKEN`.
    Header(String),
    /// A cookie of this name whose value is the token.
    Cookie(String),
}

/// What a request whose token is present but does not verify gets (`on_invalid_token`).
///
/// Applications differ in what they accept as a token (padding, extra spaces, a second
/// `Authorization` line): a token sluice cannot verify may still be the application's
/// identity. Falling back to the address would let a client rotate addresses for a fresh
/// allowance while the application serves the token's subject, so the default refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnInvalidToken {
    /// 401 with `WWW-Authenticate: Bearer error="invalid_token"` (the default). The fallback
    /// of a `jwt:sub|ip` chain is for requests that carry no token.
    #[default]
    Reject,
    /// Its `jwt:` parts are absent: the next source of each fallback chain is used. For an
    /// application known to accept exactly the tokens sluice verifies.
    Fallback,
}

impl OnInvalidToken {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            OnInvalidToken::Reject => "reject",
            OnInvalidToken::Fallback => "fallback",
        }
    }
}

/// Checks the status of a denial: a 4xx or a 5xx (a client must see it was refused; 2xx or 3xx
/// would be cached or followed as an answer). The one rule for `server.deny_status`,
/// `forward_auth.deny_status` and the library's builder.
///
/// ```
/// assert!(sluice_config::check_deny_status(429).is_ok() && sluice_config::check_deny_status(503).is_ok());
/// assert_eq!(sluice_config::check_deny_status(200).unwrap_err(), "200 is not a 4xx or 5xx status");
/// assert!(sluice_config::check_deny_status(1000).is_err());
/// ```
pub fn check_deny_status(status: u16) -> Result<(), String> {
    match status {
        400..=599 => Ok(()),
        _ => Err(format!("{status} is not a 4xx or 5xx status")),
    }
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
    /// Requests in flight at once for one client (as resolved: behind trusted proxies, IPv6 by
    /// prefix), from its head until its response ends, whatever the route (429 beyond): one
    /// client cannot fill `max_in_flight`. By default a tenth of `max_in_flight`, so that at
    /// least ten clients are needed to fill it, but not below 64 (or `max_in_flight` when that
    /// is smaller), so that a few dozen people behind one address (an office, a carrier's NAT,
    /// browsers opening six connections each) are not held to a handful on a small gateway.
    pub max_in_flight_per_client: usize,
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
    /// What the gateway does with request header names that contain `_` (`underscore_headers`).
    pub underscore_headers: UnderscoreHeaders,
    /// Secret keying the key hash; instances sharing a store must share it (required with a
    /// shared store). From `key_secret`, `key_secret_file` or the variable `key_secret_env` names.
    pub key_secret: Option<Secret>,
    /// `[server.tls]`: the listener speaks TLS with this certificate chain and key.
    pub tls: Option<TlsFiles>,
    /// Whether the plaintext listener also speaks HTTP/2 to clients that open with its preface
    /// (h2c with prior knowledge); a TLS listener offers HTTP/2 by ALPN whatever this says.
    pub h2c: bool,
    /// How many worker threads serve client connections, each with its own runtime; `None`:
    /// one per core. Fewer leave cores to what shares the host (an upstream, a load
    /// generator): a busy worker waits for a core at scheduler ticks (bench/README.md).
    pub workers: Option<usize>,
    /// `[server.http2]`: what one HTTP/2 connection may ask of the gateway.
    pub http2: Http2Limits,
    /// How long a relayed WebSocket connection may carry no byte either way before both sides
    /// are closed.
    pub tunnel_idle_timeout: Nanos,
    /// `[server.cors]`: the browser origins that may read sluice's own answers; `None`: no CORS
    /// header is written.
    pub cors: Option<Cors>,
}

/// `[server.cors]`: what browser code on other origins may read of sluice's own answers (a 429's
/// `Retry-After` and rate-limit headers), and what is done with CORS preflights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// The origins allowed (a route's own `cors.allow_origins` replaces them for it).
    pub allow_origins: Origins,
    /// What a preflight (`OPTIONS` with `Access-Control-Request-Method`) gets when its route does
    /// not list `OPTIONS` in its methods: it is never charged then.
    pub preflight: Preflight,
    /// `Access-Control-Max-Age` of an answered preflight.
    pub max_age: Nanos,
}

/// Origins a CORS header is written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// `*`: any origin (answered `Access-Control-Allow-Origin: *`).
    Any,
    /// These origins, `scheme://host[:port]` in lower case, compared with the request's
    /// `Origin` in lower case.
    List(Vec<String>),
}

impl Origins {
    /// Whether `origin` (a request's `Origin` value) is allowed.
    pub fn allows(&self, origin: &[u8]) -> bool {
        match self {
            Origins::Any => true,
            Origins::List(list) => list.iter().any(|o| o.as_bytes().eq_ignore_ascii_case(origin)),
        }
    }
}

/// `server.cors.preflight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preflight {
    /// Passed on to the upstream (answered, when there is none), not charged.
    Pass,
    /// Answered by sluice (204, the method and headers asked for, `max_age`), not charged.
    Answer,
}

/// `[server.http2]`: the bounds of one client's HTTP/2 connection, advertised in its SETTINGS
/// and enforced (a client past them gets its stream or connection refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Limits {
    /// Streams open at once on one connection (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub max_concurrent_streams: u32,
    /// Bytes of one request's header list, as RFC 9113 counts them (each field's name and
    /// value plus 32): the bound of a CONTINUATION flood (`SETTINGS_MAX_HEADER_LIST_SIZE`).
    pub max_header_list_size: u32,
    /// The largest frame payload the gateway reads (`SETTINGS_MAX_FRAME_SIZE`).
    pub max_frame_size: u32,
}

impl Default for Http2Limits {
    fn default() -> Self {
        Self { max_concurrent_streams: 100, max_header_list_size: 16 * 1024, max_frame_size: 16 * 1024 }
    }
}

/// `[server.tls]`: PEM files, read when the gateway starts (and by `check-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first: served to a client whose
    /// name (SNI) no certificate of `by_name` covers, or that gives none.
    pub cert: std::path::PathBuf,
    /// Its private key (PKCS #8, PKCS #1 or SEC1).
    pub key: std::path::PathBuf,
    /// `[[server.tls.certificates]]`: more pairs, each served to the clients that ask for a
    /// name its certificate covers (the first that does, in this order).
    pub by_name: Vec<TlsPair>,
    /// `client_ca`: the certificates (PEM) a client certificate must chain to; `None`: no
    /// client certificate is asked for.
    pub client_ca: Option<std::path::PathBuf>,
    /// `client_auth = "optional"`: a client without a certificate is served too (its `tls:`
    /// key parts absent); by default one is required. A certificate given must verify either way.
    pub client_auth_optional: bool,
}

/// A certificate chain and its key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPair {
    /// The chain, the server's own certificate first.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}

impl TlsFiles {
    /// Every file, certificates and keys, in the order written.
    pub fn paths(&self) -> Vec<&std::path::Path> {
        let mut out = vec![self.cert.as_path(), self.key.as_path()];
        for p in &self.by_name {
            out.extend([p.cert.as_path(), p.key.as_path()]);
        }
        out.extend(self.client_ca.as_deref());
        out
    }
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

impl ForwardedHeader {
    /// Both headers, in the order configuration lists them.
    pub const ALL: [ForwardedHeader; 2] = [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded];

    /// The header's name as it travels (lower case) and as `server.forwarded_header` spells it:
    /// the one spelling that reading, forwarding, config and the simulator use.
    ///
    /// ```
    /// use sluice_config::ForwardedHeader;
    /// assert_eq!(ForwardedHeader::XForwardedFor.name(), "x-forwarded-for");
    /// assert_eq!(ForwardedHeader::parse("forwarded"), Some(ForwardedHeader::Forwarded));
    /// assert!(ForwardedHeader::ALL.into_iter().all(|h| ForwardedHeader::parse(h.name()) == Some(h)));
    /// assert_eq!(ForwardedHeader::parse("X-Forwarded-For"), None); // configuration spells it in lower case
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        }
    }

    /// The header a configuration names, spelled exactly as [`ForwardedHeader::name`] does.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|h| h.name() == name)
    }
}

/// A rate-limit header style (`server.headers`): which fields tell a client its quota. Several
/// may be sent at once, since clients read different drafts.
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

/// What the gateway does with request header names that contain `_` before proxying
/// (`server.underscore_headers`).
///
/// WSGI and CGI applications (Django, Flask, anything behind gunicorn or uWSGI) read `X_Api_Key`
/// and `X-Api-Key` as one variable, `HTTP_X_API_KEY`: a header sluice reads under one spelling
/// would reach them under another. nginx drops such names by default for the same reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnderscoreHeaders {
    /// Dropped before the request is proxied (the default).
    #[default]
    Drop,
    /// Passed on, except a spelling of a header sluice reads for identity or keys (never
    /// forwarded in another spelling, whatever this says).
    Forward,
}

impl UnderscoreHeaders {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            UnderscoreHeaders::Drop => "drop",
            UnderscoreHeaders::Forward => "forward",
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

impl OnDeny {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            OnDeny::Respond => "respond",
            OnDeny::Drop => "drop",
        }
    }
}

/// `[upstream]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http://host:port` or `https://host:port` (no path).
    pub url: String,
    /// With `https://`: the certificates (PEM) the upstream's must chain to; `None`: the
    /// system's (`SSL_CERT_FILE`, else Debian's bundle).
    pub ca: Option<std::path::PathBuf>,
    /// With `https://`: a client certificate chain and its key (PEM), for an upstream that asks.
    pub client_cert: Option<TlsPair>,
    /// Speak HTTP/2 to it: every request of a worker thread a stream on one connection (ALPN
    /// `h2` on `https://`, prior knowledge on `http://`); `false`: HTTP/1.1, pooled.
    pub http2: bool,
    /// `timeout_ms`: every stage's bound unless `timeouts` sets it.
    pub timeout: Nanos,
    /// How long a request to it may wait at each stage (`timeouts`, over `timeout_ms`); a
    /// route's `timeouts` override them for its requests.
    pub timeouts: StageTimeouts,
}

/// How long a request to an upstream may wait at each stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageTimeouts {
    /// To open a connection (TCP, and TLS's handshake): past it, nothing was sent (a 502; a
    /// safe request may go to another target).
    pub connect: Nanos,
    /// From the request's sending to the response head, connecting included: past it, a 504.
    pub first_byte: Nanos,
    /// The longest the response body may go without a byte: past it the client's connection
    /// is cut.
    pub idle: Nanos,
}

impl StageTimeouts {
    /// Every stage bounded by `n`.
    pub fn all(n: Nanos) -> Self {
        Self { connect: n, first_byte: n, idle: n }
    }
}

/// A `timeouts` table: the stages it sets, each in place of the one it is laid over.
///
/// ```
/// use sluice_config::{StageTimeouts, TimeoutsOverride};
/// let route = TimeoutsOverride { first_byte: Some(120), ..Default::default() };
/// let upstream = StageTimeouts::all(30);
/// assert_eq!(route.over(upstream), StageTimeouts { connect: 30, first_byte: 120, idle: 30 });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutsOverride {
    /// `connect`.
    pub connect: Option<Nanos>,
    /// `first_byte`.
    pub first_byte: Option<Nanos>,
    /// `idle`.
    pub idle: Option<Nanos>,
}

impl TimeoutsOverride {
    /// A table that sets no stage: a request without a route's `timeouts`.
    pub const NONE: Self = Self { connect: None, first_byte: None, idle: None };

    /// `base` with the stages set here in place of its own.
    pub fn over(&self, base: StageTimeouts) -> StageTimeouts {
        StageTimeouts {
            connect: self.connect.unwrap_or(base.connect),
            first_byte: self.first_byte.unwrap_or(base.first_byte),
            idle: self.idle.unwrap_or(base.idle),
        }
    }

    /// Whether it sets no stage.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// `[[upstreams]]`: a named service of one or more targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamGroup {
    /// What routes call it.
    pub name: String,
    /// Its targets, each an upstream as `[upstream]` describes one (their TLS, protocol and
    /// timeout are the group's).
    pub targets: Vec<Upstream>,
    /// How a target is picked for a request.
    pub balance: Balance,
    /// When a failing target is taken out of the rotation (passive health).
    pub eject: Ejection,
    /// `health_check`: each target asked on a path at an interval (active health); `None`:
    /// passive health only.
    pub health_check: Option<HealthCheck>,
}

/// `upstreams.health_check`: active health checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The path asked (`GET`, with the target as `Host`): a 2xx or 3xx is healthy.
    pub path: String,
    /// How often each target is asked.
    pub interval: Nanos,
    /// How long an answer may take (longer: unhealthy).
    pub timeout: Nanos,
    /// Healthy answers in a row that put a target back.
    pub healthy_after: u32,
    /// Unhealthy answers in a row that take a target out.
    pub unhealthy_after: u32,
}

/// `upstreams.balance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Each target in turn (the default).
    RoundRobin,
    /// The target with the fewest requests waiting for their response head.
    LeastRequests,
    /// The target the request's `hash_key` hashes to (rendezvous hashing: a key keeps its
    /// target while that target is up, and only the keys of a target that goes move).
    Hash(KeySpec),
}

/// `upstreams.eject_after`, `eject_for`, `eject_on_5xx`: passive health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ejection {
    /// Consecutive failures (a connection refused or reset, a response head not in time, a 5xx
    /// with `on_5xx`) that take a target out; 0: never.
    pub after: u32,
    /// How long the first ejection lasts; each ejection in a row doubles it, up to 64 times.
    pub base: Nanos,
    /// Whether a 5xx from the target counts as a failure.
    pub on_5xx: bool,
}

impl Ejection {
    /// No ejection: `[upstream]`'s one target is always tried.
    pub const NEVER: Ejection = Ejection { after: 0, base: 0, on_5xx: false };
}

/// `[[policy]]`
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// The policy's name.
    pub name: String,
    /// The algorithm and its validated parameters.
    pub policy: Policy,
    /// Decide, log and count, but never deny, and tell nobody (`shadow = true`, or
    /// `enforce = "shadow"`).
    pub shadow: bool,
    /// Decide, log and count, never deny, and tell what the request is passed on to when it is
    /// over (`enforce = "soft"`: the `sluice-soft-limited` request header names the policy).
    pub soft: bool,
    /// What the policy counts, as the `qu` parameter of `RateLimit-Policy` says it: `None` for
    /// requests (the draft's default, not written); `content-bytes` for a policy whose every
    /// limit is `cost_from = "response-bytes"` unless `unit` says otherwise; else `unit` (e.g.
    /// `tokens`).
    pub unit: Option<String>,
    /// `lease = "auto"`: each instance takes quota leases of this policy's hot keys from the
    /// shared store and decides their requests in memory, never beyond the limit
    /// (docs/src/scaling.md). Fixed windows, token buckets and policing leaky buckets; the
    /// gateway leases from a Redis store only.
    pub lease: bool,
    /// Counts requests in flight (`algorithm = "concurrency"`): a request holds `cost` slots
    /// from its admission until its response ends (or its client leaves), when they are given
    /// back. `policy` is then a sliding log of leases: `limit` is `max_in_flight`, `window` the
    /// `lease`, so a slot never given back (an instance killed with requests in flight) comes
    /// back when its lease ends.
    pub concurrency: bool,
}

/// `[[route]]`
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The route's name (its path unless given), used in metrics and `route` key parts.
    pub name: String,
    /// Which paths it matches (with a format suffix, `/x.json`, unless `exact = true`).
    pub path: PathPattern,
    /// Upper-case methods it matches; `None` matches every method.
    pub methods: Option<Vec<String>>,
    /// The limits every matching request must pass.
    pub limits: Vec<RouteLimit>,
    /// Refusals this route waives because the operator knows how its application reads requests
    /// (`loosen`); by default none is waived.
    pub loosen: Loosen,
    /// Whether a WebSocket upgrade is relayed to the upstream (`upgrades = ["websocket"]`);
    /// elsewhere an upgrade is refused, never passed on without its `Upgrade`.
    pub websocket: bool,
    /// `cors = { allow_origins = [...] }`: the origins of this route, in place of
    /// `[server.cors]`'s.
    pub cors: Option<Origins>,
    /// `upstream = "name"`: the `[[upstreams]]` its requests go to (an index into
    /// [`Config::upstreams`]); `None`: `[upstream]`.
    pub upstream: Option<usize>,
    /// `timeouts`: the stages of its requests to the upstream it bounds in place of the
    /// upstream's own (an LLM route waiting minutes for a first token, say).
    pub timeouts: TimeoutsOverride,
}

/// Refusals a route can waive (`loosen = ["content-type", "query"]`).
///
/// sluice refuses a request whose keyed input readers could disagree on (see the security
/// docs). An operator who knows the one application behind a route can say it reads the
/// request only one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loosen {
    /// `"content-type"`: the body is keyed by the route's `json:`/`form:` parts whatever its
    /// content type says (the application parses it as JSON, or as a form, regardless). By
    /// default a body whose content type is not the parts' kind is refused with 415.
    pub content_type: bool,
    /// `"query"`: a keyed body field may also be in the query string (the application never
    /// reads the query for it). By default such a request is refused with 400: Flask's
    /// `request.values` and PHP's `$_REQUEST` let one override the other.
    pub query: bool,
}

impl Loosen {
    /// Every name `loosen` accepts, in the order they are documented.
    pub const NAMES: [&'static str; 2] = ["content-type", "query"];

    /// The names this value waives, for display.
    pub fn names(self) -> Vec<&'static str> {
        let on = [self.content_type, self.query];
        Self::NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
}

impl Config {
    /// Per policy, by index: whether an instance takes quota leases of its keys (`lease =
    /// "auto"`; validation allows it only on fixed windows and policing buckets over Redis). The gateway's stores and
    /// the simulator's instances both lease by it.
    pub fn leased_policies(&self) -> Vec<bool> {
        self.policies.iter().map(|p| p.lease).collect()
    }

    /// True when requests no route matches are let through unlimited — proxied to the upstream,
    /// or answered `unlimited` to a forward-auth proxy — because no route catches them all: a
    /// `/*` route for every method with a limit that is enforced (not shadow). A new path on the
    /// upstream is then unlimited until someone writes its route.
    pub fn passes_unrouted_unlimited(&self) -> bool {
        let catch_all = |r: &Route| {
            r.path.shape == PathShape::Prefix("/".into())
                && r.methods.is_none()
                && r.limits.iter().any(|l| self.policies.get(l.policy).is_some_and(|p| !p.shadow))
        };
        (self.upstream.is_some() || self.forward_auth.is_some()) && !self.routes.iter().any(catch_all)
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
    /// Methods match as [`crate::method::matches`] says: any case, `HEAD` by `GET` routes.
    pub fn matches_normal(&self, method: &str, path: &str) -> bool {
        self.path.matches_normal(path) && self.methods.as_ref().is_none_or(|ms| crate::method::matches(ms, method))
    }
}

/// The route a request takes: the first of `routes` that matches `method` and `path` (already
/// normalised by [`request_path`]), with its index (for the metrics' label sets). Every face
/// that decides by route looks routes up here: the gateway, forward-auth and the simulator.
///
/// ```
/// let cfg = sluice_config::parse("s.toml", r#"
/// [[policy]]
/// name = "p"
/// algorithm = "fixed-window"
/// limit = 1
/// window = "1m"
/// [[route]]
/// path = "/api/*"
/// methods = ["GET"]
/// limits = [{ policy = "p", key = "ip" }]
/// [[route]]
/// path = "/*"
/// limits = [{ policy = "p", key = "ip" }]
/// "#).unwrap();
/// let find = |m, p| sluice_config::find_route(&cfg.routes, m, p).map(|(i, _)| i);
/// assert_eq!(find("head", "/api/items"), Some(0));
/// assert_eq!(find("POST", "/api/items"), Some(1), "the first route whose method matches");
/// assert_eq!(sluice_config::find_route(&cfg.routes[..1], "POST", "/api/items"), None);
/// ```
pub fn find_route<'c>(routes: &'c [Route], method: &str, path: &str) -> Option<(usize, &'c Route)> {
    routes.iter().enumerate().find(|(_, r)| r.matches_normal(method, path))
}

/// One limit of a route: a policy (index into `Config::policies`), the key, the cost.
///
/// A limit written with `policy_by` becomes one `RouteLimit` per plan it names and one for its
/// `default_policy`, each with its [`PlanChoice`]: exactly one of them applies to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLimit {
    /// Index into [`Config::policies`].
    pub policy: usize,
    /// How the key is built from the request.
    pub key: KeySpec,
    /// What one request costs under this limit; with `cost_from`, what it reserves until its
    /// response says what it really cost.
    pub cost: u64,
    /// Where the response says what the request really cost (`None`: it costs `cost`).
    pub cost_from: Option<crate::CostFrom>,
    /// `None`: it applies to every request; otherwise only to requests of its plan.
    pub plan: Option<PlanChoice>,
}

/// Which requests a plan-chosen limit applies to (`policy_by`, `policies`, `default_policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanChoice {
    /// Where the plan is read: `jwt:CLAIM`, `user`, or `header:NAME` (believed only from
    /// trusted proxies, like the user header: a client must not choose its own quota).
    pub by: KeySource,
    /// The plan this limit is for; `None`: the default, for requests with no plan or one that
    /// `named` does not hold.
    pub plan: Option<String>,
    /// Every plan its group names.
    pub named: Vec<String>,
}

impl PlanChoice {
    /// True when a request whose plan reads `value` (`None`: no plan) gets this limit.
    ///
    /// ```
    /// use sluice_config::{KeySource, PlanChoice};
    /// let named = vec!["free".to_string(), "pro".to_string()];
    /// let by = KeySource::Jwt("/plan".into());
    /// let pro = PlanChoice { by: by.clone(), plan: Some("pro".into()), named: named.clone() };
    /// let default = PlanChoice { by, plan: None, named };
    /// assert!(pro.applies(Some(b"pro")));
    /// assert!(!pro.applies(Some(b"Pro")) && default.applies(Some(b"Pro")));
    /// assert!(default.applies(None) && !default.applies(Some(b"free")));
    /// ```
    pub fn applies(&self, value: Option<&[u8]>) -> bool {
        match (&self.plan, value) {
            (Some(plan), Some(v)) => plan.as_bytes() == v,
            (Some(_), None) => false,
            (None, Some(v)) => !self.named.iter().any(|n| n.as_bytes() == v),
            (None, None) => true,
        }
    }
}

/// A key: parts that combine into one key; each part is a chain of sources where a later
/// source is used when the earlier ones are absent (`header:x-api-key|ip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// The parts, each a non-empty fallback chain.
    pub parts: Vec<Vec<KeySource>>,
}

impl KeySpec {
    /// A key as a limit's `key` writes it: each of `parts` one part, its sources separated by
    /// `|` (`["header:x-api-key|ip", "path"]`). The one parser of keys: the configuration file
    /// and the library's builder both read them here.
    ///
    /// ```
    /// use sluice_config::{KeySource, KeySpec};
    /// let key = KeySpec::parse(&["header:X-Api-Key|ip"]).unwrap();
    /// assert_eq!(key.parts, [vec![KeySource::Header("x-api-key".into()), KeySource::Ip]]);
    /// assert_eq!("ip".parse::<KeySpec>().unwrap(), KeySpec::parse(&["ip"]).unwrap());
    /// assert!(KeySpec::parse::<&str>(&[]).is_err(), "a key names at least one part");
    /// assert!(KeySpec::parse(&["cookie:sid"]).unwrap_err().contains("unknown key part"));
    /// ```
    pub fn parse<S: AsRef<str>>(parts: &[S]) -> Result<KeySpec, String> {
        if parts.is_empty() {
            return Err("key must name at least one part".into());
        }
        let parts = parts.iter().map(|p| crate::key_part::key_part(p.as_ref())).collect::<Result<_, _>>()?;
        Ok(KeySpec { parts })
    }

    /// The kind of the first source of the first part: the "key type" for logs.
    pub fn kind(&self) -> &'static str {
        self.parts.first().and_then(|p| p.first()).map_or("const", KeySource::kind)
    }

    /// True when some part reads the request body.
    pub fn needs_body(&self) -> bool {
        self.parts.iter().flatten().any(|s| s.body_field().is_some())
    }
}

/// A key of one part (`"header:x-api-key|ip"`): [`KeySpec::parse`].
impl std::str::FromStr for KeySpec {
    type Err = String;

    fn from_str(text: &str) -> Result<KeySpec, String> {
        KeySpec::parse(&[text])
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
    /// A string at a JSON pointer in a JSON body, compared as an account name.
    Json(String),
    /// A field of an `application/x-www-form-urlencoded` body, compared as an account name.
    Form(String),
    /// The request method.
    Method,
    /// The request path.
    Path,
    /// The route's name.
    Route,
    /// A constant (a global limit).
    Const(String),
    /// A claim of a verified bearer JWT (`[identity.jwt]`), at this JSON pointer into its
    /// payload (`jwt:sub` is `/sub`): absent unless the token verifies.
    Jwt(String),
    /// The client certificate the TLS handshake verified (`[server.tls] client_ca`): its
    /// subject alternative names or its subject. Absent without one.
    Tls(TlsName),
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

    /// The JSON pointer this source reads, if it reads a JSON body.
    pub fn json_pointer(&self) -> Option<&str> {
        match self.base() {
            KeySource::Json(p) => Some(p),
            _ => None,
        }
    }

    /// The body field this source reads, if it reads the body: a JSON pointer or a form field.
    pub fn body_field(&self) -> Option<BodyField<'_>> {
        match self.base() {
            KeySource::Json(p) => Some(BodyField::Json(p)),
            KeySource::Form(f) => Some(BodyField::Form(f)),
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
            KeySource::Form(_) => "form",
            KeySource::Method => "method",
            KeySource::Path => "path",
            KeySource::Route => "route",
            KeySource::Const(_) => "const",
            KeySource::Jwt(_) => "jwt",
            KeySource::Tls(_) => "tls",
        }
    }
}

/// What a `tls:` key part reads of the verified client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsName {
    /// `tls:san`: its DNS subject alternative names, then its URI ones (a SPIFFE id is a URI),
    /// each in the certificate's order, joined by `,`.
    San,
    /// `tls:subject`: its subject, the distinguished name as the certificate encodes it.
    Subject,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Header(h) => write!(f, "header:{h}"),
            KeySource::Json(p) => write!(f, "json:{p}"),
            KeySource::Form(name) => write!(f, "form:{name}"),
            KeySource::Const(c) => write!(f, "const:{c}"),
            KeySource::Tls(TlsName::San) => f.write_str("tls:san"),
            KeySource::Tls(TlsName::Subject) => f.write_str("tls:subject"),
            KeySource::Email(inner) => write!(f, "email({inner})"),
            // A top-level claim as written (`jwt:sub`), a deeper one as its pointer.
            KeySource::Jwt(p) => match p.strip_prefix('/') {
                Some(name) if !name.contains(['/', '~']) => write!(f, "jwt:{name}"),
                _ => write!(f, "jwt:{p}"),
            },
            other => f.write_str(other.kind()),
        }
    }
}

/// A field of the request body that a key part reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyField<'a> {
    /// An RFC 6901 pointer into a JSON body (`/user/email`).
    Json(&'a str),
    /// A field name of a form body (`email`).
    Form(&'a str),
}

impl BodyField<'_> {
    /// The top-level name an application would also look for in the query string: a form
    /// field's name, or a JSON pointer's first member (`/user/email` is `user`, which Rails
    /// and PHP read from `user[email]=` in a query).
    pub fn top_name(&self) -> String {
        match self {
            BodyField::Form(name) => (*name).to_owned(),
            BodyField::Json(p) => {
                let first = p.strip_prefix('/').unwrap_or(p).split('/').next().unwrap_or("");
                first.replace("~1", "/").replace("~0", "~")
            }
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
    /// Redis or Redis Cluster, or the primary Redis Sentinel names.
    Redis {
        /// Server URLs (one unless `cluster`; none with `sentinel`); they may carry a password.
        urls: Vec<SecretUrl>,
        /// Redis Cluster mode.
        cluster: bool,
        /// What to do when Redis fails.
        on_error: OnError,
        /// Bound on each call.
        timeout_ms: u64,
        /// Prefix of every stored key.
        key_prefix: String,
        /// The Sentinels that name the primary (`sentinel`), instead of `urls`.
        sentinel: Option<Sentinel>,
    },
}

/// `[store] sentinel`: Redis Sentinel names the primary, and sluice follows its failovers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinel {
    /// The name the Sentinels monitor the primary by.
    pub master: String,
    /// The Sentinels' URLs (`redis://host:26379`); their user, password and database are the
    /// primary's, and may be shown only redacted.
    pub urls: Vec<SecretUrl>,
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

impl OnError {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            OnError::FailOpen => "fail-open",
            OnError::FailClosed => "fail-closed",
            OnError::Local => "local",
        }
    }
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
    /// How often the directory is looked at for changed files, which are then reloaded
    /// (`watch_interval`, default 2s; `None` with `"0s"`: SIGHUP only).
    pub watch_interval: Option<Nanos>,
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

impl RlsCharge {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            RlsCharge::AllOrNothing => "all-or-nothing",
            RlsCharge::Independent => "independent",
        }
    }
}

/// `[forward_auth]`: a path on the `[server]` listener where a trusted proxy (Caddy
/// `forward_auth`, Traefik `forwardAuth`, nginx `auth_request`) asks whether to let the request
/// it names through, decided by the configured routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// The path the proxies ask (`/v1/authz` by default), in its normal form.
    pub path: String,
    /// The status of a denial answered to them (`server.deny_status` unless given): nginx passes
    /// only 401 and 403 from its subrequest on, so its recipe asks for 403.
    pub deny_status: u16,
}
