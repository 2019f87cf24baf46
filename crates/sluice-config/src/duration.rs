//! Durations as configuration spells them (`500ms`, `1s`, `15m`, `1h`, `1d`): the workspace's
//! one parser, [`sluice_core::parse_duration`], with its error as the message that validation
//! puts after the file, line and field.

use sluice_core::Nanos;

pub use sluice_core::format_duration;

/// Parses a number followed by a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `min`, `h`, `d`) into
/// nanoseconds, exactly; see [`sluice_core::parse_duration`].
///
/// ```
/// use sluice_config::parse_duration;
/// assert_eq!(parse_duration("15m"), Ok(900_000_000_000));
/// assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
/// assert_eq!(parse_duration("10").unwrap_err(), "`10` has no unit: write e.g. `10s`");
/// assert!(parse_duration("15 minutes").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    sluice_core::parse_duration(text).map_err(|e| e.to_string())
}
