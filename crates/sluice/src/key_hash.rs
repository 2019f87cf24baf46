//! `sluice key-hash --config FILE PART...`: the key hashes a gateway with that configuration
//! gives a client, limit by limit — what an operator searches for in decision lines and on the
//! status page, which never show a key itself.
//!
//! Parts: `ip:ADDRESS` (grouped as the gateway groups it: IPv6 to `server.ipv6_prefix`),
//! `header:NAME=VALUE`, `user:NAME` (the trusted proxy's user header), `method:METHOD`,
//! `path:PATH`. A limit is listed when every part of its key can be built from what was given
//! (a fallback chain takes its first source given, as the gateway takes the first present).
//! Keys read from tokens, bodies or client certificates are not computed: a request carries
//! them, not a command line.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use http::{HeaderMap, HeaderName, HeaderValue};
use sluice_config::{Config, KeySource};
use sluice_http::identity::{Client, ClientIdentity};
use sluice_http::keys::{KeyBuilder, RequestFacts};
use sluice_store::KeyHasher;

/// Arguments of `sluice key-hash`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The gateway's configuration (its `server.key_secret` is the hash's key).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// What the client sends: ip:ADDRESS, header:NAME=VALUE, user:NAME, method:METHOD, path:PATH.
    #[arg(required = true, value_name = "PART")]
    pub parts: Vec<String>,
}

/// What the command line gave.
#[derive(Debug, Default)]
struct Given {
    ip: Option<IpAddr>,
    headers: HeaderMap,
    user: Option<String>,
    method: Option<String>,
    path: Option<String>,
}

impl Given {
    fn parse(parts: &[String]) -> anyhow::Result<Self> {
        let mut g = Given::default();
        for part in parts {
            let (kind, value) = part.split_once(':').with_context(|| format!("`{part}`: write KIND:VALUE"))?;
            match kind {
                "ip" => g.ip = Some(value.parse().with_context(|| format!("`{value}` is not an IP address"))?),
                "header" => {
                    let (name, v) =
                        value.split_once('=').with_context(|| format!("`{part}`: write header:NAME=VALUE"))?;
                    let name = HeaderName::try_from(name.to_ascii_lowercase())
                        .with_context(|| format!("`{name}` is not a header name"))?;
                    g.headers
                        .append(name, HeaderValue::from_str(v).with_context(|| format!("`{v}`: not a header value"))?);
                }
                "user" => g.user = Some(value.to_string()),
                "method" => g.method = Some(value.to_string()),
                "path" => g.path = Some(value.to_string()),
                other => bail!(
                    "`{other}:` is not a part this command builds (ip, header, user, method, path); keys from tokens, bodies \
                     and client certificates come with a request"
                ),
            }
        }
        Ok(g)
    }

    /// Whether `source` can be read from what was given.
    fn has(&self, source: &KeySource, config: &Config) -> bool {
        match source {
            KeySource::Ip => self.ip.is_some(),
            KeySource::Header(name) => self.headers.contains_key(name.as_str()),
            KeySource::User => self.user.is_some() && config.server.user_header.is_some(),
            KeySource::Method => self.method.is_some(),
            KeySource::Path => self.path.is_some(),
            KeySource::Route | KeySource::Const(_) => true,
            KeySource::Email(inner) => self.has(inner, config),
            _ => false,
        }
    }
}

/// Runs `sluice key-hash`: one line per limit whose key the parts build.
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = sluice_config::load(&args.config)?;
    let Some(secret) = &config.server.key_secret else {
        bail!(
            "{}: server.key_secret is not set: a gateway without one draws a random secret at each start, so its key \
             hashes cannot be computed (set key_secret, key_secret_file or key_secret_env)",
            args.config.display()
        );
    };
    let mut given = Given::parse(&args.parts)?;
    if let (Some(user), Some(header)) = (&given.user, &config.server.user_header) {
        let value = HeaderValue::from_str(user).with_context(|| format!("`{user}`: not a header value"))?;
        given.headers.insert(HeaderName::try_from(header.as_str())?, value);
    }
    let keys = KeyBuilder::new(KeyHasher::from_secret(secret.expose().as_bytes()), config.server.user_header.clone());
    let identity = ClientIdentity::new(config.server.trusted_proxies.clone(), config.server.ipv6_prefix);
    let ip = given.ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    // The user header is read from trusted proxies only: the client is taken as having come
    // through one.
    let client = Client { ip, grouped: identity.group(ip), peer_trusted: true };
    let mut rows = Vec::new();
    for route in &config.routes {
        for limit in &route.limits {
            if !limit.key.parts.iter().all(|chain| chain.iter().any(|s| given.has(s, &config))) {
                continue;
            }
            let policy = &config.policies[limit.policy].name;
            let facts = RequestFacts {
                method: given.method.as_deref().unwrap_or("GET"),
                path: given.path.as_deref().unwrap_or("/"),
                route: &route.name,
                client: &client,
                headers: &given.headers,
                tls: None,
                body: None,
            };
            let (hash, _) = keys.key(policy, &limit.key, &facts).map_err(|e| anyhow::anyhow!("{e}"))?;
            rows.push([route.name.clone(), policy.clone(), limit.key.to_string(), hash.to_hex()]);
        }
    }
    if rows.is_empty() {
        bail!("no limit of {} is keyed on only what was given ({})", args.config.display(), args.parts.join(" "));
    }
    let header = ["route", "policy", "key", "key_hash"].map(str::to_string);
    let widths: Vec<usize> =
        (0..4).map(|i| rows.iter().chain([&header]).map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in [&header].into_iter().chain(&rows) {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    Ok(())
}
