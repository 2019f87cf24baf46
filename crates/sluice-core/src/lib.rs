//! # sluice-core
//!
//! The five rate-limiting algorithms of sluice as exact, deterministic state machines:
//! [`FixedWindow`], [`SlidingLog`], [`SlidingWindow`] (the sliding window counter),
//! [`TokenBucket`] and [`LeakyBucket`] (a GCRA meter that polices or shapes).
//!
//! Time is `u64` nanoseconds ([`Nanos`]) passed in by the caller: nothing here reads a clock,
//! spawns a task or does I/O, so every decision can be replayed and tested without sleeping.
//! [`ManualClock`] and [`SystemClock`] live here for the callers that need one.
//!
//! Every algorithm answers with a [`Decision`]; a denial is a value, and a request that could
//! never be admitted (cost above capacity) is a [`CostError`]; [`check_cost`] is the one rule
//! of what a request may cost (1 to the limit). A denied request charges nothing.
//!
//! ```
//! use sluice_core::{Algorithm, SlidingLog, NANOS_PER_SEC};
//!
//! // 3 password-reset requests per 15 minutes, exactly.
//! let per_account = SlidingLog::new(3, 15 * 60 * NANOS_PER_SEC).unwrap();
//! let mut state = Default::default();
//! let t0 = 1_000 * NANOS_PER_SEC;
//! for i in 0..3 {
//!     assert!(per_account.check(&mut state, t0 + i * NANOS_PER_SEC, 1).unwrap().allowed);
//! }
//! let denied = per_account.check(&mut state, t0 + 10 * NANOS_PER_SEC, 1).unwrap();
//! assert!(!denied.allowed);
//! // The first request leaves the window 15 minutes after it was admitted.
//! assert_eq!(denied.retry_after, 15 * 60 * NANOS_PER_SEC - 10 * NANOS_PER_SEC);
//! ```

mod algorithm;
pub mod calendar;
mod decision;
mod digits;
mod duration;
mod error;
mod fixed_window;
mod fuzz;
mod gcra;
mod policy;
mod sliding_log;
mod sliding_window;
mod time;
mod zone;

pub use algorithm::{Algorithm, check_charge, check_cost};
pub use decision::Decision;
pub use digits::decimal;
pub use duration::{DurationError, format_duration, parse_duration};
pub use error::{CostError, ParamError};
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use fuzz::fuzz_cases;
pub use gcra::{GcraState, LeakMode, LeakyBucket, TokenBucket};
pub use policy::{ALGORITHM_NAMES, AlgorithmKind, Policy, State};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use time::{
    Clock, ManualClock, NANOS_PER_MILLI, NANOS_PER_SEC, Nanos, SystemClock, ceil_millis, ceil_secs, wall_clock_now,
};
pub use zone::{CalendarWindows, MAX_OFFSET_SECS, Period, Zone, ZoneError};
