//! The file as serde reads it: strings and options, nothing validated yet.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub server: Option<Spanned<RawServer>>,
    pub upstream: Option<Spanned<RawUpstream>>,
    #[serde(default)]
    pub upstreams: Vec<Spanned<RawUpstreams>>,
    #[serde(default)]
    pub policy: Vec<Spanned<RawPolicy>>,
    #[serde(default)]
    pub route: Vec<Spanned<RawRoute>>,
    pub store: Option<Spanned<RawStore>>,
    pub admin: Option<Spanned<RawAdmin>>,
    pub decision_api: Option<Spanned<RawDecisionApi>>,
    pub decision_log: Option<Spanned<RawDecisionLog>>,
    pub rls: Option<Spanned<RawRls>>,
    pub identity: Option<Spanned<RawIdentity>>,
    pub forward_auth: Option<Spanned<RawForwardAuth>>,
    pub access_log: Option<Spanned<RawAccessLog>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessLog {
    pub path: String,
    pub format: Option<String>,
    pub client: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub listen: Option<String>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    pub forwarded_header: Option<String>,
    pub ipv6_prefix: Option<u8>,
    pub headers: Option<Vec<String>>,
    pub deny_status: Option<u16>,
    pub on_deny: Option<String>,
    pub max_in_flight: Option<usize>,
    pub max_in_flight_per_client: Option<usize>,
    pub user_header: Option<String>,
    pub max_body_bytes: Option<usize>,
    pub body_timeout: Option<String>,
    pub body_idle_timeout: Option<String>,
    pub max_body_reads_per_client: Option<usize>,
    pub underscore_headers: Option<String>,
    pub key_secret: Option<String>,
    pub key_secret_file: Option<String>,
    pub key_secret_env: Option<String>,
    pub decision_api: Option<bool>,
    pub tls: Option<toml::Spanned<RawTls>>,
    pub h2c: Option<bool>,
    pub workers: Option<usize>,
    pub http2: Option<toml::Spanned<RawHttp2>>,
    pub tunnel_idle_timeout: Option<String>,
    pub cors: Option<toml::Spanned<RawCors>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCors {
    pub allow_origins: Option<Vec<String>>,
    pub preflight: Option<String>,
    pub max_age: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouteCors {
    pub allow_origins: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp2 {
    pub max_concurrent_streams: Option<u32>,
    pub max_header_list_size: Option<u32>,
    pub max_frame_size: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub cert: String,
    pub key: String,
    #[serde(default)]
    pub certificates: Vec<toml::Spanned<RawTlsPair>>,
    pub client_ca: Option<String>,
    pub client_auth: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTlsPair {
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstreams {
    pub name: String,
    pub targets: Vec<String>,
    pub balance: Option<String>,
    pub hash_key: Option<RawKey>,
    pub ca: Option<String>,
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    pub http2: Option<bool>,
    pub timeout_ms: Option<u64>,
    pub timeouts: Option<RawTimeouts>,
    pub eject_after: Option<u32>,
    pub eject_for: Option<String>,
    pub eject_on_5xx: Option<bool>,
    pub health_check: Option<RawHealthCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthCheck {
    pub path: String,
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub healthy_after: Option<u32>,
    pub unhealthy_after: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstream {
    pub url: String,
    pub ca: Option<String>,
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    pub http2: Option<bool>,
    pub timeout_ms: Option<u64>,
    pub timeouts: Option<RawTimeouts>,
}

/// `timeouts = { connect = "1s", first_byte = "30s", idle = "10s" }` (an upstream's or a
/// route's), each a duration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTimeouts {
    pub connect: Option<String>,
    pub first_byte: Option<String>,
    pub idle: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub name: String,
    pub algorithm: String,
    pub limit: Option<u64>,
    pub window: Option<String>,
    pub capacity: Option<u64>,
    pub refill_per_second: Option<f64>,
    pub rate_per_second: Option<f64>,
    pub mode: Option<String>,
    pub delay: Option<u64>,
    #[serde(default)]
    pub shadow: bool,
    pub enforce: Option<String>,
    pub unit: Option<String>,
    pub max_in_flight: Option<u64>,
    pub lease: Option<String>,
    pub align: Option<String>,
    pub timezone: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub name: Option<String>,
    pub path: String,
    #[serde(default)]
    pub exact: bool,
    pub methods: Option<Vec<String>>,
    pub cost: Option<u64>,
    #[serde(default)]
    pub limits: Vec<RawLimit>,
    #[serde(default)]
    pub loosen: Vec<String>,
    #[serde(default)]
    pub upgrades: Vec<String>,
    pub cors: Option<RawRouteCors>,
    pub upstream: Option<String>,
    pub timeouts: Option<RawTimeouts>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimit {
    pub policy: Option<String>,
    pub key: RawKey,
    pub cost: Option<u64>,
    pub cost_from: Option<String>,
    pub policy_by: Option<String>,
    pub policies: Option<BTreeMap<String, String>>,
    pub default_policy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawKey {
    One(String),
    Parts(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub kind: Option<String>,
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    #[serde(default)]
    pub cluster: bool,
    pub on_error: Option<String>,
    pub timeout_ms: Option<u64>,
    pub key_prefix: Option<String>,
    pub max_keys: Option<usize>,
    pub when_full: Option<String>,
    pub fold_width: Option<usize>,
    pub fold_depth: Option<usize>,
    pub shards: Option<usize>,
    pub snapshot: Option<String>,
    pub snapshot_interval: Option<String>,
    pub sentinel: Option<Spanned<RawSentinel>>,
}

/// `[store] sentinel = { master = "mymaster", urls = ["redis://10.0.0.5:26379", ...] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSentinel {
    pub master: Option<String>,
    pub urls: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDecisionApi {
    pub allow: Option<Vec<String>>,
    pub token: Option<String>,
    pub token_file: Option<String>,
    pub token_env: Option<String>,
    pub max_cost: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub listen: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDecisionLog {
    pub sample: Option<f64>,
    pub denials_per_second: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRls {
    pub listen: Option<String>,
    pub descriptors: String,
    pub charge: Option<String>,
    pub watch_interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIdentity {
    pub jwt: Option<Spanned<RawJwt>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJwt {
    pub hs256_secret: Option<String>,
    pub hs256_secret_file: Option<String>,
    pub hs256_secret_env: Option<String>,
    pub jwks_file: Option<String>,
    pub header: Option<String>,
    pub cookie: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub leeway: Option<String>,
    pub on_invalid_token: Option<String>,
    pub cache_entries: Option<usize>,
}

/// A JSON Web Key Set file (RFC 7517), as far as sluice reads it.
#[derive(Debug, Deserialize)]
pub(crate) struct RawJwks {
    pub keys: Vec<RawJwk>,
}

/// One key of a JWKS; members sluice does not use are ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct RawJwk {
    pub kty: String,
    pub kid: Option<String>,
    pub alg: Option<String>,
    #[serde(rename = "use")]
    pub use_: Option<String>,
    pub crv: Option<String>,
    pub n: Option<String>,
    pub e: Option<String>,
    pub x: Option<String>,
    pub y: Option<String>,
    /// Present only in private keys, which a JWKS of verification keys must not hold.
    pub d: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawForwardAuth {
    pub path: Option<String>,
    pub deny_status: Option<u16>,
}
