//! A latency histogram with lock-free buckets: one atomic add per observation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upper bounds of the buckets of decisions and store calls, in nanoseconds: 10 us to 1 s. A
/// memory-store decision takes microseconds; a Redis round trip, a fraction of a millisecond to
/// the store timeout.
const BOUNDS_NS: [u64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// Upper bounds of the buckets of upstream response times, in nanoseconds: 1 ms to 2 min. An
/// upstream answers in milliseconds to seconds; an LLM's first token may take a minute.
const UPSTREAM_BOUNDS_NS: [u64; 16] = [
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
];

#[derive(Debug)]
struct Inner {
    /// The buckets' upper bounds, ns.
    bounds: &'static [u64; 16],
    /// Observations per bucket (not cumulative); the last counts those above every bound.
    buckets: [AtomicU64; BOUNDS_NS.len() + 1],
    /// Sum of all observations, ns (exported in seconds as `_sum`).
    sum_ns: AtomicU64,
}

/// A histogram of durations in seconds, exported with the buckets of [`BOUNDS_NS`].
///
/// Clones share the same counts, so a handle resolved once (per route, per store) is cheap to
/// keep and to use. The exported `_count` is the sum of the buckets, so it always equals the
/// `+Inf` bucket.
///
/// ```
/// use sluice_gateway::observe::LatencyHistogram;
/// let h = LatencyHistogram::default();
/// h.observe_nanos(3_000);
/// h.observe_nanos(2_000_000_000);
/// assert_eq!(h.count(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    /// The counts, shared by every clone of the handle.
    inner: Arc<Inner>,
}

impl Default for LatencyHistogram {
    /// Buckets for decisions and store calls: 10 us to 1 s.
    fn default() -> Self {
        Self::with_bounds(&BOUNDS_NS)
    }
}

impl LatencyHistogram {
    fn with_bounds(bounds: &'static [u64; 16]) -> Self {
        Self { inner: Arc::new(Inner { bounds, buckets: Default::default(), sum_ns: AtomicU64::new(0) }) }
    }

    /// Buckets for an upstream's response times: 1 ms to 2 min.
    pub fn upstream() -> Self {
        Self::with_bounds(&UPSTREAM_BOUNDS_NS)
    }

    /// Records one duration of `ns` nanoseconds.
    pub fn observe_nanos(&self, ns: u64) {
        let i = self.inner.bounds.partition_point(|&b| b < ns);
        self.inner.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.inner.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.inner.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The upper bound, ns, of the bucket that holds the `q` quantile (`0.5`, `0.99`) of the
    /// observations so far: the quantile is at most that. `None` with no observation, or when
    /// it lies above every bound.
    ///
    /// ```
    /// use sluice_gateway::observe::LatencyHistogram;
    /// let h = LatencyHistogram::upstream();
    /// (0..98).for_each(|_| h.observe_nanos(3_000_000));
    /// (0..2).for_each(|_| h.observe_nanos(700_000_000));
    /// assert_eq!(h.quantile_bound(0.5), Some(5_000_000));
    /// assert_eq!(h.quantile_bound(0.99), Some(1_000_000_000));
    /// ```
    pub fn quantile_bound(&self, q: f64) -> Option<u64> {
        let counts: Vec<u64> = self.inner.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the first bucket whose running count reaches it.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return self.inner.bounds.get(i).copied();
            }
        }
        None
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut buckets = [(0.0, 0u64); BOUNDS_NS.len() + 1];
        for (i, slot) in buckets.iter_mut().enumerate() {
            let bound = self.inner.bounds.get(i).map_or(f64::MAX, |&ns| ns as f64 / 1e9);
            *slot = (bound, self.inner.buckets[i].load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        let sum = self.inner.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(
            sum,
            count,
            &buckets,
            None::<&std::collections::HashMap<usize, Exemplar<NoLabelSet, f64>>>,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_is_not_below_them() {
        let h = LatencyHistogram::default();
        h.observe_nanos(0);
        h.observe_nanos(10_000); // exactly on the first bound: le="1e-5"
        h.observe_nanos(10_001);
        h.observe_nanos(5_000_000_000); // above every bound: +Inf only
        let counts: Vec<u64> = h.inner.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[BOUNDS_NS.len()], 1);
        assert_eq!(h.count(), 4);
        assert_eq!(h.inner.sum_ns.load(Ordering::Relaxed), 5_000_020_001);
    }

    #[test]
    fn an_upstream_histogram_reaches_minutes_and_its_quantiles_are_bucket_bounds() {
        let h = LatencyHistogram::upstream();
        assert_eq!(h.quantile_bound(0.5), None, "no observation");
        h.observe_nanos(90_000_000_000); // a minute and a half: the 2 min bucket
        assert_eq!(h.quantile_bound(0.5), Some(120_000_000_000));
        h.observe_nanos(200_000_000_000); // above every bound
        assert_eq!(h.quantile_bound(1.0), None);
        assert_eq!(h.quantile_bound(0.5), Some(120_000_000_000));
        // The decision histogram's first bound is 10 us; the upstream's, 1 ms.
        let d = LatencyHistogram::default();
        d.observe_nanos(500_000);
        assert_eq!(d.quantile_bound(0.5), Some(500_000));
        let u = LatencyHistogram::upstream();
        u.observe_nanos(500_000);
        assert_eq!(u.quantile_bound(0.5), Some(1_000_000));
    }
}
