//! One type over the five algorithms, for code that picks the algorithm at run time.

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::CostError;
use crate::fixed_window::{FixedWindow, FixedWindowState};
use crate::gcra::{GcraState, LeakyBucket, TokenBucket};
use crate::sliding_log::{SlidingLog, SlidingLogState};
use crate::sliding_window::{SlidingWindow, SlidingWindowState};
use crate::time::Nanos;

/// Any of the five algorithms, with validated parameters.
///
/// ```
/// use sluice_core::{Algorithm, Policy, TokenBucket};
/// let p = Policy::from(TokenBucket::new(2, 1.0).unwrap());
/// let mut s = p.fresh_state();
/// assert_eq!(p.name(), "token-bucket");
/// assert!(p.check(&mut s, 0, 2).unwrap().allowed);
/// assert!(!p.check(&mut s, 0, 1).unwrap().allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// [`FixedWindow`]
    FixedWindow(FixedWindow),
    /// [`SlidingLog`]
    SlidingLog(SlidingLog),
    /// [`SlidingWindow`]
    SlidingWindow(SlidingWindow),
    /// [`TokenBucket`]
    TokenBucket(TokenBucket),
    /// [`LeakyBucket`]
    LeakyBucket(LeakyBucket),
}

/// State of one key under a [`Policy`]; its variant matches the policy's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// For [`Policy::FixedWindow`].
    FixedWindow(FixedWindowState),
    /// For [`Policy::SlidingLog`].
    SlidingLog(SlidingLogState),
    /// For [`Policy::SlidingWindow`].
    SlidingWindow(SlidingWindowState),
    /// For [`Policy::TokenBucket`] and [`Policy::LeakyBucket`].
    Gcra(GcraState),
}

/// Which algorithm a policy runs, without its parameters: what configuration names.
///
/// ```
/// use sluice_core::{AlgorithmKind, ALGORITHM_NAMES};
/// assert_eq!(AlgorithmKind::parse("sliding-window"), Some(AlgorithmKind::SlidingWindow));
/// assert_eq!(AlgorithmKind::SlidingWindow.name(), "sliding-window");
/// assert_eq!(AlgorithmKind::parse("sliding_window"), None);
/// assert!(AlgorithmKind::ALL.iter().map(|k| k.name()).eq(ALGORITHM_NAMES));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    /// `fixed-window`
    FixedWindow,
    /// `sliding-log`
    SlidingLog,
    /// `sliding-window` (the sliding window counter)
    SlidingWindow,
    /// `token-bucket`
    TokenBucket,
    /// `leaky-bucket`
    LeakyBucket,
}

impl AlgorithmKind {
    /// Every algorithm, in the order sluice lists them.
    pub const ALL: [AlgorithmKind; 5] = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyBucket,
    ];

    /// The configuration name.
    pub const fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed-window",
            AlgorithmKind::SlidingLog => "sliding-log",
            AlgorithmKind::SlidingWindow => "sliding-window",
            AlgorithmKind::TokenBucket => "token-bucket",
            AlgorithmKind::LeakyBucket => "leaky-bucket",
        }
    }

    /// The algorithm of a configuration name (exactly as [`AlgorithmKind::name`] spells it).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The algorithms' names as configuration spells them.
pub const ALGORITHM_NAMES: [&str; 5] = [
    AlgorithmKind::ALL[0].name(),
    AlgorithmKind::ALL[1].name(),
    AlgorithmKind::ALL[2].name(),
    AlgorithmKind::ALL[3].name(),
    AlgorithmKind::ALL[4].name(),
];

macro_rules! dispatch {
    ($self:ident, $state:ident, $p:ident, $s:ident => $body:expr) => {
        match ($self, $state) {
            (Policy::FixedWindow($p), State::FixedWindow($s)) => $body,
            (Policy::SlidingLog($p), State::SlidingLog($s)) => $body,
            (Policy::SlidingWindow($p), State::SlidingWindow($s)) => $body,
            (Policy::TokenBucket($p), State::Gcra($s)) => $body,
            (Policy::LeakyBucket($p), State::Gcra($s)) => $body,
            _ => panic!("state of another algorithm passed to {}", $self.name()),
        }
    };
}

impl Policy {
    /// The configuration name: `fixed-window`, `sliding-log`, `sliding-window`, `token-bucket`
    /// or `leaky-bucket`.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Which algorithm this is.
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            Policy::FixedWindow(_) => AlgorithmKind::FixedWindow,
            Policy::SlidingLog(_) => AlgorithmKind::SlidingLog,
            Policy::SlidingWindow(_) => AlgorithmKind::SlidingWindow,
            Policy::TokenBucket(_) => AlgorithmKind::TokenBucket,
            Policy::LeakyBucket(_) => AlgorithmKind::LeakyBucket,
        }
    }

    /// The state of a key never seen.
    pub fn fresh_state(&self) -> State {
        match self {
            Policy::FixedWindow(_) => State::FixedWindow(Default::default()),
            Policy::SlidingLog(_) => State::SlidingLog(Default::default()),
            Policy::SlidingWindow(_) => State::SlidingWindow(Default::default()),
            Policy::TokenBucket(_) | Policy::LeakyBucket(_) => State::Gcra(Default::default()),
        }
    }

    /// The limit's size (requests per window, or capacity).
    pub fn limit(&self) -> u64 {
        match self {
            Policy::FixedWindow(p) => p.limit(),
            Policy::SlidingLog(p) => p.limit(),
            Policy::SlidingWindow(p) => p.limit(),
            Policy::TokenBucket(p) => p.limit(),
            Policy::LeakyBucket(p) => p.limit(),
        }
    }

    /// The window length for window algorithms; for the buckets, the time a drained bucket
    /// takes to refill completely (capacity × interval).
    pub fn window(&self) -> Nanos {
        match self {
            Policy::FixedWindow(p) => p.window(),
            Policy::SlidingLog(p) => p.window(),
            Policy::SlidingWindow(p) => p.window(),
            Policy::TokenBucket(p) => p.capacity().saturating_mul(p.interval()),
            Policy::LeakyBucket(p) => p.capacity().saturating_mul(p.interval()),
        }
    }

    /// The calendar a fixed or sliding window follows, if it follows one.
    pub fn calendar_windows(&self) -> Option<crate::CalendarWindows> {
        match self {
            Policy::FixedWindow(p) => p.calendar_windows(),
            Policy::SlidingWindow(p) => p.calendar_windows(),
            _ => None,
        }
    }

    /// [`crate::check_cost`] against this policy's limit: a request costs from 1 to the limit.
    pub fn check_cost(&self, cost: u64) -> Result<(), CostError> {
        crate::check_cost(cost, self.limit())
    }

    /// [`crate::check_charge`] against this policy's limit: what a store may be asked to decide
    /// (0 asks without charging).
    pub fn check_charge(&self, cost: u64) -> Result<(), CostError> {
        crate::check_charge(cost, self.limit())
    }

    /// [`Algorithm::check`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm (a programming error, never input-driven).
    pub fn check(&self, state: &mut State, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        dispatch!(self, state, p, s => p.check(s, now, cost))
    }

    /// [`Algorithm::peek`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm.
    pub fn peek(&self, state: &State, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        dispatch!(self, state, p, s => p.peek(s, now, cost))
    }

    /// [`Algorithm::is_fresh`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm.
    pub fn is_fresh(&self, state: &State, now: Nanos) -> bool {
        dispatch!(self, state, p, s => p.is_fresh(s, now))
    }

    /// [`Algorithm::refund`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm.
    pub fn refund(&self, state: &mut State, charged_at: Nanos, cost: u64, now: Nanos) {
        dispatch!(self, state, p, s => p.refund(s, charged_at, cost, now))
    }

    /// [`Algorithm::refund_reads_now`] for whichever algorithm this is.
    pub fn refund_reads_now(&self) -> bool {
        match self {
            Policy::FixedWindow(p) => p.refund_reads_now(),
            Policy::SlidingLog(p) => p.refund_reads_now(),
            Policy::SlidingWindow(p) => p.refund_reads_now(),
            Policy::TokenBucket(p) => p.refund_reads_now(),
            Policy::LeakyBucket(p) => p.refund_reads_now(),
        }
    }

    /// [`Algorithm::overrun`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm.
    pub fn overrun(&self, state: &mut State, now: Nanos, cost: u64) {
        dispatch!(self, state, p, s => p.overrun(s, now, cost))
    }

    /// [`Algorithm::settle`] for whichever algorithm this is.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm.
    pub fn settle(&self, state: &mut State, charged_at: Nanos, reserved: u64, actual: u64, now: Nanos) {
        dispatch!(self, state, p, s => p.settle(s, charged_at, reserved, actual, now))
    }
}

macro_rules! from_algorithm {
    ($($t:ident),*) => {$(
        impl From<$t> for Policy {
            fn from(p: $t) -> Self { Policy::$t(p) }
        }
    )*};
}
from_algorithm!(FixedWindow, SlidingLog, SlidingWindow, TokenBucket, LeakyBucket);
