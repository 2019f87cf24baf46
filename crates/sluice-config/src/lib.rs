//! # sluice-config
//!
//! Reads sluice's TOML configuration in two steps: serde fills raw structs, then validation
//! turns them into the types the rest of sluice uses ([`Config`], whose policies are
//! `sluice_core::Policy` values). Every error names the file, the line and the field.
//!
//! ```
//! use sluice_config::{parse, KeySource};
//! let cfg = parse("sluice.toml", r#"
//! [[policy]]
//! name = "per-ip"
//! algorithm = "token-bucket"
//! capacity = 10
//! refill_per_second = 0.05
//!
//! [[route]]
//! path = "/api/search"
//! limits = [{ policy = "per-ip", key = ["header:x-api-key|ip", "route"] }]
//! "#).unwrap();
//! assert_eq!(cfg.routes[0].limits[0].key.parts[0], vec![KeySource::Header("x-api-key".into()), KeySource::Ip]);
//!
//! let err = parse("sluice.toml", "[[policy]]\nname = \"x\"\nalgorithm = \"token-bucket\"\ncapacity = 0\nrefill_per_second = 1\n").unwrap_err();
//! assert_eq!(err.to_string(), "sluice.toml:4: policy[0].capacity: capacity must be at least 1");
//! ```

#[cfg(feature = "toml")]
mod accepted_keys;
mod cost_from;
mod defaults;
mod duration;
mod error;
#[cfg(feature = "toml")]
mod field_path;
#[cfg(feature = "toml")]
mod identity;
mod key_part;
pub mod method;
mod model;
mod path;
#[cfg(feature = "toml")]
mod raw;
mod secret;
#[cfg(feature = "time-zones")]
mod time_zone;
#[cfg(feature = "toml")]
mod validate;

#[cfg(feature = "toml")]
pub use accepted_keys::accepted_keys;
pub use cost_from::CostFrom;
pub use defaults::{DEFAULT_IPV6_PREFIX, DEFAULT_LEASE, DEFAULT_LISTEN, MAX_SLIDING_LOG_LIMIT};
pub use duration::{format_duration, parse_duration};
pub use error::ConfigError;
pub use model::*;
pub use path::{PathPattern, PathRefusal, PathShape, normalize_path, request_path};
pub use secret::{REDACTED, Secret, SecretUrl};
#[cfg(feature = "time-zones")]
pub use time_zone::{ZONE_TABLE_UNTIL_YEAR, time_zone};

/// Parses and validates configuration text; `file` names it in errors.
#[cfg(feature = "toml")]
pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
    let src = error::Source { file, text };
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| src.line_of(s.start));
        let field = field_path::field_of(text, &e)
            .or_else(|| {
                let named = ["unknown field `", "missing field `"].iter();
                named.filter_map(|marker| field_path::backticked(e.message(), marker)).next().map(str::to_string)
            })
            .unwrap_or_else(|| "(syntax)".to_string());
        src.error(line, field, serde_message(e.message()))
    })?;
    validate::validate(&src, raw)
}

/// Reads, parses and validates a configuration file.
#[cfg(feature = "toml")]
pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        line: None,
        field: "(file)".into(),
        message: format!("cannot read: {e}"),
    })?;
    parse(&file, &text)
}

/// serde's message, with the one that names a type of ours said in the file's terms.
#[cfg(feature = "toml")]
fn serde_message(message: &str) -> String {
    if message.starts_with("data did not match any variant of untagged enum RawKey") {
        return "expected a key: one string (`\"header:x-api-key|ip\"`) or an array of parts".to_string();
    }
    message.to_string()
}
