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

mod duration;
mod error;
mod identity;
mod model;
mod path;
mod raw;
mod secret;
mod validate;

pub use duration::{format_duration, parse_duration};
pub use error::ConfigError;
pub use model::*;
pub use path::{PathPattern, PathRefusal, PathShape, normalize_path, request_path};
pub use secret::{REDACTED, Secret, SecretUrl};
pub use validate::DEFAULT_LISTEN;

/// Parses and validates configuration text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
    let src = error::Source { file, text };
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| src.line_of(s.start));
        let message = e.message().to_string();
        let field = field_from_message(&message);
        src.error(line, field, message)
    })?;
    validate::validate(&src, raw)
}

/// Reads, parses and validates a configuration file.
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

/// serde's messages name unknown or missing fields in backticks; use that as the field.
fn field_from_message(message: &str) -> String {
    for marker in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.split(marker).nth(1)
            && let Some(name) = rest.split('`').next()
        {
            return name.to_string();
        }
    }
    "(syntax)".to_string()
}
