//! Errors of the descriptor files: each names the file, the line and the field.

/// A descriptor file that cannot be used, and where: the TOML configuration's error type, so
/// that `sluice check-config` and reloads report both alike (`file:line: field: message`).
pub type RlsConfigError = sluice_config::ConfigError;
