//! Named time zones for calendar windows: read from the tz database with jiff, handed to the
//! core as a [`Zone`] (its offsets and when they change), so that the core decides windows
//! with no database and no I/O.

use sluice_core::{Zone, calendar::days_from_civil};

/// How far ahead a zone's rules are written out: past this year the last offset holds. The
/// Redis store's arithmetic reaches 2180 (`sluice-redis`'s `MAX_SPAN_MICROS`).
pub const ZONE_TABLE_UNTIL_YEAR: i64 = 2200;

/// The zone `name` names (`Europe/Kyiv`, `America/New_York`, `UTC`), from the system's tz
/// database or, where the machine has none, the copy built in; one shared copy per zone.
///
/// ```
/// let kyiv = sluice_config::time_zone("Europe/Kyiv").unwrap();
/// assert_eq!(kyiv.name(), "Europe/Kyiv");
/// assert_eq!(kyiv.offset_at(1_719_792_000), 3 * 3_600); // 2024-07-01: summer time
/// assert!(sluice_config::time_zone("Europe/Atlantis").is_err());
/// ```
pub fn time_zone(name: &str) -> Result<&'static Zone, String> {
    if name.trim() != name || name.is_empty() {
        return Err(format!("`{name}` is not a time zone name (write e.g. `Europe/Kyiv` or `UTC`)"));
    }
    let tz = jiff::tz::TimeZone::get(name).map_err(|e| {
        format!("`{name}` is not a time zone of the tz database ({e}); write e.g. `Europe/Kyiv` or `UTC`")
    })?;
    let from = jiff::Timestamp::UNIX_EPOCH;
    let until = days_from_civil(ZONE_TABLE_UNTIL_YEAR, 1, 1) * 86_400;
    let first = tz.to_offset(from).seconds();
    let mut changes: Vec<(i64, i32)> = Vec::new();
    for t in tz.following(from) {
        let at = t.timestamp().as_second();
        if at >= until {
            break;
        }
        let offset = t.offset().seconds();
        // A change of abbreviation or DST flag alone moves no clock: not a change here.
        if changes.last().map_or(first, |c| c.1) != offset {
            changes.push((at, offset));
        }
    }
    Zone::new(name, first, changes).map(Zone::interned).map_err(|e| e.to_string())
}
