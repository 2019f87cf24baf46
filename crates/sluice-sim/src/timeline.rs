//! Admitted and denied counts over time in fixed memory, for plotting a run of any length:
//! counts per bin, the bins starting at one second and doubling (pairs merged) whenever the
//! run outgrows [`MAX_BINS`] of them.
//!
//! ```
//! use sluice_sim::Timeline;
//! use sluice_core::NANOS_PER_SEC;
//! let mut t = Timeline::new(&["per-ip"], 10 * NANOS_PER_SEC);
//! t.add(0, 10 * NANOS_PER_SEC, false);
//! t.add(0, 12 * NANOS_PER_SEC + 1, true);
//! assert_eq!(t.bin(), NANOS_PER_SEC);
//! assert_eq!(t.series()[0].admitted[0], 1);
//! assert_eq!(t.series()[0].denied[2], 1);
//! ```

use sluice_core::{NANOS_PER_SEC, Nanos};

/// The most bins a timeline keeps; beyond, bins double in length.
pub const MAX_BINS: usize = 4096;

/// The counts of one series (a policy, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The series' name.
    pub name: String,
    /// Admitted per bin.
    pub admitted: Vec<u64>,
    /// Denied per bin.
    pub denied: Vec<u64>,
}

/// Several series over one time axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The start of the first bin.
    origin: Nanos,
    /// The length of a bin.
    bin: Nanos,
    /// One per name, in order.
    series: Vec<Series>,
}

impl Timeline {
    /// Empty series named `names`, starting at `origin`.
    pub fn new(names: &[&str], origin: Nanos) -> Self {
        let series =
            names.iter().map(|n| Series { name: n.to_string(), admitted: Vec::new(), denied: Vec::new() }).collect();
        Self { origin, bin: NANOS_PER_SEC, series }
    }

    /// Counts one decision of series `index` at `at` (times before the origin count in the
    /// first bin).
    pub fn add(&mut self, index: usize, at: Nanos, denied: bool) {
        let mut b = (at.saturating_sub(self.origin) / self.bin) as usize;
        while b >= MAX_BINS {
            self.coarsen();
            b = (at.saturating_sub(self.origin) / self.bin) as usize;
        }
        let Some(s) = self.series.get_mut(index) else { return };
        if s.admitted.len() <= b {
            s.admitted.resize(b + 1, 0);
            s.denied.resize(b + 1, 0);
        }
        if denied { s.denied[b] += 1 } else { s.admitted[b] += 1 }
    }

    fn coarsen(&mut self) {
        self.bin = self.bin.saturating_mul(2);
        for s in &mut self.series {
            for v in [&mut s.admitted, &mut s.denied] {
                let merged: Vec<u64> = v.chunks(2).map(|c| c.iter().sum()).collect();
                *v = merged;
            }
        }
    }

    /// The start of the first bin.
    pub fn origin(&self) -> Nanos {
        self.origin
    }

    /// The length of a bin.
    pub fn bin(&self) -> Nanos {
        self.bin
    }

    /// The series, in the order named.
    pub fn series(&self) -> &[Series] {
        &self.series
    }

    /// Bins from the origin to the last one counted in any series.
    pub fn len(&self) -> usize {
        self.series.iter().map(|s| s.admitted.len()).max().unwrap_or(0)
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_merge_bins_and_keep_every_count() {
        let mut t = Timeline::new(&["a", "b"], 0);
        let n = 3 * MAX_BINS as u64;
        for s in 0..n {
            t.add((s % 2) as usize, s * NANOS_PER_SEC, s % 3 == 0);
        }
        assert_eq!(t.bin(), 4 * NANOS_PER_SEC);
        assert!(t.len() <= MAX_BINS);
        let total: u64 = t.series().iter().map(|s| s.admitted.iter().chain(&s.denied).sum::<u64>()).sum();
        assert_eq!(total, n);
        // Bin 0 holds seconds 0..4: a gets 0 and 2 (0 denied), b gets 1 and 3 (3 denied).
        assert_eq!((t.series()[0].admitted[0], t.series()[0].denied[0]), (1, 1));
        assert_eq!((t.series()[1].admitted[0], t.series()[1].denied[0]), (1, 1));
    }
}
