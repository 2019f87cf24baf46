//! Arrivals: when each request comes and who sends it, generated or read from a file.

use std::fmt;

use sluice_core::Nanos;
use thiserror::Error;

use crate::decimal::{DecimalError, format_seconds, parse_seconds};

/// One request: its time from the start of the run, and the identities a limit can key on.
///
/// Replay sends the same arrivals as real requests: `client` becomes the forwarded client
/// address and `account` the account the request names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arrival {
    /// Nanoseconds since the start of the run.
    pub at: Nanos,
    /// The client: an IP address in the generated scenarios, or any key a file gives.
    pub client: Option<String>,
    /// The account the request is for (login, password reset), when known.
    pub account: Option<String>,
}

impl Arrival {
    /// An anonymous arrival at `at`.
    pub fn at(at: Nanos) -> Self {
        Self { at, client: None, account: None }
    }

    /// An arrival at `at` from `client` for `account`.
    pub fn keyed(at: Nanos, client: impl Into<String>, account: impl Into<String>) -> Self {
        Self { at, client: Some(client.into()), account: Some(account.into()) }
    }
}

/// Why an arrivals file was refused. `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {kind}")]
pub struct ArrivalError {
    /// The offending line, counting from 1.
    pub line: usize,
    /// What is wrong with it.
    pub kind: ArrivalErrorKind,
}

/// What is wrong with a line of an arrivals file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArrivalErrorKind {
    /// The time is not a non-negative decimal number of seconds.
    #[error("bad time: {0}")]
    Time(DecimalError),
    /// The time is earlier than the previous line's.
    #[error("time {time} s is earlier than the previous arrival at {previous} s: arrivals must not decrease")]
    Decreasing {
        /// This line's time, in seconds.
        time: String,
        /// The previous arrival's time, in seconds.
        previous: String,
    },
    /// More fields than time, client and account.
    #[error("too many fields ({0}): expected `SECONDS [CLIENT [ACCOUNT]]`")]
    TooManyFields(usize),
    /// A comma-separated line with an empty time.
    #[error("no time before the first separator")]
    MissingTime,
}

/// Reads arrivals, one per line: `SECONDS [CLIENT [ACCOUNT]]`, fields separated by commas or by
/// whitespace. The time is a decimal number of seconds from 0, read exactly to the nanosecond.
/// `#` starts a comment; blank lines are skipped. Times must not decrease.
///
/// ```
/// use sluice_sim::{parse_arrivals, Arrival};
/// let a = parse_arrivals("# t, client, account\n0.5, 203.0.113.7, alice\n\n0.75 203.0.113.8\n").unwrap();
/// assert_eq!(a[0], Arrival::keyed(500_000_000, "203.0.113.7", "alice"));
/// assert_eq!(a[1].client.as_deref(), Some("203.0.113.8"));
/// assert_eq!(a[1].account, None);
/// let err = parse_arrivals("1.0\n0.5\n").unwrap_err();
/// assert_eq!(err.line, 2);
/// ```
pub fn parse_arrivals(text: &str) -> Result<Vec<Arrival>, ArrivalError> {
    let mut out = Vec::new();
    let mut previous: Option<Nanos> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let fail = |kind| ArrivalError { line, kind };
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = if content.contains(',') {
            content.split(',').map(str::trim).collect()
        } else {
            content.split_whitespace().collect()
        };
        if fields.len() > 3 {
            return Err(fail(ArrivalErrorKind::TooManyFields(fields.len())));
        }
        if fields[0].is_empty() {
            return Err(fail(ArrivalErrorKind::MissingTime));
        }
        let at = parse_seconds(fields[0]).map_err(|e| fail(ArrivalErrorKind::Time(e)))?;
        if let Some(p) = previous.filter(|&p| at < p) {
            return Err(fail(ArrivalErrorKind::Decreasing { time: format_seconds(at), previous: format_seconds(p) }));
        }
        previous = Some(at);
        let field = |i: usize| fields.get(i).filter(|f| !f.is_empty()).map(|f| f.to_string());
        out.push(Arrival { at, client: field(1), account: field(2) });
    }
    Ok(out)
}

/// Writes arrivals in the format [`parse_arrivals`] reads, one per line.
pub struct ArrivalsFile<'a>(pub &'a [Arrival]);

impl fmt::Display for ArrivalsFile<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for a in self.0 {
            write!(f, "{}", format_seconds(a.at))?;
            match (&a.client, &a.account) {
                (None, None) => {}
                (Some(c), None) => write!(f, ",{c}")?,
                (c, Some(acc)) => write!(f, ",{},{acc}", c.as_deref().unwrap_or(""))?,
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(text: &str) -> ArrivalError {
        parse_arrivals(text).unwrap_err()
    }

    #[test]
    fn comments_blank_lines_and_both_separators() {
        let text = "# header comment\n\n  0.1\n0.2,10.0.0.1\n0.2\t10.0.0.2   bob  # trailing comment\n 0.3 , , carol\n";
        let a = parse_arrivals(text).unwrap();
        assert_eq!(a.len(), 4);
        assert_eq!(a[0], Arrival::at(100_000_000));
        assert_eq!(a[1].client.as_deref(), Some("10.0.0.1"));
        assert_eq!(a[2], Arrival::keyed(200_000_000, "10.0.0.2", "bob"));
        assert_eq!(a[3].client, None);
        assert_eq!(a[3].account.as_deref(), Some("carol"));
        assert!(parse_arrivals("").unwrap().is_empty());
        assert!(parse_arrivals("# nothing\n\n").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_line() {
        let e = err("0.1\n\n# c\nabc\n");
        assert_eq!(e.line, 4);
        assert!(matches!(e.kind, ArrivalErrorKind::Time(DecimalError::Malformed(_))));
        assert!(e.to_string().starts_with("line 4: bad time"), "{e}");

        let e = err("1\n2\n1.5\n");
        assert_eq!(e.line, 3);
        assert!(matches!(e.kind, ArrivalErrorKind::Decreasing { .. }));
        assert!(e.to_string().contains("1.500000000"), "{e}");

        assert_eq!(err("0.1 a b c\n").kind, ArrivalErrorKind::TooManyFields(4));
        assert_eq!(err("0.1\n, a\n").line, 2);
        assert_eq!(err("-0.5\n").line, 1);
        assert_eq!(err("time,client\n0.1,a\n").line, 1);
    }

    #[test]
    fn equal_times_are_fine() {
        let a = parse_arrivals("1\n1\n1.0\n").unwrap();
        assert!(a.iter().all(|x| x.at == 1_000_000_000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// Any file is read or refused with the number of a line it has; never a panic.
        #[test]
        fn arbitrary_files_never_panic(text in "[0-9.,# a-z\t\n+eE:-]{0,200}") {
            if let Err(e) = parse_arrivals(&text) {
                prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}");
            }
        }

        #[test]
        fn written_arrivals_read_back(mut times in proptest::collection::vec(0u64..1u64 << 50, 0..50),
                                      keys in proptest::collection::vec((proptest::option::of("[a-z0-9.]{1,8}"),
                                                                         proptest::option::of("[a-z]{1,8}")), 50)) {
            times.sort_unstable();
            let arrivals: Vec<Arrival> = times.iter().zip(keys).map(|(&at, (client, account))| {
                Arrival { at, client, account }
            }).collect();
            let text = ArrivalsFile(&arrivals).to_string();
            prop_assert_eq!(parse_arrivals(&text).unwrap(), arrivals);
        }
    }
}
