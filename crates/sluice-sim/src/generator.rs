//! The pseudo-random generator a scenario draws from, chosen once for the whole run.
//!
//! - [`Generator::Python`] (the default) is Python's `random.Random(seed)` ([`PythonRandom`]):
//!   the generator of the seed article's experiment, so `sluice simulate` reproduces its table
//!   exactly, and any scenario can be reproduced by a few lines of Python.
//! - [`Generator::Xoshiro`] is xoshiro256** ([`Rng`]), with its own logarithm built from IEEE-754
//!   basic operations only: the same arrivals on every machine and C library.
//!
//! Scenarios draw through one [`Source`], whatever the generator: uniform integers with
//! [`Source::below`], Poisson streams with a [`PoissonClock`].
//!
//! ```
//! use sluice_sim::{Generator, PoissonClock, Source};
//! // Python: r = random.Random(42); t = r.expovariate(6.0)  ->  0.1700100478791335 s
//! let mut source = Source::new(Generator::Python, 42);
//! let mut clock = PoissonClock::new(6.0);
//! assert_eq!(clock.advance(&mut source), 170_010_048);
//! ```

use std::fmt;
use std::str::FromStr;

use sluice_core::{NANOS_PER_SEC, Nanos};
use thiserror::Error;

use crate::python_random::PythonRandom;
use crate::rng::Rng;

/// Which generator draws the random numbers of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Generator {
    /// Python's `random.Random(seed)`: the seed article's generator.
    #[default]
    Python,
    /// xoshiro256** with a portable logarithm: the same output with every C library.
    Xoshiro,
}

/// Every generator, the default first.
pub const GENERATORS: [Generator; 2] = [Generator::Python, Generator::Xoshiro];

impl Generator {
    /// The name on the command line and in reports: `python`, `xoshiro`.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Python => "python",
            Generator::Xoshiro => "xoshiro",
        }
    }
}

impl fmt::Display for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A generator name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown generator `{0}`: expected python or xoshiro")]
pub struct UnknownGenerator(pub String);

impl FromStr for Generator {
    type Err = UnknownGenerator;

    fn from_str(s: &str) -> Result<Self, UnknownGenerator> {
        GENERATORS.into_iter().find(|g| g.name() == s).ok_or_else(|| UnknownGenerator(s.to_string()))
    }
}

/// A seeded generator of either kind: what every scenario draws from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Python's `random.Random(seed)`.
    Python(Box<PythonRandom>),
    /// xoshiro256**.
    Xoshiro(Rng),
}

impl Source {
    /// `generator` seeded with `seed`.
    pub fn new(generator: Generator, seed: u64) -> Self {
        match generator {
            Generator::Python => Source::Python(Box::new(PythonRandom::new(seed))),
            Generator::Xoshiro => Source::Xoshiro(Rng::new(seed)),
        }
    }

    /// A uniform integer in `[0, n)`, 0 when `n` is 0: Python's `randrange(n)`, or xoshiro's
    /// multiply-high.
    pub fn below(&mut self, n: u64) -> u64 {
        match self {
            Source::Python(r) => r.randbelow(n),
            Source::Xoshiro(r) => r.below(n),
        }
    }
}

/// The clock of one Poisson stream from t = 0: each [`advance`](Self::advance) adds an
/// exponential gap and returns the new arrival time.
///
/// Each generator keeps time the way its reference does, so that its arrivals are exactly
/// those of the reference:
/// - Python adds `expovariate(rate)` seconds to a float, as the script
///   `t = 0.0; while True: t += r.expovariate(rate)` does, and returns the nanosecond nearest
///   to the float's exact value (halves up);
/// - xoshiro adds whole nanoseconds: each gap, `-ln(1 - u) * 1e9 / rate`, rounded to the
///   nearest nanosecond.
#[derive(Debug, Clone, PartialEq)]
pub struct PoissonClock {
    /// Arrivals per second.
    rate: f64,
    /// Python's time: seconds as a float.
    seconds: f64,
    /// xoshiro's time: whole nanoseconds.
    nanos: Nanos,
}

impl PoissonClock {
    /// A stream of `rate` arrivals per second (positive and finite), at t = 0.
    pub fn new(rate: f64) -> Self {
        Self { rate, seconds: 0.0, nanos: 0 }
    }

    /// The next arrival time, in nanoseconds since t = 0. It saturates at `u64::MAX`.
    pub fn advance(&mut self, source: &mut Source) -> Nanos {
        match source {
            Source::Python(r) => {
                self.seconds += r.expovariate(self.rate);
                seconds_to_nanos(self.seconds)
            }
            Source::Xoshiro(r) => {
                self.nanos = self.nanos.saturating_add(r.exp_nanos(NANOS_PER_SEC as f64 / self.rate));
                self.nanos
            }
        }
    }
}

/// The nanosecond nearest to `seconds`, exactly (halves up): the float is `m * 2^e` with an
/// integer `m` below 2^53, so `m * 10^9` fits in 128 bits and one rounded shift gives the
/// answer, with no second rounding by a float multiplication. Negative numbers and NaN give 0,
/// anything beyond `u64::MAX` nanoseconds gives `u64::MAX`.
fn seconds_to_nanos(seconds: f64) -> Nanos {
    if seconds.is_nan() || seconds <= 0.0 {
        return 0;
    }
    if seconds.is_infinite() {
        return Nanos::MAX;
    }
    let bits = seconds.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (m, e) = if biased == 0 { (fraction, -1074) } else { (fraction | 1 << 52, biased - 1075) };
    if e >= 0 {
        // At least 2^52 s: far beyond u64 nanoseconds.
        return Nanos::MAX;
    }
    let scaled = u128::from(m) * u128::from(NANOS_PER_SEC);
    let shift = e.unsigned_abs();
    let nanos = if shift >= 128 { 0 } else { (scaled >> shift) + ((scaled >> (shift - 1)) & 1) };
    Nanos::try_from(nanos).unwrap_or(Nanos::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_python_is_the_default() {
        for g in GENERATORS {
            assert_eq!(g.name().parse::<Generator>(), Ok(g));
            assert_eq!(g.to_string(), g.name());
        }
        assert_eq!(Generator::default(), Generator::Python);
        assert_eq!("mt".parse::<Generator>(), Err(UnknownGenerator("mt".into())));
    }

    #[test]
    fn seconds_become_the_nearest_nanosecond() {
        assert_eq!(seconds_to_nanos(0.0), 0);
        assert_eq!(seconds_to_nanos(-1.0), 0);
        assert_eq!(seconds_to_nanos(f64::NAN), 0);
        assert_eq!(seconds_to_nanos(1.0), NANOS_PER_SEC);
        assert_eq!(seconds_to_nanos(0.5), 500_000_000);
        // 0.1 is 0.1000000000000000055511151231257827 s: 100 000 000 ns.
        assert_eq!(seconds_to_nanos(0.1), 100_000_000);
        // As floats, 2.5e-9 is 2.50000000000000005e-9 and 1.5e-9 is 1.49999999999999999e-9: the
        // exact values decide, where `(t * 1e9).round()` would see 2.5 and 1.5.
        assert_eq!(seconds_to_nanos(2.5e-9), 3);
        assert_eq!(seconds_to_nanos(1.5e-9), 1);
        // 1/1024 s is exactly 976 562.5 ns.
        assert_eq!(seconds_to_nanos(1.0 / 1024.0), 976_563);
        assert_eq!(seconds_to_nanos(3.0 / 1024.0), 2_929_688);
        assert_eq!(seconds_to_nanos(29.97640353425597), 29_976_403_534);
        assert_eq!(seconds_to_nanos(f64::MIN_POSITIVE), 0);
        assert_eq!(seconds_to_nanos(1e10), 10_000_000_000 * NANOS_PER_SEC);
        assert_eq!(seconds_to_nanos(1e11), Nanos::MAX);
        assert_eq!(seconds_to_nanos(f64::MAX), Nanos::MAX);
        assert_eq!(seconds_to_nanos(f64::INFINITY), Nanos::MAX);
    }

    #[test]
    fn conversion_agrees_with_exact_decimal_rounding() {
        // Rust prints a float's exact decimal expansion to any precision; 60 digits are far
        // below a nanosecond, and `parse_seconds` rounds them exactly.
        let mut r = PythonRandom::new(9);
        for i in 0..20_000 {
            let t = r.random() * 10f64.powi(i % 12 - 2);
            let want = crate::decimal::parse_seconds(&format!("{t:.60}")).unwrap();
            assert_eq!(seconds_to_nanos(t), want, "{t:e}");
        }
    }

    #[test]
    fn sources_draw_from_their_generator() {
        let mut p = Source::new(Generator::Python, 42);
        let mut reference = PythonRandom::new(42);
        assert_eq!(p.below(1000), reference.randbelow(1000));
        let mut x = Source::new(Generator::Xoshiro, 42);
        assert_eq!(x.below(1000), Rng::new(42).below(1000));
    }

    #[test]
    fn each_clock_keeps_time_as_its_reference_does() {
        // xoshiro adds whole-nanosecond gaps; Python sums float seconds and rounds the sum.
        let mut rng = Rng::new(3);
        let mut python = PythonRandom::new(3);
        let (mut t_x, mut t_p) = (0, 0.0);
        let mut x = (Source::new(Generator::Xoshiro, 3), PoissonClock::new(6.0));
        let mut p = (Source::new(Generator::Python, 3), PoissonClock::new(6.0));
        for _ in 0..1000 {
            t_x += rng.exp_nanos(NANOS_PER_SEC as f64 / 6.0);
            t_p += python.expovariate(6.0);
            assert_eq!(x.1.advance(&mut x.0), t_x);
            assert_eq!(p.1.advance(&mut p.0), seconds_to_nanos(t_p));
        }
    }
}
