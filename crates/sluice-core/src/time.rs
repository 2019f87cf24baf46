//! Time as plain numbers, and the clocks that produce it outside the algorithms.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since an epoch (the Unix epoch for real clocks, t = 0 in the simulator).
pub type Nanos = u64;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: Nanos = 1_000_000_000;
/// Nanoseconds in one millisecond.
pub const NANOS_PER_MILLI: Nanos = 1_000_000;

/// Rounds a duration up to whole seconds (0 stays 0).
pub fn ceil_secs(n: Nanos) -> u64 {
    n.div_ceil(NANOS_PER_SEC)
}

/// Rounds a duration up to whole milliseconds (0 stays 0).
pub fn ceil_millis(n: Nanos) -> u64 {
    n.div_ceil(NANOS_PER_MILLI)
}

/// The wall clock, read once, in nanoseconds since the Unix epoch (0 before it, saturating
/// far after it): for what needs this machine's time once, not a clock to read per request.
pub fn wall_clock_now() -> Nanos {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A source of `now`. The algorithms never call it: callers read a clock and pass the time in.
pub trait Clock: Send + Sync {
    /// The current time in nanoseconds since the clock's epoch. Never goes backwards.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// A clock that moves only when told to: for tests and the simulator.
///
/// ```
/// use sluice_core::{Clock, ManualClock, NANOS_PER_SEC};
/// let clock = ManualClock::new(0);
/// clock.advance(3 * NANOS_PER_SEC);
/// assert_eq!(clock.now(), 3 * NANOS_PER_SEC);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `start` until moved.
    pub fn new(start: Nanos) -> Self {
        Self { now: AtomicU64::new(start) }
    }

    /// Moves the clock forward by `by` nanoseconds (saturating at `u64::MAX`).
    pub fn advance(&self, by: Nanos) {
        let _ = self.now.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(t.saturating_add(by)));
    }

    /// Sets the clock to `to`. Refuses to go backwards: an earlier `to` leaves the clock where it is.
    pub fn set(&self, to: Nanos) {
        self.now.fetch_max(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

/// The real clock: anchored to the wall clock once, then advanced by a monotonic counter, so it
/// reads Unix-epoch nanoseconds and never goes backwards even if the wall clock is stepped.
///
/// The counter is `quanta`'s (the CPU's invariant time-stamp counter where there is one,
/// calibrated against the OS monotonic clock; the OS clock elsewhere): a read costs a few
/// nanoseconds instead of a system call's tens, which matters when every decision reads it.
#[derive(Debug, Clone)]
pub struct SystemClock {
    /// Wall time minus the counter's reading at the anchor (wrapping: only the sum is meaningful).
    offset: Nanos,
    counter: quanta::Clock,
}

impl SystemClock {
    /// Anchors a new clock to the current wall-clock time.
    pub fn new() -> Self {
        let counter = quanta::Clock::new();
        let at_anchor = counter.delta_as_nanos(0, counter.raw());
        Self { offset: wall_clock_now().wrapping_sub(at_anchor), counter }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        // The counter is monotonic, so wall-at-anchor plus its progress never goes backwards.
        self.offset.wrapping_add(self.counter.delta_as_nanos(0, self.counter.raw()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_never_goes_backwards() {
        let c = ManualClock::new(10);
        c.set(5);
        assert_eq!(c.now(), 10);
        c.set(20);
        assert_eq!(c.now(), 20);
        c.advance(u64::MAX);
        assert_eq!(c.now(), u64::MAX);
    }

    #[test]
    fn system_clock_is_monotonic_and_wall_anchored() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        // Anchored to the Unix epoch: within a second of the wall clock.
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(a.abs_diff(wall) < NANOS_PER_SEC, "{a} vs {wall}");
        // And it moves: a busy wait of 2 ms shows at least 1 ms.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(2) {}
        assert!(c.now() - a >= NANOS_PER_SEC / 1000);
    }

    #[test]
    fn rounding_up() {
        assert_eq!(ceil_secs(0), 0);
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(NANOS_PER_SEC), 1);
        assert_eq!(ceil_secs(NANOS_PER_SEC + 1), 2);
        assert_eq!(ceil_millis(1_500_001), 2);
    }
}
