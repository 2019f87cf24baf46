//! The random source behind jitter, injectable so that tests are deterministic.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of uniformly distributed 64-bit values, shared by concurrent requests.
pub trait RandomSource: Send + Sync {
    /// The next value.
    fn next_u64(&self) -> u64;
}

/// Any `Fn() -> u64` is a random source (handy in tests: `|| u64::MAX`).
impl<F: Fn() -> u64 + Send + Sync> RandomSource for F {
    fn next_u64(&self) -> u64 {
        self()
    }
}

/// SplitMix64: a small, fast, lock-free generator; the same seed gives the same sequence.
///
/// Jitter only needs to spread clients apart, not to be unpredictable, so this is enough.
///
/// ```
/// use sluice_client::{RandomSource, SplitMix64};
/// let a = SplitMix64::seeded(7);
/// let b = SplitMix64::seeded(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Debug)]
pub struct SplitMix64 {
    state: AtomicU64,
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A generator that starts from `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }

    /// A generator seeded differently in every process and every call (from the process's
    /// randomly keyed hasher and the wall clock).
    pub fn from_entropy() -> Self {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        Self::seeded(RandomState::new().hash_one(nanos))
    }
}

impl RandomSource for SplitMix64 {
    fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(GOLDEN_GAMMA, Ordering::Relaxed).wrapping_add(GOLDEN_GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A value in `[0, max]` (both ends included) from one draw, without modulo bias beyond one part
/// in 2^64: the draw is scaled by `max + 1` and the high 64 bits kept.
pub(crate) fn uniform_inclusive(rng: &dyn RandomSource, max: u64) -> u64 {
    ((u128::from(rng.next_u64()) * (u128::from(max) + 1)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_covers_both_ends_and_never_exceeds() {
        assert_eq!(uniform_inclusive(&|| 0u64, 10), 0);
        assert_eq!(uniform_inclusive(&|| u64::MAX, 10), 10);
        assert_eq!(uniform_inclusive(&|| u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(uniform_inclusive(&|| u64::MAX, 0), 0);
        assert_eq!(uniform_inclusive(&|| 1u64 << 63, 10), 5);
    }

    #[test]
    fn splitmix_is_deterministic_per_seed_and_spreads() {
        let a = SplitMix64::seeded(42);
        let b = SplitMix64::seeded(42);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        // Roughly uniform: each of 4 buckets over [0, 3] gets a fair share of 4000 draws.
        let rng = SplitMix64::seeded(1);
        let mut counts = [0u32; 4];
        for _ in 0..4000 {
            counts[uniform_inclusive(&rng, 3) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }
}
