//! The most denied keys of the last minute, in bounded memory, for the status page.
//!
//! Each of [`SHARDS`] shards (picked by the key hash, so a key always lands in the same one)
//! keeps a Space-Saving summary of at most [`PER_SHARD`] keys for the current 30-second period
//! and one for the previous period. A key denied more than `1 / PER_SHARD` of its shard's
//! denials in a period is always held; a count may be high by at most the `overcount` reported
//! with it (the count of the key it replaced). Memory never grows with the number of keys.

use std::sync::{Arc, Mutex};

use sluice_core::{Clock, NANOS_PER_SEC, Nanos};
use sluice_store::KeyHash;

/// Shards, each under its own lock: denials of different keys rarely wait on each other.
pub const SHARDS: usize = 8;
/// Keys held per shard and period.
pub const PER_SHARD: usize = 16;
/// The length of a period; the summary covers the current and the previous one.
pub const PERIOD: Nanos = 30 * NANOS_PER_SEC;

/// One key's denials as the summary holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedKey {
    /// The keyed hash of the key (never the key).
    pub key: KeyHash,
    /// The policy that denied it last.
    pub policy: Box<str>,
    /// Denials counted (at most `overcount` too many).
    pub denials: u64,
    /// How many of `denials` may belong to keys this one replaced.
    pub overcount: u64,
}

/// A Space-Saving summary of one period.
#[derive(Debug, Default)]
struct Summary {
    /// At most [`PER_SHARD`] entries.
    entries: Vec<DeniedKey>,
}

impl Summary {
    fn add(&mut self, key: KeyHash, policy: &str) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.denials += 1;
            if *e.policy != *policy {
                e.policy = policy.into();
            }
            return;
        }
        let fresh = DeniedKey { key, policy: policy.into(), denials: 1, overcount: 0 };
        if self.entries.len() < PER_SHARD {
            self.entries.push(fresh);
            return;
        }
        // Full: the least denied entry gives its place, and its count, to the newcomer.
        if let Some(min) = self.entries.iter_mut().min_by_key(|e| e.denials) {
            let floor = min.denials;
            *min = DeniedKey { denials: floor + 1, overcount: floor, ..fresh };
        }
    }
}

/// One shard: the summaries of the current and previous periods.
#[derive(Debug, Default)]
struct Shard {
    /// The period `current` counts (time / [`PERIOD`]).
    period: u64,
    /// Denials of that period.
    current: Summary,
    /// Denials of the period before it.
    previous: Summary,
}

impl Shard {
    /// Moves the summaries on to `period`.
    fn advance(&mut self, period: u64) {
        if period == self.period {
            return;
        }
        self.previous = if period == self.period + 1 { std::mem::take(&mut self.current) } else { Summary::default() };
        self.current = Summary::default();
        self.period = period;
    }
}

/// The most denied keys of the last minute (between 30 and 60 seconds: the current and the
/// previous 30-second period).
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::{ManualClock, NANOS_PER_SEC};
/// use sluice_gateway::observe::TopDenied;
/// use sluice_store::KeyHash;
///
/// let clock = Arc::new(ManualClock::new(1_000 * NANOS_PER_SEC));
/// let top = TopDenied::new(clock.clone());
/// for _ in 0..3 { top.record(KeyHash([7; 16]), "per-ip"); }
/// top.record(KeyHash([9; 16]), "per-ip");
/// let now = top.top(10);
/// assert_eq!((now[0].key, now[0].denials), (KeyHash([7; 16]), 3));
/// clock.advance(61 * NANOS_PER_SEC);
/// assert!(top.top(10).is_empty(), "a minute later, forgotten");
/// ```
pub struct TopDenied {
    /// The shards, by key hash.
    shards: [Mutex<Shard>; SHARDS],
    /// Time for the periods (manual in tests).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for TopDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopDenied").finish_non_exhaustive()
    }
}

impl TopDenied {
    /// An empty summary whose periods follow `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { shards: Default::default(), clock }
    }

    fn period(&self) -> u64 {
        self.clock.now() / PERIOD
    }

    fn shard(&self, key: &KeyHash) -> std::sync::MutexGuard<'_, Shard> {
        let i = usize::from(key.0[0]) % SHARDS;
        // A shard is whole at every point: a panic elsewhere cannot leave it half-written.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one denial of `key` by `policy`.
    pub fn record(&self, key: KeyHash, policy: &str) {
        let period = self.period();
        let mut shard = self.shard(&key);
        shard.advance(period);
        shard.current.add(key, policy);
    }

    /// The `n` most denied keys of the last minute, most denied first (ties by key hash).
    pub fn top(&self, n: usize) -> Vec<DeniedKey> {
        let period = self.period();
        let mut all: Vec<DeniedKey> = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            if shard.period < period {
                shard.advance(period);
            }
            for e in shard.previous.entries.iter().chain(&shard.current.entries) {
                match all.iter_mut().find(|a| a.key == e.key) {
                    Some(a) => {
                        a.denials += e.denials;
                        a.overcount += e.overcount;
                        a.policy = e.policy.clone();
                    }
                    None => all.push(e.clone()),
                }
            }
        }
        all.sort_by(|a, b| b.denials.cmp(&a.denials).then(a.key.0.cmp(&b.key.0)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sluice_core::ManualClock;

    use super::*;

    fn key(n: u8, shard: u8) -> KeyHash {
        let mut k = [n; 16];
        k[0] = shard;
        KeyHash(k)
    }

    #[test]
    fn counts_are_exact_while_a_shard_holds_every_key() {
        let clock = Arc::new(ManualClock::new(0));
        let top = TopDenied::new(clock.clone());
        for i in 0..PER_SHARD as u8 {
            for _ in 0..=i {
                top.record(key(i, 0), "p");
            }
        }
        let got = top.top(3);
        assert_eq!(got.iter().map(|e| (e.denials, e.overcount)).collect::<Vec<_>>(), [(16, 0), (15, 0), (14, 0)]);
    }

    #[test]
    fn the_previous_period_counts_and_the_one_before_is_forgotten() {
        let clock = Arc::new(ManualClock::new(0));
        let top = TopDenied::new(clock.clone());
        top.record(key(1, 0), "p");
        clock.advance(PERIOD);
        top.record(key(1, 0), "q");
        assert_eq!(top.top(1)[0].denials, 2);
        assert_eq!(&*top.top(1)[0].policy, "q");
        clock.advance(PERIOD);
        assert_eq!(top.top(1)[0].denials, 1, "only the previous period remains");
        clock.advance(PERIOD);
        assert!(top.top(1).is_empty());
    }

    #[test]
    fn a_new_key_in_a_full_shard_takes_the_least_denied_place() {
        let clock = Arc::new(ManualClock::new(0));
        let top = TopDenied::new(clock);
        for i in 0..PER_SHARD as u8 {
            top.record(key(i, 3), "p");
            top.record(key(i, 3), "p");
        }
        top.record(key(200, 3), "p");
        let newcomer = top.top(PER_SHARD).into_iter().find(|e| e.key == key(200, 3)).expect("held");
        assert_eq!((newcomer.denials, newcomer.overcount), (3, 2));
        assert_eq!(top.top(usize::MAX).len(), PER_SHARD);
    }

    proptest! {
        /// Whatever the keys and times: memory stays bounded, nothing panics, and a key holding
        /// more than a `1 / PER_SHARD` share of its shard's denials in the window is reported,
        /// with a count no lower than its true one.
        #[test]
        fn bounded_and_heavy_keys_found(
            events in proptest::collection::vec((0u8..40, 0u8..4, 0u64..3), 1..400),
            heavy in 0u8..4,
        ) {
            let clock = Arc::new(ManualClock::new(0));
            let top = TopDenied::new(clock.clone());
            let mut window: Vec<KeyHash> = Vec::new();
            for (n, shard, step) in events {
                if step == 2 {
                    clock.advance(PERIOD / 3);
                }
                let k = if n % 3 == 0 { key(255, heavy) } else { key(n, shard) };
                top.record(k, "p");
                window.push(k);
            }
            let reported = top.top(usize::MAX);
            prop_assert!(reported.len() <= SHARDS * PER_SHARD * 2);
            for shard in &top.shards {
                let s = shard.lock().unwrap();
                prop_assert!(s.current.entries.len() <= PER_SHARD && s.previous.entries.len() <= PER_SHARD);
            }
            // With the clock never past the first period, the window is every event.
            if clock.now() < PERIOD {
                let heavy_key = key(255, heavy);
                let truth = window.iter().filter(|k| **k == heavy_key).count() as u64;
                let in_shard = window.iter().filter(|k| k.0[0] == heavy).count() as u64;
                if truth * PER_SHARD as u64 > in_shard {
                    let got = reported.iter().find(|e| e.key == heavy_key);
                    prop_assert!(got.is_some_and(|e| e.denials >= truth && e.denials - e.overcount <= truth));
                }
            }
        }
    }
}
