//! Durations as configuration spells them: `500ms`, `1s`, `15m`, `1h`, `1d`.

use sluice_core::Nanos;

/// Parses `N` followed by a unit (`ns`, `us`, `ms`, `s`, `m`, `h`, `d`) into nanoseconds.
/// `N` may be a decimal (`1.5s`), rounded to the nearest nanosecond.
///
/// ```
/// use sluice_config::parse_duration;
/// assert_eq!(parse_duration("15m"), Ok(900_000_000_000));
/// assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
/// assert!(parse_duration("15 minutes").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "" => return Err(format!("`{text}` has no unit: write e.g. `500ms`, `1s`, `15m`, `1h`")),
        _ => return Err(format!("`{text}`: unknown unit `{unit}` (use ns, us, ms, s, m, h or d)")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(format!("`{text}` is not a duration: write e.g. `500ms`, `1s`, `15m`"));
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| format!("`{text}` is too large"))? };
    let mut total = int.checked_mul(scale).ok_or_else(|| format!("`{text}` is too large"))?;
    // Fraction digits, exactly: frac / 10^len * scale, rounded to nearest.
    if !frac.is_empty() {
        let digits = frac.len().min(18);
        let f: u128 = frac[..digits].parse().map_err(|_| format!("`{text}` is not a duration"))?;
        let denom = 10u128.pow(digits as u32);
        let part = (f * scale as u128 + denom / 2) / denom;
        total = total.checked_add(part as u64).ok_or_else(|| format!("`{text}` is too large"))?;
    }
    Ok(total)
}

/// Formats nanoseconds in the largest unit that divides them (for `check-config` output).
pub fn format_duration(n: Nanos) -> String {
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    for (scale, unit) in UNITS {
        if n >= scale && n.is_multiple_of(scale) {
            return format!("{}{unit}", n / scale);
        }
    }
    format!("{n}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_fractions() {
        assert_eq!(parse_duration("1s"), Ok(1_000_000_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("0.25s"), Ok(250_000_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000_000_000));
        assert_eq!(parse_duration("7ns"), Ok(7));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("1.2.3s").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("10 s").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for t in ["15m", "1s", "250ms", "3h", "7ns", "1d"] {
            assert_eq!(format_duration(parse_duration(t).unwrap()), t);
        }
    }
}
