//! Python's `random.Random(seed)`, bit for bit: the generator of the seed article's experiment.
//!
//! The algorithm is CPython's (`Modules/_randommodule.c` and `Lib/random.py`), written anew
//! here from its description:
//!
//! - The core is the Mersenne Twister MT19937 of Matsumoto and Nishimura: 624 words of state,
//!   regenerated all at once every 624 outputs, each output tempered by shifts and masks.
//! - `Random(n)` for an int `n` takes `|n|`, splits it into 32-bit words from the least
//!   significant up (0 gives the single word 0), and seeds MT19937 with them through the
//!   reference `init_by_array`. [`PythonRandom::new`] does this for a `u64` seed (one word below
//!   2^32, two above); [`PythonRandom::from_words`] for any int, given as its words.
//! - `random()` takes two outputs `a` and `b`, keeps the top 27 bits of `a` and the top 26 of
//!   `b`, and returns `(a * 2^26 + b) / 2^53` in `[0, 1)`.
//! - `getrandbits(k)` is the top `k` bits of one output for `k <= 32`; above that, whole
//!   outputs fill 32-bit words from the least significant up, the last one shifted down to
//!   the bits that remain.
//! - `randrange(n)` (`_randbelow_with_getrandbits`) draws `getrandbits(n.bit_length())` until the
//!   value is below `n`.
//! - `expovariate(lambd)` is `-log(1 - random()) / lambd`.
//!
//! The logarithm is Rust's [`f64::ln`], which calls the platform's C library `log`, the same
//! function behind CPython's `math.log` (and `random`'s `_log`): on one platform (glibc on
//! Linux, say) the two agree bit for bit, which the tests check against the `python3` on the
//! machine. Another C library may round a rare logarithm differently in the last bit, and move
//! an arrival by a nanosecond; the xoshiro generator ([`crate::rng`]) is the one whose output
//! depends on no C library.
//!
//! ```
//! use sluice_sim::PythonRandom;
//! // python3 -c 'import random; r = random.Random(42); print(r.random().hex())'
//! let mut r = PythonRandom::new(42);
//! assert_eq!(r.random(), f64::from_bits(0x3fe4_762f_3072_00c5));
//! ```

/// State words.
const N: usize = 624;
/// The middle word of the recurrence.
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// CPython's `random.Random`, seeded with an int (see the module documentation).
#[derive(Clone)]
pub struct PythonRandom {
    /// The 624 words of MT19937.
    state: [u32; N],
    /// The next word to temper and hand out; `N` means "regenerate first".
    index: usize,
}

impl std::fmt::Debug for PythonRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonRandom").field("index", &self.index).finish_non_exhaustive()
    }
}

impl PythonRandom {
    /// `random.Random(seed)`.
    pub fn new(seed: u64) -> Self {
        let (low, high) = (seed as u32, (seed >> 32) as u32);
        if high == 0 { Self::from_words(&[low]) } else { Self::from_words(&[low, high]) }
    }

    /// `random.Random(n)` for the int `n` whose absolute value has these 32-bit words, least
    /// significant first (`2**32 + 5` is `[5, 1]`). Leading zero words are ignored, as Python
    /// never has them; no words at all is 0.
    pub fn from_words(words: &[u32]) -> Self {
        let used = words.iter().rposition(|&w| w != 0).map_or(1, |i| i + 1);
        let key = if words.is_empty() { &[0][..] } else { &words[..used] };
        let mut r = Self { state: [0; N], index: N };
        r.init_by_array(key);
        r
    }

    /// The reference `init_genrand`: the state from one word.
    fn init_genrand(&mut self, seed: u32) {
        self.state[0] = seed;
        for i in 1..N {
            let prev = self.state[i - 1];
            self.state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        self.index = N;
    }

    /// The reference `init_by_array`: the state from a key of any length.
    fn init_by_array(&mut self, key: &[u32]) {
        self.init_genrand(19_650_218);
        let mt = &mut self.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        // The most significant bit set: the state is never all zero.
        mt[0] = 0x8000_0000;
    }

    /// Regenerates the 624 words.
    fn twist(&mut self) {
        let mt = &mut self.state;
        let mix = |upper: u32, lower: u32, far: u32| {
            let y = (upper & UPPER_MASK) | (lower & LOWER_MASK);
            far ^ (y >> 1) ^ if y & 1 == 1 { MATRIX_A } else { 0 }
        };
        for k in 0..N {
            mt[k] = mix(mt[k], mt[(k + 1) % N], mt[(k + M) % N]);
        }
        self.index = 0;
    }

    /// The next 32-bit output (the reference `genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: a uniform number in `[0, 1)` with 53 random bits.
    pub fn random(&mut self) -> f64 {
        let a = self.next_u32() >> 5;
        let b = self.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `getrandbits(k)` for `k <= 64` (larger `k` is clamped to 64); 0 for `k == 0`.
    pub fn getrandbits(&mut self, k: u32) -> u64 {
        match k.min(64) {
            0 => 0,
            k @ 1..=32 => u64::from(self.next_u32() >> (32 - k)),
            k => {
                let low = u64::from(self.next_u32());
                let high = u64::from(self.next_u32() >> (64 - k));
                high << 32 | low
            }
        }
    }

    /// `randrange(n)`: a uniform integer in `[0, n)`, by rejection; 0 when `n` is 0 (where
    /// Python raises).
    pub fn randbelow(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let k = u64::BITS - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `expovariate(lambd)`: an exponential variate with rate `lambd` (mean `1 / lambd`).
    pub fn expovariate(&mut self, lambd: f64) -> f64 {
        -(1.0 - self.random()).ln() / lambd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twist_matches_the_reference_recurrence_written_out() {
        // The three loops of the reference, against the one modular loop above.
        let mut r = PythonRandom::new(5);
        let mut mt = r.state;
        let step = |a: u32, b: u32, c: u32| {
            let y = (a & UPPER_MASK) | (b & LOWER_MASK);
            c ^ (y >> 1) ^ if y & 1 == 1 { MATRIX_A } else { 0 }
        };
        for kk in 0..N - M {
            mt[kk] = step(mt[kk], mt[kk + 1], mt[kk + M]);
        }
        for kk in N - M..N - 1 {
            mt[kk] = step(mt[kk], mt[kk + 1], mt[kk + M - N]);
        }
        mt[N - 1] = step(mt[N - 1], mt[0], mt[M - 1]);
        r.twist();
        assert_eq!(r.state, mt);
    }

    #[test]
    fn reference_outputs_of_init_by_array() {
        // The first outputs of mt19937ar.c's own test, key {0x123, 0x234, 0x345, 0x456}.
        let mut r = PythonRandom::from_words(&[0x123, 0x234, 0x345, 0x456]);
        let got: Vec<u32> = (0..5).map(|_| r.next_u32()).collect();
        assert_eq!(got, [1_067_595_299, 955_945_823, 477_289_528, 4_107_218_783, 4_228_976_476]);
    }

    #[test]
    fn seeds_split_into_words_as_python_does() {
        let draw = |mut r: PythonRandom| r.next_u32();
        assert_eq!(draw(PythonRandom::new(0)), draw(PythonRandom::from_words(&[])));
        assert_eq!(draw(PythonRandom::new(0)), draw(PythonRandom::from_words(&[0, 0])));
        assert_eq!(draw(PythonRandom::new((1 << 32) + 5)), draw(PythonRandom::from_words(&[5, 1])));
        assert_eq!(draw(PythonRandom::new(7)), draw(PythonRandom::from_words(&[7, 0, 0])));
        assert_ne!(draw(PythonRandom::new(1 << 32)), draw(PythonRandom::new(0)));
    }

    #[test]
    fn hard_coded_vectors_from_cpython() {
        // python3 -c 'import random; r = random.Random(42); print([r.random().hex() for _ in range(3)])'
        let mut r = PythonRandom::new(42);
        let got: Vec<u64> = (0..3).map(|_| r.random().to_bits()).collect();
        assert_eq!(got, [0x3fe4_762f_3072_00c5, 0x3f99_9c6b_5eeb_2060, 0x3fd1_9a14_91f5_89dc]);
        // random.Random(0).getrandbits(32), three times.
        let mut r = PythonRandom::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.getrandbits(32)).collect();
        assert_eq!(got, [3_626_764_237, 1_654_615_998, 3_255_389_356]);
        // random.Random(42).expovariate(6.0): the article's first gap, in seconds.
        assert_eq!(PythonRandom::new(42).expovariate(6.0), 0.1700100478791335);
    }

    #[test]
    fn bounded_draws_stay_below_the_bound() {
        let mut r = PythonRandom::new(1);
        for n in [1u64, 2, 3, 7, 1 << 31, (1 << 32) + 1, u64::MAX] {
            for _ in 0..200 {
                assert!(r.randbelow(n) < n);
            }
        }
        assert_eq!(r.randbelow(0), 0);
        assert_eq!(r.getrandbits(0), 0);
        assert!(r.getrandbits(40) < 1 << 40);
    }
}
